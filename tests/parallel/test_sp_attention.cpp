// Sequence-parallel attention (ulysses, ring, hybrid) on P in-process ranks against one device's
// LocalAttention over the whole stream: forward and backward, MHA and GQA (KV heads replicated
// when u > Hkv, uneven query-head splits when H % u != 0), contiguous and zigzag layouts, one
// sequence and packed documents, with padding.
//
// The token layouts are built here from their definition (data/sp_batch.h, which this binary
// does not link): documents back to back, each its own segment, pads (one segment of their own)
// to a multiple of P (contiguous) or 2P (zigzag); pos = index in the padded stream;
//   contiguous: rank r holds [r*S/P, (r+1)*S/P)
//   zigzag:     2P chunks of S/(2P); rank r holds chunk r, then chunk 2P-1-r.
// tests/train/test_sp_model.cpp runs the same comparison on make_sp_batch's own shards.
#include <gtest/gtest.h>

#include <cstdlib>
#include <tuple>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mesh.h"
#include "parallel/sp_attention.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::random_tensor;
using testing::rel_error;

constexpr double kTol = 1e-5;

enum class Layout { kContiguous, kZigzag };
const char* layout_name(Layout l) { return l == Layout::kZigzag ? "zigzag" : "contiguous"; }

// The padded stream and every rank's share of it.
struct Stream {
  int64_t S = 0;                            // padded length
  std::vector<int32_t> seg, pos;            // [S]
  std::vector<std::vector<int64_t>> index;  // [P][S/P]: stream index of each local token
};

Stream make_stream(const std::vector<int32_t>& doc_lens, int P, Layout layout) {
  Stream st;
  int32_t seg = 0;
  for (int32_t len : doc_lens) {
    for (int32_t t = 0; t < len; ++t) st.seg.push_back(seg);
    ++seg;
  }
  const int64_t multiple = layout == Layout::kZigzag ? 2 * P : P;
  const auto real = static_cast<int64_t>(st.seg.size());
  st.S = (real + multiple - 1) / multiple * multiple;
  while (static_cast<int64_t>(st.seg.size()) < st.S) st.seg.push_back(seg);  // pads: one segment
  for (int64_t i = 0; i < st.S; ++i) st.pos.push_back(static_cast<int32_t>(i));
  const int64_t T = st.S / P, chunk = st.S / (2 * P);
  st.index.resize(P);
  for (int r = 0; r < P; ++r) {
    if (layout == Layout::kContiguous) {
      for (int64_t t = 0; t < T; ++t) st.index[r].push_back(r * T + t);
    } else {
      for (int64_t c : {int64_t{r}, int64_t{2 * P - 1 - r}})
        for (int64_t t = 0; t < chunk; ++t) st.index[r].push_back(c * chunk + t);
    }
  }
  return st;
}

std::vector<int64_t> iota_index(int64_t n) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  return idx;
}

TokenMeta meta_of(const Stream& st, const std::vector<int64_t>& idx) {
  std::vector<int32_t> seg, pos;
  for (int64_t i : idx) {
    seg.push_back(st.seg[i]);
    pos.push_back(st.pos[i]);
  }
  const auto n = static_cast<int64_t>(idx.size());
  return {Tensor::from_vector<int32_t>({n}, seg), Tensor::from_vector<int32_t>({n}, pos)};
}

// Rows idx of x [S, ...] -> [|idx|, ...].
Tensor take_rows(const Tensor& x, const std::vector<int64_t>& idx) {
  Shape shape = x.shape();
  shape[0] = static_cast<int64_t>(idx.size());
  Tensor out = Tensor::empty(shape, x.dtype());
  const int64_t w = x.numel() / x.dim(0);
  const float* src = x.data<float>();  // (S, w)
  float* dst = out.data<float>();      // (|idx|, w)
  for (size_t t = 0; t < idx.size(); ++t) std::copy_n(src + idx[t] * w, w, dst + static_cast<int64_t>(t) * w);
  return out;
}

// The inverse: per_rank[r] [T, ...] in local order -> [S, ...] in stream order. Rows no rank
// wrote stay NaN, so a lost token fails the comparison.
Tensor put_rows(const Stream& st, const std::vector<Tensor>& per_rank) {
  Shape shape = per_rank[0].shape();
  shape[0] = st.S;
  std::vector<float> out(static_cast<size_t>(shape_numel(shape)), std::numeric_limits<float>::quiet_NaN());
  const int64_t w = per_rank[0].numel() / per_rank[0].dim(0);
  for (size_t r = 0; r < per_rank.size(); ++r) {
    const float* src = per_rank[r].data<float>();  // (T, w)
    for (size_t t = 0; t < st.index[r].size(); ++t)
      std::copy_n(src + static_cast<int64_t>(t) * w, w, out.data() + st.index[r][t] * w);
  }
  return Tensor::from_vector<float>(shape, out);
}

// One attention problem over the whole stream.
struct Problem {
  int64_t H = 0, Hkv = 0, D = 0;
  Tensor q, k, v, dout;  // [S, H, D], [S, Hkv, D] x2, [S, H, D]
  float scale() const { return 1.f / std::sqrt(static_cast<float>(D)); }
};

Problem make_problem(int64_t S, int64_t H, int64_t Hkv, int64_t D, uint64_t seed) {
  // Scores of order a few units: the softmax is far from uniform, so a wrong mask or a wrong
  // head shows up.
  return {H, Hkv, D, random_tensor({S, H, D}, seed, -2.f, 2.f), random_tensor({S, Hkv, D}, seed + 1, -2.f, 2.f),
          random_tensor({S, Hkv, D}, seed + 2), random_tensor({S, H, D}, seed + 3)};
}

struct Result {
  Tensor out, dq, dk, dv;  // stream order
};

Tensor garbage(const Shape& shape) { return random_tensor(shape, 777, 100.f, 200.f); }

Result run_local(const Stream& st, const Problem& p, int32_t window = 0) {
  LocalAttention attn(meta_of(st, iota_index(st.S)));
  Result res{garbage(p.q.shape()), garbage(p.q.shape()), garbage(p.k.shape()), garbage(p.v.shape())};
  auto ctx = attn.forward(p.q, p.k, p.v, res.out, p.scale(), window);
  attn.backward(*ctx, p.dout, res.dq, res.dk, res.dv);
  return res;
}

// make_sp_attention on P = shape.sp() ranks, each with its rows of the problem; results gathered
// back to stream order. Outputs start as garbage: they must be written (=), not accumulated.
Result run_sp(const MeshShape& shape, const Stream& st, const Problem& p, int head_groups = kDefaultUlyssesHeadGroups,
              int32_t window = 0, std::vector<SpRingCounters>* counters = nullptr) {
  const int P = shape.sp();
  if (counters) counters->assign(static_cast<size_t>(P), SpRingCounters{});
  std::vector<TokenMeta> sp_meta;
  for (int r = 0; r < P; ++r) sp_meta.push_back(meta_of(st, st.index[r]));
  std::vector<Tensor> out(P), dq(P), dk(P), dv(P);
  run_local_ranks(P, [&](Communicator& world) {
    DeviceMesh mesh(world, shape);
    const int r = mesh.sp_rank();
    const std::vector<int64_t>& idx = st.index[r];
    Tensor q = take_rows(p.q, idx), k = take_rows(p.k, idx), v = take_rows(p.v, idx), dout = take_rows(p.dout, idx);
    Tensor o = garbage(q.shape()), gq = garbage(q.shape()), gk = garbage(k.shape()), gv = garbage(v.shape());
    auto attn = make_sp_attention(mesh, sp_meta, p.H, p.Hkv, AttentionPolicy{}, head_groups);
    auto ctx = attn->forward(q, k, v, o, p.scale(), window);
    attn->backward(*ctx, dout, gq, gk, gv);
    if (counters) (*counters)[static_cast<size_t>(r)] = *sp_ring_counters(*attn);
    out[r] = o;
    dq[r] = gq;
    dk[r] = gk;
    dv[r] = gv;
  });
  return {put_rows(st, out), put_rows(st, dq), put_rows(st, dk), put_rows(st, dv)};
}

void expect_close(const Result& got, const Result& want, double tol, const std::string& what) {
  EXPECT_LE(rel_error(got.out, want.out), tol) << what << ": out";
  EXPECT_LE(rel_error(got.dq, want.dq), tol) << what << ": dq";
  EXPECT_LE(rel_error(got.dk, want.dk), tol) << what << ": dk";
  EXPECT_LE(rel_error(got.dv, want.dv), tol) << what << ": dv";
}

// ---- SP degree P reproduces degree 1 -----------------------------------------------------

struct ModeCase {
  SpMode mode;
  int P;
  int ulysses;  // hybrid only
};

std::string case_name(const ::testing::TestParamInfo<ModeCase>& info) {
  const ModeCase& c = info.param;
  std::string name = sp_mode_name(c.mode) + "_P" + std::to_string(c.P);
  if (c.mode == SpMode::kHybrid) name += "_u" + std::to_string(c.ulysses);
  return name;
}

class SpAttentionVsLocal : public ::testing::TestWithParam<ModeCase> {};

// Every (H, Hkv) pair, layout and document set on this mode's mesh. Head pairs the mode cannot
// split (Ulysses degree > H) are rejected by validate_sp_heads and tested in ConfigErrors.
TEST_P(SpAttentionVsLocal, ForwardAndBackwardMatchOneDevice) {
  const ModeCase& c = GetParam();
  const MeshShape shape = sp_mesh_shape(c.mode, c.P, c.ulysses);
  ASSERT_EQ(shape.sp(), c.P);
  const std::vector<std::pair<int64_t, int64_t>> heads = {{8, 8}, {8, 4}, {8, 2}, {8, 1},
                                                          {6, 6}, {6, 3}, {6, 2}, {6, 1}};
  // One causal sequence (not a multiple of P or 2P: padded), and packed documents including a
  // one-token document and a document that crosses several shards.
  const std::vector<std::vector<int32_t>> doc_sets = {{21}, {5, 1, 9, 3, 6}};
  const int64_t D = 4;
  int cases = 0;
  for (auto [H, Hkv] : heads) {
    if (shape.ulysses > H) continue;
    for (Layout layout : {Layout::kContiguous, Layout::kZigzag}) {
      for (size_t d = 0; d < doc_sets.size(); ++d) {
        const Stream st = make_stream(doc_sets[d], c.P, layout);
        const Problem p = make_problem(st.S, H, Hkv, D, 100 * H + 10 * Hkv + d);
        const std::string what = "H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv) + " " +
                                 layout_name(layout) + " docs#" + std::to_string(d) + " (" + shape.str() + ")";
        expect_close(run_sp(shape, st, p), run_local(st, p), kTol, what);
        ++cases;
      }
    }
  }
  EXPECT_GE(cases, 16);
}

INSTANTIATE_TEST_SUITE_P(Modes, SpAttentionVsLocal,
                         ::testing::Values(ModeCase{SpMode::kUlysses, 2, 0}, ModeCase{SpMode::kUlysses, 3, 0},
                                           ModeCase{SpMode::kUlysses, 4, 0}, ModeCase{SpMode::kUlysses, 8, 0},
                                           ModeCase{SpMode::kRing, 2, 0}, ModeCase{SpMode::kRing, 3, 0},
                                           ModeCase{SpMode::kRing, 4, 0}, ModeCase{SpMode::kRing, 8, 0},
                                           ModeCase{SpMode::kHybrid, 4, 2}, ModeCase{SpMode::kHybrid, 8, 2},
                                           ModeCase{SpMode::kHybrid, 8, 4}),
                         case_name);

// A longer sequence where P ranks each hold many tokens, and the degree-1 "SP" (P = 1 through the
// same class) equals LocalAttention too.
TEST(SpAttention, DegreeOneAndLongerSequence) {
  const Stream one = make_stream({37}, 1, Layout::kContiguous);
  const Problem p1 = make_problem(one.S, 4, 2, 8, 5);
  expect_close(run_sp(sp_mesh_shape(SpMode::kUlysses, 1, 0), one, p1), run_local(one, p1), kTol, "P=1 ulysses");
  expect_close(run_sp(sp_mesh_shape(SpMode::kRing, 1, 0), one, p1), run_local(one, p1), kTol, "P=1 ring");

  const Stream st = make_stream({200}, 4, Layout::kZigzag);
  const Problem p = make_problem(st.S, 4, 2, 8, 6);
  const Result want = run_local(st, p);
  expect_close(run_sp(sp_mesh_shape(SpMode::kRing, 4, 0), st, p), want, kTol, "ring P=4 S=200");
  expect_close(run_sp(sp_mesh_shape(SpMode::kHybrid, 4, 2), st, p), want, kTol, "hybrid 2x2 S=200");
}

// Ulysses' head-group pipeline (several all-to-alls in flight, groups sharing KV heads, groups of
// unequal sizes, more groups asked for than a rank has heads) computes the same attention as one
// device, whatever the number of groups.
TEST(SpAttention, UlyssesHeadGroupsMatchOneDevice) {
  const std::vector<std::pair<int64_t, int64_t>> heads = {{8, 8}, {8, 2}, {8, 1}, {6, 3}, {6, 2}};
  for (auto [mode, P, u] : {std::tuple{SpMode::kUlysses, 2, 0}, std::tuple{SpMode::kUlysses, 4, 0},
                            std::tuple{SpMode::kHybrid, 4, 2}}) {
    const MeshShape shape = sp_mesh_shape(mode, P, u);
    const Stream st = make_stream({5, 1, 17, 3}, P, Layout::kZigzag);
    for (auto [H, Hkv] : heads) {
      if (shape.ulysses > H) continue;
      const Problem p = make_problem(st.S, H, Hkv, 4, 31 * H + Hkv);
      const Result want = run_local(st, p);
      for (int groups : {1, 2, 3, 8}) {
        const std::string what = shape.str() + " H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv) +
                                 " head_groups=" + std::to_string(groups);
        expect_close(run_sp(shape, st, p, groups), want, kTol, what);
      }
    }
  }
}

// SEQPAR_ULYSSES_HEAD_GROUPS's syntax (cli/kernel_env.h reads the variable; this is its parser).
TEST(SpAttention, HeadGroupsParse) {
  EXPECT_EQ(parse_ulysses_head_groups("3", "SEQPAR_ULYSSES_HEAD_GROUPS"), 3);
  EXPECT_EQ(parse_ulysses_head_groups("1024", "SEQPAR_ULYSSES_HEAD_GROUPS"), 1024);
  for (const char* bad : {"0", "-1", "1025", "2x", "two", ""}) {
    try {
      parse_ulysses_head_groups(bad, "SEQPAR_ULYSSES_HEAD_GROUPS");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      const std::string want = std::string("SEQPAR_ULYSSES_HEAD_GROUPS=") + bad + ": expected a whole number of head groups >= 1";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(kDefaultUlyssesHeadGroups, 2);
}

// The two ring layouts hold different tokens per rank and merge the blocks in a different order,
// yet compute the same attention.
TEST(SpAttention, ZigzagAndContiguousRingAgree) {
  for (int P : {2, 4}) {
    const Stream zig = make_stream({29}, P, Layout::kZigzag);
    const Stream con = make_stream({29}, P, Layout::kContiguous);
    // The same 29 tokens; pad the contiguous stream's problem to the zigzag length (pads are a
    // segment of their own, so the real tokens' results do not depend on them).
    const Problem pz = make_problem(zig.S, 8, 2, 4, 40 + P);
    const Problem pc{pz.H, pz.Hkv, pz.D, take_rows(pz.q, iota_index(con.S)), take_rows(pz.k, iota_index(con.S)),
                     take_rows(pz.v, iota_index(con.S)), take_rows(pz.dout, iota_index(con.S))};
    const MeshShape ring = sp_mesh_shape(SpMode::kRing, P, 0);
    const Result z = run_sp(ring, zig, pz), c = run_sp(ring, con, pc);
    const std::vector<int64_t> real = iota_index(29);
    const std::string what = "ring P=" + std::to_string(P) + " zigzag vs contiguous";
    EXPECT_LE(rel_error(take_rows(z.out, real), take_rows(c.out, real)), kTol) << what;
    EXPECT_LE(rel_error(take_rows(z.dq, real), take_rows(c.dq, real)), kTol) << what;
    EXPECT_LE(rel_error(take_rows(z.dk, real), take_rows(c.dk, real)), kTol) << what;
    EXPECT_LE(rel_error(take_rows(z.dv, real), take_rows(c.dv, real)), kTol) << what;
  }
}

// ---- causal load balance of the ring ------------------------------------------------------

// The (query, key) pairs rank r's queries see over the whole stream, i.e. the attention work its
// ring steps do (a pair is computed on the step that brings the key's block).
int64_t ring_work(const Stream& st, int r) {
  int64_t work = 0;
  for (int64_t qi : st.index[r])
    for (int64_t kj = 0; kj < st.S; ++kj) work += st.seg[kj] == st.seg[qi] && st.pos[kj] <= st.pos[qi];
  return work;
}

TEST(SpAttention, ZigzagBalancesRingWork) {
  for (int P : {2, 3, 4, 8}) {
    const int64_t S = 8 * P;  // a multiple of 2P: no pads, so the balance is exact
    const Stream zig = make_stream({static_cast<int32_t>(S)}, P, Layout::kZigzag);
    const Stream con = make_stream({static_cast<int32_t>(S)}, P, Layout::kContiguous);
    std::vector<int64_t> wz, wc;
    for (int r = 0; r < P; ++r) {
      wz.push_back(ring_work(zig, r));
      wc.push_back(ring_work(con, r));
    }
    // Zigzag: chunk r and chunk 2P-1-r see (r + 1/2) and (2P - 1 - r + 1/2) chunks of keys: the
    // same total on every rank.
    for (int r = 0; r < P; ++r) EXPECT_EQ(wz[r], wz[0]) << "zigzag P=" << P << " rank " << r;
    int64_t total = 0;
    for (int64_t w : wz) total += w;
    EXPECT_EQ(total, S * (S + 1) / 2);
    // Contiguous: rank r sees r full blocks plus its own triangle, so the last rank does
    // ((P-1) T^2 + T(T+1)/2) / (T(T+1)/2) times the first rank's work (-> 2P-1 for long T).
    const int64_t T = S / P;
    for (int r = 0; r < P; ++r) EXPECT_EQ(wc[r], r * T * T + T * (T + 1) / 2) << "contiguous P=" << P;
    EXPECT_GT(static_cast<double>(wc[P - 1]) / static_cast<double>(wc[0]), static_cast<double>(P));
  }
}

// ---- sliding windows ------------------------------------------------------------------------

// Windows shorter than a shard, about one shard and longer than several shards, on every mode and
// both layouts, one sequence and packed documents: SP equals one device with the same window.
TEST(SpAttention, SlidingWindowsMatchOneDeviceOnEveryMode) {
  const std::vector<std::pair<SpMode, int>> modes = {{SpMode::kUlysses, 4}, {SpMode::kRing, 4}, {SpMode::kHybrid, 4}};
  const std::vector<std::vector<int32_t>> doc_sets = {{64}, {23, 9, 30}};
  int cases = 0;
  for (auto [mode, P] : modes) {
    const MeshShape shape = sp_mesh_shape(mode, P, 2);
    for (Layout layout : {Layout::kContiguous, Layout::kZigzag}) {
      for (size_t d = 0; d < doc_sets.size(); ++d) {
        const Stream st = make_stream(doc_sets[d], P, layout);
        const int64_t L = st.S / P;  // shard length
        for (int32_t W : {1, 5, static_cast<int32_t>(L), static_cast<int32_t>(L + 1), static_cast<int32_t>(3 * L)}) {
          const Problem p = make_problem(st.S, 4, 2, 4, 900 + W + 10 * d);
          const std::string what = sp_mode_name(mode) + " " + layout_name(layout) + " docs#" + std::to_string(d) +
                                   " W=" + std::to_string(W) + " L=" + std::to_string(L);
          const Result want = run_local(st, p, W);
          expect_close(run_sp(shape, st, p, kDefaultUlyssesHeadGroups, W), want, kTol, what);
          ++cases;
        }
        // The window really masks: full causal differs from it.
        const Problem p = make_problem(st.S, 4, 2, 4, 77);
        EXPECT_GT(rel_error(run_local(st, p, 5).out, run_local(st, p).out), 1e-3);
      }
    }
  }
  EXPECT_EQ(cases, 3 * 2 * 2 * 5);
}

// The ring computes and sends only the blocks a window lets some query see. One sequence of
// P = 8 contiguous shards of L = 16 tokens: a rank's first query reaches W - 1 positions back, so it
// reads ceil((W - 1) / L) blocks before its own (1 for 1 < W <= L + 1, 2 for W = 2L + 1) instead of
// every earlier block (up to P - 1 = 7). Counted per layer call, forward and backward.
TEST(SpAttention, RingSkipsTheHopsAWindowNeverSees) {
  const int P = 8;
  const Stream st = make_stream({128}, P, Layout::kContiguous);
  const int64_t L = 16;
  const MeshShape shape = sp_mesh_shape(SpMode::kRing, P, 0);
  auto expected_blocks_back = [&](int r, int32_t W) {  // blocks before rank r's own that it sees
    if (W == 0) return r;
    return std::min<int>(r, static_cast<int>((W - 1 + L - 1) / L));
  };
  for (int32_t W : {0, 1, 3, 16, 17, 33}) {
    const Problem p = make_problem(st.S, 2, 1, 4, 300 + W);
    std::vector<SpRingCounters> counters;
    const Result got = run_sp(shape, st, p, 1, W, &counters);
    expect_close(got, run_local(st, p, W), kTol, "W=" + std::to_string(W));
    int64_t sent = 0, received = 0, grads_sent = 0, grads_received = 0;
    for (int r = 0; r < P; ++r) {
      const SpRingCounters& c = counters[static_cast<size_t>(r)];
      const int back = expected_blocks_back(r, W);
      EXPECT_EQ(c.blocks_computed, 2 * (1 + back)) << "W=" << W << " rank " << r << " (forward + backward)";
      EXPECT_EQ(c.kv_blocks_received, 2 * back) << "W=" << W << " rank " << r;
      EXPECT_EQ(c.grad_blocks_sent, back) << "W=" << W << " rank " << r;
      sent += c.kv_blocks_sent;
      received += c.kv_blocks_received;
      grads_sent += c.grad_blocks_sent;
      grads_received += c.grad_blocks_received;
    }
    EXPECT_EQ(sent, received) << "every send has its receive";
    EXPECT_EQ(grads_sent, grads_received);
  }
  // Zigzag at a window inside one chunk: a rank's two chunks read the chunk before each, held by
  // the rank before (chunk r - 1) and the rank after (chunk 2P - 2 - r): 2 blocks besides its own;
  // rank 0's first chunk has none before it, and rank P - 1's second chunk follows its own first.
  {
    const Stream zig = make_stream({128}, P, Layout::kZigzag);
    const Problem p = make_problem(zig.S, 2, 1, 4, 400);
    std::vector<SpRingCounters> counters;
    expect_close(run_sp(shape, zig, p, 1, 4, &counters), run_local(zig, p, 4), kTol, "zigzag W=4");
    for (int r = 0; r < P; ++r) {
      const int64_t reads = r == 0 || r == P - 1 ? 1 : 2;
      EXPECT_EQ(counters[static_cast<size_t>(r)].kv_blocks_received, 2 * reads) << "zigzag rank " << r;
    }
  }
}

// ---- configuration errors ----------------------------------------------------------------

template <typename F>
void expect_input_error(F f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no InputError; expected one containing: " << fragments[0];
  } catch (const InputError& e) {
    for (const std::string& frag : fragments)
      EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << "'" << frag << "' not in: " << e.what();
  }
}

TEST(SpAttention, MeshShapes) {
  const MeshShape u = sp_mesh_shape(SpMode::kUlysses, 4, 0);
  EXPECT_EQ(u.ulysses, 4);
  EXPECT_EQ(u.ring, 1);
  const MeshShape r = sp_mesh_shape(SpMode::kRing, 4, 0);
  EXPECT_EQ(r.ulysses, 1);
  EXPECT_EQ(r.ring, 4);
  const MeshShape h = sp_mesh_shape(SpMode::kHybrid, 8, 2);
  EXPECT_EQ(h.ulysses, 2);
  EXPECT_EQ(h.ring, 4);
  EXPECT_EQ(parse_sp_mode("hybrid"), SpMode::kHybrid);
  EXPECT_EQ(sp_mode_name(parse_sp_mode("ring")), "ring");
}

TEST(SpAttention, ConfigErrors) {
  // u must divide P.
  expect_input_error([] { sp_mesh_shape(SpMode::kHybrid, 6, 4); }, {"ulysses_degree=4", "divide", "sp_size=6"});
  // hybrid needs its Ulysses degree.
  expect_input_error([] { sp_mesh_shape(SpMode::kHybrid, 4, 0); }, {"hybrid", "ulysses_degree"});
  expect_input_error([] { sp_mesh_shape(SpMode::kRing, 0, 0); }, {"sp_size=0"});
  // Every Ulysses rank needs a query head.
  expect_input_error([] { validate_sp_heads(4, 2, 8); }, {"ulysses degree 8", "num_attention_heads=4"});
  expect_input_error([] { validate_sp_heads(6, 4, 2); }, {"num_attention_heads=6", "num_key_value_heads=4"});
  expect_input_error([] { parse_sp_mode("zigzag", "--sp-mode"); }, {"--sp-mode=zigzag", "ulysses, ring, hybrid"});
  // make_sp_attention checks the heads too, and wants one TokenMeta per SP rank.
  const Stream st = make_stream({16}, 4, Layout::kContiguous);
  std::vector<TokenMeta> meta;
  for (int r = 0; r < 4; ++r) meta.push_back(meta_of(st, st.index[r]));
  EXPECT_THROW(run_local_ranks(4,
                               [&](Communicator& world) {
                                 DeviceMesh mesh(world, sp_mesh_shape(SpMode::kUlysses, 4, 0));
                                 make_sp_attention(mesh, meta, /*H=*/2, /*Hkv=*/1);
                               }),
               Error);
  try {
    run_local_ranks(4, [&](Communicator& world) {
      DeviceMesh mesh(world, sp_mesh_shape(SpMode::kRing, 4, 0));
      std::vector<TokenMeta> three(meta.begin(), meta.begin() + 3);
      make_sp_attention(mesh, three, 4, 4);
    });
    ADD_FAILURE() << "make_sp_attention accepted 3 TokenMeta for 4 SP ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one TokenMeta per SP rank"), std::string::npos) << e.what();
  }
  // Head groups are an explicit count >= 1.
  try {
    run_local_ranks(4, [&](Communicator& world) {
      DeviceMesh mesh(world, sp_mesh_shape(SpMode::kUlysses, 4, 0));
      make_sp_attention(mesh, meta, 4, 4, AttentionPolicy{}, /*head_groups=*/0);
    });
    ADD_FAILURE() << "make_sp_attention accepted head_groups=0";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("head_groups=0 must be >= 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace seqpar
