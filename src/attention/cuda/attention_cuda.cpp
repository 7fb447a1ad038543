// Tensor-level entries of the CUDA attention (attention_cuda.h): checks, the backend choice
// (flash kernel or cuDNN SDPA, cudnn_sdpa.h), mask metadata upload, per-tile mask statistics,
// workspace, launch on the calling thread's current stream (core/cuda/stream.h). The kernels are
// in attn_*.cu(h), the launchers in attn_launch.h.
#include "attention/cuda/attention_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "attention/cuda/attn_bwd_sm90.h"
#include "attention/cuda/attn_launch.h"
#include "attention/cuda/cudnn_sdpa.h"
#include "core/cuda/stream.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/log.h"

namespace seqpar::cuda_attn {

namespace {

// A bf16 or f16 tensor's elements as the kernels take them: 16-bit patterns (attn_launch.h).
const uint16_t* bits16_ptr(const Tensor& t) {
  SEQPAR_CHECK(t.dtype() == DType::kBF16 || t.dtype() == DType::kF16, "flash attention: {} must be bf16 or f16",
               t.str());
  return static_cast<const uint16_t*>(t.raw());
}

Elem elem_of(const Tensor& t) { return t.dtype() == DType::kF16 ? Elem::kF16 : Elem::kBf16; }

void check_cuda_tensor(const Tensor& t, const char* name, Device dev) {
  SEQPAR_CHECK(t.defined(), "flash attention: {} is undefined", name);
  SEQPAR_CHECK(t.device() == dev, "flash attention: {} is {}, expected a tensor on {}", name, t.str(), dev.str());
}

void check_float_out(const Tensor& t, const char* name) {
  SEQPAR_CHECK(t.dtype() == DType::kBF16 || t.dtype() == DType::kF16 || t.dtype() == DType::kF32,
               "flash attention: {} is {}, must be bf16, f16 or f32", name, t.str());
}

// An output (or out, or a gradient) of the kernels: f32, or q's 16-bit type (the kernels write and
// read 16-bit values as FwdParams::elem, q's type).
void check_out_like_q(const Tensor& t, const char* name, const Tensor& q) {
  check_float_out(t, name);
  SEQPAR_CHECK(t.dtype() == DType::kF32 || t.dtype() == q.dtype(), "flash attention: {} is {}, must be f32 or q's {}",
               name, t.str(), dtype_name(q.dtype()));
}

// q [Tq, H, D], k/v [Tk, Hkv, D], all bf16 or all f16 (an fp16 run's), on one CUDA device; returns
// that device.
Device check_qkv(const Tensor& q, const Tensor& k, const Tensor& v) {
  SEQPAR_CHECK(q.defined() && q.device().is_cuda(), "flash attention: q must be a CUDA tensor, got {}", q.str());
  const Device dev = q.device();
  check_cuda_tensor(k, "k", dev);
  check_cuda_tensor(v, "v", dev);
  SEQPAR_CHECK(q.ndim() == 3 && k.ndim() == 3, "flash attention: q {} must be [Tq, H, D] and k {} [Tk, Hkv, D]",
               q.str(), k.str());
  check_shape(v, k.shape(), "v (must match k)");
  SEQPAR_CHECK(q.dtype() == DType::kBF16 || q.dtype() == DType::kF16,
               "attention takes bf16 or f16 q, k, v (the tensor-core operand type); q is {}", q.str());
  for (auto [t, name] : {std::pair<const Tensor*, const char*>{&k, "k"}, {&v, "v"}}) {
    SEQPAR_CHECK(t->dtype() == q.dtype(), "attention: {} is {}, q is {}: q, k, v share one type", name, t->str(),
                 q.str());
  }
  const int64_t H = q.dim(1), Hkv = k.dim(1), D = q.dim(2);
  SEQPAR_CHECK(Hkv > 0 && H % Hkv == 0, "flash attention: H={} must be a multiple of Hkv={}", H, Hkv);
  SEQPAR_CHECK(k.dim(2) == D, "flash attention: head dim of q (D={}) and k (D={}) differ", D, k.dim(2));
  SEQPAR_CHECK(head_dim_supported(static_cast<int>(D)), "flash attention supports head dim 64, 96 or 128, got D={}", D);
  SEQPAR_CHECK(q.dim(0) < INT_MAX && k.dim(0) < INT_MAX, "flash attention: Tq={} and Tk={} must be < 2^31", q.dim(0),
               k.dim(0));
  int current = -1;
  SEQPAR_CUDA_CHECK(cudaGetDevice(&current));
  SEQPAR_CHECK(current == dev.index, "flash attention: tensors are on {} but the current CUDA device is {}", dev.str(),
               current);
  return dev;
}

// The seg/pos arrays of a TokenMeta on `dev`: device tensors are used as they are, host tensors
// are uploaded on `stream` (a small copy: 8 bytes per token).
struct DeviceMeta {
  Tensor seg, pos;
};

Tensor meta_on_device(const Tensor& t, int64_t T, Device dev, const char* name, cudaStream_t stream) {
  SEQPAR_CHECK(t.defined() && t.dtype() == DType::kI32 && t.ndim() == 1 && t.numel() == T,
               "flash attention: {} must be i32 [{}], got {}", name, T, t.defined() ? t.str() : "undefined");
  if (t.device() == dev) return t;
  SEQPAR_CHECK(t.device().is_cpu(), "flash attention: {} is on {}, expected the host or {}", name, t.device().str(),
               dev.str());
  (void)stream;  // copy_from queues on the current stream, the one every caller passes
  Tensor d = Tensor::empty({T}, DType::kI32, dev);
  d.copy_from(t);  // a host wait ("copy from host"): once per token set, see TokenMeta's cache
  return d;
}

// The device copy of one metadata tensor, from m's cache (made on first use: one upload per token
// set and device, not one per call).
Tensor cached_on_device(const TokenMeta& m, const Tensor& t, const char* field, int64_t T, Device dev,
                        const std::string& name, cudaStream_t stream) {
  if (t.defined() && t.device() == dev) return meta_on_device(t, T, dev, name.c_str(), stream);
  std::lock_guard<std::mutex> lock(m.cache->mu);
  Tensor& d = m.cache->entries[std::string(field) + "@" + dev.str()];
  if (!d.defined()) d = meta_on_device(t, T, dev, name.c_str(), stream);
  return d;
}

DeviceMeta meta_on_device(const TokenMeta& m, int64_t T, Device dev, const char* name, cudaStream_t stream) {
  const std::string n(name);
  return {cached_on_device(m, m.seg, "seg", T, dev, n + ".seg", stream),
          cached_on_device(m, m.pos, "pos", T, dev, n + ".pos", stream)};
}

// Per-tile {min seg, max seg, min pos, max pos}: int4 [ceil(T / tile)], kept in m's cache.
Tensor tile_stats(const TokenMeta& m, const DeviceMeta& dm, int64_t T, int tile, Device dev, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(m.cache->mu);
  Tensor& s = m.cache->entries["stats" + std::to_string(tile) + "@" + dev.str()];
  if (s.defined()) return s;
  const int64_t n = (T + tile - 1) / tile;
  s = Tensor::empty({n, 4}, DType::kI32, dev);
  launch_tile_stats(reinterpret_cast<int4*>(s.raw()), dm.seg.data<int32_t>(), dm.pos.data<int32_t>(), T, tile, stream);
  return s;
}

// The documents to hand to cuDNN for this call, or nullopt for the flash kernel: the policy's
// backend, the device (auto: compute capability >= 9.0), outputs in q's 16-bit type, and
// attention_backend.h's packed_docs rule; for auto also its per-direction rule (auto_runs_own_kernel).
// Says why at debug level whenever a cuDNN setting ends on the flash kernel. bf16 and f16 q, k, v take
// the same route (the flash kernels are instantiated for both).
std::optional<PackedDocs> cudnn_route(AttnDirection dir, Device dev, int64_t Tq, int64_t Tk, int64_t D,
                                      bool sixteen_bit_outputs, const AttnArgs& args) {
  const AttentionBackend backend = args.policy.backend;
  if (backend == AttentionBackend::kFlash) return std::nullopt;
  const char* entry = dir == AttnDirection::kForward ? "attn_forward" : "attn_backward";
  std::string why;
  const int cc = backend == AttentionBackend::kAuto ? device_compute_capability(dev) : 0;
  if (backend == AttentionBackend::kAuto && cc < kAutoCudnnMinComputeCapability)
    why = fmt::format("{} has compute capability {}.{} (auto uses cuDNN from {}.{})", dev.str(), cc / 10, cc % 10,
                      kAutoCudnnMinComputeCapability / 10, kAutoCudnnMinComputeCapability % 10);
  if (why.empty() && !sixteen_bit_outputs) why = "f32 outputs or gradients (cuDNN writes q's 16-bit type)";
  std::optional<PackedDocs> docs;
  if (why.empty()) docs = packed_docs(args, Tq, Tk, &why);
  if (docs && backend == AttentionBackend::kAuto && (docs->num_docs() != 1 || args.policy.cudnn_dense != CudnnDense::kOn)) {
    // auto takes cuDNN where it was measured faster: its dense graph (one document), 1.3-2.0x the
    // flash kernel forward+backward on the H200 (bench/NOTES.md, 2026-12-02). Its ragged graph
    // (several documents) is not measured, and with GQA it holds two f32 [T, H, D] buffers more.
    why = "auto: several documents (cuDNN's ragged graph, not measured faster; backend cudnn takes it)";
    docs.reset();
  }
  // The kernel family a policy override pins (SEQPAR_FLASH_*_KERNEL=mma) is not the one measured faster.
  const FlashKernel pinned = dir == AttnDirection::kForward ? args.policy.fwd_kernel : args.policy.bwd_kernel;
  if (docs && backend == AttentionBackend::kAuto && pinned != FlashKernel::kMma &&
      auto_runs_own_kernel(dir, D, Tq, args.causal, cc)) {
    why = fmt::format("auto: the sm_90 kernel, measured faster than cuDNN at D={} from {} tokens", D,
                      kAutoOwnKernelMinTokens);
    docs.reset();
  }
  if (!docs) log_debug("{}: backend {} runs the flash kernel here: {}", entry, attention_backend_name(backend), why);
  return docs;
}

// The forward's parameters of one call, also the shared part of the backward's (BwdParams extends
// FwdParams): q, k, v and their shape, out and lse (the forward writes them, the backward reads the
// FINAL ones), the device mask metadata and its per-tile statistics, args' scale, causal flag and window.
FwdParams fwd_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                     const DeviceMeta& qm, const DeviceMeta& km, const Tensor& q_stats, const Tensor& k_stats,
                     const AttnArgs& args) {
  FwdParams p{};
  p.q = bits16_ptr(q);
  p.k = bits16_ptr(k);
  p.v = bits16_ptr(v);
  p.elem = elem_of(q);
  p.out = out.raw();
  p.out_f32 = out.dtype() == DType::kF32;
  p.lse = lse.data<float>();
  p.q_seg = qm.seg.data<int32_t>();
  p.q_pos = qm.pos.data<int32_t>();
  p.k_seg = km.seg.data<int32_t>();
  p.k_pos = km.pos.data<int32_t>();
  p.q_stats = reinterpret_cast<const int4*>(q_stats.raw());
  p.k_stats = reinterpret_cast<const int4*>(k_stats.raw());
  p.Tq = static_cast<int>(q.dim(0));
  p.Tk = static_cast<int>(k.dim(0));
  p.H = static_cast<int>(q.dim(1));
  p.Hkv = static_cast<int>(k.dim(1));
  p.D = static_cast<int>(q.dim(2));
  p.scale = args.scale;
  p.causal = args.causal;
  p.window = args.window;
  return p;
}

AttnPath flash_path(FlashKernel ran) {
  return ran == FlashKernel::kWgmma ? AttnPath::kFlashWgmma : AttnPath::kFlashMma;
}

}  // namespace

void attn_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const AttnArgs& args) {
  const Device dev = check_qkv(q, k, v);
  const int64_t Tq = q.dim(0), Tk = k.dim(0), H = q.dim(1), D = q.dim(2);
  check_cuda_tensor(out, "out", dev);
  check_cuda_tensor(lse, "lse", dev);
  check_shape(out, q.shape(), "out (must match q [Tq, H, D])");
  check_out_like_q(out, "out", q);
  check_shape(lse, {Tq, H}, "lse [Tq, H]");
  check_dtype(lse, DType::kF32, "lse");
  SEQPAR_CHECK(std::isfinite(args.scale) && args.scale > 0.f, "flash attention: scale={} must be finite and > 0",
               args.scale);
  if (Tq == 0 || H == 0) {
    if (args.ran) *args.ran = AttnPath::kNone;
    return;
  }
  if (const auto docs = cudnn_route(AttnDirection::kForward, dev, Tq, Tk, D, out.dtype() == q.dtype(), args)) {
    if (const AttnPath path = cudnn_attn_forward(out, lse, q, k, v, args, *docs); path != AttnPath::kNone) {
      if (args.ran) *args.ran = path;
      return;
    }
  }
  cudaStream_t stream = current_stream();
  const DeviceMeta qm = meta_on_device(args.q_meta, Tq, dev, "q_meta", stream);
  const DeviceMeta km = meta_on_device(args.k_meta, Tk, dev, "k_meta", stream);
  const FwdTile tile = fwd_tile(static_cast<int>(D), args.policy.fwd_tile);
  const Tensor q_stats = tile_stats(args.q_meta, qm, Tq, tile.bm, dev, stream);
  const Tensor k_stats = tile_stats(args.k_meta, km, Tk, tile.bn, dev, stream);

  const FwdParams p = fwd_params(q, k, v, out, lse, qm, km, q_stats, k_stats, args);
  const FlashKernel ran = launch_fwd(p, tile, args.policy.fwd_kernel, device_compute_capability(dev), stream);
  if (args.ran) *args.ran = flash_path(ran);
}

void attn_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& lse, const AttnArgs& args, GradMode mode) {
  const Device dev = check_qkv(q, k, v);
  const int64_t Tq = q.dim(0), Tk = k.dim(0), H = q.dim(1), D = q.dim(2);
  for (auto [t, name] : {std::pair<const Tensor*, const char*>{&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}, {&dout, "dout"},
                         {&out, "out"}, {&lse, "lse"}}) {
    check_cuda_tensor(*t, name, dev);
  }
  check_shape(dq, q.shape(), "dq (must match q [Tq, H, D])");
  check_shape(dk, k.shape(), "dk (must match k [Tk, Hkv, D])");
  check_shape(dv, k.shape(), "dv (must match v [Tk, Hkv, D])");
  check_shape(dout, q.shape(), "dout (must match q [Tq, H, D])");
  check_shape(out, q.shape(), "out (must match q [Tq, H, D])");
  check_shape(lse, {Tq, H}, "lse [Tq, H]");
  check_dtype(lse, DType::kF32, "lse");
  check_dtype(dout, q.dtype(), "dout (a tensor-core operand, q's type)");
  check_out_like_q(out, "out", q);
  check_out_like_q(dq, "dq", q);
  SEQPAR_CHECK(dk.dtype() == dq.dtype() && dv.dtype() == dq.dtype(),
               "flash attention: dq {}, dk {}, dv {} must share one dtype", dq.str(), dk.str(), dv.str());
  SEQPAR_CHECK(std::isfinite(args.scale) && args.scale > 0.f, "flash attention: scale={} must be finite and > 0",
               args.scale);
  const bool write = mode == GradMode::kWrite;
  if (Tq == 0 || Tk == 0 || H == 0) {  // no key or no query: every gradient contribution is 0
    if (write) {
      dq.zero();
      dk.zero();
      dv.zero();
    }
    if (args.ran) *args.ran = AttnPath::kNone;
    return;
  }
  // cuDNN reads an out of q's type; f32 gradients (a ring's accumulators) take its 16-bit result
  // added or cast.
  if (const auto docs = cudnn_route(AttnDirection::kBackward, dev, Tq, Tk, D, out.dtype() == q.dtype(), args)) {
    if (const AttnPath path = cudnn_attn_backward(dq, dk, dv, dout, q, k, v, out, lse, args, *docs, mode);
        path != AttnPath::kNone) {
      if (args.ran) *args.ran = path;
      return;
    }
  }
  cudaStream_t stream = current_stream();
  const DeviceMeta qm = meta_on_device(args.q_meta, Tq, dev, "q_meta", stream);
  const DeviceMeta km = meta_on_device(args.k_meta, Tk, dev, "k_meta", stream);
  const BwdTile tile = bwd_tile(static_cast<int>(D), args.policy.bwd_tile);
  const Tensor q_stats = tile_stats(args.q_meta, qm, Tq, tile.bm, dev, stream);
  const Tensor k_stats = tile_stats(args.k_meta, km, Tk, tile.bn, dev, stream);
  // Rows for the mma.sync kernel's tile and for the sm_90 kernel's (launch_bwd picks one).
  const int64_t pad = std::max(tile.bm, kBwdSm90MaxBm);
  const int64_t Tq_pad = (Tq + pad - 1) / pad * pad;
  Tensor dq_acc = Tensor::empty({Tq, H, D}, DType::kF32, dev);
  Tensor lse2 = Tensor::empty({H, Tq_pad}, DType::kF32, dev);
  Tensor delta = Tensor::empty({H, Tq_pad}, DType::kF32, dev);

  BwdParams p{};
  static_cast<FwdParams&>(p) = fwd_params(q, k, v, out, lse, qm, km, q_stats, k_stats, args);
  p.dout = bits16_ptr(dout);
  p.dq = dq.raw();
  p.dk = dk.raw();
  p.dv = dv.raw();
  p.dq_acc = dq_acc.data<float>();
  p.lse2 = lse2.data<float>();
  p.delta = delta.data<float>();
  p.grad_f32 = dq.dtype() == DType::kF32;
  p.write_grads = write;
  const FlashKernel ran = launch_bwd(p, tile, args.policy.bwd_kernel, device_compute_capability(dev), stream);
  if (args.ran) *args.ran = flash_path(ran);
}

void prepare_token_meta(const TokenMeta& meta, Device dev) {
  const int64_t T = meta.size();
  if (T == 0) return;
  int prev = 0;
  SEQPAR_CUDA_CHECK(cudaGetDevice(&prev));
  SEQPAR_CHECK(prev == dev.index, "prepare_token_meta: the calling thread's current GPU is cuda:{}, not {}", prev,
               dev.str());
  meta_on_device(meta, T, dev, "meta", current_stream());
}

void attn_merge(Tensor& out_acc, Tensor& lse_acc, const Tensor& out_part, const Tensor& lse_part) {
  SEQPAR_CHECK(out_acc.defined() && out_acc.device().is_cuda() && out_acc.ndim() == 3,
               "attn_merge: out_acc must be a CUDA [T, H, D] tensor, got {}", out_acc.str());
  const Device dev = out_acc.device();
  const int64_t T = out_acc.dim(0), H = out_acc.dim(1), D = out_acc.dim(2);
  check_cuda_tensor(lse_acc, "lse_acc", dev);
  check_cuda_tensor(out_part, "out_part", dev);
  check_cuda_tensor(lse_part, "lse_part", dev);
  check_shape(out_part, out_acc.shape(), "out_part (must match out_acc [T, H, D])");
  check_shape(lse_acc, {T, H}, "lse_acc [T, H]");
  check_shape(lse_part, {T, H}, "lse_part [T, H]");
  check_dtype(lse_acc, DType::kF32, "lse_acc");
  check_dtype(lse_part, DType::kF32, "lse_part");
  check_float_out(out_acc, "out_acc");
  check_float_out(out_part, "out_part");
  SEQPAR_CHECK(out_acc.dtype() == DType::kF32 || out_part.dtype() == DType::kF32 || out_acc.dtype() == out_part.dtype(),
               "attn_merge: out_acc {} and out_part {} are two different 16-bit types", out_acc.str(), out_part.str());
  SEQPAR_CHECK(D <= INT_MAX, "attn_merge: D={} too large", D);
  launch_merge(out_acc.raw(), lse_acc.data<float>(), out_part.raw(), lse_part.data<float>(), T * H, static_cast<int>(D),
               out_acc.dtype() == DType::kF32, out_part.dtype() == DType::kF32,
               out_acc.dtype() == DType::kF16 || out_part.dtype() == DType::kF16 ? Elem::kF16 : Elem::kBf16,
               current_stream());
}

}  // namespace seqpar::cuda_attn
