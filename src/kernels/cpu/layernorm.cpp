#include "kernels/cpu/layernorm.h"

#include <cmath>
#include <vector>

namespace seqpar::cpu {

template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight, const Real* bias,
                       int64_t T, int64_t C, Real eps) {
  for (int64_t t = 0; t < T; t++) {
    const Real* x = inp + t * C;
    double sum = 0.0;
    for (int64_t c = 0; c < C; c++) sum += x[c];
    const double mu = sum / static_cast<double>(C);
    double sum_sq = 0.0;
    for (int64_t c = 0; c < C; c++) {
      const double d = x[c] - mu;
      sum_sq += d * d;
    }
    const Real m = static_cast<Real>(mu);
    const Real r = static_cast<Real>(1.0 / std::sqrt(sum_sq / static_cast<double>(C) + eps));
    Real* y = out + t * C;
    for (int64_t c = 0; c < C; c++) y[c] = ((x[c] - m) * r) * weight[c] + bias[c];
    mean[t] = m;
    rstd[t] = r;
  }
}

template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp, const Real* weight,
                        const Real* mean, const Real* rstd, int64_t T, int64_t C, bool accumulate) {
  // dweight and dbias sum over every token of the shard (T can be 10^5): double buffers keep those
  // sums exact enough; they are added to the gradients once at the end.
  std::vector<double> dw(static_cast<size_t>(C), 0.0), db(static_cast<size_t>(C), 0.0);
  const double inv_c = 1.0 / static_cast<double>(C);
  for (int64_t t = 0; t < T; t++) {
    const Real* x = inp + t * C;
    const Real* dy = dout + t * C;
    const double m = mean[t], r = rstd[t];
    double sum_g = 0.0, sum_gx = 0.0;  // sum_c g_c, sum_c g_c xhat_c
    for (int64_t c = 0; c < C; c++) {
      const double g = static_cast<double>(dy[c]) * weight[c];
      sum_g += g;
      sum_gx += g * ((x[c] - m) * r);
    }
    const double mean_g = sum_g * inv_c, mean_gx = sum_gx * inv_c;
    Real* dx = dinp + t * C;
    for (int64_t c = 0; c < C; c++) {
      const double xhat = (x[c] - m) * r;
      const double d = dy[c];  // the last read of dy[c] before dx[c] is written
      dw[c] += d * xhat;
      db[c] += d;
      const double base = accumulate ? static_cast<double>(dx[c]) : 0.0;
      dx[c] = static_cast<Real>(base + r * (d * weight[c] - mean_g - xhat * mean_gx));
    }
  }
  for (int64_t c = 0; c < C; c++) {
    dweight[c] += static_cast<Real>(dw[c]);
    dbias[c] += static_cast<Real>(db[c]);
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t,
                                       int64_t, float);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*, int64_t,
                                        int64_t, double);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                        const float*, int64_t, int64_t, bool);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, int64_t, int64_t, bool);

}  // namespace seqpar::cpu
