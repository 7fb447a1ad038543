// The memory plan of a training step (memory_plan.h). Every term names the tensor it counts and
// where the code allocates it, so the plan changes with the code.
#include "train/memory_plan.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "attention/attention_backend.h"
#include "core/error.h"
#include "core/offload.h"
#include "model/llama.h"
#include "parallel/sp_attention.h"
#include "train/optimizer.h"
#include "train/zero_shard.h"

namespace seqpar {

namespace {

constexpr int64_t kGemmWorkspace = 32ll << 20;  // kernels/cuda/matmul.cpp, per thread and device
constexpr int64_t kCudaProcessHostBytes = (7ll << 30) / 10;  // MemoryPlan::host_process_bytes (measured)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- sequence-parallel attention (parallel/sp_attention.cpp, UspAttention) ------------------------
// The plan walks UspAttention's forward and backward allocation by allocation, in bytes per token of
// the local shard (every buffer is T times a per-token size). Each message has a send buffer, the
// backend's copy of what goes to other ranks (an all-to-all's own chunk is copied in place; both
// backends copy a send when it is posted: comm/local.cpp keeps the copy until the peer receives it,
// comm/cuda/nccl_comm.cpp on the GPU until this rank's wait()) and a receive buffer.

// One Ulysses head group seen from one rank: its query and KV heads, and those of the u ranks
// together (what the group's all-to-alls carry).
struct SpGroup {
  int64_t q = 0, kv = 0, q_all = 0, kv_all = 0;
};

// UspAttention's head split (query_heads, kv_heads, the head groups), per Ulysses rank: H / u query
// heads (the plan requires u | H) cut into G consecutive parts, each with the KV heads its query
// heads read, or one KV copy per query head when those serve its query heads unevenly.
std::vector<std::vector<SpGroup>> sp_head_groups(int64_t H, int64_t Hkv, int64_t u, int head_groups) {
  const int64_t h = H / u, per_kv = H / Hkv;
  const int64_t G = u == 1 ? 1 : std::clamp<int64_t>(head_groups, 1, h);
  auto kv_heads = [&](int64_t begin, int64_t end) {
    const int64_t n = end - begin, kv_begin = begin / per_kv, kv_end = (end - 1) / per_kv + 1;
    const int64_t n_kv = kv_end - kv_begin;
    for (int64_t k = kv_begin; k < kv_end; ++k)
      if (n % n_kv != 0 || std::min(end, (k + 1) * per_kv) - std::max(begin, k * per_kv) != n / n_kv) return n;
    return n_kv;
  };
  std::vector<std::vector<SpGroup>> ranks(static_cast<size_t>(u), std::vector<SpGroup>(static_cast<size_t>(G)));
  for (int64_t g = 0; g < G; ++g) {
    int64_t q_all = 0, kv_all = 0;
    for (int64_t j = 0; j < u; ++j) {
      SpGroup& s = ranks[j][g];
      const int64_t begin = j * h + h * g / G, end = j * h + h * (g + 1) / G;
      s.q = end - begin;
      s.kv = kv_heads(begin, end);
      q_all += s.q;
      kv_all += s.kv;
    }
    for (auto& rank : ranks) rank[g].q_all = q_all, rank[g].kv_all = kv_all;
  }
  return ranks;
}

// Bytes alive over a sequence of allocations and frees, and their peak.
struct Live {
  int64_t now = 0, peak = 0;
  void alloc(int64_t bytes) { peak = std::max(peak, now += bytes); }
  void free(int64_t bytes) { now -= bytes; }
};

// UspAttention::forward on one rank, per local token: the peak of what it allocates, and the context
// it keeps for backward (Ulysses' gathered q, k, v; out and lse), given u ranks of a Ulysses group,
// r of a ring, head dim D and activation bytes a.
struct SpForward {
  int64_t peak = 0, ctx = 0;
};
SpForward sp_forward_bytes(const std::vector<SpGroup>& groups, int64_t u, int64_t r, int64_t D, int64_t a) {
  Live m;
  // Heads of q, k and v together: this rank's, all ranks'.
  auto mine = [](const SpGroup& s) { return s.q + 2 * s.kv; };
  auto all = [](const SpGroup& s) { return s.q_all + 2 * s.kv_all; };
  // post_heads_to_tokens of q, k, v: send, receive [u*T, h|hk, D], copies (none without Ulysses: the
  // input is the result).
  auto post_inputs = [&](const SpGroup& s) {
    if (u > 1) m.alloc(a * D * (all(s) + u * mine(s) + (all(s) - mine(s))));
  };
  post_inputs(groups[0]);
  int64_t back = 0;  // the output gathers' receive buffers, held until forward returns
  for (size_t g = 0; g < groups.size(); ++g) {
    const SpGroup& s = groups[g];
    if (g + 1 < groups.size()) post_inputs(groups[g + 1]);     // the next group travels meanwhile
    if (u > 1) m.free(a * D * (all(s) + (all(s) - mine(s))));  // finish: send and copies
    const int64_t out = a * D * u * s.q, lse = 4 * u * s.q, kv = a * D * u * s.kv;
    m.alloc(out + lse);  // the context's out, lse
    // ring_forward: out_part, lse_part; each hop's next k, v and the copies of the current ones, which
    // are freed as it arrives, with the block before unless that was the context's.
    m.alloc(out + lse);
    for (int64_t step = 0; step + 1 < r; ++step) {
      m.alloc(4 * kv);
      m.free(2 * kv + (step > 0 ? 2 * kv : 0));
    }
    m.free(out + lse + (r > 1 ? 2 * kv : 0));  // out_part, lse_part, the last block
    // post_tokens_to_heads(out): receive buffer and copies (the send is the context's out).
    if (u > 1) m.alloc(a * D * (s.q_all + (u - 1) * s.q));
    if (u > 1) back += a * D * s.q_all;
  }
  for (const SpGroup& s : groups)
    if (u > 1) m.free(a * D * (u - 1) * s.q);  // finish_tokens_to_heads: the copies
  m.free(back);
  return {m.peak, m.now};
}

// UspAttention::backward on one rank, per local token: the peak of what it allocates beyond its
// arguments (dout, dq, dk, dv). `workspace` is the attention backend's per (query row, head) scratch
// during each attn_backward call.
int64_t sp_backward_bytes(const std::vector<SpGroup>& groups, int64_t u, int64_t r, int64_t Hkv, int64_t D, int64_t a,
                          int64_t workspace) {
  Live m;
  // post_heads_to_tokens(dout): send, receive, copies.
  auto post_dout = [&](const SpGroup& s) {
    if (u > 1) m.alloc(a * D * (s.q_all + u * s.q + (s.q_all - s.q)));
  };
  post_dout(groups[0]);
  for (size_t g = 0; g < groups.size(); ++g) {
    const SpGroup& s = groups[g];
    if (g + 1 < groups.size()) post_dout(groups[g + 1]);
    if (u > 1) m.free(a * D * (s.q_all + (s.q_all - s.q)));  // finish: dout_g stays until backward returns
    const int64_t dq = a * D * u * s.q, kv = a * D * u * s.kv, ws = workspace * u * s.q;
    m.alloc(dq + 2 * kv);  // dq_g, dk_g, dv_g
    if (r == 1) m.alloc(ws), m.free(ws);
    // ring_backward: each step, the next k, v and the copies of the current ones; this step's dk, dv
    // (their copies travel on); the accumulators dk_in, dv_in. Every wait frees the copies it covers,
    // and the arriving block frees the one before unless that was the context's.
    for (int64_t step = 0; step < r && r > 1; ++step) {
      if (step + 1 < r) m.alloc(4 * kv);
      m.alloc(2 * kv);
      m.alloc(ws), m.free(ws);         // attn_backward
      if (step > 0) m.free(2 * kv);    // the accumulators' hop: its copies (dk_in, dv_in replaced)
      if (step == 0) m.alloc(2 * kv);  // dk_in, dv_in
      m.alloc(2 * kv);                 // the copies of dk, dv
      if (step + 1 < r) m.free(2 * kv + (step > 0 ? 2 * kv : 0));
      m.free(2 * kv);  // this step's dk, dv
    }
    if (r > 1) m.free(6 * kv);  // the last hop's copies, dk_in, dv_in, the last block
    // post_tokens_to_heads of dq_g, dk_g, dv_g: receive buffers and copies (the sends are views of
    // dq_g, dk_g, dv_g and keep them alive until finished).
    if (u > 1) m.alloc(a * D * ((s.q_all + 2 * s.kv_all) + (u - 1) * (s.q + 2 * s.kv)));
  }
  // finish_tokens_to_heads, group by group: the copies and dq_g, dk_g, dv_g go; dk and dv are summed
  // through a zeroed [T, Hkv, D] buffer per source rank (two when a rank's KV copies overlap: not
  // modelled, dq_g has gone by then).
  for (const SpGroup& s : groups) {
    if (u == 1) continue;  // one rank: the gradients are added from dq_g, dk_g, dv_g in place
    m.free(a * D * u * s.q + a * D * (u - 1) * s.q);
    for (int i = 0; i < 2; ++i) {
      m.free(a * D * u * s.kv + a * D * (u - 1) * s.kv);
      m.alloc(a * D * Hkv), m.free(a * D * Hkv);
    }
  }
  return m.peak;
}

// GiB, or MiB below one GiB.
std::string gib(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < (1ll << 30)) return fmt::format("{:.1f} MiB", b / (1ll << 20));
  return fmt::format("{:.2f} GiB", b / (1ll << 30));
}

// Bounds that keep every byte count of the plan (and of the run it plans) inside int64.
constexpr int64_t kMaxPlanSeqLen = int64_t{1} << 40;
constexpr int kMaxPlanRanks = 1 << 24;
constexpr long double kMaxPlanBytes = 1152921504606846976.0L;  // 2^60 (1 EiB): no machine holds it

// An upper bound, computed in long double (which cannot overflow at these sizes), of every byte
// count plan_memory forms: each per-token term of a layer (activations, the sequence-parallel
// walks, the attention workspace) is below 64 · (C + F + (H + 2 Hkv) · D + H + 16) · (U + 1)
// bytes, the LM head's below 64 · V per token, the model states below 32 bytes per parameter.
// The model's sizes are bounded by LlamaConfig::validate, so the products here are finite.
long double plan_bytes_bound(const MemoryPlanInput& in) {
  const LlamaConfig& m = in.model;
  const long double C = m.hidden_size, F = m.intermediate_size, V = m.vocab_size, L = m.num_layers;
  const long double H = m.num_heads, Hkv = m.num_kv_heads, D = m.head_dim, U = in.ulysses_degree;
  const long double T = static_cast<long double>(in.micro_batch) * in.seq_len / in.sp + 1;
  const long double per_token_layer = 64 * (C + F + (H + 2 * Hkv) * D + H + 16) * (U + 1);
  const long double P = m.positions == PositionKind::kLearned ? m.max_position_embeddings : 0;  // wpe rows
  const long double params = 2 * V * C + P * C + 2 * C + L * (4 * C + 3 * F * C + 2 * F + 2 * (H + Hkv) * D * C);
  return (L + 4) * T * per_token_layer + 64 * T * V + 32 * params + (1 << 27);
}

// The sizes' bounds: a run whose plan would exceed kMaxPlanBytes cannot fit any machine, and
// refusing it keeps the arithmetic below from overflowing (a seq_len near 2^62 used to wrap the
// byte counts negative and "fit").
void check_plan_bounds(const MemoryPlanInput& in) {
  SEQPAR_INPUT_CHECK(in.seq_len <= kMaxPlanSeqLen, "seq_len={} must be <= 2^40 ({})", in.seq_len, kMaxPlanSeqLen);
  SEQPAR_INPUT_CHECK(in.world <= kMaxPlanRanks, "world={} must be <= 2^24 ranks", in.world);
  const long double tokens = static_cast<long double>(in.micro_batch) * in.seq_len;
  SEQPAR_INPUT_CHECK(tokens <= kMaxPlanSeqLen,
                     "micro_batch={} x seq_len={} = {:.0f} tokens per step and data-parallel rank is more than 2^40",
                     in.micro_batch, in.seq_len, static_cast<double>(tokens));
  const long double bound = plan_bytes_bound(in);
  SEQPAR_INPUT_CHECK(bound <= kMaxPlanBytes,
                     "seq_len={} with micro_batch={} over sp={} on this model ({} layers, hidden_size={}, vocab_size={}) "
                     "needs on the order of {:.3g} bytes per rank, beyond 2^60 (1 EiB): it cannot fit any machine; "
                     "lower --seq-len or --micro-batch, or raise --sp",
                     in.seq_len, in.micro_batch, in.sp, in.model.num_layers, in.model.hidden_size,
                     in.model.vocab_size, static_cast<double>(bound));
}

// The plan's input against the trainer's rules (InputError naming the setting).
void check_plan_input(const MemoryPlanInput& in) {
  const LlamaConfig& m = in.model;
  m.validate();
  SEQPAR_INPUT_CHECK(in.seq_len >= 1, "seq_len={} must be >= 1", in.seq_len);
  m.check_positions(in.seq_len);  // learned positions: no longer than n_positions
  SEQPAR_INPUT_CHECK(in.micro_batch >= 1, "micro_batch={} must be >= 1", in.micro_batch);
  SEQPAR_INPUT_CHECK(in.sp >= 1, "sp={} must be >= 1", in.sp);
  SEQPAR_INPUT_CHECK(in.ulysses_degree >= 1 && in.sp % in.ulysses_degree == 0,
                     "ulysses_degree={} must be >= 1 and divide sp={}", in.ulysses_degree, in.sp);
  SEQPAR_INPUT_CHECK(in.world >= in.sp && in.world % in.sp == 0, "world={} must be a multiple of sp={}", in.world,
                     in.sp);
  SEQPAR_INPUT_CHECK(m.num_heads % in.ulysses_degree == 0,
                     "ulysses_degree={} must divide num_attention_heads={} (each Ulysses rank takes whole heads)",
                     in.ulysses_degree, m.num_heads);
  in.memory.validate();  // the trainer's rules for the levers
  check_plan_bounds(in);
}

// What the optimizer and the weights' levers imply for one rank (train/step.cpp TrainStep).
struct Placement {
  bool stage3 = false, offload_opt = false, offload_param = false, sharded = false, flat = false;
  ShardLayout layout;  // the flat optimizer's (and ZeRO-3's weights') layout
};

Placement placement_of(const MemoryPlanInput& in) {
  Placement p;
  const MemorySettings& m = in.memory;
  p.stage3 = m.zero_stage >= 3;
  p.offload_opt = m.offload_optimizer == OffloadDevice::kCpu;
  p.offload_param = p.stage3 && m.offload_param == OffloadDevice::kCpu;
  p.sharded = m.zero_stage >= 1 && in.world > 1;
  p.flat = p.stage3 || p.offload_opt || p.sharded;
  const int64_t total = LlamaParams::flat_layout(in.model).total;
  p.layout = p.stage3    ? ShardLayout::per_layer(in.model, 0, in.world)
             : p.sharded ? ShardLayout::contiguous(total, 0, in.world)
                         : ShardLayout::whole(total);
  return p;
}

// The model states every rank keeps for the whole step (model/llama.cpp LlamaParams,
// train/optimizer.cpp AdamW, train/layer_weights.cpp), the batch and the workspace, into
// p.resident; the host memory into p.host.
void add_resident(MemoryPlan& p, const MemoryPlanInput& in, int64_t T) {
  const LlamaConfig& m = in.model;
  const int64_t a = in.cuda ? 2 : 4;
  const int64_t C = m.hidden_size, V = m.vocab_size;
  const LlamaParams::FlatLayout layout = LlamaParams::flat_layout(m);
  const int64_t n_flat = layout.total;
  const Placement pl = placement_of(in);
  const int64_t shard = pl.layout.shard_len;                          // a rank's pieces (flat optimizer, ZeRO-3 store)
  // The edges' own tensors, unpadded: embedding (and the learned position embedding), final norm
  // (and its bias), LM head.
  const int64_t edges = (m.tie_word_embeddings ? 1 : 2) * V * C + C + (m.norm_bias ? C : 0) +
                        (m.positions == PositionKind::kLearned ? m.max_position_embeddings * C : 0);
  const std::string w = in.cuda ? (in.fp16 ? "fp16" : "bf16") : "f32";
  if (pl.stage3) {
    // The resident edges; the store of this rank's pieces (on the GPU unless offloaded); the two
    // layer buffers (none with one rank and the store on the GPU: the layers are its views).
    p.resident.emplace_back(fmt::format("weights ({}, embedding + final norm + LM head)", w), a * edges);
    if (!pl.offload_param)
      p.resident.emplace_back(fmt::format("weights ({}, ZeRO-3 store: 1/{} of every layer)", w, in.world), a * shard);
    if (pl.offload_param || in.world > 1)
      p.resident.emplace_back(fmt::format("weights ({}, two gathered layers)", w), 2 * a * layout.layer_elems);
  } else {
    p.resident.emplace_back(fmt::format("weights ({})", w), a * n_flat);
  }
  if (in.memory.offload_gradients) {
    // The pieces in pinned host memory (TrainStep::partition_gradients); the GPU keeps the model's
    // one layer block and the edges' own gradients.
    p.resident.emplace_back("gradients (f32, a layer + edges; the rest on the host)", 4 * (layout.layer_elems + edges));
    const std::string of = in.world > 1 ? fmt::format(", 1/{} share", in.world) : "";
    p.host.emplace_back(fmt::format("gradients (f32{}, pinned)", of), 4 * shard);
    p.host_pinned_bytes += 4 * shard;
  } else if (pl.stage3 || (pl.sharded && in.memory.zero_stage >= 2)) {
    // Partitioned (LlamaModel::set_grad_sink, the trainer's pieces): the pieces, one layer's block,
    // and the embedding / final norm / LM head gradients (tensors of their own, unpadded).
    p.resident.emplace_back(
        fmt::format("gradients (f32, 1/{} ZeRO-{} share + a layer + edges)", in.world, pl.stage3 ? 3 : 2),
        4 * (shard + layout.layer_elems + edges));
  } else {
    p.resident.emplace_back("gradients (f32)", 4 * n_flat);
  }
  const bool master = in.cuda || pl.stage3 || pl.offload_opt;  // AdamW's has_master
  // Per moment (and master), per rank: a flat optimizer's pieces, else one buffer in the weights'
  // flat layout (AdamW's per-tensor form).
  const int64_t opt_elems = pl.flat ? shard : n_flat;
  const std::string share = pl.sharded || (pl.stage3 && in.world > 1) ? fmt::format(", 1/{} ZeRO share", in.world) : "";
  if (pl.offload_opt) {
    p.host.emplace_back(fmt::format("AdamW moments (f32{}, host)", share), 2 * 4 * opt_elems);
    if (master) p.host.emplace_back(fmt::format("master weights (f32{}, host)", share), 4 * opt_elems);
    const int64_t chunk = std::min(AdamW::stream_chunk_for(m), shard);
    p.host.emplace_back("optimizer staging (pinned: 2 × f32 gradients + 2 × weights)", 2 * (4 + a) * chunk);
    p.host_pinned_bytes += 2 * (4 + a) * chunk;
  } else {
    p.resident.emplace_back(fmt::format("AdamW moments (f32{})", share), 2 * 4 * opt_elems);
    if (master) p.resident.emplace_back(fmt::format("master weights (f32{})", share), 4 * opt_elems);
  }
  if (pl.offload_param) {
    const bool pinned = in.memory.offload_param_pin_memory;
    p.host.emplace_back(
        fmt::format("layer weights ({}, 1/{} of every region, host{})", w, in.world, pinned ? ", pinned" : ""),
        a * shard);
    if (pinned) p.host_pinned_bytes += a * shard;
  }
  // ids, positions, targets (i32) and the attention's segment / position metadata (i32).
  p.resident.emplace_back("batch and attention metadata", 20 * T);
  if (in.cuda) p.resident.emplace_back("cuBLASLt workspace", kGemmWorkspace);
}

// Bytes of one ZeRO-3 gather of a region of `len` elements over `world` ranks (all_gather_region:
// this rank's piece and every rank's), on top of its destination.
int64_t gather_bytes(int64_t a, int64_t cap, int world) { return world > 1 ? a * cap * (1 + world) : 0; }

// The optimizer step's transient bytes. ZeRO-1/2 all-gather the updated weights (this rank's shard,
// then all of them); ZeRO-3 gathers the embedding and the tail into a region buffer each (the larger
// alive at once, with its gather's temporaries); a GPU optimizer writing host weights casts each
// piece on the GPU first.
int64_t optimizer_phase_bytes(const Placement& pl, int64_t a, int world) {
  int64_t optimizer = 0;
  if (pl.stage3) {
    for (size_t k : {size_t{0}, pl.layout.regions.size() - 1}) {
      const ShardLayout::Region& g = pl.layout.regions[k];
      optimizer = std::max(optimizer, a * g.len + gather_bytes(a, g.cap, world));
    }
    if (pl.offload_param && !pl.offload_opt) {
      int64_t piece = 0;
      for (const ShardLayout::Region& g : pl.layout.regions) piece = std::max(piece, g.cap);
      optimizer = std::max(optimizer, a * piece);
    }
  } else if (pl.sharded) {
    optimizer = a * pl.layout.shard_len * (1 + world);
  }
  return optimizer;
}

// The checkpoint offload's host buffer, then the host totals (pinned, all, the setup's copy).
void add_host_totals(MemoryPlan& p, const MemoryPlanInput& in) {
  if (p.host_offload_bytes > 0) {
    p.host.emplace_back(fmt::format("checkpoint offload (layer inputs{})", in.cuda ? ", pinned" : ""),
                        p.host_offload_bytes);
    if (in.cuda) p.host_pinned_bytes += p.host_offload_bytes;
  }
  if (!in.cuda) p.host_pinned_bytes = 0;  // the CPU pins nothing
  for (const auto& [name, bytes] : p.host) p.host_bytes += bytes;
  p.host_setup_bytes = (in.cuda ? 2 : 4) * LlamaParams::flat_layout(in.model).total;  // bf16 for a GPU, f32 on the CPU
  p.host_process_bytes = in.cuda ? kCudaProcessHostBytes : 0;
}

// Where each layer's kept input waits, one of 'g', 'h', 'r' per layer, or 'f' for a layer not
// checkpointed (memory_settings.h): all 'g' without checkpointing (the inputs are among everything kept) or with neither a placement nor
// checkpoint offload, all 'h' with checkpoint offload.
std::string input_places(const MemoryPlanInput& in) {
  const MemorySettings& m = in.memory;
  const size_t L = static_cast<size_t>(in.model.num_layers);
  if (!m.activation_checkpointing) return std::string(L, 'g');
  SEQPAR_CHECK(m.checkpoint_placement != "auto", "plan_memory: checkpoint_placement=auto is resolved first "
                                                 "(choose_checkpoint_placement)");
  if (m.checkpoint_placement.empty()) return std::string(L, m.checkpoint_offload ? 'h' : 'g');
  return expand_checkpoint_placement(m.checkpoint_placement, in.model.num_layers);
}

// How many layers' inputs ([T, C] each) are on the device in each phase, walking what LlamaModel
// does with each placement (model/llama.cpp) and core/offload.h's queue: `in_flight` copies to the
// host may still hold their device buffers (kMaxInFlight on CUDA, where the host runs ahead of the
// device; none on the CPU, where a copy is done when put returns). An 'f' layer's input stays on
// the device like a 'g' one's (counted as 'g' below).
//   forward, layer l:  the 'g' inputs below l, the last in_flight 'h' ones, l's own;
//   loss:              every 'g' input, the last in_flight 'h' ones;
//   backward, layer l: the 'g' inputs below l, l's own (kept, taken back or recomputed), the one below
//                      when it is prefetched ('h'), and for an 'r' layer the recomputed inputs of
//                      the run of 'r' below it and the run's base when that was taken back early;
//   recompute of a run of 'r' (at its top layer l, the layer below l running forward): the 'g'
//                      inputs below l, the run's base if taken back, the run's recomputed inputs.
struct InputCounts {
  int64_t forward = 0, loss = 0, backward = 0, recompute = -1;  // recompute: -1 = no 'r' layer
  int64_t host = 0;                                             // 'h' layers
};
InputCounts count_inputs(const std::string& places, int64_t in_flight) {
  InputCounts n;
  const int64_t L = static_cast<int64_t>(places.size());
  std::vector<int64_t> g_below(static_cast<size_t>(L) + 1, 0);
  int64_t h_below = 0;
  for (int64_t l = 0; l < L; ++l) {
    n.forward = std::max(n.forward, g_below[l] + std::min(in_flight, h_below) + 1);
    g_below[l + 1] = g_below[l] + (places[l] == 'g' || places[l] == 'f');
    h_below += places[l] == 'h';
  }
  n.host = h_below;
  n.loss = g_below[L] + std::min(in_flight, h_below);
  for (int64_t l = L - 1; l >= 0; --l) {
    if (places[l] != 'r') {
      n.backward = std::max(n.backward, g_below[l] + 1 + (l > 0 && places[l - 1] == 'h'));
      continue;
    }
    int64_t c = 0;  // the run of 'r' directly below l
    while (l - c - 1 >= 0 && places[l - c - 1] == 'r') ++c;
    const int64_t base = l - c - 1;
    const int64_t base_taken = base >= 0 && places[base] == 'h';
    n.backward = std::max(n.backward, g_below[l] + 1 + c + base_taken);
    if (l + 1 == L || places[l + 1] != 'r') n.recompute = std::max(n.recompute, g_below[l] + base_taken + c);
  }
  return n;
}

}  // namespace

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  check_plan_input(in);
  const LlamaConfig& m = in.model;
  const int64_t a = in.cuda ? 2 : 4;  // activation and weight bytes: bf16 on CUDA, f32 on the CPU
  const int64_t C = m.hidden_size, F = m.intermediate_size, V = m.vocab_size, L = m.num_layers;
  const int64_t H = m.num_heads, Hkv = m.num_kv_heads, D = m.head_dim;
  const int64_t U = in.ulysses_degree;
  // Tokens per rank: the step's sequences split over the sp ranks (sp_batch pads to a multiple of
  // 2·sp for the zigzag layout; the padding is at most that).
  const int64_t T = ceil_div(static_cast<int64_t>(in.micro_batch) * in.seq_len, in.sp);

  MemoryPlan p;
  p.tokens_per_rank = T;

  const Placement pl = placement_of(in);
  add_resident(p, in, T);
  // ZeRO-3 with several ranks: a layer's gather (its pieces travel through two temporaries, freed before the layer
  // runs; one rank with host weights copies straight into the buffer).
  const int64_t layer_cap = pl.stage3 ? pl.layout.regions[pl.layout.layer_region(0)].cap : 0;
  const int64_t layer_gather = pl.stage3 ? gather_bytes(a, layer_cap, in.world) : 0;

  // ---- sequence-parallel attention: its buffers per local token (the walks above) ----------------
  // The largest over the Ulysses ranks (an uneven GQA split gives them different KV heads).
  SpForward sp_fwd;
  int64_t sp_bwd = 0;
  if (in.sp > 1) {
    const int head_groups = in.ulysses_head_groups > 0 ? in.ulysses_head_groups : kDefaultUlyssesHeadGroups;
    // The CUDA flash backward's f32 dq accumulator and row statistics, per query row and head.
    const int64_t workspace = in.cuda ? 4 * D + 8 : 0;
    for (const auto& groups : sp_head_groups(H, Hkv, U, head_groups)) {
      const SpForward f = sp_forward_bytes(groups, U, in.sp / U, D, a);
      sp_fwd.peak = std::max(sp_fwd.peak, f.peak);
      sp_fwd.ctx = std::max(sp_fwd.ctx, f.ctx);
      sp_bwd = std::max(sp_bwd, sp_backward_bytes(groups, U, in.sp / U, Hkv, D, a, workspace));
    }
  }

  // ---- what forward keeps per token of each layer (LlamaModel::LayerActs, the attention context) --
  // Local attention keeps q, k, v and the f32 LSE (out is the layer's attn_out); the sequence-
  // parallel context keeps its own out and LSE, and with Ulysses its gathered q, k, v (a KV head
  // read by two head groups twice) instead of the layer's.
  const int64_t ctx =
      in.sp == 1 ? a * H * D + 2 * a * Hkv * D + 4 * H : (U == 1 ? a * H * D + 2 * a * Hkv * D : 0) + sp_fwd.ctx;
  const bool tiled_mlp = in.memory.mlp_tile_tokens > 0 && in.memory.mlp_tile_tokens < T;
  // The MLP's [T, F] tensors its backward reads: gate, up (SwiGLU: the backward computes h again) or up, h (GELU).
  // SwiGLU's forward also holds h while its down projection runs (h_fwd).
  const int64_t mlp_mats = 2;
  const int64_t mlp_kept = tiled_mlp ? 0 : mlp_mats * a * F;
  const int64_t h_fwd = !tiled_mlp && m.mlp == MlpKind::kSwiGlu ? a * F : 0;
  // LayerNorm saves the mean beside the rstd (f32 per token), RMSNorm the rstd only.
  const int64_t norm_stats = m.norm == NormKind::kLayerNorm ? 8 : 4;
  // Qwen3's q/k norms: their inputs and f32 rstd (kept with checkpoint_keep_attention too).
  const int64_t qk_norm = m.qk_norm ? a * (H + Hkv) * D + 4 * (H + Hkv) : 0;
  // x_in, rstd1 (mean1), xn1, ctx, attn_out, x_mid, rstd2 (mean2), xn2, MLP.
  const int64_t full = a * C + norm_stats + a * C + ctx + a * H * D + a * C + norm_stats + a * C + mlp_kept + qk_norm;
  // Keeping attention: one rank's keeps its output and f32 LSE (backward projects q, k, v again,
  // LocalAttention::release_inputs); sequence parallelism its context whole and the q/k norms' inputs.
  const int64_t kept_attention = in.sp == 1 ? a * H * D + 4 * H : ctx + a * H * D + qk_norm;
  int64_t kept = full;
  if (in.memory.activation_checkpointing) kept = a * C + (in.memory.checkpoint_keep_attention ? kept_attention : 0);
  p.kept_per_token_layer = kept;
  p.sp_buffers = std::max(sp_fwd.peak - sp_fwd.ctx, sp_bwd) * T;
  // The layers' inputs by where they wait (count_inputs); the rest of what each layer keeps stays on
  // the device.
  const std::string places = input_places(in);
  const InputCounts inputs = count_inputs(places, in.cuda ? HostOffload::kMaxInFlight : 0);
  // Besides its input, a checkpointed layer keeps `kept - aC` per token, an 'f' layer everything.
  const int64_t full_layers = static_cast<int64_t>(std::count(places.begin(), places.end(), 'f'));
  p.full_layers = full_layers;
  p.full_per_token_layer = full_layers > 0 ? full : 0;
  const bool top_full = places.back() == 'f';
  const int64_t input_bytes = a * C * T,
                kept_rest = ((L - full_layers) * (kept - a * C) + full_layers * (full - a * C)) * T;
  p.host_offload_bytes = inputs.host * input_bytes;
  p.input_places = compact_checkpoint_placement(places);
  const int64_t layers_kept = kept_rest + inputs.backward * input_bytes;  // the backward's
  const int64_t final_acts =
      (a * C + norm_stats + a * C) * T;  // x_final, rstd_f (mean_f), xn_f (kept until the loss backward's end)

  // ---- phases --------------------------------------------------------------------------------
  const bool tiled_loss = in.memory.loss_tile_tokens > 0 && in.memory.loss_tile_tokens < T;
  const int64_t loss_rows = tiled_loss ? in.memory.loss_tile_tokens : T;
  // Forward: the LM head's logits and the per-token losses and logsumexps (f32), beside the final norm's activations;
  // a tiled loss's backward runs in the forward (LlamaModel::LossBackward), so there also dxn. Before them, with
  // checkpointing, one layer's full activations and its output while it runs (the output is the next layer's input;
  // the final norm has run on nothing yet), the largest while the topmost checkpointed layer runs, before the 'f'
  // layers above it have kept anything.
  const int64_t fwd_layer =
      in.memory.activation_checkpointing && full_layers < L ? (full - kept + a * C + h_fwd) * T : 0;
  const size_t top_checkpointed = places.find_last_not_of('f');
  const int64_t full_on_top =
      top_checkpointed == std::string::npos ? L : L - 1 - static_cast<int64_t>(top_checkpointed);
  const int64_t rest_in_forward = kept_rest - full_on_top * (full - a * C) * T;
  const int64_t loss_in_forward =
      kept_rest + inputs.loss * input_bytes + a * V * loss_rows + 8 * T + (tiled_loss ? a * C * T : 0);
  int64_t forward = std::max(rest_in_forward + inputs.forward * input_bytes + std::max(fwd_layer, layer_gather),
                             final_acts + loss_in_forward);
  // An 'f' top layer's down projection: every layer's activations, its output and h (its gather: before them).
  if (top_full)
    forward = std::max(forward, kept_rest + inputs.forward * input_bytes + std::max((a * C + h_fwd) * T, layer_gather));
  // The layer's q, k, v, attn_out and the layers below while its attention runs: with sequence
  // parallelism, its buffers on top (the context among them).
  const int64_t attn_inputs =
      (norm_stats + a * C + a * H * D + 2 * a * Hkv * D + a * H * D) * T;  // rstd1 (mean1), xn1, q, k, v, out
  // What the layers below the top keep beside their inputs.
  const int64_t below_rest = kept_rest - (top_full ? full - a * C : kept - a * C) * T;
  if (in.sp > 1)
    forward = std::max(forward, below_rest + inputs.forward * input_bytes + attn_inputs + sp_fwd.peak * T);
  // Loss backward: the final norm's activations and dxn, and the logits (whole; their gradient is
  // written over them) and logsumexps. After a tiled loss's backward in the forward, the final norm's
  // backward instead: xn_f is gone and dx is there, the same bytes.
  const int64_t loss_bwd = kept_rest + inputs.loss * input_bytes + final_acts + a * C * T +
                           (tiled_loss ? 0 : a * V * loss_rows + 4 * T);
  // Top layer's backward (LlamaModel::backward), on top of the layers' kept activations: dx
  // throughout (the norms add their input gradients into it); the recompute of what forward dropped
  // (not the layer's output), which makes the top layer's activations whole; then, phase by phase,
  //   MLP:        dxn and the MLP's transient (dh; per tile also gate, up; GELU: up, h);
  //   post norm:  dxn;
  //   attention:  the MLP half's activations (x_mid, its norm's statistics, xn2, the untiled MLP's
  //               [T, F] tensors) freed, then dattn, dq, dk, dv, the sequence-parallel gathered dout /
  //               dq / dk / dv and the CUDA backward's f32 dq accumulator and row statistics;
  //   projections: the attention context freed, dq, dk, dv and dxn (input norm: dxn).
  const int64_t recompute = top_full ? 0 : (full - kept) * T;  // an 'f' top layer recomputes nothing
  // The MLP's gradients: dh (SwiGLU: d(gate) and d(up) then go over gate and up and h over dh; GELU: dh made d(up)
  // in place); per tile also what the backward reads (gate, up; GELU: up, h).
  const int64_t mlp_grads = 1;
  const int64_t mlp_t = tiled_mlp ? (mlp_mats + mlp_grads) * a * F * in.memory.mlp_tile_tokens : mlp_grads * a * F * T;
  int64_t attn_t = (2 * a * H * D + 2 * a * Hkv * D) * T;
  if (in.sp > 1) attn_t += sp_bwd * T;  // the walk above counts the backend's workspace
  // One rank on CUDA: the flash backward's f32 dq accumulator and row statistics; cuDNN's backward
  // (attention/cuda/cudnn_sdpa.cpp) its f32 dq accumulator and softmax sums and its plan's workspace,
  // 4·H·D bytes per token as the H200 reports it (its debug line: 1,073,742,080 bytes at 128K, H 32,
  // D 64), measured at 128K and 640K on the 1B shape (bench/NOTES.md, 2026-12-04). sdpa runs cuDNN's
  // backward on one document (a micro-batch of one sequence; several are several segments, which auto gives
  // the flash kernel) from kAutoCudnnMinComputeCapability, except where auto's rule takes the sm_90 one
  // (attention_backend.h: D 64 from 16K tokens on 9.0).
  const bool cudnn_bwd = in.cudnn_attention && in.micro_batch == 1 &&
                         in.compute_capability >= kAutoCudnnMinComputeCapability &&
                         !auto_runs_own_kernel(AttnDirection::kBackward, D, in.seq_len, /*causal=*/true,
                                               in.compute_capability);
  if (in.sp == 1 && in.cuda) attn_t += (cudnn_bwd ? 8 * H * D + 4 * H : 4 * H * D + 8 * H) * T;
  const int64_t mlp_half_acts = (2 * a * C + norm_stats + mlp_kept) * T;  // x_mid, rstd2 (mean2), xn2, MLP
  const int64_t top = layers_kept + recompute + a * C * T;                // the layer whole, and dx
  // The final norm's activations are freed before the layers' backward (LlamaModel::backward).
  int64_t layer_bwd = std::max({layers_kept + a * C * T + layer_gather, top + a * C * T + mlp_t,
                                top - mlp_half_acts + attn_t,
                                top - mlp_half_acts - ctx * T + (a * H * D + 2 * a * Hkv * D) * T + a * C * T});
  // A checkpointed layer's recompute runs its sequence-parallel attention forward again (dx alive;
  // x_in is kept), the topmost's after the layers not checkpointed above it are done with (their inputs too).
  if (in.sp > 1 && in.memory.activation_checkpointing && !in.memory.checkpoint_keep_attention && full_layers < L)
    layer_bwd =
        std::max(layer_bwd, layers_kept - full_on_top * full * T + a * C * T + attn_inputs + sp_fwd.peak * T);
  const int64_t optimizer = optimizer_phase_bytes(pl, a, in.world);

  p.phases = {{"forward (activations kept + LM head)", forward},
              {tiled_loss ? "final norm backward (activations kept + dxn, dx)"
                          : "loss backward (activations kept + logits, gradient in place)",
               loss_bwd},
              {"top layer backward (activations kept + recompute + gradients)", layer_bwd}};
  // Recomputed inputs ('r'): the layers of a run forward again with dx alive (their activations one
  // layer at a time, like forward's; with sequence parallelism its attention's buffers).
  if (inputs.recompute >= 0) {
    const int64_t base = inputs.recompute * input_bytes + a * C * T;
    int64_t rerun = base + std::max(fwd_layer, layer_gather);
    if (in.sp > 1) rerun = std::max(rerun, base + attn_inputs + sp_fwd.peak * T);
    p.phases.emplace_back("recompute of the layer inputs not kept (a layer forward, dx alive)", rerun);
  }
  p.phases.emplace_back("optimizer step (ZeRO weight all-gather)", optimizer);
  add_host_totals(p, in);
  int64_t best = -1;
  for (const auto& [name, bytes] : p.phases)
    if (bytes > best) best = bytes, p.peak_phase = name;
  for (const auto& [name, bytes] : p.resident) p.resident_bytes += bytes;
  p.peak_bytes = p.resident_bytes + best;
  return p;
}

namespace {

// The host as check_host_memory sees it (the ranks' host memory, and the initial weights' copy while
// they start; a run without host memory is not checked).
bool host_fits(const MemoryPlan& p, int64_t host_capacity_bytes) {
  return host_capacity_bytes <= 0 || p.host_bytes == 0 ||
         p.host_start_bytes() <= host_capacity_bytes;
}

// A placement of L layers' inputs with n_h in host memory and n_r recomputed: the kept inputs (the
// runs' bases) and the embedding below layer 0 each start a run of 'r' above them, the runs as even
// as they can be (the longer ones lowest, where fewer kept inputs lie below them), and the lowest
// n_h bases in host memory (the top layers' backward, the peak, then finds its inputs on the GPU
// and nothing to prefetch).
std::string placement_layout(int64_t L, int64_t n_h, int64_t n_r) {
  const int64_t bases = L - n_r, runs = bases + 1;
  auto run = [&](int64_t i) { return std::string(static_cast<size_t>(n_r / runs + (i < n_r % runs)), 'r'); };
  std::string s = run(0);
  for (int64_t k = 0; k < bases; ++k) s += (k < n_h ? 'h' : 'g') + run(k + 1);
  return s;
}

}  // namespace

std::string choose_checkpoint_placement(const MemoryPlanInput& in, int64_t capacity_bytes,
                                        int64_t host_capacity_bytes) {
  if (!in.memory.activation_checkpointing) return "";
  const int64_t L = in.model.num_layers;
  MemoryPlanInput t = in;
  t.memory.checkpoint_offload = false;
  auto plan_with = [&](int64_t n_h, int64_t n_r) {
    t.memory.checkpoint_placement = placement_layout(L, n_h, n_r);
    return plan_memory(t);
  };
  // Every input on the GPU fits: the memory left lets the top layers go without checkpointing,
  // as many as fit within kFullLayerShare of the capacity (their backward then recomputes nothing).
  if (const MemoryPlan all_g = plan_with(0, 0);
      all_g.peak_bytes <= capacity_bytes && host_fits(all_g, host_capacity_bytes)) {
    const auto full_cap = static_cast<int64_t>(kFullLayerShare * static_cast<double>(capacity_bytes));
    auto with_full = [&](int64_t n_f) {
      return std::string(static_cast<size_t>(L - n_f), 'g') + std::string(static_cast<size_t>(n_f), 'f');
    };
    auto fits_full = [&](int64_t n_f) {
      t.memory.checkpoint_placement = with_full(n_f);
      const MemoryPlan p = plan_memory(t);
      return p.peak_bytes <= full_cap && host_fits(p, host_capacity_bytes);
    };
    // The peak grows with the count (an 'f' layer keeps more than its input): bisect. lo = 0 is the
    // all-'g' plan, which fits.
    int64_t lo = 0, hi = L + 1;
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (fits_full(mid) ? lo : hi) = mid;
    }
    return with_full(lo);
  }
  // Fewest recomputed layers first (each costs a layer forward), then the fewest offloaded (each
  // costs host memory and PCIe time, mostly hidden): the GPU peak falls as inputs leave it, the
  // host's rises, so for each count of recomputed layers the fewest offloaded that fit the GPU are
  // found by bisection and then checked against the host.
  // (checkpoint_keep_attention recomputes no input: 'r' is not tried.) On the CPU backend the device is the host: an
  // input offloaded there is a copy in the same memory, so nothing is offloaded ('h' only with a GPU).
  const int64_t max_r = in.memory.checkpoint_keep_attention ? 0 : L - 1;
  for (int64_t n_r = 0; n_r <= max_r; ++n_r) {
    const int64_t bases = L - n_r;
    if (!in.cuda) {
      const MemoryPlan p = plan_with(0, n_r);
      if (p.peak_bytes <= capacity_bytes && host_fits(p, host_capacity_bytes)) return placement_layout(L, 0, n_r);
      continue;
    }
    if (plan_with(bases, n_r).peak_bytes > capacity_bytes) continue;  // not even with every kept input on the host
    int64_t lo = -1, hi = bases;                                      // hi fits the GPU, lo does not
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (plan_with(mid, n_r).peak_bytes <= capacity_bytes ? hi : lo) = mid;
    }
    if (host_fits(plan_with(hi, n_r), host_capacity_bytes)) return placement_layout(L, hi, n_r);
  }
  return "";
}

int64_t longest_fitting_seq_len(MemoryPlanInput in, int64_t capacity_bytes, int64_t granularity,
                                int64_t host_capacity_bytes) {
  SEQPAR_INPUT_CHECK(granularity >= 1, "granularity={} must be >= 1", granularity);
  const bool auto_placement = in.memory.checkpoint_placement == "auto";
  auto fits = [&](int64_t units) {
    in.seq_len = units * granularity;
    // Beyond the plan's bounds nothing fits (and the plan would refuse to compute).
    if (in.seq_len > kMaxPlanSeqLen || static_cast<long double>(in.micro_batch) * in.seq_len > kMaxPlanSeqLen ||
        plan_bytes_bound(in) > kMaxPlanBytes)
      return false;
    if (auto_placement) return !choose_checkpoint_placement(in, capacity_bytes, host_capacity_bytes).empty();
    const MemoryPlan p = plan_memory(in);
    return p.peak_bytes <= capacity_bytes && host_fits(p, host_capacity_bytes);
  };
  // The peaks grow with the sequence: double until it no longer fits, then bisect.
  int64_t lo = 0, hi = 1;
  while (fits(hi)) {
    lo = hi;
    if (hi >= kMaxPlanSeqLen / granularity) break;  // everything up to the bound fits

    hi *= 2;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo * granularity;
}

void check_plan_fits(const MemoryPlan& plan, int ranks, int64_t capacity_bytes, const std::string& where,
                     const std::function<std::string()>& hint) {
  if (capacity_bytes <= 0) return;  // unknown capacity
  const double gib_of = static_cast<double>(1ll << 30);
  const double need = static_cast<double>(plan.peak_bytes) * ranks;  // double: no overflow for many ranks
  if (need <= static_cast<double>(capacity_bytes)) return;
  const std::string said = hint ? hint() : std::string();
  throw InputError(fmt::format(
      "the memory plan needs {:.2f} GiB on {} ({} rank(s) of {:.2f} GiB at the step's peak, {}) but it has {:.2f} "
      "GiB: the run cannot fit; more GPUs (--sp), --activation-checkpointing, --tiled-mlp-tokens / "
      "--tiled-loss-tokens or --zero-stage 1 lower it (seqpar plan, docs/memory.md){}",
      need / gib_of, where, ranks, static_cast<double>(plan.peak_bytes) / gib_of, plan.peak_phase,
      static_cast<double>(capacity_bytes) / gib_of, said.empty() ? "" : "; " + said));
}

int64_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

namespace {

// A set of offload levers, in choose_levers' order of cost: each later one moves more over PCIe or the
// network per step (the gradients' offload last: it needs the host room of 4 bytes a parameter).
struct LeverSet {
  bool offload_opt, stage3, offload_param, ckpt_offload, offload_grads = false;
};
constexpr LeverSet kLeverOrder[] = {
    {false, false, false, false},     {false, false, false, true},     {true, false, false, false},
    {true, false, false, true},       {false, true, false, false},     {false, true, false, true},
    {true, true, false, false},       {true, true, false, true},       {true, true, true, false},
    {true, true, true, true},         {true, false, false, false, true}, {true, false, false, true, true},
    {true, true, true, false, true},  {true, true, true, true, true}};

// `in`'s memory settings with the levers of `c` added (what was added, for people, in `added`); false
// when `c` does not apply to them (checkpoint offload without checkpointing or beside a placement,
// parameter offload without ZeRO-3).
bool with_levers(const MemoryPlanInput& in, const LeverSet& c, MemoryPlanInput* out, std::string* added) {
  *out = in;
  MemorySettings& m = out->memory;
  added->clear();
  auto name = [&](const char* what) { *added += (added->empty() ? "" : ", ") + std::string(what); };
  if (c.ckpt_offload && (!m.activation_checkpointing || !m.checkpoint_placement.empty())) return false;
  if (c.ckpt_offload && !m.checkpoint_offload) {
    m.checkpoint_offload = true;
    name("--checkpoint-offload");
  }
  if (c.offload_opt && m.offload_optimizer != OffloadDevice::kCpu) {
    m.offload_optimizer = OffloadDevice::kCpu;
    name("--offload-optimizer cpu");
  }
  if (c.stage3 && m.zero_stage < 3) {
    m.zero_stage = 3;
    name("--zero-stage 3");
  }
  if (c.offload_param && m.zero_stage < 3) return false;
  if (c.offload_param && m.offload_param != OffloadDevice::kCpu) {
    m.offload_param = OffloadDevice::kCpu;
    name("--offload-param cpu");
  }
  if (c.offload_grads && !m.offload_gradients) {
    m.offload_gradients = true;
    name("--offload-gradients");
  }
  return true;
}

}  // namespace

LeverChoice choose_levers(const MemoryPlanInput& in, int64_t capacity_bytes, int64_t granularity,
                          int64_t host_capacity_bytes) {
  LeverChoice best;
  best.memory = in.memory;
  bool have = false;
  for (const LeverSet& c : kLeverOrder) {
    MemoryPlanInput t;
    std::string added;
    if (!with_levers(in, c, &t, &added)) continue;
    const int64_t len = longest_fitting_seq_len(t, capacity_bytes, granularity, host_capacity_bytes);
    if (!have || len > best.seq_len) {
      best = {t.memory, len, added};
      have = true;
    }
  }
  return best;
}

LeverChoice levers_to_fit(const MemoryPlanInput& in, int64_t capacity_bytes, int64_t host_capacity_bytes) {
  // The run's own checkpointing first; without any, keeping attention and then plain checkpointing.
  std::vector<std::pair<MemoryPlanInput, std::string>> bases = {{in, ""}};
  if (!in.memory.activation_checkpointing) {
    MemoryPlanInput keep = in;
    keep.memory.activation_checkpointing = keep.memory.checkpoint_keep_attention = true;
    bases.push_back({keep, "--activation-checkpointing, --checkpoint-keep-attention"});
    keep.memory.checkpoint_keep_attention = false;
    bases.push_back({keep, "--activation-checkpointing"});
  }
  std::string short_of_host;
  for (const auto& [base, ckpt] : bases) {
    for (const LeverSet& c : kLeverOrder) {
      MemoryPlanInput t;
      std::string added;
      if (!with_levers(base, c, &t, &added)) continue;
      if (t.memory.checkpoint_placement == "auto") {
        const std::string chosen = choose_checkpoint_placement(t, capacity_bytes, host_capacity_bytes);
        if (chosen.empty()) continue;
        t.memory.checkpoint_placement = compact_checkpoint_placement(chosen);
      }
      const MemoryPlan p = plan_memory(t);
      if (p.peak_bytes > capacity_bytes) continue;
      std::string levers = ckpt;
      if (!added.empty()) levers += (levers.empty() ? "" : ", ") + added;
      if (!host_fits(p, host_capacity_bytes)) {
        if (short_of_host.empty())
          short_of_host = fmt::format("{} would fit the GPU (peak {}) but needs {} of host memory per rank, more than "
                                      "the {} this host gives it (--host-memory-gib)",
                                      levers.empty() ? "the run as given" : levers, gib(p.peak_bytes),
                                      gib(p.host_start_bytes()), gib(host_capacity_bytes));
        continue;
      }
      if (levers.empty()) return {t.memory, t.seq_len, "nothing added"};
      return {t.memory, t.seq_len, levers};
    }
  }
  return {in.memory, 0, "", short_of_host};
}

std::string describe_levers_to_fit(const MemoryPlanInput& in, const LeverChoice& choice) {
  if (choice.levers.empty() && !choice.host_short.empty())
    return "none of seqpar's memory levers makes it fit at this length on this host: " + choice.host_short +
           "; more host memory, more GPUs (--sp) or a shorter sequence";
  if (choice.levers.empty())
    return "none of seqpar's memory levers makes it fit at this length: more GPUs (--sp) or a shorter sequence";
  MemoryPlanInput t = in;
  t.memory = choice.memory;
  const MemoryPlan p = plan_memory(t);
  std::string placement;
  if (in.memory.checkpoint_placement == "auto") placement = ", checkpoint placement " + t.memory.checkpoint_placement;
  return fmt::format("it fits with {} (peak {}{}, host memory {} per rank)", choice.levers, gib(p.peak_bytes), placement,
                     gib(p.host_start_bytes()));
}

int64_t read_meminfo(const char* key) {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  int64_t kib = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      kib = std::strtoll(line + n + 1, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

int64_t host_memory_available_bytes() { return read_meminfo("MemAvailable"); }
int64_t host_memory_total_bytes() { return read_meminfo("MemTotal"); }

int64_t host_memory_capacity(double host_memory_gib) {
  if (host_memory_gib > 0) return static_cast<int64_t>(host_memory_gib * (1ll << 30));
  return host_memory_available_bytes();
}

void check_host_memory(const MemoryPlan& plan, int ranks, double host_memory_gib) {
  if (plan.host_bytes == 0) return;
  const int64_t cap = host_memory_capacity(host_memory_gib);
  if (cap <= 0) return;  // unknown (no /proc/meminfo) and not given: nothing to check against
  // The ranks' host memory and, while they start, the initial weights' host copy beside it.
  const int64_t need = plan.host_bytes * ranks + plan.host_setup_bytes + plan.host_process_bytes;
  std::string what;
  for (const auto& [name, bytes] : plan.host)
    what += fmt::format("{}{} {}", what.empty() ? "" : ", ", name, gib(bytes));
  SEQPAR_INPUT_CHECK(
      need <= cap,
      "host memory: the run needs {} of host memory ({} rank(s) of this process × {}: {}; and while the ranks "
      "start, the initial weights' host copy, {}; the process itself, {}), more than {} ({}); "
      "lower it (fewer offloaded levers, --no-offload-param-pin-memory does not shrink it) or, if this machine grows "
      "its memory lazily, say how much it has with --host-memory-gib",
      gib(need), ranks, gib(plan.host_bytes), what, gib(plan.host_setup_bytes), gib(plan.host_process_bytes),
      host_memory_gib > 0 ? fmt::format("host_memory_gib={}", host_memory_gib) : std::string("MemAvailable"), gib(cap));
}

std::string format_memory_plan(const MemoryPlanInput& in, const MemoryPlan& p, int64_t capacity_bytes,
                               int64_t host_capacity_bytes) {
  std::string s = fmt::format(
      "Memory plan per GPU: {} tokens per rank ({} × {} tokens over sp={}), {} layers, {}{}{}{}{}{}\n",
      p.tokens_per_rank, in.micro_batch, in.seq_len, in.sp, in.model.num_layers,
      in.cuda ? (in.fp16 ? "fp16 on CUDA" : "bf16 on CUDA") : "f32 on CPU",
      in.memory.activation_checkpointing ? (in.memory.checkpoint_keep_attention ? ", checkpointing (keeping attention)"
                                                                                : ", activation checkpointing") +
                                               std::string(in.memory.checkpoint_offload ? " with offload" : "")
                                         : std::string(),
      in.memory.mlp_tile_tokens > 0 ? fmt::format(", tiled MLP {}", in.memory.mlp_tile_tokens) : "",
      in.memory.loss_tile_tokens > 0 ? fmt::format(", tiled loss {}", in.memory.loss_tile_tokens) : "",
      in.memory.zero_stage > 0 ? fmt::format(", ZeRO-{} over {}", in.memory.zero_stage, in.world) : "",
      std::string(in.memory.offload_optimizer == OffloadDevice::kCpu ? ", optimizer offload" : "") +
          (in.memory.offload_param == OffloadDevice::kCpu ? ", parameter offload" : ""));
  s += "resident:\n";
  for (const auto& [name, bytes] : p.resident) s += fmt::format("  {:<52} {:>12}\n", name, gib(bytes));
  s += fmt::format("  {:<52} {:>12}\n", "total", gib(p.resident_bytes));
  s += fmt::format("activations kept per token and layer: {} bytes\n", p.kept_per_token_layer);
  if (p.full_layers > 0)
    s += fmt::format("  and per token in each of the {} layer(s) not checkpointed (f): {} bytes\n", p.full_layers,
                     p.full_per_token_layer);
  if (in.memory.activation_checkpointing)
    s += fmt::format(
        "where the layers' inputs wait, from the bottom (g GPU, h host, r recomputed, f not checkpointed): {}\n",
        p.input_places);
  if (p.host_offload_bytes > 0)
    s += fmt::format("offloaded to host memory ({}): the layers' inputs, {}\n", in.cuda ? "pinned" : "the CPU's",
                     gib(p.host_offload_bytes));
  s += "phases (on top of the resident state):\n";
  for (const auto& [name, bytes] : p.phases)
    s += fmt::format("  {:<64} {:>12}{}\n", name, gib(bytes), name == p.peak_phase ? "  <- peak" : "");
  if (in.sp > 1)
    s += fmt::format("  {:<64} {:>12}\n", "included: SP communication buffers (one attention call, at most)",
                     gib(p.sp_buffers));
  s += fmt::format("predicted peak: {}", gib(p.peak_bytes));
  if (capacity_bytes > 0)
    s += fmt::format(" of {}{} ({})", gib(capacity_bytes), in.cuda ? "" : " of host memory per rank (the CPU backend's)",
                     p.peak_bytes <= capacity_bytes ? "fits"
                                                    : "does NOT fit: add ranks (--sp), checkpointing or tiles; "
                                                      "`seqpar train` refuses it before any work");
  s += "\n";
  s += fmt::format("host memory per rank{}:\n", in.cuda ? "" : " (the CPU backend: the same memory as the device's)");
  for (const auto& [name, bytes] : p.host) s += fmt::format("  {:<64} {:>12}\n", name, gib(bytes));
  s += fmt::format("predicted host peak: {} ({} pinned){}; while the ranks start, plus the initial weights' {} copy "
                   "(per process): {}",
                   gib(p.host_bytes), gib(p.host_pinned_bytes),
                   p.host_process_bytes > 0
                       ? fmt::format(", plus the process itself (CUDA runtime and libraries) {}", gib(p.host_process_bytes))
                       : std::string(),
                   in.cuda ? (in.fp16 ? "fp16" : "bf16") : "f32",
                   gib(p.host_start_bytes()));
  // The verdict is on the figure printed, the initial weights' copy included (host_fits' rule); `seqpar train`
  // checks it only for a run that keeps something in host memory (check_host_memory).
  if (host_capacity_bytes > 0)
    s += fmt::format(" of {} ({})", gib(host_capacity_bytes),
                     p.host_start_bytes() <= host_capacity_bytes ? "fits"
                     : p.host_bytes > 0 ? "does NOT fit: fewer offloaded levers or more host memory"
                                        : "does NOT fit while the ranks start, the initial weights' copy: more host "
                                          "memory or fewer GPUs of the host; `seqpar train` checks host memory only "
                                          "for runs that offload");
  s += "\n";
  return s;
}

}  // namespace seqpar
