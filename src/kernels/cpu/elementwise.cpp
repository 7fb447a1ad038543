#include "kernels/cpu/elementwise.h"

namespace seqpar::cpu {

template <typename Real>
void add_inplace(Real* y, const Real* x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

template <typename Real>
void bias_forward(Real* y, const Real* b, int64_t T, int64_t N) {
  for (int64_t t = 0; t < T; t++)
    for (int64_t n = 0; n < N; n++) y[t * N + n] += b[n];
}

template <typename Real>
void bias_backward(Real* db, const Real* dy, int64_t T, int64_t N) {
  for (int64_t n = 0; n < N; n++) {
    double sum = 0.0;
    for (int64_t t = 0; t < T; t++) sum += static_cast<double>(dy[t * N + n]);
    db[n] += static_cast<Real>(sum);
  }
}

template <typename Real>
void scale_inplace(Real* y, Real s, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] *= s;
}

template <typename Real>
double sum_squares(const Real* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

template void add_inplace<float>(float*, const float*, int64_t);
template void add_inplace<double>(double*, const double*, int64_t);
template void bias_forward<float>(float*, const float*, int64_t, int64_t);
template void bias_forward<double>(double*, const double*, int64_t, int64_t);
template void bias_backward<float>(float*, const float*, int64_t, int64_t);
template void bias_backward<double>(double*, const double*, int64_t, int64_t);
template void scale_inplace<float>(float*, float, int64_t);
template void scale_inplace<double>(double*, double, int64_t);
template double sum_squares<float>(const float*, int64_t);
template double sum_squares<double>(const double*, int64_t);

}  // namespace seqpar::cpu
