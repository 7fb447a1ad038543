// add_inplace / scale_inplace / sum_squares (kernels/cpu/elementwise.h) against plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/elementwise.h"

namespace seqpar {
namespace {

std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(Elementwise, AddAndScale) {
  const int64_t n = 37;
  const std::vector<float> x = random_floats(n, 1), y0 = random_floats(n, 2);
  std::vector<float> y = y0;
  cpu::add_inplace(y.data(), x.data(), n);
  for (int64_t i = 0; i < n; i++) EXPECT_EQ(y[i], y0[i] + x[i]);
  cpu::scale_inplace(y.data(), -0.375f, n);
  for (int64_t i = 0; i < n; i++) EXPECT_EQ(y[i], (y0[i] + x[i]) * -0.375f);
  std::vector<double> yd(y0.begin(), y0.end());
  cpu::scale_inplace(yd.data(), 3.0, n);
  for (int64_t i = 0; i < n; i++) EXPECT_EQ(yd[i], 3.0 * y0[i]);
}

TEST(Elementwise, SumSquaresAccumulatesInDouble) {
  // 2^22 copies of 0.1f: an f32 running sum stalls far from the answer; the double sum does not.
  const int64_t n = int64_t(1) << 22;
  const std::vector<float> x(n, 0.1f);
  const double exact = double(n) * double(0.1f) * double(0.1f);
  EXPECT_NEAR(cpu::sum_squares(x.data(), n), exact, 1e-9 * exact);
  float f32_sum = 0.f;
  for (float v : x) f32_sum += v * v;
  EXPECT_GT(std::fabs(f32_sum - exact), 1e-3 * exact);  // why double matters

  const std::vector<float> r = random_floats(101, 3, -3.f, 3.f);
  double ref = 0;
  for (float v : r) ref += double(v) * v;
  EXPECT_NEAR(cpu::sum_squares(r.data(), int64_t(r.size())), ref, 1e-12 * ref);
  std::vector<float> with_nan = r;
  with_nan[50] = NAN;
  EXPECT_TRUE(std::isnan(cpu::sum_squares(with_nan.data(), int64_t(r.size()))));
}

}  // namespace
}  // namespace seqpar
