#include "kernels/cpu/gelu.h"

#include <cmath>

namespace seqpar::cpu {

namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kInvSqrt2 = 0.70710678118654752440;     // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kCubic = 0.044715;

template <typename Real>
Real gelu(Real x, bool tanh_approx) {
  if (tanh_approx) {
    const Real u = Real(kSqrt2OverPi) * (x + Real(kCubic) * x * x * x);
    return Real(0.5) * x * (Real(1) + std::tanh(u));
  }
  return Real(0.5) * x * (Real(1) + std::erf(x * Real(kInvSqrt2)));
}

template <typename Real>
Real gelu_grad(Real x, bool tanh_approx) {
  if (tanh_approx) {
    const Real u = Real(kSqrt2OverPi) * (x + Real(kCubic) * x * x * x);
    const Real th = std::tanh(u);
    const Real sech2 = Real(1) - th * th;
    const Real second =
        sech2 == Real(0) ? Real(0) : Real(0.5) * x * sech2 * Real(kSqrt2OverPi) * (Real(1) + Real(3 * kCubic) * x * x);
    return Real(0.5) * (Real(1) + th) + second;
  }
  const Real cdf = Real(0.5) * (Real(1) + std::erf(x * Real(kInvSqrt2)));
  const Real pdf = Real(kInvSqrt2Pi) * std::exp(Real(-0.5) * x * x);
  return cdf + (pdf == Real(0) ? Real(0) : x * pdf);
}

}  // namespace

template <typename Real>
void gelu_forward(Real* out, const Real* inp, int64_t N, bool tanh_approx) {
  for (int64_t i = 0; i < N; i++) out[i] = gelu(inp[i], tanh_approx);
}

template <typename Real>
void gelu_backward(Real* dinp, const Real* dout, const Real* inp, int64_t N, bool tanh_approx) {
  for (int64_t i = 0; i < N; i++) dinp[i] = dout[i] * gelu_grad(inp[i], tanh_approx);
}

template void gelu_forward<float>(float*, const float*, int64_t, bool);
template void gelu_forward<double>(double*, const double*, int64_t, bool);
template void gelu_backward<float>(float*, const float*, const float*, int64_t, bool);
template void gelu_backward<double>(double*, const double*, const double*, int64_t, bool);

}  // namespace seqpar::cpu
