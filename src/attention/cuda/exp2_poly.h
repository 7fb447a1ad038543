// 2^x on the FMA pipe instead of the special-function unit (FlashAttention-4's software exponential), for the
// softmax of the sm_90 attention kernels. At head dim 64 one exponential per score costs about what the two GEMMs
// do (16 MUFU.EX2 against ~4096 MMA flops per clock and SM, 256 flops per score), so a share of the scores'
// exponentials computed here runs beside the MUFU's instead of after them.
//
// x = n + f with n = round(x) (the 1.5 * 2^23 rounding trick) and f in [-0.5, 0.5]; 2^f by a degree-3
// polynomial fitted for relative error (at most 7.6e-5 in f32, far under a bf16 P's rounding, 2^-9); n added
// to the result's exponent field. Below -125 the result is exactly 0 (masked scores are -inf); NaN stays NaN.
// Header-only and host-callable, so the CPU tests check it (tests/attention/test_exp2_poly.cpp).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SEQPAR_HD __host__ __device__ __forceinline__
#else
#define SEQPAR_HD inline
#endif

namespace seqpar::cuda_attn {

// The bits of v as a To of the same size (memcpy: a register move on the device, std::bit_cast's rule).
template <typename To, typename From>
SEQPAR_HD To exp2_poly_bit_cast(From v) {
  static_assert(sizeof(To) == sizeof(From), "the same size");
  To r;
  std::memcpy(&r, &v, sizeof(To));
  return r;
}

// About 10 issue slots a value (3 FADD, 3 FFMA, a shift and an add, the final compare and select) against MUFU.EX2's
// one: worth it for the share of values that relieves the MUFU while the issue slots have room. No clamp is needed
// before the rounding: whatever it makes of x < -125 (-inf: NaN) the final select replaces, and it is what makes a
// masked score exactly 0 (a row that sees nothing must sum to 0).
SEQPAR_HD float exp2_poly(float x) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: x + kRound holds round(x) in its low mantissa bits
  const float t = x + kRound;
  const float f = x - (t - kRound);
  const float p = fmaf(fmaf(fmaf(0.05517052f, f, 0.24260831f), f, 0.69326091f), f, 0.99992824f);
  // t's low 9 bits are round(x) (two's complement, above the 0x400000 of the 1.5): shifted into the exponent field.
  const float r = exp2_poly_bit_cast<float>(exp2_poly_bit_cast<uint32_t>(p) + (exp2_poly_bit_cast<uint32_t>(t) << 23));
  return x < -125.f ? 0.f : r;
}

}  // namespace seqpar::cuda_attn

#undef SEQPAR_HD
