// cli/kernel_env.h: every SEQPAR_* kernel override read from an injected environment (never the
// process's), its effect on the KernelPolicy, and the InputError a malformed value gives.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "cli/kernel_env.h"
#include "core/error.h"

namespace seqpar {
namespace {

KernelPolicy from(std::map<std::string, std::string> vars) { return kernel_policy_from_env(map_env(std::move(vars))); }

// The message of the InputError reading `name`=`value` throws; "" (and a failure) when none.
std::string error_of(const std::string& name, const std::string& value) {
  try {
    from({{name, value}});
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << name << "=" << value << " was accepted";
  return "";
}

TEST(KernelEnv, NothingSetIsTheDefaultPolicy) {
  const KernelPolicy p = from({});
  EXPECT_EQ(p, KernelPolicy{});
  EXPECT_EQ(p.attention.backend, AttentionBackend::kFlash);
  EXPECT_EQ(p.attention.fwd_kernel, FlashKernel::kAuto);
  EXPECT_EQ(p.attention.bwd_kernel, FlashKernel::kAuto);
  EXPECT_TRUE(p.attention.fwd_tile.is_default());
  EXPECT_TRUE(p.attention.bwd_tile.is_default());
  EXPECT_EQ(p.attention.cudnn_dense, CudnnDense::kOn);
  EXPECT_TRUE(p.matmul.autotune);
  EXPECT_EQ(p.matmul.autotune_budget_ms, 50);
  EXPECT_EQ(p.ulysses_head_groups, 2);
  EXPECT_FALSE(p.profile);
}

// An empty variable is an unset one (as `VAR= seqpar ...` means).
TEST(KernelEnv, EmptyValuesAreUnset) {
  const char* names[] = {"SEQPAR_FLASH_FWD_KERNEL", "SEQPAR_FLASH_BWD_KERNEL",    "SEQPAR_FLASH_FWD_TILE",
                         "SEQPAR_FLASH_BWD_TILE",   "SEQPAR_CUDNN_DENSE",         "SEQPAR_GEMM_AUTOTUNE",
                         "SEQPAR_GEMM_AUTOTUNE_MS", "SEQPAR_ULYSSES_HEAD_GROUPS", "SEQPAR_PROFILE"};
  std::map<std::string, std::string> vars;
  for (const char* n : names) vars[n] = "";
  EXPECT_EQ(from(vars), KernelPolicy{});
}

TEST(KernelEnv, FlashKernels) {
  for (auto [value, want] :
       {std::pair{"auto", FlashKernel::kAuto}, {"mma", FlashKernel::kMma}, {"wgmma", FlashKernel::kWgmma}}) {
    EXPECT_EQ(from({{"SEQPAR_FLASH_FWD_KERNEL", value}}).attention.fwd_kernel, want) << value;
    EXPECT_EQ(from({{"SEQPAR_FLASH_BWD_KERNEL", value}}).attention.bwd_kernel, want) << value;
  }
  const KernelPolicy p = from({{"SEQPAR_FLASH_FWD_KERNEL", "mma"}});
  EXPECT_EQ(p.attention.bwd_kernel, FlashKernel::kAuto) << "one direction's variable leaves the other alone";
  EXPECT_EQ(error_of("SEQPAR_FLASH_FWD_KERNEL", "tensor-cores"),
            "SEQPAR_FLASH_FWD_KERNEL=tensor-cores must be auto, mma or wgmma");
  EXPECT_EQ(error_of("SEQPAR_FLASH_BWD_KERNEL", "MMA"), "SEQPAR_FLASH_BWD_KERNEL=MMA must be auto, mma or wgmma");
}

TEST(KernelEnv, FlashTiles) {
  EXPECT_EQ(from({{"SEQPAR_FLASH_FWD_TILE", "128x64x4"}}).attention.fwd_tile, (FlashTile{128, 64, 4}));
  EXPECT_EQ(from({{"SEQPAR_FLASH_BWD_TILE", "64x128x8"}}).attention.bwd_tile, (FlashTile{64, 128, 8}));
  EXPECT_TRUE(from({{"SEQPAR_FLASH_BWD_TILE", "64x128x8"}}).attention.fwd_tile.is_default());
  // Which tiles exist depends on D, so that is checked at the call (attn_launch.h's fwd_tile).
  EXPECT_EQ(from({{"SEQPAR_FLASH_FWD_TILE", "16x16x1"}}).attention.fwd_tile, (FlashTile{16, 16, 1}));
  for (const char* bad :
       {"128x64", "128x64x4x2", "128x64x", "x64x4", "128*64*4", "128x64x4 ", "0x64x4", "-128x64x4", "128x64xfour"}) {
    EXPECT_EQ(error_of("SEQPAR_FLASH_FWD_TILE", bad),
              std::string("SEQPAR_FLASH_FWD_TILE=") + bad + " must read BMxBNxWARPS, e.g. 128x64x4");
  }
  EXPECT_EQ(error_of("SEQPAR_FLASH_BWD_TILE", "big"), "SEQPAR_FLASH_BWD_TILE=big must read BMxBNxWARPS, e.g. 128x64x4");
}

TEST(KernelEnv, CudnnDense) {
  EXPECT_EQ(from({{"SEQPAR_CUDNN_DENSE", "1"}}).attention.cudnn_dense, CudnnDense::kOn);
  EXPECT_EQ(from({{"SEQPAR_CUDNN_DENSE", "0"}}).attention.cudnn_dense, CudnnDense::kOff);
  EXPECT_EQ(error_of("SEQPAR_CUDNN_DENSE", "yes"),
            "SEQPAR_CUDNN_DENSE=yes must be 0 (ragged cuDNN graphs only) or 1 (a dense graph for a batch of one "
            "sequence, the default)");
}

TEST(KernelEnv, GemmAutotune) {
  EXPECT_FALSE(from({{"SEQPAR_GEMM_AUTOTUNE", "0"}}).matmul.autotune);
  EXPECT_TRUE(from({{"SEQPAR_GEMM_AUTOTUNE", "1"}}).matmul.autotune);
  EXPECT_EQ(error_of("SEQPAR_GEMM_AUTOTUNE", "off"),
            "SEQPAR_GEMM_AUTOTUNE=off must be 0 (cuBLASLt's heuristic first pick) or 1 (time the candidates of each "
            "GEMM shape on its first call, the default)");
  EXPECT_EQ(from({{"SEQPAR_GEMM_AUTOTUNE_MS", "12.5"}}).matmul.autotune_budget_ms, 12.5);
  EXPECT_EQ(from({{"SEQPAR_GEMM_AUTOTUNE_MS", "200"}}).matmul.autotune_budget_ms, 200);
  EXPECT_TRUE(from({{"SEQPAR_GEMM_AUTOTUNE_MS", "200"}}).matmul.autotune);
  for (const char* bad : {"0", "-5", "fast", "5ms", "inf", "nan"}) {
    EXPECT_EQ(error_of("SEQPAR_GEMM_AUTOTUNE_MS", bad),
              std::string("SEQPAR_GEMM_AUTOTUNE_MS=") + bad +
                  " must be a positive number (milliseconds of tuning per GEMM shape)");
  }
}

TEST(KernelEnv, UlyssesHeadGroups) {
  EXPECT_EQ(from({{"SEQPAR_ULYSSES_HEAD_GROUPS", "3"}}).ulysses_head_groups, 3);
  EXPECT_EQ(from({{"SEQPAR_ULYSSES_HEAD_GROUPS", "1"}}).ulysses_head_groups, 1);
  for (const char* bad : {"0", "-2", "2.5", "many", "2000"}) {
    EXPECT_EQ(error_of("SEQPAR_ULYSSES_HEAD_GROUPS", bad),
              std::string("SEQPAR_ULYSSES_HEAD_GROUPS=") + bad + ": expected a whole number of head groups >= 1");
  }
}

// SEQPAR_PROFILE has no malformed value: any value but "0" turns profiling on (its syntax since
// it was first read).
TEST(KernelEnv, Profile) {
  EXPECT_TRUE(from({{"SEQPAR_PROFILE", "1"}}).profile);
  EXPECT_TRUE(from({{"SEQPAR_PROFILE", "yes"}}).profile);
  EXPECT_FALSE(from({{"SEQPAR_PROFILE", "0"}}).profile);
}

// Several variables together, each landing in its own field.
TEST(KernelEnv, EveryVariableAtOnce) {
  const KernelPolicy p = from({{"SEQPAR_FLASH_FWD_KERNEL", "mma"},
                               {"SEQPAR_FLASH_BWD_KERNEL", "wgmma"},
                               {"SEQPAR_FLASH_FWD_TILE", "64x64x4"},
                               {"SEQPAR_FLASH_BWD_TILE", "128x128x8"},
                               {"SEQPAR_CUDNN_DENSE", "0"},
                               {"SEQPAR_GEMM_AUTOTUNE", "0"},
                               {"SEQPAR_GEMM_AUTOTUNE_MS", "7"},
                               {"SEQPAR_ULYSSES_HEAD_GROUPS", "4"},
                               {"SEQPAR_PROFILE", "1"}});
  KernelPolicy want;
  want.attention.fwd_kernel = FlashKernel::kMma;
  want.attention.bwd_kernel = FlashKernel::kWgmma;
  want.attention.fwd_tile = {64, 64, 4};
  want.attention.bwd_tile = {128, 128, 8};
  want.attention.cudnn_dense = CudnnDense::kOff;
  want.matmul = {false, 7};
  want.ulysses_head_groups = 4;
  want.profile = true;
  EXPECT_EQ(p, want);
  EXPECT_EQ(p.attention.backend, AttentionBackend::kFlash) << "the backend comes from attn_implementation";
}

// The process-level part: init applies the matmul policy (and keeps the whole for the commands).
TEST(KernelEnv, InitAppliesTheMatmulPolicy) {
  const MatmulPolicy before = matmul_policy();
  init_process_kernel_policy(
      map_env({{"SEQPAR_GEMM_AUTOTUNE", "0"}, {"SEQPAR_GEMM_AUTOTUNE_MS", "9"}, {"SEQPAR_ULYSSES_HEAD_GROUPS", "5"}}));
  EXPECT_EQ(matmul_policy(), (MatmulPolicy{false, 9}));
  EXPECT_EQ(process_kernel_policy().ulysses_head_groups, 5);
  init_process_kernel_policy(map_env({}));
  EXPECT_EQ(matmul_policy(), MatmulPolicy{});
  EXPECT_EQ(process_kernel_policy(), KernelPolicy{});
  set_matmul_policy(before);
  EXPECT_THROW(init_process_kernel_policy(map_env({{"SEQPAR_CUDNN_DENSE", "2"}})), InputError);
}

}  // namespace
}  // namespace seqpar
