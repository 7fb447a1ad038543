// Element types: f32, bf16, i32, i64, with a constexpr traits table.
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

enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kI32 = 2, kI64 = 3 };

struct DTypeTraits {
  DType dtype;
  std::string_view name;             // seqpar's name: "f32"
  std::string_view safetensors_name;  // "F32", "BF16", "I32", "I64"
  size_t size;                       // bytes per element
  bool is_float;
};

inline constexpr DTypeTraits kDTypeTraits[] = {
    {DType::kF32, "f32", "F32", 4, true},
    {DType::kBF16, "bf16", "BF16", 2, true},
    {DType::kI32, "i32", "I32", 4, false},
    {DType::kI64, "i64", "I64", 8, false},
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
struct dtype_of<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::kI64;
};

}  // namespace seqpar
