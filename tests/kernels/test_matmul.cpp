// matmul (kernels/cpu/matmul.h): OpenBLAS and the naive loop against an independent loop over
// explicitly transposed copies, every transpose combination with alpha/beta; BLAS-style beta = 0;
// the linear-layer gradients of ops.h's comment against central finite differences in double.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::random_doubles;

// Row-major (rows, cols) -> (cols, rows).
std::vector<double> transpose(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) y[c * rows + r] = x[r * cols + c];
  return y;
}

// out = alpha * A @ B + beta * out with A (M, K), B (K, N) already in that orientation.
std::vector<double> plain_matmul(const std::vector<double>& A, const std::vector<double>& B, std::vector<double> out,
                                 int64_t M, int64_t N, int64_t K, double alpha, double beta) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double acc = 0;
      for (int64_t k = 0; k < K; k++) acc += A[m * K + k] * B[k * N + n];
      out[m * N + n] = alpha * acc + beta * out[m * N + n];
    }
  return out;
}

struct Dims {
  int64_t M, N, K;
};
void PrintTo(const Dims& d, std::ostream* os) { *os << "M=" << d.M << " N=" << d.N << " K=" << d.K; }

class MatmulCombos : public ::testing::TestWithParam<Dims> {};

TEST_P(MatmulCombos, AllTransposesWithAlphaBetaMatchThePlainLoop) {
  const auto [M, N, K] = GetParam();
  for (int ta = 0; ta < 2; ta++) {
    for (int tb = 0; tb < 2; tb++) {
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{-0.75f, 1.0f}, std::pair{1.5f, -0.5f}}) {
        SCOPED_TRACE(::testing::Message() << "trans_a=" << ta << " trans_b=" << tb << " alpha=" << alpha
                                        << " beta=" << beta);
        const uint64_t seed = 100 * ta + 10 * tb;
        // a_op = op(a) as (M, K), b_op = op(b) as (K, N); a_st / b_st: what is stored. Values
        // are rounded to f32 first, so the f32 kernels and the reference see the same numbers.
        std::vector<double> a_op = random_doubles(M * K, seed + 1), b_op = random_doubles(K * N, seed + 2);
        std::vector<double> out0 = random_doubles(M * N, seed + 3);
        for (auto* v : {&a_op, &b_op, &out0})
          for (auto& x : *v) x = static_cast<float>(x);
        const std::vector<double> a_st = ta ? transpose(a_op, M, K) : a_op;
        const std::vector<double> b_st = tb ? transpose(b_op, K, N) : b_op;
        const std::vector<double> ref = plain_matmul(a_op, b_op, out0, M, N, K, alpha, beta);

        std::vector<float> af(a_st.begin(), a_st.end()), bf(b_st.begin(), b_st.end());
        std::vector<float> blas(out0.begin(), out0.end()), naive_f(out0.begin(), out0.end());
        cpu::matmul(blas.data(), af.data(), bf.data(), M, N, K, ta, tb, alpha, beta);
        cpu::matmul_reference(naive_f.data(), af.data(), bf.data(), M, N, K, ta, tb, alpha, beta);
        std::vector<double> naive_d = out0;
        cpu::matmul<double>(naive_d.data(), a_st.data(), b_st.data(), M, N, K, ta, tb, alpha, beta);

        // f32 BLAS: error grows like sqrt(K) * eps_f32 * |a||b|; 1e-5 * (1 + K/16) leaves margin.
        const double tol_f32 = 1e-5 * (1.0 + K / 16.0);
        for (int64_t i = 0; i < M * N; i++) {
          ASSERT_NEAR(blas[i], ref[i], tol_f32) << "BLAS i=" << i;
          ASSERT_NEAR(naive_f[i], ref[i], 1e-6 * (1 + std::fabs(ref[i]))) << "naive f32 i=" << i;
          ASSERT_NEAR(naive_d[i], ref[i], 1e-12) << "naive double i=" << i;
        }
      }
    }
  }
}

// Odd small sizes, and sizes large enough for OpenBLAS's blocked kernels.
INSTANTIATE_TEST_SUITE_P(Sizes, MatmulCombos, ::testing::Values(Dims{7, 5, 12}, Dims{1, 9, 3}, Dims{33, 65, 47}));

TEST(Matmul, BetaZeroIgnoresWhatOutHeld) {
  const int64_t M = 5, N = 3, K = 4;
  const std::vector<double> a = random_doubles(M * K, 7), b = random_doubles(K * N, 8);
  std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
  std::vector<float> blas(M * N, NAN), naive(M * N, NAN);
  cpu::matmul(blas.data(), af.data(), bf.data(), M, N, K, false, false, 1.f, 0.f);
  cpu::matmul_reference(naive.data(), af.data(), bf.data(), M, N, K, false, false, 1.f, 0.f);
  for (int64_t i = 0; i < M * N; i++) {
    EXPECT_FALSE(std::isnan(blas[i]));
    EXPECT_NEAR(blas[i], naive[i], 1e-6);
  }
}

TEST(Matmul, EmptyInnerDimensionScalesOut) {
  std::vector<float> out = {1.f, -2.f, 3.f, 4.f, 5.f, -6.f};
  const std::vector<float> none;
  cpu::matmul(out.data(), none.data(), none.data(), 2, 3, 0, false, true, 1.f, 0.5f);
  EXPECT_EQ(out, (std::vector<float>{0.5f, -1.f, 1.5f, 2.f, 2.5f, -3.f}));
  cpu::matmul(out.data(), none.data(), none.data(), 2, 3, 0, true, false, 1.f, 0.f);
  EXPECT_EQ(out, std::vector<float>(6, 0.f));
}

// ops.h's linear layer: y = x W^T is matmul(y, x, W, false, true); dx = dy W is
// matmul(dx, dy, W, false, false); dW += dy^T x is matmul(dW, dy, x, true, false, 1, 1).
TEST(Matmul, LinearLayerGradientsMatchFiniteDifferences) {
  const int64_t T = 7, C = 12, O = 5;  // tokens, in features, out features
  std::vector<double> x = random_doubles(T * C, 11), W = random_doubles(O * C, 12);
  const std::vector<double> dy = random_doubles(T * O, 13);
  auto loss = [&] {  // L = sum dy * (x W^T)
    std::vector<double> y(T * O);
    cpu::matmul<double>(y.data(), x.data(), W.data(), T, O, C, false, true, 1.0, 0.0);
    double l = 0;
    for (size_t i = 0; i < y.size(); i++) l += dy[i] * y[i];
    return l;
  };
  auto central_diff = [&](std::vector<double>& v, size_t i) {
    const double h = 1e-6, v0 = v[i];
    v[i] = v0 + h;
    const double lp = loss();
    v[i] = v0 - h;
    const double lm = loss();
    v[i] = v0;
    return (lp - lm) / (2 * h);
  };
  std::vector<double> dx(T * C);
  cpu::matmul<double>(dx.data(), dy.data(), W.data(), T, C, O, false, false, 1.0, 0.0);
  const std::vector<double> dW0 = random_doubles(O * C, 14);
  std::vector<double> dW = dW0;
  cpu::matmul<double>(dW.data(), dy.data(), x.data(), O, C, T, true, false, 1.0, 1.0);
  for (size_t i = 0; i < x.size(); i++) EXPECT_NEAR(dx[i], central_diff(x, i), 1e-8) << "dx i=" << i;
  for (size_t i = 0; i < W.size(); i++) EXPECT_NEAR(dW[i] - dW0[i], central_diff(W, i), 1e-8) << "dW i=" << i;
}

}  // namespace
}  // namespace seqpar
