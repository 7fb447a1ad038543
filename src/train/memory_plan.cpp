// The memory plan of a training step (memory_plan.h). Every term names the tensor it counts and
// where the code allocates it, so the plan changes with the code.
#include "train/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "model/llama.h"
#include "train/optimizer.h"

namespace seqpar {

namespace {

constexpr int64_t kGemmWorkspace = 32ll << 20;  // kernels/cuda/matmul.cpp, per thread and device

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// GiB, or MiB below one GiB.
std::string gib(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < (1ll << 30)) return fmt::format("{:.1f} MiB", b / (1ll << 20));
  return fmt::format("{:.2f} GiB", b / (1ll << 30));
}

}  // namespace

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  const LlamaConfig& m = in.model;
  m.validate();
  SEQPAR_INPUT_CHECK(in.seq_len >= 1, "seq_len={} must be >= 1", in.seq_len);
  SEQPAR_INPUT_CHECK(in.micro_batch >= 1, "micro_batch={} must be >= 1", in.micro_batch);
  SEQPAR_INPUT_CHECK(in.sp >= 1, "sp={} must be >= 1", in.sp);
  SEQPAR_INPUT_CHECK(in.ulysses_degree >= 1 && in.sp % in.ulysses_degree == 0,
                     "ulysses_degree={} must be >= 1 and divide sp={}", in.ulysses_degree, in.sp);
  SEQPAR_INPUT_CHECK(in.world >= in.sp && in.world % in.sp == 0, "world={} must be a multiple of sp={}", in.world,
                     in.sp);
  SEQPAR_INPUT_CHECK(m.num_heads % in.ulysses_degree == 0,
                     "ulysses_degree={} must divide num_attention_heads={} (each Ulysses rank takes whole heads)",
                     in.ulysses_degree, m.num_heads);
  SEQPAR_INPUT_CHECK(in.mlp_tile_tokens >= 0 && in.loss_tile_tokens >= 0,
                     "tiled_mlp_tokens={} and tiled_loss_tokens={} must be >= 0", in.mlp_tile_tokens,
                     in.loss_tile_tokens);
  SEQPAR_INPUT_CHECK(in.zero_stage >= 0 && in.zero_stage <= 3, "zero_stage={} must be 0, 1, 2 or 3", in.zero_stage);
  LlamaModel::policy_for(in.activation_checkpointing, in.checkpoint_keep_attention);  // checks the pair

  const int64_t a = in.cuda ? 2 : 4;  // activation and weight bytes: bf16 on CUDA, f32 on the CPU
  const int64_t C = m.hidden_size, F = m.intermediate_size, V = m.vocab_size, L = m.num_layers;
  const int64_t H = m.num_heads, Hkv = m.num_kv_heads, D = m.head_dim;
  const int64_t U = in.ulysses_degree;
  // Tokens per rank: the step's sequences split over the sp ranks (sp_batch pads to a multiple of
  // 2·sp for the zigzag layout; the padding is at most that).
  const int64_t T = ceil_div(static_cast<int64_t>(in.micro_batch) * in.seq_len, in.sp);

  MemoryPlan p;
  p.tokens_per_rank = T;

  // ---- resident: model states (model/llama.cpp LlamaParams, train/optimizer.cpp AdamW) ----------
  int64_t n = 0;
  for (const auto& [name, shape] : LlamaParams::shapes(m)) n += shape_numel(shape);
  const LlamaParams::FlatLayout layout = LlamaParams::flat_layout(m);
  const int64_t n_flat = layout.total;
  const bool zero = in.zero_stage >= 1 && in.world > 1;
  const int64_t shard = zero ? AdamW::shard_len_for(n_flat, in.world) : 0;
  const int64_t opt_elems = zero ? shard : n;  // per moment (and master), per rank
  p.resident.emplace_back(in.cuda ? "weights (bf16)" : "weights (f32)", a * n_flat);
  if (zero && in.zero_stage >= 2) {
    // Partitioned (LlamaModel::set_grad_sink, the trainer's shard): the shard, one layer's block,
    // and the embedding / final norm / LM head gradients (tensors of their own, unpadded).
    const int64_t edges = (m.tie_word_embeddings ? 1 : 2) * V * C + C;
    p.resident.emplace_back(fmt::format("gradients (f32, 1/{} ZeRO-2 shard + a layer + edges)", in.world),
                            4 * (shard + layout.layer_elems + edges));
  } else {
    p.resident.emplace_back("gradients (f32)", 4 * n_flat);
  }
  p.resident.emplace_back(zero ? fmt::format("AdamW moments (f32, 1/{} ZeRO shard)", in.world) : "AdamW moments (f32)",
                          2 * 4 * opt_elems);
  if (in.cuda)
    p.resident.emplace_back(zero ? fmt::format("master weights (f32, 1/{} ZeRO shard)", in.world)
                                 : "master weights (f32)",
                            4 * opt_elems);
  // ids, positions, targets (i32) and the attention's segment / position metadata (i32).
  p.resident.emplace_back("batch and attention metadata", 20 * T);
  if (in.cuda) p.resident.emplace_back("cuBLASLt workspace", kGemmWorkspace);

  // ---- what forward keeps per token of each layer (LlamaModel::LayerActs, the attention context) --
  const int64_t kv_heads = in.sp > 1 ? std::max(Hkv, U) : Hkv;  // GQA heads replicated up to U
  // Local attention keeps q, k, v and the f32 LSE (out is the layer's attn_out); the sequence-
  // parallel context keeps its own gathered q, k, v, out and LSE (parallel/sp_attention.cpp).
  const int64_t ctx = a * H * D + 2 * a * kv_heads * D + 4 * H + (in.sp > 1 ? a * H * D : 0);
  const bool tiled_mlp = in.mlp_tile_tokens > 0 && in.mlp_tile_tokens < T;
  const int64_t mlp_kept = tiled_mlp ? 0 : 3 * a * F;  // gate, up, h
  // x_in, rstd1, xn1, ctx, attn_out, x_mid, rstd2, xn2, MLP.
  const int64_t full = a * C + 4 + a * C + ctx + a * H * D + a * C + 4 + a * C + mlp_kept;
  int64_t kept = full;
  if (in.activation_checkpointing) kept = in.checkpoint_keep_attention ? a * C + ctx + a * H * D : a * C;
  p.kept_per_token_layer = kept;
  const int64_t layers_kept = L * kept * T;
  const int64_t final_acts = (a * C + 4 + a * C) * T;  // x_final, rstd_f, xn_f (kept through backward)

  // ---- phases --------------------------------------------------------------------------------
  const bool tiled_loss = in.loss_tile_tokens > 0 && in.loss_tile_tokens < T;
  const int64_t loss_rows = tiled_loss ? in.loss_tile_tokens : T;
  // Forward: the LM head's logits and the per-token losses (f32); with checkpointing, also one
  // layer's full activations and its output while it runs.
  const int64_t fwd_layer = in.activation_checkpointing ? (full - kept + a * C) * T : 0;
  const int64_t forward = layers_kept + final_acts + std::max(fwd_layer, a * V * loss_rows + 4 * T);
  // Loss backward: logits and dlogits (whole or one tile) and dxn.
  const int64_t loss_bwd = layers_kept + final_acts + 2 * a * V * loss_rows + a * C * T;
  // Top layer's backward: dx, dtmp, dxn; the recompute of what forward dropped (not the layer's
  // output); then the larger of the MLP's transient (dh, dgate, dup; per tile also gate, up, h)
  // and attention's (dattn, dq, dk, dv, the sequence-parallel gathered dout / dq / dk / dv, the
  // CUDA flash backward's f32 dq accumulator and row statistics).
  const int64_t recompute = (full - kept) * T;
  const int64_t mlp_t = tiled_mlp ? 6 * a * F * in.mlp_tile_tokens : 3 * a * F * T;
  int64_t attn_t = (2 * a * H * D + 2 * a * Hkv * D) * T;
  if (in.sp > 1) attn_t += (2 * a * H * D + 2 * a * kv_heads * D) * T;
  if (in.cuda) attn_t += (4 * H * D + 8 * H) * T;
  const int64_t layer_bwd = layers_kept + final_acts + 3 * a * C * T + recompute + std::max(mlp_t, attn_t);
  // Optimizer: ZeRO all-gathers the updated weights (this rank's shard, then all of them).
  const int64_t optimizer = zero ? a * shard * (1 + in.world) : 0;

  p.phases = {{"forward (activations kept + LM head)", forward},
              {"loss backward (activations kept + logits and their gradient)", loss_bwd},
              {"top layer backward (activations kept + recompute + gradients)", layer_bwd},
              {"optimizer step (ZeRO weight all-gather)", optimizer}};
  int64_t best = -1;
  for (const auto& [name, bytes] : p.phases)
    if (bytes > best) best = bytes, p.peak_phase = name;
  for (const auto& [name, bytes] : p.resident) p.resident_bytes += bytes;
  p.peak_bytes = p.resident_bytes + best;
  return p;
}

int64_t longest_fitting_seq_len(MemoryPlanInput in, int64_t capacity_bytes, int64_t granularity) {
  SEQPAR_INPUT_CHECK(granularity >= 1, "granularity={} must be >= 1", granularity);
  auto fits = [&](int64_t units) {
    in.seq_len = units * granularity;
    return plan_memory(in).peak_bytes <= capacity_bytes;
  };
  // The peak grows with the sequence: double until it no longer fits, then bisect.
  int64_t lo = 0, hi = 1;
  while (fits(hi)) {
    lo = hi;
    SEQPAR_CHECK(hi < (int64_t{1} << 40) / granularity, "longest_fitting_seq_len: no limit found");
    hi *= 2;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo * granularity;
}

std::string format_memory_plan(const MemoryPlanInput& in, const MemoryPlan& p, int64_t capacity_bytes) {
  std::string s = fmt::format(
      "Memory plan per GPU: {} tokens per rank ({} × {} tokens over sp={}), {} layers, {}{}{}{}{}\n",
      p.tokens_per_rank, in.micro_batch, in.seq_len, in.sp, in.model.num_layers, in.cuda ? "bf16 on CUDA" : "f32 on CPU",
      in.activation_checkpointing ? (in.checkpoint_keep_attention ? ", checkpointing (keeping attention)"
                                                                  : ", activation checkpointing")
                                  : "",
      in.mlp_tile_tokens > 0 ? fmt::format(", tiled MLP {}", in.mlp_tile_tokens) : "",
      in.loss_tile_tokens > 0 ? fmt::format(", tiled loss {}", in.loss_tile_tokens) : "",
      in.zero_stage > 0 ? fmt::format(", ZeRO-{} over {}", std::min(in.zero_stage, 2), in.world) : "");
  s += "resident:\n";
  for (const auto& [name, bytes] : p.resident) s += fmt::format("  {:<52} {:>12}\n", name, gib(bytes));
  s += fmt::format("  {:<52} {:>12}\n", "total", gib(p.resident_bytes));
  s += fmt::format("activations kept per token and layer: {} bytes\n", p.kept_per_token_layer);
  s += "phases (on top of the resident state):\n";
  for (const auto& [name, bytes] : p.phases)
    s += fmt::format("  {:<64} {:>12}{}\n", name, gib(bytes), name == p.peak_phase ? "  <- peak" : "");
  s += fmt::format("predicted peak: {}", gib(p.peak_bytes));
  if (capacity_bytes > 0)
    s += fmt::format(" of {} ({})", gib(capacity_bytes),
                     p.peak_bytes <= capacity_bytes ? "fits" : "does NOT fit: add GPUs (--sp), checkpointing or tiles");
  s += "\n";
  return s;
}

}  // namespace seqpar
