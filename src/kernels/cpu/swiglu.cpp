#include "kernels/cpu/swiglu.h"

#include <cmath>

namespace seqpar::cpu {

namespace {
template <typename Real>
Real sigmoid(Real x) {
  return Real(1) / (Real(1) + std::exp(-x));
}

template <typename Real>
Real silu_times(Real g, Real u) {
  return g * sigmoid(g) * u;
}
}  // namespace

template <typename Real>
void swiglu_forward(Real* out, const Real* gate, const Real* up, int64_t N) {
  for (int64_t i = 0; i < N; i++) out[i] = silu_times(gate[i], up[i]);
}

template <typename Real>
void swiglu_backward(Real* dgate, Real* dup, const Real* dout, const Real* gate, const Real* up, int64_t N, Real* out) {
  for (int64_t i = 0; i < N; i++) {
    const Real g = gate[i];
    const Real u = up[i];
    const Real dy = dout[i];
    const Real s = sigmoid(g);
    dgate[i] = dy * u * s * (Real(1) + g * (Real(1) - s));
    dup[i] = dy * g * s;
    if (out != nullptr) out[i] = silu_times(g, u);
  }
}

template void swiglu_forward<float>(float*, const float*, const float*, int64_t);
template void swiglu_forward<double>(double*, const double*, const double*, int64_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*, int64_t, float*);
template void swiglu_backward<double>(double*, double*, const double*, const double*, const double*, int64_t,
                                      double*);

}  // namespace seqpar::cpu
