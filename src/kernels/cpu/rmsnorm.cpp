#include "kernels/cpu/rmsnorm.h"

#include <cmath>
#include <vector>

namespace seqpar::cpu {

template <typename Real>
void rmsnorm_forward(Real* out, Real* rstd, const Real* inp, const Real* weight, int64_t T, int64_t C, Real eps) {
  for (int64_t t = 0; t < T; t++) {
    const Real* x = inp + t * C;
    double sum_sq = 0.0;
    for (int64_t c = 0; c < C; c++) sum_sq += static_cast<double>(x[c]) * x[c];
    const Real r = static_cast<Real>(1.0 / std::sqrt(sum_sq / static_cast<double>(C) + eps));
    Real* y = out + t * C;
    for (int64_t c = 0; c < C; c++) y[c] = (x[c] * r) * weight[c];
    rstd[t] = r;
  }
}

template <typename Real>
void rmsnorm_backward(Real* dinp, Real* dweight, const Real* dout, const Real* inp, const Real* weight,
                      const Real* rstd, int64_t T, int64_t C, bool accumulate) {
  // dweight sums over every token of the shard (T can be 10^5): a double buffer keeps that sum
  // exact enough; it is added to dweight once at the end.
  std::vector<double> dw(static_cast<size_t>(C), 0.0);
  for (int64_t t = 0; t < T; t++) {
    const Real* x = inp + t * C;
    const Real* dy = dout + t * C;
    const double r = rstd[t];
    double dot = 0.0;  // sum_i dy_i w_i x_i
    for (int64_t c = 0; c < C; c++) dot += static_cast<double>(dy[c]) * weight[c] * x[c];
    const double k = r * r * dot / static_cast<double>(C);
    Real* dx = dinp + t * C;
    for (int64_t c = 0; c < C; c++) {
      dw[c] += static_cast<double>(dy[c]) * x[c] * r;
      const double base = accumulate ? static_cast<double>(dx[c]) : 0.0;
      dx[c] = static_cast<Real>(base + r * (static_cast<double>(dy[c]) * weight[c] - x[c] * k));  // last read of dy[c]
    }
  }
  for (int64_t c = 0; c < C; c++) dweight[c] += static_cast<Real>(dw[c]);
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t, float);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int64_t, int64_t, double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, const float*,
                                      int64_t, int64_t, bool);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*, const double*,
                                       const double*, int64_t, int64_t, bool);

}  // namespace seqpar::cpu
