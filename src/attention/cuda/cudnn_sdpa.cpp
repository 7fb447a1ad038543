// cuDNN fused attention through the backend graph API (cudnn_sdpa.h): descriptor helpers, the
// forward and backward graphs, plan building and caching, execution on the current stream.
#include "attention/cuda/cudnn_sdpa.h"

#if defined(SEQPAR_WITH_CUDNN)
#include <cudnn.h>
#if CUDNN_VERSION < 91100  // device-properties descriptors (9.8), reduction determinism attribute (9.11)
#undef SEQPAR_WITH_CUDNN
#endif
#endif
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cuda/stream.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/cuda/ops_cuda.h"
#if defined(SEQPAR_WITH_CUDNN)
#include "attention/cuda/cudnn_graph.h"
#endif

namespace seqpar::cuda_attn {

#if defined(SEQPAR_WITH_CUDNN)

namespace {

using namespace cudnn_graph;  // descriptors, Graph, Shape4, the graphs (cudnn_graph.h)


// ---- plans -------------------------------------------------------------------------------------

// Where plans are built: a live device (its handle) or a described one (offline checks).
struct Target {
  cudnnHandle_t handle = nullptr;
  cudnnBackendDescriptor_t device_prop = nullptr;
};

struct Plan {
  Graph graph;
  Desc op_graph, plan;
  int64_t workspace = 0;
};

// Finalizes the graph and the first engine configuration cuDNN's heuristics offer that builds
// (mode A, then the fallback list). Throws seqpar::Error listing what each try said.
std::unique_ptr<Plan> build_plan(Graph&& graph, const Target& target) {
  auto plan = std::make_unique<Plan>();
  plan->graph = std::move(graph);
  plan->op_graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  const std::vector<cudnnBackendDescriptor_t> ops = plan->graph.op_handles();
  plan->op_graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.data(),
                     static_cast<int64_t>(ops.size()));
  if (target.handle != nullptr) plan->op_graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &target.handle);
  plan->op_graph.finalize();

  std::string tries;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, plan->op_graph.get());
    heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
    if (target.device_prop != nullptr) heur.set_desc(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, target.device_prop);
    cudnnStatus_t st = cudnnBackendFinalize(heur.get());
    if (st != CUDNN_STATUS_SUCCESS) {
      tries += fmt::format(" [heuristics mode {}: {}]", static_cast<int>(mode), cudnn_message(st));
      continue;
    }
    int64_t count = 0;
    SEQPAR_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
    if (count <= 0) {
      tries += fmt::format(" [heuristics mode {}: no engine]", static_cast<int>(mode));
      continue;
    }
    std::vector<Desc> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(configs.back().get());
    }
    int64_t got = 0;
    SEQPAR_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()));
    if (got == 0) {  // cuDNN's support checks refused all of them (CUDNN_LOGWARN_DBG=1 says why)
      tries += fmt::format(" [heuristics mode {}: none of {} engine configurations supported]",
                           static_cast<int>(mode), count);
    }
    for (int64_t i = 0; i < got; ++i) {
      Desc p(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      p.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, raw[i]);
      if (target.handle != nullptr) p.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &target.handle);
      if (target.device_prop != nullptr) p.set_desc(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, target.device_prop);
      st = cudnnBackendFinalize(p.get());
      if (st != CUDNN_STATUS_SUCCESS) {
        tries += fmt::format(" [mode {} config {}: {}]", static_cast<int>(mode), i, cudnn_message(st));
        continue;
      }
      SEQPAR_CUDNN_CHECK(cudnnBackendGetAttribute(p.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                  CUDNN_TYPE_INT64, 1, nullptr, &plan->workspace));
      plan->plan = std::move(p);
      return plan;
    }
  }
  SEQPAR_CHECK(false, "cuDNN has no execution plan for this graph:{}", tries);
  return nullptr;
}

// Runs a plan on the handle's stream. `bound` maps every bound uid of the graph to its memory.
void execute(const Plan& plan, cudnnHandle_t handle, const std::unordered_map<int64_t, void*>& bound,
             float scale, void* workspace) {
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  for (int64_t uid : plan.graph.bound()) {
    auto it = bound.find(uid);
    SEQPAR_CHECK(it != bound.end() && it->second != nullptr, "cuDNN attention: no memory bound to tensor uid {}", uid);
    uids.push_back(uid);
    ptrs.push_back(it->second);
  }
  uids.push_back(kScale);
  ptrs.push_back(&scale);
  for (const auto& [uid, value] : plan.graph.constants()) {
    uids.push_back(uid);
    ptrs.push_back(const_cast<float*>(&value));
  }
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), static_cast<int64_t>(uids.size()));
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs.data(), static_cast<int64_t>(ptrs.size()));
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace);
  pack.finalize();
  SEQPAR_CUDNN_CHECK(cudnnBackendExecute(handle, plan.plan.get(), pack.get()));
}

// ---- per-thread, per-device state --------------------------------------------------------------

constexpr size_t kMaxCachedPlans = 32;  // per direction; the least recently used goes first

struct PlanCache {
  struct Entry {
    std::unique_ptr<Plan> plan;  // nullptr: cuDNN has no plan for this shape (not retried)
    uint64_t last_use = 0;
  };
  std::map<Shape4, Entry> entries;
  uint64_t tick = 0;
};

struct DeviceContext {
  cudnnHandle_t handle = nullptr;
  PlanCache forward, backward;
  DeviceContext() = default;
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;
  ~DeviceContext() {
    forward.entries.clear();
    backward.entries.clear();
    if (handle != nullptr) cudnnDestroy(handle);
  }
};

DeviceContext& device_context(int device) {
  thread_local std::map<int, std::unique_ptr<DeviceContext>> contexts;
  std::unique_ptr<DeviceContext>& c = contexts[device];
  if (!c) {
    c = std::make_unique<DeviceContext>();
    SEQPAR_CUDNN_CHECK(cudnnCreate(&c->handle));
  }
  return *c;
}

// The cached plan for `shape`, building it on first use; nullptr when cuDNN has none.
const Plan* find_plan(PlanCache& cache, const Shape4& shape, cudnnHandle_t handle, bool backward) {
  ++cache.tick;
  auto it = cache.entries.find(shape);
  if (it != cache.entries.end()) {
    it->second.last_use = cache.tick;
    return it->second.plan.get();
  }
  if (cache.entries.size() >= kMaxCachedPlans) {
    // A plan's kernels may still be queued: let them finish before its module can go away (rare:
    // only past kMaxCachedPlans shapes).
    SEQPAR_CUDA_CHECK(cudaDeviceSynchronize());
    auto oldest = std::min_element(cache.entries.begin(), cache.entries.end(), [](const auto& a, const auto& b) {
      return a.second.last_use < b.second.last_use;
    });
    cache.entries.erase(oldest);
  }
  const char* what = backward ? "backward" : "forward";
  const auto t0 = std::chrono::steady_clock::now();
  PlanCache::Entry entry{nullptr, cache.tick};
  try {
    Graph g;
    if (backward)
      backward_graph(g, shape);
    else
      forward_graph(g, shape);
    entry.plan = build_plan(std::move(g), Target{handle, nullptr});
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log_debug("cuDNN attention: {} plan for {} built in {:.0f} ms, workspace {} bytes", what, shape.str(), ms,
              entry.plan->workspace);
  } catch (const Error& e) {
    log_warn("cuDNN attention: no {} plan for {}; using the flash kernel for this shape. {}", what, shape.str(),
             e.what());
  }
  return cache.entries.emplace(shape, std::move(entry)).first->second.plan.get();
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

Shape4 shape_for(const PackedDocs& docs, int64_t H, int64_t Hkv, int64_t D, bool causal, bool dense, bool half) {
  if (dense) return {1, docs.cu.back(), H, Hkv, D, causal, true, half};
  // The padded extent: a power of two >= the longest document (at least 64), so packings whose
  // longest document varies a little share a plan; cuDNN masks by the true lengths.
  int64_t S = 64;
  while (S < docs.max_len) S *= 2;
  return {docs.num_docs(), S, H, Hkv, D, causal, false, half};
}

// The 16-bit type of a call's q, k, v (bf16 or f16; fp16 runs: train/config.h Precision).
bool is_half(const Tensor& q) { return q.dtype() == DType::kF16; }

// The plan for one call. A batch of ONE document gets the dense graph (unless `dense` is kOff):
// packed_docs() guarantees q and k are the same tokens and, when causal, positions increasing with
// the index, so the document's mask is exactly "key index <= query index" (cuDNN's top-left
// causal mask on the [T, T] scores) or, not causal, nothing; no padding mask or ragged offsets
// are needed. The ragged graph otherwise, and also when cuDNN has no dense plan for the shape
// (find_plan has warned). Returns nullptr when neither has a plan.
const Plan* pick_plan(PlanCache& cache, cudnnHandle_t handle, const PackedDocs& docs, int64_t H, int64_t Hkv, int64_t D,
                      bool causal, CudnnDense dense, bool backward, bool half, Shape4* shape) {
  if (docs.num_docs() == 1 && dense == CudnnDense::kOn) {
    *shape = shape_for(docs, H, Hkv, D, causal, /*dense=*/true, half);
    if (const Plan* plan = find_plan(cache, *shape, handle, backward)) return plan;
  }
  *shape = shape_for(docs, H, Hkv, D, causal, /*dense=*/false, half);
  return find_plan(cache, *shape, handle, backward);
}

// Document lengths and ragged offsets on the device, one upload: i64 offsets for q/o (x H*D),
// k/v (x Hkv*D) and stats (x H), then i32 lengths. A ragged call's only per-call host work besides
// the plan lookup: ~100 bytes from pageable memory, which cudaMemcpyAsync stages and returns
// without waiting for the device; the buffer comes from the caching pool (no cudaMalloc once
// warm). A dense call uploads nothing.
struct DocArrays {
  Tensor buffer;
  void *ragged_q, *ragged_kv, *ragged_stats, *seq_len;
};

// The bound memory of the ragged graphs' document tensors.
void bind_docs(std::unordered_map<int64_t, void*>& bound, const DocArrays& a) {
  bound[kSeqLenQ] = a.seq_len;
  bound[kSeqLenKV] = a.seq_len;
  bound[kRaggedQ] = a.ragged_q;
  bound[kRaggedKV] = a.ragged_kv;
  bound[kRaggedStats] = a.ragged_stats;
}

// The document arrays on the device, made once per token set (kept in q's TokenMeta cache, as
// the flash path keeps its metadata): the upload from host memory makes the host wait.
DocArrays upload_docs(const TokenMeta& meta, const PackedDocs& docs, int64_t H, int64_t Hkv, int64_t D, Device dev) {
  const int64_t B = docs.num_docs(), n64 = round_up(B + 1, 2);  // keep each array 16-byte aligned
  DocArrays a;
  {
    std::lock_guard<std::mutex> lock(meta.cache->mu);
    Tensor& buffer = meta.cache->entries["cudnn_docs:" + std::to_string(H) + ":" + std::to_string(Hkv) + ":" +
                                         std::to_string(D) + "@" + dev.str()];
    if (!buffer.defined()) {
      std::vector<int64_t> host(static_cast<size_t>(3 * n64 + round_up(B, 4) / 2), 0);
      int32_t* lens = reinterpret_cast<int32_t*>(host.data() + 3 * n64);
      for (int64_t b = 0; b <= B; ++b) {
        const int64_t c = docs.cu[static_cast<size_t>(b)];
        host[b] = c * H * D;
        host[n64 + b] = c * Hkv * D;
        host[2 * n64 + b] = c * H;
        if (b < B) lens[b] = docs.cu[static_cast<size_t>(b) + 1] - docs.cu[static_cast<size_t>(b)];
      }
      buffer = Tensor::from_vector<int64_t>({static_cast<int64_t>(host.size())}, host).to(dev);
    }
    a.buffer = buffer;
  }
  auto* base = static_cast<int64_t*>(a.buffer.raw());
  a.ragged_q = base;
  a.ragged_kv = base + n64;
  a.ragged_stats = base + 2 * n64;
  a.seq_len = base + 3 * n64;
  return a;
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0; }

Tensor workspace_for(const Plan& plan, Device dev) {
  return Tensor::empty({std::max<int64_t>(1, (plan.workspace + 7) / 8)}, DType::kI64, dev);
}

}  // namespace

AttnPath cudnn_attn_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttnArgs& args, const PackedDocs& docs) {
  const int64_t T = q.dim(0), H = q.dim(1), Hkv = k.dim(1), D = q.dim(2);
  const DType io = q.dtype();  // bf16 or f16 (k, v alike: the caller checked)
  SEQPAR_CHECK(out.dtype() == io, "cuDNN attention writes an out of q's type {}, got {}", dtype_name(io), out.str());
  SEQPAR_CHECK(!docs.cu.empty() && docs.cu.back() == T, "cuDNN attention: documents cover {} tokens, q has {}",
               docs.cu.empty() ? 0 : docs.cu.back(), T);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&q, &k, &v, &out, &lse})
    if (!aligned16(*t)) return AttnPath::kNone;
  const Device dev = q.device();
  DeviceContext& ctx = device_context(dev.index);
  Shape4 shape{};
  const Plan* plan = pick_plan(ctx.forward, ctx.handle, docs, H, Hkv, D, args.causal, args.policy.cudnn_dense,
                               /*backward=*/false, is_half(q), &shape);
  if (plan == nullptr) return AttnPath::kNone;
  cudaStream_t stream = current_stream();
  SEQPAR_CUDNN_CHECK(cudnnSetStream(ctx.handle, stream));
  Tensor workspace = workspace_for(*plan, dev);
  std::unordered_map<int64_t, void*> bound = {
      {kQ, q.raw()}, {kK, k.raw()}, {kV, v.raw()}, {kO, out.raw()}, {kStats, lse.raw()}};
  DocArrays a;
  if (!shape.dense) {
    a = upload_docs(args.q_meta, docs, H, Hkv, D, dev);
    bind_docs(bound, a);
  }
  execute(*plan, ctx.handle, bound, args.scale, workspace.raw());
  return shape.dense ? AttnPath::kCudnnDense : AttnPath::kCudnnRagged;
}

AttnPath cudnn_attn_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                             const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                             const AttnArgs& args, const PackedDocs& docs, GradMode mode) {
  const int64_t T = q.dim(0), H = q.dim(1), Hkv = k.dim(1), D = q.dim(2);
  const DType io = q.dtype();  // bf16 or f16
  for (const Tensor* t : std::initializer_list<const Tensor*>{&dout, &out})
    SEQPAR_CHECK(t->dtype() == io, "cuDNN attention backward takes out and dout of q's type {}, got {}", dtype_name(io),
                 t->str());
  SEQPAR_CHECK(!docs.cu.empty() && docs.cu.back() == T, "cuDNN attention: documents cover {} tokens, q has {}",
               docs.cu.empty() ? 0 : docs.cu.back(), T);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&q, &k, &v, &out, &dout, &lse})
    if (!aligned16(*t)) return AttnPath::kNone;
  const Device dev = q.device();
  DeviceContext& ctx = device_context(dev.index);
  Shape4 shape{};
  const Plan* plan = pick_plan(ctx.backward, ctx.handle, docs, H, Hkv, D, args.causal, args.policy.cudnn_dense,
                               /*backward=*/true, is_half(q), &shape);
  if (plan == nullptr) return AttnPath::kNone;
  cudaStream_t stream = current_stream();
  SEQPAR_CUDNN_CHECK(cudnnSetStream(ctx.handle, stream));
  Tensor workspace = workspace_for(*plan, dev);
  // cuDNN writes (=) every element of its gradients: each document's rows and keys (every token
  // sees at least itself), and the documents cover all T tokens. kWrite with 16-bit (q's type),
  // 16-byte aligned gradients (Tensors are always dense) binds them directly; otherwise
  // (kAccumulate, or an unaligned row view, or f32 gradients) cuDNN writes scratch in q's type that
  // is then added (or cast).
  const bool write = mode == GradMode::kWrite;
  const bool direct = write && dq.dtype() == io && dk.dtype() == io && dv.dtype() == io && aligned16(dq) &&
                      aligned16(dk) && aligned16(dv);
  Tensor dq_new = direct ? dq : Tensor::empty(q.shape(), io, dev);
  Tensor dk_new = direct ? dk : Tensor::empty(k.shape(), io, dev);
  Tensor dv_new = direct ? dv : Tensor::empty(k.shape(), io, dev);
  // f32 workspaces. Ragged: one row per token plus a tile of slack past the last document. Dense:
  // exactly [H, T] and [H, T, D] (cudnn-frontend's sizes).
  const int64_t rows = shape.dense ? T : round_up(T, 128) + 128;
  Tensor softmax_sum = Tensor::empty({rows, H}, DType::kF32, dev);
  Tensor dq_accum = Tensor::empty({rows, H, D}, DType::kF32, dev);
  Tensor dk_full, dv_full;
  std::unordered_map<int64_t, void*> bound = {
      {kQ, q.raw()},         {kK, k.raw()},           {kV, v.raw()},           {kO, out.raw()},
      {kDO, dout.raw()},     {kStats, lse.raw()},     {kDQ, dq_new.raw()},     {kDK, dk_new.raw()},
      {kDV, dv_new.raw()},   {kSoftmaxSum, softmax_sum.raw()}, {kDQAccum, dq_accum.raw()}};
  DocArrays a;
  if (!shape.dense) {
    a = upload_docs(args.q_meta, docs, H, Hkv, D, dev);
    bind_docs(bound, a);
    if (H != Hkv) {
      // Declared in q's 16-bit type, sized as f32 the way cudnn-frontend sizes them (cuDNN owns their use).
      dk_full = Tensor::empty({rows, H, D}, DType::kF32, dev);
      dv_full = Tensor::empty({rows, H, D}, DType::kF32, dev);
      bound[kDKFull] = dk_full.raw();
      bound[kDVFull] = dv_full.raw();
    }
  }
  execute(*plan, ctx.handle, bound, args.scale, workspace.raw());
  if (!direct) {
    if (write) {  // a copy, or the conversion into f32 gradients
      cuda_ops::cast(dq, dq_new);
      cuda_ops::cast(dk, dk_new);
      cuda_ops::cast(dv, dv_new);
    } else {
      cuda_ops::add_inplace(dq, dq_new);
      cuda_ops::add_inplace(dk, dk_new);
      cuda_ops::add_inplace(dv, dv_new);
    }
  }
  return shape.dense ? AttnPath::kCudnnDense : AttnPath::kCudnnRagged;
}

int64_t cudnn_runtime_version() { return static_cast<int64_t>(cudnnGetVersion()); }

std::string cudnn_check_plans_offline(const std::string& device_json, int64_t num_docs, int64_t max_len, int64_t H,
                                      int64_t Hkv, int64_t D, bool causal, bool dense) {
  try {
    Desc prop(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
    prop.set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, device_json.data(),
             static_cast<int64_t>(device_json.size()));
    prop.finalize();
    SEQPAR_CHECK(!dense || num_docs == 1, "cudnn_check_plans_offline: a dense graph is one document, got {}",
                 num_docs);
    PackedDocs docs;
    docs.cu.resize(static_cast<size_t>(num_docs) + 1, 0);
    docs.cu.back() = static_cast<int32_t>(max_len);
    docs.max_len = static_cast<int32_t>(max_len);
    const Shape4 shape = shape_for(docs, H, Hkv, D, causal, dense, /*half=*/false);
    std::string result;
    for (bool backward : {false, true}) {
      try {
        Graph g;
        if (backward)
          backward_graph(g, shape);
        else
          forward_graph(g, shape);
        build_plan(std::move(g), Target{nullptr, prop.get()});
      } catch (const Error& e) {
        result += fmt::format("{} {}: {}\n", backward ? "backward" : "forward", shape.str(), e.what());
      }
    }
    return result;
  } catch (const Error& e) {
    return e.what();
  }
}

#else  // built without cuDNN: every call goes to the flash kernel

AttnPath cudnn_attn_forward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const AttnArgs&,
                            const PackedDocs&) {
  return AttnPath::kNone;
}

AttnPath cudnn_attn_backward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&, const AttnArgs&, const PackedDocs&, GradMode) {
  return AttnPath::kNone;
}

int64_t cudnn_runtime_version() { return 0; }

std::string cudnn_check_plans_offline(const std::string&, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool) {
  return "this build has no cuDNN (CMake did not find it)";
}

#endif

std::string cudnn_h200_device_json() {
  // cudaDeviceProp of an H200 SXM as cuDNN's device-properties JSON (deviceVer = compute
  // capability x 100, driverVer = CUDA driver API version).
  return R"({"deviceName":"NVIDIA H200","cudaDeviceId":0,"deviceVer":900,"driverVer":13000,)"
         R"("multiProcessorCount":132,"warpSize":32,"maxThreadsPerBlock":1024,"maxThreadsPerSM":2048,)"
         R"("maxBlockSize":[1024,1024,64],"maxGridSize":[2147483647,65535,65535],"regsPerBlock":65536,)"
         R"("maxRegistersPerSM":65536,"maxCtasPerSM":32,"maxSharedMemoryPerBlock":49152,)"
         R"("maxSharedMemoryPerBlockOptin":232448,"reservedSharedMemoryPerBlock":1024,"l2CacheSize":62914560,)"
         R"("totalGlobalMem":150754820096,"smClockRateKHz":1980000,"memClockRateKHz":3201000,"pciDeviceId":0,)"
         R"("isTccDriver":0,"supportCoopLaunch":1})";
}

}  // namespace seqpar::cuda_attn
