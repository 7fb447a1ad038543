// adamw_step (kernels/cpu/adamw.h) against a scalar re-derivation of torch.optim.AdamW in
// double over several steps; bf16 gradients; hyperparameter checks; clip_coefficient (ops.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/adamw.h"
#include "kernels/ops.h"

namespace seqpar {
namespace {

std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// torch.optim.AdamW, one element, in double (torch/optim/adam.py, _single_tensor_adam with
// decoupled weight decay):
//   param.mul_(1 - lr * wd); exp_avg.lerp_(g, 1 - b1); exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2)
//   denom = sqrt(exp_avg_sq) / sqrt(1 - b2^t) + eps; param -= lr / (1 - b1^t) * exp_avg / denom
struct ScalarAdamW {
  double lr, beta1, beta2, eps, wd;
  double p, m = 0, v = 0;
  void step(double g, int64_t t) {
    p *= 1 - lr * wd;
    m = beta1 * m + (1 - beta1) * g;
    v = beta2 * v + (1 - beta2) * g * g;
    const double bc1 = 1 - std::pow(beta1, double(t));
    const double bc2 = 1 - std::pow(beta2, double(t));
    p -= lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
  }
};

TEST(AdamW, SeveralStepsMatchTorchFormulaInDouble) {
  const int64_t n = 41;
  const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  std::vector<float> p = random_floats(n, 1), m(n, 0.f), v(n, 0.f);
  std::vector<ScalarAdamW> ref;
  for (int64_t i = 0; i < n; i++) ref.push_back({lr, beta1, beta2, eps, wd, p[i]});
  const float scales[] = {1.f, 0.5f, 1.f, 0.8125f, 1.f, 1.f};
  for (int64_t step = 1; step <= 6; step++) {
    std::vector<float> g = random_floats(n, 100 + step);
    // A few gradients near eps, where eps outside the sqrt decides the update.
    for (int64_t i = 0; i < n; i += 10) g[i] *= 1e-8f;
    const float scale = scales[step - 1];
    cpu::adamw_step(p.data(), m.data(), v.data(), g.data(), n,
                    cpu::adamw_scalars(lr, beta1, beta2, eps, wd, step, scale));
    for (int64_t i = 0; i < n; i++) ref[i].step(double(g[i]) * scale, step);
  }
  // Tolerance: six steps of f32 rounding on values of order 1 (f32 eps 1.2e-7), a few ulps.
  for (int64_t i = 0; i < n; i++) {
    EXPECT_NEAR(p[i], ref[i].p, 1e-6) << "param i=" << i;
    EXPECT_NEAR(m[i], ref[i].m, 1e-6 * (1e-8 + std::fabs(ref[i].m)) + 1e-12) << "m i=" << i;
    EXPECT_NEAR(v[i], ref[i].v, 1e-6 * std::fabs(ref[i].v)) << "v i=" << i;
  }
}

TEST(AdamW, FirstStepMovesEachParameterByLrTimesSignOfGradient) {
  // Step 1 without decay: m_hat = g, sqrt(v_hat) = |g|, so p -= lr * g / (|g| + eps).
  const int64_t n = 9;
  const std::vector<float> p0 = random_floats(n, 2);
  const std::vector<float> g = random_floats(n, 3, -5.f, 5.f);
  std::vector<float> p = p0, m(n, 0.f), v(n, 0.f);
  cpu::adamw_step(p.data(), m.data(), v.data(), g.data(), n, cpu::adamw_scalars(0.25f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 1.f));
  for (int64_t i = 0; i < n; i++) EXPECT_NEAR(p[i], p0[i] - 0.25f * (g[i] > 0 ? 1.f : -1.f), 1e-6) << i;
}

TEST(AdamW, Bf16GradientsActLikeTheirF32Values) {
  const int64_t n = 17;
  const std::vector<float> g32 = random_floats(n, 4);
  std::vector<bf16> g16(n);
  std::vector<float> widened(n);
  for (int64_t i = 0; i < n; i++) {
    g16[i] = f32_to_bf16(g32[i]);
    widened[i] = bf16_to_f32(g16[i]);
  }
  std::vector<float> p1 = random_floats(n, 5), m1(n, 0.f), v1(n, 0.f);
  std::vector<float> p2 = p1, m2 = m1, v2 = v1;
  for (int64_t step = 1; step <= 3; step++) {
    const cpu::AdamWScalars s = cpu::adamw_scalars(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step, 0.75f);
    cpu::adamw_step(p1.data(), m1.data(), v1.data(), g16.data(), n, s);
    cpu::adamw_step(p2.data(), m2.data(), v2.data(), widened.data(), n, s);
  }
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
}

// The vectorised loop (the best instruction set's clone on this machine) against one element at a
// time in torch's order, compiled here without the clones: the same bits, as the header promises
// for every instruction set. Both lerp branches (beta1 above and below 0.5), a length that is no
// multiple of any vector width, values that round to bf16 and f16 ties, infinities, NaN and -0.
TEST(AdamW, VectorisedLoopAndRoundingAreTheScalarOrderBitForBit) {
  const int64_t n = 1037;
  for (const float beta1 : {0.9f, 0.3f}) {
    std::vector<float> p = random_floats(n, 7, -4.f, 4.f), m = random_floats(n, 8, -0.1f, 0.1f),
                       v = random_floats(n, 9, 0.f, 0.01f), g = random_floats(n, 10, -2.f, 2.f);
    p[3] = INFINITY;
    p[4] = -0.f;
    g[5] = NAN;
    p[6] = 1.00390625f;  // 1 + 2^-8: a bf16 tie that rounds down to even
    p[7] = 1.01171875f;  // 1 + 3 * 2^-8: a bf16 tie that rounds up to even
    for (int i : {6, 7}) g[i] = m[i] = v[i] = 0.f;  // unchanged by the step
    const cpu::AdamWScalars s = cpu::adamw_scalars(1e-3f, beta1, 0.95f, 1e-8f, 0.f, 2, 0.5f);
    std::vector<float> rp = p, rm = m, rv = v;
    for (int64_t i = 0; i < n; i++) {  // adamw.h's order of operations, one element at a time
      const float gi = g[i] * s.grad_scale;
      float pi = rp[i] * s.decay;
      const float w = s.one_minus_beta1;
      const float mi = std::fabs(w) < 0.5f ? rm[i] + w * (gi - rm[i]) : gi - (gi - rm[i]) * (1.0f - w);
      float vi = rv[i] * s.beta2;
      vi = vi + s.one_minus_beta2 * gi * gi;
      const float denom = std::sqrt(vi) / s.bias_correction2_sqrt + s.eps;
      pi = pi + s.neg_step_size * mi / denom;
      rp[i] = pi;
      rm[i] = mi;
      rv[i] = vi;
    }
    std::vector<float> p1 = p, m1 = m, v1 = v, p2 = p, m2 = m, v2 = v, p3 = p, m3 = m, v3 = v;
    std::vector<bf16> b(n);
    std::vector<f16> h(n);
    cpu::adamw_step(p1.data(), m1.data(), v1.data(), g.data(), n, s);
    cpu::adamw_step_rounded(p2.data(), m2.data(), v2.data(), g.data(), b.data(), n, s);
    cpu::adamw_step_rounded(p3.data(), m3.data(), v3.data(), g.data(), h.data(), n, s);
    auto bits = [](const std::vector<float>& x) {
      std::vector<uint32_t> u(x.size());
      std::memcpy(u.data(), x.data(), 4 * x.size());
      return u;
    };
    for (const auto* out : {&p1, &p2, &p3}) EXPECT_EQ(bits(*out), bits(rp)) << "beta1 " << beta1;
    for (const auto* out : {&m1, &m2, &m3}) EXPECT_EQ(bits(*out), bits(rm)) << "beta1 " << beta1;
    for (const auto* out : {&v1, &v2, &v3}) EXPECT_EQ(bits(*out), bits(rv)) << "beta1 " << beta1;
    for (int64_t i = 0; i < n; i++) {
      ASSERT_EQ(b[i].bits, f32_to_bf16(rp[i]).bits) << "bf16 i=" << i << " p=" << rp[i];
      ASSERT_EQ(h[i].bits, f32_to_f16(rp[i]).bits) << "f16 i=" << i << " p=" << rp[i];
    }
    EXPECT_TRUE(std::isnan(rp[5]));  // the NaN gradient's parameter went NaN and stayed NaN in bf16
    EXPECT_EQ(b[5].bits & 0x7f80u, 0x7f80u);
  }
}

TEST(AdamW, RejectsInvalidHyperparameters) {
  EXPECT_THROW(cpu::adamw_scalars(1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 0, 1.f), Error);  // steps count from 1
  EXPECT_THROW(cpu::adamw_scalars(1e-3f, 1.0f, 0.999f, 1e-8f, 0.f, 1, 1.f), Error);
  EXPECT_THROW(cpu::adamw_scalars(1e-3f, 0.9f, -0.1f, 1e-8f, 0.f, 1, 1.f), Error);
  EXPECT_THROW(cpu::adamw_scalars(-1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 1.f), Error);
  EXPECT_THROW(cpu::adamw_scalars(1e-3f, 0.9f, 0.999f, -1e-8f, 0.f, 1, 1.f), Error);
  EXPECT_THROW(cpu::adamw_scalars(1e-3f, 0.9f, 0.999f, 1e-8f, -0.1f, 1, 1.f), Error);
}

TEST(ClipCoefficient, TorchFormulaClampedToOne) {
  EXPECT_EQ(clip_coefficient(5.0, 0.0), 1.f);   // max_norm <= 0: no clipping
  EXPECT_EQ(clip_coefficient(5.0, -1.0), 1.f);
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.f);   // norm below max_norm
  EXPECT_LT(clip_coefficient(1.0, 1.0), 1.f);   // at the limit the 1e-6 clips slightly, as in torch
  EXPECT_FLOAT_EQ(clip_coefficient(4.0, 1.0), static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_FLOAT_EQ(clip_coefficient(1e-3, 1e-4), static_cast<float>(1e-4 / (1e-3 + 1e-6)));
  EXPECT_EQ(clip_coefficient(INFINITY, 1.0), 0.f);
  EXPECT_TRUE(std::isnan(clip_coefficient(NAN, 1.0)));
  EXPECT_THROW(clip_coefficient(-1.0, 1.0), Error);
}

}  // namespace
}  // namespace seqpar
