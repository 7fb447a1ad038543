// RMSNorm (HF LlamaRMSNorm), CPU reference: the spec for kernels/cuda/rmsnorm.cu.
#pragma once

#include <cstdint>

namespace seqpar::cpu {

// rstd[t] = 1 / sqrt(mean_c(inp[t, c]^2) + eps)      (sum of squares accumulated in double)
// out[t, c] = (inp[t, c] * rstd[t]) * weight[c]      (HF's order: normalize, then scale)
template <typename Real>
void rmsnorm_forward(Real* out,           // (T, C)
                     Real* rstd,          // (T) saved for backward
                     const Real* inp,     // (T, C)
                     const Real* weight,  // (C)
                     int64_t T, int64_t C, Real eps);

// With y = x * r * w and r = (sum(x^2) / C + eps)^(-1/2), so dr/dx_j = -r^3 x_j / C:
//   dinp[t, j] = r * (dout[t, j] w_j - x_j r^2 / C * sum_i dout[t, i] w_i x_i)   (=, or += with accumulate)
//   dweight[c] += sum_t dout[t, c] * inp[t, c] * rstd[t]                         (+=)
// The per-row sum and the sum over tokens for dweight are accumulated in double. dinp may be
// the same buffer as dout (each dout element is read before its dinp element is written), except
// with accumulate (the residual stream's gradient taking the norm's: one rounding, no temporary).
template <typename Real>
void rmsnorm_backward(Real* dinp,          // (T, C) written
                      Real* dweight,       // (C) accumulated
                      const Real* dout,    // (T, C)
                      const Real* inp,     // (T, C)
                      const Real* weight,  // (C)
                      const Real* rstd,    // (T) from the forward
                      int64_t T, int64_t C, bool accumulate = false);

}  // namespace seqpar::cpu
