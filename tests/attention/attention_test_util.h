// Helpers shared by the attention tests: row gathers (the key splits and token shuffles are
// built from them), metadata from vectors, and a naive attention that materialises the whole
// masked score matrix, written independently of src/attention/cpu.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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

// Naive attention, in double: for each head the full [Tq, Tk] masked score matrix, then a
// row softmax. out [Tq, H, D], lse [Tq, H] (-inf and out 0 for a row that sees nothing).
struct NaiveAttention {
  std::vector<double> out, lse;
};

inline NaiveAttention naive_attention(const std::vector<double>& q, const std::vector<double>& k,
                                      const std::vector<double>& v, const TokenMeta& q_meta, const TokenMeta& k_meta,
                                      int64_t H, int64_t Hkv, int64_t D, bool causal, double scale) {
  const double ninf = -std::numeric_limits<double>::infinity();
  const int64_t Tq = q_meta.size(), Tk = k_meta.size();
  const std::vector<int32_t> sq = i32_vector(q_meta.seg), pq = i32_vector(q_meta.pos);
  const std::vector<int32_t> sk = i32_vector(k_meta.seg), pk = i32_vector(k_meta.pos);
  NaiveAttention r{std::vector<double>(static_cast<size_t>(Tq * H * D), 0.0),
                   std::vector<double>(static_cast<size_t>(Tq * H), ninf)};
  for (int64_t h = 0; h < H; ++h) {
    const int64_t hk = h * Hkv / H;  // = h / (H / Hkv)
    std::vector<double> S(static_cast<size_t>(Tq * Tk), ninf);
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = 0; j < Tk; ++j) {
        if (sq[i] != sk[j] || (causal && pk[j] > pq[i])) continue;
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += q[(i * H + h) * D + d] * k[(j * Hkv + hk) * D + d];
        S[i * Tk + j] = scale * s;
      }
    for (int64_t i = 0; i < Tq; ++i) {
      double m = ninf;
      for (int64_t j = 0; j < Tk; ++j) m = std::max(m, S[i * Tk + j]);
      if (m == ninf) continue;
      double z = 0;
      for (int64_t j = 0; j < Tk; ++j) z += std::exp(S[i * Tk + j] - m);
      for (int64_t j = 0; j < Tk; ++j) {
        const double p = std::exp(S[i * Tk + j] - m) / z;
        for (int64_t d = 0; d < D; ++d) r.out[(i * H + h) * D + d] += p * v[(j * Hkv + hk) * D + d];
      }
      r.lse[i * H + h] = m + std::log(z);
    }
  }
  return r;
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
