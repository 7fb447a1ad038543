// The Hopper wgmma backward main kernel (attention/cuda/attn_bwd_sm90.cu) against its peer, the
// mma.sync backward (SEQPAR_FLASH_BWD_KERNEL=mma), and the reference, seqpar's CPU attention
// backward in f32 on the same bf16-valued inputs. Rule (flash-attention's 2x rule, the mma.sync
// kernel standing in for the bf16 computation): for each of dq, dk, dv the wgmma kernel's relative
// L2 error against the reference stays within 2x the mma.sync kernel's, plus a small floor.
// Both GPU backwards consume the same GPU forward's out / lse. GradMode::kWrite: the gradients
// start as NaN and every element must be stored; kAccumulate: they start from random values and
// must end as prefill + gradient. Skipped without a compute capability 9.0 GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention/cuda/attention_cuda.h"
#include "attention/cuda/attn_bwd_sm90.h"
#include "attention/cuda/attn_launch.h"
#include "core/error.h"
#include "core/tensor.h"
#include "sm90_test_util.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::meta_of;
using testing::random_vector;

// Sets SEQPAR_FLASH_BWD_KERNEL for one scope.
struct KernelEnv : testing::ScopedEnv {
  explicit KernelEnv(const char* value) : ScopedEnv("SEQPAR_FLASH_BWD_KERNEL", value) {}
};

// One backward problem: sizes, mask metadata, gradient dtype and mode.
struct Problem {
  int64_t Tq, Tk, H, Hkv, D;
  TokenMeta qm, km;
  bool causal = true;
  bool grad_f32 = false;
  GradMode mode = GradMode::kWrite;
  float scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))); }
  AttnArgs args() const { return AttnArgs{qm, km, causal, scale()}; }
};

Problem one_doc(int64_t T, int64_t H, int64_t Hkv, int64_t D, bool causal) {
  const TokenMeta m = token_meta_from_cu_seqlens({0, static_cast<int32_t>(T)});
  return {T, T, H, Hkv, D, m, m, causal};
}

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

struct Inputs {
  std::vector<float> q, k, v, dout;  // bf16-representable values
  std::vector<float> dq0, dk0, dv0;  // the accumulate mode's prefill (representable in the grad dtype)
};

Inputs make_inputs(const Problem& c, uint64_t seed) {
  const size_t nq = c.Tq * c.H * c.D, nk = c.Tk * c.Hkv * c.D;
  Inputs in{random_vector(nq, seed + 1, -1.5f, 1.5f), random_vector(nk, seed + 2, -1.5f, 1.5f),
            random_vector(nk, seed + 3, -1.f, 1.f),   random_vector(nq, seed + 4, -1.f, 1.f),
            random_vector(nq, seed + 5, -0.1f, 0.1f), random_vector(nk, seed + 6, -0.1f, 0.1f),
            random_vector(nk, seed + 7, -0.1f, 0.1f)};
  for (std::vector<float>* t : {&in.q, &in.k, &in.v, &in.dout}) {
    for (float& x : *t) x = round_bf16(x);
  }
  if (!c.grad_f32) {
    for (std::vector<float>* t : {&in.dq0, &in.dk0, &in.dv0})
      for (float& x : *t) x = round_bf16(x);
  }
  return in;
}

struct Grads {
  std::vector<float> dq, dk, dv;
};

// seqpar's CPU attention (f32): forward, then the backward's gradients alone (kWrite).
Grads run_cpu(const Problem& c, const Inputs& in) {
  Tensor q = Tensor::from_vector<float>({c.Tq, c.H, c.D}, in.q);
  Tensor k = Tensor::from_vector<float>({c.Tk, c.Hkv, c.D}, in.k);
  Tensor v = Tensor::from_vector<float>({c.Tk, c.Hkv, c.D}, in.v);
  Tensor dout = Tensor::from_vector<float>({c.Tq, c.H, c.D}, in.dout);
  Tensor out = Tensor::empty({c.Tq, c.H, c.D}, DType::kF32, Device::cpu());
  Tensor lse = Tensor::empty({c.Tq, c.H}, DType::kF32, Device::cpu());
  attn_forward(out, lse, q, k, v, c.args());
  Tensor dq = Tensor::empty({c.Tq, c.H, c.D}, DType::kF32, Device::cpu());
  Tensor dk = Tensor::empty({c.Tk, c.Hkv, c.D}, DType::kF32, Device::cpu());
  Tensor dv = Tensor::empty({c.Tk, c.Hkv, c.D}, DType::kF32, Device::cpu());
  attn_backward(dq, dk, dv, dout, q, k, v, out, lse, c.args(), GradMode::kWrite);
  return {dq.to_f32_vector(), dk.to_f32_vector(), dv.to_f32_vector()};
}

Tensor gpu_bf16(const std::vector<float>& v, const Shape& shape) {
  return Tensor::from_vector<float>(shape, v).to_dtype(DType::kBF16).to(Device::cuda(0));
}

// A gradient buffer as the mode wants it: NaN (kWrite) or the prefill (kAccumulate).
Tensor grad_buffer(const Problem& c, const std::vector<float>& prefill, const Shape& shape) {
  const DType dt = c.grad_f32 ? DType::kF32 : DType::kBF16;
  if (c.mode == GradMode::kAccumulate) {
    Tensor t = Tensor::from_vector<float>(shape, prefill);
    if (!c.grad_f32) t = t.to_dtype(DType::kBF16);
    return t.to(Device::cuda(0));
  }
  Tensor t = Tensor::empty(shape, dt, Device::cuda(0));
  EXPECT_EQ(cudaMemset(t.raw(), 0xff, t.nbytes()), cudaSuccess);  // NaN in bf16 and f32
  return t;
}

// The GPU forward (default kernel) once, then the backward per kernel family.
struct GpuRun {
  const Problem& c;
  Tensor q, k, v, dout, out, lse;

  GpuRun(const Problem& pc, const Inputs& in) : c(pc) {
    q = gpu_bf16(in.q, {c.Tq, c.H, c.D});
    k = gpu_bf16(in.k, {c.Tk, c.Hkv, c.D});
    v = gpu_bf16(in.v, {c.Tk, c.Hkv, c.D});
    dout = gpu_bf16(in.dout, {c.Tq, c.H, c.D});
    out = Tensor::empty({c.Tq, c.H, c.D}, DType::kBF16, Device::cuda(0));
    lse = Tensor::empty({c.Tq, c.H}, DType::kF32, Device::cuda(0));
    cuda_attn::attn_forward(out, lse, q, k, v, c.args());
  }

  // Gradients as stored (prefill included in kAccumulate), as f32.
  Grads backward(const Inputs& in, const char* kernel) {
    const KernelEnv env(kernel);
    Tensor dq = grad_buffer(c, in.dq0, {c.Tq, c.H, c.D});
    Tensor dk = grad_buffer(c, in.dk0, {c.Tk, c.Hkv, c.D});
    Tensor dv = grad_buffer(c, in.dv0, {c.Tk, c.Hkv, c.D});
    cuda_attn::attn_backward(dq, dk, dv, dout, q, k, v, out, lse, c.args(), c.mode);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return {dq.to_f32_vector(), dk.to_f32_vector(), dv.to_f32_vector()};
  }
};

// ||(a - prefill) - ref|| / ||ref|| (prefill empty: none); inf when a holds a non-finite value.
double rel_l2(const std::vector<float>& a, const std::vector<float>& prefill, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(a[i]) - (prefill.empty() ? 0.0 : prefill[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Runs the CPU reference and both GPU backwards and checks the rule for dq, dk, dv. Returns the
// wgmma gradients (as stored) for callers that check more.
Grads check_problem(const Problem& c, uint64_t seed) {
  const Inputs in = make_inputs(c, seed);
  const Grads ref = run_cpu(c, in);
  GpuRun gpu(c, in);
  const Grads wg = gpu.backward(in, "wgmma");
  const Grads mma = gpu.backward(in, "mma");
  const bool acc = c.mode == GradMode::kAccumulate;
  const std::vector<float> none;
  struct Item {
    const char* name;
    const std::vector<float>&wg, &mma, &ref, &prefill;
  };
  const Item items[] = {{"dq", wg.dq, mma.dq, ref.dq, acc ? in.dq0 : none},
                        {"dk", wg.dk, mma.dk, ref.dk, acc ? in.dk0 : none},
                        {"dv", wg.dv, mma.dv, ref.dv, acc ? in.dv0 : none}};
  for (const Item& it : items) {
    const double e_wg = rel_l2(it.wg, it.prefill, it.ref), e_mma = rel_l2(it.mma, it.prefill, it.ref);
    EXPECT_LE(e_wg, 2.0 * e_mma + 1e-4) << it.name << ": wgmma rel err " << e_wg << " vs mma.sync " << e_mma;
    EXPECT_LT(e_wg, 3e-2) << it.name << ": wgmma rel err against the CPU";
  }
  return wg;
}

TEST(CudaAttentionBwdSm90, CausalMhaD128RaggedWrite) {
  REQUIRE_SM90();
  check_problem(one_doc(1000, 2, 2, 128, true), 201);
}

TEST(CudaAttentionBwdSm90, CausalGqaD64RaggedAccumulateF32) {
  REQUIRE_SM90();
  Problem c = one_doc(1000, 8, 2, 64, true);
  c.mode = GradMode::kAccumulate;
  c.grad_f32 = true;
  check_problem(c, 202);
}

TEST(CudaAttentionBwdSm90, NonCausalGqaD128Accumulate) {
  REQUIRE_SM90();
  Problem c = one_doc(300, 8, 2, 128, false);
  c.mode = GradMode::kAccumulate;
  check_problem(c, 203);
}

TEST(CudaAttentionBwdSm90, NonCausalMhaD64WriteF32) {
  REQUIRE_SM90();
  Problem c = one_doc(1000, 2, 2, 64, false);
  c.grad_f32 = true;
  check_problem(c, 204);
}

TEST(CudaAttentionBwdSm90, PackedThreeDocuments) {
  REQUIRE_SM90();
  for (int64_t D : {64, 128}) {
    SCOPED_TRACE("D=" + std::to_string(D));
    const TokenMeta m = token_meta_from_cu_seqlens({0, 300, 437, 1000});
    check_problem(Problem{1000, 1000, 4, 2, D, m, m, true}, 205 + D);
  }
}

// A ring step: queries at positions 600..999 against keys at 0..499 of the same sequence (every
// key before every query), except 100 queries in a document no key belongs to (dq 0).
TEST(CudaAttentionBwdSm90, RingBlockAccumulate) {
  REQUIRE_SM90();
  std::vector<int32_t> qseg, qpos, kseg, kpos;
  for (int32_t i = 0; i < 400; ++i) {
    qseg.push_back(i < 300 ? 0 : 1);
    qpos.push_back(600 + i);
  }
  for (int32_t j = 0; j < 500; ++j) {
    kseg.push_back(0);
    kpos.push_back(j);
  }
  for (int64_t D : {64, 128}) {
    SCOPED_TRACE("D=" + std::to_string(D));
    Problem c{400, 500, 4, 1, D, meta_of(qseg, qpos), meta_of(kseg, kpos), true};
    c.mode = GradMode::kAccumulate;
    const Inputs in = make_inputs(c, 207 + D);
    const Grads wg = check_problem(c, 207 + D);
    // Rows 300..399 of every head see nothing: dq keeps its prefill exactly.
    for (int64_t r = 300 * c.H; r < 400 * c.H; ++r)
      for (int64_t d = 0; d < D; ++d)
        ASSERT_EQ(wg.dq[r * D + d], in.dq0[r * D + d]) << "unseen row " << r / c.H << " head " << r % c.H;
  }
}

// Keys 300..399 in a segment no query has (whole unseen key tiles of 128: write mode must store
// their zeros), queries 250..299 in a segment no key has.
TEST(CudaAttentionBwdSm90, WriteModeUnseenKeyTiles) {
  REQUIRE_SM90();
  std::vector<int32_t> qseg, qpos, kseg, kpos;
  for (int32_t i = 0; i < 300; ++i) {
    qseg.push_back(i < 250 ? 0 : 3);
    qpos.push_back(i);
  }
  for (int32_t j = 0; j < 520; ++j) {
    kseg.push_back(j < 300 ? 0 : 2);
    kpos.push_back(j);
  }
  for (int64_t D : {64, 128})
    for (bool f32 : {false, true}) {
      SCOPED_TRACE("D=" + std::to_string(D) + (f32 ? " f32 grads" : " bf16 grads"));
      Problem c{300, 520, 4, 2, D, meta_of(qseg, qpos), meta_of(kseg, kpos), true};
      c.grad_f32 = f32;
      const Grads wg = check_problem(c, 209 + D + f32);
      for (int64_t r = 300 * c.Hkv * D; r < 520 * c.Hkv * D; ++r) {
        ASSERT_EQ(wg.dk[r], 0.f) << "unseen key element " << r;
        ASSERT_EQ(wg.dv[r], 0.f) << "unseen key element " << r;
      }
    }
}

// A ring step whose keys all come after every query: no tile is visible. Write mode stores zeros
// everywhere; accumulate mode leaves the prefill exactly as it was.
TEST(CudaAttentionBwdSm90, FullyMaskedBlock) {
  REQUIRE_SM90();
  std::vector<int32_t> seg(300, 0), qpos, kpos;
  for (int32_t i = 0; i < 300; ++i) {
    qpos.push_back(i);
    kpos.push_back(1000 + i);
  }
  for (GradMode mode : {GradMode::kWrite, GradMode::kAccumulate}) {
    SCOPED_TRACE(mode == GradMode::kWrite ? "write" : "accumulate");
    Problem c{300, 300, 2, 2, 128, meta_of(seg, qpos), meta_of(seg, kpos), true};
    c.mode = mode;
    const Inputs in = make_inputs(c, 213);
    GpuRun gpu(c, in);
    const Grads g = gpu.backward(in, "wgmma");
    const bool write = mode == GradMode::kWrite;
    for (size_t i = 0; i < g.dq.size(); ++i) ASSERT_EQ(g.dq[i], write ? 0.f : in.dq0[i]) << "dq " << i;
    for (size_t i = 0; i < g.dk.size(); ++i) {
      ASSERT_EQ(g.dk[i], write ? 0.f : in.dk0[i]) << "dk " << i;
      ASSERT_EQ(g.dv[i], write ? 0.f : in.dv0[i]) << "dv " << i;
    }
  }
}

// The default (auto) picks the wgmma kernel on sm_90: dk / dv bit-identical (each key's CTA sums
// in a fixed order; dq goes through atomics in varying order). D=64 with GQA, where the two kernels
// sum dK / dV in different orders (mma.sync: 128-query steps, heads inside; wgmma: 64-query steps);
// with equal steps (D=128, 64 queries) both give the same bits, the tensor cores adding each k16
// chunk the same way.
TEST(CudaAttentionBwdSm90, AutoRoutesToWgmma) {
  REQUIRE_SM90();
  const Problem c = one_doc(700, 4, 2, 64, true);
  const Inputs in = make_inputs(c, 214);
  GpuRun gpu(c, in);
  const Grads a = gpu.backward(in, "auto"), w = gpu.backward(in, "wgmma"), m = gpu.backward(in, "mma");
  EXPECT_EQ(a.dk, w.dk);
  EXPECT_EQ(a.dv, w.dv);
  EXPECT_NE(a.dk, m.dk) << "the two kernels sum in different orders; identical results would mean one ran twice";
}

// What the sm_90 kernel refuses falls back to mma.sync under auto and is an error when forced; an
// unknown setting is an error.
TEST(CudaAttentionBwdSm90, UnsupportedCallsAndBadSetting) {
  REQUIRE_SM90();
  cuda_attn::BwdParams p{};
  alignas(16) static const uint16_t buf[64] = {};
  alignas(16) static float fbuf[64] = {};
  p.q = p.k = p.v = p.dout = buf;
  p.dq_acc = p.lse2 = p.delta = fbuf;
  p.Tq = p.Tk = 1;
  p.H = p.Hkv = 1;
  p.D = 128;
  EXPECT_TRUE(cuda_attn::bwd_sm90_supported(p));
  p.dout = buf + 1;  // 2-byte aligned: the tensor copies need 16 bytes
  EXPECT_FALSE(cuda_attn::bwd_sm90_supported(p));
  {
    const KernelEnv env("wgmma");
    EXPECT_THROW(cuda_attn::launch_bwd(p, cuda_attn::bwd_tile(128), nullptr), InputError);
  }
  p.dout = buf;
  p.H = 3;
  p.Hkv = 2;
  EXPECT_FALSE(cuda_attn::bwd_sm90_supported(p));
  p.H = p.Hkv = 1;
  p.D = 96;
  EXPECT_FALSE(cuda_attn::bwd_sm90_supported(p));
  const Problem c = one_doc(10, 1, 1, 64, true);
  const Inputs in = make_inputs(c, 215);
  GpuRun gpu(c, in);
  EXPECT_THROW(gpu.backward(in, "tensor-cores"), InputError);
}

}  // namespace
}  // namespace seqpar
