// attn_forward against the op harness's f64 reference attention (tests/ops/op_harness.h; MHA, GQA,
// causal, varlen), document isolation, empty rows, attn_merge, the token metadata helpers and the
// entry checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "attention/attention.h"
#include "attention_test_util.h"
#include "ops/op_harness.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::f64_vector;
using testing::make_meta;
using testing::max_rel_diff;
using testing::random_tensor;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct FwdCase {
  int64_t H, Hkv;
  bool causal;
  std::vector<int32_t> cu_seqlens;  // {0, T}: one sequence; more entries: varlen documents
};

std::string case_name(const FwdCase& c) {
  return fmt::format("H={} Hkv={} causal={} docs={}", c.H, c.Hkv, c.causal, c.cu_seqlens.size() - 1);
}

TEST(AttnForward, MatchesReferenceAttentionMhaGqaCausalVarlen) {
  const int64_t D = 8;
  const std::vector<std::vector<int32_t>> layouts = {{0, 17}, {0, 7, 9, 17}};  // 3 uneven documents
  uint64_t seed = 100;
  for (int64_t Hkv : {4, 2, 1}) {
    for (bool causal : {true, false}) {
      for (const auto& cu : layouts) {
        const FwdCase c{4, Hkv, causal, cu};
        SCOPED_TRACE(case_name(c));
        const TokenMeta meta = token_meta_from_cu_seqlens(cu);
        const int64_t T = meta.size();
        // Inputs in [-2, 2) so the softmax is far from uniform and a wrong weight shows.
        Tensor q = random_tensor({T, c.H, D}, ++seed, -2.f, 2.f);
        Tensor k = random_tensor({T, c.Hkv, D}, ++seed, -2.f, 2.f);
        Tensor v = random_tensor({T, c.Hkv, D}, ++seed);
        Tensor out = Tensor::empty({T, c.H, D}, DType::kF32);
        Tensor lse = Tensor::empty({T, c.H}, DType::kF32);
        const float scale = 1.f / std::sqrt(static_cast<float>(D));
        attn_forward(out, lse, q, k, v, AttnArgs{meta, meta, causal, scale});

        auto ref =
            optest::attn_reference(f64_vector(q), f64_vector(k), f64_vector(v), meta, meta, c.H, c.Hkv, D, causal, scale);
        EXPECT_LT(max_rel_diff(f64_vector(out), ref.out), 1e-6);
        EXPECT_LT(max_rel_diff(f64_vector(lse), ref.lse), 1e-6);
        // Every row sees at least itself here, so every lse is finite.
        for (float x : lse.to_f32_vector()) EXPECT_TRUE(std::isfinite(x));
      }
    }
  }
}

// Perturbing the keys and values of one document changes that document's outputs and no other.
TEST(AttnForward, NoAttentionAcrossDocuments) {
  const int64_t H = 4, Hkv = 2, D = 8;
  const std::vector<int32_t> cu = {0, 5, 13, 16};
  const TokenMeta meta = token_meta_from_cu_seqlens(cu);
  const int64_t T = meta.size();
  Tensor q = random_tensor({T, H, D}, 1);
  Tensor k = random_tensor({T, Hkv, D}, 2);
  Tensor v = random_tensor({T, Hkv, D}, 3);
  for (bool causal : {true, false}) {
    const AttnArgs args{meta, meta, causal, 0.35f};
    Tensor out0 = Tensor::empty({T, H, D}, DType::kF32), lse0 = Tensor::empty({T, H}, DType::kF32);
    attn_forward(out0, lse0, q, k, v, args);
    for (size_t doc = 0; doc + 1 < cu.size(); ++doc) {
      SCOPED_TRACE(fmt::format("causal={} perturbed doc {}", causal, doc));
      Tensor k2 = k.clone(), v2 = v.clone();
      float* pk = k2.data<float>();
      float* pv = v2.data<float>();
      for (int64_t i = cu[doc] * Hkv * D; i < cu[doc + 1] * Hkv * D; ++i) {
        pk[i] += 0.7f;
        pv[i] -= 0.9f;
      }
      Tensor out = Tensor::empty({T, H, D}, DType::kF32), lse = Tensor::empty({T, H}, DType::kF32);
      attn_forward(out, lse, q, k2, v2, args);
      for (size_t other = 0; other + 1 < cu.size(); ++other) {
        const int64_t b = cu[other], e = cu[other + 1];
        const bool same_out = out.rows(b, e).to_f32_vector() == out0.rows(b, e).to_f32_vector();
        const bool same_lse = lse.rows(b, e).to_f32_vector() == lse0.rows(b, e).to_f32_vector();
        if (other == doc) {
          EXPECT_FALSE(same_out) << "doc " << other << " must see its own perturbed keys";
          EXPECT_FALSE(same_lse);
        } else {
          EXPECT_TRUE(same_out) << "doc " << other << " changed when doc " << doc << " was perturbed";
          EXPECT_TRUE(same_lse);
        }
      }
    }
  }
}

// A query whose segment has no key, and queries that precede every key causally: out 0,
// lse -inf, no NaN; other rows as the reference.
TEST(AttnForward, RowWithoutVisibleKeyIsZeroWithMinusInfLse) {
  const int64_t H = 2, Hkv = 1, D = 4;
  const TokenMeta q_meta = make_meta({0, 0, 1, 2, 1}, {3, 6, 8, 9, 1});
  const TokenMeta k_meta = make_meta({0, 0, 1, 1}, {4, 5, 2, 7});
  // row 0: seg 0 pos 3 precedes keys at 4, 5 (causal) -> empty; row 3: seg 2 has no key -> empty;
  // row 4: seg 1 pos 1 precedes keys at 2, 7 -> empty.
  Tensor q = random_tensor({5, H, D}, 7);
  Tensor k = random_tensor({4, Hkv, D}, 8);
  Tensor v = random_tensor({4, Hkv, D}, 9);
  Tensor out = random_tensor({5, H, D}, 10);  // garbage that must be overwritten
  Tensor lse = random_tensor({5, H}, 11);
  attn_forward(out, lse, q, k, v, AttnArgs{q_meta, k_meta, true, 0.5f});
  const std::vector<float> o = out.to_f32_vector(), l = lse.to_f32_vector();
  for (int64_t i = 0; i < 5; ++i) {
    const bool empty = i == 0 || i == 3 || i == 4;
    for (int64_t h = 0; h < H; ++h) {
      EXPECT_FALSE(std::isnan(l[i * H + h]));
      if (empty) {
        EXPECT_EQ(l[i * H + h], kNegInf) << "row " << i;
      } else {
        EXPECT_TRUE(std::isfinite(l[i * H + h])) << "row " << i;
      }
      for (int64_t d = 0; d < D; ++d) {
        EXPECT_FALSE(std::isnan(o[(i * H + h) * D + d]));
        if (empty) {
          EXPECT_EQ(o[(i * H + h) * D + d], 0.f) << "row " << i;
        }
      }
    }
  }
  auto ref = optest::attn_reference(f64_vector(q), f64_vector(k), f64_vector(v), q_meta, k_meta, H, Hkv, D, true, 0.5);
  EXPECT_LT(max_rel_diff(f64_vector(out), ref.out), 1e-6);
  EXPECT_LT(max_rel_diff(f64_vector(lse), ref.lse), 1e-6);

  // No keys at all.
  const TokenMeta none = make_meta({}, {});
  Tensor k0 = Tensor::empty({0, Hkv, D}, DType::kF32);
  attn_forward(out, lse, q, k0, k0, AttnArgs{q_meta, none, false, 0.5f});
  for (float x : out.to_f32_vector()) EXPECT_EQ(x, 0.f);
  for (float x : lse.to_f32_vector()) EXPECT_EQ(x, kNegInf);
}

// ---- attn_merge ---------------------------------------------------------------------------------

TEST(AttnMerge, MatchesLogSumExpFormula) {
  const int64_t T = 3, H = 2, D = 5;
  Tensor out_a = random_tensor({T, H, D}, 21), out_b = random_tensor({T, H, D}, 22);
  // Offsets of ~1000 would overflow a naive exp(lse); the merge must not.
  Tensor lse_a = Tensor::from_vector<float>({T, H}, {0.3f, -1.2f, 2.f, 1000.f, -999.f, 5.f});
  Tensor lse_b = Tensor::from_vector<float>({T, H}, {1.1f, -1.0f, -3.f, 999.f, -1000.f, 5.f});
  Tensor acc = out_a.clone(), lacc = lse_a.clone();
  attn_merge(acc, lacc, out_b, lse_b);
  const auto oa = f64_vector(out_a), ob = f64_vector(out_b), la = f64_vector(lse_a), lb = f64_vector(lse_b);
  const auto o = f64_vector(acc), l = f64_vector(lacc);
  for (int64_t r = 0; r < T * H; ++r) {
    const double m = std::max(la[r], lb[r]);
    const double expect_lse = m + std::log(std::exp(la[r] - m) + std::exp(lb[r] - m));
    EXPECT_NEAR(l[r], expect_lse, 1e-6 * std::max(1.0, std::abs(expect_lse)));
    for (int64_t d = 0; d < D; ++d) {
      const double e = oa[r * D + d] * std::exp(la[r] - expect_lse) + ob[r * D + d] * std::exp(lb[r] - expect_lse);
      EXPECT_NEAR(o[r * D + d], e, 1e-6);
    }
  }
}

TEST(AttnMerge, MinusInfOnEitherSide) {
  const int64_t T = 4, H = 1, D = 3;
  // rows: 0 both finite, 1 part empty, 2 acc empty (its out is garbage), 3 both empty (garbage).
  Tensor acc = Tensor::from_vector<float>({T, H, D}, {1, 2, 3, 4, 5, 6, 7, 7, 7, 9, 9, 9});
  Tensor lacc = Tensor::from_vector<float>({T, H}, {0.f, 0.5f, kNegInf, kNegInf});
  Tensor part = Tensor::from_vector<float>({T, H, D}, {3, 2, 1, 8, 8, 8, -1, -2, -3, 6, 6, 6});
  Tensor lpart = Tensor::from_vector<float>({T, H}, {0.f, kNegInf, 1.5f, kNegInf});
  attn_merge(acc, lacc, part, lpart);
  const std::vector<float> o = acc.to_f32_vector(), l = lacc.to_f32_vector();
  EXPECT_NEAR(l[0], std::log(2.0), 1e-6);
  for (int d = 0; d < 3; ++d) EXPECT_NEAR(o[d], 2.0, 1e-6);  // equal weights: mean of (1,2,3) and (3,2,1)
  EXPECT_EQ(l[1], 0.5f);
  EXPECT_EQ(o[3], 4.f);
  EXPECT_EQ(o[4], 5.f);
  EXPECT_EQ(o[5], 6.f);
  EXPECT_EQ(l[2], 1.5f);
  EXPECT_EQ(o[6], -1.f);
  EXPECT_EQ(o[7], -2.f);
  EXPECT_EQ(o[8], -3.f);
  EXPECT_EQ(l[3], kNegInf);
  for (int d = 9; d < 12; ++d) EXPECT_EQ(o[d], 0.f);
}

// ---- token metadata -----------------------------------------------------------------------------

TEST(TokenMeta, FromCuSeqlens) {
  const TokenMeta m = token_meta_from_cu_seqlens({0, 2, 2, 5});  // document 1 is empty
  EXPECT_EQ(m.size(), 5);
  EXPECT_EQ(testing::i32_vector(m.seg), (std::vector<int32_t>{0, 0, 2, 2, 2}));
  EXPECT_EQ(testing::i32_vector(m.pos), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(token_meta_from_cu_seqlens({0}).size(), 0);
  const TokenMeta r = m.rows(1, 4);
  EXPECT_EQ(testing::i32_vector(r.seg), (std::vector<int32_t>{0, 2, 2}));
}

TEST(TokenMeta, FromCuSeqlensRejectsBadOffsets) {
  auto message = [](const std::vector<int32_t>& cu) -> std::string {
    try {
      token_meta_from_cu_seqlens(cu);
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message({3, 5}).find("cu_seqlens[0]=3 must be 0"), std::string::npos) << message({3, 5});
  EXPECT_NE(message({0, 5, 4}).find("cu_seqlens[2]=4 < cu_seqlens[1]=5"), std::string::npos) << message({0, 5, 4});
  EXPECT_NE(message({0, 5, 4}).find("non-decreasing"), std::string::npos);
  EXPECT_NE(message({}).find("cu_seqlens is empty"), std::string::npos);
}

TEST(TokenMeta, Concat) {
  const TokenMeta a = make_meta({0, 0}, {0, 1}), b = make_meta({}, {}), c = make_meta({3, 1, 1}, {7, 2, 9});
  const TokenMeta m = concat_token_meta({a, b, c});
  EXPECT_EQ(testing::i32_vector(m.seg), (std::vector<int32_t>{0, 0, 3, 1, 1}));
  EXPECT_EQ(testing::i32_vector(m.pos), (std::vector<int32_t>{0, 1, 7, 2, 9}));
  EXPECT_EQ(concat_token_meta({}).size(), 0);
  // The result owns its storage: changing a part afterwards does not change it.
  a.seg.data<int32_t>()[0] = 42;
  EXPECT_EQ(m.seg.data<int32_t>()[0], 0);
}

// ---- entry checks -------------------------------------------------------------------------------

std::string forward_error(const Tensor& q, const Tensor& k, const Tensor& v, const AttnArgs& args, Tensor out = {},
                          Tensor lse = {}) {
  if (!out.defined()) out = Tensor::empty(q.shape(), DType::kF32);
  if (!lse.defined()) lse = Tensor::empty({q.dim(0), q.dim(1)}, DType::kF32);
  try {
    attn_forward(out, lse, q, k, v, args);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(AttnForward, ChecksShapesWithClearMessages) {
  const TokenMeta m6 = token_meta_from_cu_seqlens({0, 6});
  const TokenMeta m5 = token_meta_from_cu_seqlens({0, 5});
  Tensor q = random_tensor({6, 4, 8}, 1), k = random_tensor({6, 2, 8}, 2), v = random_tensor({6, 2, 8}, 3);
  const AttnArgs ok{m6, m6, true, 0.3f};
  EXPECT_EQ(forward_error(q, k, v, ok), "no error");

  Tensor k3 = random_tensor({6, 3, 8}, 4);
  std::string e = forward_error(q, k3, k3, ok);
  EXPECT_NE(e.find("H=4 must be a multiple of KV heads Hkv=3"), std::string::npos) << e;

  Tensor k_d = random_tensor({6, 2, 4}, 5);
  e = forward_error(q, k_d, k_d, ok);
  EXPECT_NE(e.find("D=8"), std::string::npos) << e;
  EXPECT_NE(e.find("D=4"), std::string::npos) << e;

  e = forward_error(q, k, v, AttnArgs{m5, m6, true, 0.3f});
  EXPECT_NE(e.find("Tq=6 tokens but q_meta has 5"), std::string::npos) << e;
  e = forward_error(q, k, v, AttnArgs{m6, m5, true, 0.3f});
  EXPECT_NE(e.find("Tk=6 tokens but k_meta has 5"), std::string::npos) << e;

  e = forward_error(q, k, random_tensor({5, 2, 8}, 6), ok);
  EXPECT_NE(e.find("v (must match k)"), std::string::npos) << e;

  e = forward_error(q, k, v, AttnArgs{m6, m6, true, 0.f});
  EXPECT_NE(e.find("AttnArgs.scale=0"), std::string::npos) << e;

  e = forward_error(q.to_dtype(DType::kBF16), k.to_dtype(DType::kBF16), v.to_dtype(DType::kBF16), ok);
  EXPECT_NE(e.find("needs f32"), std::string::npos) << e;

  e = forward_error(q, k, v, ok, Tensor::empty({6, 4, 7}, DType::kF32));
  EXPECT_NE(e.find("out (must match q"), std::string::npos) << e;
  e = forward_error(q, k, v, ok, {}, Tensor::empty({6, 2}, DType::kF32));
  EXPECT_NE(e.find("lse [Tq, H] has shape [6, 2], expected [6, 4]"), std::string::npos) << e;

  Tensor dq = Tensor::empty({6, 4, 8}, DType::kF32), dk = Tensor::empty({6, 2, 8}, DType::kF32);
  Tensor dv_bad = Tensor::empty({6, 4, 8}, DType::kF32), lse = Tensor::empty({6, 4}, DType::kF32);
  try {
    attn_backward(dq, dk, dv_bad, q, q, k, v, q, lse, ok);
    ADD_FAILURE() << "attn_backward accepted dv of the wrong shape";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("dv (must match v"), std::string::npos) << err.what();
  }

  Tensor acc = Tensor::empty({6, 4, 8}, DType::kF32), lacc = Tensor::empty({6, 4}, DType::kF32);
  Tensor part = Tensor::empty({6, 4, 7}, DType::kF32);
  EXPECT_THROW(attn_merge(acc, lacc, part, lacc), Error);
}

}  // namespace
}  // namespace seqpar
