// core/dtype.h's f16 (IEEE binary16): f32_to_f16 against numpy's float32 -> float16 conversion
// (tests/fixtures/dtype/f16_conversions.json, written by gen_f16.py beside it) and against bit
// patterns worked out by hand; f16_to_f32 against numpy's widening; and the CPU tensor's
// conversions (kernels' cast and normal_fill in f16: tests/kernels/test_f16_ops.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/tensor.h"
#include "test_util.h"

namespace seqpar {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

uint16_t to_f16_bits(float f) { return f32_to_f16(f).bits; }

TEST(F16, TraitsTable) {
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_name(DType::kF16), "f16");
  EXPECT_EQ(dtype_traits(DType::kF16).safetensors_name, "F16");
  EXPECT_TRUE(dtype_traits(DType::kF16).is_float);
  EXPECT_EQ(dtype_traits(DType::kF16).dtype, DType::kF16);  // the table is indexed by the enum's value
  EXPECT_EQ((dtype_of<f16>::value), DType::kF16);
}

// Bit patterns worked out by hand (sign | 5-bit exponent, bias 15 | 10-bit mantissa).
TEST(F16, HandCheckedBitPatterns) {
  EXPECT_EQ(to_f16_bits(0.0f), 0x0000);
  EXPECT_EQ(to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(to_f16_bits(-2.0f), 0xc000);
  EXPECT_EQ(to_f16_bits(0.5f), 0x3800);
  EXPECT_EQ(to_f16_bits(65504.0f), 0x7bff);  // the largest finite
  // Round to nearest, ties to even. 1 + 2^-11 is half-way between 1 (mantissa 0, even) and
  // 1 + 2^-10: to 1. 1 + 3 * 2^-11 is half-way between 1 + 2^-10 (odd) and 1 + 2^-9: to 1 + 2^-9.
  EXPECT_EQ(to_f16_bits(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(to_f16_bits(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(to_f16_bits(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3c01);  // just above the tie: up
  // Overflow: 65519.996 rounds down to 65504; 65520 is the tie between 65504 (odd) and 2^16: inf.
  EXPECT_EQ(to_f16_bits(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(to_f16_bits(65520.0f), 0x7c00);
  EXPECT_EQ(to_f16_bits(-1e6f), 0xfc00);
  EXPECT_EQ(to_f16_bits(INFINITY), 0x7c00);
  EXPECT_EQ(to_f16_bits(-INFINITY), 0xfc00);
  // Subnormals: m * 2^-24. 2^-14 is the smallest normal (0x0400); 2^-24 the smallest subnormal.
  EXPECT_EQ(to_f16_bits(0x1p-14f), 0x0400);
  EXPECT_EQ(to_f16_bits(0x1p-15f), 0x0200);
  EXPECT_EQ(to_f16_bits(0x1p-24f), 0x0001);
  EXPECT_EQ(to_f16_bits(3 * 0x1p-24f), 0x0003);
  EXPECT_EQ(to_f16_bits(1023 * 0x1p-24f), 0x03ff);
  // 2^-25 is the tie between 0 (even) and 2^-24: to 0; anything above it goes to 2^-24.
  EXPECT_EQ(to_f16_bits(0x1p-25f), 0x0000);
  EXPECT_EQ(to_f16_bits(-0x1p-25f), 0x8000);
  EXPECT_EQ(to_f16_bits(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  // 1.5 * 2^-24 ties between 1 (odd) and 2: to 2; 2.5 * 2^-24 between 2 (even) and 3: to 2.
  EXPECT_EQ(to_f16_bits(1.5f * 0x1p-24f), 0x0002);
  EXPECT_EQ(to_f16_bits(2.5f * 0x1p-24f), 0x0002);
  // 1023.5 * 2^-24 ties between the largest subnormal (odd) and the smallest normal: to 0x0400.
  EXPECT_EQ(to_f16_bits(1023.5f * 0x1p-24f), 0x0400);
  EXPECT_EQ(to_f16_bits(1e-30f), 0x0000);
  EXPECT_EQ(to_f16_bits(from_bits(0x00000001)), 0x0000);  // an f32 subnormal
  // NaN stays NaN (quiet), whatever its payload, with its sign.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fa12345u, 0xffc00000u}) {
    const uint16_t h = to_f16_bits(from_bits(nan));
    EXPECT_EQ(h & 0x7c00, 0x7c00) << std::hex << nan;
    EXPECT_NE(h & 0x03ff, 0) << std::hex << nan;
    EXPECT_EQ(h & 0x8000, (nan >> 16) & 0x8000) << std::hex << nan;
  }
  // Widening.
  EXPECT_EQ(f16_to_f32(f16{0x7bff}), 65504.0f);
  EXPECT_EQ(f16_to_f32(f16{0x0001}), 0x1p-24f);
  EXPECT_EQ(f16_to_f32(f16{0x03ff}), 1023 * 0x1p-24f);
  EXPECT_EQ(f16_to_f32(f16{0x8400}), -0x1p-14f);
  EXPECT_EQ(f16_to_f32(f16{0x7c00}), INFINITY);
  EXPECT_EQ(f16_to_f32(f16{0xfc00}), -INFINITY);
  EXPECT_TRUE(std::isnan(f16_to_f32(f16{0x7e00})));
  EXPECT_TRUE(std::isnan(f16_to_f32(f16{0x7c01})));  // a signalling NaN widens to a NaN
  EXPECT_TRUE(std::signbit(f16_to_f32(f16{0x8000})));
}

TEST(F16, MatchesNumpyOnEdgesAndRandomPatterns) {
  std::ifstream in(testing::source_path("tests/fixtures/dtype/f16_conversions.json"));
  ASSERT_TRUE(in.good()) << "tests/fixtures/dtype/f16_conversions.json (run tests/fixtures/dtype/gen_f16.py)";
  const nlohmann::json fx = nlohmann::json::parse(in);
  int checked = 0, subnormal = 0, overflow = 0;
  for (const nlohmann::json& c : fx["to_f16"]) {
    const uint32_t x = c[0].get<uint32_t>();
    const uint16_t got = to_f16_bits(from_bits(x));
    if (c[1].is_null()) {  // numpy's NaN payloads are platform-defined: check the class
      EXPECT_TRUE(std::isnan(f16_to_f32(f16{got}))) << std::hex << x;
      continue;
    }
    const uint16_t want = c[1].get<uint16_t>();
    ASSERT_EQ(got, want) << "f32 bits 0x" << std::hex << x << " (" << from_bits(x) << ")";
    subnormal += (want & 0x7c00) == 0 && (want & 0x3ff) != 0;
    overflow += (want & 0x7fff) == 0x7c00 && (x & 0x7fffffff) != 0x7f800000;
    ++checked;
  }
  EXPECT_GT(checked, 5000);
  EXPECT_GT(subnormal, 100);  // the fixture covers the ranges it should
  EXPECT_GT(overflow, 100);
  for (const nlohmann::json& c : fx["to_f32"]) {
    const uint16_t h = c[0].get<uint16_t>();
    ASSERT_EQ(bits_of(f16_to_f32(f16{h})), c[1].get<uint32_t>()) << "f16 bits 0x" << std::hex << h;
  }
}

// Every finite f16 survives f16 -> f32 -> f16 unchanged (f32 holds every f16 exactly).
TEST(F16, RoundTripOfEveryFiniteValueIsExact) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    ASSERT_EQ(to_f16_bits(f16_to_f32(f16{static_cast<uint16_t>(h)})), h) << std::hex << h;
  }
}

TEST(F16, TensorConversions) {
  const std::vector<float> v = {1.0f, 1.0f + 0x1p-11f, 65520.0f, 0x1p-25f, -3.0f, 1e-5f};
  Tensor t = Tensor::from_vector<float>({6}, v);
  Tensor h = t.to_dtype(DType::kF16);
  EXPECT_EQ(h.dtype(), DType::kF16);
  const std::vector<float> back = h.to_f32_vector();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(back[i], f16_to_f32(f32_to_f16(v[i]))) << i;
  EXPECT_EQ(back[2], INFINITY);
  EXPECT_EQ(back[3], 0.0f);
  EXPECT_EQ(h.to_dtype(DType::kF32).to_f32_vector(), back);
}

}  // namespace
}  // namespace seqpar
