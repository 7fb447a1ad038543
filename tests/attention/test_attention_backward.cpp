// attn_backward against central finite differences (f64 kernels), its accumulate and write
// semantics, key blocks merged by attn_merge (what ring attention does), token shuffles, and
// LocalAttention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention/cpu/attention_cpu.h"
#include "attention_test_util.h"
#include "core/allocator.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::f64_vector;
using testing::gather_meta;
using testing::gather_rows;
using testing::make_meta;
using testing::max_rel_diff;
using testing::random_permutation;
using testing::random_tensor;
using testing::random_vector;

// A problem in double precision for the f64 kernels.
struct Problem64 {
  int64_t H, Hkv, D;
  bool causal;
  double scale;
  TokenMeta q_meta, k_meta;
  int64_t Tq() const { return q_meta.size(); }
  int64_t Tk() const { return k_meta.size(); }
  cpu_attn::AttnMask mask() const {
    return {q_meta.seg.data<int32_t>(), q_meta.pos.data<int32_t>(), k_meta.seg.data<int32_t>(),
            k_meta.pos.data<int32_t>(), causal};
  }
};

std::vector<double> to64(const std::vector<float>& f) { return std::vector<double>(f.begin(), f.end()); }

// loss = sum(out * w) with the f64 forward kernel.
double loss64(const Problem64& p, const std::vector<double>& q, const std::vector<double>& k,
              const std::vector<double>& v, const std::vector<double>& w) {
  std::vector<double> out(q.size()), lse(static_cast<size_t>(p.Tq() * p.H));
  cpu_attn::attn_forward<double>(out.data(), lse.data(), q.data(), k.data(), v.data(), p.mask(), p.Tq(), p.Tk(), p.H,
                                 p.Hkv, p.D, p.scale);
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += out[i] * w[i];
  return s;
}

// d loss / d x by central differences, one element at a time.
std::vector<double> numeric_grad(const Problem64& p, std::vector<double> q, std::vector<double> k,
                                 std::vector<double> v, const std::vector<double>& w, int which) {
  std::vector<double>& x = which == 0 ? q : which == 1 ? k : v;
  std::vector<double> g(x.size());
  const double eps = 1e-5;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + eps;
    const double lp = loss64(p, q, k, v, w);
    x[i] = x0 - eps;
    const double lm = loss64(p, q, k, v, w);
    x[i] = x0;
    g[i] = (lp - lm) / (2 * eps);
  }
  return g;
}

TEST(AttnBackward, MatchesFiniteDifferencesInDouble) {
  const int64_t D = 4;
  struct Case {
    int64_t H, Hkv;
    bool causal;
    std::vector<int32_t> cu;
  };
  const std::vector<Case> cases = {{4, 4, true, {0, 9}},      {4, 2, true, {0, 4, 5, 9}},
                                   {4, 1, false, {0, 4, 5, 9}}, {4, 2, false, {0, 9}},
                                   {4, 1, true, {0, 2, 9}}};
  uint64_t seed = 300;
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("H={} Hkv={} causal={} docs={}", c.H, c.Hkv, c.causal, c.cu.size() - 1));
    const TokenMeta meta = token_meta_from_cu_seqlens(c.cu);
    const Problem64 p{c.H, c.Hkv, D, c.causal, 0.6, meta, meta};
    const int64_t T = meta.size();
    const auto q = to64(random_vector(T * c.H * D, ++seed, -1.5f, 1.5f));
    const auto k = to64(random_vector(T * c.Hkv * D, ++seed, -1.5f, 1.5f));
    const auto v = to64(random_vector(T * c.Hkv * D, ++seed));
    const auto w = to64(random_vector(T * c.H * D, ++seed));

    std::vector<double> out(q.size()), lse(static_cast<size_t>(T * c.H));
    cpu_attn::attn_forward<double>(out.data(), lse.data(), q.data(), k.data(), v.data(), p.mask(), T, T, c.H, c.Hkv,
                                   D, p.scale);
    std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
    cpu_attn::attn_backward<double>(dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(), v.data(),
                                    out.data(), lse.data(), p.mask(), T, T, c.H, c.Hkv, D, p.scale);
    EXPECT_LT(max_rel_diff(dq, numeric_grad(p, q, k, v, w, 0)), 1e-8);
    EXPECT_LT(max_rel_diff(dk, numeric_grad(p, q, k, v, w, 1)), 1e-8);
    EXPECT_LT(max_rel_diff(dv, numeric_grad(p, q, k, v, w, 2)), 1e-8);

    // The f32 entry agrees with the f64 kernel to f32 rounding.
    Tensor qf = Tensor::from_vector<float>({T, c.H, D}, std::vector<float>(q.begin(), q.end()));
    Tensor kf = Tensor::from_vector<float>({T, c.Hkv, D}, std::vector<float>(k.begin(), k.end()));
    Tensor vf = Tensor::from_vector<float>({T, c.Hkv, D}, std::vector<float>(v.begin(), v.end()));
    Tensor wf = Tensor::from_vector<float>({T, c.H, D}, std::vector<float>(w.begin(), w.end()));
    Tensor outf = Tensor::empty({T, c.H, D}, DType::kF32), lsef = Tensor::empty({T, c.H}, DType::kF32);
    const AttnArgs args{meta, meta, c.causal, 0.6f};
    attn_forward(outf, lsef, qf, kf, vf, args);
    Tensor dqf = Tensor::zeros({T, c.H, D}, DType::kF32);
    Tensor dkf = Tensor::zeros({T, c.Hkv, D}, DType::kF32), dvf = Tensor::zeros({T, c.Hkv, D}, DType::kF32);
    attn_backward(dqf, dkf, dvf, wf, qf, kf, vf, outf, lsef, args);
    EXPECT_LT(max_rel_diff(f64_vector(dqf), dq), 1e-5);
    EXPECT_LT(max_rel_diff(f64_vector(dkf), dk), 1e-5);
    EXPECT_LT(max_rel_diff(f64_vector(dvf), dv), 1e-5);
  }
}

// A full attention problem in f32, its forward and its backward from zero.
struct Full {
  int64_t T, H, Hkv, D;
  AttnArgs args;
  Tensor q, k, v, dout, out, lse, dq, dk, dv;
};

Full make_full(const std::vector<int32_t>& cu, int64_t H, int64_t Hkv, bool causal, uint64_t seed) {
  const int64_t D = 8;
  Full f{0, H, Hkv, D, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  const TokenMeta meta = token_meta_from_cu_seqlens(cu);
  f.T = meta.size();
  f.args = AttnArgs{meta, meta, causal, 1.f / std::sqrt(static_cast<float>(D))};
  f.q = random_tensor({f.T, H, D}, seed, -2.f, 2.f);
  f.k = random_tensor({f.T, Hkv, D}, seed + 1, -2.f, 2.f);
  f.v = random_tensor({f.T, Hkv, D}, seed + 2);
  f.dout = random_tensor({f.T, H, D}, seed + 3);
  f.out = Tensor::empty({f.T, H, D}, DType::kF32);
  f.lse = Tensor::empty({f.T, H}, DType::kF32);
  attn_forward(f.out, f.lse, f.q, f.k, f.v, f.args);
  f.dq = Tensor::zeros({f.T, H, D}, DType::kF32);
  f.dk = Tensor::zeros({f.T, Hkv, D}, DType::kF32);
  f.dv = Tensor::zeros({f.T, Hkv, D}, DType::kF32);
  attn_backward(f.dq, f.dk, f.dv, f.dout, f.q, f.k, f.v, f.out, f.lse, f.args);
  return f;
}

TEST(AttnBackward, Accumulates) {
  Full f = make_full({0, 6, 11}, 4, 2, true, 40);
  Tensor dq = random_tensor(f.q.shape(), 50), dk = random_tensor(f.k.shape(), 51), dv = random_tensor(f.v.shape(), 52);
  const auto dq0 = f64_vector(dq), dk0 = f64_vector(dk), dv0 = f64_vector(dv);
  attn_backward(dq, dk, dv, f.dout, f.q, f.k, f.v, f.out, f.lse, f.args);
  auto minus = [](std::vector<double> a, const std::vector<double>& b) {
    for (size_t i = 0; i < a.size(); ++i) a[i] -= b[i];
    return a;
  };
  EXPECT_LT(max_rel_diff(minus(f64_vector(dq), dq0), f64_vector(f.dq)), 1e-5);
  EXPECT_LT(max_rel_diff(minus(f64_vector(dk), dk0), f64_vector(f.dk)), 1e-5);
  EXPECT_LT(max_rel_diff(minus(f64_vector(dv), dv0), f64_vector(f.dv)), 1e-5);
}

// Rows that see no key contribute nothing, whatever their dout, and produce no NaN.
TEST(AttnBackward, EmptyRowsContributeNothing) {
  const int64_t H = 2, Hkv = 1, D = 4;
  const TokenMeta q_meta = make_meta({0, 0, 2, 0}, {3, 6, 9, 5});  // row 0 precedes every key, row 2 has no segment
  const TokenMeta k_meta = make_meta({0, 0, 0}, {4, 5, 6});
  const AttnArgs args{q_meta, k_meta, true, 0.5f};
  Tensor q = random_tensor({4, H, D}, 60), k = random_tensor({3, Hkv, D}, 61), v = random_tensor({3, Hkv, D}, 62);
  Tensor out = Tensor::empty({4, H, D}, DType::kF32), lse = Tensor::empty({4, H}, DType::kF32);
  attn_forward(out, lse, q, k, v, args);
  auto grads = [&](const Tensor& dout) {
    Tensor dq = Tensor::zeros({4, H, D}, DType::kF32);
    Tensor dk = Tensor::zeros({3, Hkv, D}, DType::kF32), dv = Tensor::zeros({3, Hkv, D}, DType::kF32);
    attn_backward(dq, dk, dv, dout, q, k, v, out, lse, args);
    return std::vector<std::vector<float>>{dq.to_f32_vector(), dk.to_f32_vector(), dv.to_f32_vector()};
  };
  Tensor dout = random_tensor({4, H, D}, 63);
  const auto g = grads(dout);
  float* pd = dout.data<float>();
  for (int64_t i : {0, 2})
    for (int64_t e = 0; e < H * D; ++e) pd[i * H * D + e] = 1e3f * (e + 1);
  const auto g2 = grads(dout);
  EXPECT_EQ(g[1], g2[1]);
  EXPECT_EQ(g[2], g2[2]);
  for (int64_t e = 0; e < 4 * H * D; ++e) {
    const int64_t row = e / (H * D);
    EXPECT_FALSE(std::isnan(g2[0][e]));
    if (row == 0 || row == 2) {
      EXPECT_EQ(g2[0][e], 0.f) << "dq of empty row " << row;
    }
  }
  double norm = 0;
  for (float x : g[1]) norm += std::abs(x);
  EXPECT_GT(norm, 0.0) << "the non-empty rows must give a key gradient";
}

// GradMode::kWrite stores exactly what kAccumulate adds to zeros, into buffers whose old contents
// (NaN here) are never read: every element is written, including the dq rows of queries that see
// no key and the dk/dv rows of keys that no query sees (they get 0).
TEST(AttnBackward, WriteModeEqualsAccumulateIntoZeros) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto filled = [](const Shape& shape, float x) {
    Tensor t = Tensor::empty(shape, DType::kF32);
    std::fill(t.data<float>(), t.data<float>() + t.numel(), x);
    return t;
  };
  struct Case {
    const char* name;
    TokenMeta q_meta, k_meta;
    bool causal;
  };
  const std::vector<Case> cases = {
      // queries 0 (before every key) and 2 (a segment no key has) see nothing; key 3 (segment 7)
      // and key 4 (after every query of its segment) are seen by no query
      {"empty rows and unseen keys", make_meta({0, 0, 2, 0}, {3, 6, 9, 5}), make_meta({0, 0, 0, 7, 0}, {4, 5, 6, 1, 8}),
       true},
      {"packed causal", token_meta_from_cu_seqlens({0, 5, 12}), token_meta_from_cu_seqlens({0, 5, 12}), true},
      {"non-causal", token_meta_from_cu_seqlens({0, 9}), token_meta_from_cu_seqlens({0, 9}), false},
  };
  const int64_t H = 4, Hkv = 2, D = 8;
  uint64_t seed = 900;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t Tq = c.q_meta.size(), Tk = c.k_meta.size();
    const AttnArgs args{c.q_meta, c.k_meta, c.causal, 0.4f};
    Tensor q = random_tensor({Tq, H, D}, ++seed, -2.f, 2.f), dout = random_tensor({Tq, H, D}, ++seed);
    Tensor k = random_tensor({Tk, Hkv, D}, ++seed, -2.f, 2.f), v = random_tensor({Tk, Hkv, D}, ++seed);
    Tensor out = Tensor::empty({Tq, H, D}, DType::kF32), lse = Tensor::empty({Tq, H}, DType::kF32);
    attn_forward(out, lse, q, k, v, args);

    Tensor dq_acc = Tensor::zeros({Tq, H, D}, DType::kF32);
    Tensor dk_acc = Tensor::zeros({Tk, Hkv, D}, DType::kF32), dv_acc = Tensor::zeros({Tk, Hkv, D}, DType::kF32);
    attn_backward(dq_acc, dk_acc, dv_acc, dout, q, k, v, out, lse, args, GradMode::kAccumulate);
    Tensor dq = filled({Tq, H, D}, nan), dk = filled({Tk, Hkv, D}, nan), dv = filled({Tk, Hkv, D}, nan);
    attn_backward(dq, dk, dv, dout, q, k, v, out, lse, args, GradMode::kWrite);
    EXPECT_EQ(dq.to_f32_vector(), dq_acc.to_f32_vector());  // also fails on any NaN left
    EXPECT_EQ(dk.to_f32_vector(), dk_acc.to_f32_vector());
    EXPECT_EQ(dv.to_f32_vector(), dv_acc.to_f32_vector());

    // Writing twice gives the same (nothing accumulates), and the gradient is not all zeros.
    attn_backward(dq, dk, dv, dout, q, k, v, out, lse, args, GradMode::kWrite);
    EXPECT_EQ(dq.to_f32_vector(), dq_acc.to_f32_vector());
    EXPECT_EQ(dk.to_f32_vector(), dk_acc.to_f32_vector());
    double norm = 0;
    for (float x : dk.to_f32_vector()) norm += std::abs(x);
    EXPECT_GT(norm, 0.0);
    if (&c == &cases[0]) {  // the empty rows' dq and the unseen keys' dk/dv are exact zeros
      const std::vector<float> gq = dq.to_f32_vector(), gk = dk.to_f32_vector(), gv = dv.to_f32_vector();
      for (int64_t row : {0, 2})
        for (int64_t e = 0; e < H * D; ++e) EXPECT_EQ(gq[row * H * D + e], 0.f) << "dq of empty row " << row;
      for (int64_t key : {3, 4})
        for (int64_t e = 0; e < Hkv * D; ++e) {
          EXPECT_EQ(gk[key * Hkv * D + e], 0.f) << "dk of unseen key " << key;
          EXPECT_EQ(gv[key * Hkv * D + e], 0.f) << "dv of unseen key " << key;
        }
    }
  }
}

// Keys split into blocks (an arbitrary, non-contiguous partition of the key set, each block with
// its own k_meta): partial forwards merged by attn_merge equal the full forward, and backwards
// of the blocks with the final out/lse, accumulated into one dq, equal the full backward.
void check_split_keys(const Full& f, const std::vector<int64_t>& block_sizes, uint64_t seed) {
  const std::vector<int64_t> perm = random_permutation(f.T, seed);
  std::vector<std::vector<int64_t>> blocks;
  int64_t at = 0;
  for (int64_t n : block_sizes) {
    blocks.emplace_back(perm.begin() + at, perm.begin() + at + n);
    at += n;
  }
  ASSERT_EQ(at, f.T);

  Tensor out = Tensor::zeros({f.T, f.H, f.D}, DType::kF32);
  Tensor lse = Tensor::empty({f.T, f.H}, DType::kF32);
  for (int64_t i = 0; i < lse.numel(); ++i) lse.data<float>()[i] = -std::numeric_limits<float>::infinity();
  for (const auto& idx : blocks) {
    const AttnArgs args{f.args.q_meta, gather_meta(f.args.k_meta, idx), f.args.causal, f.args.scale};
    Tensor out_b = Tensor::empty({f.T, f.H, f.D}, DType::kF32), lse_b = Tensor::empty({f.T, f.H}, DType::kF32);
    attn_forward(out_b, lse_b, f.q, gather_rows(f.k, idx), gather_rows(f.v, idx), args);
    attn_merge(out, lse, out_b, lse_b);
  }
  EXPECT_LT(max_rel_diff(f64_vector(out), f64_vector(f.out)), 1e-6);
  EXPECT_LT(max_rel_diff(f64_vector(lse), f64_vector(f.lse)), 1e-6);

  // Backward per block with the merged (final) out and lse; dk/dv of a block scatter back to
  // the blocks' key positions.
  Tensor dq = Tensor::zeros({f.T, f.H, f.D}, DType::kF32);
  std::vector<double> dk(static_cast<size_t>(f.k.numel()), 0.0), dv(dk.size(), 0.0);
  const int64_t kv_row = f.Hkv * f.D;
  for (const auto& idx : blocks) {
    const AttnArgs args{f.args.q_meta, gather_meta(f.args.k_meta, idx), f.args.causal, f.args.scale};
    Tensor dk_b = Tensor::zeros({static_cast<int64_t>(idx.size()), f.Hkv, f.D}, DType::kF32);
    Tensor dv_b = Tensor::zeros(dk_b.shape(), DType::kF32);
    attn_backward(dq, dk_b, dv_b, f.dout, f.q, gather_rows(f.k, idx), gather_rows(f.v, idx), out, lse, args);
    for (size_t r = 0; r < idx.size(); ++r)
      for (int64_t e = 0; e < kv_row; ++e) {
        dk[idx[r] * kv_row + e] += dk_b.data<float>()[r * kv_row + e];
        dv[idx[r] * kv_row + e] += dv_b.data<float>()[r * kv_row + e];
      }
  }
  EXPECT_LT(max_rel_diff(f64_vector(dq), f64_vector(f.dq)), 1e-5);
  EXPECT_LT(max_rel_diff(dk, f64_vector(f.dk)), 1e-5);
  EXPECT_LT(max_rel_diff(dv, f64_vector(f.dv)), 1e-5);
}

TEST(AttnSplitKeys, BlocksMergedEqualFullAttention) {
  uint64_t seed = 500;
  for (int64_t Hkv : {4, 2, 1}) {
    for (bool causal : {true, false}) {
      for (const auto& cu : std::vector<std::vector<int32_t>>{{0, 20}, {0, 8, 11, 20}}) {
        SCOPED_TRACE(fmt::format("Hkv={} causal={} docs={}", Hkv, causal, cu.size() - 1));
        const Full f = make_full(cu, 4, Hkv, causal, seed += 10);
        {
          SCOPED_TRACE("2 blocks");
          check_split_keys(f, {7, 13}, seed + 1);
        }
        {
          SCOPED_TRACE("3 blocks");
          check_split_keys(f, {5, 9, 6}, seed + 2);
        }
      }
    }
  }
}

// Permuting the tokens together with their metadata permutes every output and gradient: the
// mask follows the metadata, not the token order.
TEST(AttnShuffle, PermutedTokensPermuteOutputs) {
  for (bool causal : {true, false}) {
    SCOPED_TRACE(fmt::format("causal={}", causal));
    const Full f = make_full({0, 6, 7, 15}, 4, 2, causal, 700);
    const std::vector<int64_t> perm = random_permutation(f.T, 701);
    const TokenMeta meta = gather_meta(f.args.q_meta, perm);
    const AttnArgs args{meta, meta, causal, f.args.scale};
    Tensor q = gather_rows(f.q, perm), k = gather_rows(f.k, perm), v = gather_rows(f.v, perm);
    Tensor dout = gather_rows(f.dout, perm);
    Tensor out = Tensor::empty(q.shape(), DType::kF32), lse = Tensor::empty({f.T, f.H}, DType::kF32);
    attn_forward(out, lse, q, k, v, args);
    EXPECT_LT(max_rel_diff(f64_vector(out), f64_vector(gather_rows(f.out, perm))), 1e-6);
    EXPECT_LT(max_rel_diff(f64_vector(lse), f64_vector(gather_rows(f.lse, perm))), 1e-6);
    Tensor dq = Tensor::zeros(q.shape(), DType::kF32);
    Tensor dk = Tensor::zeros(k.shape(), DType::kF32), dv = Tensor::zeros(k.shape(), DType::kF32);
    attn_backward(dq, dk, dv, dout, q, k, v, out, lse, args);
    EXPECT_LT(max_rel_diff(f64_vector(dq), f64_vector(gather_rows(f.dq, perm))), 1e-5);
    EXPECT_LT(max_rel_diff(f64_vector(dk), f64_vector(gather_rows(f.dk, perm))), 1e-5);
    EXPECT_LT(max_rel_diff(f64_vector(dv), f64_vector(gather_rows(f.dv, perm))), 1e-5);
    // The same permuted tokens with the ORIGINAL (unpermuted) metadata give a different result,
    // so the check above is not vacuous.
    Tensor out_wrong = Tensor::empty(q.shape(), DType::kF32), lse_wrong = Tensor::empty({f.T, f.H}, DType::kF32);
    attn_forward(out_wrong, lse_wrong, q, k, v, f.args);
    EXPECT_GT(max_rel_diff(f64_vector(out_wrong), f64_vector(gather_rows(f.out, perm))), 1e-2);
  }
}

// ---- LocalAttention -----------------------------------------------------------------------------

TEST(LocalAttention, ForwardBackwardMatchEntriesAndSaveWithoutCopies) {
  const Full f = make_full({0, 5, 12}, 4, 2, true, 800);
  LocalAttention attn(f.args.q_meta, AttentionPolicy{}, /*causal=*/true);
  Tensor out = Tensor::empty(f.q.shape(), DType::kF32);
  Allocator& alloc = cpu_allocator();
  const size_t before = alloc.current_bytes();
  std::unique_ptr<AttentionContext> ctx = attn.forward(f.q, f.k, f.v, out, f.args.scale);
  // The context holds the inputs and out by reference to their storage; only lse is new.
  EXPECT_EQ(alloc.current_bytes() - before, static_cast<size_t>(f.T * f.H) * sizeof(float));
  EXPECT_EQ(out.to_f32_vector(), f.out.to_f32_vector());

  // Gradient buffers full of garbage: backward writes (=), it does not accumulate.
  Tensor dq = random_tensor(f.q.shape(), 801), dk = random_tensor(f.k.shape(), 802);
  Tensor dv = random_tensor(f.v.shape(), 803);
  attn.backward(*ctx, f.dout, dq, dk, dv);
  EXPECT_EQ(dq.to_f32_vector(), f.dq.to_f32_vector());
  EXPECT_EQ(dk.to_f32_vector(), f.dk.to_f32_vector());
  EXPECT_EQ(dv.to_f32_vector(), f.dv.to_f32_vector());

  struct OtherContext : AttentionContext {};
  OtherContext other;
  EXPECT_THROW(attn.backward(other, f.dout, dq, dk, dv), Error);

  // Metadata of the wrong length is caught at forward.
  LocalAttention wrong(token_meta_from_cu_seqlens({0, 3}));
  EXPECT_THROW(wrong.forward(f.q, f.k, f.v, out, f.args.scale), Error);
}

}  // namespace
}  // namespace seqpar
