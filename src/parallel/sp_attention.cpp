// USP attention: Ulysses all-to-all inside the ulysses group, then a ring over the ring group.
// Ulysses-only and ring-only are the two degenerate cases (ring = 1, ulysses = 1).
//
// Per layer and rank (T local tokens, u = ulysses, r = ring, h = this rank's query heads,
// hk = its KV heads):
//   forward : a2a q, k, v  [T, H|Hkv, D] -> [u*T, h|hk, D]           (Ulysses, skipped if u = 1)
//             r ring steps: attention of the local queries on one KV block, merged by LSE,
//             while the next block travels                            (ring, skipped if r = 1)
//             a2a out [u*T, h, D] -> [T, H, D]
//   backward: a2a dout; r ring steps: the next k, v travel while the current block is computed,
//             and each block's dk, dv contribution goes straight back to the block's owner, which
//             sums them; a2a dq, dk, dv back, summing the gradients of a KV head that was
//             replicated to several ranks.
// Ring step s: rank m computes on block (m - s) mod r, which its owner sends to m directly (not
// passed along the ring), so a hop is one (owner, reader) pair and is skipped when no query of the
// reader can see a key of the block under the mask (causal future, other documents, the sliding
// window). Both ends decide that from the token metadata every rank holds (BlockVisibility), so
// the sends and receives pair up without any message about it. At window W and shard length L, a
// contiguous rank reads about ceil(W / L) blocks besides its own instead of all r - 1 (zigzag
// ranks, whose two chunks neighbour chunks of two other ranks, about twice that).
// hk is the KV heads h's query heads read, or h (one KV copy per query head) when an uneven
// split leaves those KV heads serving unequal numbers of h's query heads (see kv_heads).
#include "parallel/sp_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <utility>

#include "kernels/ops.h"

namespace seqpar {

std::string sp_mode_name(SpMode mode) {
  switch (mode) {
    case SpMode::kUlysses: return "ulysses";
    case SpMode::kRing: return "ring";
    case SpMode::kHybrid: return "hybrid";
  }
  return "?";
}

SpMode parse_sp_mode(const std::string& name, const std::string& setting) {
  if (name == "ulysses") return SpMode::kUlysses;
  if (name == "ring") return SpMode::kRing;
  if (name == "hybrid") return SpMode::kHybrid;
  throw InputError(fmt::format("{}={}: expected one of ulysses, ring, hybrid", setting, name));
}

MeshShape sp_mesh_shape(SpMode mode, int sp_size, int ulysses_degree) {
  SEQPAR_INPUT_CHECK(sp_size >= 1, "sp_size={} must be >= 1", sp_size);
  MeshShape m;
  switch (mode) {
    case SpMode::kUlysses: m.ulysses = sp_size; break;
    case SpMode::kRing: m.ring = sp_size; break;
    case SpMode::kHybrid:
      SEQPAR_INPUT_CHECK(ulysses_degree >= 1, "sp_mode=hybrid needs ulysses_degree (got {}): the ring degree is "
                         "sp_size / ulysses_degree", ulysses_degree);
      SEQPAR_INPUT_CHECK(sp_size % ulysses_degree == 0, "ulysses_degree={} must divide sp_size={}", ulysses_degree,
                         sp_size);
      m.ulysses = ulysses_degree;
      m.ring = sp_size / ulysses_degree;
      break;
  }
  return m;
}

void validate_sp_heads(int64_t num_heads, int64_t num_kv_heads, int ulysses_degree) {
  SEQPAR_INPUT_CHECK(num_heads >= ulysses_degree,
                     "ulysses degree {} exceeds num_attention_heads={}: every Ulysses rank needs at least one query "
                     "head (use ring or hybrid for the rest of the sequence parallelism)",
                     ulysses_degree, num_heads);
  SEQPAR_INPUT_CHECK(num_kv_heads >= 1 && num_heads % num_kv_heads == 0,
                     "num_attention_heads={} must be a multiple of num_key_value_heads={}", num_heads, num_kv_heads);
}

namespace {

struct HeadRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Query heads of Ulysses rank j: as even as possible, the first H % u ranks one more.
HeadRange query_heads(int64_t H, int u, int j) {
  int64_t base = H / u, extra = H % u;
  int64_t begin = j * base + std::min<int64_t>(j, extra);
  return {begin, begin + base + (j < extra ? 1 : 0)};
}

// A rank's heads as runs of consecutive heads, in its local head order.
using HeadRuns = std::vector<HeadRange>;
int64_t num_heads(const HeadRuns& runs) {
  int64_t n = 0;
  for (const HeadRange& run : runs) n += run.size();
  return n;
}

// The KV heads a range of query heads reads (GQA group g = H / Hkv), laid out so that local
// attention's GQA rule (local query head i reads local KV head i / (h / hk)) holds. When every KV
// head of the range serves the same number of its query heads, that is the range of KV heads
// itself. Otherwise (an uneven split cutting a group unevenly, e.g. H=6, Hkv=3, u=2: query heads
// 0-2 read KV heads 0, 0, 1) each query head gets its own copy of its KV head (hk = h).
HeadRuns kv_heads(HeadRange q, int64_t H, int64_t Hkv) {
  const int64_t g = H / Hkv;
  const HeadRange kv{q.begin / g, (q.end - 1) / g + 1};
  bool uniform = true;
  for (int64_t k = kv.begin; k < kv.end; ++k) {
    const int64_t served = std::min(q.end, (k + 1) * g) - std::max(q.begin, k * g);
    uniform = uniform && served == q.size() / kv.size() && q.size() % kv.size() == 0;
  }
  if (uniform) return {kv};
  HeadRuns per_query;
  for (int64_t h = q.begin; h < q.end; ++h) per_query.push_back({h / g, h / g + 1});
  return per_query;
}

// Bytes of one token's worth of `heads` heads.
size_t head_bytes(const Tensor& t, int64_t heads) { return static_cast<size_t>(heads * t.dim(2)) * dtype_size(t.dtype()); }

// One head group's tensors in the Ulysses layout: [u*T, h|hk, D], lse [u*T, h].
struct HeadGroupState {
  Tensor q, k, v, out, lse;
  float scale = 0;
  int32_t window = 0;
};

class UspContext final : public AttentionContext {
 public:
  std::vector<HeadGroupState> groups;
};

// The heads every Ulysses rank receives for one head group: q[j], kv[j] for rank j.
struct HeadGroup {
  std::vector<HeadRuns> q, kv;
};

// An all-to-all in flight and the buffers it reads and writes.
struct PendingA2a {
  Tensor send, recv;
  std::unique_ptr<CommRequest> req;
};

// Which ring block's keys the queries of which block can see, per sliding window: exact on runs of
// tokens with one segment and consecutive positions (the layouts make_sp_batch builds: a zigzag
// block is two runs per document piece), where some pair of query run [a, b] and key run [c, d] is
// visible iff c <= b (causal) and a - d < W. Computed once per window a layer uses.
class BlockVisibility {
 public:
  BlockVisibility(const std::vector<TokenMeta>& blocks, bool causal) : causal_(causal) {
    for (const TokenMeta& m : blocks) runs_.push_back(runs_of(m));
  }
  bool visible(int q_block, int k_block, int32_t window) {
    auto it = matrix_.find(window);
    if (it == matrix_.end()) it = matrix_.emplace(window, compute(window)).first;
    const size_t n = runs_.size();
    return it->second[static_cast<size_t>(q_block) * n + static_cast<size_t>(k_block)] != 0;
  }

 private:
  struct Run {
    int32_t seg, first, last;  // positions first..last, consecutive
  };
  static std::vector<Run> runs_of(const TokenMeta& m) {
    const int32_t* seg = m.seg.data<int32_t>();
    const int32_t* pos = m.pos.data<int32_t>();
    std::vector<Run> runs;
    for (int64_t t = 0; t < m.size(); ++t) {
      if (!runs.empty() && runs.back().seg == seg[t] && pos[t] == runs.back().last + 1) {
        runs.back().last = pos[t];
      } else {
        runs.push_back({seg[t], pos[t], pos[t]});
      }
    }
    return runs;
  }
  bool runs_visible(const std::vector<Run>& q, const std::vector<Run>& k, int32_t window) const {
    for (const Run& a : q)
      for (const Run& b : k) {
        if (a.seg != b.seg) continue;
        if (causal_ && b.first > a.last) continue;
        if (window > 0 && static_cast<int64_t>(a.first) - b.last >= window) continue;
        return true;
      }
    return false;
  }
  std::vector<char> compute(int32_t window) const {
    const size_t n = runs_.size();
    std::vector<char> m(n * n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) m[i * n + j] = runs_visible(runs_[i], runs_[j], window) ? 1 : 0;
    return m;
  }

  bool causal_;
  std::vector<std::vector<Run>> runs_;        // [r]: the runs of each ring block
  std::map<int32_t, std::vector<char>> matrix_;  // window -> [r * r] visible(q block, k block)
};

class UspAttention final : public Attention {
 public:
  UspAttention(DeviceMesh& mesh, const std::vector<TokenMeta>& sp_meta, int64_t H, int64_t Hkv,
               const AttentionPolicy& policy, int head_groups, bool causal)
      : uly_(mesh.ulysses()), ring_(mesh.ring()), policy_(policy), causal_(causal) {
    const int u = uly_.size(), r = ring_.size();
    SEQPAR_CHECK_EQ(static_cast<int>(sp_meta.size()), u * r, "one TokenMeta per SP rank");
    validate_sp_heads(H, Hkv, u);
    for (int b = 0; b < r; ++b) {
      std::vector<TokenMeta> parts;
      for (int i = 0; i < u; ++i) parts.push_back(sp_meta[b * u + i]);
      group_meta_.push_back(concat_token_meta(parts));
    }
    visibility_ = std::make_unique<BlockVisibility>(group_meta_, causal_);
    // Head groups: every rank's query heads cut into G consecutive parts (G <= its head count), each
    // with the KV heads it reads. G = 1 without Ulysses (nothing to overlap).
    const int64_t fewest = H / u;  // the smallest per-rank head count (query_heads)
    const int G = u == 1 ? 1 : static_cast<int>(std::clamp<int64_t>(head_groups, 1, fewest));
    groups_.resize(static_cast<size_t>(G));
    for (int j = 0; j < u; ++j) {
      const HeadRange q = query_heads(H, u, j);
      for (int g = 0; g < G; ++g) {
        const HeadRange part{q.begin + q.size() * g / G, q.begin + q.size() * (g + 1) / G};
        groups_[static_cast<size_t>(g)].q.push_back({part});
        groups_[static_cast<size_t>(g)].kv.push_back(kv_heads(part, H, Hkv));
      }
    }
  }

  // Head group g's q, k, v travel while group g-1 is computed, and its output travels back while
  // group g+1 is; with one group this is the plain a2a -> ring -> a2a.
  std::unique_ptr<AttentionContext> forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                                            float scale, int32_t window) override {
    SEQPAR_CHECK(window >= 0 && (window == 0 || causal_), "sp attention: window={} needs causal attention",
                 window);
    auto ctx = std::make_unique<UspContext>();
    const size_t G = groups_.size();
    ctx->groups.resize(G);
    std::vector<PendingA2a> in(3 * G), back(G);
    auto post_inputs = [&](size_t g) {
      in[3 * g] = post_heads_to_tokens(q, groups_[g].q);
      in[3 * g + 1] = post_heads_to_tokens(k, groups_[g].kv);
      in[3 * g + 2] = post_heads_to_tokens(v, groups_[g].kv);
    };
    post_inputs(0);
    for (size_t g = 0; g < G; ++g) {
      if (g + 1 < G) post_inputs(g + 1);
      HeadGroupState& st = ctx->groups[g];
      st.scale = scale;
      st.window = window;
      st.q = finish(in[3 * g]);
      st.k = finish(in[3 * g + 1]);
      st.v = finish(in[3 * g + 2]);
      const int64_t Tg = st.q.dim(0), h = st.q.dim(1);
      st.out = Tensor::empty(st.q.shape(), st.q.dtype(), st.q.device());
      st.lse = Tensor::empty({Tg, h}, DType::kF32, st.q.device());
      ring_forward(st);
      back[g] = post_tokens_to_heads(st.out, groups_[g].q);
    }
    for (size_t g = 0; g < G; ++g) finish_tokens_to_heads(out, back[g], groups_[g].q, /*accumulate=*/false);
    return ctx;
  }

  void prepare(Device device) override {
    for (const TokenMeta& m : group_meta_) prepare_token_meta(m, device);
  }

  void backward(AttentionContext& base, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) override {
    auto& ctx = static_cast<UspContext&>(base);
    const size_t G = groups_.size();
    std::vector<PendingA2a> in(G), back(3 * G);
    in[0] = post_heads_to_tokens(dout, groups_[0].q);
    for (size_t g = 0; g < G; ++g) {
      if (g + 1 < G) in[g + 1] = post_heads_to_tokens(dout, groups_[g + 1].q);
      HeadGroupState& st = ctx.groups[g];
      Tensor dout_g = finish(in[g]);
      // ring_backward writes every element of dq_g, dk_g, dv_g.
      Tensor dq_g = Tensor::empty(st.q.shape(), st.q.dtype(), st.q.device());
      Tensor dk_g = Tensor::empty(st.k.shape(), st.k.dtype(), st.k.device());
      Tensor dv_g = Tensor::empty(st.v.shape(), st.v.dtype(), st.v.device());
      ring_backward(st, dout_g, dq_g, dk_g, dv_g);
      back[3 * g] = post_tokens_to_heads(dq_g, groups_[g].q);
      back[3 * g + 1] = post_tokens_to_heads(dk_g, groups_[g].kv);
      back[3 * g + 2] = post_tokens_to_heads(dv_g, groups_[g].kv);
    }
    // A KV head can be read by several ranks and by several groups: its gradients are summed.
    dk.zero();
    dv.zero();
    for (size_t g = 0; g < G; ++g) {
      finish_tokens_to_heads(dq, back[3 * g], groups_[g].q, /*accumulate=*/false);
      finish_tokens_to_heads(dk, back[3 * g + 1], groups_[g].kv, /*accumulate=*/true);
      finish_tokens_to_heads(dv, back[3 * g + 2], groups_[g].kv, true);
    }
  }

 private:
  AttnArgs args_for(int block, const HeadGroupState& c) const {
    AttnArgs a;
    a.q_meta = group_meta_[ring_.rank()];
    a.k_meta = group_meta_[block];
    a.causal = causal_;
    a.scale = c.scale;
    a.window = c.window;
    a.policy = policy_;
    return a;
  }

  // Whether any query of ring block q_block can see a key of block k_block (a causal block
  // entirely in the future, or entirely before the window, is skipped: compute and hop).
  bool block_visible(int q_block, int k_block, int32_t window) const {
    return visibility_->visible(q_block, k_block, window);
  }

  // Ring step `step`'s k/v hops, posted: this rank's block to the rank that reads it at that step,
  // the block it reads from that block's owner; either skipped when the reader sees nothing of it.
  // `k_in`, `v_in` are left undefined when nothing is received.
  std::unique_ptr<CommRequest> post_kv_hop(int step, const HeadGroupState& c, Tensor& k_in, Tensor& v_in) {
    const int r = ring_.size(), me = ring_.rank();
    const int reader = (me + step) % r, owner = ((me - step) % r + r) % r;
    std::vector<P2POp> sends, recvs;
    if (block_visible(reader, me, c.window)) {
      sends = {{reader, c.k}, {reader, c.v}};
      counters_.kv_blocks_sent += 1;
    }
    if (block_visible(me, owner, c.window)) {
      k_in = Tensor::empty(c.k.shape(), c.k.dtype(), c.k.device());
      v_in = Tensor::empty(c.v.shape(), c.v.dtype(), c.v.device());
      recvs = {{owner, k_in}, {owner, v_in}};
      counters_.kv_blocks_received += 1;
    }
    if (sends.empty() && recvs.empty()) return nullptr;
    return ring_.send_recv_async(sends, recvs);
  }

  // Ulysses scatter, posted: [T, Hx, D] (all heads, my tokens) -> [u*T, hx, D] (my heads, the
  // group's tokens), ranges[j] = the heads rank j receives. finish() waits and returns the result.
  PendingA2a post_heads_to_tokens(const Tensor& x, const std::vector<HeadRuns>& ranges) {
    const int u = uly_.size(), me = uly_.rank();
    const int64_t T = x.dim(0), D = x.dim(2), Hx = x.dim(1);
    PendingA2a a;
    if (u == 1) {
      a.recv = x;
      return a;
    }
    int64_t send_total = 0;
    std::vector<int64_t> send_counts(u), recv_counts(u);
    for (int j = 0; j < u; ++j) {
      send_counts[j] = T * num_heads(ranges[j]) * D;
      recv_counts[j] = T * num_heads(ranges[me]) * D;
      send_total += send_counts[j];
    }
    a.send = Tensor::empty({send_total}, x.dtype(), x.device());
    size_t offset = 0;
    const size_t row = head_bytes(x, Hx);
    for (int j = 0; j < u; ++j) {
      const size_t width = head_bytes(x, num_heads(ranges[j]));
      size_t at = 0;  // bytes into rank j's row
      for (const HeadRange& run : ranges[j]) {
        const size_t run_width = head_bytes(x, run.size());
        copy_bytes_2d(static_cast<char*>(a.send.raw()) + offset + at, width, a.send.device(),
                      static_cast<const char*>(x.raw()) + head_bytes(x, run.begin), row, x.device(), run_width, T);
        at += run_width;
      }
      offset += width * T;
    }
    a.recv = Tensor::empty({u * T, num_heads(ranges[me]), D}, x.dtype(), x.device());
    a.req = all_to_all_async(uly_, a.recv, a.send, send_counts, recv_counts);
    return a;
  }

  static Tensor finish(PendingA2a& a) {
    if (a.req) a.req->wait();
    a.send = Tensor();
    return a.recv;
  }

  // Ulysses gather, the inverse, posted: [u*T, hx, D] -> chunks of [T, hx_j, D] from every rank.
  PendingA2a post_tokens_to_heads(const Tensor& g, const std::vector<HeadRuns>& ranges) {
    const int u = uly_.size(), me = uly_.rank();
    PendingA2a a;
    if (u == 1) {
      a.recv = g;
      return a;
    }
    const int64_t T = g.dim(0) / u, D = g.dim(2);
    std::vector<int64_t> send_counts(u), recv_counts(u);
    int64_t recv_total = 0;
    for (int j = 0; j < u; ++j) {
      send_counts[j] = T * num_heads(ranges[me]) * D;
      recv_counts[j] = T * num_heads(ranges[j]) * D;
      recv_total += recv_counts[j];
    }
    a.recv = Tensor::empty({recv_total}, g.dtype(), g.device());
    a.send = g.view({g.numel()});
    a.req = all_to_all_async(uly_, a.recv, a.send, send_counts, recv_counts);
    return a;
  }

  // Waits for a posted gather and places (or with accumulate, adds: a replicated KV head's
  // gradient is the sum of its replicas') the heads into x [T, Hx, D].
  void finish_tokens_to_heads(Tensor& x, PendingA2a& a, const std::vector<HeadRuns>& ranges, bool accumulate) {
    const int u = uly_.size();
    const Tensor recv = finish(a);
    if (u == 1) {
      // One rank and one group: the whole tensor.
      if (accumulate) {
        add_inplace(x, recv);
      } else {
        x.copy_from(recv);
      }
      return;
    }
    const int64_t T = x.dim(0), Hx = x.dim(1);
    const size_t row = head_bytes(x, Hx);
    size_t offset = 0;
    for (int j = 0; j < u; ++j) {
      const size_t width = head_bytes(x, num_heads(ranges[j]));
      const auto* chunk = static_cast<const char*>(recv.raw()) + offset;  // [T, hj, D]
      if (accumulate) {
        // Place the runs into a zeroed full-width buffer, then add (replicas overlap in heads:
        // across ranks, and within a rank whose KV heads are one copy per query head). A run
        // that overlaps one already in the buffer flushes it first.
        Tensor full;
        std::vector<HeadRange> placed;
        size_t at = 0;
        for (const HeadRange& run : ranges[j]) {
          const bool overlaps = std::any_of(placed.begin(), placed.end(), [&](const HeadRange& p) {
            return run.begin < p.end && p.begin < run.end;
          });
          if (overlaps) {
            add_inplace(x, full);
            placed.clear();
          }
          if (placed.empty()) full = Tensor::zeros(x.shape(), x.dtype(), x.device());
          const size_t run_width = head_bytes(x, run.size());
          copy_bytes_2d(static_cast<char*>(full.raw()) + head_bytes(x, run.begin), row, full.device(), chunk + at,
                        width, recv.device(), run_width, T);
          placed.push_back(run);
          at += run_width;
        }
        if (!placed.empty()) add_inplace(x, full);
      } else {
        size_t at = 0;
        for (const HeadRange& run : ranges[j]) {
          const size_t run_width = head_bytes(x, run.size());
          copy_bytes_2d(static_cast<char*>(x.raw()) + head_bytes(x, run.begin), row, x.device(), chunk + at, width,
                        recv.device(), run_width, T);
          at += run_width;
        }
      }
      offset += width * T;
    }
  }

  // The running output stays in f32 across the hops when the activations are narrower (bf16 on
  // the GPU): each hop's partial is rounded once by its kernel, the sum once at the end, so the
  // error does not grow with the ring degree (merging into a bf16 output rounded the running sum
  // at every hop).
  void ring_forward(HeadGroupState& c) {
    const int r = ring_.size(), me = ring_.rank();
    bool first = true;
    const bool wide = r > 1 && c.out.dtype() != DType::kF32;
    Tensor acc = wide ? Tensor::empty(c.out.shape(), DType::kF32, c.out.device()) : c.out;
    Tensor out_part = Tensor::empty(c.out.shape(), c.out.dtype(), c.out.device());
    Tensor lse_part = Tensor::empty(c.lse.shape(), DType::kF32, c.lse.device());
    Tensor k = c.k, v = c.v, k_next, v_next;
    std::unique_ptr<CommRequest> req;
    for (int step = 0; step < r; ++step) {
      const int block = ((me - step) % r + r) % r;
      if (step > 0) {  // this step's block, posted during the step before
        if (req) req->wait();
        k = std::exchange(k_next, Tensor());
        v = std::exchange(v_next, Tensor());
      }
      // Post the next hop before computing on this block.
      req = step + 1 < r ? post_kv_hop(step + 1, c, k_next, v_next) : nullptr;
      if (!block_visible(me, block, c.window)) continue;
      if (first) {
        attn_forward(wide ? out_part : c.out, c.lse, c.q, k, v, args_for(block, c));
        if (wide) cast(acc, out_part);
      } else {
        attn_forward(out_part, lse_part, c.q, k, v, args_for(block, c));
        attn_merge(acc, c.lse, out_part, lse_part);
      }
      counters_.blocks_computed += 1;
      first = false;
    }
    SEQPAR_CHECK(!first, "ring attention: no key block is visible to rank {}'s queries (its own block always is)", me);
    if (wide) cast(c.out, acc);
  }

  // Step s: the k, v of step s + 1 travel while this rank computes its contribution to block
  // (me - s)'s gradients; the contribution goes straight back to the block's owner, and this rank
  // adds the contributions its own block receives (from rank me + s) into its dk, dv. Step 0
  // (the own block) writes dq, dk, dv, every element; a receive is waited for one step later, so
  // one exchange is in flight while the next block is computed. With activations narrower than
  // f32 (bf16 on the GPU) dq and the home dk, dv are summed in f32 and rounded once at the end;
  // each contribution travels in the activation dtype, rounded once by its kernel (so the error
  // does not grow with the ring degree, and the hops carry no more bytes).
  void ring_backward(HeadGroupState& c, const Tensor& dout, Tensor& dq_out, Tensor& dk_out, Tensor& dv_out) {
    const int r = ring_.size(), me = ring_.rank();
    const bool wide = r > 1 && dq_out.dtype() != DType::kF32;
    auto sum_of = [&](const Tensor& t) { return wide ? Tensor::empty(t.shape(), DType::kF32, t.device()) : t; };
    Tensor dq = sum_of(dq_out), dk_home = sum_of(dk_out), dv_home = sum_of(dv_out);
    Tensor k = c.k, v = c.v, k_next, v_next;
    std::unique_ptr<CommRequest> kv_req;
    struct GradHop {
      std::unique_ptr<CommRequest> req;
      Tensor dk_sent, dv_sent, dk_in, dv_in;  // the sent buffers live until the hop is done
    };
    GradHop pending;
    auto land = [&](GradHop& hop) {
      if (!hop.req) return;
      hop.req->wait();
      if (hop.dk_in.defined()) {
        add_inplace(dk_home, hop.dk_in);
        add_inplace(dv_home, hop.dv_in);
      }
      hop = GradHop();
    };
    for (int step = 0; step < r; ++step) {
      const int block = ((me - step) % r + r) % r;
      if (step > 0) {
        if (kv_req) kv_req->wait();
        k = std::exchange(k_next, Tensor());
        v = std::exchange(v_next, Tensor());
      }
      kv_req = step + 1 < r ? post_kv_hop(step + 1, c, k_next, v_next) : nullptr;
      if (step == 0) {
        if (block_visible(me, me, c.window)) {
          attn_backward(dq, dk_home, dv_home, dout, c.q, k, v, c.out, c.lse, args_for(me, c), GradMode::kWrite);
          counters_.blocks_computed += 1;
        } else {
          dq.zero();
          dk_home.zero();
          dv_home.zero();
        }
        continue;
      }
      GradHop hop;
      if (block_visible(me, block, c.window)) {
        // The kernels take dq, dk, dv of one dtype: with f32 sums this block's dk, dv are computed
        // in f32 and rounded once into the activation dtype they travel in.
        Tensor dk = Tensor::zeros(k.shape(), dq.dtype(), k.device());
        Tensor dv = Tensor::zeros(v.shape(), dq.dtype(), v.device());
        // dq accumulates over the steps; this block's dk, dv start from the zeros above.
        attn_backward(dq, dk, dv, dout, c.q, k, v, c.out, c.lse, args_for(block, c), GradMode::kAccumulate);
        if (wide) {
          hop.dk_sent = Tensor::empty(k.shape(), k.dtype(), k.device());
          hop.dv_sent = Tensor::empty(v.shape(), v.dtype(), v.device());
          cast(hop.dk_sent, dk);
          cast(hop.dv_sent, dv);
        } else {
          hop.dk_sent = dk;
          hop.dv_sent = dv;
        }
        counters_.blocks_computed += 1;
      }
      // This step's gradient hop: to the owner of the block just computed, from the rank that
      // computed on this rank's block (the pairs of post_kv_hop, reversed).
      const int reader = (me + step) % r;
      std::vector<P2POp> sends, recvs;
      if (hop.dk_sent.defined()) {
        sends = {{block, hop.dk_sent}, {block, hop.dv_sent}};
        counters_.grad_blocks_sent += 1;
      }
      if (block_visible(reader, me, c.window)) {
        hop.dk_in = Tensor::empty(dk_out.shape(), dk_out.dtype(), dk_out.device());
        hop.dv_in = Tensor::empty(dv_out.shape(), dv_out.dtype(), dv_out.device());
        recvs = {{reader, hop.dk_in}, {reader, hop.dv_in}};
        counters_.grad_blocks_received += 1;
      }
      if (!sends.empty() || !recvs.empty()) hop.req = ring_.send_recv_async(sends, recvs);
      land(pending);
      pending = std::move(hop);
    }
    land(pending);
    if (wide) {
      cast(dq_out, dq);
      cast(dk_out, dk_home);
      cast(dv_out, dv_home);
    }
  }

 public:
  const SpRingCounters& counters() const { return counters_; }

 private:
  Communicator& uly_;
  Communicator& ring_;
  AttentionPolicy policy_;
  bool causal_;
  std::vector<TokenMeta> group_meta_;  // [r]: the tokens of ring block b (its ulysses group)
  std::vector<HeadGroup> groups_;      // [G]: the heads each Ulysses rank receives, per group
  std::unique_ptr<BlockVisibility> visibility_;
  SpRingCounters counters_;
};

}  // namespace

int parse_ulysses_head_groups(const std::string& value, const std::string& setting) {
  int v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  SEQPAR_INPUT_CHECK(ec == std::errc() && end == value.data() + value.size() && !value.empty() && v >= 1 && v <= 1024,
                     "{}={}: expected a whole number of head groups >= 1", setting, value);
  return v;
}

const SpRingCounters* sp_ring_counters(const Attention& attention) {
  const auto* usp = dynamic_cast<const UspAttention*>(&attention);
  return usp ? &usp->counters() : nullptr;
}

std::unique_ptr<Attention> make_sp_attention(DeviceMesh& mesh, const std::vector<TokenMeta>& sp_meta,
                                             int64_t num_heads, int64_t num_kv_heads, const AttentionPolicy& policy,
                                             int head_groups, bool causal) {
  SEQPAR_INPUT_CHECK(head_groups >= 1, "make_sp_attention: head_groups={} must be >= 1 (Ulysses head groups)",
                     head_groups);
  return std::make_unique<UspAttention>(mesh, sp_meta, num_heads, num_kv_heads, policy, head_groups, causal);
}

}  // namespace seqpar
