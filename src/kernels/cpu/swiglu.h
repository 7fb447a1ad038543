// SwiGLU activation of the Llama MLP, CPU reference: the spec for kernels/cuda/swiglu.cu.
// Elementwise, so gate/up/out are flat arrays of N = T * F elements.
#pragma once

#include <cstdint>

namespace seqpar::cpu {

// out = silu(gate) * up, silu(g) = g * sigmoid(g) = g / (1 + exp(-g)).
// For g -> -inf, exp(-g) overflows to inf and sigmoid is 0: silu is (-)0, never NaN.
template <typename Real>
void swiglu_forward(Real* out,         // (T, F)
                    const Real* gate,  // (T, F)
                    const Real* up,    // (T, F)
                    int64_t N);

// With s = sigmoid(g): dsilu/dg = s + g s (1 - s) = s (1 + g (1 - s)).
//   dgate = dout * up * s * (1 + g (1 - s))   (=)
//   dup   = dout * g * s                      (=)
//   out   = silu(g) * up                      (=, when out is not null: the forward's output again, bit for bit)
// Any output may be the same buffer as any input (each element's inputs are read before it is written).
template <typename Real>
void swiglu_backward(Real* dgate,       // (T, F)
                     Real* dup,         // (T, F)
                     const Real* dout,  // (T, F)
                     const Real* gate,  // (T, F)
                     const Real* up,    // (T, F)
                     int64_t N,
                     Real* out = nullptr);  // (T, F)

}  // namespace seqpar::cpu
