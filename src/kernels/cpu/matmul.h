// General matrix multiply, CPU: OpenBLAS for f32, a naive loop for double and as the test
// reference. The spec for kernels/cuda/matmul.cu (cuBLASLt).
#pragma once

#include <cstdint>

namespace seqpar::cpu {

// out = alpha * op(a) @ op(b) + beta * out, all row-major, op(x) = x^T when trans_x:
//   out  (M, N)
//   a    (M, K), or (K, M) when trans_a
//   b    (K, N), or (N, K) when trans_b
// beta == 0 makes out write-only: its old contents (even NaN) are ignored, as in BLAS.
// out must not overlap a or b.
// Naive triple loop with the dot products accumulated in double.
template <typename Real>
void matmul_reference(Real* out, const Real* a, const Real* b, int64_t M, int64_t N, int64_t K, bool trans_a,
                      bool trans_b, Real alpha, Real beta);

// The fast path with the same contract: cblas_sgemm for float, matmul_reference for double.
// OpenBLAS takes 32-bit sizes: M, N, K must each be below 2^31 (checked).
template <typename Real>
void matmul(Real* out, const Real* a, const Real* b, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
            Real alpha, Real beta);

}  // namespace seqpar::cpu
