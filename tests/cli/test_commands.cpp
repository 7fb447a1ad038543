// A missing or mistyped command names the commands there and the nearest one,
// and fails.
#include <gtest/gtest.h>

#include <string>

#include "core/device.h"
#include "test_util.h"

namespace seqpar {
namespace {

std::string run(const std::string& args, int* rc) {
  std::string out;
  *rc = testing::run_command(testing::binary_path() + " " + args + " 2>&1", &out);
  return out;
}

TEST(Commands, AMistypedCommandSuggestsTheNearest) {
  int rc = 0;
  std::string out = run("trian --steps 3", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("unknown command 'trian' for 'seqpar' (did you mean 'train'?)"), std::string::npos) << out;
  EXPECT_NE(out.find("prepare-data"), std::string::npos) << out;  // the list of commands
  out = run("--log-level warn bench trian", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("unknown command 'trian' for 'seqpar bench' (did you mean 'train'?)"), std::string::npos) << out;
  out = run("frobnicate", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("unknown command 'frobnicate' for 'seqpar'; its commands:"), std::string::npos) << out;
}

// --device cuda where no GPU can be used: a clear error naming the setting and the driver's reason,
// before the model is built or the plan printed (not a failed check deep in the allocator).
TEST(Commands, CudaWithoutAGpuIsAClearErrorFirst) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  int rc = 0;
  const std::string out = run("train --device cuda --preset llama-3.2-1b --seq-len 8192 --steps 1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("device=cuda:0: "), std::string::npos) << out;
  EXPECT_NE(out.find("run it on a GPU machine, or --device cpu"), std::string::npos) << out;
  EXPECT_EQ(out.find("check failed"), std::string::npos) << out;
  EXPECT_EQ(out.find("Memory plan"), std::string::npos) << out;
}

TEST(Commands, NoCommandListsThem) {
  int rc = 0;
  std::string out = run("", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("'seqpar' needs a command: version, fwdbwd, train"), std::string::npos) << out;
  out = run("bench", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("'seqpar bench' needs a command: attention, sp-attention, train"), std::string::npos) << out;
  out = run("bench --help", &rc);  // help is not an error
  EXPECT_EQ(rc, 0) << out;
  out = run("version", &rc);
  EXPECT_EQ(rc, 0) << out;
}

}  // namespace
}  // namespace seqpar
