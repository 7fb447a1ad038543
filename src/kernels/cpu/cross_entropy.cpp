#include "kernels/cpu/cross_entropy.h"

#include <cmath>

#include "core/error.h"

namespace seqpar::cpu {

namespace {

struct RowStats {
  double max;
  double sum_exp;  // sum_v exp(x_v - max)
};

template <typename Real>
RowStats row_stats(const Real* x, int64_t V) {
  double mx = -INFINITY;
  for (int64_t v = 0; v < V; v++) mx = std::fmax(mx, static_cast<double>(x[v]));
  double sum = 0.0;
  for (int64_t v = 0; v < V; v++) sum += std::exp(static_cast<double>(x[v]) - mx);
  return {mx, sum};
}

}  // namespace

void check_targets(const int32_t* targets, int64_t T, int64_t V) {
  for (int64_t t = 0; t < T; t++) {
    const int32_t y = targets[t];
    SEQPAR_INPUT_CHECK(y == kCrossEntropyIgnore || (y >= 0 && y < V),
                       "cross_entropy: token {} has target {}, outside the vocabulary [0, V={}) and not the "
                       "ignore index {}",
                       t, y, V, kCrossEntropyIgnore);
  }
}

template <typename Real>
void cross_entropy_forward(Real* losses, const Real* logits, const int32_t* targets, int64_t T, int64_t V,
                           Real* lse) {
  check_targets(targets, T, V);
  for (int64_t t = 0; t < T; t++) {
    if (targets[t] == kCrossEntropyIgnore) {
      losses[t] = Real(0);
      if (lse) lse[t] = Real(0);
      continue;
    }
    const Real* x = logits + t * V;
    const RowStats s = row_stats(x, V);
    const double row_lse = s.max + std::log(s.sum_exp);
    losses[t] = static_cast<Real>(row_lse - static_cast<double>(x[targets[t]]));
    if (lse) lse[t] = static_cast<Real>(row_lse);
  }
}

template <typename Real>
void cross_entropy_backward(Real* dlogits, const Real* logits, const int32_t* targets, Real dloss, int64_t T,
                            int64_t V, const Real* lse) {
  check_targets(targets, T, V);
  for (int64_t t = 0; t < T; t++) {
    const Real* x = logits + t * V;
    Real* dx = dlogits + t * V;
    if (targets[t] == kCrossEntropyIgnore) {
      for (int64_t v = 0; v < V; v++) dx[v] = Real(0);
      continue;
    }
    const int32_t y = targets[t];
    double row_lse;
    if (lse) {
      row_lse = lse[t];
    } else {
      const RowStats s = row_stats(x, V);
      row_lse = s.max + std::log(s.sum_exp);
    }
    for (int64_t v = 0; v < V; v++) {
      const double p = std::exp(static_cast<double>(x[v]) - row_lse);
      dx[v] = static_cast<Real>((p - (v == y ? 1.0 : 0.0)) * static_cast<double>(dloss));
    }
  }
}

template void cross_entropy_forward<float>(float*, const float*, const int32_t*, int64_t, int64_t, float*);
template void cross_entropy_forward<double>(double*, const double*, const int32_t*, int64_t, int64_t, double*);
template void cross_entropy_backward<float>(float*, const float*, const int32_t*, float, int64_t, int64_t,
                                            const float*);
template void cross_entropy_backward<double>(double*, const double*, const int32_t*, double, int64_t, int64_t,
                                             const double*);

}  // namespace seqpar::cpu
