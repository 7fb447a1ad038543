#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

namespace seqpar::cpu {

namespace {

// Rotates every (i, i + D/2) pair of x (T, H, D) by sign * angle(t, i) and multiplies it by scale.
template <typename Real>
void rope_rotate(Real* x, const int32_t* position_ids, const float* inv_freq, int64_t T, int64_t H, int64_t D, int sign,
                 float scale) {
  const int64_t half = D / 2;
  std::vector<Real> cos_t(static_cast<size_t>(half));
  std::vector<Real> sin_t(static_cast<size_t>(half));
  for (int64_t t = 0; t < T; t++) {
    for (int64_t i = 0; i < half; i++) {
      const float angle = static_cast<float>(position_ids[t]) * inv_freq[i];  // f32, like HF
      // HF: cos(angle) * attention_scaling; a product with 1.0 is exact (scale = 1: unscaled, bit for bit).
      cos_t[i] = static_cast<Real>(std::cos(static_cast<double>(angle)) * static_cast<double>(scale));
      sin_t[i] = static_cast<Real>(sign * std::sin(static_cast<double>(angle)) * static_cast<double>(scale));
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
void rope_forward(Real* x, const int32_t* position_ids, const float* inv_freq, int64_t T, int64_t H, int64_t D,
                  float scale) {
  rope_rotate(x, position_ids, inv_freq, T, H, D, +1, scale);
}

template <typename Real>
void rope_backward(Real* dx, const int32_t* position_ids, const float* inv_freq, int64_t T, int64_t H, int64_t D,
                   float scale) {
  rope_rotate(dx, position_ids, inv_freq, T, H, D, -1, scale);
}

template void rope_forward<float>(float*, const int32_t*, const float*, int64_t, int64_t, int64_t, float);
template void rope_forward<double>(double*, const int32_t*, const float*, int64_t, int64_t, int64_t, float);
template void rope_backward<float>(float*, const int32_t*, const float*, int64_t, int64_t, int64_t, float);
template void rope_backward<double>(double*, const int32_t*, const float*, int64_t, int64_t, int64_t, float);

}  // namespace seqpar::cpu
