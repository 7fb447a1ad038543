// Elementwise helpers of the training step (residual adds, gradient scaling, the grad-norm
// sum), CPU reference: the spec for kernels/cuda/elementwise.cu. Flat arrays of n elements.
#pragma once

#include <cstdint>

namespace seqpar::cpu {

// y += x
template <typename Real>
void add_inplace(Real* y,        // (n)
                 const Real* x,  // (n)
                 int64_t n);

// y[t, n] += b[n] (a linear layer's bias)
template <typename Real>
void bias_forward(Real* y,        // (T, N)
                  const Real* b,  // (N)
                  int64_t T, int64_t N);

// db[n] += sum_t dy[t, n], summed in double over t in order
template <typename Real>
void bias_backward(Real* db,        // (N)
                   const Real* dy,  // (T, N)
                   int64_t T, int64_t N);

// y *= s
template <typename Real>
void scale_inplace(Real* y,  // (n)
                   Real s, int64_t n);

// sum_i x_i^2, accumulated in double (it feeds the global grad norm, a sum over every
// parameter of the model). NaN or inf in x propagate to the result.
template <typename Real>
double sum_squares(const Real* x,  // (n)
                   int64_t n);

}  // namespace seqpar::cpu
