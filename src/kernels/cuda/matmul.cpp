// matmul through cuBLASLt: bf16 (or f32) operands, f32 accumulation, bf16 or f32 output.
//
// ops.h is row-major: out[M, N] = alpha * op(a) @ op(b) + beta * out. cuBLASLt is column-major,
// and a row-major [R, C] matrix is the column-major [C, R] matrix of the same bytes. So the
// row-major product is computed as its transpose, column-major:
//   out^T [N, M] = op(b)^T [N, K] @ op(a)^T [K, M]
// i.e. cuBLASLt's A is b (transposed iff trans_b), its B is a (transposed iff trans_a), m = N,
// n = M, and every leading dimension is the row length of the row-major tensor.
#include <cublasLt.h>

#include <cmath>
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/cuda/stream.h"
#include "core/cuda_check.h"
#include "core/tensor.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/ops_cuda.h"

#define SEQPAR_CUBLASLT_CHECK(stmt) SEQPAR_LIB_CHECK(stmt, CUBLAS_STATUS_SUCCESS, cublasLtGetStatusName)

namespace seqpar::cuda_ops {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// Largest power of two (up to 256) that divides the address: cuBLASLt picks kernels by it.
int alignment_of(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && (a % align) != 0) align /= 2;
  return align;
}

cudaDataType_t cuda_type(DType d) { return d == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F; }

// One shape's descriptors and chosen algorithm.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A, B, C (= D)
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {  // no checks: may run at exit, after the driver has gone
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// Everything the descriptors and the heuristic depend on.
using PlanKey = std::tuple<int64_t, int64_t, int64_t, bool, bool, DType, DType, int64_t, int64_t, int64_t, int, int,
                           int, bool>;  // m, n, k, transa, transb, in, out, lda, ldb, ldc, align a/b/c, autotune

constexpr int kCandidates = 8;  // heuristic results considered when autotuning

std::atomic<bool> g_autotune{false};

// Per thread and device: the handle, a 32 MiB workspace (per thread, because two threads on two
// streams must not share one), and the plan cache.
struct LtContext {
  int device = 0;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;

  explicit LtContext(int dev) : device(dev) {
    SEQPAR_CUBLASLT_CHECK(cublasLtCreate(&handle));
    workspace = allocator_for(Device::cuda(dev)).allocate(kWorkspaceBytes);
  }
  ~LtContext() {
    plans.clear();
    if (workspace) allocator_for(Device::cuda(device)).deallocate(workspace, kWorkspaceBytes);
    if (handle) cublasLtDestroy(handle);
  }
};

LtContext& lt_context(int device) {
  thread_local std::map<int, std::unique_ptr<LtContext>> contexts;
  auto& ctx = contexts[device];
  if (!ctx) ctx = std::make_unique<LtContext>(device);
  return *ctx;
}

// Times one algorithm: median of 5 runs after one warm-up; infinity if it fails to launch.
float time_algo(LtContext& ctx, const Plan& plan, const cublasLtMatmulAlgo_t& algo, size_t workspace,
                const void* A, const void* B, void* D, cudaStream_t stream) {
  const float alpha = 1.f, beta = 0.f;
  auto run = [&] {
    return cublasLtMatmul(ctx.handle, plan.desc, &alpha, A, plan.a, B, plan.b, &beta, D, plan.c, D, plan.c, &algo,
                          ctx.workspace, workspace, stream);
  };
  if (run() != CUBLAS_STATUS_SUCCESS) return INFINITY;
  std::vector<float> ms;
  Event start(true), stop(true);
  for (int i = 0; i < 5; ++i) {
    start.record(stream);
    if (run() != CUBLAS_STATUS_SUCCESS) return INFINITY;
    stop.record(stream);
    stop.synchronize();
    ms.push_back(stop.elapsed_ms(start));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Builds the descriptors of a shape and picks its algorithm: the heuristic's first choice, or with
// autotuning the fastest of its first kCandidates, timed on the call's own operands (A, B) with a
// scratch output (beta = 0), so the caller's out is untouched.
const Plan& get_plan(LtContext& ctx, const PlanKey& key, const void* A, const void* B, cudaStream_t stream) {
  auto it = ctx.plans.find(key);
  if (it != ctx.plans.end()) return *it->second;
  const auto [m, n, k, transa, transb, in_dt, out_dt, lda, ldb, ldc, align_a, align_b, align_c, autotune] = key;
  auto plan = std::make_unique<Plan>();
  SEQPAR_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t op_a = transa ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  SEQPAR_CUBLASLT_CHECK(
      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  SEQPAR_CUBLASLT_CHECK(
      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  // Column-major layouts: A is m x k (stored k x m when transposed), B is k x n (n x k), C is m x n.
  SEQPAR_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan->a, cuda_type(in_dt), transa ? k : m, transa ? m : k, lda));
  SEQPAR_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan->b, cuda_type(in_dt), transb ? n : k, transb ? k : n, ldb));
  SEQPAR_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan->c, cuda_type(out_dt), m, n, ldc));

  cublasLtMatmulPreference_t pref = nullptr;
  SEQPAR_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = kWorkspaceBytes;
  uint32_t aa = align_a, ab = align_b, ac = align_c;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                           sizeof(ws));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof(ac));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof(ac));
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(ctx.handle, plan->desc, plan->a, plan->b, plan->c, plan->c, pref,
                                        autotune ? kCandidates : 1, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  SEQPAR_CUBLASLT_CHECK(st);
  SEQPAR_CHECK(found > 0,
               "cuBLASLt has no algorithm for m={} n={} k={} transa={} transb={} in={} out={} lda={} ldb={} ldc={} "
               "(alignments {}/{}/{} bytes)",
               m, n, k, transa, transb, dtype_name(in_dt), dtype_name(out_dt), lda, ldb, ldc, align_a, align_b,
               align_c);
  int best = 0;
  if (found > 1) {
    Allocator& pool = allocator_for(Device::cuda(ctx.device));
    const size_t out_bytes = static_cast<size_t>(ldc) * static_cast<size_t>(n) * dtype_size(out_dt);
    void* scratch = pool.allocate(out_bytes);
    float best_ms = INFINITY;
    for (int i = 0; i < found; ++i) {
      const float ms = time_algo(ctx, *plan, results[i].algo, results[i].workspaceSize, A, B, scratch, stream);
      if (ms < best_ms) {
        best_ms = ms;
        best = i;
      }
    }
    pool.deallocate(scratch, out_bytes);  // the stream has been synchronised by the timing
  }
  plan->algo = results[best].algo;
  plan->workspace = results[best].workspaceSize;
  return *(ctx.plans[key] = std::move(plan));
}

}  // namespace

void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta) {
  SEQPAR_CHECK(out.defined() && a.defined() && b.defined(), "matmul: undefined tensor");
  SEQPAR_CHECK(out.device().is_cuda() && a.device() == out.device() && b.device() == out.device(),
               "matmul: tensors must be on one CUDA device: out {}, a {}, b {}", out.str(), a.str(), b.str());
  SEQPAR_CHECK(out.ndim() == 2 && a.ndim() == 2 && b.ndim() == 2, "matmul: 2-D tensors only: out {}, a {}, b {}",
               out.str(), a.str(), b.str());
  SEQPAR_CHECK(a.dtype() == b.dtype() && (a.dtype() == DType::kBF16 || a.dtype() == DType::kF32),
               "matmul: a and b must both be bf16 or both f32: a {}, b {}", a.str(), b.str());
  SEQPAR_CHECK(out.dtype() == DType::kF32 || (out.dtype() == DType::kBF16 && a.dtype() == DType::kBF16),
               "matmul: out must be f32, or bf16 with bf16 operands: out {}, a {}", out.str(), a.str());
  const int64_t M = trans_a ? a.dim(1) : a.dim(0), K = trans_a ? a.dim(0) : a.dim(1);
  const int64_t Kb = trans_b ? b.dim(1) : b.dim(0), N = trans_b ? b.dim(0) : b.dim(1);
  SEQPAR_CHECK(K == Kb && out.dim(0) == M && out.dim(1) == N,
               "matmul: op(a) is [{}, {}], op(b) is [{}, {}], out is {} (trans_a={}, trans_b={})", M, K, Kb, N,
               shape_str(out.shape()), trans_a, trans_b);
  if (M == 0 || N == 0) return;
  int prev = 0;
  SEQPAR_CUDA_CHECK(cudaGetDevice(&prev));
  const int dev = out.device().index;
  if (prev != dev) SEQPAR_CUDA_CHECK(cudaSetDevice(dev));
  cudaStream_t stream = current_stream();
  if (K == 0) {  // an empty sum: out = beta * out
    if (beta == 0.f) {
      SEQPAR_CUDA_CHECK(cudaMemsetAsync(out.raw(), 0, out.nbytes(), stream));
    } else {
      cuda_kernels::scale_inplace(out.raw(), out.dtype(), beta, out.numel(), stream);
    }
  } else {
    LtContext& ctx = lt_context(dev);
    // cuBLASLt's A = b, B = a (see the top of this file).
    const PlanKey key{N, M, K, trans_b, trans_a, a.dtype(), out.dtype(), b.dim(1), a.dim(1), out.dim(1),
                      alignment_of(b.raw()), alignment_of(a.raw()), alignment_of(out.raw()),
                      g_autotune.load(std::memory_order_relaxed)};
    const Plan& plan = get_plan(ctx, key, b.raw(), a.raw(), stream);
    SEQPAR_CUBLASLT_CHECK(cublasLtMatmul(ctx.handle, plan.desc, &alpha, b.raw(), plan.a, a.raw(), plan.b, &beta,
                                         out.raw(), plan.c, out.raw(), plan.c, &plan.algo, ctx.workspace,
                                         plan.workspace, stream));
  }
  if (prev != dev) SEQPAR_CUDA_CHECK(cudaSetDevice(prev));
}

void set_matmul_autotune(bool on) { g_autotune = on; }

}  // namespace seqpar::cuda_ops
