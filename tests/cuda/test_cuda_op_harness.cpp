// The op harness (tests/ops/op_harness.h) on every CUDA path: every op case in bf16, f16 and f32
// storage (matmul with autotuning off and on), every attention case on the mma.sync kernels, the
// Hopper wgmma kernels, cuDNN's dense and ragged graphs and `auto`, each in bf16 and f16. A path
// that cannot run a case says why (printed as skipped). Where both flash kernel families run a case
// in one 16-bit type, the wgmma kernel must also stay within 2x the mma.sync kernel's error (the
// sm_90 kernels' own rule).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kernels/matmul_policy.h"
#include "ops/op_harness.h"

namespace seqpar::optest {
namespace {

void report_skip(const std::string& what, const Backend& b, const std::string& why) {
  std::printf("[ skipped ] %s on %s: %s\n", what.c_str(), b.name.c_str(), why.c_str());
}

// Restores the process's matmul policy at scope exit, failed or not.
struct MatmulPolicyScope {
  MatmulPolicy saved = matmul_policy();
  ~MatmulPolicyScope() { set_matmul_policy(saved); }
};

TEST(CudaOpHarness, EveryOpOnEveryCudaPath) {
  REQUIRE_GPU();
  const MatmulPolicyScope scope;
  const MatmulPolicy before = scope.saved;
  int run = 0;
  for (const OpCase& c : op_cases()) {
    const bool is_matmul = c.name.rfind("matmul", 0) == 0 || c.name.rfind("linear", 0) == 0;
    for (const Backend& b : testing::cuda_op_backends()) {
      // matmul: cuBLASLt's heuristic first pick, then the autotuned choice (a short budget).
      for (bool tune : is_matmul ? std::vector<bool>{false, true} : std::vector<bool>{before.autotune}) {
        set_matmul_policy({tune, is_matmul ? 10.0 : before.autotune_budget_ms});
        SCOPED_TRACE(is_matmul ? (tune ? "autotuned" : "heuristic") : "");
        std::string why;
        if (check_op(c, b, &why)) {
          ++run;
        } else {
          report_skip(c.name, b, why);
        }
        ASSERT_EQ(cudaGetLastError(), cudaSuccess) << c.name;
      }
    }
  }
  EXPECT_GT(run, 100);
}

// LayerNorm's dweight and dbias are summed without atomics, in a fixed order (per-block partials,
// then a fixed-order column sum): the same inputs give the same bits, run after run. T spans many
// more rows than the backward grid's blocks.
TEST(CudaOpHarness, LayerNormParameterGradientsAreBitwiseReproducible) {
  REQUIRE_GPU();
  const int64_t T = 5000, C = 768;
  const Device gpu = Device::cuda(0);
  const Tensor x = make_tensor({T, C}, random_values(T * C, 90, -1.f, 3.f), DType::kBF16, gpu);
  const Tensor w = make_tensor({C}, random_values(C, 91, 0.5f, 1.5f), DType::kBF16, gpu);
  const Tensor b = make_tensor({C}, random_values(C, 92), DType::kBF16, gpu);
  const Tensor dy = make_tensor({T, C}, random_values(T * C, 93), DType::kBF16, gpu);
  Tensor y = poisoned({T, C}, DType::kBF16, gpu), mean = poisoned({T}, DType::kF32, gpu),
         rstd = poisoned({T}, DType::kF32, gpu), dx = poisoned({T, C}, DType::kBF16, gpu);
  layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
  std::vector<double> first_dw, first_db, first_dx;
  for (int run = 0; run < 3; ++run) {
    Tensor dw = make_tensor({C}, std::vector<float>(C, 0.25f), DType::kF32, gpu);
    Tensor db = make_tensor({C}, std::vector<float>(C, -0.5f), DType::kF32, gpu);
    layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
    const std::vector<double> now_dw = values_of(dw), now_db = values_of(db), now_dx = values_of(dx);
    if (run == 0) {
      first_dw = now_dw;
      first_db = now_db;
      first_dx = now_dx;
    }
    EXPECT_TRUE(now_dw == first_dw) << "dweight of run " << run << " differs from run 0";
    EXPECT_TRUE(now_db == first_db) << "dbias of run " << run << " differs from run 0";
    EXPECT_TRUE(now_dx == first_dx) << "dinp of run " << run << " differs from run 0";
  }
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
}

// The wgmma kernel's errors within 2x the mma.sync kernel's on the same case and 16-bit type.
void expect_wgmma_within_2x_mma(const AttnCase& c, const AttnExpect& expect, const AttnResult& wgmma,
                                const AttnResult& mma, const std::string& type) {
  SCOPED_TRACE(c.name + ": wgmma against mma.sync, " + type);
  const AttnInputs& in = expect.in;
  const AttnRef& exact = expect.exact;
  const double e_wg = rel_l2(wgmma.out, exact.out), e_mma = rel_l2(mma.out, exact.out);
  EXPECT_LE(e_wg, 2.0 * e_mma + 1e-6) << "wgmma out rel err " << e_wg << " vs mma.sync " << e_mma;
  EXPECT_LT(e_wg, 1e-2) << "wgmma out rel err against the reference";
  expect_lse("wgmma vs mma.sync", wgmma.lse, mma.lse, 1e-5);
  // The gradients' contributions (their starts subtracted), as the sm_90 kernels were tuned on.
  auto minus = [](const std::vector<double>& a, const std::vector<float>& start) {
    std::vector<double> d(a.size());
    for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - start[i];
    return d;
  };
  for (auto [name, w, m, x, start] : {std::tuple{"dq", &wgmma.dq, &mma.dq, &exact.dq, &in.dq0},
                                      {"dk", &wgmma.dk, &mma.dk, &exact.dk, &in.dk0},
                                      {"dv", &wgmma.dv, &mma.dv, &exact.dv, &in.dv0}}) {
    const std::vector<double> contribution = minus(*x, *start);
    const double ew = rel_l2(minus(*w, *start), contribution), em = rel_l2(minus(*m, *start), contribution);
    EXPECT_LE(ew, 2.0 * em + 1e-4) << name << ": wgmma rel err " << ew << " vs mma.sync " << em;
    EXPECT_LT(ew, 3e-2) << name << ": wgmma rel err against the reference";
  }
}

TEST(CudaOpHarness, EveryAttentionCaseOnEveryCudaPath) {
  REQUIRE_GPU();
  int run = 0, run_f16_flash = 0;
  for (const AttnCase& c : attn_cases()) {
    // Per 16-bit type (0: bf16, 1: f16): the flash kernels' results, for the wgmma-vs-mma.sync rule.
    AttnResult mma[2], wgmma[2];
    bool ran_mma[2] = {false, false}, ran_wgmma[2] = {false, false};
    AttnExpect expect;
    bool have_expect = false;
    for (const Backend& b : testing::cuda_attention_backends()) {
      std::string why = attn_unsupported(c, b);
      if (why.empty() && !have_expect) {
        expect = attn_expect(c);  // once per case: the long cases' f64 references take seconds
        have_expect = true;
      }
      // f16's same-dtype reference, once per case for all the fp16 paths.
      if (why.empty() && b.compute == DType::kF16 && expect.lowp16.out.empty())
        expect.lowp16 = attn_reference(c, expect.in, DType::kF16);
      AttnResult r;
      if (!why.empty() || !check_attention(c, b, &why, &r, &expect)) {
        report_skip(c.name, b, why);
        continue;
      }
      ++run;
      const int t = b.compute == DType::kF16 ? 1 : 0;
      if (b.attention.backend == AttentionBackend::kFlash) run_f16_flash += t;
      if (b.attention.fwd_kernel == FlashKernel::kMma && b.attention.backend == AttentionBackend::kFlash) {
        mma[t] = r;
        ran_mma[t] = true;
      }
      if (b.attention.fwd_kernel == FlashKernel::kWgmma) {
        wgmma[t] = r;
        ran_wgmma[t] = true;
      }
    }
    for (int t = 0; t < 2; ++t)
      if (ran_mma[t] && ran_wgmma[t]) expect_wgmma_within_2x_mma(c, expect, wgmma[t], mma[t], t ? "f16" : "bf16");
  }
  EXPECT_GT(run, 40);
  EXPECT_GT(run_f16_flash, 20);  // the f16 flash kernels ran most cases (mma.sync everywhere)
}

}  // namespace
}  // namespace seqpar::optest
