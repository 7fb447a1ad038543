// Helpers shared by the attention tests: row gathers (the key splits and token shuffles are
// built from them), metadata from vectors, the max relative difference. The f64 reference
// attention is the op harness's (tests/ops/op_harness.h), one for every attention test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "attention/attention.h"
#include "core/tensor.h"

namespace seqpar::testing {

inline TokenMeta make_meta(const std::vector<int32_t>& seg, const std::vector<int32_t>& pos) {
  const int64_t n = static_cast<int64_t>(seg.size());
  return {Tensor::from_vector<int32_t>({n}, seg), Tensor::from_vector<int32_t>({n}, pos)};
}

inline std::vector<int32_t> i32_vector(const Tensor& t) {
  const int32_t* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

inline std::vector<double> f64_vector(const Tensor& t) {
  std::vector<float> f = t.to_f32_vector();
  return std::vector<double>(f.begin(), f.end());
}

// New host tensor whose row r is t's row idx[r] (rows along dim 0, any dtype).
inline Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& idx) {
  Shape shape = t.shape();
  shape[0] = static_cast<int64_t>(idx.size());
  Tensor out = Tensor::empty(shape, t.dtype());
  const size_t row_bytes = t.dim(0) ? t.nbytes() / static_cast<size_t>(t.dim(0)) : 0;
  for (size_t r = 0; r < idx.size(); ++r) {
    std::memcpy(static_cast<char*>(out.raw()) + r * row_bytes,
                static_cast<const char*>(t.raw()) + static_cast<size_t>(idx[r]) * row_bytes, row_bytes);
  }
  return out;
}

inline TokenMeta gather_meta(const TokenMeta& m, const std::vector<int64_t>& idx) {
  return {gather_rows(m.seg, idx), gather_rows(m.pos, idx)};
}

inline std::vector<int64_t> random_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(p.begin(), p.end(), rng);
  return p;
}

// max |a - b| / max(1, max |b|) over finite entries; infinity when the -inf patterns differ
// or a NaN shows up.
inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return INFINITY;
      continue;
    }
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / den;
}

}  // namespace seqpar::testing
