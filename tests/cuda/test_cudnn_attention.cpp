// cuDNN fused attention (attention/cuda/cudnn_sdpa.h) beyond the op harness's cases (every
// attention case runs on cuDNN's dense and ragged graphs and `auto` where packed_docs says cuDNN is
// exact, in test_cuda_op_harness.cpp): the graphs against an H200 description without a GPU, the
// fallback to the flash kernel where cuDNN is not exact, auto's per-direction pairs, cuDNN against the
// flash kernel and its dense graph against its ragged one on long sequences. Which path ran is what
// each call reports (AttnArgs::ran).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention/attention_backend.h"
#include "attention/cuda/attention_cuda.h"
#include "attention/cuda/attn_launch.h"
#include "attention/cuda/cudnn_sdpa.h"
#include "cli/bench_attention.h"
#include "core/log.h"
#include "core/tensor.h"
#include "cuda/cuda_test_util.h"
#include "ops/op_harness.h"

namespace seqpar {
namespace {

using namespace optest;
using testing::have_gpu;
constexpr double kInf = std::numeric_limits<double>::infinity();
const Device kGpu = Device::cuda(0);

Tensor bf16_on_gpu(const std::vector<float>& v, const Shape& shape) {
  return make_tensor(shape, v, DType::kBF16, kGpu);
}

// The policy of a backend name ("cudnn", "auto", "flash"), cuDNN's graph of one document as
// `dense` says. SEQPAR_TEST_DEBUG=1 turns on debug logging (plan builds, fallbacks).
AttentionPolicy policy_for(const char* backend, CudnnDense dense = CudnnDense::kOn) {
  if (std::getenv("SEQPAR_TEST_DEBUG") != nullptr) set_log_level(LogLevel::kDebug);
  AttentionPolicy p;
  p.backend = parse_attention_backend(backend);
  p.cudnn_dense = dense;
  return p;
}

bool on_cudnn(AttnPath p) { return p == AttnPath::kCudnnDense || p == AttnPath::kCudnnRagged; }

// What one forward (args fa) and backward (args ba, kWrite) wrote, every output NaN-poisoned first, and the
// paths that ran.
struct FwdBwd {
  std::vector<float> out, lse, dq, dk, dv;
  AttnPath fwd = AttnPath::kNone, bwd = AttnPath::kNone;
};
FwdBwd fwd_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, AttnArgs fa, AttnArgs ba) {
  FwdBwd r;
  fa.ran = &r.fwd;
  ba.ran = &r.bwd;
  const int64_t T = q.dim(0), H = q.dim(1), Hkv = k.dim(1), D = q.dim(2);
  Tensor out = poisoned({T, H, D}, DType::kBF16, kGpu), lse = poisoned({T, H}, DType::kF32, kGpu);
  Tensor dq = poisoned({T, H, D}, DType::kBF16, kGpu), dk = poisoned({T, Hkv, D}, DType::kBF16, kGpu);
  Tensor dv = poisoned({T, Hkv, D}, DType::kBF16, kGpu);
  cuda_attn::attn_forward(out, lse, q, k, v, fa);
  cuda_attn::attn_backward(dq, dk, dv, dout, q, k, v, out, lse, ba, GradMode::kWrite);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  r.out = out.to_f32_vector();
  r.lse = lse.to_f32_vector();
  r.dq = dq.to_f32_vector();
  r.dk = dk.to_f32_vector();
  r.dv = dv.to_f32_vector();
  return r;
}

// Two computations of the same call, each within bf16 rounding of the exact result, agree to about that.
void expect_bf16_agreement(const FwdBwd& a, const FwdBwd& b, const std::string& what) {
  auto rel = [](const std::vector<float>& x, const std::vector<float>& y) {
    return rel_l2(to_double(x), to_double(y));
  };
  EXPECT_LT(rel(a.out, b.out), 1e-2) << what;
  EXPECT_LT(rel(a.dq, b.dq), 2e-2) << what;  // rel_l2 is infinite if a NaN or a poisoned value was left anywhere
  EXPECT_LT(rel(a.dk, b.dk), 2e-2) << what;
  EXPECT_LT(rel(a.dv, b.dv), 2e-2) << what;
}

// The graphs against an H200's description (cuDNN's device-properties JSON), built without using
// the GPU: cuDNN's heuristics must offer engines for them and compile their kernels; a graph it
// does not recognise fails earlier, with NOT_SUPPORTED_GRAPH_PATTERN. Needs the CUDA driver
// library (cuDNN compiles through it); where that library is a stub (no GPU), only the final
// module load may fail. With a GPU present the outcome is printed, not judged (cuDNN may check
// the description against the real device): the live tests below cover that machine.
TEST(CudnnAttention, GraphsBuildForH200Offline) {
  if (cuda_attn::cudnn_runtime_version() == 0) GTEST_SKIP() << "built without cuDNN";
  if (dlopen("libcuda.so.1", RTLD_LAZY) == nullptr) GTEST_SKIP() << "no CUDA driver library";
  for (bool dense : {false, true}) {
    for (int64_t Hkv : {4, 1}) {
      // Ragged: 3 documents, the longest 200 tokens. Dense: one sequence of 300 tokens.
      const std::string r = cuda_attn::cudnn_check_plans_offline(
          cuda_attn::cudnn_h200_device_json(), dense ? 1 : 3, dense ? 300 : 200, 4, Hkv, 128, /*causal=*/true, dense);
      EXPECT_EQ(r.find("GRAPH_PATTERN"), std::string::npos) << r;
      if (!have_gpu()) {
        EXPECT_TRUE(r.empty() || r.find("cuLibraryLoadData") != std::string::npos) << r;
      }
      if (!r.empty()) {
        std::printf("%s Hkv=%lld: built up to the module load: %s\n", dense ? "dense" : "ragged",
                    static_cast<long long>(Hkv), r.c_str());
      }
    }
  }
}

// A ring step (one shard's queries against another shard's keys) is not one packed stream: the
// cudnn backend must hand it to the flash kernel. No cuDNN call, and bit for bit the flash result.
TEST(CudnnAttention, FallsBackToFlashForARingStep) {
  REQUIRE_GPU();
  const int64_t T = 256, H = 4, D = 64;
  const TokenMeta all = token_meta_from_cu_seqlens({0, static_cast<int32_t>(T)});
  const TokenMeta qm = all.rows(T / 2, T), km = all.rows(0, T / 2);
  Tensor q = bf16_on_gpu(random_values(T / 2 * H * D, 1), {T / 2, H, D});
  Tensor k = bf16_on_gpu(random_values(T / 2 * H * D, 2), {T / 2, H, D});
  Tensor v = bf16_on_gpu(random_values(T / 2 * H * D, 3), {T / 2, H, D});
  const AttnArgs args{qm, km, true, 0.125f};
  Tensor out_flash = poisoned({T / 2, H, D}, DType::kBF16, kGpu), lse_flash = poisoned({T / 2, H}, DType::kF32, kGpu);
  cuda_attn::attn_forward(out_flash, lse_flash, q, k, v, args);
  Tensor out = poisoned({T / 2, H, D}, DType::kBF16, kGpu), lse = poisoned({T / 2, H}, DType::kF32, kGpu);
  AttnPath ran = AttnPath::kNone;
  AttnArgs cudnn_args{qm, km, true, 0.125f, policy_for("cudnn")};
  cudnn_args.ran = &ran;
  cuda_attn::attn_forward(out, lse, q, k, v, cudnn_args);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_FALSE(on_cudnn(ran)) << attn_path_name(ran);
  EXPECT_EQ(out.to_f32_vector(), out_flash.to_f32_vector());
  EXPECT_EQ(lse.to_f32_vector(), lse_flash.to_f32_vector());
}

// Longer documents (several of cuDNN's tiles each, the longest padded from 1500 to 2048): cuDNN
// against the flash kernel on the same inputs. Both are within bf16 rounding of the exact result,
// so they differ by about that (relative L2 ~ 4e-3), never by a masking or layout mistake.
TEST(CudnnAttention, AgreesWithFlashOnLongDocuments) {
  REQUIRE_GPU();
  const std::vector<int32_t> cu = {0, 1500, 1501, 2560};
  const int64_t T = cu.back(), H = 8, Hkv = 2, D = 128;
  Tensor q = bf16_on_gpu(stored(random_values(T * H * D, 71, -1.5f, 1.5f), DType::kBF16), {T, H, D});
  Tensor k = bf16_on_gpu(stored(random_values(T * Hkv * D, 72, -1.5f, 1.5f), DType::kBF16), {T, Hkv, D});
  Tensor v = bf16_on_gpu(stored(random_values(T * Hkv * D, 73), DType::kBF16), {T, Hkv, D});
  Tensor dout = bf16_on_gpu(stored(random_values(T * H * D, 74), DType::kBF16), {T, H, D});
  const TokenMeta meta = token_meta_from_cu_seqlens(cu);
  const AttnArgs args{meta, meta, true, static_cast<float>(1.0 / std::sqrt(128.0))};
  struct Result {
    std::vector<float> out, lse, dq, dk, dv;
  };
  AttnPath fwd_ran = AttnPath::kNone, bwd_ran = AttnPath::kNone;
  auto run = [&](const char* backend) {
    AttnArgs fa = args, ba = args;
    fa.policy = ba.policy = policy_for(backend);
    fa.ran = &fwd_ran;
    ba.ran = &bwd_ran;
    Tensor out = poisoned({T, H, D}, DType::kBF16, kGpu), lse = poisoned({T, H}, DType::kF32, kGpu);
    Tensor dq = Tensor::zeros({T, H, D}, DType::kBF16, Device::cuda(0));
    Tensor dk = Tensor::zeros({T, Hkv, D}, DType::kBF16, Device::cuda(0));
    Tensor dv = Tensor::zeros({T, Hkv, D}, DType::kBF16, Device::cuda(0));
    cuda_attn::attn_forward(out, lse, q, k, v, fa);
    cuda_attn::attn_backward(dq, dk, dv, dout, q, k, v, out, lse, ba);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return Result{out.to_f32_vector(), lse.to_f32_vector(), dq.to_f32_vector(), dk.to_f32_vector(), dv.to_f32_vector()};
  };
  const Result c = run("cudnn");
  EXPECT_TRUE(on_cudnn(fwd_ran)) << attn_path_name(fwd_ran);
  EXPECT_TRUE(on_cudnn(bwd_ran)) << attn_path_name(bwd_ran);
  const Result f = run("flash");
  auto rel = [](const std::vector<float>& a, const std::vector<float>& b) {
    return rel_l2(to_double(a), to_double(b));
  };
  EXPECT_LT(rel(c.out, f.out), 1e-2);
  EXPECT_LT(rel(c.dq, f.dq), 2e-2);
  EXPECT_LT(rel(c.dk, f.dk), 2e-2);
  EXPECT_LT(rel(c.dv, f.dv), 2e-2);
  double worst = 0;
  for (size_t i = 0; i < c.lse.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(c.lse[i] - f.lse[i])));
  EXPECT_LT(worst, 1e-3);
}

// One long sequence (several of cuDNN's tiles, T not a multiple of 64) through the dense and the
// ragged graph, kWrite: both within bf16 rounding of the exact result, so they agree to about that.
TEST(CudnnAttention, DenseAgreesWithRaggedOnOneLongSequence) {
  REQUIRE_GPU();
  const int64_t T = 2001, H = 8, Hkv = 2, D = 128;
  Tensor q = bf16_on_gpu(stored(random_values(T * H * D, 81, -1.5f, 1.5f), DType::kBF16), {T, H, D});
  Tensor k = bf16_on_gpu(stored(random_values(T * Hkv * D, 82, -1.5f, 1.5f), DType::kBF16), {T, Hkv, D});
  Tensor v = bf16_on_gpu(stored(random_values(T * Hkv * D, 83), DType::kBF16), {T, Hkv, D});
  Tensor dout = bf16_on_gpu(stored(random_values(T * H * D, 84), DType::kBF16), {T, H, D});
  const TokenMeta meta = token_meta_from_cu_seqlens({0, static_cast<int32_t>(T)});
  const AttnArgs args{meta, meta, true, static_cast<float>(1.0 / std::sqrt(128.0))};
  auto run = [&](CudnnDense dense) {
    AttnArgs a = args;
    a.policy = policy_for("cudnn", dense);
    const FwdBwd r = fwd_bwd(q, k, v, dout, a, a);
    const AttnPath want = dense == CudnnDense::kOn ? AttnPath::kCudnnDense : AttnPath::kCudnnRagged;
    EXPECT_EQ(r.fwd, want) << attn_path_name(r.fwd);
    EXPECT_EQ(r.bwd, want) << attn_path_name(r.bwd);
    return r;
  };
  const FwdBwd d = run(CudnnDense::kOn), r = run(CudnnDense::kOff);
  expect_bf16_agreement(d, r, "dense against ragged");
  double worst = 0;
  for (size_t i = 0; i < d.lse.size(); ++i) {
    const bool finite = std::isfinite(d.lse[i]) && std::isfinite(r.lse[i]);
    worst = finite ? std::max(worst, static_cast<double>(std::abs(d.lse[i] - r.lse[i]))) : kInf;
    if (!finite) break;
  }
  EXPECT_LT(worst, 1e-3);
}

// auto chooses per direction (attention_backend.h's auto_runs_own_kernel): on one causal document of
// kAutoOwnKernelMinTokens tokens it runs the sm_90 kernel's forward with cuDNN's backward at D 128 and
// cuDNN's forward with the sm_90 kernel's backward at D 64, each backward reading the other backend's out
// and lse. Both mixes agree with all-cuDNN and all-flash to bf16 rounding; shorter, the same call stays on
// cuDNN both ways. (Off compute capability 9.0 auto stays on cuDNN: the paths are checked there too.)
TEST(CudnnAttention, AutoPairsBackendsPerDirection) {
  REQUIRE_GPU();
  if (cuda_attn::cudnn_runtime_version() == 0) GTEST_SKIP() << "built without cuDNN";
  const int cc = device_compute_capability(Device::cuda(0));
  for (int64_t D : {128, 64}) {
    SCOPED_TRACE("D=" + std::to_string(D));
    const int64_t T = kAutoOwnKernelMinTokens, H = 4, Hkv = 2;
    Tensor q = bf16_on_gpu(stored(random_values(T * H * D, 91, -1.5f, 1.5f), DType::kBF16), {T, H, D});
    Tensor k = bf16_on_gpu(stored(random_values(T * Hkv * D, 92, -1.5f, 1.5f), DType::kBF16), {T, Hkv, D});
    Tensor v = bf16_on_gpu(stored(random_values(T * Hkv * D, 93), DType::kBF16), {T, Hkv, D});
    Tensor dout = bf16_on_gpu(stored(random_values(T * H * D, 94), DType::kBF16), {T, H, D});
    // Forward with backend fb, backward with bb, on the first n tokens.
    auto run = [&](const char* fb, const char* bb, int64_t n) {
      const TokenMeta meta = token_meta_from_cu_seqlens({0, static_cast<int32_t>(n)});
      AttnArgs fa{meta, meta, true, static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))), policy_for(fb)};
      AttnArgs ba = fa;
      ba.policy = policy_for(bb);
      return fwd_bwd(q.rows(0, n), k.rows(0, n), v.rows(0, n), dout.rows(0, n), fa, ba);
    };
    const FwdBwd cudnn = run("cudnn", "cudnn", T), flash = run("flash", "flash", T);
    const FwdBwd auto_ = run("auto", "auto", T);
    const bool own_fwd = auto_runs_own_kernel(AttnDirection::kForward, D, T, true, cc);
    const bool own_bwd = auto_runs_own_kernel(AttnDirection::kBackward, D, T, true, cc);
    if (cc == 90) {
      EXPECT_EQ(own_fwd, D == 128);
      EXPECT_EQ(own_bwd, D == 64);
    }
    EXPECT_EQ(auto_.fwd, own_fwd ? AttnPath::kFlashWgmma : AttnPath::kCudnnDense) << attn_path_name(auto_.fwd);
    EXPECT_EQ(auto_.bwd, own_bwd ? AttnPath::kFlashWgmma : AttnPath::kCudnnDense) << attn_path_name(auto_.bwd);
    expect_bf16_agreement(auto_, cudnn, "auto against cuDNN");
    expect_bf16_agreement(auto_, flash, "auto against flash");
    // Both mixes, whatever auto picks on this device: each backward reads the other backend's out and lse.
    const FwdBwd fc = run("flash", "cudnn", T), cf = run("cudnn", "flash", T);
    EXPECT_TRUE(on_cudnn(fc.bwd) && !on_cudnn(fc.fwd) && on_cudnn(cf.fwd) && !on_cudnn(cf.bwd));
    expect_bf16_agreement(fc, cudnn, "flash forward, cuDNN backward");
    expect_bf16_agreement(cf, flash, "cuDNN forward, flash backward");
    // One token shorter than the rule's length: cuDNN both ways.
    const FwdBwd shorter = run("auto", "auto", T - 1);
    EXPECT_EQ(shorter.fwd, AttnPath::kCudnnDense) << attn_path_name(shorter.fwd);
    EXPECT_EQ(shorter.bwd, AttnPath::kCudnnDense) << attn_path_name(shorter.bwd);
  }
}

// The benchmark with --backend cudnn (--gtest_also_run_disabled_tests
// --gtest_filter='*Cudnn*DISABLED_Bench*'); settings from SEQPAR_BENCH_SEQ_LENS,
// SEQPAR_BENCH_HEAD_DIMS, SEQPAR_BENCH_PASSES, SEQPAR_BENCH_OUT.
TEST(CudnnAttention, DISABLED_Bench) {
  REQUIRE_GPU();
  BenchAttentionOptions o;
  o.backend = "cudnn";
  if (const char* e = std::getenv("SEQPAR_BENCH_SEQ_LENS")) o.seq_lens = e;
  if (const char* e = std::getenv("SEQPAR_BENCH_HEAD_DIMS")) o.head_dims = e;
  if (const char* e = std::getenv("SEQPAR_BENCH_PASSES")) o.passes = e;
  if (const char* e = std::getenv("SEQPAR_BENCH_OUT")) o.out = e;
  EXPECT_EQ(run_bench_attention(o), 0);
}

}  // namespace
}  // namespace seqpar
