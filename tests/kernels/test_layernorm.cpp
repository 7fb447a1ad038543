// layernorm_forward / layernorm_backward (kernels/cpu/layernorm.h): against torch's own
// layer_norm and its autograd (tests/fixtures/ops/torch_layernorm_gelu.json, written by
// gen_torch_ops.py beside it) in double and f32, the in-place backward, a row with a large mean,
// and the Tensor entries' checks.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/ops.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::expect_error;

nlohmann::json torch_fixture() {
  std::ifstream f(testing::source_path("tests/fixtures/ops/torch_layernorm_gelu.json"));
  EXPECT_TRUE(f.good()) << "tests/fixtures/ops/torch_layernorm_gelu.json (run tests/fixtures/ops/gen_torch_ops.py)";
  return nlohmann::json::parse(f);
}

std::vector<double> vec(const nlohmann::json& j) { return j.get<std::vector<double>>(); }

// max |got - want| / max(1, max |want|)
double max_err(const std::vector<double>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0, scale = 1;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    err = std::fmax(err, std::fabs(got[i] - want[i]));
    scale = std::fmax(scale, std::fabs(want[i]));
  }
  return err / scale;
}

struct LnResult {
  std::vector<double> y, mean, rstd, dx, dw, db;
};

template <typename Real>
LnResult run_layernorm(const nlohmann::json& c) {
  const int64_t T = c["T"], C = c["C"];
  const Real eps = c["eps"].get<double>();
  auto as = [](const nlohmann::json& j) {
    const std::vector<double> d = vec(j);
    return std::vector<Real>(d.begin(), d.end());
  };
  const std::vector<Real> x = as(c["x"]), w = as(c["weight"]), b = as(c["bias"]), dy = as(c["dy"]);
  std::vector<Real> y(T * C), mean(T), rstd(T), dx(T * C, NAN), dw(C, 0), db(C, 0);
  cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), T, C, eps);
  cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), T,
                          C);
  auto d = [](const std::vector<Real>& v) { return std::vector<double>(v.begin(), v.end()); };
  return {d(y), d(mean), d(rstd), d(dx), d(dw), d(db)};
}

TEST(LayerNorm, MatchesTorchLayerNormAndItsAutograd) {
  const nlohmann::json fx = torch_fixture();
  ASSERT_GE(fx["layernorm"].size(), 2u);
  for (const nlohmann::json& c : fx["layernorm"]) {
    SCOPED_TRACE("T=" + std::to_string(c["T"].get<int>()) + " C=" + std::to_string(c["C"].get<int>()));
    // double: the formulas, to rounding
    const LnResult r = run_layernorm<double>(c);
    EXPECT_LT(max_err(r.y, vec(c["y"])), 1e-13) << "y";
    EXPECT_LT(max_err(r.mean, vec(c["mean"])), 1e-13) << "mean";
    EXPECT_LT(max_err(r.rstd, vec(c["rstd"])), 1e-13) << "rstd";
    EXPECT_LT(max_err(r.dx, vec(c["dx"])), 1e-12) << "dx";
    EXPECT_LT(max_err(r.dw, vec(c["dweight"])), 1e-12) << "dweight";
    EXPECT_LT(max_err(r.db, vec(c["dbias"])), 1e-12) << "dbias";
    // f32, the CPU backend's type: within a few ulps of the values' scale
    const LnResult f = run_layernorm<float>(c);
    EXPECT_LT(max_err(f.y, vec(c["y"])), 2e-6) << "y f32";
    EXPECT_LT(max_err(f.rstd, vec(c["rstd"])), 2e-6) << "rstd f32";
    EXPECT_LT(max_err(f.dx, vec(c["dx"])), 5e-6) << "dx f32";
    EXPECT_LT(max_err(f.dw, vec(c["dweight"])), 5e-6) << "dweight f32";
    EXPECT_LT(max_err(f.db, vec(c["dbias"])), 5e-6) << "dbias f32";
  }
}

// A row whose mean is 1e4 times its spread: E[x^2] - mean^2 would lose every digit in f32.
TEST(LayerNorm, LargeMeanKeepsTheVariance) {
  const int64_t C = 64;
  std::vector<float> x(C), w(C, 1.f), b(C, 0.f), y(C), mean(1), rstd(1);
  for (int64_t c = 0; c < C; ++c) x[c] = 1000.f + ((c % 2) ? 0.1f : -0.1f);
  cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), 1, C, 1e-5f);
  double var = 0;
  for (float v : x) var += (double(v) - mean[0]) * (double(v) - mean[0]);
  var /= C;
  EXPECT_NEAR(rstd[0], 1.0 / std::sqrt(var + 1e-5), 1e-3 / std::sqrt(var));
  for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(std::fabs(y[c]), 1.0, 2e-3) << c;
}

TEST(LayerNorm, BackwardInPlaceOnDoutGivesTheSameResult) {
  const int64_t T = 6, C = 11;
  const std::vector<double> x = testing::random_doubles(T * C, 1, 0.0, 3.0);
  const std::vector<double> w = testing::random_doubles(C, 2, 0.5, 1.5), b = testing::random_doubles(C, 3);
  const std::vector<double> dout = testing::random_doubles(T * C, 4);
  std::vector<double> y(T * C), mean(T), rstd(T);
  cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), T, C, 1e-5);
  std::vector<double> dx(T * C), dw(C, 0.0), db(C, 0.0);
  cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), T,
                          C);
  std::vector<double> buf = dout, dw2(C, 0.0), db2(C, 0.0);
  cpu::layernorm_backward(buf.data(), dw2.data(), db2.data(), buf.data(), x.data(), w.data(), mean.data(), rstd.data(),
                          T, C);
  EXPECT_EQ(buf, dx);
  EXPECT_EQ(dw2, dw);
  EXPECT_EQ(db2, db);
}

TEST(LayerNorm, EntriesRejectWrongShapesDtypesAndAliasing) {
  const int64_t T = 7, C = 12;
  Tensor x = testing::random_tensor({T, C}, 5), w = testing::random_tensor({C}, 6), b = testing::random_tensor({C}, 7);
  Tensor y = Tensor::empty({T, C}, DType::kF32), mean = Tensor::empty({T}, DType::kF32),
         rstd = Tensor::empty({T}, DType::kF32);
  // the entry reaches the kernel with the right sizes
  layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
  std::vector<float> ref(T * C), rm(T), rr(T);
  cpu::layernorm_forward(ref.data(), rm.data(), rr.data(), x.data<float>(), w.data<float>(), b.data<float>(), T, C,
                         1e-5f);
  EXPECT_EQ(y.to_f32_vector(), ref);
  EXPECT_EQ(rstd.to_f32_vector(), rr);

  expect_error([&] { layernorm_forward(y, mean, rstd, x, w, testing::random_tensor({13}, 8), 1e-5f); },
               {"layernorm_forward", "bias", "[13]", "[C] = [12]"});
  Tensor short_mean = Tensor::empty({6}, DType::kF32);
  expect_error([&] { layernorm_forward(y, short_mean, rstd, x, w, b, 1e-5f); },
               {"layernorm_forward", "mean", "[6]", "[T] = [7]"});
  expect_error(
      [&] {
        layernorm_forward(y, mean, rstd, testing::random_tensor({7, 3, 4}, 9), w, b, 1e-5f);
      },
      {"layernorm_forward", "inp", "[7, 3, 4]", "2-D [T, C]"});
  expect_error([&] { layernorm_forward(y, mean, rstd, x, w, b, -1.f); }, {"layernorm_forward", "eps=-1"});
  expect_error([&] { layernorm_forward(x, mean, rstd, x, w, b, 1e-5f); },
               {"layernorm_forward", "out", "shares memory with inp"});
  Tensor bf = w.to_dtype(DType::kBF16);
  expect_error([&] { layernorm_forward(y, mean, rstd, x, bf, b, 1e-5f); },
               {"layernorm_forward", "weight", "bf16", "CPU backend computes in f32"});

  Tensor dx = Tensor::empty({T, C}, DType::kF32), dy = testing::random_tensor({T, C}, 10);
  Tensor dw = Tensor::zeros({C}, DType::kF32), db = Tensor::zeros({C}, DType::kF32);
  Tensor dw_bf = Tensor::zeros({C}, DType::kBF16);
  expect_error([&] { layernorm_backward(dx, dw_bf, db, dy, x, w, mean, rstd); },
               {"layernorm_backward", "dweight", "bf16", "expected f32"});
  Tensor db_short = Tensor::zeros({C - 1}, DType::kF32);
  expect_error([&] { layernorm_backward(dx, dw, db_short, dy, x, w, mean, rstd); },
               {"layernorm_backward", "dbias", "[11]", "[C] = [12]"});
  expect_error([&] { layernorm_backward(x, dw, db, dy, x, w, mean, rstd); },
               {"layernorm_backward", "dinp", "shares memory with inp"});
  Tensor big = testing::random_tensor({2 * T, C}, 11);
  Tensor rows_a = big.rows(0, T), rows_b = big.rows(1, T + 1);
  expect_error([&] { layernorm_backward(rows_a, dw, db, rows_b, x, w, mean, rstd); },
               {"layernorm_backward", "dinp", "partly overlaps dout"});
  expect_error([&] { layernorm_backward(dx, dw, dw, dy, x, w, mean, rstd); },
               {"layernorm_backward", "dweight and dbias share memory"});
  // in place on dout is allowed
  layernorm_backward(dy, dw, db, dy, x, w, mean, rstd);
  for (float v : dy.to_f32_vector()) EXPECT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace seqpar
