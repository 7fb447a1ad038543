// CUDA ops (kernels/ops.h on CUDA tensors) against the CPU reference (kernels/cpu), on random
// inputs, forward and backward, in bf16 and f32 storage.
//
// Rule (flash-attention's): the error of the CUDA result against a double-precision CPU reference
// on the original f32 inputs must be at most twice the error of the same computation done on the
// CPU in f32 from inputs rounded to the CUDA storage dtype (its output rounded the same way), plus
// a floor of 1e-5 relative: on f32 paths both errors are at rounding level and differ only by the
// order of summation (bf16 errors are ~4e-3, and a wrong element or TF32 is far above 1e-5). Outputs are
// poisoned with NaN bytes before every CUDA run, so an unwritten element fails the check.
//
// Runs on the GPU machine only (tools/gpu_check.sh); ctest does not run it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/cuda/stream.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/ops.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::random_vector;
const Device kGpu = Device::cuda(0);
constexpr DType kFloatTypes[] = {DType::kBF16, DType::kF32};

// ---- helpers ------------------------------------------------------------------------------

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Values as stored in dtype (bf16: rounded to nearest even), widened back to f32.
std::vector<float> stored(const std::vector<float>& v, DType dt) {
  if (dt == DType::kF32) return v;
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return out;
}

Tensor host_f32(const Shape& shape, const std::vector<float>& v) { return Tensor::from_vector<float>(shape, v); }

Tensor device_tensor(const Shape& shape, const std::vector<float>& v, DType dt) {
  Tensor h = host_f32(shape, v);
  if (dt == DType::kBF16) h = h.to_dtype(DType::kBF16);
  return h.to(kGpu);
}

Tensor device_ids(const std::vector<int32_t>& v) {
  return Tensor::from_vector<int32_t>({static_cast<int64_t>(v.size())}, v).to(kGpu);
}

// An output whose every byte is 0xFF: NaN in f32 and in bf16.
Tensor poisoned(const Shape& shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt, kGpu);
  EXPECT_EQ(cudaMemsetAsync(t.raw(), 0xFF, t.nbytes(), current_stream()), cudaSuccess);
  return t;
}

std::vector<float> host(const Tensor& t) {
  std::vector<float> v = t.to_f32_vector();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  return v;
}

struct ErrStats {
  double max_abs = 0, rel_l2 = 0;
  int64_t first_bad = -1;  // first non-finite element
};

ErrStats error_vs(const std::vector<float>& got, const std::vector<double>& ref) {
  ErrStats e;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) && e.first_bad < 0) e.first_bad = static_cast<int64_t>(i);
    const double d = got[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    e.max_abs = std::max(e.max_abs, std::fabs(d));
  }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return e;
}

// The 2x rule. `cuda`: the CUDA result; `same_dtype`: the CPU f32 computation on inputs stored like
// the CUDA ones; `ref`: the double reference on the original inputs.
void expect_within_2x(const std::string& what, const std::vector<float>& cuda, const std::vector<float>& same_dtype,
                      const std::vector<double>& ref, double floor_rel = 1e-5) {
  ASSERT_EQ(cuda.size(), ref.size()) << what;
  ASSERT_EQ(same_dtype.size(), ref.size()) << what;
  const ErrStats g = error_vs(cuda, ref), b = error_vs(same_dtype, ref);
  double scale = 0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  EXPECT_LT(g.first_bad, 0) << what << ": CUDA element " << g.first_bad << " is not finite ("
                            << (g.first_bad >= 0 ? cuda[g.first_bad] : 0.f) << "): unwritten (poison) or overflow";
  ASSERT_LT(b.first_bad, 0) << what << ": the CPU baseline has a non-finite element";
  // The baseline must itself be close to the reference, or the rule proves nothing.
  EXPECT_LT(b.rel_l2, 0.02) << what << ": CPU baseline vs reference " << b.rel_l2;
  EXPECT_LE(g.max_abs, 2 * b.max_abs + floor_rel * scale)
      << what << ": max |cuda - ref| = " << g.max_abs << ", max |cpu same dtype - ref| = " << b.max_abs;
  EXPECT_LE(g.rel_l2, 2 * b.rel_l2 + floor_rel)
      << what << ": rel L2 cuda " << g.rel_l2 << ", cpu same dtype " << b.rel_l2;
}

std::string label(const char* op, DType dt) { return std::string(op) + " (" + std::string(dtype_name(dt)) + ")"; }

std::vector<int32_t> random_ints(size_t n, uint64_t seed, int32_t lo, int32_t hi) {  // [lo, hi)
  std::vector<float> u = random_vector(n, seed, 0.f, 1.f);
  std::vector<int32_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::min(hi - 1, lo + static_cast<int32_t>(u[i] * (hi - lo)));
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess) << "no CUDA driver: test_cuda runs on the GPU machine";
    ASSERT_GT(n, 0) << "no CUDA device";
  }
};

// ---- embedding ----------------------------------------------------------------------------

TEST_F(CudaOps, EmbeddingForward) {
  for (DType dt : kFloatTypes) {
    for (int64_t C : {64, 36}) {  // vectorised and scalar paths
      const int64_t T = 300, V = 500;
      const auto wte = random_vector(V * C, 1);
      const auto ids = random_ints(T, 2, 0, V);
      Tensor out = poisoned({T, C}, dt);
      embedding_forward(out, device_ids(ids), device_tensor({V, C}, wte, dt));
      std::vector<double> ref(T * C);
      cpu::embedding_forward<double>(ref.data(), ids.data(), to_double(wte).data(), T, C, V);
      Tensor base = Tensor::empty({T, C}, DType::kF32);
      embedding_forward(base, Tensor::from_vector<int32_t>({T}, ids), host_f32({V, C}, stored(wte, dt)));
      expect_within_2x(label("embedding_forward", dt) + " C=" + std::to_string(C), host(out),
                       stored(base.to_f32_vector(), dt), ref);
    }
  }
}

// dwte += dout at ids, with repeated ids; f32 accumulator (the training setting) from bf16 or f32
// dout, and a bf16 accumulator with distinct ids (it rounds once per token).
TEST_F(CudaOps, EmbeddingBackward) {
  const int64_t T = 400, V = 500;
  for (DType dout_dt : kFloatTypes) {
    for (DType dw_dt : kFloatTypes) {
      for (int64_t C : {64, 36}) {
        const auto dout = random_vector(T * C, 3);
        const auto dw0 = random_vector(V * C, 4);
        std::vector<int32_t> ids = random_ints(T, 5, 0, dw_dt == DType::kF32 ? 40 : V);  // many repeats
        if (dw_dt == DType::kBF16) std::iota(ids.begin(), ids.end(), 50);                // distinct
        Tensor dwte = device_tensor({V, C}, dw0, dw_dt);
        embedding_backward(dwte, device_tensor({T, C}, dout, dout_dt), device_ids(ids));
        std::vector<double> ref = to_double(dw0);
        cpu::embedding_backward<double>(ref.data(), to_double(dout).data(), ids.data(), T, C, V);
        Tensor base = host_f32({V, C}, stored(dw0, dw_dt));
        embedding_backward(base, host_f32({T, C}, stored(dout, dout_dt)), Tensor::from_vector<int32_t>({T}, ids));
        expect_within_2x("embedding_backward dout " + std::string(dtype_name(dout_dt)) + " dwte " +
                             std::string(dtype_name(dw_dt)) + " C=" + std::to_string(C),
                         host(dwte), stored(base.to_f32_vector(), dw_dt), ref);
      }
    }
  }
}

// Row ownership makes the gradient bitwise reproducible, even when one id takes most tokens.
TEST_F(CudaOps, EmbeddingBackwardDeterministic) {
  const int64_t T = 3000, V = 1000, C = 128;
  std::vector<int32_t> ids = random_ints(T, 6, 0, V);
  for (int64_t t = 0; t < T; t += 2) ids[t] = 7;  // a hot id
  const auto dout = random_vector(T * C, 7);
  Tensor g = device_tensor({T, C}, dout, DType::kBF16), d_ids = device_ids(ids);
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    Tensor dwte = device_tensor({V, C}, std::vector<float>(V * C, 0.5f), DType::kF32);
    embedding_backward(dwte, g, d_ids);
    std::vector<float> now = host(dwte);
    if (run == 0) first = now;
    EXPECT_TRUE(bitwise_equal(first, now)) << "run " << run << " differs from run 0";
  }
}

TEST_F(CudaOps, EmbeddingBadIdThrowsAndRecovers) {
  const int64_t T = 64, V = 100, C = 16;
  std::vector<int32_t> ids = random_ints(T, 8, 0, V);
  ids[37] = V;  // one past the end
  Tensor wte = device_tensor({V, C}, random_vector(V * C, 9), DType::kBF16);
  Tensor out = poisoned({T, C}, DType::kBF16);
  try {
    embedding_forward(out, device_ids(ids), wte);
    FAIL() << "an id equal to V was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("token 37 has id 100"), std::string::npos) << e.what();
  }
  ids[37] = 3;  // the error slot was cleared: a good call passes
  EXPECT_NO_THROW(embedding_forward(out, device_ids(ids), wte));
}

// ---- RMSNorm ------------------------------------------------------------------------------

TEST_F(CudaOps, RmsnormForwardBackward) {
  const float eps = 1e-5f;
  for (DType dt : kFloatTypes) {
    for (DType w_dt : kFloatTypes) {
      // C=256 vectorised; C=100 scalar; T=1200 > the backward grid, so blocks take several rows.
      for (auto [T, C] : {std::pair<int64_t, int64_t>{1200, 256}, {37, 100}}) {
        const std::string what = label("rmsnorm", dt) + " weight " + std::string(dtype_name(w_dt)) +
                                 " T=" + std::to_string(T) + " C=" + std::to_string(C);
        const auto x = random_vector(T * C, 10, -2.f, 2.f), w = random_vector(C, 11, 0.5f, 1.5f);
        const auto dy = random_vector(T * C, 12), dw0 = random_vector(C, 13);
        // reference (double, original inputs)
        std::vector<double> ref_y(T * C), ref_r(T), ref_dx(T * C), ref_dw = to_double(dw0);
        cpu::rmsnorm_forward<double>(ref_y.data(), ref_r.data(), to_double(x).data(), to_double(w).data(), T, C, eps);
        cpu::rmsnorm_backward<double>(ref_dx.data(), ref_dw.data(), to_double(dy).data(), to_double(x).data(),
                                      to_double(w).data(), ref_r.data(), T, C);
        // CPU f32 on stored inputs
        Tensor bx = host_f32({T, C}, stored(x, dt)), bw = host_f32({C}, stored(w, w_dt));
        Tensor by = Tensor::empty({T, C}, DType::kF32), br = Tensor::empty({T}, DType::kF32);
        rmsnorm_forward(by, br, bx, bw, eps);
        Tensor bdx = Tensor::empty({T, C}, DType::kF32), bdw = host_f32({C}, dw0);
        rmsnorm_backward(bdx, bdw, host_f32({T, C}, stored(dy, dt)), bx, bw, br);
        // CUDA
        Tensor gx = device_tensor({T, C}, x, dt), gw = device_tensor({C}, w, w_dt);
        Tensor gy = poisoned({T, C}, dt), gr = poisoned({T}, DType::kF32);
        rmsnorm_forward(gy, gr, gx, gw, eps);
        Tensor gdx = poisoned({T, C}, dt), gdw = device_tensor({C}, dw0, DType::kF32);
        rmsnorm_backward(gdx, gdw, device_tensor({T, C}, dy, dt), gx, gw, gr);
        expect_within_2x(what + " out", host(gy), stored(by.to_f32_vector(), dt), ref_y);
        expect_within_2x(what + " rstd", host(gr), br.to_f32_vector(), ref_r);
        expect_within_2x(what + " dinp", host(gdx), stored(bdx.to_f32_vector(), dt), ref_dx);
        expect_within_2x(what + " dweight", host(gdw), bdw.to_f32_vector(), ref_dw);
      }
    }
  }
}

TEST_F(CudaOps, RmsnormDweightDeterministic) {
  const int64_t T = 2000, C = 384;
  Tensor x = device_tensor({T, C}, random_vector(T * C, 14), DType::kBF16);
  Tensor w = device_tensor({C}, random_vector(C, 15), DType::kBF16);
  Tensor dy = device_tensor({T, C}, random_vector(T * C, 16), DType::kBF16);
  Tensor y = poisoned({T, C}, DType::kBF16), r = poisoned({T}, DType::kF32), dx = poisoned({T, C}, DType::kBF16);
  rmsnorm_forward(y, r, x, w, 1e-6f);
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    Tensor dw = device_tensor({C}, std::vector<float>(C, 0.25f), DType::kF32);
    rmsnorm_backward(dx, dw, dy, x, w, r);
    std::vector<float> now = host(dw);
    if (run == 0) first = now;
    EXPECT_TRUE(bitwise_equal(first, now)) << "run " << run << " differs from run 0";
  }
}

// ---- RoPE ---------------------------------------------------------------------------------

TEST_F(CudaOps, RopeForwardBackward) {
  for (DType dt : kFloatTypes) {
    for (auto [H, D] : {std::pair<int64_t, int64_t>{6, 64}, {3, 20}}) {  // vectorised; scalar (D/2 = 10)
      const int64_t T = 50;
      std::vector<float> inv_freq(D / 2);
      for (int64_t i = 0; i < D / 2; ++i)
        inv_freq[i] = static_cast<float>(1.0 / std::pow(500000.0, 2.0 * i / static_cast<double>(D)));
      const auto pos = random_ints(T, 17, 0, 100000);  // long-context positions: large angles
      const auto x = random_vector(T * H * D, 18);
      Tensor d_pos = device_ids(pos), d_freq = host_f32({D / 2}, inv_freq).to(kGpu);
      Tensor h_pos = Tensor::from_vector<int32_t>({T}, pos), h_freq = host_f32({D / 2}, inv_freq);
      for (bool backward : {false, true}) {
        const std::string what = label(backward ? "rope_backward" : "rope_forward", dt) + " D=" + std::to_string(D);
        std::vector<double> ref = to_double(x);
        Tensor base = host_f32({T, H, D}, stored(x, dt));
        Tensor gx = device_tensor({T, H, D}, x, dt);
        if (backward) {
          cpu::rope_backward<double>(ref.data(), pos.data(), inv_freq.data(), T, H, D);
          rope_backward(base, h_pos, h_freq);
          rope_backward(gx, d_pos, d_freq);
        } else {
          cpu::rope_forward<double>(ref.data(), pos.data(), inv_freq.data(), T, H, D);
          rope_forward(base, h_pos, h_freq);
          rope_forward(gx, d_pos, d_freq);
        }
        expect_within_2x(what, host(gx), stored(base.to_f32_vector(), dt), ref);
      }
    }
  }
}

// ---- SwiGLU -------------------------------------------------------------------------------

TEST_F(CudaOps, SwigluForwardBackward) {
  for (DType dt : kFloatTypes) {
    for (auto [T, F] : {std::pair<int64_t, int64_t>{30, 88}, {7, 13}}) {  // packs; 91 elements: scalar tail
      const std::string what = label("swiglu", dt) + " n=" + std::to_string(T * F);
      const int64_t n = T * F;
      const auto g = random_vector(n, 19, -6.f, 6.f), u = random_vector(n, 20, -2.f, 2.f);
      const auto dy = random_vector(n, 21);
      std::vector<double> ref_y(n), ref_dg(n), ref_du(n);
      cpu::swiglu_forward<double>(ref_y.data(), to_double(g).data(), to_double(u).data(), n);
      cpu::swiglu_backward<double>(ref_dg.data(), ref_du.data(), to_double(dy).data(), to_double(g).data(),
                                   to_double(u).data(), n);
      Tensor bg = host_f32({T, F}, stored(g, dt)), bu = host_f32({T, F}, stored(u, dt));
      Tensor by = Tensor::empty({T, F}, DType::kF32), bdg = Tensor::empty({T, F}, DType::kF32),
             bdu = Tensor::empty({T, F}, DType::kF32);
      swiglu_forward(by, bg, bu);
      swiglu_backward(bdg, bdu, host_f32({T, F}, stored(dy, dt)), bg, bu);
      Tensor gg = device_tensor({T, F}, g, dt), gu = device_tensor({T, F}, u, dt);
      Tensor gy = poisoned({T, F}, dt), gdg = poisoned({T, F}, dt), gdu = poisoned({T, F}, dt);
      swiglu_forward(gy, gg, gu);
      swiglu_backward(gdg, gdu, device_tensor({T, F}, dy, dt), gg, gu);
      expect_within_2x(what + " out", host(gy), stored(by.to_f32_vector(), dt), ref_y);
      expect_within_2x(what + " dgate", host(gdg), stored(bdg.to_f32_vector(), dt), ref_dg);
      expect_within_2x(what + " dup", host(gdu), stored(bdu.to_f32_vector(), dt), ref_du);
    }
  }
}

// A view that starts 24 bytes into its storage takes the unaligned (scalar) path.
TEST_F(CudaOps, SwigluMisalignedView) {
  const int64_t T = 40, F = 12;
  const auto g = random_vector((T + 1) * F, 22, -4.f, 4.f), u = random_vector((T + 1) * F, 23);
  Tensor gg = device_tensor({T + 1, F}, g, DType::kBF16).rows(1, T + 1);
  Tensor gu = device_tensor({T + 1, F}, u, DType::kBF16).rows(1, T + 1);
  Tensor gy_full = poisoned({T + 1, F}, DType::kBF16);
  Tensor gy = gy_full.rows(1, T + 1);
  swiglu_forward(gy, gg, gu);
  const std::vector<float> g1(g.begin() + F, g.end()), u1(u.begin() + F, u.end());
  std::vector<double> ref(T * F);
  cpu::swiglu_forward<double>(ref.data(), to_double(g1).data(), to_double(u1).data(), T * F);
  Tensor by = Tensor::empty({T, F}, DType::kF32);
  swiglu_forward(by, host_f32({T, F}, stored(g1, DType::kBF16)), host_f32({T, F}, stored(u1, DType::kBF16)));
  expect_within_2x("swiglu misaligned view", host(gy), stored(by.to_f32_vector(), DType::kBF16), ref);
  const std::vector<float> row0 = host(gy_full.rows(0, 1));  // outside the view: untouched poison
  for (float v : row0) EXPECT_TRUE(std::isnan(v)) << "swiglu wrote outside its view";
}

// ---- matmul -------------------------------------------------------------------------------

struct MatmulCase {
  int64_t M, N, K;
};

// One matmul's inputs and references, computed once and checked against any number of CUDA runs
// (autotune on or off, every candidate of the pool): the double reference on the original inputs
// and the CPU f32 baseline on inputs stored like the CUDA ones (the 2x rule).
class MatmulCheck {
 public:
  MatmulCheck(DType in_dt, DType out_dt, const MatmulCase& c, bool ta, bool tb, float alpha, float beta)
      : in_dt_(in_dt), out_dt_(out_dt), c_(c), ta_(ta), tb_(tb), alpha_(alpha), beta_(beta) {
    const auto [M, N, K] = c;
    what_ = "matmul in " + std::string(dtype_name(in_dt)) + " out " + std::string(dtype_name(out_dt)) +
            " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
            " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta);
    sa_ = ta ? Shape{K, M} : Shape{M, K};
    sb_ = tb ? Shape{N, K} : Shape{K, N};
    a_ = random_vector(M * K, 30 + M);
    b_ = random_vector(K * N, 31 + N);
    c0_ = random_vector(M * N, 32);
    ref_ = to_double(c0_);
    cpu::matmul_reference<double>(ref_.data(), to_double(a_).data(), to_double(b_).data(), M, N, K, ta, tb, alpha,
                                  beta);
    Tensor base = host_f32({M, N}, stored(c0_, out_dt));
    matmul(base, host_f32(sa_, stored(a_, in_dt)), host_f32(sb_, stored(b_, in_dt)), ta, tb, alpha, beta);
    base_ = stored(base.to_f32_vector(), out_dt);
    da_ = device_tensor(sa_, a_, in_dt);
    db_ = device_tensor(sb_, b_, in_dt);
  }

  // A fresh output: beta == 0 makes out write-only, so its NaN poison must not leak in.
  Tensor make_out() const {
    return beta_ == 0.f ? poisoned({c_.M, c_.N}, out_dt_) : device_tensor({c_.M, c_.N}, c0_, out_dt_);
  }
  std::vector<cuda_ops::MatmulConfig> candidates() const {
    Tensor out = make_out();
    return cuda_ops::matmul_candidates(out, da_, db_, ta_, tb_);
  }
  // One CUDA run under the current matmul settings, checked.
  void run(const std::string& label) const {
    Tensor out = make_out();
    matmul(out, da_, db_, ta_, tb_, alpha_, beta_);
    expect_within_2x(what_ + label, host(out), base_, ref_);
  }
  const std::string& what() const { return what_; }

 private:
  DType in_dt_, out_dt_;
  MatmulCase c_;
  bool ta_, tb_;
  float alpha_, beta_;
  std::string what_;
  Shape sa_, sb_;
  std::vector<float> a_, b_, c0_, base_;
  std::vector<double> ref_;
  Tensor da_, db_;
};

// Restores matmul's settings (autotune, budget, forced candidate) at scope exit, failed or not.
class MatmulSettings {
 public:
  MatmulSettings() : autotune_(cuda_ops::matmul_autotune()), budget_(cuda_ops::matmul_autotune_budget_ms()) {}
  ~MatmulSettings() {
    cuda_ops::set_matmul_autotune(autotune_);
    cuda_ops::set_matmul_autotune_budget_ms(budget_);
    cuda_ops::set_matmul_forced_candidate(-1);
  }

 private:
  bool autotune_;
  double budget_;
};

// The heuristic first pick and the autotuned choice, on every transpose combination and dtype.
TEST_F(CudaOps, Matmul) {
  MatmulSettings settings;
  cuda_ops::set_matmul_autotune_budget_ms(10);
  const MatmulCase cases[] = {{96, 80, 72}, {33, 17, 29}, {256, 128, 1000}};
  for (const auto& c : cases) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const MatmulCheck checks[] = {
            {DType::kBF16, DType::kBF16, c, ta, tb, 1.f, 0.f},
            {DType::kBF16, DType::kF32, c, ta, tb, 0.5f, 1.f},  // dW += dy^T x
            {DType::kBF16, DType::kBF16, c, ta, tb, 0.7f, 0.5f},
            {DType::kF32, DType::kF32, c, ta, tb, 1.f, 0.f},  // true f32 (TF32 would fail)
        };
        for (const MatmulCheck& check : checks) {
          for (bool tune : {false, true}) {
            cuda_ops::set_matmul_autotune(tune);
            check.run(tune ? " autotuned" : " heuristic");
            const cuda_ops::MatmulTuning t = cuda_ops::last_matmul_tuning();
            EXPECT_EQ(t.autotuned, tune) << check.what();
            if (tune) {
              EXPECT_GE(t.timed, 1) << check.what();
              EXPECT_LE(t.timed, t.candidates) << check.what();
            }
          }
        }
      }
    }
  }
}

// Every candidate of the pool, forced one by one, computes the same product: both families, the
// heuristic's split-K configurations and matmul's own split-K variants of long-K shapes (the
// weight gradients, K = tokens). The pool's [0] is what autotune-off runs.
TEST_F(CudaOps, MatmulEveryCandidate) {
  MatmulSettings settings;
  struct Case {
    DType in, out;
    MatmulCase c;
    bool ta, tb;
    float alpha, beta;
    bool long_k;
  };
  const Case cases[] = {
      {DType::kBF16, DType::kF32, {64, 96, 8192}, true, false, 0.5f, 1.f, true},   // wgrad: dW += dy^T x
      {DType::kBF16, DType::kBF16, {64, 96, 8192}, true, false, 1.f, 0.f, true},   // wgrad, bf16 out
      {DType::kF32, DType::kF32, {48, 64, 4096}, true, false, 1.f, 0.f, true},     // f32 long K
      {DType::kBF16, DType::kBF16, {200, 96, 256}, false, true, 1.f, 0.f, false},  // fwd: y = x W^T
      {DType::kBF16, DType::kBF16, {128, 160, 192}, false, false, 0.7f, 0.5f, false},  // dgrad: dx = dy W
  };
  for (const Case& k : cases) {
    const MatmulCheck check(k.in, k.out, k.c, k.ta, k.tb, k.alpha, k.beta);
    const std::vector<cuda_ops::MatmulConfig> pool = check.candidates();
    ASSERT_FALSE(pool.empty()) << check.what();
    int swapped = 0, split = 0;
    for (const auto& cfg : pool) {
      swapped += cfg.family == cuda_ops::MatmulFamily::kSwapped;
      split += cfg.split_k > 1;
    }
    std::printf("%s: %zu candidates, %d swapped, %d split-K\n", check.what().c_str(), pool.size(), swapped, split);
    EXPECT_EQ(pool[0].family, cuda_ops::MatmulFamily::kDirect) << check.what();
    EXPECT_GT(swapped, 0) << check.what() << ": cuBLASLt offered no algorithm with a row-major D";
    if (k.long_k) {
      EXPECT_GT(split, 0) << check.what() << ": no split-K candidate for a long-K shape";
    }
    for (size_t i = 0; i < pool.size(); ++i) {
      cuda_ops::set_matmul_forced_candidate(static_cast<int>(i));
      const std::string cfg = cuda_ops::matmul_config_str(pool[i]);
      const std::string label = " candidate " + std::to_string(i) + " (" + cfg + ")";
      EXPECT_NO_THROW(check.run(label)) << check.what() << label;
      EXPECT_EQ(cuda_ops::matmul_config_str(cuda_ops::last_matmul_tuning().chosen), cfg) << check.what();
    }
    cuda_ops::set_matmul_forced_candidate(-1);
    for (bool tune : {false, true}) {
      cuda_ops::set_matmul_autotune(tune);
      check.run(tune ? " autotuned" : " heuristic");
      const cuda_ops::MatmulTuning t = cuda_ops::last_matmul_tuning();
      EXPECT_EQ(t.autotuned, tune) << check.what();
      if (!tune) {
        EXPECT_EQ(cuda_ops::matmul_config_str(t.chosen), cuda_ops::matmul_config_str(pool[0])) << check.what();
      }
    }
  }
  EXPECT_THROW(cuda_ops::set_matmul_forced_candidate(-2), Error);
}

// The tuning stays within its budget: on a GEMM whose whole pool takes far longer than the budget
// to time, the first pass stops early and the total is about the budget (one candidate's first
// runs, lazy module loading included, may overrun it).
TEST_F(CudaOps, MatmulAutotuneBudget) {
  MatmulSettings settings;
  const double budget = 5;
  cuda_ops::set_matmul_autotune_budget_ms(budget);
  cuda_ops::set_matmul_autotune(true);
  const int64_t n = 4096;  // 137 GFLOP: ~0.2 ms a run on an H200, the pool of ~64+ would take > 25 ms
  Tensor a = device_tensor({n, n}, random_vector(n * n, 40), DType::kBF16);
  Tensor b = device_tensor({n, n}, random_vector(n * n, 41), DType::kBF16);
  Tensor out = Tensor::empty({n, n}, DType::kBF16, kGpu);
  const size_t pool = cuda_ops::matmul_candidates(out, a, b, false, false).size();
  matmul(out, a, b, false, false);
  const cuda_ops::MatmulTuning t = cuda_ops::last_matmul_tuning();
  std::printf("budget %.1f ms: tuned in %.1f ms, %d of %d candidates timed, chose %s (%.4f ms; first pick %.4f ms)\n",
              budget, t.tune_ms, t.timed, t.candidates, cuda_ops::matmul_config_str(t.chosen).c_str(), t.best_ms,
              t.heuristic_ms);
  EXPECT_TRUE(t.autotuned);
  EXPECT_EQ(t.candidates, static_cast<int>(pool));
  EXPECT_GE(t.timed, 1);
  if (t.candidates >= 16) {
    EXPECT_LT(t.timed, t.candidates) << "the budget did not stop the first pass";
  }
  EXPECT_LT(t.tune_ms, budget + 50) << "tuning overran its budget";
  EXPECT_GT(t.best_ms, 0);
  // The first pick may leave the race early with fewer samples; its median stays a fair yardstick.
  EXPECT_LE(t.best_ms, t.heuristic_ms * 1.1) << "tuning chose a candidate slower than the first pick";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// ---- cross-entropy ------------------------------------------------------------------------

TEST_F(CudaOps, CrossEntropyForwardBackward) {
  for (DType dt : kFloatTypes) {
    for (int64_t V : {1000, 997}) {  // packs; scalar
      const int64_t T = 64;
      const std::string what = label("cross_entropy", dt) + " V=" + std::to_string(V);
      const auto logits = random_vector(T * V, 40, -4.f, 4.f);
      std::vector<int32_t> targets = random_ints(T, 41, 0, static_cast<int32_t>(V));
      for (int64_t t = 0; t < T; t += 5) targets[t] = kIgnoreIndex;
      const float dloss = 1.f / 51.f;
      std::vector<double> ref_l(T), ref_dl(T * V);
      cpu::cross_entropy_forward<double>(ref_l.data(), to_double(logits).data(), targets.data(), T, V);
      cpu::cross_entropy_backward<double>(ref_dl.data(), to_double(logits).data(), targets.data(), dloss, T, V);
      Tensor bx = host_f32({T, V}, stored(logits, dt)), h_tgt = Tensor::from_vector<int32_t>({T}, targets);
      Tensor bl = Tensor::empty({T}, DType::kF32), bdl = Tensor::empty({T, V}, DType::kF32);
      cross_entropy_forward(bl, bx, h_tgt);
      cross_entropy_backward(bdl, bx, h_tgt, dloss);
      Tensor gx = device_tensor({T, V}, logits, dt), d_tgt = device_ids(targets);
      Tensor gl = poisoned({T}, DType::kF32), gdl = poisoned({T, V}, dt);
      cross_entropy_forward(gl, gx, d_tgt);
      cross_entropy_backward(gdl, gx, d_tgt, dloss);
      expect_within_2x(what + " losses", host(gl), bl.to_f32_vector(), ref_l);
      expect_within_2x(what + " dlogits", host(gdl), stored(bdl.to_f32_vector(), dt), ref_dl);
      // in place: dlogits written over logits
      cross_entropy_backward(gx, gx, d_tgt, dloss);
      expect_within_2x(what + " dlogits in place", host(gx), stored(bdl.to_f32_vector(), dt), ref_dl);
    }
  }
}

TEST_F(CudaOps, CrossEntropyBadTargetThrowsAndRecovers) {
  const int64_t T = 16, V = 64;
  Tensor logits = device_tensor({T, V}, random_vector(T * V, 42), DType::kBF16);
  std::vector<int32_t> targets = random_ints(T, 43, 0, V);
  targets[11] = -5;
  Tensor losses = poisoned({T}, DType::kF32), dlogits = poisoned({T, V}, DType::kBF16);
  for (bool backward : {false, true}) {
    try {
      if (backward) {
        cross_entropy_backward(dlogits, logits, device_ids(targets), 1.f);
      } else {
        cross_entropy_forward(losses, logits, device_ids(targets));
      }
      FAIL() << "target -5 was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("token 11 has target -5"), std::string::npos) << e.what();
    }
  }
  targets[11] = kIgnoreIndex;
  EXPECT_NO_THROW(cross_entropy_forward(losses, logits, device_ids(targets)));
  EXPECT_EQ(host(losses)[11], 0.f);
}

// ---- elementwise --------------------------------------------------------------------------

TEST_F(CudaOps, AddScale) {
  const int64_t n = 1003;  // 125 packs + a tail of 3
  for (DType y_dt : kFloatTypes) {
    for (DType x_dt : kFloatTypes) {
      const auto y = random_vector(n, 50), x = random_vector(n, 51);
      std::vector<double> ref = to_double(y);
      const auto xd = to_double(x);
      cpu::add_inplace<double>(ref.data(), xd.data(), n);
      cpu::scale_inplace<double>(ref.data(), -1.7, n);
      Tensor base = host_f32({n}, stored(y, y_dt));
      add_inplace(base, host_f32({n}, stored(x, x_dt)));
      base = host_f32({n}, stored(base.to_f32_vector(), y_dt));  // y is stored after the add
      scale_inplace(base, -1.7f);
      Tensor gy = device_tensor({n}, y, y_dt);
      add_inplace(gy, device_tensor({n}, x, x_dt));
      scale_inplace(gy, -1.7f);
      expect_within_2x("add+scale y " + std::string(dtype_name(y_dt)) + " x " + std::string(dtype_name(x_dt)),
                       host(gy), stored(base.to_f32_vector(), y_dt), ref);
    }
  }
}

TEST_F(CudaOps, SumSquaresDeterministicDouble) {
  const int64_t n = 1000003;
  for (DType dt : kFloatTypes) {
    const auto x = stored(random_vector(n, 52, -3.f, 3.f), dt);
    const double expect = cpu::sum_squares<double>(to_double(x).data(), n);
    Tensor gx = device_tensor({n}, x, dt);
    const double got = sum_squares(gx);
    // Squares of f32 values are exact in double: only the order of n additions differs.
    EXPECT_NEAR(got, expect, 1e-12 * expect) << dtype_name(dt);
    const double again = sum_squares(gx);
    EXPECT_EQ(std::memcmp(&got, &again, sizeof(double)), 0) << "sum_squares is not reproducible";
  }
  EXPECT_EQ(sum_squares(Tensor::empty({0}, DType::kBF16, kGpu)), 0.0);
}

TEST_F(CudaOps, CastRoundsToNearestEven) {
  const int64_t n = 1001;
  auto x = random_vector(n, 53, -100.f, 100.f);
  x[0] = 1.f + 1.f / 256.f;  // a tie: rounds to even (1.0)
  x[1] = 1.f + 3.f / 256.f;  // a tie: rounds to even (1 + 4/256)
  Tensor in = device_tensor({n}, x, DType::kF32), out = poisoned({n}, DType::kBF16);
  cuda_ops::cast(out, in);
  Tensor h = out.to(Device::cpu());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(h.data<bf16>()[i].bits, f32_to_bf16(x[i]).bits) << "element " << i << " = " << x[i];
  Tensor back = poisoned({n}, DType::kF32);
  cuda_ops::cast(back, out);
  EXPECT_TRUE(bitwise_equal(host(back), stored(x, DType::kBF16)));
}

// ---- AdamW --------------------------------------------------------------------------------

TEST_F(CudaOps, AdamW) {
  const int64_t n = 4099;
  const AdamWConfig cfg{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  for (DType g_dt : kFloatTypes) {
    auto p = random_vector(n, 60), m = random_vector(n, 61, -0.1f, 0.1f), v = random_vector(n, 62, 0.f, 0.01f);
    std::vector<double> rp = to_double(p), rm = to_double(m), rv = to_double(v);
    Tensor bp = host_f32({n}, p), bm = host_f32({n}, m), bv = host_f32({n}, v);
    Tensor gp = device_tensor({n}, p, DType::kF32), gm = device_tensor({n}, m, DType::kF32),
           gv = device_tensor({n}, v, DType::kF32);
    for (int64_t step = 1; step <= 3; ++step) {
      const auto g = random_vector(n, 63 + step);
      const float scale = 0.8f;
      // double reference on the unrounded gradient, torch's formulas
      const double bc1 = 1 - std::pow(0.9, step), bc2 = 1 - std::pow(0.95, step);
      for (int64_t i = 0; i < n; ++i) {
        const double gi = static_cast<double>(g[i]) * scale;
        rp[i] *= 1 - 3e-3 * 0.1;
        rm[i] = 0.9 * rm[i] + 0.1 * gi;
        rv[i] = 0.95 * rv[i] + 0.05 * gi * gi;
        rp[i] -= 3e-3 / bc1 * rm[i] / (std::sqrt(rv[i]) / std::sqrt(bc2) + 1e-8);
      }
      Tensor bg = host_f32({n}, stored(g, g_dt));
      adamw_step(bp, bm, bv, g_dt == DType::kBF16 ? bg.to_dtype(DType::kBF16) : bg, cfg, step, scale);
      adamw_step(gp, gm, gv, device_tensor({n}, g, g_dt), cfg, step, scale);
      const std::string what = label("adamw", g_dt) + " step " + std::to_string(step);
      expect_within_2x(what + " param", host(gp), bp.to_f32_vector(), rp);
      expect_within_2x(what + " m", host(gm), bm.to_f32_vector(), rm);
      expect_within_2x(what + " v", host(gv), bv.to_f32_vector(), rv);
    }
  }
}

// ---- streams ------------------------------------------------------------------------------

// Work queued on a side stream under StreamGuard, ordered back with an Event.
TEST_F(CudaOps, SideStreamWithEvent) {
  const int64_t n = 1 << 20;
  const auto x = random_vector(n, 70);
  Tensor y = device_tensor({n}, x, DType::kF32);
  Stream side;
  Event ready;
  {
    StreamGuard guard(side.get());
    EXPECT_EQ(current_stream(), side.get());
    scale_inplace(y, 2.f);
    ready.record();
  }
  EXPECT_EQ(current_stream(), nullptr);
  Stream(side.device()).wait(ready);  // a second stream may wait on it too
  ready.synchronize();
  EXPECT_TRUE(ready.query());
  const std::vector<float> got = host(y);
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(got[i], 2.f * x[i]);
  void* p = pinned_host_allocator().allocate(1000);
  EXPECT_NE(p, nullptr);
  cudaPointerAttributes attr{};
  EXPECT_EQ(cudaPointerGetAttributes(&attr, p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  pinned_host_allocator().deallocate(p, 1000);
}

}  // namespace
}  // namespace seqpar
