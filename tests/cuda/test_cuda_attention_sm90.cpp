// The Hopper (sm_90) wgmma attention kernels beyond the op harness's cases (every attention case
// runs on them, and is compared with the mma.sync kernels, in test_cuda_op_harness.cpp): the
// default policy routes to them, and what they refuse is an error when forced. Skipped without a
// compute capability 9.0 GPU, except the error for forcing them elsewhere.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

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
