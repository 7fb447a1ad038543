// Flash attention on the GPU (src/attention/cuda) against a double-precision reference written
// here. Tolerance rule (flash-attention's): the GPU's error against the exact result on the same
// bf16 inputs must stay within 2x the error of the same computation done with bf16 rounding on the
// CPU (P, dS and the outputs rounded to bf16, everything else in double), plus a tiny floor.
// Inputs are random (never zeros); forward outputs are poisoned (NaN) before each run; gradients
// start from random values for GradMode::kAccumulate (the default) and from NaN for kWrite, which
// must store every element without reading it.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention/cuda/attention_cuda.h"
#include "attention/cuda/attn_launch.h"
#include "cli/bench_attention.h"
#include "core/tensor.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::random_vector;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define REQUIRE_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device"

constexpr double kInf = std::numeric_limits<double>::infinity();

float rb(double x) { return bf16_to_f32(f32_to_bf16(static_cast<float>(x))); }

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = rb(x);
  return v;
}

// One attention problem: sizes, mask metadata, dtypes of the outputs.
struct Case {
  int64_t Tq, Tk, H, Hkv, D;
  std::vector<int32_t> qseg, qpos, kseg, kpos;
  bool causal = true;
  bool out_f32 = false;   // forward output / backward `out` dtype
  bool grad_f32 = false;  // dq, dk, dv dtype
  float scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))); }
  bool visible(int64_t i, int64_t j) const { return qseg[i] == kseg[j] && (!causal || kpos[j] <= qpos[i]); }
};

Case single_doc(int64_t T, int64_t H, int64_t Hkv, int64_t D, bool causal) {
  Case c{T, T, H, Hkv, D, {}, {}, {}, {}, causal};
  for (int64_t i = 0; i < T; ++i) {
    c.qseg.push_back(0);
    c.qpos.push_back(static_cast<int32_t>(i));
  }
  c.kseg = c.qseg;
  c.kpos = c.qpos;
  return c;
}

// Host data: bf16-representable values held as floats.
struct Inputs {
  std::vector<float> q, k, v, dout, dq0, dk0, dv0;  // d*0: the gradients' starting values
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  Inputs in;
  in.q = rounded(random_vector(c.Tq * c.H * c.D, seed + 1, -1.5f, 1.5f));
  in.k = rounded(random_vector(c.Tk * c.Hkv * c.D, seed + 2, -1.5f, 1.5f));
  in.v = rounded(random_vector(c.Tk * c.Hkv * c.D, seed + 3, -1.f, 1.f));
  in.dout = rounded(random_vector(c.Tq * c.H * c.D, seed + 4, -1.f, 1.f));
  // Starting gradients of about the gradients' own size, so accumulation errors show.
  in.dq0 = rounded(random_vector(c.Tq * c.H * c.D, seed + 5, -0.05f, 0.05f));
  in.dk0 = rounded(random_vector(c.Tk * c.Hkv * c.D, seed + 6, -0.05f, 0.05f));
  in.dv0 = rounded(random_vector(c.Tk * c.Hkv * c.D, seed + 7, -0.05f, 0.05f));
  return in;
}

// Reference: out, lse and the accumulated gradients (start + contribution), in double. With
// `lowp`, the bf16 computation: P rounded to bf16 before P V and dV, dS rounded to bf16, and the
// bf16 outputs rounded (out, and the gradient totals when the gradients are bf16).
struct Ref {
  std::vector<double> out, lse, dq, dk, dv;
};

Ref reference(const Case& c, const Inputs& in, bool lowp) {
  const int64_t Tq = c.Tq, Tk = c.Tk, H = c.H, Hkv = c.Hkv, D = c.D, G = H / Hkv;
  const double scale = c.scale();
  Ref r;
  r.out.assign(Tq * H * D, 0.0);
  r.lse.assign(Tq * H, -kInf);
  std::vector<double> gq(Tq * H * D, 0.0), gk(Tk * Hkv * D, 0.0), gv(Tk * Hkv * D, 0.0);
  std::vector<double> s(Tk);
  for (int64_t h = 0; h < H; ++h) {
    const int64_t hk = h / G;
    for (int64_t i = 0; i < Tq; ++i) {
      const float* qi = &in.q[(i * H + h) * D];
      double mx = -kInf;
      for (int64_t j = 0; j < Tk; ++j) {
        s[j] = -kInf;
        if (!c.visible(i, j)) continue;
        const float* kj = &in.k[(j * Hkv + hk) * D];
        double acc = 0;
        for (int64_t d = 0; d < D; ++d) acc += static_cast<double>(qi[d]) * kj[d];
        s[j] = scale * acc;
        mx = std::max(mx, s[j]);
      }
      if (mx == -kInf) continue;  // sees nothing: out 0, lse -inf, no gradient
      double sum = 0;
      for (int64_t j = 0; j < Tk; ++j)
        if (s[j] != -kInf) sum += std::exp(s[j] - mx);
      const double lse = mx + std::log(sum);
      r.lse[i * H + h] = lse;
      double* oi = &r.out[(i * H + h) * D];
      for (int64_t j = 0; j < Tk; ++j) {
        if (s[j] == -kInf) continue;
        double p = std::exp(s[j] - lse);
        if (lowp) p = rb(p);
        const float* vj = &in.v[(j * Hkv + hk) * D];
        for (int64_t d = 0; d < D; ++d) oi[d] += p * vj[d];
      }
      if (lowp && !c.out_f32)
        for (int64_t d = 0; d < D; ++d) oi[d] = rb(oi[d]);
      // Backward of this row with its own final out and lse.
      const float* doi = &in.dout[(i * H + h) * D];
      double delta = 0;
      for (int64_t d = 0; d < D; ++d) delta += static_cast<double>(doi[d]) * oi[d];
      for (int64_t j = 0; j < Tk; ++j) {
        if (s[j] == -kInf) continue;
        double p = std::exp(s[j] - lse);
        if (lowp) p = rb(p);
        const float* kj = &in.k[(j * Hkv + hk) * D];
        const float* vj = &in.v[(j * Hkv + hk) * D];
        double dp = 0;
        for (int64_t d = 0; d < D; ++d) dp += static_cast<double>(doi[d]) * vj[d];
        double ds = p * (dp - delta);
        if (lowp) ds = rb(ds);
        for (int64_t d = 0; d < D; ++d) {
          gv[(j * Hkv + hk) * D + d] += p * doi[d];
          gq[(i * H + h) * D + d] += scale * ds * kj[d];
          gk[(j * Hkv + hk) * D + d] += scale * ds * qi[d];
        }
      }
    }
  }
  auto total = [&](const std::vector<float>& start, const std::vector<double>& g) {
    std::vector<double> t(g.size());
    for (size_t x = 0; x < g.size(); ++x) {
      t[x] = start[x] + g[x];
      if (lowp && !c.grad_f32) t[x] = rb(t[x]);
    }
    return t;
  };
  r.dq = total(in.dq0, gq);
  r.dk = total(in.dk0, gk);
  r.dv = total(in.dv0, gv);
  return r;
}

double rel_l2(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = a[i] - ref[i];
    if (!std::isfinite(a[i])) return kInf;
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

std::vector<float> to_floats(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// The 2x rule on relative L2 error, with a floor for results the bf16 computation gets exactly.
void expect_within_rule(const char* what, const Tensor& gpu, const std::vector<double>& exact,
                        const std::vector<double>& lowp) {
  const std::vector<float> g = gpu.to_f32_vector();
  ASSERT_EQ(g.size(), exact.size()) << what;
  const double e_gpu = rel_l2(g, exact);
  const double e_low = rel_l2(to_floats(lowp), exact);
  EXPECT_LE(e_gpu, 2.0 * e_low + 1e-6) << what << ": GPU rel err " << e_gpu << " vs bf16-CPU rel err " << e_low;
}

// lse: f32 on both sides of the rule, so an absolute bound; -inf rows must match exactly.
void expect_lse(const Tensor& gpu, const std::vector<double>& exact) {
  const std::vector<float> g = gpu.to_f32_vector();
  ASSERT_EQ(g.size(), exact.size());
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool ok = exact[i] == -kInf ? g[i] == -INFINITY
                                      : std::isfinite(g[i]) && std::abs(g[i] - exact[i]) <= 1e-4 + 1e-5 * std::abs(exact[i]);
    if (!ok && bad++ < 5) ADD_FAILURE() << "lse[" << i << "] = " << g[i] << ", expected " << exact[i];
  }
  EXPECT_EQ(bad, 0);
}

Tensor device_tensor(const std::vector<float>& v, const Shape& shape, bool f32) {
  Tensor h = Tensor::from_vector<float>(shape, v);
  if (!f32) h = h.to_dtype(DType::kBF16);
  return h.to(Device::cuda(0));
}

Tensor poisoned(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda(0));
  EXPECT_EQ(cudaMemset(t.raw(), 0xff, t.nbytes()), cudaSuccess);  // NaN in bf16 and f32
  return t;
}

TokenMeta meta(const std::vector<int32_t>& seg, const std::vector<int32_t>& pos, bool on_device) {
  const int64_t n = static_cast<int64_t>(seg.size());
  TokenMeta m{Tensor::from_vector<int32_t>({n}, seg), Tensor::from_vector<int32_t>({n}, pos)};
  if (on_device) m = {m.seg.to(Device::cuda(0)), m.pos.to(Device::cuda(0))};
  return m;
}

// Runs forward then backward on the GPU and checks both against the reference. kWrite: the
// gradients start poisoned (NaN) and must equal the contribution alone (the reference from 0).
void run_and_check(const Case& c, uint64_t seed, bool meta_on_device = false,
                   GradMode mode = GradMode::kAccumulate) {
  Inputs in = make_inputs(c, seed);
  const bool write = mode == GradMode::kWrite;
  if (write)
    for (std::vector<float>* g : {&in.dq0, &in.dk0, &in.dv0}) std::fill(g->begin(), g->end(), 0.f);
  const Ref exact = reference(c, in, false), lowp = reference(c, in, true);
  const Shape qs{c.Tq, c.H, c.D}, ks{c.Tk, c.Hkv, c.D};
  Tensor q = device_tensor(in.q, qs, false), k = device_tensor(in.k, ks, false), v = device_tensor(in.v, ks, false);
  Tensor dout = device_tensor(in.dout, qs, false);
  const AttnArgs args{meta(c.qseg, c.qpos, meta_on_device), meta(c.kseg, c.kpos, meta_on_device), c.causal, c.scale()};

  Tensor out = poisoned(qs, c.out_f32 ? DType::kF32 : DType::kBF16);
  Tensor lse = poisoned({c.Tq, c.H}, DType::kF32);
  cuda_attn::attn_forward(out, lse, q, k, v, args);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_within_rule("out", out, exact.out, lowp.out);
  expect_lse(lse, exact.lse);

  const DType gdt = c.grad_f32 ? DType::kF32 : DType::kBF16;
  Tensor dq = write ? poisoned(qs, gdt) : device_tensor(in.dq0, qs, c.grad_f32);
  Tensor dk = write ? poisoned(ks, gdt) : device_tensor(in.dk0, ks, c.grad_f32);
  Tensor dv = write ? poisoned(ks, gdt) : device_tensor(in.dv0, ks, c.grad_f32);
  cuda_attn::attn_backward(dq, dk, dv, dout, q, k, v, out, lse, args, mode);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_within_rule("dq", dq, exact.dq, lowp.dq);  // a NaN left anywhere fails the rule
  expect_within_rule("dk", dk, exact.dk, lowp.dk);
  expect_within_rule("dv", dv, exact.dv, lowp.dv);
  if (!write) return;
  // kWrite stores what kAccumulate adds to zeros: dk/dv bit for bit (each key's CTA sums in a
  // fixed order); dq goes through f32 atomics in varying order, so the rule above covers it.
  Tensor dk0 = Tensor::zeros(ks, gdt, Device::cuda(0)), dv0 = Tensor::zeros(ks, gdt, Device::cuda(0));
  Tensor dq0 = Tensor::zeros(qs, gdt, Device::cuda(0));
  cuda_attn::attn_backward(dq0, dk0, dv0, dout, q, k, v, out, lse, args, GradMode::kAccumulate);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(dk.to_f32_vector(), dk0.to_f32_vector());
  EXPECT_EQ(dv.to_f32_vector(), dv0.to_f32_vector());
}

TEST(CudaAttention, CausalMhaD128) {
  REQUIRE_GPU();
  run_and_check(single_doc(300, 4, 4, 128, true), 11);
}

TEST(CudaAttention, NonCausalGqaD64UnseenSegmentF32Grads) {
  REQUIRE_GPU();
  // 200 queries against 180 keys; the last 50 queries are in a segment no key has (out 0, lse -inf).
  Case c{200, 180, 8, 2, 64, {}, {}, {}, {}, false};
  for (int32_t i = 0; i < 200; ++i) {
    c.qseg.push_back(i < 150 ? 0 : 1);
    c.qpos.push_back(i);
  }
  for (int32_t j = 0; j < 180; ++j) {
    c.kseg.push_back(0);
    c.kpos.push_back(j);
  }
  c.grad_f32 = true;
  run_and_check(c, 22, /*meta_on_device=*/true);
}

TEST(CudaAttention, VarlenThreeDocsGqaD128) {
  REQUIRE_GPU();
  Case c = single_doc(333, 4, 2, 128, true);
  const int32_t cu[] = {0, 100, 230, 333};
  for (int d = 0; d < 3; ++d)
    for (int32_t t = cu[d]; t < cu[d + 1]; ++t) c.qseg[t] = c.kseg[t] = d;
  run_and_check(c, 33);
}

TEST(CudaAttention, ZigzagQueriesD64) {
  REQUIRE_GPU();
  // A zigzag shard of a 4-chunk causal sequence (chunks 0 and 3, 70 tokens each) against all keys.
  Case c = single_doc(280, 4, 1, 64, true);
  c.qseg.clear();
  c.qpos.clear();
  for (int32_t t = 0; t < 280; ++t)
    if (t < 70 || t >= 210) {
      c.qseg.push_back(0);
      c.qpos.push_back(t);
    }
  c.Tq = static_cast<int64_t>(c.qpos.size());
  run_and_check(c, 44);
}

TEST(CudaAttention, LongCausalManyTilesD64) {
  REQUIRE_GPU();
  run_and_check(single_doc(1100, 2, 1, 64, true), 55);
}

// Every instantiated tile shape of the mma.sync kernels (on sm_90 the wgmma kernels are the
// default: the tiles are reached through SEQPAR_FLASH_{FWD,BWD}_KERNEL=mma).
TEST(CudaAttention, EveryTileShape) {
  REQUIRE_GPU();
  struct EnvGuard {
    EnvGuard() {
      setenv("SEQPAR_FLASH_FWD_KERNEL", "mma", 1);
      setenv("SEQPAR_FLASH_BWD_KERNEL", "mma", 1);
    }
    ~EnvGuard() {
      unsetenv("SEQPAR_FLASH_FWD_TILE");
      unsetenv("SEQPAR_FLASH_BWD_TILE");
      unsetenv("SEQPAR_FLASH_FWD_KERNEL");
      unsetenv("SEQPAR_FLASH_BWD_KERNEL");
    }
  } guard;
  auto name = [](int bm, int bn, int warps) {
    return std::to_string(bm) + "x" + std::to_string(bn) + "x" + std::to_string(warps);
  };
  for (int D : {64, 128}) {
    Case c = single_doc(261, 4, 2, D, true);
    for (int32_t t = 150; t < 261; ++t) c.qseg[t] = c.kseg[t] = 1;  // two documents
    const std::vector<cuda_attn::FwdTile> fwd = cuda_attn::fwd_tiles(D);
    const std::vector<cuda_attn::BwdTile> bwd = cuda_attn::bwd_tiles(D);
    ASSERT_FALSE(fwd.empty() || bwd.empty());
    for (size_t n = 0; n < std::max(fwd.size(), bwd.size()); ++n) {
      const cuda_attn::FwdTile& f = fwd[n % fwd.size()];
      const cuda_attn::BwdTile& b = bwd[n % bwd.size()];
      setenv("SEQPAR_FLASH_FWD_TILE", name(f.bm, f.bn, f.warps).c_str(), 1);
      setenv("SEQPAR_FLASH_BWD_TILE", name(b.bm, b.bn, b.warps).c_str(), 1);
      SCOPED_TRACE("D=" + std::to_string(D) + " fwd " + name(f.bm, f.bn, f.warps) + " bwd " + name(b.bm, b.bn, b.warps));
      run_and_check(c, 66 + D + n);
    }
  }
}

// GradMode::kWrite for every backward tile shape, with whole key tiles that no query sees (the
// kernel must still store their zero dk/dv), keys partly seen, and query rows that see nothing
// (dq 0); bf16 and f32 gradients.
TEST(CudaAttention, WriteModeEveryBwdTile) {
  REQUIRE_GPU();
  struct EnvGuard {
    EnvGuard() { setenv("SEQPAR_FLASH_BWD_KERNEL", "mma", 1); }  // the tiles are the mma kernel's
    ~EnvGuard() {
      unsetenv("SEQPAR_FLASH_BWD_TILE");
      unsetenv("SEQPAR_FLASH_BWD_KERNEL");
    }
  } guard;
  for (int D : {64, 128}) {
    // 300 queries, 400 keys: queries 0-249 and keys 0-299 in segment 0 (causal); keys 300-399 in
    // segment 2 (no query: at least the last key tile of every shape is unseen); queries 250-299
    // in segment 3 (no key: empty rows).
    Case c{300, 400, 4, 2, D, {}, {}, {}, {}, true};
    for (int32_t i = 0; i < 300; ++i) {
      c.qseg.push_back(i < 250 ? 0 : 3);
      c.qpos.push_back(i);
    }
    for (int32_t j = 0; j < 400; ++j) {
      c.kseg.push_back(j < 300 ? 0 : 2);
      c.kpos.push_back(j);
    }
    for (const cuda_attn::BwdTile& b : cuda_attn::bwd_tiles(D)) {
      const std::string name = std::to_string(b.bm) + "x" + std::to_string(b.bn) + "x" + std::to_string(b.warps);
      setenv("SEQPAR_FLASH_BWD_TILE", name.c_str(), 1);
      for (bool f32 : {false, true}) {
        SCOPED_TRACE("D=" + std::to_string(D) + " bwd " + name + (f32 ? " f32 grads" : " bf16 grads"));
        c.grad_f32 = f32;
        run_and_check(c, 200 + D + b.bm, /*meta_on_device=*/false, GradMode::kWrite);
      }
    }
  }
}

// kWrite on the default tiles: one causal document (the benchmark's case) and packed documents.
TEST(CudaAttention, WriteModeCausalAndVarlen) {
  REQUIRE_GPU();
  run_and_check(single_doc(333, 4, 4, 128, true), 88, false, GradMode::kWrite);
  Case c = single_doc(333, 8, 2, 64, true);
  const int32_t cu[] = {0, 100, 230, 333};
  for (int d = 0; d < 3; ++d)
    for (int32_t t = cu[d]; t < cu[d + 1]; ++t) c.qseg[t] = c.kseg[t] = d;
  run_and_check(c, 99, true, GradMode::kWrite);
}

// Keys in two blocks (a ring step): forward on each, attn_merge, then each block's backward with
// the merged out/lse accumulating into one dq: together they must equal the whole.
TEST(CudaAttention, SplitKeysMergeEqualsFull) {
  REQUIRE_GPU();
  Case c = single_doc(257, 4, 2, 128, true);
  c.out_f32 = true;
  c.grad_f32 = true;
  const Inputs in = make_inputs(c, 77);
  const Ref exact = reference(c, in, false), lowp = reference(c, in, true);
  const int64_t split = 130, H = c.H, Hkv = c.Hkv, D = c.D, Tq = c.Tq;
  const Shape qs{Tq, H, D};
  Tensor q = device_tensor(in.q, qs, false), dout = device_tensor(in.dout, qs, false);
  Tensor k = device_tensor(in.k, {c.Tk, Hkv, D}, false), v = device_tensor(in.v, {c.Tk, Hkv, D}, false);
  const TokenMeta qm = meta(c.qseg, c.qpos, false), km = meta(c.kseg, c.kpos, false);
  const int64_t bounds[3] = {0, split, c.Tk};

  // Block 1 (keys >= split) first: early queries see none of it (lse -inf); its out rows there are
  // then poisoned, since an empty accumulator's out must not be read by the merge.
  Tensor out_acc = poisoned(qs, DType::kF32), lse_acc = poisoned({Tq, H}, DType::kF32);
  Tensor out_part = poisoned(qs, DType::kF32), lse_part = poisoned({Tq, H}, DType::kF32);
  {
    Tensor kb = k.rows(bounds[1], bounds[2]), vb = v.rows(bounds[1], bounds[2]);
    cuda_attn::attn_forward(out_acc, lse_acc, q, kb, vb,
                            AttnArgs{qm, km.rows(bounds[1], bounds[2]), true, c.scale()});
    std::vector<float> l = lse_acc.to_f32_vector();
    std::vector<float> o = out_acc.to_f32_vector();
    int empty_rows = 0;
    for (int64_t r = 0; r < Tq * H; ++r) {
      if (l[r] != -INFINITY) continue;
      ++empty_rows;
      for (int64_t d = 0; d < D; ++d) {
        EXPECT_EQ(o[r * D + d], 0.f) << "row with no visible key must have out 0";
        o[r * D + d] = NAN;
      }
    }
    EXPECT_EQ(empty_rows, split * H);  // queries 0..split-1 see no key >= split
    out_acc.copy_from(Tensor::from_vector<float>(qs, o));
  }
  {
    Tensor kb = k.rows(bounds[0], bounds[1]), vb = v.rows(bounds[0], bounds[1]);
    cuda_attn::attn_forward(out_part, lse_part, q, kb, vb,
                            AttnArgs{qm, km.rows(bounds[0], bounds[1]), true, c.scale()});
  }
  cuda_attn::attn_merge(out_acc, lse_acc, out_part, lse_part);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_within_rule("merged out", out_acc, exact.out, lowp.out);
  expect_lse(lse_acc, exact.lse);

  Tensor dq = device_tensor(in.dq0, qs, true);
  Tensor dk = device_tensor(in.dk0, {c.Tk, Hkv, D}, true), dv = device_tensor(in.dv0, {c.Tk, Hkv, D}, true);
  for (int b = 0; b < 2; ++b) {
    Tensor kb = k.rows(bounds[b], bounds[b + 1]), vb = v.rows(bounds[b], bounds[b + 1]);
    Tensor dkb = dk.rows(bounds[b], bounds[b + 1]), dvb = dv.rows(bounds[b], bounds[b + 1]);
    cuda_attn::attn_backward(dq, dkb, dvb, dout, q, kb, vb, out_acc, lse_acc,
                             AttnArgs{qm, km.rows(bounds[b], bounds[b + 1]), true, c.scale()});
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_within_rule("dq (two key blocks)", dq, exact.dq, lowp.dq);
  expect_within_rule("dk (two key blocks)", dk, exact.dk, lowp.dk);
  expect_within_rule("dv (two key blocks)", dv, exact.dv, lowp.dv);
}

// attn_merge alone, bf16 outputs, against the formula in double; -inf on either side.
TEST(CudaAttention, MergeBf16) {
  REQUIRE_GPU();
  const int64_t T = 37, H = 3, D = 128, rows = T * H;
  std::vector<float> oa = rounded(random_vector(rows * D, 91)), op = rounded(random_vector(rows * D, 92));
  std::vector<float> la = random_vector(rows, 93, -3.f, 5.f), lp = random_vector(rows, 94, -3.f, 5.f);
  for (int64_t r = 0; r < rows; r += 7) la[r] = -INFINITY;
  for (int64_t r = 3; r < rows; r += 5) lp[r] = -INFINITY;
  std::vector<double> want_o(rows * D), want_lo(rows * D), want_l(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const double a = la[r], p = lp[r];
    double wa = 1, wp = 0, l = a;
    if (p != -kInf) {
      if (a == -kInf) {
        wa = 0, wp = 1, l = p;
      } else {
        const double mx = std::max(a, p);
        l = mx + std::log(std::exp(a - mx) + std::exp(p - mx));
        wa = std::exp(a - l);
        wp = std::exp(p - l);
      }
    }
    want_l[r] = l;
    for (int64_t d = 0; d < D; ++d) {
      // Two empties give 0; an empty side's out is never read.
      const double x = a == -kInf && p == -kInf
                           ? 0.0
                           : (a != -kInf ? wa * oa[r * D + d] : 0.0) + (p != -kInf ? wp * op[r * D + d] : 0.0);
      want_o[r * D + d] = x;
      want_lo[r * D + d] = rb(x);
    }
  }
  for (int64_t r = 0; r < rows; r += 7)  // empty accumulator rows: out must not be read
    for (int64_t d = 0; d < D; ++d) oa[r * D + d] = NAN;
  Tensor out_acc = device_tensor(oa, {T, H, D}, false), out_part = device_tensor(op, {T, H, D}, false);
  Tensor lse_acc = device_tensor(la, {T, H}, true), lse_part = device_tensor(lp, {T, H}, true);
  cuda_attn::attn_merge(out_acc, lse_acc, out_part, lse_part);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_within_rule("merge out", out_acc, want_o, want_lo);
  const std::vector<float> l = lse_acc.to_f32_vector();
  for (int64_t r = 0; r < rows; ++r) {
    if (want_l[r] == -kInf) {
      EXPECT_EQ(l[r], -INFINITY) << r;
    } else {
      EXPECT_NEAR(l[r], want_l[r], 1e-5 * (1 + std::abs(want_l[r]))) << r;
    }
  }
}

TEST(CudaAttention, RejectsBadInputs) {
  REQUIRE_GPU();
  Case c = single_doc(16, 2, 2, 64, true);
  const AttnArgs args{meta(c.qseg, c.qpos, false), meta(c.kseg, c.kpos, false), true, c.scale()};
  const std::vector<float> x = random_vector(16 * 2 * 64, 5);
  Tensor qf32 = device_tensor(x, {16, 2, 64}, true), q = device_tensor(x, {16, 2, 64}, false);
  Tensor out = poisoned({16, 2, 64}, DType::kBF16), lse = poisoned({16, 2}, DType::kF32);
  EXPECT_THROW(cuda_attn::attn_forward(out, lse, qf32, q, q, args), Error);  // f32 q
  const std::vector<float> y = random_vector(16 * 2 * 96, 6);
  Tensor q96 = device_tensor(y, {16, 2, 96}, false);
  Tensor out96 = poisoned({16, 2, 96}, DType::kBF16);
  EXPECT_THROW(cuda_attn::attn_forward(out96, lse, q96, q96, q96, args), Error);  // D = 96
  Tensor k3 = device_tensor(random_vector(16 * 3 * 64, 7), {16, 3, 64}, false);
  EXPECT_THROW(cuda_attn::attn_forward(out, lse, q, k3, k3, args), Error);  // H % Hkv != 0
}

// Not a test: runs `seqpar bench attention` from this binary, for the GPU machine's scripts
// (--gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Bench*'). Settings from the
// environment: SEQPAR_BENCH_SEQ_LENS, SEQPAR_BENCH_HEAD_DIMS, SEQPAR_BENCH_PASSES, SEQPAR_BENCH_OUT.
TEST(CudaAttention, DISABLED_Bench) {
  REQUIRE_GPU();
  BenchAttentionOptions o;
  if (const char* e = std::getenv("SEQPAR_BENCH_SEQ_LENS")) o.seq_lens = e;
  if (const char* e = std::getenv("SEQPAR_BENCH_HEAD_DIMS")) o.head_dims = e;
  if (const char* e = std::getenv("SEQPAR_BENCH_PASSES")) o.passes = e;
  if (const char* e = std::getenv("SEQPAR_BENCH_OUT")) o.out = e;
  EXPECT_EQ(run_bench_attention(o), 0);
}

}  // namespace
}  // namespace seqpar
