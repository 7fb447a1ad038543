// The CPU kernels' f16 storage: cast between f32, bf16 and f16 (through f32, rounded once) and
// normal_fill in f16 (the f32 draw rounded), against core/dtype.h's conversions (which
// tests/core/test_dtype.cpp checks against numpy).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace seqpar {
namespace {

TEST(F16Ops, CastAndNormalFill) {
  const std::vector<float> v = {1.0f, 1.0f + 0x1p-11f, 65520.0f, 0x1p-25f, -3.0f, 1e-5f};
  Tensor t = Tensor::from_vector<float>({6}, v);
  Tensor h = t.to_dtype(DType::kF16);
  EXPECT_EQ(h.dtype(), DType::kF16);
  const std::vector<float> back = h.to_f32_vector();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(back[i], f16_to_f32(f32_to_f16(v[i]))) << i;
  EXPECT_EQ(back[2], INFINITY);
  // cast: f32 -> f16 rounds as f32_to_f16; f16 -> bf16 goes through f32 and rounds once.
  Tensor c = Tensor::empty({6}, DType::kF16);
  cast(c, t);
  EXPECT_EQ(c.to_f32_vector(), back);
  Tensor b = Tensor::empty({6}, DType::kBF16);
  cast(b, c);
  const std::vector<float> via = b.to_f32_vector();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(via[i], bf16_to_f32(f32_to_bf16(back[i]))) << i;
  Tensor f = Tensor::empty({6}, DType::kF32);
  cast(f, c);
  EXPECT_EQ(f.to_f32_vector(), back);
  // normal_fill in f16 is the f32 draw rounded.
  Tensor d32 = Tensor::empty({64}, DType::kF32), d16 = Tensor::empty({64}, DType::kF16);
  normal_fill(d32, 77, 0.02f);
  normal_fill(d16, 77, 0.02f);
  const std::vector<float> a = d32.to_f32_vector(), q = d16.to_f32_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(q[i], f16_to_f32(f32_to_f16(a[i]))) << i;
}

}  // namespace
}  // namespace seqpar
