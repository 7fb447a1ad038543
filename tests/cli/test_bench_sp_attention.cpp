// `seqpar bench sp-attention` on the CPU (f32, ranks as threads): a functional check of every SP
// mode's benchmark path and of its JSON lines; timings on the CPU mean nothing and are not checked.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

std::vector<nlohmann::json> bench(const std::string& args, int* rc, std::string* out) {
  const char* kv = args.find("--kv-heads") == std::string::npos ? "--kv-heads 0" : "";
  *rc = seqpar::testing::run_command(
      fmt::format("{} bench sp-attention --device cpu --heads 4 --head-dim 16 --warmup 0 --iters 1 {} {} 2>&1",
                  seqpar::testing::binary_path(), kv, args),
      out);
  return seqpar::testing::json_lines(*out);
}

TEST(BenchSpAttention, EveryModePrintsOneLinePerShape) {
  struct Case {
    const char* args;
    int ulysses, ring;
  };
  for (const Case& c : {Case{"--sp 2 --sp-mode ulysses", 2, 1}, Case{"--sp 2 --sp-mode ring", 1, 2},
                        Case{"--sp 4 --sp-mode hybrid --ulysses-degree 2", 2, 2}}) {
    int rc = 0;
    std::string out;
    auto lines = bench(std::string(c.args) + " --tokens-per-rank 16,32 --kv-heads 0,2", &rc, &out);
    ASSERT_EQ(rc, 0) << out;
    ASSERT_EQ(lines.size(), 4u) << out;  // 2 token counts x 2 KV head counts
    for (const auto& j : lines) {
      EXPECT_EQ(j["ulysses"], c.ulysses) << j.dump();
      EXPECT_EQ(j["ring"], c.ring) << j.dump();
      EXPECT_EQ(j["seq_len"].get<int64_t>(), j["tokens_per_rank"].get<int64_t>() * c.ulysses * c.ring);
      EXPECT_GT(j["ms"].get<double>(), 0) << j.dump();
      EXPECT_GT(j["ms_single"].get<double>(), 0) << j.dump();
      EXPECT_GT(j["comm_ms"].get<double>(), 0) << j.dump();
      EXPECT_EQ(j.contains("a2a_GBps"), c.ulysses > 1) << j.dump();
      EXPECT_EQ(j.contains("p2p_GBps"), c.ring > 1) << j.dump();
      EXPECT_GE(j["hidden"].get<double>(), 0);
      EXPECT_LE(j["hidden"].get<double>(), 1);
    }
    EXPECT_EQ(lines[0]["Hkv"], 4);
    EXPECT_EQ(lines[2]["Hkv"], 2);
  }
}

TEST(BenchSpAttention, BadSettingsAreNamed) {
  int rc = 0;
  std::string out;
  bench("--sp 2 --sp-mode ring --tokens-per-rank 3", &rc, &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--tokens-per-rank=3: the zigzag layout needs the sequence (sp × tokens = 6) to be a multiple of 4"),
            std::string::npos)
      << out;
  bench("--sp 8 --tokens-per-rank 16", &rc, &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("ulysses degree 8 exceeds num_attention_heads=4"), std::string::npos) << out;
  bench("--sp 2 --tokens-per-rank 16 --kv-heads 3", &rc, &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--kv-heads=3: 3 does not divide --heads=4"), std::string::npos) << out;
  bench("--sp 2 --tokens-per-rank 16,x", &rc, &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--tokens-per-rank=16,x: 'x' is not a positive integer"), std::string::npos) << out;
}

}  // namespace
