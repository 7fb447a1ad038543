// rmsnorm_forward / rmsnorm_backward (kernels/cpu/rmsnorm.h): forward (f32) against a naive
// double formula, backward (double) against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/rmsnorm.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::random_doubles;

constexpr int64_t kT = 7, kC = 12;

TEST(RmsNorm, ForwardMatchesNaiveFormula) {
  const std::vector<double> x = random_doubles(kT * kC, 1, -2.0, 2.0);
  const std::vector<double> w = random_doubles(kC, 2, 0.5, 1.5);
  const float eps = 1e-5f;
  std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end());
  std::vector<float> out(kT * kC), rstd(kT);
  cpu::rmsnorm_forward(out.data(), rstd.data(), xf.data(), wf.data(), kT, kC, eps);
  for (int64_t t = 0; t < kT; t++) {
    double ms = 0;
    for (int64_t c = 0; c < kC; c++) ms += double(xf[t * kC + c]) * xf[t * kC + c];
    ms /= kC;
    const double r = 1.0 / std::sqrt(ms + eps);
    EXPECT_NEAR(rstd[t], r, 1e-6 * r);
    for (int64_t c = 0; c < kC; c++) {
      const double ref = xf[t * kC + c] * r * wf[c];
      EXPECT_NEAR(out[t * kC + c], ref, 1e-6 * (1 + std::fabs(ref))) << "t=" << t << " c=" << c;
    }
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  std::vector<double> x = random_doubles(kT * kC, 3, -2.0, 2.0);
  std::vector<double> w = random_doubles(kC, 4, 0.5, 1.5);
  const std::vector<double> dout = random_doubles(kT * kC, 5);
  const double eps = 1e-5;
  // L(x, w) = sum dout * rmsnorm(x, w)
  auto loss = [&] {
    std::vector<double> out(kT * kC), rstd(kT);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), kT, kC, eps);
    double l = 0;
    for (size_t i = 0; i < out.size(); i++) l += dout[i] * out[i];
    return l;
  };
  auto central_diff = [&](std::vector<double>& v, size_t i) {
    const double h = 1e-6, v0 = v[i];
    v[i] = v0 + h;
    const double lp = loss();
    v[i] = v0 - h;
    const double lm = loss();
    v[i] = v0;
    return (lp - lm) / (2 * h);
  };
  std::vector<double> out(kT * kC), rstd(kT);
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), kT, kC, eps);
  std::vector<double> dx(kT * kC, NAN);  // written (=), so its old contents must not matter
  const std::vector<double> dw0 = random_doubles(kC, 6);
  std::vector<double> dw = dw0;  // accumulated (+=)
  cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), kT, kC);

  // Tolerance: central differences with h = 1e-6 in double are good to ~1e-9 here.
  double err = 0, scale = 0;
  for (size_t i = 0; i < x.size(); i++) {
    const double fd = central_diff(x, i);
    err = std::fmax(err, std::fabs(dx[i] - fd));
    scale = std::fmax(scale, std::fabs(fd));
  }
  EXPECT_LT(err / scale, 1e-7) << "dinp";
  err = scale = 0;
  for (size_t c = 0; c < w.size(); c++) {
    const double fd = central_diff(w, c);
    err = std::fmax(err, std::fabs((dw[c] - dw0[c]) - fd));
    scale = std::fmax(scale, std::fabs(fd));
  }
  EXPECT_LT(err / scale, 1e-7) << "dweight";
}

TEST(RmsNorm, BackwardInPlaceOnDoutGivesTheSameResult) {
  const std::vector<double> x = random_doubles(kT * kC, 7);
  const std::vector<double> w = random_doubles(kC, 8, 0.5, 1.5);
  const std::vector<double> dout = random_doubles(kT * kC, 9);
  std::vector<double> out(kT * kC), rstd(kT);
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), kT, kC, 1e-6);
  std::vector<double> dx(kT * kC), dw(kC, 0.0);
  cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), kT, kC);
  std::vector<double> buf = dout, dw2(kC, 0.0);
  cpu::rmsnorm_backward(buf.data(), dw2.data(), buf.data(), x.data(), w.data(), rstd.data(), kT, kC);
  EXPECT_EQ(buf, dx);
  EXPECT_EQ(dw2, dw);
}

}  // namespace
}  // namespace seqpar
