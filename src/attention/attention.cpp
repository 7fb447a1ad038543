// Entries of attention/attention.h: shape checks, dispatch by device (CPU reference in
// attention/cpu/, CUDA in attention/cuda/), token metadata helpers and LocalAttention.
#include "attention/attention.h"

#include <cmath>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "attention/cpu/attention_cpu.h"
#include "core/profile.h"
#if defined(SEQPAR_WITH_CUDA)
#include "attention/cuda/attention_cuda.h"
#endif

namespace seqpar {

namespace {

void check_meta(const TokenMeta& meta, const char* name) {
  SEQPAR_CHECK(meta.seg.defined() && meta.pos.defined(), "{} has undefined seg/pos tensors", name);
  SEQPAR_CHECK(meta.seg.ndim() == 1 && meta.pos.ndim() == 1 && meta.seg.numel() == meta.pos.numel(),
               "{}: seg {} and pos {} must be 1-D of the same length", name, meta.seg.str(), meta.pos.str());
  SEQPAR_CHECK(meta.seg.dtype() == DType::kI32 && meta.pos.dtype() == DType::kI32, "{}: seg {} and pos {} must be i32",
               name, meta.seg.str(), meta.pos.str());
}

// Shapes of q [Tq, H, D], k/v [Tk, Hkv, D], the metadata and the scale; returns nothing, throws
// naming the tensor and the rule.
void check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const AttnArgs& args) {
  SEQPAR_CHECK(q.ndim() == 3, "q must be [Tq, H, D], got {}", q.str());
  SEQPAR_CHECK(k.ndim() == 3, "k must be [Tk, Hkv, D], got {}", k.str());
  check_shape(v, k.shape(), "v (must match k)");
  const int64_t H = q.dim(1), Hkv = k.dim(1);
  SEQPAR_CHECK(Hkv > 0 && H % Hkv == 0, "query heads H={} must be a multiple of KV heads Hkv={} (q {}, k {})", H,
               Hkv, q.str(), k.str());
  SEQPAR_CHECK(q.dim(2) == k.dim(2), "head dim of q (D={}) must equal head dim of k/v (D={})", q.dim(2), k.dim(2));
  check_meta(args.q_meta, "q_meta");
  check_meta(args.k_meta, "k_meta");
  SEQPAR_CHECK(q.dim(0) == args.q_meta.size(), "q has Tq={} tokens but q_meta has {}", q.dim(0), args.q_meta.size());
  SEQPAR_CHECK(k.dim(0) == args.k_meta.size(), "k/v have Tk={} tokens but k_meta has {}", k.dim(0),
               args.k_meta.size());
  SEQPAR_CHECK(std::isfinite(args.scale) && args.scale > 0.f,
               "AttnArgs.scale={} must be finite and > 0 (normally 1/sqrt(D) = {})", args.scale,
               1.0 / std::sqrt(static_cast<double>(q.dim(2))));
  SEQPAR_CHECK(args.window >= 0 && (args.window == 0 || args.causal),
               "AttnArgs.window={} must be >= 0, and a window needs causal attention (causal={})", args.window,
               args.causal);
  SEQPAR_CHECK(k.device() == q.device() && v.device() == q.device(), "q on {}, k on {}, v on {}: one device please",
               q.device().str(), k.device().str(), v.device().str());
}

void check_same_device(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name) {
  SEQPAR_CHECK(t.device() == ref.device(), "{} is on {} but {} is on {}", name, t.device().str(), ref_name,
               ref.device().str());
}

// The CPU reference computes in f32 only (double is for the kernels' own tests).
void check_cpu_f32(const Tensor& t, const char* name) {
  SEQPAR_CHECK(t.dtype() == DType::kF32, "CPU attention needs f32 tensors; {} is {}", name, t.str());
}

void check_cpu_meta(const TokenMeta& meta, const char* name) {
  SEQPAR_CHECK(meta.seg.device().is_cpu() && meta.pos.device().is_cpu(),
               "CPU attention needs host {} tensors, got seg {} and pos {}", name, meta.seg.str(), meta.pos.str());
}

// The profile's name detail of a call: its shape and mask.
std::string profile_detail(int64_t Tq, int64_t Tk, int64_t H, int64_t Hkv, int64_t D, const AttnArgs& args) {
  return fmt::format("Tq={} Tk={} H={}/{} D={}{}{}", Tq, Tk, H, Hkv, D, args.causal ? " causal" : "",
                     args.window > 0 ? fmt::format(" window={}", args.window) : "");
}

cpu_attn::AttnMask cpu_mask(const AttnArgs& args) {
  check_cpu_meta(args.q_meta, "q_meta");
  check_cpu_meta(args.k_meta, "k_meta");
  return {args.q_meta.seg.data<int32_t>(), args.q_meta.pos.data<int32_t>(), args.k_meta.seg.data<int32_t>(),
          args.k_meta.pos.data<int32_t>(), args.causal, args.window};
}

#if !defined(SEQPAR_WITH_CUDA)
[[noreturn]] void no_cuda(const char* entry, const Tensor& t) {
  SEQPAR_CHECK(false, "{}: tensor {} is on a CUDA device but this build has no CUDA backend (SEQPAR_CUDA=OFF)", entry,
               t.str());
  __builtin_unreachable();
}
#endif

}  // namespace

// ---- token metadata -----------------------------------------------------------------------

TokenMeta token_meta_from_cu_seqlens(const std::vector<int32_t>& cu_seqlens) {
  SEQPAR_INPUT_CHECK(!cu_seqlens.empty(), "cu_seqlens is empty; it must hold at least [0] (num_docs + 1 offsets)");
  SEQPAR_INPUT_CHECK(cu_seqlens[0] == 0, "cu_seqlens[0]={} must be 0", cu_seqlens[0]);
  for (size_t d = 1; d < cu_seqlens.size(); ++d) {
    SEQPAR_INPUT_CHECK(cu_seqlens[d] >= cu_seqlens[d - 1],
                       "cu_seqlens[{}]={} < cu_seqlens[{}]={}: must be non-decreasing", d, cu_seqlens[d], d - 1,
                       cu_seqlens[d - 1]);
  }
  const int32_t T = cu_seqlens.back();
  std::vector<int32_t> seg(static_cast<size_t>(T)), pos(static_cast<size_t>(T));
  for (size_t d = 0; d + 1 < cu_seqlens.size(); ++d) {
    for (int32_t t = cu_seqlens[d]; t < cu_seqlens[d + 1]; ++t) {
      seg[t] = static_cast<int32_t>(d);
      pos[t] = t;
    }
  }
  return {Tensor::from_vector<int32_t>({T}, seg), Tensor::from_vector<int32_t>({T}, pos)};
}

TokenMeta concat_token_meta(const std::vector<TokenMeta>& parts) {
  int64_t total = 0;
  Device device = parts.empty() ? Device::cpu() : parts[0].seg.device();
  for (size_t p = 0; p < parts.size(); ++p) {
    check_meta(parts[p], "concat_token_meta part");
    SEQPAR_CHECK(parts[p].seg.device() == device && parts[p].pos.device() == device,
                 "concat_token_meta: part {} is on {}, part 0 on {}", p, parts[p].seg.device().str(), device.str());
    total += parts[p].size();
  }
  TokenMeta out{Tensor::empty({total}, DType::kI32, device), Tensor::empty({total}, DType::kI32, device)};
  int64_t at = 0;
  for (const TokenMeta& part : parts) {
    const int64_t n = part.size();
    Tensor seg_dst = out.seg.rows(at, at + n);
    Tensor pos_dst = out.pos.rows(at, at + n);
    seg_dst.copy_from(part.seg);
    pos_dst.copy_from(part.pos);
    at += n;
  }
  return out;
}

void prepare_token_meta(const TokenMeta& meta, Device device) {
  if (!device.is_cuda()) return;
#if defined(SEQPAR_WITH_CUDA)
  cuda_attn::prepare_token_meta(meta, device);
#else
  no_cuda("prepare_token_meta", meta.seg);
#endif
}

// ---- entries --------------------------------------------------------------------------------

void attn_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const AttnArgs& args) {
  check_qkv(q, k, v, args);
  const int64_t Tq = q.dim(0), Tk = k.dim(0), H = q.dim(1), Hkv = k.dim(1), D = q.dim(2);
  check_shape(out, q.shape(), "out (must match q [Tq, H, D])");
  check_shape(lse, {Tq, H}, "lse [Tq, H]");
  check_dtype(lse, DType::kF32, "lse");
  check_same_device(out, "out", q, "q");
  check_same_device(lse, "lse", q, "q");
  ProfileScope prof(q.device(), __func__);
  if (prof.active()) prof.detail(profile_detail(Tq, Tk, H, Hkv, D, args));
  if (q.device().is_cuda()) {
#if defined(SEQPAR_WITH_CUDA)
    cuda_attn::attn_forward(out, lse, q, k, v, args);
    return;
#else
    no_cuda("attn_forward", q);
#endif
  }
  check_cpu_f32(q, "q");
  check_cpu_f32(k, "k");
  check_cpu_f32(v, "v");
  check_cpu_f32(out, "out");
  cpu_attn::attn_forward<float>(out.data<float>(), lse.data<float>(), q.data<float>(), k.data<float>(),
                                v.data<float>(), cpu_mask(args), Tq, Tk, H, Hkv, D, args.scale);
  if (args.ran) *args.ran = AttnPath::kCpu;
}

void attn_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& lse, const AttnArgs& args, GradMode mode) {
  check_qkv(q, k, v, args);
  const int64_t Tq = q.dim(0), Tk = k.dim(0), H = q.dim(1), Hkv = k.dim(1), D = q.dim(2);
  check_shape(dq, q.shape(), "dq (must match q [Tq, H, D])");
  check_shape(dk, k.shape(), "dk (must match k [Tk, Hkv, D])");
  check_shape(dv, k.shape(), "dv (must match v [Tk, Hkv, D])");
  check_shape(dout, q.shape(), "dout (must match q [Tq, H, D])");
  check_shape(out, q.shape(), "out (must match q [Tq, H, D])");
  check_shape(lse, {Tq, H}, "lse [Tq, H]");
  check_dtype(lse, DType::kF32, "lse");
  check_same_device(dq, "dq", q, "q");
  check_same_device(dk, "dk", q, "q");
  check_same_device(dv, "dv", q, "q");
  check_same_device(dout, "dout", q, "q");
  check_same_device(out, "out", q, "q");
  check_same_device(lse, "lse", q, "q");
  ProfileScope prof(q.device(), __func__);
  if (prof.active()) prof.detail(profile_detail(Tq, Tk, H, Hkv, D, args));
  if (q.device().is_cuda()) {
#if defined(SEQPAR_WITH_CUDA)
    cuda_attn::attn_backward(dq, dk, dv, dout, q, k, v, out, lse, args, mode);
    return;
#else
    no_cuda("attn_backward", q);
#endif
  }
  for (auto [t, name] : {std::pair<const Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"},
                         {&dout, "dout"}, {&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}}) {
    check_cpu_f32(*t, name);
  }
  // The reference kernel accumulates; writing is accumulating into zeros (exact, and every
  // element is written whatever the mask).
  if (mode == GradMode::kWrite) {
    dq.zero();
    dk.zero();
    dv.zero();
  }
  cpu_attn::attn_backward<float>(dq.data<float>(), dk.data<float>(), dv.data<float>(), dout.data<float>(),
                                 q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(),
                                 lse.data<float>(), cpu_mask(args), Tq, Tk, H, Hkv, D, args.scale);
  if (args.ran) *args.ran = AttnPath::kCpu;
}

void attn_merge(Tensor& out_acc, Tensor& lse_acc, const Tensor& out_part, const Tensor& lse_part) {
  SEQPAR_CHECK(out_acc.ndim() == 3, "out_acc must be [T, H, D], got {}", out_acc.str());
  const int64_t T = out_acc.dim(0), H = out_acc.dim(1), D = out_acc.dim(2);
  check_shape(out_part, out_acc.shape(), "out_part (must match out_acc [T, H, D])");
  check_shape(lse_acc, {T, H}, "lse_acc [T, H]");
  check_shape(lse_part, {T, H}, "lse_part [T, H]");
  check_dtype(lse_acc, DType::kF32, "lse_acc");
  check_dtype(lse_part, DType::kF32, "lse_part");
  check_same_device(lse_acc, "lse_acc", out_acc, "out_acc");
  check_same_device(out_part, "out_part", out_acc, "out_acc");
  check_same_device(lse_part, "lse_part", out_acc, "out_acc");
  if (out_acc.device().is_cuda()) {
#if defined(SEQPAR_WITH_CUDA)
    cuda_attn::attn_merge(out_acc, lse_acc, out_part, lse_part);
    return;
#else
    no_cuda("attn_merge", out_acc);
#endif
  }
  check_cpu_f32(out_acc, "out_acc");
  check_cpu_f32(out_part, "out_part");
  cpu_attn::attn_merge<float>(out_acc.data<float>(), lse_acc.data<float>(), out_part.data<float>(),
                              lse_part.data<float>(), T, H, D);
}

void Attention::restore_inputs(AttentionContext& /*ctx*/, const Tensor& /*q*/, const Tensor& /*k*/,
                               const Tensor& /*v*/) {
  SEQPAR_CHECK(false, "Attention::restore_inputs: this implementation released no inputs");
}

// ---- LocalAttention -----------------------------------------------------------------------

namespace {

// What LocalAttention::backward needs: the forward's inputs and results. The tensors share
// storage with the caller's (no copies), so the caller must not overwrite q, k, v or out
// between forward and backward.
class LocalAttentionContext final : public AttentionContext {
 public:
  Tensor q, k, v, out, lse;
  float scale = 0.f;
  int32_t window = 0;
};

LocalAttentionContext& local_context(AttentionContext& ctx, const char* what) {
  auto* c = dynamic_cast<LocalAttentionContext*>(&ctx);
  SEQPAR_CHECK(c != nullptr, "LocalAttention::{} got a context made by another Attention implementation", what);
  return *c;
}

}  // namespace

std::unique_ptr<AttentionContext> LocalAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                          Tensor& out, float scale, int32_t window) {
  SEQPAR_CHECK(q.ndim() == 3, "q must be [T, H, D], got {}", q.str());
  auto ctx = std::make_unique<LocalAttentionContext>();
  ctx->lse = Tensor::empty({q.dim(0), q.dim(1)}, DType::kF32, q.device());
  attn_forward(out, ctx->lse, q, k, v, AttnArgs{meta_, meta_, causal_, scale, policy_, nullptr, window});
  ctx->q = q;
  ctx->k = k;
  ctx->v = v;
  ctx->out = out;
  ctx->scale = scale;
  ctx->window = window;
  return ctx;
}

bool LocalAttention::release_inputs(AttentionContext& ctx) {
  LocalAttentionContext& c = local_context(ctx, "release_inputs");
  c.q = c.k = c.v = Tensor();
  return true;
}

void LocalAttention::restore_inputs(AttentionContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v) {
  LocalAttentionContext& c = local_context(ctx, "restore_inputs");
  SEQPAR_CHECK(!c.q.defined(), "LocalAttention::restore_inputs: the context still holds its inputs");
  SEQPAR_CHECK(q.shape() == c.out.shape() && k.shape() == v.shape() && k.dim(0) == q.dim(0),
               "LocalAttention::restore_inputs: q {}, k {}, v {} for an output {}", q.str(), k.str(), v.str(),
               c.out.str());
  c.q = q;
  c.k = k;
  c.v = v;
}

void LocalAttention::backward(AttentionContext& ctx, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  const LocalAttentionContext& c = local_context(ctx, "backward");
  SEQPAR_CHECK(c.q.defined(), "LocalAttention::backward: the context's inputs were released and not restored");
  // The Attention interface writes (=); one key block, so attn_backward writes directly.
  attn_backward(dq, dk, dv, dout, c.q, c.k, c.v, c.out, c.lse, AttnArgs{meta_, meta_, causal_, c.scale, policy_, nullptr, c.window},
                GradMode::kWrite);
}

}  // namespace seqpar
