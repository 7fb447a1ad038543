// seqpar-diag (bench/diag/): the diagnostic binary built beside seqpar answers the options that
// tools/gpu_check.sh and bench/peers/gemm_interleaved.py use, and `seqpar bench` no longer has gemm.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "test_util.h"

namespace {

std::string diag_binary() {
  return (std::filesystem::path(seqpar::testing::binary_path()).parent_path() / "seqpar-diag").string();
}

TEST(Diag, GemmAnswersTheScriptsOptions) {
  if (!std::filesystem::exists(diag_binary())) GTEST_SKIP() << "built with -DSEQPAR_DIAG=OFF";
  std::string out;
  ASSERT_EQ(seqpar::testing::run_command(diag_binary() + " gemm --help 2>&1", &out), 0) << out;
  for (const char* opt : {"--serve", "--sweep", "--tune-repeats", "--rounds", "--autotune", "--preset", "--shapes"})
    EXPECT_NE(out.find(opt), std::string::npos) << opt << " missing from:\n" << out;
}

TEST(Diag, SeqparBenchHasNoGemm) {
  std::string out;
  ASSERT_EQ(seqpar::testing::run_command(seqpar::testing::binary_path() + " bench --help 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("attention"), std::string::npos) << out;
  EXPECT_EQ(out.find("gemm"), std::string::npos) << out;
}

}  // namespace
