// `seqpar export` round trips each family into transformers with the same logits: trains a few
// steps from a family fixture (tests/fixtures/hf), exports f32 and bf16 and compares transformers'
// logits with `seqpar fwdbwd` on the exports (tools/verify_export.py does the comparing). Skipped
// when python3 with torch and transformers is absent.
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace seqpar {
namespace {

bool have_transformers() {
  return testing::run_command("python3 -c 'import torch, transformers, safetensors, numpy' 2>/dev/null") == 0;
}

TEST(ExportFamilies, RoundTripIntoTransformersWithTheSameLogits) {
  if (!have_transformers()) GTEST_SKIP() << "python3 with torch + transformers is not installed";
  std::string models;
  for (const char* c :
       {"qwen2_tied_window", "qwen3_bias_window", "qwen3_head_dim", "mistral_window", "gpt2_gelu_new", "gpt2_gelu_erf"})
    models += " " + testing::source_path(std::string("tests/fixtures/hf/") + c);
  std::string out;
  const int rc = testing::run_command("python3 " + testing::source_path("tools/verify_export.py") + " --seqpar " +
                                          testing::binary_path() + " --model" + models + " 2>&1",
                                      &out);
  EXPECT_EQ(rc, 0) << out;
  for (const char* family :
       {"qwen2_tied_window", "qwen3_bias_window", "qwen3_head_dim", "mistral_window", "gpt2_gelu_new", "gpt2_gelu_erf"})
    EXPECT_NE(out.find(std::string("[") + testing::source_path("tests/fixtures/hf/") + family + "] f32 export"),
              std::string::npos)
        << family << "\n"
        << out;
  EXPECT_EQ(out.find("FAIL"), std::string::npos) << out;
}

}  // namespace
}  // namespace seqpar
