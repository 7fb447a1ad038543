// Sequence-parallel attention: one sequence's tokens spread over the P = ulysses × ring ranks of
// an SP group, attention computed exactly as if one device held them all.
//
// One implementation covers the three modes (USP's view): Ulysses all-to-all inside the
// `ulysses` sub-group (tokens gathered, heads split), then a ring over the `ring` sub-group
// (queries stay, key/value blocks travel, partial outputs merged by log-sum-exp).
//   ulysses: ulysses = P, ring = 1        ring: ulysses = 1, ring = P        hybrid: u × r = P
// The mask metadata of every rank's tokens (attention/attention.h) is known to every rank, so no
// metadata crosses the wire and any token layout (contiguous, zigzag, packed documents) works.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "comm/mesh.h"

namespace seqpar {

// Ulysses head groups when nobody chose (the pipeline below; bench/NOTES.md).
constexpr int kDefaultUlyssesHeadGroups = 2;

enum class SpMode { kUlysses, kRing, kHybrid };
std::string sp_mode_name(SpMode mode);
// "ulysses" | "ring" | "hybrid"; InputError naming `setting` and the value otherwise.
SpMode parse_sp_mode(const std::string& name, const std::string& setting = "sp_mode");

// The mesh's ulysses/ring degrees for a mode: ulysses → (P, 1), ring → (1, P), hybrid → (u, P/u).
// InputError when u does not divide P, or is missing (< 1) for hybrid, naming the values
// (hybrid with u = 1 or u = P runs as ring or ulysses).
MeshShape sp_mesh_shape(SpMode mode, int sp_size, int ulysses_degree);

// Checks the head split before any work: every Ulysses rank gets >= 1 query head
// (num_heads >= ulysses), naming heads and the degree otherwise.
void validate_sp_heads(int64_t num_heads, int64_t num_kv_heads, int ulysses_degree);

// The attention for this rank. sp_meta[s] is the mask metadata of SP rank s's tokens (s =
// mesh.sp_rank() for this rank; SP rank s = ring_idx * ulysses + uly_idx). Heads: the Ulysses
// split gives query heads to ulysses ranks as evenly as possible (uneven when H % u != 0), and
// each rank receives the KV heads its query heads read (a KV head needed by several ranks is
// replicated, and its gradients are summed back). When an uneven split leaves a rank's KV heads
// serving unequal numbers of its query heads, it gets one KV copy per query head instead.
//
// Overlap: with Ulysses, each rank's query heads are cut into `head_groups` groups (at most its
// head count; each group with the KV heads it reads, so a KV head read by two groups travels
// twice). Group g+1's q, k, v all-to-alls are in flight while group g is computed, and group g's
// output travels back while group g+1 is; likewise dout, dq, dk, dv in backward. 1 = no pipeline
// (an InputError below 1). The result does not depend on it beyond f32 summation order.
//
// Every local attention call runs the kernels `policy` chooses (attention_policy.h).
std::unique_ptr<Attention> make_sp_attention(DeviceMesh& mesh, const std::vector<TokenMeta>& sp_meta,
                                             int64_t num_heads, int64_t num_kv_heads,
                                             const AttentionPolicy& policy = {},
                                             int head_groups = kDefaultUlyssesHeadGroups, bool causal = true);

// What this rank's ring did since the attention was made, counted per head group and layer call
// (forward and backward): ring blocks computed on (its own included), k/v blocks sent and received,
// dk/dv contributions sent to and received from a block's owner. A hop the sliding window (or the
// causal mask, or the documents) makes useless is neither sent nor received, so these count what
// crossed the wire. Tests and benchmarks read them.
struct SpRingCounters {
  int64_t blocks_computed = 0;
  int64_t kv_blocks_sent = 0, kv_blocks_received = 0;
  int64_t grad_blocks_sent = 0, grad_blocks_received = 0;
};
// The counters of an attention make_sp_attention made; nullptr for any other Attention.
const SpRingCounters* sp_ring_counters(const Attention& attention);

// A head-group count as SEQPAR_ULYSSES_HEAD_GROUPS spells it: a whole number in [1, 1024];
// otherwise an InputError naming `setting` and the value.
int parse_ulysses_head_groups(const std::string& value, const std::string& setting);

}  // namespace seqpar
