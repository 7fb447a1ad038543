// `seqpar bench train` on the CPU with the tiny preset: a functional check of the benchmark path
// (synthetic data, the training loop with SP and the memory levers, the JSON line); CPU timings
// mean nothing and are not checked.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

std::vector<nlohmann::json> bench(const std::string& args, int* rc, std::string* out) {
  const char* steps = args.find("--steps") == std::string::npos ? "--steps 2" : "";
  *rc = seqpar::testing::run_command(
      fmt::format("{} bench train --preset tiny --device cpu {} {} 2>&1", seqpar::testing::binary_path(), steps, args),
      out);
  return seqpar::testing::json_lines(*out);
}

TEST(BenchTrain, OneLinePerSequenceLength) {
  int rc = 0;
  std::string out;
  auto lines = bench("--seq-lens 64,128 --sp 2 --sp-mode ring --activation-checkpointing --tiled-mlp-tokens 16 "
                     "--tiled-loss-tokens 16 --zero-stage 1",
                     &rc, &out);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_EQ(lines.size(), 2u) << out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& j = lines[i];
    EXPECT_EQ(j["seq_len"], i == 0 ? 64 : 128) << j.dump();
    for (const char* key : {"step_ms", "tokens_per_s_per_gpu", "tflops_per_gpu", "peak_mem_gib", "loss"})
      EXPECT_GT(j[key].get<double>(), 0) << key << " in " << j.dump();
    EXPECT_EQ(j["sp"], 2);
    EXPECT_EQ(j["zero_stage"], 1);
    EXPECT_FALSE(j.contains("error")) << j.dump();
  }
}

TEST(BenchTrain, BadSettingsAreNamed) {
  int rc = 0;
  std::string out;
  bench("--seq-lens 64,x", &rc, &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--seq-lens=64,x: 'x' is not a positive integer"), std::string::npos) << out;
  // Beyond int64: refused, not clamped to 2^63 - 1 as strtoll did.
  bench("--seq-lens 99999999999999999999", &rc, &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("'99999999999999999999' is not a positive integer"), std::string::npos) << out;
  bench("--seq-lens 64 --steps 0", &rc, &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--steps=0 must be >= 1"), std::string::npos) << out;
}

// One step is timed when it is the only one (a length whose step takes minutes), the first is not
// when there are more, nor the last of three or more; the line says which steps were timed.
TEST(BenchTrain, OneStepIsTimedAndSaysSo) {
  int rc = 0;
  std::string out;
  bench("--seq-lens 64 --steps 1", &rc, &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"timed_steps\":\"the only step (with its first-use costs)\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"step_ms\":"), std::string::npos) << out;
  bench("--seq-lens 64 --steps 2", &rc, &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"timed_steps\":\"step 2 (with the wait for its own optimizer step)\""), std::string::npos)
      << out;
  // Three or more: the last (which waits for its own optimizer step) is not timed either.
  bench("--seq-lens 64 --steps 3", &rc, &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"timed_steps\":\"steps 2 to the one before the last\""), std::string::npos) << out;
}

}  // namespace
