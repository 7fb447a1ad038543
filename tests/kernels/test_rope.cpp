// rope_forward / rope_backward (kernels/cpu/rope.h): forward against HF's rotate_half
// formulation, positions that are not contiguous, backward as the inverse rotation and against
// central finite differences in double.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/rope.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::random_doubles;

constexpr int64_t kT = 7, kH = 3, kD = 8;
// Global positions of a shard: out of order, with gaps, one document restart (0).
const std::vector<int32_t> kPos = {5, 900, 3, 77, 0, 4095, 12};

// Llama's inv_freq[i] = theta^(-2i/D), theta = 10000, as f32.
std::vector<float> llama_inv_freq(int64_t D) {
  std::vector<float> f(D / 2);
  for (int64_t i = 0; i < D / 2; i++) f[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / D));
  return f;
}

// HF: emb = cat(freqs, freqs); y = x * cos(emb) + rotate_half(x) * sin(emb),
// rotate_half(x) = cat(-x[D/2:], x[:D/2]); freqs = f32 product pos * inv_freq.
std::vector<double> rope_reference(const std::vector<double>& x, const std::vector<int32_t>& pos,
                                   const std::vector<float>& inv_freq, int64_t T, int64_t H, int64_t D,
                                   bool f32_angle = true) {
  std::vector<double> y(x.size());
  const int64_t half = D / 2;
  for (int64_t t = 0; t < T; t++) {
    std::vector<double> emb(D);
    for (int64_t j = 0; j < D; j++) {
      const float f = inv_freq[j % half];
      emb[j] = f32_angle ? static_cast<double>(static_cast<float>(pos[t]) * f) : static_cast<double>(pos[t]) * f;
    }
    for (int64_t h = 0; h < H; h++) {
      const double* xh = &x[(t * H + h) * D];
      for (int64_t j = 0; j < D; j++) {
        const double rotated = j < half ? -xh[j + half] : xh[j - half];
        y[(t * H + h) * D + j] = xh[j] * std::cos(emb[j]) + rotated * std::sin(emb[j]);
      }
    }
  }
  return y;
}

TEST(Rope, ForwardMatchesRotateHalfReference) {
  const std::vector<double> x = random_doubles(kT * kH * kD, 1);
  const std::vector<float> inv_freq = llama_inv_freq(kD);
  std::vector<float> xf(x.begin(), x.end());
  const std::vector<double> ref = rope_reference({xf.begin(), xf.end()}, kPos, inv_freq, kT, kH, kD);
  cpu::rope_forward(xf.data(), kPos.data(), inv_freq.data(), kT, kH, kD);
  for (size_t i = 0; i < ref.size(); i++) EXPECT_NEAR(xf[i], ref[i], 1e-6) << "i=" << i;
}

TEST(Rope, EachTokenIsRotatedByItsOwnPosition) {
  const std::vector<double> x = random_doubles(kT * kH * kD, 2);
  const std::vector<float> inv_freq = llama_inv_freq(kD);
  std::vector<float> batch(x.begin(), x.end());
  cpu::rope_forward(batch.data(), kPos.data(), inv_freq.data(), kT, kH, kD);
  for (int64_t t = 0; t < kT; t++) {
    // The same token alone, at the same position: identical bits.
    std::vector<float> one(x.begin() + t * kH * kD, x.begin() + (t + 1) * kH * kD);
    cpu::rope_forward(one.data(), &kPos[t], inv_freq.data(), 1, kH, kD);
    for (int64_t j = 0; j < kH * kD; j++) ASSERT_EQ(one[j], batch[t * kH * kD + j]) << "t=" << t;
    // At another position it differs, and position 0 is the identity.
    std::vector<float> moved(x.begin() + t * kH * kD, x.begin() + (t + 1) * kH * kD);
    const int32_t other = kPos[t] + 1;
    cpu::rope_forward(moved.data(), &other, inv_freq.data(), 1, kH, kD);
    double diff = 0;
    for (int64_t j = 0; j < kH * kD; j++) diff = std::fmax(diff, std::fabs(moved[j] - one[j]));
    EXPECT_GT(diff, 1e-2) << "t=" << t;
    if (kPos[t] == 0) {
      for (int64_t j = 0; j < kH * kD; j++) EXPECT_EQ(one[j], static_cast<float>(x[t * kH * kD + j]));
    }
  }
}

TEST(Rope, AngleIsTheF32ProductAsInHF) {
  // At positions past 10^6, rounding pos * inv_freq to f32 moves the angle by up to ~0.02 rad;
  // the kernel must follow HF's f32 angle, not the exact one.
  const std::vector<int32_t> pos = {1000003, 2000017, 1500001, 3999999, 1234567, 2222221, 3333331};
  const std::vector<double> x = random_doubles(kT * kH * kD, 3);
  const std::vector<float> inv_freq = llama_inv_freq(kD);
  std::vector<double> y = x;
  cpu::rope_forward(y.data(), pos.data(), inv_freq.data(), kT, kH, kD);
  const std::vector<double> hf = rope_reference(x, pos, inv_freq, kT, kH, kD, /*f32_angle=*/true);
  const std::vector<double> exact = rope_reference(x, pos, inv_freq, kT, kH, kD, /*f32_angle=*/false);
  double err_hf = 0, err_exact = 0;
  for (size_t i = 0; i < y.size(); i++) {
    err_hf = std::fmax(err_hf, std::fabs(y[i] - hf[i]));
    err_exact = std::fmax(err_exact, std::fabs(y[i] - exact[i]));
  }
  EXPECT_LT(err_hf, 1e-12);
  EXPECT_GT(err_exact, 1e-3);
}

TEST(Rope, BackwardUndoesForward) {
  const std::vector<double> x = random_doubles(kT * kH * kD, 4);
  const std::vector<float> inv_freq = llama_inv_freq(kD);
  std::vector<double> y = x;
  cpu::rope_forward(y.data(), kPos.data(), inv_freq.data(), kT, kH, kD);
  cpu::rope_backward(y.data(), kPos.data(), inv_freq.data(), kT, kH, kD);
  for (size_t i = 0; i < x.size(); i++) EXPECT_NEAR(y[i], x[i], 1e-14);
  std::vector<float> yf(x.begin(), x.end());
  cpu::rope_forward(yf.data(), kPos.data(), inv_freq.data(), kT, kH, kD);
  cpu::rope_backward(yf.data(), kPos.data(), inv_freq.data(), kT, kH, kD);
  for (size_t i = 0; i < x.size(); i++) EXPECT_NEAR(yf[i], static_cast<float>(x[i]), 1e-6);
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  std::vector<double> x = random_doubles(kT * kH * kD, 5);
  const std::vector<double> dout = random_doubles(kT * kH * kD, 6);
  const std::vector<float> inv_freq = llama_inv_freq(kD);
  auto loss = [&] {  // L(x) = sum dout * rope(x)
    std::vector<double> y = x;
    cpu::rope_forward(y.data(), kPos.data(), inv_freq.data(), kT, kH, kD);
    double l = 0;
    for (size_t i = 0; i < y.size(); i++) l += dout[i] * y[i];
    return l;
  };
  std::vector<double> dx = dout;
  cpu::rope_backward(dx.data(), kPos.data(), inv_freq.data(), kT, kH, kD);
  double err = 0, scale = 0;
  const double h = 1e-6;
  for (size_t i = 0; i < x.size(); i++) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss();
    x[i] = x0 - h;
    const double lm = loss();
    x[i] = x0;
    const double fd = (lp - lm) / (2 * h);
    err = std::fmax(err, std::fabs(dx[i] - fd));
    scale = std::fmax(scale, std::fabs(fd));
  }
  EXPECT_LT(err / scale, 1e-8);  // the loss is linear in x: only rounding remains
}

// HF's attention_scaling (yarn, longrope): cos and sin times scale. scale = 1 is the plain rotation
// bit for bit; another scale is scale times it, and the backward stays the forward's transpose.
TEST(Rope, ScaleMultipliesCosAndSin) {
  const std::vector<double> x = random_doubles(kT * kH * kD, 7);
  const std::vector<float> inv_freq = llama_inv_freq(kD);
  std::vector<float> plain(x.begin(), x.end()), one = plain, scaled = plain;
  cpu::rope_forward(plain.data(), kPos.data(), inv_freq.data(), kT, kH, kD);
  cpu::rope_forward(one.data(), kPos.data(), inv_freq.data(), kT, kH, kD, 1.0f);
  EXPECT_EQ(one, plain);
  const float s = 1.1386294f;
  cpu::rope_forward(scaled.data(), kPos.data(), inv_freq.data(), kT, kH, kD, s);
  for (size_t i = 0; i < x.size(); i++) EXPECT_NEAR(scaled[i], s * plain[i], 2e-6) << "i=" << i;

  std::vector<double> gd = random_doubles(kT * kH * kD, 8), xd = x;
  std::vector<double> dx = gd;
  cpu::rope_forward(xd.data(), kPos.data(), inv_freq.data(), kT, kH, kD, s);
  cpu::rope_backward(dx.data(), kPos.data(), inv_freq.data(), kT, kH, kD, s);
  double lhs = 0, rhs = 0;  // <g, R x> = <R^T g, x>
  for (size_t i = 0; i < x.size(); i++) lhs += gd[i] * xd[i], rhs += dx[i] * x[i];
  EXPECT_NEAR(lhs, rhs, 1e-12 * std::abs(lhs) + 1e-12);
  std::vector<double> back = xd;  // R^T R x = s^2 x
  cpu::rope_backward(back.data(), kPos.data(), inv_freq.data(), kT, kH, kD, s);
  for (size_t i = 0; i < x.size(); i++) EXPECT_NEAR(back[i], double{s} * s * x[i], 1e-13);
}

}  // namespace
}  // namespace seqpar
