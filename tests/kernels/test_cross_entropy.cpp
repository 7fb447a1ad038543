// cross_entropy_forward / cross_entropy_backward (kernels/cpu/cross_entropy.h): forward against
// log(sum(exp)), shift invariance at large logits, ignored rows, backward against central
// finite differences in double, out-of-range targets.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cross_entropy.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::random_doubles;

constexpr int64_t kT = 7, kV = 13;
// Rows 1 and 4 are ignored (prompt tokens / the last token after the label shift).
const std::vector<int32_t> kTargets = {3, cpu::kCrossEntropyIgnore, 0, 12, cpu::kCrossEntropyIgnore, 7, 3};

TEST(CrossEntropy, ForwardMatchesLogSumExp) {
  const std::vector<double> logits = random_doubles(kT * kV, 1, -4.0, 4.0);
  std::vector<float> lf(logits.begin(), logits.end()), losses(kT, NAN);
  cpu::cross_entropy_forward(losses.data(), lf.data(), kTargets.data(), kT, kV);
  for (int64_t t = 0; t < kT; t++) {
    if (kTargets[t] == cpu::kCrossEntropyIgnore) {
      EXPECT_EQ(losses[t], 0.f) << "t=" << t;
      continue;
    }
    double sum = 0;  // no max subtraction: fine for logits in [-4, 4]
    for (int64_t v = 0; v < kV; v++) sum += std::exp(double(lf[t * kV + v]));
    const double ref = std::log(sum) - lf[t * kV + kTargets[t]];
    EXPECT_GT(ref, 0.0);
    EXPECT_NEAR(losses[t], ref, 1e-6 * ref) << "t=" << t;
  }
}

TEST(CrossEntropy, LargeLogitsDoNotOverflow) {
  // exp(1000) overflows even double; the max-subtracted form sees only the differences.
  std::vector<double> logits = random_doubles(kT * kV, 2, -4.0, 4.0);
  std::vector<double> shifted = logits;
  for (auto& x : shifted) x += 1000.0;
  std::vector<double> l0(kT), l1(kT), d0(kT * kV), d1(kT * kV);
  cpu::cross_entropy_forward(l0.data(), logits.data(), kTargets.data(), kT, kV);
  cpu::cross_entropy_forward(l1.data(), shifted.data(), kTargets.data(), kT, kV);
  cpu::cross_entropy_backward(d0.data(), logits.data(), kTargets.data(), 0.25, kT, kV);
  cpu::cross_entropy_backward(d1.data(), shifted.data(), kTargets.data(), 0.25, kT, kV);
  for (int64_t t = 0; t < kT; t++) EXPECT_NEAR(l1[t], l0[t], 1e-10) << "t=" << t;
  for (int64_t i = 0; i < kT * kV; i++) EXPECT_NEAR(d1[i], d0[i], 1e-12) << "i=" << i;
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferencesAndZeroesIgnoredRows) {
  std::vector<double> logits = random_doubles(kT * kV, 3, -4.0, 4.0);
  const double dloss = 1.0 / 5;  // 1 / good tokens
  auto loss = [&] {            // L = dloss * sum_t losses[t]
    std::vector<double> losses(kT);
    cpu::cross_entropy_forward(losses.data(), logits.data(), kTargets.data(), kT, kV);
    double l = 0;
    for (double x : losses) l += dloss * x;
    return l;
  };
  std::vector<double> dlogits(kT * kV, NAN);  // written (=), ignored rows included
  cpu::cross_entropy_backward(dlogits.data(), logits.data(), kTargets.data(), dloss, kT, kV);
  double err = 0, scale = 0;
  const double h = 1e-6;
  for (size_t i = 0; i < logits.size(); i++) {
    const double x0 = logits[i];
    logits[i] = x0 + h;
    const double lp = loss();
    logits[i] = x0 - h;
    const double lm = loss();
    logits[i] = x0;
    const double fd = (lp - lm) / (2 * h);
    err = std::fmax(err, std::fabs(dlogits[i] - fd));
    scale = std::fmax(scale, std::fabs(fd));
  }
  // Tolerance: central differences with h = 1e-6 in double are good to ~1e-9 here.
  EXPECT_LT(err / scale, 1e-7);
  for (int64_t t = 0; t < kT; t++) {
    double row_sum = 0;
    for (int64_t v = 0; v < kV; v++) row_sum += dlogits[t * kV + v];
    EXPECT_NEAR(row_sum, 0.0, 1e-15) << "softmax - onehot sums to 0, t=" << t;
    if (kTargets[t] == cpu::kCrossEntropyIgnore) {
      for (int64_t v = 0; v < kV; v++) EXPECT_EQ(dlogits[t * kV + v], 0.0);
    }
  }
}

TEST(CrossEntropy, BackwardInPlaceOnLogits) {
  const std::vector<double> logits = random_doubles(kT * kV, 4, -4.0, 4.0);
  std::vector<double> separate(kT * kV), in_place = logits;
  cpu::cross_entropy_backward(separate.data(), logits.data(), kTargets.data(), 0.5, kT, kV);
  cpu::cross_entropy_backward(in_place.data(), in_place.data(), kTargets.data(), 0.5, kT, kV);
  EXPECT_EQ(in_place, separate);
}

TEST(CrossEntropy, TargetOutsideVocabularyThrows) {
  const std::vector<float> logits(kT * kV, 0.5f);
  std::vector<float> losses(kT, -1.f), dlogits(kT * kV, -1.f);
  for (int32_t bad : {int32_t(kV), int32_t(-1), int32_t(-99), int32_t(1 << 20)}) {
    std::vector<int32_t> targets = kTargets;
    targets[5] = bad;
    EXPECT_THROW(cpu::cross_entropy_forward(losses.data(), logits.data(), targets.data(), kT, kV), InputError)
        << bad;
    EXPECT_THROW(cpu::cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), 1.f, kT, kV), InputError)
        << bad;
  }
  for (float x : losses) EXPECT_EQ(x, -1.f);  // checked before anything is written
}

}  // namespace
}  // namespace seqpar
