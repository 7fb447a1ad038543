#include "kernels/cpu/matmul.h"

#include <cblas.h>

#include <limits>
#include <type_traits>

#include "core/error.h"

namespace seqpar::cpu {

template <typename Real>
void matmul_reference(Real* out, const Real* a, const Real* b, int64_t M, int64_t N, int64_t K, bool trans_a,
                      bool trans_b, Real alpha, Real beta) {
  for (int64_t m = 0; m < M; m++) {
    for (int64_t n = 0; n < N; n++) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; k++) {
        const Real a_mk = trans_a ? a[k * M + m] : a[m * K + k];
        const Real b_kn = trans_b ? b[n * K + k] : b[k * N + n];
        acc += static_cast<double>(a_mk) * b_kn;
      }
      Real& o = out[m * N + n];
      const double prev = beta == Real(0) ? 0.0 : static_cast<double>(beta) * o;
      o = static_cast<Real>(static_cast<double>(alpha) * acc + prev);
    }
  }
}

template <typename Real>
void matmul(Real* out, const Real* a, const Real* b, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
            Real alpha, Real beta) {
  if constexpr (std::is_same_v<Real, float>) {
    constexpr int64_t kMax = std::numeric_limits<blasint>::max();
    SEQPAR_CHECK(M <= kMax && N <= kMax && K <= kMax, "matmul: M={} N={} K={}, OpenBLAS takes sizes up to {}", M, N,
                 K, kMax);
    // BLAS rejects a leading dimension of 0, so empty products are handled here.
    if (M == 0 || N == 0 || K == 0) {
      matmul_reference(out, a, b, M, N, K, trans_a, trans_b, alpha, beta);
      return;
    }
    const auto mi = static_cast<blasint>(M), ni = static_cast<blasint>(N), ki = static_cast<blasint>(K);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, mi, ni, ki,
                alpha, a, trans_a ? mi : ki, b, trans_b ? ki : ni, beta, out, ni);
  } else {
    matmul_reference(out, a, b, M, N, K, trans_a, trans_b, alpha, beta);
  }
}

template void matmul_reference<float>(float*, const float*, const float*, int64_t, int64_t, int64_t, bool, bool,
                                      float, float);
template void matmul_reference<double>(double*, const double*, const double*, int64_t, int64_t, int64_t, bool,
                                       bool, double, double);
template void matmul<float>(float*, const float*, const float*, int64_t, int64_t, int64_t, bool, bool, float, float);
template void matmul<double>(double*, const double*, const double*, int64_t, int64_t, int64_t, bool, bool, double,
                             double);

}  // namespace seqpar::cpu

namespace seqpar {

void set_cpu_gemm_threads(int n) { openblas_set_num_threads(n < 1 ? 1 : n); }

}  // namespace seqpar
