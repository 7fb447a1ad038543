#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/tensor.h"
#include "test_util.h"

namespace seqpar {
namespace {

TEST(DType, TraitsTable) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_EQ(dtype_traits(DType::kI32).safetensors_name, "I32");
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  // 1 + 2^-8 is exactly half-way between bf16 neighbours 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3*2^-8 is half-way between 1+2^-7 and 1+2^-6: ties to even (1 + 2^-6).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(Tensor, RowsShareStorageAndViewsReshape) {
  Tensor t = Tensor::from_vector<float>({3, 2}, {0, 1, 2, 3, 4, 5});
  Tensor r = t.rows(1, 3);
  EXPECT_EQ(r.shape(), (Shape{2, 2}));
  EXPECT_EQ(r.data<float>()[0], 2.f);
  r.data<float>()[0] = 42.f;
  EXPECT_EQ(t.data<float>()[2], 42.f);
  Tensor v = t.view({6});
  EXPECT_EQ(v.numel(), 6);
  EXPECT_THROW(t.view({4}), Error);
  EXPECT_THROW(t.rows(2, 4), Error);
  EXPECT_THROW(t.data<int32_t>(), Error);
}

TEST(Tensor, AllocatorTracksCurrentAndPeak) {
  Allocator& a = cpu_allocator();
  size_t before = a.current_bytes();
  a.reset_peak();
  {
    Tensor x = Tensor::empty({1024}, DType::kF32);
    EXPECT_EQ(a.current_bytes(), before + 4096);
    { Tensor y = Tensor::empty({256}, DType::kBF16); }
    EXPECT_EQ(a.peak_bytes(), before + 4096 + 512);
  }
  EXPECT_EQ(a.current_bytes(), before);
}

TEST(Tensor, Bf16Conversion) {
  Tensor t = testing::random_tensor({64}, 1);
  Tensor b = t.to_dtype(DType::kBF16);
  EXPECT_EQ(b.nbytes(), 128u);
  EXPECT_LT(testing::rel_error(b, t), 1e-2);
  EXPECT_GT(testing::rel_error(b, t), 0.0);
}

TEST(Check, MessageNamesStatementAndLocation) {
  try {
    SEQPAR_CHECK(1 + 1 == 3, "arith is {}", "off");
    FAIL();
  } catch (const Error& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("1 + 1 == 3"), std::string::npos);
    EXPECT_NE(w.find("test_tensor.cpp"), std::string::npos);
    EXPECT_NE(w.find("arith is off"), std::string::npos);
  }
}

}  // namespace
}  // namespace seqpar
