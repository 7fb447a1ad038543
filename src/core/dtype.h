// Element types: f32, bf16, i32, i64, f16, with a constexpr traits table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__CUDACC__)
#define SEQPAR_HOST_DEVICE __host__ __device__
#else
#define SEQPAR_HOST_DEVICE
#endif

namespace seqpar {

// The values index kDTypeTraits (kF16 came last, so the others keep theirs).
enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kI32 = 2, kI64 = 3, kF16 = 4 };

struct DTypeTraits {
  DType dtype;
  std::string_view name;             // seqpar's name: "f32"
  std::string_view safetensors_name;  // "F32", "BF16", "I32", "I64", "F16"
  size_t size;                       // bytes per element
  bool is_float;
};

inline constexpr DTypeTraits kDTypeTraits[] = {
    {DType::kF32, "f32", "F32", 4, true},
    {DType::kBF16, "bf16", "BF16", 2, true},
    {DType::kI32, "i32", "I32", 4, false},
    {DType::kI64, "i64", "I64", 8, false},
    {DType::kF16, "f16", "F16", 2, true},
};

constexpr const DTypeTraits& dtype_traits(DType d) { return kDTypeTraits[static_cast<int>(d)]; }
constexpr size_t dtype_size(DType d) { return dtype_traits(d).size; }
constexpr std::string_view dtype_name(DType d) { return dtype_traits(d).name; }

// bfloat16 storage: the upper 16 bits of an IEEE f32. Conversion rounds to nearest even.
struct bf16 {
  uint16_t bits;
};

SEQPAR_HOST_DEVICE inline float bf16_to_f32(bf16 x) {
  uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
#if defined(__CUDA_ARCH__)
  f = __uint_as_float(u);
#else
  std::memcpy(&f, &u, 4);
#endif
  return f;
}

SEQPAR_HOST_DEVICE inline bf16 f32_to_bf16(float f) {
  uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(f);
#else
  std::memcpy(&u, &f, 4);
#endif
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

// IEEE 754 binary16 storage (fp16): 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits; the
// largest finite value is 65504, the smallest normal 2^-14, the smallest subnormal 2^-24.
struct f16 {
  uint16_t bits;
};

SEQPAR_HOST_DEVICE inline float f16_to_f32(f16 x) {
  const uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000u) << 16;
  uint32_t e = (x.bits >> 10) & 0x1fu, m = x.bits & 0x3ffu, u;
  if (e == 0x1f) {
    u = sign | 0x7f800000u | (m << 13);  // inf, or NaN with its payload
  } else if (e == 0) {
    if (m == 0) {
      u = sign;  // +-0
    } else {     // subnormal m * 2^-24: normalised into an f32 (always exact)
      e = 113;   // f32's biased exponent of 2^-14
      while (!(m & 0x400u)) {
        m <<= 1;
        --e;
      }
      u = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
  } else {
    u = sign | ((e + 112) << 23) | (m << 13);  // rebias 15 -> 127
  }
  float f;
#if defined(__CUDA_ARCH__)
  f = __uint_as_float(u);
#else
  std::memcpy(&f, &u, 4);
#endif
  return f;
}

// Round to nearest, ties to even, as the hardware's cvt.rn.f16.f32: |f| >= 65520 (the midpoint
// between 65504 and 2^16) becomes inf, values below 2^-14 become subnormals (|f| <= 2^-25: zero),
// NaN stays NaN (quiet, its sign and top payload bits kept).
SEQPAR_HOST_DEVICE inline f16 f32_to_f16(float f) {
  uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(f);
#else
  std::memcpy(&u, &f, 4);
#endif
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return f16{static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu))};  // NaN
  if (a >= 0x477ff000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520 (and inf): inf
  if (a >= 0x38800000u) {  // normal: rebias the exponent, round the 13 dropped mantissa bits
    uint32_t r = a - 0x38000000u;
    r += 0x0fffu + ((r >> 13) & 1u);
    return f16{static_cast<uint16_t>(sign | (r >> 13))};
  }
  if (a <= 0x33000000u) return f16{static_cast<uint16_t>(sign)};  // <= 2^-25: ties to the even zero
  // Subnormal: m = round(|f| * 2^24) from the 24-bit significand; m = 0x400 is the smallest normal.
  const uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14 .. 24
  uint32_t m = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (m & 1u))) ++m;
  return f16{static_cast<uint16_t>(sign | m)};
}

// C++ element type <-> DType.
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct dtype_of<f16> {
  static constexpr DType value = DType::kF16;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::kI64;
};

}  // namespace seqpar
