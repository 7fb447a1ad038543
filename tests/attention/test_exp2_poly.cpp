// The sm_90 attention kernels' software exponential (attention/cuda/exp2_poly.h) against std::exp2 on the
// range the softmax feeds it (x <= 0): relative error under 1e-4 (a bf16 P rounds at 2^-9), 0 for masked
// scores (-inf) and below -125, NaN kept.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attention/cuda/exp2_poly.h"

namespace seqpar {
namespace {

TEST(Exp2Poly, MatchesExp2WithinOneTenThousandthOnTheSoftmaxRange) {
  double worst = 0.0;
  float worst_x = 0.f;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -124.f * static_cast<float>(i) / 2000000.f;  // [-124, 0], every spacing of 6.2e-5
    const double want = std::exp2(static_cast<double>(x));
    const double rel = std::abs(static_cast<double>(cuda_attn::exp2_poly(x)) - want) / want;
    if (rel > worst) {
      worst = rel;
      worst_x = x;
    }
  }
  EXPECT_LT(worst, 1e-4) << "at x = " << worst_x;
  // Exact at the integers the polynomial does not see (f = 0: its constant term, 0.99992824).
  EXPECT_NEAR(cuda_attn::exp2_poly(0.f), 1.f, 1e-4);
  EXPECT_NEAR(cuda_attn::exp2_poly(-1.f), 0.5f, 0.5e-4);
  EXPECT_NEAR(cuda_attn::exp2_poly(-0.5f), std::sqrt(0.5f), 1e-4);
}

TEST(Exp2Poly, MaskedAndTinyScoresGiveZeroAndNanStaysNan) {
  EXPECT_EQ(cuda_attn::exp2_poly(-std::numeric_limits<float>::infinity()), 0.f);
  EXPECT_EQ(cuda_attn::exp2_poly(-125.5f), 0.f);
  EXPECT_EQ(cuda_attn::exp2_poly(-1e30f), 0.f);
  EXPECT_GT(cuda_attn::exp2_poly(-124.9f), 0.f);
  EXPECT_TRUE(std::isnan(cuda_attn::exp2_poly(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace seqpar
