// The Tensor entries of kernels/ops.h: they reach the CPU kernels with the right sizes, and
// reject wrong shapes, dtypes and bad ids with messages that name the op, the tensor and the
// expected shape.
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <string>
#include <string_view>

#include "core/error.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/ops.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::expect_error;

using testing::random_tensor;

Tensor ids_tensor(std::vector<int32_t> ids) {
  const auto n = static_cast<int64_t>(ids.size());
  return Tensor::from_vector<int32_t>({n}, ids);
}

TEST(OpsEntries, LinearLayerThroughMatmulEntryMatchesTheNaiveLoop) {
  const int64_t T = 7, C = 12, O = 5;
  const Tensor x = random_tensor({T, C}, 1), W = random_tensor({O, C}, 2);
  Tensor y = Tensor::empty({T, O}, DType::kF32);
  matmul(y, x, W, false, true);  // y = x W^T
  std::vector<float> ref(T * O);
  cpu::matmul_reference(ref.data(), x.data<float>(), W.data<float>(), T, O, C, false, true, 1.f, 0.f);
  EXPECT_LT(testing::rel_error(y.to_f32_vector(), ref), 1e-6);
}

TEST(OpsEntries, RmsNormEntryMatchesTheKernel) {
  const int64_t T = 7, C = 12;
  const Tensor x = random_tensor({T, C}, 3), w = random_tensor({C}, 4, 0.5f, 1.5f);
  Tensor out = Tensor::empty({T, C}, DType::kF32), rstd = Tensor::empty({T}, DType::kF32);
  rmsnorm_forward(out, rstd, x, w, 1e-6f);
  std::vector<float> ref(T * C), ref_rstd(T);
  cpu::rmsnorm_forward(ref.data(), ref_rstd.data(), x.data<float>(), w.data<float>(), T, C, 1e-6f);
  EXPECT_EQ(out.to_f32_vector(), ref);
  EXPECT_EQ(rstd.to_f32_vector(), ref_rstd);
}

TEST(OpsEntries, AdamWEntryTakesF32AndBf16Gradients) {
  const Tensor p0 = random_tensor({3, 5}, 5), g = random_tensor({3, 5}, 6);
  const AdamWConfig cfg;
  const Tensor g16 = g.to_dtype(DType::kBF16);
  Tensor p = p0.clone(), m = Tensor::zeros({3, 5}, DType::kF32), v = Tensor::zeros({3, 5}, DType::kF32);
  adamw_step(p, m, v, g16, cfg, 1, 1.f);
  Tensor p2 = p0.clone(), m2 = Tensor::zeros({3, 5}, DType::kF32), v2 = Tensor::zeros({3, 5}, DType::kF32);
  adamw_step(p2, m2, v2, g16.to_dtype(DType::kF32), cfg, 1, 1.f);
  EXPECT_EQ(p.to_f32_vector(), p2.to_f32_vector());
  EXPECT_GT(testing::rel_error(p, p0), 1e-4);  // it moved
  expect_error([&] { adamw_step(p, m, v, g, cfg, 0, 1.f); }, {"step=0"});
}

TEST(OpsEntries, RejectWrongShapesNamingTheTensorAndBothShapes) {
  const Tensor x = random_tensor({7, 12}, 7);
  Tensor out = Tensor::empty({7, 12}, DType::kF32), rstd = Tensor::empty({7}, DType::kF32);
  expect_error([&] { rmsnorm_forward(out, rstd, x, random_tensor({13}, 8), 1e-6f); },
               {"rmsnorm_forward", "weight", "[13]", "[C] = [12]"});
  Tensor bad_rstd = Tensor::empty({6}, DType::kF32);
  expect_error([&] { rmsnorm_forward(out, bad_rstd, x, random_tensor({12}, 8), 1e-6f); },
               {"rmsnorm_forward", "rstd", "[6]", "[T] = [7]"});
  expect_error([&] { rmsnorm_forward(out, rstd, random_tensor({7, 3, 4}, 9), random_tensor({12}, 8), 1e-6f); },
               {"rmsnorm_forward", "inp", "[7, 3, 4]", "2-D [T, C]"});

  Tensor y = Tensor::empty({7, 5}, DType::kF32);
  expect_error([&] { matmul(y, x, random_tensor({5, 11}, 10), false, true); },
               {"matmul", "inner dims differ", "[7, 12]", "[11, 5]"});
  Tensor y_bad = Tensor::empty({5, 7}, DType::kF32);
  expect_error([&] { matmul(y_bad, x, random_tensor({5, 12}, 10), false, true); },
               {"matmul", "out", "[5, 7]", "[M, N] = [7, 5]"});
  Tensor sq = random_tensor({12, 12}, 11);
  expect_error([&] { matmul(sq, sq, sq, false, false); }, {"matmul", "shares memory"});
  // Disjoint row ranges of one buffer are fine.
  Tensor big = random_tensor({24, 12}, 11);
  Tensor top = big.rows(0, 12);
  matmul(top, big.rows(12, 24), big.rows(12, 24), false, true);

  Tensor q = random_tensor({7, 3, 8}, 12);
  expect_error([&] { rope_forward(q, ids_tensor({0, 1, 2, 3, 4, 5}), random_tensor({4}, 13)); },
               {"rope_forward", "position_ids", "[6]", "[T] = [7]"});
  expect_error([&] { rope_forward(q, ids_tensor({0, 1, 2, 3, 4, 5, 6}), random_tensor({8}, 13)); },
               {"rope_forward", "inv_freq", "[8]", "[D/2] = [4]"});
  Tensor odd = random_tensor({7, 3, 7}, 14);
  expect_error([&] { rope_backward(odd, ids_tensor({0, 1, 2, 3, 4, 5, 6}), random_tensor({3}, 13)); },
               {"rope_backward", "D=7 must be even"});

  Tensor h = Tensor::empty({7, 20}, DType::kF32);
  expect_error([&] { swiglu_forward(h, random_tensor({7, 20}, 15), random_tensor({7, 21}, 16)); },
               {"swiglu_forward", "up", "[7, 21]", "[7, 20]"});
  Tensor sg = random_tensor({7, 20}, 15), su = random_tensor({7, 20}, 16), sd = random_tensor({7, 20}, 17);
  expect_error([&] { swiglu_backward(sg, su, sd, sg, su, &sg); }, {"swiglu_backward", "out", "shares memory", "dgate"});
  Tensor narrow = Tensor::empty({7, 19}, DType::kF32);
  expect_error([&] { swiglu_backward(sg, su, sd, sg, su, &narrow); }, {"swiglu_backward", "out", "[7, 19]", "[7, 20]"});

  Tensor losses = Tensor::empty({7}, DType::kF32);
  expect_error([&] { cross_entropy_forward(losses, random_tensor({7, 13}, 17), ids_tensor({1, 2, 3})); },
               {"cross_entropy_forward", "targets", "[3]", "[T] = [7]"});

  Tensor m = Tensor::zeros({3, 5}, DType::kF32), v = Tensor::zeros({3, 4}, DType::kF32);
  Tensor p = random_tensor({3, 5}, 18);
  expect_error([&] { adamw_step(p, m, v, random_tensor({3, 5}, 19), AdamWConfig{}, 1, 1.f); },
               {"adamw_step", "v", "[3, 4]", "[3, 5]"});
  Tensor a = random_tensor({4}, 20);
  expect_error([&] { add_inplace(a, random_tensor({5}, 21)); }, {"add_inplace", "x", "[5]", "[4]"});
}

TEST(OpsEntries, RejectWrongDtypesAndUndefinedTensors) {
  Tensor out = Tensor::empty({3, 4}, DType::kF32);
  const Tensor wte = random_tensor({10, 4}, 22);
  const Tensor ids64 = Tensor::from_vector<int64_t>({3}, {1, 2, 3});
  expect_error([&] { embedding_forward(out, ids64, wte); }, {"embedding_forward", "ids", "i64", "expected i32"});
  expect_error([&] { embedding_forward(out, ids_tensor({1, 2, 3}), wte.to_dtype(DType::kBF16)); },
               {"embedding_forward", "wte", "bf16", "CPU backend computes in f32"});
  expect_error([&] { embedding_forward(out, Tensor(), wte); }, {"embedding_forward", "ids", "undefined"});
  Tensor ints = Tensor::from_vector<int32_t>({2}, {1, 2});
  expect_error([&] { scale_inplace(ints, 2.f); }, {"scale_inplace", "i32"});
}

TEST(OpsEntries, BadTokenIdsAndTargetsNameTokenValueAndVocabulary) {
  Tensor out = Tensor::empty({4, 6}, DType::kF32);
  const Tensor wte = random_tensor({50, 6}, 24);
  try {
    embedding_forward(out, ids_tensor({3, 49, 7, 57}), wte);
    ADD_FAILURE() << "no throw";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("token 3 has id 57"), std::string::npos) << what;
    EXPECT_NE(what.find("V=50"), std::string::npos) << what;
  }
  Tensor dwte = Tensor::zeros({50, 6}, DType::kF32);
  EXPECT_THROW(embedding_backward(dwte, random_tensor({4, 6}, 25), ids_tensor({3, -2, 7, 8})), InputError);

  Tensor losses = Tensor::empty({4}, DType::kF32);
  const Tensor logits = random_tensor({4, 9}, 26);
  try {
    cross_entropy_forward(losses, logits, ids_tensor({kIgnoreIndex, 8, 9, 0}));
    ADD_FAILURE() << "no throw";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("token 2 has target 9"), std::string::npos) << what;
    EXPECT_NE(what.find("V=9"), std::string::npos) << what;
    EXPECT_NE(what.find("-100"), std::string::npos) << what;
  }
  Tensor dlogits = Tensor::empty({4, 9}, DType::kF32);
  EXPECT_THROW(cross_entropy_backward(dlogits, logits, ids_tensor({-7, 0, 1, 2}), 1.f), InputError);
  // The ignore index itself is fine and gives a zero loss.
  cross_entropy_forward(losses, logits, ids_tensor({kIgnoreIndex, 8, 0, kIgnoreIndex}));
  EXPECT_EQ(losses.to_f32_vector()[0], 0.f);
  EXPECT_GT(losses.to_f32_vector()[1], 0.f);
}

}  // namespace
}  // namespace seqpar
