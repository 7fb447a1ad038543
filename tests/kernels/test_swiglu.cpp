// swiglu_forward / swiglu_backward (kernels/cpu/swiglu.h): forward against silu written with
// tanh, backward against central finite differences in double, saturated gates stay finite.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/swiglu.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::random_doubles;

constexpr int64_t kT = 7, kF = 20;

TEST(SwiGlu, ForwardMatchesSiluTimesUp) {
  const std::vector<double> gate = random_doubles(kT * kF, 1, -6.0, 6.0);
  const std::vector<double> up = random_doubles(kT * kF, 2, -2.0, 2.0);
  std::vector<float> gf(gate.begin(), gate.end()), uf(up.begin(), up.end()), out(kT * kF);
  cpu::swiglu_forward(out.data(), gf.data(), uf.data(), kT * kF);
  for (int64_t i = 0; i < kT * kF; i++) {
    const double g = gf[i];
    const double sigmoid = 0.5 * (1.0 + std::tanh(0.5 * g));  // an independent formula
    const double ref = g * sigmoid * uf[i];
    EXPECT_NEAR(out[i], ref, 1e-6 * (1 + std::fabs(ref))) << "i=" << i;
  }
}

TEST(SwiGlu, BackwardMatchesFiniteDifferences) {
  std::vector<double> gate = random_doubles(kT * kF, 3, -6.0, 6.0);
  std::vector<double> up = random_doubles(kT * kF, 4, -2.0, 2.0);
  const std::vector<double> dout = random_doubles(kT * kF, 5);
  auto loss = [&] {  // L = sum dout * swiglu(gate, up)
    std::vector<double> out(kT * kF);
    cpu::swiglu_forward(out.data(), gate.data(), up.data(), kT * kF);
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
  std::vector<double> dgate(kT * kF, NAN), dup(kT * kF, NAN);  // written (=)
  cpu::swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), kT * kF);
  double err_g = 0, scale_g = 0, err_u = 0, scale_u = 0;
  for (size_t i = 0; i < gate.size(); i++) {
    const double fd_g = central_diff(gate, i);
    const double fd_u = central_diff(up, i);
    err_g = std::fmax(err_g, std::fabs(dgate[i] - fd_g));
    scale_g = std::fmax(scale_g, std::fabs(fd_g));
    err_u = std::fmax(err_u, std::fabs(dup[i] - fd_u));
    scale_u = std::fmax(scale_u, std::fabs(fd_u));
  }
  // Tolerance: central differences with h = 1e-6 in double are good to ~1e-9 here.
  EXPECT_LT(err_g / scale_g, 1e-7) << "dgate";
  EXPECT_LT(err_u / scale_u, 1e-7) << "dup";
}

// In place (dgate over gate, dup over up, and the forward's output again over dout: the model's MLP backward): the
// same values as into separate buffers, and that output bitwise the forward's.
TEST(SwiGlu, BackwardInPlaceEqualsOutOfPlace) {
  const std::vector<double> g = random_doubles(kT * kF, 5, -6.0, 6.0), u = random_doubles(kT * kF, 6, -2.0, 2.0),
                            d = random_doubles(kT * kF, 7, -1.0, 1.0);
  std::vector<float> gate(g.begin(), g.end()), up(u.begin(), u.end()), dout(d.begin(), d.end());
  std::vector<float> dgate(gate.size()), dup(gate.size()), h(gate.size());
  cpu::swiglu_forward(h.data(), gate.data(), up.data(), kT * kF);
  cpu::swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), kT * kF);
  cpu::swiglu_backward(gate.data(), up.data(), dout.data(), gate.data(), up.data(), kT * kF, dout.data());
  EXPECT_EQ(gate, dgate);
  EXPECT_EQ(up, dup);
  EXPECT_EQ(dout, h);
}

TEST(SwiGlu, SaturatedGatesStayFinite) {
  const std::vector<float> gate = {-1e30f, -200.f, -90.f, 90.f, 200.f, 3e38f};
  const std::vector<float> up(gate.size(), 1.5f);
  const std::vector<float> dout(gate.size(), 0.7f);
  std::vector<float> out(gate.size()), dgate(gate.size()), dup(gate.size());
  cpu::swiglu_forward(out.data(), gate.data(), up.data(), int64_t(gate.size()));
  cpu::swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), int64_t(gate.size()));
  for (size_t i = 0; i < gate.size(); i++) {
    EXPECT_FALSE(std::isnan(out[i]) || std::isnan(dgate[i]) || std::isnan(dup[i])) << "gate=" << gate[i];
    if (gate[i] < 0) {
      EXPECT_EQ(out[i], 0.f);
      EXPECT_EQ(dgate[i], 0.f);
    } else if (gate[i] < 1e3f) {
      EXPECT_FLOAT_EQ(out[i], gate[i] * 1.5f);  // silu(g) = g for large g
      EXPECT_FLOAT_EQ(dgate[i], 0.7f * 1.5f);
    }
  }
}

}  // namespace
}  // namespace seqpar
