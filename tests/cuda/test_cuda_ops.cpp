// CUDA ops (kernels/ops.h on CUDA tensors) beyond the op harness's cases (tests/ops/op_harness.h
// runs every op case in bf16 and f32 storage against the f64 reference in
// test_cuda_op_harness.cpp): determinism, bad inputs, views, matmul's candidate pool and autotune
// budget, cast's rounding, streams. Numerics with the harness's rule (the CUDA result within 2x the
// error of the CPU f32 computation on inputs stored like the CUDA ones, against the f64
// reference) and its NaN-poisoned outputs.
//
// Runs on the GPU machine only (tools/gpu_check.sh); ctest does not run it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/cuda/stream.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/matmul_policy.h"
#include "kernels/ops.h"
#include "ops/op_harness.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::random_vector;
const Device kGpu = Device::cuda(0);
constexpr DType kFloatTypes[] = {DType::kBF16, DType::kF32};

// ---- helpers (the harness's, on device 0) ------------------------------------------------------

using optest::stored;
using optest::to_double;

Tensor host_f32(const Shape& shape, const std::vector<float>& v) { return Tensor::from_vector<float>(shape, v); }

Tensor device_tensor(const Shape& shape, const std::vector<float>& v, DType dt) {
  return optest::make_tensor(shape, v, dt, kGpu);
}

Tensor device_ids(const std::vector<int32_t>& v) {
  return Tensor::from_vector<int32_t>({static_cast<int64_t>(v.size())}, v).to(kGpu);
}

Tensor poisoned(const Shape& shape, DType dt) { return optest::poisoned(shape, dt, kGpu); }

std::vector<float> host(const Tensor& t) {
  std::vector<float> v = t.to_f32_vector();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  return v;
}

// The harness's 2x rule. `cuda`: the CUDA result; `same_dtype`: the CPU f32 computation on inputs
// stored like the CUDA ones; `ref`: the double reference on the original inputs.
void expect_within_2x(const std::string& what, const std::vector<float>& cuda, const std::vector<float>& same_dtype,
                      const std::vector<double>& ref) {
  optest::expect_within_2x(what, to_double(cuda), to_double(same_dtype), ref);
}

std::vector<int32_t> random_ints(size_t n, uint64_t seed, int32_t lo, int32_t hi) {  // [lo, hi)
  std::vector<float> u = random_vector(n, seed, 0.f, 1.f);
  std::vector<int32_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::min(hi - 1, lo + static_cast<int32_t>(u[i] * (hi - lo)));
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess) << "no CUDA driver: test_cuda runs on the GPU machine";
    ASSERT_GT(n, 0) << "no CUDA device";
  }
};

// ---- embedding ----------------------------------------------------------------------------

// Row ownership makes the gradient bitwise reproducible, even when one id takes most tokens.
TEST_F(CudaOps, EmbeddingBackwardDeterministic) {
  const int64_t T = 3000, V = 1000, C = 128;
  std::vector<int32_t> ids = random_ints(T, 6, 0, V);
  for (int64_t t = 0; t < T; t += 2) ids[t] = 7;  // a hot id
  const auto dout = random_vector(T * C, 7);
  Tensor g = device_tensor({T, C}, dout, DType::kBF16), d_ids = device_ids(ids);
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    Tensor dwte = device_tensor({V, C}, std::vector<float>(V * C, 0.5f), DType::kF32);
    embedding_backward(dwte, g, d_ids);
    std::vector<float> now = host(dwte);
    if (run == 0) first = now;
    EXPECT_TRUE(bitwise_equal(first, now)) << "run " << run << " differs from run 0";
  }
}

TEST_F(CudaOps, EmbeddingBadIdThrowsAndRecovers) {
  const int64_t T = 64, V = 100, C = 16;
  std::vector<int32_t> ids = random_ints(T, 8, 0, V);
  ids[37] = V;  // one past the end
  Tensor wte = device_tensor({V, C}, random_vector(V * C, 9), DType::kBF16);
  Tensor out = poisoned({T, C}, DType::kBF16);
  // The kernel reports without making the host wait; check_device_errors raises it (once).
  EXPECT_NO_THROW(embedding_forward(out, device_ids(ids), wte));
  try {
    check_device_errors(kGpu);
    FAIL() << "an id equal to V was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("embedding_forward: token 37 has id 100"), std::string::npos) << e.what();
  }
  ids[37] = 3;  // the error slot was cleared: a good call passes
  EXPECT_NO_THROW(embedding_forward(out, device_ids(ids), wte));
  EXPECT_NO_THROW(check_device_errors(kGpu));
}

// ---- RMSNorm ------------------------------------------------------------------------------

TEST_F(CudaOps, RmsnormDweightDeterministic) {
  const int64_t T = 2000, C = 384;
  Tensor x = device_tensor({T, C}, random_vector(T * C, 14), DType::kBF16);
  Tensor w = device_tensor({C}, random_vector(C, 15), DType::kBF16);
  Tensor dy = device_tensor({T, C}, random_vector(T * C, 16), DType::kBF16);
  Tensor y = poisoned({T, C}, DType::kBF16), r = poisoned({T}, DType::kF32), dx = poisoned({T, C}, DType::kBF16);
  rmsnorm_forward(y, r, x, w, 1e-6f);
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    Tensor dw = device_tensor({C}, std::vector<float>(C, 0.25f), DType::kF32);
    rmsnorm_backward(dx, dw, dy, x, w, r);
    std::vector<float> now = host(dw);
    if (run == 0) first = now;
    EXPECT_TRUE(bitwise_equal(first, now)) << "run " << run << " differs from run 0";
  }
}

// ---- SwiGLU -------------------------------------------------------------------------------

// A view that starts 24 bytes into its storage takes the unaligned (scalar) path.
TEST_F(CudaOps, SwigluMisalignedView) {
  const int64_t T = 40, F = 12;
  const auto g = random_vector((T + 1) * F, 22, -4.f, 4.f), u = random_vector((T + 1) * F, 23);
  Tensor gg = device_tensor({T + 1, F}, g, DType::kBF16).rows(1, T + 1);
  Tensor gu = device_tensor({T + 1, F}, u, DType::kBF16).rows(1, T + 1);
  Tensor gy_full = poisoned({T + 1, F}, DType::kBF16);
  Tensor gy = gy_full.rows(1, T + 1);
  swiglu_forward(gy, gg, gu);
  const std::vector<float> g1(g.begin() + F, g.end()), u1(u.begin() + F, u.end());
  std::vector<double> ref(T * F);
  cpu::swiglu_forward<double>(ref.data(), to_double(g1).data(), to_double(u1).data(), T * F);
  Tensor by = Tensor::empty({T, F}, DType::kF32);
  swiglu_forward(by, host_f32({T, F}, stored(g1, DType::kBF16)), host_f32({T, F}, stored(u1, DType::kBF16)));
  expect_within_2x("swiglu misaligned view", host(gy), stored(by.to_f32_vector(), DType::kBF16), ref);
  const std::vector<float> row0 = host(gy_full.rows(0, 1));  // outside the view: untouched poison
  for (float v : row0) EXPECT_TRUE(std::isnan(v)) << "swiglu wrote outside its view";
}

// The backward in place (dgate over gate, dup over up and the forward's output again over dout, as the model's MLP
// backward calls it), on the packed and the scalar path (F 12: 480 elements, F 13: an odd count), bitwise the
// out-of-place result and that output bitwise swiglu_forward's.
TEST_F(CudaOps, SwigluBackwardInPlaceIsBitwiseOutOfPlace) {
  for (const int64_t F : {12, 13}) {
    const int64_t T = 40;
    const auto g = random_vector(T * F, 24, -4.f, 4.f), u = random_vector(T * F, 25), d = random_vector(T * F, 26);
    Tensor gg = device_tensor({T, F}, g, DType::kBF16), gu = device_tensor({T, F}, u, DType::kBF16);
    Tensor gd = device_tensor({T, F}, d, DType::kBF16);
    Tensor dg = Tensor::empty({T, F}, DType::kBF16, kGpu), du = Tensor::empty({T, F}, DType::kBF16, kGpu);
    Tensor h = Tensor::empty({T, F}, DType::kBF16, kGpu);
    swiglu_forward(h, gg, gu);
    swiglu_backward(dg, du, gd, gg, gu);
    swiglu_backward(gg, gu, gd, gg, gu, &gd);
    EXPECT_TRUE(bitwise_equal(host(dg), host(gg))) << "F=" << F << ": d(gate)";
    EXPECT_TRUE(bitwise_equal(host(du), host(gu))) << "F=" << F << ": d(up)";
    EXPECT_TRUE(bitwise_equal(host(h), host(gd))) << "F=" << F << ": h again";
  }
}

// ---- matmul -------------------------------------------------------------------------------

struct MatmulCase {
  int64_t M, N, K;
};

// One matmul's inputs and references, computed once and checked against any number of CUDA runs
// (autotune on or off, every candidate of the pool): the double reference on the original inputs
// and the CPU f32 baseline on inputs stored like the CUDA ones (the 2x rule).
class MatmulCheck {
 public:
  MatmulCheck(DType in_dt, DType out_dt, const MatmulCase& c, bool ta, bool tb, float alpha, float beta)
      : in_dt_(in_dt), out_dt_(out_dt), c_(c), ta_(ta), tb_(tb), alpha_(alpha), beta_(beta) {
    const auto [M, N, K] = c;
    what_ = "matmul in " + std::string(dtype_name(in_dt)) + " out " + std::string(dtype_name(out_dt)) +
            " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
            " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta);
    sa_ = ta ? Shape{K, M} : Shape{M, K};
    sb_ = tb ? Shape{N, K} : Shape{K, N};
    a_ = random_vector(M * K, 30 + M);
    b_ = random_vector(K * N, 31 + N);
    c0_ = random_vector(M * N, 32);
    ref_ = to_double(c0_);
    cpu::matmul_reference<double>(ref_.data(), to_double(a_).data(), to_double(b_).data(), M, N, K, ta, tb, alpha,
                                  beta);
    Tensor base = host_f32({M, N}, stored(c0_, out_dt));
    matmul(base, host_f32(sa_, stored(a_, in_dt)), host_f32(sb_, stored(b_, in_dt)), ta, tb, alpha, beta);
    base_ = stored(base.to_f32_vector(), out_dt);
    da_ = device_tensor(sa_, a_, in_dt);
    db_ = device_tensor(sb_, b_, in_dt);
  }

  // A fresh output: beta == 0 makes out write-only, so its NaN poison must not leak in.
  Tensor make_out() const {
    return beta_ == 0.f ? poisoned({c_.M, c_.N}, out_dt_) : device_tensor({c_.M, c_.N}, c0_, out_dt_);
  }
  std::vector<cuda_ops::MatmulConfig> candidates() const {
    Tensor out = make_out();
    return cuda_ops::matmul_candidates(out, da_, db_, ta_, tb_);
  }
  // One CUDA run under the current matmul settings, checked.
  void run(const std::string& label) const {
    Tensor out = make_out();
    matmul(out, da_, db_, ta_, tb_, alpha_, beta_);
    expect_within_2x(what_ + label, host(out), base_, ref_);
  }
  const std::string& what() const { return what_; }

 private:
  DType in_dt_, out_dt_;
  MatmulCase c_;
  bool ta_, tb_;
  float alpha_, beta_;
  std::string what_;
  Shape sa_, sb_;
  std::vector<float> a_, b_, c0_, base_;
  std::vector<double> ref_;
  Tensor da_, db_;
};

// Restores matmul's settings (the policy, the forced candidate) at scope exit, failed or not.
class MatmulSettings {
 public:
  MatmulSettings() : policy_(matmul_policy()) {}
  ~MatmulSettings() {
    set_matmul_policy(policy_);
    cuda_ops::set_matmul_forced_candidate(-1);
  }

 private:
  MatmulPolicy policy_;
};

// The heuristic first pick and the autotuned choice, on every transpose combination and dtype.
TEST_F(CudaOps, Matmul) {
  MatmulSettings settings;
  set_matmul_policy({matmul_policy().autotune, 10});
  const MatmulCase cases[] = {{96, 80, 72}, {33, 17, 29}, {256, 128, 1000}};
  for (const auto& c : cases) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const MatmulCheck checks[] = {
            {DType::kBF16, DType::kBF16, c, ta, tb, 1.f, 0.f},
            {DType::kBF16, DType::kF32, c, ta, tb, 0.5f, 1.f},  // dW += dy^T x
            {DType::kBF16, DType::kBF16, c, ta, tb, 0.7f, 0.5f},
            {DType::kF32, DType::kF32, c, ta, tb, 1.f, 0.f},  // true f32 (TF32 would fail)
        };
        for (const MatmulCheck& check : checks) {
          for (bool tune : {false, true}) {
            set_matmul_policy({tune, matmul_policy().autotune_budget_ms});
            check.run(tune ? " autotuned" : " heuristic");
            const cuda_ops::MatmulTuning t = cuda_ops::last_matmul_tuning();
            EXPECT_EQ(t.autotuned, tune) << check.what();
            if (tune) {
              EXPECT_GE(t.timed, 1) << check.what();
              EXPECT_LE(t.timed, t.candidates) << check.what();
            }
          }
        }
      }
    }
  }
}

// The linear entries run cuBLASLt's epilogues where they apply (the harness's linear cases check
// the values on both paths): the bias, GELU and GELU' (tanh form) on rows of a multiple of 8
// elements (checked in bf16); the erf form, no bias and other rows unfused.
TEST_F(CudaOps, LinearEpiloguesRunFusedWhereTheyApply) {
  MatmulSettings settings;
  for (DType dt : kFloatTypes) {
    for (bool tune : {false, true}) {
      set_matmul_policy({tune, 10});
      for (int64_t N : {256, 20}) {
        const int64_t T = 192, K = 128;
        const bool aligned = N % 8 == 0;
        const std::string what = std::string(dtype_name(dt)) + " N=" + std::to_string(N) + (tune ? " autotuned" : "");
        // The fused path where it applies (f32: whether cuBLASLt has the f32 epilogue kernels is
        // its business; unfused is correct too), the unfused one where it does not.
        auto expect_fused = [&](bool applies, const char* call) {
          if (dt == DType::kBF16 || !applies) {
            EXPECT_EQ(cuda_ops::last_linear_fused(), applies) << call << " " << what;
          }
        };
        Tensor x = device_tensor({T, K}, random_vector(T * K, 1), dt);
        Tensor w = device_tensor({N, K}, random_vector(N * K, 2), dt);
        Tensor b = device_tensor({N}, random_vector(N, 3), dt);
        Tensor y = poisoned({T, N}, dt), pre = poisoned({T, N}, dt);
        linear_forward(y, x, w, &b);
        if (aligned) expect_fused(true, "bias");
        linear_forward(y, x, w, nullptr);
        expect_fused(false, "no bias");
        linear_gelu_forward(y, pre, x, w, &b, GeluKind::kTanh);
        expect_fused(aligned, "gelu tanh");
        linear_gelu_forward(y, pre, x, w, nullptr, GeluKind::kTanh);
        expect_fused(aligned, "gelu tanh, no bias");
        linear_gelu_forward(y, pre, x, w, &b, GeluKind::kErf);
        expect_fused(false, "gelu erf");
        Tensor dy = device_tensor({T, K}, random_vector(T * K, 4), dt), dpre = poisoned({T, N}, dt);
        Tensor w2 = device_tensor({K, N}, random_vector(K * N, 5), dt);  // a down projection [C, F]
        linear_backward_gelu(dpre, dy, w2, pre, GeluKind::kTanh);
        expect_fused(aligned, "dgelu tanh");
        linear_backward_gelu(dpre, dy, w2, pre, GeluKind::kErf);
        expect_fused(false, "dgelu erf");
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      }
    }
  }
}

// Every candidate of the pool, forced one by one, computes the same product: both families, the
// heuristic's split-K configurations and matmul's own split-K variants of long-K shapes (the
// weight gradients, K = tokens). The pool's [0] is what autotune-off runs.
TEST_F(CudaOps, MatmulEveryCandidate) {
  MatmulSettings settings;
  struct Case {
    DType in, out;
    MatmulCase c;
    bool ta, tb;
    float alpha, beta;
    bool long_k;
  };
  const Case cases[] = {
      {DType::kBF16, DType::kF32, {64, 96, 8192}, true, false, 0.5f, 1.f, true},   // wgrad: dW += dy^T x
      {DType::kBF16, DType::kBF16, {64, 96, 8192}, true, false, 1.f, 0.f, true},   // wgrad, bf16 out
      {DType::kF32, DType::kF32, {48, 64, 4096}, true, false, 1.f, 0.f, true},     // f32 long K
      {DType::kBF16, DType::kBF16, {200, 96, 256}, false, true, 1.f, 0.f, false},  // fwd: y = x W^T
      {DType::kBF16, DType::kBF16, {128, 160, 192}, false, false, 0.7f, 0.5f, false},  // dgrad: dx = dy W
  };
  for (const Case& k : cases) {
    const MatmulCheck check(k.in, k.out, k.c, k.ta, k.tb, k.alpha, k.beta);
    const std::vector<cuda_ops::MatmulConfig> pool = check.candidates();
    ASSERT_FALSE(pool.empty()) << check.what();
    int swapped = 0, split = 0;
    for (const auto& cfg : pool) {
      swapped += cfg.family == cuda_ops::MatmulFamily::kSwapped;
      split += cfg.split_k > 1;
    }
    std::printf("%s: %zu candidates, %d swapped, %d split-K\n", check.what().c_str(), pool.size(), swapped, split);
    EXPECT_EQ(pool[0].family, cuda_ops::MatmulFamily::kDirect) << check.what();
    EXPECT_GT(swapped, 0) << check.what() << ": cuBLASLt offered no algorithm with a row-major D";
    if (k.long_k) {
      EXPECT_GT(split, 0) << check.what() << ": no split-K candidate for a long-K shape";
    }
    for (size_t i = 0; i < pool.size(); ++i) {
      cuda_ops::set_matmul_forced_candidate(static_cast<int>(i));
      const std::string cfg = cuda_ops::matmul_config_str(pool[i]);
      const std::string label = " candidate " + std::to_string(i) + " (" + cfg + ")";
      EXPECT_NO_THROW(check.run(label)) << check.what() << label;
      EXPECT_EQ(cuda_ops::matmul_config_str(cuda_ops::last_matmul_tuning().chosen), cfg) << check.what();
    }
    cuda_ops::set_matmul_forced_candidate(-1);
    for (bool tune : {false, true}) {
      set_matmul_policy({tune, matmul_policy().autotune_budget_ms});
      check.run(tune ? " autotuned" : " heuristic");
      const cuda_ops::MatmulTuning t = cuda_ops::last_matmul_tuning();
      EXPECT_EQ(t.autotuned, tune) << check.what();
      if (!tune) {
        EXPECT_EQ(cuda_ops::matmul_config_str(t.chosen), cuda_ops::matmul_config_str(pool[0])) << check.what();
      }
    }
  }
  EXPECT_THROW(cuda_ops::set_matmul_forced_candidate(-2), Error);
}

// The tuning stays within its budget: on a GEMM whose whole pool takes far longer than the budget
// to time, the first pass stops early and the total is about the budget (one candidate's first
// runs, lazy module loading included, may overrun it).
TEST_F(CudaOps, MatmulAutotuneBudget) {
  MatmulSettings settings;
  const double budget = 5;
  set_matmul_policy({true, budget});
  const int64_t n = 4096;  // 137 GFLOP: ~0.2 ms a run on an H200, the pool of ~64+ would take > 25 ms
  Tensor a = device_tensor({n, n}, random_vector(n * n, 40), DType::kBF16);
  Tensor b = device_tensor({n, n}, random_vector(n * n, 41), DType::kBF16);
  Tensor out = Tensor::empty({n, n}, DType::kBF16, kGpu);
  const size_t pool = cuda_ops::matmul_candidates(out, a, b, false, false).size();
  matmul(out, a, b, false, false);
  const cuda_ops::MatmulTuning t = cuda_ops::last_matmul_tuning();
  std::printf("budget %.1f ms: tuned in %.1f ms, %d of %d candidates timed, chose %s (%.4f ms; first pick %.4f ms)\n",
              budget, t.tune_ms, t.timed, t.candidates, cuda_ops::matmul_config_str(t.chosen).c_str(), t.best_ms,
              t.heuristic_ms);
  EXPECT_TRUE(t.autotuned);
  EXPECT_EQ(t.candidates, static_cast<int>(pool));
  EXPECT_GE(t.timed, 1);
  if (t.candidates >= 16) {
    EXPECT_LT(t.timed, t.candidates) << "the budget did not stop the first pass";
  }
  EXPECT_LT(t.tune_ms, budget + 50) << "tuning overran its budget";
  EXPECT_GT(t.best_ms, 0);
  // The first pick may leave the race early with fewer samples; its median stays a fair yardstick.
  EXPECT_LE(t.best_ms, t.heuristic_ms * 1.1) << "tuning chose a candidate slower than the first pick";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// ---- cross-entropy ------------------------------------------------------------------------

TEST_F(CudaOps, CrossEntropyBadTargetThrowsAndRecovers) {
  const int64_t T = 16, V = 64;
  Tensor logits = device_tensor({T, V}, random_vector(T * V, 42), DType::kBF16);
  std::vector<int32_t> targets = random_ints(T, 43, 0, V);
  targets[11] = -5;
  Tensor losses = poisoned({T}, DType::kF32), dlogits = poisoned({T, V}, DType::kBF16);
  for (bool backward : {false, true}) {
    try {
      if (backward) {
        cross_entropy_backward(dlogits, logits, device_ids(targets), 1.f);
      } else {
        cross_entropy_forward(losses, logits, device_ids(targets));
      }
      check_device_errors(kGpu);
      FAIL() << "target -5 was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(backward ? "cross_entropy_backward" : "cross_entropy_forward") +
                                           ": token 11 has target -5"),
                std::string::npos)
          << e.what();
    }
  }
  targets[11] = kIgnoreIndex;
  EXPECT_NO_THROW(cross_entropy_forward(losses, logits, device_ids(targets)));
  EXPECT_NO_THROW(check_device_errors(kGpu));
  EXPECT_EQ(host(losses)[11], 0.f);
}

// ---- elementwise --------------------------------------------------------------------------

TEST_F(CudaOps, SumSquaresDeterministicDouble) {
  const int64_t n = 1000003;
  for (DType dt : kFloatTypes) {
    const auto x = stored(random_vector(n, 52, -3.f, 3.f), dt);
    const double expect = cpu::sum_squares<double>(to_double(x).data(), n);
    Tensor gx = device_tensor({n}, x, dt);
    const double got = sum_squares(gx);
    // Squares of f32 values are exact in double: only the order of n additions differs.
    EXPECT_NEAR(got, expect, 1e-12 * expect) << dtype_name(dt);
    const double again = sum_squares(gx);
    EXPECT_EQ(std::memcmp(&got, &again, sizeof(double)), 0) << "sum_squares is not reproducible";
  }
  EXPECT_EQ(sum_squares(Tensor::empty({0}, DType::kBF16, kGpu)), 0.0);
}

TEST_F(CudaOps, CastRoundsToNearestEven) {
  const int64_t n = 1001;
  auto x = random_vector(n, 53, -100.f, 100.f);
  x[0] = 1.f + 1.f / 256.f;  // a tie: rounds to even (1.0)
  x[1] = 1.f + 3.f / 256.f;  // a tie: rounds to even (1 + 4/256)
  Tensor in = device_tensor({n}, x, DType::kF32), out = poisoned({n}, DType::kBF16);
  cuda_ops::cast(out, in);
  Tensor h = out.to(Device::cpu());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(h.data<bf16>()[i].bits, f32_to_bf16(x[i]).bits) << "element " << i << " = " << x[i];
  Tensor back = poisoned({n}, DType::kF32);
  cuda_ops::cast(back, out);
  EXPECT_TRUE(bitwise_equal(host(back), stored(x, DType::kBF16)));
}

// The GPU's normal_fill draws the CPU's values (the initial weights of a GPU run are drawn there):
// f32 equal but for the rare last-bit difference of the two libm's double log / cos / sin (at most one
// f32 ulp, on at most 1 in 10^5 elements), bf16 the rounding of those; an odd length and an offset.
TEST_F(CudaOps, NormalFillDrawsTheCpusValues) {
  const int64_t n = (1 << 20) + 3, offset = 1000;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Tensor cpu = Tensor::empty({n}, dt, Device::cpu());
    normal_fill(cpu, 12345, 0.02f, offset);
    Tensor gpu = poisoned({n}, dt);
    normal_fill(gpu, 12345, 0.02f, offset);
    Tensor got = gpu.to(Device::cpu());
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float a = dt == DType::kF32 ? cpu.data<float>()[i] : bf16_to_f32(cpu.data<bf16>()[i]);
      const float b = dt == DType::kF32 ? got.data<float>()[i] : bf16_to_f32(got.data<bf16>()[i]);
      ASSERT_TRUE(std::isfinite(b)) << dtype_name(dt) << " element " << i;
      if (a == b) continue;
      ++differ;
      const float ulp = std::nextafter(std::fabs(a), INFINITY) - std::fabs(a);
      ASSERT_LE(std::fabs(a - b), (dt == DType::kF32 ? 1.f : 256.f) * ulp) << dtype_name(dt) << " element " << i;
    }
    std::printf("normal_fill %s: %lld of %lld elements differ from the CPU's\n", std::string(dtype_name(dt)).c_str(),
                static_cast<long long>(differ), static_cast<long long>(n));
    EXPECT_LE(differ, n / 100000) << dtype_name(dt);
  }
}

// ---- streams ------------------------------------------------------------------------------

// Work queued on a side stream under StreamGuard, ordered back with an Event.
TEST_F(CudaOps, SideStreamWithEvent) {
  const int64_t n = 1 << 20;
  const auto x = random_vector(n, 70);
  Tensor y = device_tensor({n}, x, DType::kF32);
  Stream side;
  Event ready;
  {
    StreamGuard guard(side.get());
    EXPECT_EQ(current_stream(), side.get());
    scale_inplace(y, 2.f);
    ready.record();
  }
  EXPECT_EQ(current_stream(), nullptr);
  Stream(side.device()).wait(ready);  // a second stream may wait on it too
  ready.synchronize();
  EXPECT_TRUE(ready.query());
  const std::vector<float> got = host(y);
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(got[i], 2.f * x[i]);
  void* p = pinned_host_allocator().allocate(1000);
  EXPECT_NE(p, nullptr);
  cudaPointerAttributes attr{};
  EXPECT_EQ(cudaPointerGetAttributes(&attr, p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  pinned_host_allocator().deallocate(p, 1000);
}

}  // namespace
}  // namespace seqpar
