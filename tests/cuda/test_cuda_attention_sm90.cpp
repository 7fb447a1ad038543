// The Hopper wgmma forward (attention/cuda/attn_fwd_sm90.cu) against its peer, the mma.sync forward
// (SEQPAR_FLASH_FWD_KERNEL=mma), and the reference, seqpar's CPU attention in f32 on the same
// bf16-valued inputs. Rule (flash-attention's 2x rule, the mma.sync kernel standing in for the
// bf16 computation): the wgmma kernel's relative L2 error against the reference must stay within
// 2x the mma.sync kernel's, plus a tiny floor; lse within an absolute bound; rows that see no key
// must give out exactly 0 and lse -inf. Outputs are poisoned (NaN) before every run. Skipped
// without a compute capability 9.0 GPU.
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
#include "attention/cuda/attn_fwd_sm90.h"
#include "attention/cuda/attn_launch.h"
#include "core/error.h"
#include "core/tensor.h"
#include "sm90_test_util.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::meta_of;
using testing::random_vector;

// Sets SEQPAR_FLASH_FWD_KERNEL for one scope.
struct KernelEnv : testing::ScopedEnv {
  explicit KernelEnv(const char* value) : ScopedEnv("SEQPAR_FLASH_FWD_KERNEL", value) {}
};

// One forward problem: sizes, mask metadata, output dtype.
struct Problem {
  int64_t Tq, Tk, H, Hkv, D;
  TokenMeta qm, km;
  bool causal = true;
  bool out_f32 = false;
  float scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))); }
};

// One document of T tokens, queries and keys the same tokens.
Problem one_doc(int64_t T, int64_t H, int64_t Hkv, int64_t D, bool causal) {
  const TokenMeta m = token_meta_from_cu_seqlens({0, static_cast<int32_t>(T)});
  return {T, T, H, Hkv, D, m, m, causal};
}

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

struct Inputs {
  std::vector<float> q, k, v;  // bf16-representable values
};

Inputs make_inputs(const Problem& c, uint64_t seed) {
  Inputs in{random_vector(c.Tq * c.H * c.D, seed + 1, -1.5f, 1.5f),
            random_vector(c.Tk * c.Hkv * c.D, seed + 2, -1.5f, 1.5f),
            random_vector(c.Tk * c.Hkv * c.D, seed + 3, -1.f, 1.f)};
  for (std::vector<float>* t : {&in.q, &in.k, &in.v})
    for (float& x : *t) x = round_bf16(x);
  return in;
}

struct Result {
  std::vector<float> out, lse;
};

// seqpar's CPU attention (f32) on the inputs.
Result run_cpu(const Problem& c, const Inputs& in) {
  Tensor q = Tensor::from_vector<float>({c.Tq, c.H, c.D}, in.q);
  Tensor k = Tensor::from_vector<float>({c.Tk, c.Hkv, c.D}, in.k);
  Tensor v = Tensor::from_vector<float>({c.Tk, c.Hkv, c.D}, in.v);
  Tensor out = Tensor::empty({c.Tq, c.H, c.D}, DType::kF32, Device::cpu());
  Tensor lse = Tensor::empty({c.Tq, c.H}, DType::kF32, Device::cpu());
  attn_forward(out, lse, q, k, v, AttnArgs{c.qm, c.km, c.causal, c.scale()});
  return {out.to_f32_vector(), lse.to_f32_vector()};
}

Tensor poisoned(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda(0));
  EXPECT_EQ(cudaMemset(t.raw(), 0xff, t.nbytes()), cudaSuccess);  // NaN in bf16 and f32
  return t;
}

// The CUDA forward with SEQPAR_FLASH_FWD_KERNEL=kernel.
Result run_gpu(const Problem& c, const Inputs& in, const char* kernel) {
  const KernelEnv env(kernel);
  Tensor q = Tensor::from_vector<float>({c.Tq, c.H, c.D}, in.q).to_dtype(DType::kBF16).to(Device::cuda(0));
  Tensor k = Tensor::from_vector<float>({c.Tk, c.Hkv, c.D}, in.k).to_dtype(DType::kBF16).to(Device::cuda(0));
  Tensor v = Tensor::from_vector<float>({c.Tk, c.Hkv, c.D}, in.v).to_dtype(DType::kBF16).to(Device::cuda(0));
  Tensor out = poisoned({c.Tq, c.H, c.D}, c.out_f32 ? DType::kF32 : DType::kBF16);
  Tensor lse = poisoned({c.Tq, c.H}, DType::kF32);
  cuda_attn::attn_forward(out, lse, q, k, v, AttnArgs{c.qm, c.km, c.causal, c.scale()});
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {out.to_f32_vector(), lse.to_f32_vector()};
}

// ||a - ref|| / ||ref||; inf when a holds a non-finite value.
double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// lse against a reference: -inf rows exactly, finite rows within `tol` (absolute, plus relative).
void expect_lse_near(const char* what, const std::vector<float>& got, const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = want[i] == -INFINITY
                        ? got[i] == -INFINITY
                        : std::isfinite(got[i]) && std::abs(got[i] - want[i]) <= tol + 1e-5 * std::abs(want[i]);
    if (!ok && bad++ < 5) ADD_FAILURE() << what << ": lse[" << i << "] = " << got[i] << ", expected " << want[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

// Runs both GPU kernels and the CPU reference and checks the rule. Returns the number of rows
// (token, head) that see no key, for the callers that expect some.
int64_t check_problem(const Problem& c, uint64_t seed) {
  const Inputs in = make_inputs(c, seed);
  const Result ref = run_cpu(c, in);
  const Result wg = run_gpu(c, in, "wgmma");
  const Result mma = run_gpu(c, in, "mma");
  const double e_wg = rel_l2(wg.out, ref.out), e_mma = rel_l2(mma.out, ref.out);
  EXPECT_LE(e_wg, 2.0 * e_mma + 1e-6) << "wgmma out rel err " << e_wg << " vs mma.sync " << e_mma;
  EXPECT_LT(e_wg, 1e-2) << "wgmma out rel err against the CPU";
  expect_lse_near("wgmma vs CPU", wg.lse, ref.lse, 1e-4);
  expect_lse_near("wgmma vs mma.sync", wg.lse, mma.lse, 1e-5);
  int64_t empty_rows = 0;
  for (int64_t r = 0; r < c.Tq * c.H; ++r) {
    if (ref.lse[r] != -INFINITY) continue;
    ++empty_rows;
    for (int64_t d = 0; d < c.D; ++d)
      if (wg.out[r * c.D + d] != 0.f) {
        ADD_FAILURE() << "row " << r << " sees no key but out[" << d << "] = " << wg.out[r * c.D + d];
        break;
      }
  }
  return empty_rows;
}

TEST(CudaAttentionSm90, CausalMhaD128Ragged) {
  REQUIRE_SM90();
  EXPECT_EQ(check_problem(one_doc(1000, 2, 2, 128, true), 101), 0);
}

TEST(CudaAttentionSm90, CausalGqaD64Ragged) {
  REQUIRE_SM90();
  EXPECT_EQ(check_problem(one_doc(1000, 8, 2, 64, true), 102), 0);
}

TEST(CudaAttentionSm90, NonCausalGqaD128) {
  REQUIRE_SM90();
  EXPECT_EQ(check_problem(one_doc(300, 8, 2, 128, false), 103), 0);
}

TEST(CudaAttentionSm90, NonCausalMhaD64ManyTiles) {
  REQUIRE_SM90();
  // 20 key tiles per query tile: the 3-stage ring wraps around several times.
  EXPECT_EQ(check_problem(one_doc(2500, 1, 1, 64, false), 104), 0);
}

TEST(CudaAttentionSm90, PackedThreeDocuments) {
  REQUIRE_SM90();
  for (int64_t D : {64, 128}) {
    SCOPED_TRACE("D=" + std::to_string(D));
    const TokenMeta m = token_meta_from_cu_seqlens({0, 300, 437, 1000});
    EXPECT_EQ(check_problem(Problem{1000, 1000, 4, 2, D, m, m, true}, 105 + D), 0);
  }
}

// A ring step: queries at positions 600..999 against keys at 0..499 of the same sequence (every
// key before every query, so causal masking hides nothing), except 100 queries in a document no
// key belongs to (out 0, lse -inf).
TEST(CudaAttentionSm90, RingBlockWithUnseenRows) {
  REQUIRE_SM90();
  for (int64_t D : {64, 128}) {
    SCOPED_TRACE("D=" + std::to_string(D));
    std::vector<int32_t> qseg, qpos, kseg, kpos;
    for (int32_t i = 0; i < 400; ++i) {
      qseg.push_back(i < 300 ? 0 : 1);
      qpos.push_back(600 + i);
    }
    for (int32_t j = 0; j < 500; ++j) {
      kseg.push_back(0);
      kpos.push_back(j);
    }
    const Problem c{400, 500, 4, 1, D, meta_of(qseg, qpos), meta_of(kseg, kpos), true};
    EXPECT_EQ(check_problem(c, 107 + D), 100 * 4);
  }
}

// A ring step whose keys all come after every query: nothing is visible (no tile is loaded).
TEST(CudaAttentionSm90, FullyMaskedBlock) {
  REQUIRE_SM90();
  std::vector<int32_t> seg(300, 0), qpos, kpos;
  for (int32_t i = 0; i < 300; ++i) {
    qpos.push_back(i);
    kpos.push_back(1000 + i);
  }
  const Problem c{300, 300, 2, 2, 128, meta_of(seg, qpos), meta_of(seg, kpos), true};
  EXPECT_EQ(check_problem(c, 109), 300 * 2);
}

TEST(CudaAttentionSm90, F32Output) {
  REQUIRE_SM90();
  for (int64_t D : {64, 128}) {
    SCOPED_TRACE("D=" + std::to_string(D));
    Problem c = one_doc(333, 4, 2, D, true);
    c.out_f32 = true;
    EXPECT_EQ(check_problem(c, 110 + D), 0);
  }
}

// The default (auto) picks the wgmma kernel on sm_90: bit-identical results.
TEST(CudaAttentionSm90, AutoRoutesToWgmma) {
  REQUIRE_SM90();
  const Problem c = one_doc(700, 4, 2, 128, true);
  const Inputs in = make_inputs(c, 111);
  const Result a = run_gpu(c, in, "auto"), w = run_gpu(c, in, "wgmma"), m = run_gpu(c, in, "mma");
  EXPECT_EQ(a.out, w.out);
  EXPECT_EQ(a.lse, w.lse);
  EXPECT_NE(a.out, m.out) << "the two kernels sum in different orders; identical results would mean one ran twice";
}

// What the sm_90 kernel refuses falls back to mma.sync under auto and is an error when forced.
TEST(CudaAttentionSm90, UnsupportedCallsAndBadSetting) {
  REQUIRE_SM90();
  cuda_attn::FwdParams p{};
  alignas(16) static const uint16_t buf[64] = {};
  p.q = p.k = p.v = buf;
  p.Tq = p.Tk = 1;
  p.H = p.Hkv = 1;
  p.D = 128;
  EXPECT_TRUE(cuda_attn::fwd_sm90_supported(p));
  p.k = buf + 1;  // 2-byte aligned: the tensor copies need 16 bytes
  EXPECT_FALSE(cuda_attn::fwd_sm90_supported(p));
  {
    const KernelEnv env("wgmma");
    EXPECT_THROW(cuda_attn::launch_fwd(p, cuda_attn::fwd_tile(128), nullptr), InputError);
  }
  p.k = buf;
  p.H = 3;
  p.Hkv = 2;
  EXPECT_FALSE(cuda_attn::fwd_sm90_supported(p));
  const Problem c = one_doc(10, 1, 1, 64, true);
  EXPECT_THROW(run_gpu(c, make_inputs(c, 112), "tensor-cores"), InputError);
}

}  // namespace
}  // namespace seqpar
