// GELU activation of the GPT-2 MLP, CPU reference: the spec for kernels/cuda/gelu.cu.
// Elementwise, so inp/out are flat arrays of N = T * F elements.
#pragma once

#include <cstdint>

namespace seqpar::cpu {

// tanh_approx = false (HF "gelu", torch gelu(approximate='none')):
//   y = 0.5 x (1 + erf(x / sqrt 2)),           y' = Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi)
// tanh_approx = true (HF "gelu_new" / "gelu_pytorch_tanh", torch gelu(approximate='tanh')):
//   u = sqrt(2/pi) (x + 0.044715 x^3),  y = 0.5 x (1 + tanh u),
//   y' = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// For large |x|, erf and tanh saturate to +-1: y is x or (-)0 and y' is 1 or 0, never NaN (the
// second term of y' is taken as 0 once 1 - tanh^2 u is 0, so x^2 overflowing cannot make 0 * inf).
template <typename Real>
void gelu_forward(Real* out,        // (N), may be inp (in place)
                  const Real* inp,  // (N)
                  int64_t N, bool tanh_approx);

// dinp = dout * gelu'(inp)   (=); dinp may be dout (in place).
template <typename Real>
void gelu_backward(Real* dinp,        // (N)
                   const Real* dout,  // (N)
                   const Real* inp,   // (N)
                   int64_t N, bool tanh_approx);

}  // namespace seqpar::cpu
