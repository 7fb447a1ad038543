// gelu_forward / gelu_backward (kernels/cpu/gelu.h): both forms against torch's own
// gelu(approximate='none' | 'tanh') and its autograd (tests/fixtures/ops/torch_layernorm_gelu.json,
// written by gen_torch_ops.py beside it) in double and f32, saturated inputs stay finite, and the
// Tensor entries (in place allowed, partial overlap refused).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/gelu.h"
#include "kernels/ops.h"
#include "test_util.h"

namespace seqpar {
namespace {

nlohmann::json torch_fixture() {
  std::ifstream f(testing::source_path("tests/fixtures/ops/torch_layernorm_gelu.json"));
  EXPECT_TRUE(f.good()) << "tests/fixtures/ops/torch_layernorm_gelu.json (run tests/fixtures/ops/gen_torch_ops.py)";
  return nlohmann::json::parse(f);
}

TEST(Gelu, BothFormsMatchTorchGeluAndItsAutograd) {
  const nlohmann::json fx = torch_fixture();
  int forms = 0;
  for (const nlohmann::json& c : fx["gelu"]) {
    const std::string approximate = c["approximate"];
    SCOPED_TRACE("approximate=" + approximate);
    const bool tanh_approx = approximate == "tanh";
    forms += tanh_approx ? 2 : 1;
    const std::vector<double> x = c["x"], dy = c["dy"], y_ref = c["y"], dx_ref = c["dx"];
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<double> y(n), dx(n);
    cpu::gelu_forward(y.data(), x.data(), n, tanh_approx);
    cpu::gelu_backward(dx.data(), dy.data(), x.data(), n, tanh_approx);
    const std::vector<float> xf(x.begin(), x.end()), dyf(dy.begin(), dy.end());
    std::vector<float> yf(n), dxf(n);
    cpu::gelu_forward(yf.data(), xf.data(), n, tanh_approx);
    cpu::gelu_backward(dxf.data(), dyf.data(), xf.data(), n, tanh_approx);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(y[i], y_ref[i], 1e-14 * (1 + std::fabs(y_ref[i]))) << "x=" << x[i];
      EXPECT_NEAR(dx[i], dx_ref[i], 1e-14 * (1 + std::fabs(dx_ref[i]))) << "x=" << x[i];
      // f32 inputs are x rounded; the derivative's slope bounds what that rounding moves
      EXPECT_NEAR(yf[i], y_ref[i], 1e-6 * (1 + std::fabs(y_ref[i]))) << "f32 x=" << x[i];
      EXPECT_NEAR(dxf[i], dx_ref[i], 2e-6 * (1 + std::fabs(dx_ref[i]))) << "f32 x=" << x[i];
    }
  }
  EXPECT_EQ(forms, 3) << "the fixture holds the erf form and the tanh form";
}

TEST(Gelu, TheFormsDifferWhereTheyShould) {
  // The tanh approximation is not the erf form: at x = 1 they differ by ~1.6e-4 (torch's values).
  const double x = 1.0;
  double y_erf, y_tanh;
  cpu::gelu_forward(&y_erf, &x, 1, false);
  cpu::gelu_forward(&y_tanh, &x, 1, true);
  EXPECT_NEAR(y_erf, 0.8413447460685429, 1e-15);
  EXPECT_NEAR(y_tanh, 0.8411919906082768, 1e-15);
}

TEST(Gelu, SaturatedInputsStayFinite) {
  const std::vector<float> x = {-3e38f, -1e30f, -1e20f, -200.f, -20.f, 20.f, 200.f, 1e20f, 1e30f, 3e38f};
  const std::vector<float> dy(x.size(), 0.7f);
  for (bool tanh_approx : {false, true}) {
    std::vector<float> y(x.size()), dx(x.size());
    cpu::gelu_forward(y.data(), x.data(), static_cast<int64_t>(x.size()), tanh_approx);
    cpu::gelu_backward(dx.data(), dy.data(), x.data(), static_cast<int64_t>(x.size()), tanh_approx);
    for (size_t i = 0; i < x.size(); ++i) {
      SCOPED_TRACE("x=" + std::to_string(x[i]) + (tanh_approx ? " tanh" : " erf"));
      ASSERT_TRUE(std::isfinite(y[i]) && std::isfinite(dx[i])) << y[i] << " " << dx[i];
      if (x[i] < 0) {
        EXPECT_EQ(y[i], 0.f);
        EXPECT_EQ(dx[i], 0.f);
      } else {
        EXPECT_FLOAT_EQ(y[i], x[i]);
        EXPECT_FLOAT_EQ(dx[i], 0.7f);
      }
    }
  }
}

TEST(Gelu, EntriesRunInPlaceAndRejectPartialOverlap) {
  const Tensor x = testing::random_tensor({5, 8}, 1, -3.f, 3.f);
  Tensor y = Tensor::empty({5, 8}, DType::kF32);
  gelu_forward(y, x, GeluKind::kTanh);
  Tensor z = x.clone();
  gelu_forward(z, z, GeluKind::kTanh);  // in place
  EXPECT_EQ(z.to_f32_vector(), y.to_f32_vector());
  std::vector<float> ref(40);
  cpu::gelu_forward(ref.data(), x.data<float>(), 40, true);
  EXPECT_EQ(y.to_f32_vector(), ref);

  Tensor dy = testing::random_tensor({5, 8}, 2), dx = Tensor::empty({5, 8}, DType::kF32);
  gelu_backward(dx, dy, x, GeluKind::kErf);
  Tensor g = dy.clone();
  gelu_backward(g, g, x, GeluKind::kErf);  // in place
  EXPECT_EQ(g.to_f32_vector(), dx.to_f32_vector());

  Tensor big = testing::random_tensor({6, 8}, 3);
  Tensor a = big.rows(0, 5), b = big.rows(1, 6);
  try {
    gelu_forward(a, b, GeluKind::kErf);
    ADD_FAILURE() << "no error for a partly overlapping out";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("partly overlaps inp"), std::string::npos) << e.what();
  }
  Tensor wrong = Tensor::empty({5, 9}, DType::kF32);
  EXPECT_THROW(gelu_forward(wrong, x, GeluKind::kErf), Error);
  EXPECT_THROW(gelu_backward(dx, testing::random_tensor({5, 9}, 4), x, GeluKind::kErf), Error);
}

}  // namespace
}  // namespace seqpar
