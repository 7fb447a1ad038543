#include "kernels/cpu/elementwise.h"

namespace seqpar::cpu {

template <typename Real>
void add_inplace(Real* y, const Real* x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += x[i];
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
template void scale_inplace<float>(float*, float, int64_t);
template void scale_inplace<double>(double*, double, int64_t);
template double sum_squares<float>(const float*, int64_t);
template double sum_squares<double>(const double*, int64_t);

}  // namespace seqpar::cpu
