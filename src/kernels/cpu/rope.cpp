#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

namespace seqpar::cpu {

namespace {

// Rotates every (i, i + D/2) pair of x (T, H, D) by sign * angle(t, i).
template <typename Real>
void rope_rotate(Real* x, const int32_t* position_ids, const float* inv_freq, int64_t T, int64_t H, int64_t D,
                 int sign) {
  const int64_t half = D / 2;
  std::vector<Real> cos_t(static_cast<size_t>(half));
  std::vector<Real> sin_t(static_cast<size_t>(half));
  for (int64_t t = 0; t < T; t++) {
    for (int64_t i = 0; i < half; i++) {
      const float angle = static_cast<float>(position_ids[t]) * inv_freq[i];  // f32, like HF
      cos_t[i] = static_cast<Real>(std::cos(static_cast<double>(angle)));
      sin_t[i] = static_cast<Real>(sign * std::sin(static_cast<double>(angle)));
    }
    for (int64_t h = 0; h < H; h++) {
      Real* xh = x + (t * H + h) * D;
      for (int64_t i = 0; i < half; i++) {
        const Real x1 = xh[i];
        const Real x2 = xh[i + half];
        xh[i] = x1 * cos_t[i] - x2 * sin_t[i];
        xh[i + half] = x2 * cos_t[i] + x1 * sin_t[i];
      }
    }
  }
}

}  // namespace

template <typename Real>
void rope_forward(Real* x, const int32_t* position_ids, const float* inv_freq, int64_t T, int64_t H, int64_t D) {
  rope_rotate(x, position_ids, inv_freq, T, H, D, +1);
}

template <typename Real>
void rope_backward(Real* dx, const int32_t* position_ids, const float* inv_freq, int64_t T, int64_t H, int64_t D) {
  rope_rotate(dx, position_ids, inv_freq, T, H, D, -1);
}

template void rope_forward<float>(float*, const int32_t*, const float*, int64_t, int64_t, int64_t);
template void rope_forward<double>(double*, const int32_t*, const float*, int64_t, int64_t, int64_t);
template void rope_backward<float>(float*, const int32_t*, const float*, int64_t, int64_t, int64_t);
template void rope_backward<double>(double*, const int32_t*, const float*, int64_t, int64_t, int64_t);

}  // namespace seqpar::cpu
