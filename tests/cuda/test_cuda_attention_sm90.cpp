// The Hopper (sm_90) wgmma attention kernels beyond the op harness's cases (every attention case
// runs on them, and is compared with the mma.sync kernels, in test_cuda_op_harness.cpp): the
// default policy routes to them, and what they refuse is an error when forced. Skipped without a
// compute capability 9.0 GPU, except the error for forcing them elsewhere.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention/cuda/attn_bwd_sm90.h"
#include "attention/cuda/attn_fwd_sm90.h"
#include "attention/cuda/attn_launch.h"
#include "core/error.h"
#include "cuda/cuda_test_util.h"
#include "ops/op_harness.h"

namespace seqpar {
namespace {

using namespace optest;

// The flash backend with the default kernel choice (auto), on bf16 or f16 operands.
Backend default_flash(DType dt = DType::kBF16) {
  return Backend{std::string("cuda-flash-auto-") + std::string(dtype_name(dt)), Device::cuda(0), dt, {}, ""};
}

// The default (auto) picks the wgmma kernel on sm_90, in bf16 and in f16: bit-identical results.
TEST(CudaAttentionSm90, AutoRoutesToWgmmaForward) {
  REQUIRE_SM90();
  for (const DType dt : testing::flash_dtypes()) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    AttnCase c = attn_one_doc("auto forward", 700, 4, 2, 128, true);
    c.seed = 111;
    const AttnInputs in = attn_inputs(c);
    const AttnResult a = run_attention(c, in, default_flash(dt));
    const AttnResult w = run_attention(c, in, testing::flash_backend(FlashKernel::kWgmma, dt));
    const AttnResult m = run_attention(c, in, testing::flash_backend(FlashKernel::kMma, dt));
    EXPECT_EQ(a.fwd_path, AttnPath::kFlashWgmma) << attn_path_name(a.fwd_path);
    EXPECT_EQ(a.out, w.out);
    EXPECT_EQ(a.lse, w.lse);
    EXPECT_NE(a.out, m.out) << "the two kernels sum in different orders; identical results would mean one ran twice";
  }
}

// The same for the backward: dk / dv bit-identical (each key's CTA sums in a fixed order; dq goes
// through atomics in varying order). D=64 with GQA, where the two kernels sum dK / dV in different
// orders (mma.sync: 128-query steps, heads inside; wgmma: 64-query steps); with equal steps (D=128,
// 64 queries) both give the same bits, the tensor cores adding each k16 chunk the same way.
TEST(CudaAttentionSm90, AutoRoutesToWgmmaBackward) {
  REQUIRE_SM90();
  for (const DType dt : testing::flash_dtypes()) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    AttnCase c = attn_one_doc("auto backward", 700, 4, 2, 64, true);
    c.mode = GradMode::kWrite;
    c.seed = 214;
    const AttnInputs in = attn_inputs(c);
    const AttnResult a = run_attention(c, in, default_flash(dt));
    const AttnResult w = run_attention(c, in, testing::flash_backend(FlashKernel::kWgmma, dt));
    const AttnResult m = run_attention(c, in, testing::flash_backend(FlashKernel::kMma, dt));
    EXPECT_EQ(a.bwd_path, AttnPath::kFlashWgmma) << attn_path_name(a.bwd_path);
    EXPECT_EQ(a.dk, w.dk);
    EXPECT_EQ(a.dv, w.dv);
    EXPECT_NE(a.dk, m.dk) << "the two kernels sum in different orders; identical results would mean one ran twice";
  }
}

// Head dim 96 (GPT 30B) is not the wgmma kernels' (whole 64-column TMA boxes): on sm_90 the default
// policy runs it on the mma.sync kernel in both directions, bit-identical to forcing mma.sync, and
// forcing wgmma is an InputError that says where D=96 runs (docs/kernel-policy.md); bf16 and f16.
TEST(CudaAttentionSm90, HeadDim96RunsOnTheMmaKernel) {
  REQUIRE_SM90();
  for (const DType dt : testing::flash_dtypes()) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    AttnCase c = attn_one_doc("auto D96", 700, 4, 2, 96, true);
    c.mode = GradMode::kWrite;
    c.seed = 396;
    const AttnInputs in = attn_inputs(c);
    const AttnResult a = run_attention(c, in, default_flash(dt));
    const AttnResult m = run_attention(c, in, testing::flash_backend(FlashKernel::kMma, dt));
    EXPECT_EQ(a.fwd_path, AttnPath::kFlashMma) << attn_path_name(a.fwd_path);
    EXPECT_EQ(a.bwd_path, AttnPath::kFlashMma) << attn_path_name(a.bwd_path);
    EXPECT_EQ(a.out, m.out);
    EXPECT_EQ(a.lse, m.lse);
    EXPECT_EQ(a.dk, m.dk);
    EXPECT_EQ(a.dv, m.dv);
    std::string why;
    EXPECT_TRUE(check_attention(c, default_flash(dt), &why)) << why;
    for (bool forward : {true, false}) {
      Backend b = testing::flash_backend(FlashKernel::kMma, dt);
      (forward ? b.attention.fwd_kernel : b.attention.bwd_kernel) = FlashKernel::kWgmma;
      try {
        run_attention(c, in, b);
        ADD_FAILURE() << (forward ? "forward" : "backward") << ": forcing wgmma at D=96 was accepted";
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("D=96 runs on the mma.sync kernel"), std::string::npos) << e.what();
      }
    }
  }
}

// Scores that rise far across a row's key tiles: one direction u (entries +-1), every query u and key j a_j u, so
// that a key's score is a_j sqrt(D) for every query; a_j 0.125 on the first 256 keys, 7 on keys [512, 640) (56
// nats above them at D = 64: past 2^64 in the forward's exponent against the first tiles' maximum), 12 on keys
// [768, 832) (at D = 128 past f32's range), 0.5 elsewhere. The forward must move its maximum (or compute the tile
// again) wherever a tile's scores outrun it: wgmma and mma.sync kernels, bf16 and f16, D 64 and 128, causal and not,
// against the f64 reference by check_attention's rule: out, lse and (read back from them) dk, dv. Not dq: its bf16
// baseline is itself 3-4% off here (the keys' common component cancels in dq only in exact arithmetic), beyond the
// 2% within which the rule means anything; the other cases check it.
TEST(CudaAttentionSm90, ScoresRisingAcrossKeyTilesMatchTheReference) {
  REQUIRE_SM90();
  const Rule rule{1e-6, false};
  for (const int64_t D : {64, 128})
    for (const bool causal : {false, true}) {
      AttnCase c = attn_one_doc("rising scores", 1000, 2, 1, D, causal);
      c.seed = 77 + D + causal;
      AttnInputs in = attn_inputs(c);
      std::vector<float> u(D);
      for (int64_t d = 0; d < D; ++d) u[d] = ((d * 7 + 3) % 5) < 2 ? -1.f : 1.f;
      for (int64_t i = 0; i < c.Tq; ++i)
        for (int64_t h = 0; h < c.H; ++h)
          for (int64_t d = 0; d < D; ++d) in.q[(i * c.H + h) * D + d] = u[d];
      for (int64_t j = 0; j < c.Tk; ++j) {
        const float a = j < 256 ? 0.125f : (j >= 512 && j < 640) ? 7.f : (j >= 768 && j < 832) ? 12.f : 0.5f;
        for (int64_t h = 0; h < c.Hkv; ++h)
          for (int64_t d = 0; d < D; ++d) in.k[(j * c.Hkv + h) * D + d] = a * u[d];
      }
      const AttnRef exact = attn_reference(c, in, false);
      for (const DType dt : testing::flash_dtypes()) {
        const AttnRef base = attn_reference(c, in, dt);
        for (const FlashKernel k : {FlashKernel::kWgmma, FlashKernel::kMma}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + (k == FlashKernel::kWgmma ? " wgmma" : " mma.sync") +
                       " D=" + std::to_string(D) + (causal ? " causal" : ""));
          const AttnResult got = run_attention(c, in, testing::flash_backend(k, dt));
          EXPECT_EQ(got.fwd_path, k == FlashKernel::kWgmma ? AttnPath::kFlashWgmma : AttnPath::kFlashMma)
              << attn_path_name(got.fwd_path);
          expect_within_2x("out", got.out, base.out, exact.out, rule);
          expect_lse("lse", got.lse, exact.lse, 1e-4);
          expect_within_2x("dk", got.dk, base.dk, exact.dk, rule);
          expect_within_2x("dv", got.dv, base.dv, exact.dv, rule);
        }
      }
    }
}

// What the sm_90 forward refuses falls back to mma.sync under auto and is an error when forced.
TEST(CudaAttentionSm90, UnsupportedForwardCalls) {
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
  EXPECT_THROW(cuda_attn::launch_fwd(p, cuda_attn::fwd_tile(128), FlashKernel::kWgmma,
                                     device_compute_capability(Device::cuda(0)), nullptr),
               InputError);
  p.k = buf;
  p.H = 3;
  p.Hkv = 2;
  EXPECT_FALSE(cuda_attn::fwd_sm90_supported(p));
  p.H = p.Hkv = 1;
  p.D = 96;
  EXPECT_FALSE(cuda_attn::fwd_sm90_supported(p));
}

// The same for the backward's main kernel.
TEST(CudaAttentionSm90, UnsupportedBackwardCalls) {
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
  EXPECT_THROW(cuda_attn::launch_bwd(p, cuda_attn::bwd_tile(128), FlashKernel::kWgmma,
                                     device_compute_capability(Device::cuda(0)), nullptr),
               InputError);
  p.dout = buf;
  p.H = 3;
  p.Hkv = 2;
  EXPECT_FALSE(cuda_attn::bwd_sm90_supported(p));
  p.H = p.Hkv = 1;
  p.D = 96;
  EXPECT_FALSE(cuda_attn::bwd_sm90_supported(p));
}

// Forcing wgmma on a device that is not sm_90 is an InputError naming the setting.
TEST(CudaAttentionSm90, ForcedWgmmaElsewhereIsAnInputError) {
  REQUIRE_GPU();
  if (testing::sm90_skip_reason().empty()) GTEST_SKIP() << "device 0 is sm_90: the wgmma kernels run there";
  AttnCase c = attn_one_doc("forced wgmma", 10, 2, 2, 64, true);
  Backend b = testing::flash_backend(FlashKernel::kWgmma);
  try {
    run_attention(c, attn_inputs(c), b);
    ADD_FAILURE() << "wgmma ran on a device that is not sm_90";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("SEQPAR_FLASH_FWD_KERNEL)=wgmma needs a compute capability 9.0 device"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace seqpar
