// matmul through cuBLASLt: bf16 or f16 (or f32) operands, f32 accumulation, the operands' type or f32 output.
//
// ops.h is row-major: out[M, N] = alpha * op(a) @ op(b) + beta * out. cuBLASLt is column-major by
// default, and a row-major [R, C] matrix is the column-major [C, R] matrix of the same bytes. Two
// formulations write out's bytes, and cuBLASLt has different kernels for each (its kernels are
// specialised on the layouts), so they are two families of candidates:
//   direct:  out^T [N, M] = op(b)^T [N, K] @ op(a)^T [K, M], everything column-major: cuBLASLt's A
//            is b (transposed iff trans_b), its B is a (transposed iff trans_a), m = N, n = M;
//   swapped: out [M, N] = op(a) [M, K] @ op(b) [K, N] with D (and C) declared row-major
//            (CUBLASLT_ORDER_ROW): A is a read column-major, so transposed iff !trans_a, B is b,
//            transposed iff !trans_b, m = M, n = N.
// Every leading dimension is the row length of the row-major tensor.
//
// The choice per shape (a Plan, cached per thread and device for the process):
//  - heuristic: cuBLASLt's first pick for the direct family (pool[0]);
//  - autotune (kernels/matmul_policy.h, default on): on the shape's first call, time a pool of candidates: up to
//    kHeuristicRequest heuristic results per family, interleaved (d0, s0, d1, s1, ...), and for
//    long-K shapes (the weight gradients, K = tokens) split-K variants of each family's best
//    kSplitBases, set through CUBLASLT_ALGO_CONFIG_SPLITK_NUM / _REDUCTION_SCHEME. See tune() for
//    the timing schedule and its budget.
// Numerics: every candidate computes in CUBLAS_COMPUTE_32F. Split-K partial sums must stay f32:
// for a bf16 or f16 out only CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE is allowed (INPLACE and OUTPUT_TYPE
// sum partials in 16 bits), for an f32 out COMPUTE_TYPE or OUTPUT_TYPE; INPLACE never, its order
// varies from run to run. The preference's reduction mask applies the same rule to the heuristic.
//
// Epilogues (the linear entries at the end of this file): the bias, GELU (with its input kept in
// an aux matrix) and GELU' (reading it) applied by the GEMM to its f32 result before rounding. An
// epilogue is part of the plan's key and runs in the direct family only: there cuBLASLt's m is N,
// so its bias (one value per row of D) is one value per output feature, and its aux matrix has
// D's layout, the bytes of a row-major [M, N] tensor. A fused key is tuned like any other, over
// the direct family's heuristic results, unsplit. A shape whose epilogue cuBLASLt has no
// algorithm for runs unfused (matmul, then the elementwise kernel).
#include <cublasLt.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/cuda/stream.h"
#include "core/cuda_check.h"
#include "core/log.h"
#include "core/tensor.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/matmul_policy.h"

#define SEQPAR_CUBLASLT_CHECK(stmt) SEQPAR_LIB_CHECK(stmt, CUBLAS_STATUS_SUCCESS, cublasLtGetStatusName)

namespace seqpar::cuda_ops {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kHeuristicRequest = 32;     // heuristic results asked for per family
constexpr int kSplitBases = 3;            // per family, the best heuristic results given split-K variants
constexpr int kSplits[] = {2, 3, 4, 6, 8};
constexpr int64_t kMinSplitSlice = 1024;  // K / split at least this
constexpr double kFirstPassShare = 0.5;   // of the budget, for the first pass over the pool
constexpr double kMinSampleMs = 0.2;      // a timing sample: a burst of runs at least this long
constexpr int kMaxBurst = 8;              // runs per burst at most
constexpr double kFinalShare = 0.25;      // of the budget, kept for the final
constexpr int kFinalists = 3;             // candidates in the final (plus the best unsplit one)
constexpr int kFinalSamples = 15;         // final rounds at most
constexpr double kSplitMargin = 0.02;     // a split-K finalist must be this much faster than the best unsplit

// Largest power of two (up to 256) that divides the address: cuBLASLt picks kernels by it.
int alignment_of(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && (a % align) != 0) align /= 2;
  return align;
}

cudaDataType_t cuda_type(DType d) {
  return d == DType::kBF16 ? CUDA_R_16BF : d == DType::kF16 ? CUDA_R_16F : CUDA_R_32F;
}

constexpr auto kComputeType = static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
constexpr auto kOutputType = static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE);

// Split-K reduction schemes whose partial sums are f32 (see the top of this file).
uint32_t allowed_reductions(DType out) { return out != DType::kF32 ? kComputeType : kComputeType | kOutputType; }

// Everything the descriptors and the heuristic depend on, in ops.h's row-major terms.
struct PlanKey {
  int64_t M, N, K;
  bool trans_a, trans_b;
  DType in, out;
  int64_t lda, ldb, ldc;          // row lengths of a, b, out
  int align_a, align_b, align_c;  // bytes
  int epilogue = CUBLASLT_EPILOGUE_DEFAULT;  // a cublasLtEpilogue_t
  int align_e = 0;                           // bytes: the bias's and the aux matrix's addresses
  int64_t ld_aux = 0;                        // the aux matrix's row length (GELU_AUX*, DGELU)
  auto tie() const {
    return std::tie(M, N, K, trans_a, trans_b, in, out, lda, ldb, ldc, align_a, align_b, align_c, epilogue, align_e,
                    ld_aux);
  }
  bool fused() const { return epilogue != CUBLASLT_EPILOGUE_DEFAULT; }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
  bool long_k() const { return K >= 4 * std::max(M, N) && K >= 2 * kMinSplitSlice; }
};

// What the GEMM does to its f32 result before writing out (see the top of this file).
struct Epilogue {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // [N] in out's dtype: BIAS, GELU_AUX_BIAS
  const void* aux = nullptr;   // [M, N], rows of aux_ld, out's dtype: GELU_AUX* write the GELU's input, DGELU reads it
  int64_t aux_ld = 0;
};

// One family's descriptors.
struct Formulation {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A, B, C (= D)

  Formulation() = default;
  Formulation(const Formulation&) = delete;
  Formulation& operator=(const Formulation&) = delete;
  ~Formulation() { reset(); }
  void reset() {  // no checks: may run at exit, after the driver has gone
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
    desc = nullptr;
    a = b = c = nullptr;
  }
};

struct Candidate {
  cublasLtMatmulAlgo_t algo{};
  MatmulConfig config;  // config.family says which Formulation, config.workspace the bytes it needs
};

struct Plan {
  Formulation form[2];          // indexed by MatmulFamily
  std::vector<Candidate> pool;  // [0]: the direct family's heuristic first pick; the rest once complete
  std::vector<Candidate> ranked[2];  // each family's heuristic results, best first
  bool pool_complete = false;
  bool tuned = false;
  int choice = 0;  // pool index run while autotuning, once tuned
  MatmulTuning tuning;
};

thread_local int g_forced = -1;
thread_local MatmulTuning g_last;
thread_local bool g_last_fused = false;

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

std::map<int, std::unique_ptr<LtContext>>& lt_contexts() {
  thread_local std::map<int, std::unique_ptr<LtContext>> contexts;
  return contexts;
}

LtContext& lt_context(int device) {
  auto& ctx = lt_contexts()[device];
  if (!ctx) ctx = std::make_unique<LtContext>(device);
  return *ctx;
}

// Makes `device` current for a scope.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    SEQPAR_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != device) SEQPAR_CUDA_CHECK(cudaSetDevice(device));
    changed_ = prev_ != device;
  }
  ~DeviceScope() {
    if (changed_) cudaSetDevice(prev_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = 0;
  bool changed_ = false;
};

// ---- candidates -----------------------------------------------------------------------------

MatmulConfig describe(const cublasLtMatmulAlgo_t& algo, MatmulFamily family, size_t workspace, int rank) {
  MatmulConfig c;
  c.family = family;
  c.workspace = workspace;
  c.heuristic_rank = rank;
  int32_t id = -1, split = 1;
  uint32_t tile = 0, stages = 0, scheme = 0, swizzle = 0, custom = 0;
  uint16_t cluster = 0;
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof(split), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof(swizzle), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof(custom), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster), &w);
  c.algo_id = id;
  c.tile_id = static_cast<int>(tile);
  c.stages_id = static_cast<int>(stages);
  c.split_k = std::max(1, static_cast<int>(split));
  c.reduction = c.split_k > 1 ? static_cast<int>(scheme) : 0;
  c.swizzle = static_cast<int>(swizzle);
  c.custom = static_cast<int>(custom);
  c.cluster_id = static_cast<int>(cluster);
  return c;
}

bool same_config(const MatmulConfig& x, const MatmulConfig& y) {
  return x.family == y.family && x.algo_id == y.algo_id && x.tile_id == y.tile_id && x.stages_id == y.stages_id &&
         x.cluster_id == y.cluster_id && x.swizzle == y.swizzle && x.custom == y.custom && x.split_k == y.split_k &&
         x.reduction == y.reduction;
}

// Creates one family's descriptors; a failure is returned (the swapped family is optional).
// row_operands (swapped family only): A and B declared row-major too, untransposed as in ops.h,
// instead of read column-major with flipped transposes; the same product, a fallback for a
// cuBLASLt that rejects mixed orders.
cublasStatus_t make_formulation(const PlanKey& key, MatmulFamily family, Formulation& f, bool row_operands = false) {
  const bool direct = family == MatmulFamily::kDirect;
  const bool flip = !direct && !row_operands;
  // cuBLASLt's operands: direct A = b, B = a; swapped A = a, B = b (see the top of this file).
  const bool t_a = direct ? key.trans_b : key.trans_a != flip, t_b = direct ? key.trans_a : key.trans_b != flip;
  const int64_t m = direct ? key.N : key.M, n = direct ? key.M : key.N, k = key.K;
  const int64_t ld_a = direct ? key.ldb : key.lda, ld_b = direct ? key.lda : key.ldb;
  const cublasOperation_t op_a = t_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = t_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t st = cublasLtMatmulDescCreate(&f.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b));
  // Stored shapes: A is m x k (k x m when transposed), B is k x n (n x k), C is m x n.
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&f.a, cuda_type(key.in), t_a ? k : m, t_a ? m : k, ld_a);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&f.b, cuda_type(key.in), t_b ? n : k, t_b ? k : n, ld_b);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&f.c, cuda_type(key.out), m, n, key.ldc);
  const int32_t row = CUBLASLT_ORDER_ROW;
  for (cublasLtMatrixLayout_t layout : {f.a, f.b, f.c}) {
    const bool row_major = layout == f.c ? !direct : row_operands;
    if (st == CUBLAS_STATUS_SUCCESS && row_major)
      st = cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof(row));
  }
  if (st == CUBLAS_STATUS_SUCCESS && key.fused()) {
    if (!direct) return CUBLAS_STATUS_NOT_SUPPORTED;
    const auto epilogue = static_cast<cublasLtEpilogue_t>(key.epilogue);
    st = cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue));
    if (st == CUBLAS_STATUS_SUCCESS && key.ld_aux > 0)
      st = cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &key.ld_aux,
                                          sizeof(key.ld_aux));
  }
  return st;
}

// The call's epilogue operands into the direct family's descriptor: before the heuristic (which
// reads their alignment from the addresses) and before every run (a plan serves every call of its key).
void set_epilogue_pointers(Formulation& f, const Epilogue& ep) {
  if (ep.bias != nullptr)
    SEQPAR_CUBLASLT_CHECK(
        cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ep.bias, sizeof(ep.bias)));
  if (ep.aux != nullptr)
    SEQPAR_CUBLASLT_CHECK(
        cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ep.aux, sizeof(ep.aux)));
}

// The heuristic's results for one family, best first (none where the family is unsupported).
cublasStatus_t heuristic(LtContext& ctx, const PlanKey& key, MatmulFamily family, const Formulation& f,
                         std::vector<Candidate>& out) {
  const bool direct = family == MatmulFamily::kDirect;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const uint64_t ws = kWorkspaceBytes;
  const uint32_t aa = direct ? key.align_b : key.align_a, ab = direct ? key.align_a : key.align_b,
                 ac = key.align_c, schemes = allowed_reductions(key.out);
  auto set = [&](cublasLtMatmulPreferenceAttributes_t attr, const void* v, size_t n) {
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, attr, v, n);
  };
  set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes));
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa));
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab));
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof(ac));
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof(ac));
  cublasLtMatmulHeuristicResult_t results[kHeuristicRequest] = {};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(ctx.handle, f.desc, f.a, f.b, f.c, f.c, pref, kHeuristicRequest, results,
                                        &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize > kWorkspaceBytes) continue;
    out.push_back({results[i].algo, describe(results[i].algo, family, results[i].workspaceSize, i)});
  }
  return CUBLAS_STATUS_SUCCESS;
}

// Split-K variants of `base` (K cut into s slices summed in f32), those cuBLASLt accepts.
void add_split_variants(LtContext& ctx, const PlanKey& key, const Formulation& f, const Candidate& base,
                        std::vector<Candidate>& pool) {
  int32_t splittable = 0;
  uint32_t schemes = 0;
  size_t w = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&base.algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splittable,
                                        sizeof(splittable), &w) != CUBLAS_STATUS_SUCCESS ||
      splittable == 0)
    return;
  if (cublasLtMatmulAlgoCapGetAttribute(&base.algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes,
                                        sizeof(schemes), &w) != CUBLAS_STATUS_SUCCESS)
    return;
  schemes &= allowed_reductions(key.out);
  uint32_t scheme = 0;  // prefer f32 partials in the workspace (the same for both out dtypes)
  for (uint32_t s : {kComputeType, kOutputType})
    if (scheme == 0 && (schemes & s) != 0) scheme = s;
  if (scheme == 0) return;
  for (int32_t s : kSplits) {
    if (key.K / s < kMinSplitSlice) break;
    Candidate c = base;
    if (cublasLtMatmulAlgoConfigSetAttribute(&c.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &s, sizeof(s)) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoConfigSetAttribute(&c.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                             sizeof(scheme)) != CUBLAS_STATUS_SUCCESS)
      continue;
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoCheck(ctx.handle, f.desc, f.a, f.b, f.c, f.c, &c.algo, &check) != CUBLAS_STATUS_SUCCESS ||
        check.workspaceSize > kWorkspaceBytes)
      continue;
    c.config = describe(c.algo, base.config.family, check.workspaceSize, base.config.heuristic_rank);
    c.config.split_variant = true;
    if (c.config.split_k != s) continue;  // cuBLASLt did not keep the setting
    const bool dup = std::any_of(pool.begin(), pool.end(),
                                 [&](const Candidate& p) { return same_config(p.config, c.config); });
    if (!dup) pool.push_back(c);
  }
}

constexpr auto kDirect = static_cast<int>(MatmulFamily::kDirect);

// The shape's plan: descriptors of the direct family and its heuristic first pick. A fused key
// that cuBLASLt has no algorithm for gets a plan with an empty pool: its calls run unfused.
Plan& get_plan(LtContext& ctx, const PlanKey& key, const Epilogue& ep = {}) {
  auto it = ctx.plans.find(key);
  if (it != ctx.plans.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  if (key.fused()) {
    cublasStatus_t st = make_formulation(key, MatmulFamily::kDirect, plan->form[kDirect]);
    if (st == CUBLAS_STATUS_SUCCESS) {
      set_epilogue_pointers(plan->form[kDirect], ep);
      st = heuristic(ctx, key, MatmulFamily::kDirect, plan->form[kDirect], plan->ranked[kDirect]);
    }
    if (plan->ranked[kDirect].empty()) {
      log_debug("matmul M={} N={} K={} epilogue {}: no cuBLASLt algorithm ({}); runs unfused", key.M, key.N, key.K,
                key.epilogue, cublasLtGetStatusName(st));
    } else {
      plan->pool.push_back(plan->ranked[kDirect].front());
    }
    return *(ctx.plans[key] = std::move(plan));
  }
  SEQPAR_CUBLASLT_CHECK(make_formulation(key, MatmulFamily::kDirect, plan->form[kDirect]));
  SEQPAR_CUBLASLT_CHECK(heuristic(ctx, key, MatmulFamily::kDirect, plan->form[kDirect], plan->ranked[kDirect]));
  SEQPAR_CHECK(!plan->ranked[kDirect].empty(),
               "cuBLASLt has no algorithm for M={} N={} K={} trans_a={} trans_b={} in={} out={} lda={} ldb={} ldc={} "
               "(alignments a/b/out {}/{}/{} bytes)",
               key.M, key.N, key.K, key.trans_a, key.trans_b, dtype_name(key.in), dtype_name(key.out), key.lda,
               key.ldb, key.ldc, key.align_a, key.align_b, key.align_c);
  plan->pool.push_back(plan->ranked[kDirect].front());
  return *(ctx.plans[key] = std::move(plan));
}

// Fills the pool: both families' heuristic results interleaved by rank, and after the first
// kSplitBases ranks their split-K variants (long-K shapes only).
void complete_pool(LtContext& ctx, const PlanKey& key, Plan& plan) {
  if (plan.pool_complete) return;
  if (key.fused()) {  // the direct family's results only, unsplit (see the top of this file)
    plan.pool = plan.ranked[kDirect];
    plan.pool_complete = true;
    return;
  }
  constexpr auto kSwapped = static_cast<int>(MatmulFamily::kSwapped);
  cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
  for (bool row_operands : {false, true}) {
    plan.form[kSwapped].reset();
    plan.ranked[kSwapped].clear();
    st = make_formulation(key, MatmulFamily::kSwapped, plan.form[kSwapped], row_operands);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = heuristic(ctx, key, MatmulFamily::kSwapped, plan.form[kSwapped], plan.ranked[kSwapped]);
    if (st == CUBLAS_STATUS_SUCCESS && !plan.ranked[kSwapped].empty()) break;
  }
  if (st != CUBLAS_STATUS_SUCCESS || plan.ranked[kSwapped].empty()) {
    plan.ranked[kSwapped].clear();
    log_debug("matmul M={} N={} K={}: no swapped family ({})", key.M, key.N, key.K, cublasLtGetStatusName(st));
  }
  std::vector<Candidate> pool;
  const size_t ranks = std::max(plan.ranked[0].size(), plan.ranked[1].size());
  for (size_t r = 0; r < ranks; ++r) {
    for (int fam = 0; fam < 2; ++fam)
      if (r < plan.ranked[fam].size()) pool.push_back(plan.ranked[fam][r]);
    if (!key.long_k() || r >= static_cast<size_t>(kSplitBases)) continue;
    for (int fam = 0; fam < 2; ++fam)
      if (r < plan.ranked[fam].size()) add_split_variants(ctx, key, plan.form[fam], plan.ranked[fam][r], pool);
  }
  plan.pool = std::move(pool);  // pool[0] is still ranked[direct][0]
  plan.pool_complete = true;
}

// out = alpha * op(a) op(b) + beta * c, c = out unless given (the same layout as out).
cublasStatus_t run_candidate(LtContext& ctx, const Plan& plan, const Candidate& c, const void* a, const void* b,
                             void* out, float alpha, float beta, cudaStream_t stream, const void* c_in = nullptr) {
  const Formulation& f = plan.form[static_cast<int>(c.config.family)];
  const bool direct = c.config.family == MatmulFamily::kDirect;
  return cublasLtMatmul(ctx.handle, f.desc, &alpha, direct ? b : a, f.a, direct ? a : b, f.b, &beta,
                        c_in ? c_in : out, f.c, out, f.c, &c.algo, ctx.workspace, c.config.workspace, stream);
}

// Whether the algorithm writes D apart from C (every Hopper GEMM cuBLASLt offers does; asked, not assumed).
bool out_of_place_ok(const cublasLtMatmulAlgo_t& algo) {
  int32_t ok = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_OUT_OF_PLACE_RESULT_SUPPORT, &ok, sizeof(ok),
                                        &written) != CUBLAS_STATUS_SUCCESS)
    return false;
  return ok != 0;
}

// ---- tuning ---------------------------------------------------------------------------------

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times the pool on the call's own operands (a, b) into the call's own output `out` (out_bytes, beta
// = 0; the call then writes it again), and sets plan.choice. Where out's contents are an input of the
// call (an accumulation in place) they wait in host memory meanwhile. (A scratch output on the
// device would add a GEMM output to the first step's peak, above what `seqpar plan` counts: the
// LM head's logits tile, 2.3 GiB at 8192 tokens of Qwen's vocabulary; bench/NOTES.md, 2026-12-06.)
// Schedule, within `budget_ms` of host time from the start:
//  1. First pass, in pool order while less than kFirstPassShare of the budget is spent: each
//     candidate once untimed (loads its module, warms caches), once timed. pool[0] always runs;
//     a candidate that fails to launch is dropped.
//  From here on a sample is one untimed run, then the mean of a burst of back-to-back runs, as
//  many as make it last kMinSampleMs (at most kMaxBurst): the steady state of the candidate run
//  again and again, as a loop over the same GEMM runs it. Timed right after a different
//  candidate, a ~50-200 µs GEMM reads the L2 that candidate left, which changed the ranking by up
//  to 10% against the steady state (`seqpar-diag gemm --sweep`; bench/NOTES.md, 2026-12-01).
//  2. Rounds: every live candidate once per round, interleaved, so clock drift hits all alike.
//     After every two rounds the slower half (by median) is dropped, down to kFinalists. A round
//     starts only if its predicted cost (the sum of the live bursts) fits in the part of the
//     budget before kFinalShare; if not, the slower half goes first.
//  3. Final: the kFinalists best by median, and the fastest candidate without split-K if none of
//     them is, timed afresh (earlier samples carry the winner's luck of the eliminations) for up to
//     kFinalSamples rounds within the budget, the order rotated each round so no candidate always
//     follows the same one.
// The winner is the finalist with the lowest final median, where a split-K candidate must beat
// the best unsplit finalist by kSplitMargin: on a near tie the unsplit one runs one kernel
// instead of two and needs no workspace traffic, and its lead measured in isolation did not hold
// in the benchmark (bench/NOTES.md, 2026-11-29/12-01). The overrun is at most one first-pass
// candidate (two runs) when pool[0] alone exceeds the budget, plus one final round.
void tune(LtContext& ctx, const PlanKey& key, Plan& plan, const void* a, const void* b, void* out, size_t out_bytes,
          bool out_is_input, cudaStream_t stream, double budget_ms) {
  using Clock = std::chrono::steady_clock;
  // The operands may still be in flight: waiting for them is not tuning time.
  SEQPAR_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<char> saved;
  if (out_is_input) {
    saved.resize(out_bytes);
    SEQPAR_CUDA_CHECK(cudaMemcpyAsync(saved.data(), out, out_bytes, cudaMemcpyDeviceToHost, stream));
    SEQPAR_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  const auto t0 = Clock::now();
  auto elapsed_ms = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); };
  auto run = [&](int i) { return run_candidate(ctx, plan, plan.pool[i], a, b, out, 1.f, 0.f, stream); };

  const int n = static_cast<int>(plan.pool.size());
  std::vector<std::vector<float>> samples(n);
  std::vector<int> live;
  Event start(true), stop(true);
  for (int i = 0; i < n; ++i) {
    if (i > 0 && elapsed_ms() > kFirstPassShare * budget_ms) break;
    bool ok = run(i) == CUBLAS_STATUS_SUCCESS;
    if (ok) {
      start.record(stream);
      ok = run(i) == CUBLAS_STATUS_SUCCESS;
      stop.record(stream);
    }
    stop.synchronize();
    if (!ok) continue;
    samples[i].push_back(stop.elapsed_ms(start));
    live.push_back(i);
  }
  const int timed = static_cast<int>(live.size());
  SEQPAR_CHECK(!live.empty(), "matmul autotune: no candidate ran for M={} N={} K={} (pool of {})", key.M, key.N,
               key.K, n);
  double fastest = samples[live[0]][0];
  for (int i : live) fastest = std::min<double>(fastest, samples[i][0]);
  const int burst = std::clamp(static_cast<int>(std::ceil(kMinSampleMs / std::max(fastest, 1e-3))), 1, kMaxBurst);

  auto by_median = [&] {
    std::vector<std::pair<double, int>> by;
    for (int i : live) by.emplace_back(median(samples[i]), i);
    std::sort(by.begin(), by.end());
    return by;
  };
  auto keep_fastest = [&](size_t count) {
    const auto by = by_median();
    live.clear();
    for (size_t j = 0; j < std::min(count, by.size()); ++j) live.push_back(by[j].second);
  };
  std::vector<Event> starts, stops;
  // One interleaved round over `live`, starting at position `first`: appends a sample to each.
  auto round = [&](size_t first) {
    while (starts.size() < live.size()) {
      starts.emplace_back(true);
      stops.emplace_back(true);
    }
    for (size_t j = 0; j < live.size(); ++j) {
      const int i = live[(first + j) % live.size()];
      SEQPAR_CUBLASLT_CHECK(run(i));  // untimed: the burst then finds the L2 as its own run leaves it
      starts[j].record(stream);
      for (int r = 0; r < burst; ++r) SEQPAR_CUBLASLT_CHECK(run(i));
      stops[j].record(stream);
    }
    stops[live.size() - 1].synchronize();
    for (size_t j = 0; j < live.size(); ++j)
      samples[live[(first + j) % live.size()]].push_back(stops[j].elapsed_ms(starts[j]) / burst);
  };
  auto round_cost = [&] {
    double cost = 0;
    for (int i : live) cost += (burst + 1) * median(samples[i]);
    return cost;
  };
  int rounds = 0;
  const double eliminate_until = (1.0 - kFinalShare) * budget_ms;
  while (live.size() > static_cast<size_t>(kFinalists)) {
    if (elapsed_ms() + round_cost() > eliminate_until) {
      keep_fastest((live.size() + 1) / 2);
      continue;
    }
    round(0);
    ++rounds;
    if (rounds % 2 == 0) keep_fastest(std::max<size_t>(kFinalists, (live.size() + 1) / 2));
  }
  // The final, on fresh samples.
  keep_fastest(kFinalists);
  const auto split = [&](int i) { return plan.pool[i].config.split_k > 1; };
  if (std::all_of(live.begin(), live.end(), split)) {
    int unsplit = -1;  // the fastest candidate without split-K that was timed at all
    for (int i = 0; i < n; ++i)
      if (!samples[i].empty() && !split(i) && (unsplit < 0 || median(samples[i]) < median(samples[unsplit])))
        unsplit = i;
    if (unsplit >= 0) live.push_back(unsplit);
  }
  for (int i : live) samples[i].clear();
  int final_rounds = 0;
  double cost = 0;
  while (final_rounds < kFinalSamples && (final_rounds == 0 || elapsed_ms() + cost <= budget_ms)) {
    round(static_cast<size_t>(final_rounds));
    ++final_rounds;
    cost = round_cost();
  }
  int best_unsplit = -1, best_split = -1;
  for (int i : live) {
    int& best = split(i) ? best_split : best_unsplit;
    if (best < 0 || median(samples[i]) < median(samples[best])) best = i;
  }
  int best = best_unsplit >= 0 ? best_unsplit : best_split;
  if (best_unsplit >= 0 && best_split >= 0 &&
      median(samples[best_split]) < (1.0 - kSplitMargin) * median(samples[best_unsplit]))
    best = best_split;
  SEQPAR_CUDA_CHECK(cudaStreamSynchronize(stream));  // the candidates are done with out
  if (out_is_input) {  // on the call's stream, which the call's own run then follows
    SEQPAR_CUDA_CHECK(cudaMemcpyAsync(out, saved.data(), out_bytes, cudaMemcpyHostToDevice, stream));
    SEQPAR_CUDA_CHECK(cudaStreamSynchronize(stream));  // before `saved` goes
  }

  plan.choice = best;
  plan.tuned = true;
  MatmulTuning& t = plan.tuning;
  t.chosen = plan.pool[best].config;
  t.autotuned = true;
  t.candidates = n;
  t.timed = timed;
  t.tune_ms = elapsed_ms();
  t.best_ms = median(samples[best]);
  t.heuristic_ms = samples[0].empty() ? 0.0 : median(samples[0]);
  if (log_level() <= LogLevel::kDebug) {
    std::string finals;
    for (int i : live)
      finals += fmt::format("{}[{}] {:.4f} ms{}", finals.empty() ? "" : "; ", i, median(samples[i]),
                            split(i) ? " (split-K)" : "");
    log_debug("matmul M={} N={} K={} trans_a={} trans_b={} {}->{} epilogue {}: {} ({:.4f} ms, heuristic first pick "
              "{:.4f} ms); {} of {} candidates timed, bursts of {}, {} rounds, final of {} rounds: {}; {:.1f} ms",
              key.M, key.N, key.K, key.trans_a, key.trans_b, dtype_name(key.in), dtype_name(key.out), key.epilogue,
              matmul_config_str(t.chosen), t.best_ms, t.heuristic_ms, timed, n, burst, rounds, final_rounds, finals,
              t.tune_ms);
  }
}

// ---- entry ----------------------------------------------------------------------------------

struct Dims {
  int64_t M, N, K;
};

Dims check_args(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  SEQPAR_CHECK(out.defined() && a.defined() && b.defined(), "matmul: undefined tensor");
  SEQPAR_CHECK(out.device().is_cuda() && a.device() == out.device() && b.device() == out.device(),
               "matmul: tensors must be on one CUDA device: out {}, a {}, b {}", out.str(), a.str(), b.str());
  SEQPAR_CHECK(out.ndim() == 2 && a.ndim() == 2 && b.ndim() == 2, "matmul: 2-D tensors only: out {}, a {}, b {}",
               out.str(), a.str(), b.str());
  SEQPAR_CHECK(
      a.dtype() == b.dtype() && (a.dtype() == DType::kBF16 || a.dtype() == DType::kF16 || a.dtype() == DType::kF32),
      "matmul: a and b must both be bf16, both f16 or both f32: a {}, b {}", a.str(), b.str());
  SEQPAR_CHECK(out.dtype() == DType::kF32 || (out.dtype() == a.dtype()),
               "matmul: out must be f32, or the operands' 16-bit type: out {}, a {}", out.str(), a.str());
  const int64_t M = trans_a ? a.dim(1) : a.dim(0), K = trans_a ? a.dim(0) : a.dim(1);
  const int64_t Kb = trans_b ? b.dim(1) : b.dim(0), N = trans_b ? b.dim(0) : b.dim(1);
  SEQPAR_CHECK(K == Kb && out.dim(0) == M && out.dim(1) == N,
               "matmul: op(a) is [{}, {}], op(b) is [{}, {}], out is {} (trans_a={}, trans_b={})", M, K, Kb, N,
               shape_str(out.shape()), trans_a, trans_b);
  return {M, N, K};
}

PlanKey plan_key(const Dims& d, const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  return {d.M,       d.N,       d.K,        trans_a,   trans_b,   a.dtype(), out.dtype(), a.dim(1),
          b.dim(1),  out.dim(1), alignment_of(a.raw()), alignment_of(b.raw()), alignment_of(out.raw())};
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  SEQPAR_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

const char* matmul_family_name(MatmulFamily family) {
  return family == MatmulFamily::kDirect ? "direct" : "swapped";
}

std::string matmul_config_str(const MatmulConfig& c) {
  std::string s = fmt::format("{} algo={} tile={} stages={} cluster={}", matmul_family_name(c.family), c.algo_id,
                              c.tile_id, c.stages_id, c.cluster_id);
  if (c.swizzle) s += fmt::format(" swizzle={}", c.swizzle);
  if (c.custom) s += fmt::format(" custom={}", c.custom);
  if (c.split_k > 1) {
    const char* scheme = c.reduction == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE  ? "compute"
                         : c.reduction == CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE ? "output"
                         : c.reduction == CUBLASLT_REDUCTION_SCHEME_INPLACE     ? "inplace"
                                                                                : "none";
    s += fmt::format(" splitk={}/{}{}", c.split_k, scheme, c.split_variant ? "(set)" : "");
  }
  s += fmt::format(" rank={}", c.heuristic_rank);
  return s;
}

namespace {

// out = alpha op(a) op(b) + beta c (c = out unless given), then the epilogue. Returns false, having
// done nothing, when the epilogue cannot run fused (no algorithm for the shape, or K = 0): the
// caller then runs it unfused.
bool run_matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta,
                const Tensor* c, const Epilogue& ep) {
  const Dims d = check_args(out, a, b, trans_a, trans_b);
  const bool fused = ep.kind != CUBLASLT_EPILOGUE_DEFAULT;
  if (d.M == 0 || d.N == 0) return true;
  if (fused && d.K == 0) return false;
  const int dev = out.device().index;
  DeviceScope device_scope(dev);
  cudaStream_t stream = current_stream();
  // A separate c (the residual the output adds): read by the GEMM itself, or copied first where the
  // algorithm cannot write apart from it.
  const void* c_in = c != nullptr && beta != 0.f && c->raw() != out.raw() ? c->raw() : nullptr;
  auto copy_c = [&] {
    SEQPAR_CUDA_CHECK(cudaMemcpyAsync(out.raw(), c_in, out.nbytes(), cudaMemcpyDeviceToDevice, stream));
    c_in = nullptr;  // out holds c now: the GEMM adds in place
  };
  if (d.K == 0 && c_in != nullptr) copy_c();
  if (d.K == 0) {  // an empty sum: out = beta * out
    if (beta == 0.f) {
      SEQPAR_CUDA_CHECK(cudaMemsetAsync(out.raw(), 0, out.nbytes(), stream));
    } else {
      cuda_kernels::scale_inplace(out.raw(), out.dtype(), beta, out.numel(), stream);
    }
    return true;
  }
  LtContext& ctx = lt_context(dev);
  PlanKey key = plan_key(d, out, a, b, trans_a, trans_b);
  if (fused) {
    key.epilogue = ep.kind;
    key.align_e = 256;
    for (const void* p : {ep.bias, ep.aux})
      if (p != nullptr) key.align_e = std::min(key.align_e, alignment_of(p));
    key.ld_aux = ep.aux_ld;
  }
  Plan& plan = get_plan(ctx, key, ep);
  if (fused) {
    if (plan.pool.empty()) return false;
    set_epilogue_pointers(plan.form[kDirect], ep);
  }
  int index = 0;
  MatmulTuning used;
  if (g_forced >= 0 && !fused) {
    complete_pool(ctx, key, plan);
    SEQPAR_CHECK(g_forced < static_cast<int>(plan.pool.size()),
                 "matmul: forced candidate {} but the pool of M={} N={} K={} has {}", g_forced, d.M, d.N, d.K,
                 plan.pool.size());
    index = g_forced;
  } else if (const MatmulPolicy policy = matmul_policy(); policy.autotune) {
    // Tuning synchronises the stream, which a stream being captured into a CUDA graph forbids:
    // such a call runs the heuristic pick and the shape is tuned on a later, uncaptured call. (A
    // fused candidate being timed writes its aux output; the run after tuning writes it again.)
    if (!plan.tuned && !capturing(stream)) {
      complete_pool(ctx, key, plan);
      // out's contents are an input where it accumulates in place (beta != 0, no separate c).
      tune(ctx, key, plan, a.raw(), b.raw(), out.raw(), out.nbytes(), beta != 0.f && c_in == nullptr, stream,
           policy.autotune_budget_ms);
    }
    if (plan.tuned) {
      index = plan.choice;
      used = plan.tuning;
    }
  }
  used.chosen = plan.pool[index].config;
  if (c_in != nullptr && !out_of_place_ok(plan.pool[index].algo)) copy_c();
  SEQPAR_CUBLASLT_CHECK(
      run_candidate(ctx, plan, plan.pool[index], a.raw(), b.raw(), out.raw(), alpha, beta, stream, c_in));
  g_last = used;
  return true;
}

// The linear entries fuse where the output is in the operands' dtype (the epilogue's bias and aux
// matrix are in out's dtype, the activations'), and, with an aux matrix, its rows are a multiple
// of 8 elements (cuBLASLt's rule for EPILOGUE_AUX_LD).
bool fusable(const Tensor& out, const Tensor& x, const Tensor* aux = nullptr) {
  return out.dtype() == x.dtype() && (aux == nullptr || aux->dim(1) % 8 == 0);
}

}  // namespace

void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta,
            const Tensor* c) {
  run_matmul(out, a, b, trans_a, trans_b, alpha, beta, c, Epilogue{});
}

void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual) {
  const float beta = residual != nullptr ? 1.f : 0.f;
  g_last_fused = bias != nullptr && fusable(y, x) &&
                 run_matmul(y, x, w, false, true, 1.f, beta, residual, Epilogue{CUBLASLT_EPILOGUE_BIAS, bias->raw()});
  if (g_last_fused) return;
  cuda_ops::matmul(y, x, w, false, true, 1.f, beta, residual);
  if (bias != nullptr) cuda_ops::bias_forward(y, *bias);
}

void linear_gelu_forward(Tensor& h, Tensor& pre, const Tensor& x, const Tensor& w, const Tensor* bias,
                         GeluKind kind) {
  if (kind == GeluKind::kTanh && fusable(h, x, &pre)) {  // cuBLASLt's GELU is the tanh form
    const Epilogue ep{bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX,
                      bias != nullptr ? bias->raw() : nullptr, pre.raw(), pre.dim(1)};
    if ((g_last_fused = run_matmul(h, x, w, false, true, 1.f, 0.f, nullptr, ep))) return;
  }
  cuda_ops::linear_forward(pre, x, w, bias, nullptr);
  cuda_ops::gelu_forward(h, pre, kind);
  g_last_fused = false;
}

void linear_backward_gelu(Tensor& dpre, const Tensor& dy, const Tensor& w, const Tensor& pre, GeluKind kind) {
  if (kind == GeluKind::kTanh && fusable(dpre, dy, &pre)) {
    const Epilogue ep{CUBLASLT_EPILOGUE_DGELU, nullptr, pre.raw(), pre.dim(1)};
    if ((g_last_fused = run_matmul(dpre, dy, w, false, false, 1.f, 0.f, nullptr, ep))) return;
  }
  cuda_ops::matmul(dpre, dy, w, false, false, 1.f, 0.f, nullptr);
  cuda_ops::gelu_backward(dpre, dpre, pre, kind);
  g_last_fused = false;
}

std::vector<MatmulConfig> matmul_candidates(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a,
                                            bool trans_b) {
  const Dims d = check_args(out, a, b, trans_a, trans_b);
  if (d.M == 0 || d.N == 0 || d.K == 0) return {};
  const int dev = out.device().index;
  DeviceScope device_scope(dev);
  LtContext& ctx = lt_context(dev);
  const PlanKey key = plan_key(d, out, a, b, trans_a, trans_b);
  Plan& plan = get_plan(ctx, key);
  complete_pool(ctx, key, plan);
  std::vector<MatmulConfig> v;
  for (const Candidate& c : plan.pool) v.push_back(c.config);
  return v;
}

MatmulTuning last_matmul_tuning() { return g_last; }

bool last_linear_fused() { return g_last_fused; }

void set_matmul_forced_candidate(int index) {
  SEQPAR_CHECK(index >= -1, "matmul forced candidate {} must be -1 (none) or a pool index", index);
  g_forced = index;
}

void clear_matmul_plans() {
  for (auto& [dev, ctx] : lt_contexts()) {
    DeviceScope device_scope(dev);
    SEQPAR_CUDA_CHECK(cudaDeviceSynchronize());  // no queued call may still use a plan's descriptors
    ctx->plans.clear();
  }
  g_last = MatmulTuning{};
}

}  // namespace seqpar::cuda_ops
