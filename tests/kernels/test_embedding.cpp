// embedding_forward / embedding_backward (kernels/cpu/embedding.h): forward against a direct
// lookup, backward against central finite differences in double.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/embedding.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::random_doubles;

constexpr int64_t kT = 7, kC = 12, kV = 11;
// Token 2 appears three times: its gradient row must collect all three.
const std::vector<int32_t> kIds = {2, 9, 2, 0, 10, 2, 5};

TEST(Embedding, ForwardCopiesTheRowOfEachId) {
  const std::vector<double> wte = random_doubles(kV * kC, 1);
  std::vector<float> wte_f(wte.begin(), wte.end());
  std::vector<float> out(kT * kC, NAN);
  cpu::embedding_forward(out.data(), kIds.data(), wte_f.data(), kT, kC, kV);
  for (int64_t t = 0; t < kT; t++)
    for (int64_t c = 0; c < kC; c++) EXPECT_EQ(out[t * kC + c], wte_f[kIds[t] * kC + c]) << "t=" << t << " c=" << c;
}

TEST(Embedding, BackwardAccumulatesAndMatchesFiniteDifferences) {
  std::vector<double> wte = random_doubles(kV * kC, 2);
  const std::vector<double> dout = random_doubles(kT * kC, 3);
  // L(wte) = sum_t,c dout[t, c] * out[t, c]; dL/dwte is what embedding_backward adds.
  auto loss = [&] {
    std::vector<double> out(kT * kC);
    cpu::embedding_forward(out.data(), kIds.data(), wte.data(), kT, kC, kV);
    double l = 0;
    for (size_t i = 0; i < out.size(); i++) l += dout[i] * out[i];
    return l;
  };
  const std::vector<double> dwte0 = random_doubles(kV * kC, 4);  // += : what was there stays
  std::vector<double> dwte = dwte0;
  cpu::embedding_backward(dwte.data(), dout.data(), kIds.data(), kT, kC, kV);
  const double h = 1e-6;
  double max_err = 0, max_grad = 0;
  for (size_t i = 0; i < wte.size(); i++) {
    const double w0 = wte[i];
    wte[i] = w0 + h;
    const double lp = loss();
    wte[i] = w0 - h;
    const double lm = loss();
    wte[i] = w0;
    const double fd = (lp - lm) / (2 * h);
    max_err = std::fmax(max_err, std::fabs((dwte[i] - dwte0[i]) - fd));
    max_grad = std::fmax(max_grad, std::fabs(fd));
  }
  EXPECT_GT(max_grad, 1.0);  // token 2's row sums three dout rows
  EXPECT_LT(max_err / max_grad, 1e-8);
  // Rows of ids that never occur are untouched.
  for (int64_t c = 0; c < kC; c++) EXPECT_EQ(dwte[1 * kC + c], dwte0[1 * kC + c]);
}

TEST(Embedding, IdOutsideVocabularyThrowsBeforeWriting) {
  const std::vector<float> wte(kV * kC, 0.5f);
  std::vector<float> out(kT * kC, -3.f);
  std::vector<int32_t> ids = kIds;
  ids[4] = static_cast<int32_t>(kV);  // one past the end
  EXPECT_THROW(cpu::embedding_forward(out.data(), ids.data(), wte.data(), kT, kC, kV), InputError);
  for (float x : out) ASSERT_EQ(x, -3.f);
  ids[4] = -1;
  std::vector<float> dwte(kV * kC, 0.f);
  EXPECT_THROW(cpu::embedding_backward(dwte.data(), out.data(), ids.data(), kT, kC, kV), InputError);
  for (float x : dwte) ASSERT_EQ(x, 0.f);
}

}  // namespace
}  // namespace seqpar
