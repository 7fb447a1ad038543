// LayerNorm (torch.nn.LayerNorm / HF GPT-2's ln_*), CPU reference: the spec for kernels/cuda/layernorm.cu.
#pragma once

#include <cstdint>

namespace seqpar::cpu {

// mean[t] = mean_c(inp[t, c]),  rstd[t] = 1 / sqrt(mean_c((inp[t, c] - mean[t])^2) + eps)
// (the biased variance, as torch; both sums accumulated in double, the variance from the centred
// values, not E[x^2] - mean^2, which cancels for rows with a large mean)
// out[t, c] = ((inp[t, c] - mean[t]) * rstd[t]) * weight[c] + bias[c]
template <typename Real>
void layernorm_forward(Real* out,           // (T, C)
                       Real* mean,          // (T) saved for backward
                       Real* rstd,          // (T) saved for backward
                       const Real* inp,     // (T, C)
                       const Real* weight,  // (C)
                       const Real* bias,    // (C)
                       int64_t T, int64_t C, Real eps);

// With xhat = (x - mean) * rstd, y = xhat * w + b and g = dout * w (per row):
//   dinp[t, j]  = rstd * (g_j - mean_c(g_c) - xhat_j * mean_c(g_c xhat_c))     (=, or += with accumulate)
//   dweight[c] += sum_t dout[t, c] * xhat[t, c]                                 (+=)
//   dbias[c]   += sum_t dout[t, c]                                              (+=)
// The row sums and the sums over tokens are accumulated in double. dinp may be the same buffer as
// dout (each dout element is read before its dinp element is written), except with accumulate.
template <typename Real>
void layernorm_backward(Real* dinp,          // (T, C) written
                        Real* dweight,       // (C) accumulated
                        Real* dbias,         // (C) accumulated
                        const Real* dout,    // (T, C)
                        const Real* inp,     // (T, C)
                        const Real* weight,  // (C)
                        const Real* mean,    // (T) from the forward
                        const Real* rstd,    // (T) from the forward
                        int64_t T, int64_t C, bool accumulate = false);

}  // namespace seqpar::cpu
