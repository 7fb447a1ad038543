// Helpers for the comm tests: per-rank inputs of every dtype and serial references.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "comm/communicator.h"
#include "test_util.h"

namespace seqpar::testing {

// Deterministic input of n elements for (seed): floats in [-1, 1), bf16 rounded from those,
// integers spread wide enough that a sum of 8 still fits (i32 in [-1e8, 1e8], i64 ~ 2^50).
inline Tensor comm_input(DType dtype, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  switch (dtype) {
    case DType::kF32: return random_tensor({n}, seed);
    case DType::kBF16: return random_tensor({n}, seed).to_dtype(DType::kBF16);
    case DType::kF16: return random_tensor({n}, seed).to_dtype(DType::kF16);
    case DType::kI32: {
      std::uniform_int_distribution<int32_t> d(-100000000, 100000000);
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (auto& x : v) x = d(rng);
      return Tensor::from_vector<int32_t>({n}, v);
    }
    case DType::kI64: {
      std::uniform_int_distribution<int64_t> d(-(int64_t{1} << 50), int64_t{1} << 50);
      std::vector<int64_t> v(static_cast<size_t>(n));
      for (auto& x : v) x = d(rng);
      return Tensor::from_vector<int64_t>({n}, v);
    }
  }
  return {};
}

// The serial meaning of a reduction: element by element, ranks in order 0, 1, 2, ...; floats
// accumulated in f32 (bf16 and f16 widened, rounded once at the end), integers exactly.
inline Tensor serial_reduce(const std::vector<Tensor>& ins, ReduceOp op, int64_t begin, int64_t end) {
  const DType dtype = ins[0].dtype();
  Tensor out = Tensor::empty({end - begin}, dtype);
  for (int64_t i = begin; i < end; ++i) {
    if (dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16) {
      auto at = [&](const Tensor& t) {
        return dtype == DType::kF32    ? t.data<float>()[i]
               : dtype == DType::kBF16 ? bf16_to_f32(t.data<bf16>()[i])
                                       : f16_to_f32(t.data<f16>()[i]);
      };
      float acc = at(ins[0]);
      for (size_t q = 1; q < ins.size(); ++q) acc = op == ReduceOp::kSum ? acc + at(ins[q]) : std::max(acc, at(ins[q]));
      if (dtype == DType::kF32)
        out.data<float>()[i - begin] = acc;
      else if (dtype == DType::kBF16)
        out.data<bf16>()[i - begin] = f32_to_bf16(acc);
      else
        out.data<f16>()[i - begin] = f32_to_f16(acc);
    } else {
      auto at = [&](const Tensor& t) {
        return dtype == DType::kI32 ? int64_t{t.data<int32_t>()[i]} : t.data<int64_t>()[i];
      };
      int64_t acc = at(ins[0]);
      for (size_t q = 1; q < ins.size(); ++q) acc = op == ReduceOp::kSum ? acc + at(ins[q]) : std::max(acc, at(ins[q]));
      if (dtype == DType::kI32)
        out.data<int32_t>()[i - begin] = static_cast<int32_t>(acc);
      else
        out.data<int64_t>()[i - begin] = acc;
    }
  }
  return out;
}

// True when both tensors hold exactly the same bytes (and dtype and element count).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.numel() != b.numel()) return false;
  Tensor ha = a.to(Device::cpu()), hb = b.to(Device::cpu());
  return a.numel() == 0 || std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) == 0;
}

// Runs fn on `world` local ranks, expects it to fail, returns the error's message.
inline std::string local_run_error(int world, const std::function<void(Communicator&)>& fn,
                                   const LocalOptions& options = {}) {
  try {
    run_local_ranks(world, fn, options);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "run_local_ranks did not throw";
  return {};
}

}  // namespace seqpar::testing
