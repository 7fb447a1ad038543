// The corpus of real config files (tests/fixtures/configs/, verbatim from public repositories):
// each one through `seqpar train --print-config` is either resolved with every key it holds
// accounted for (used with its source, or named in a warning) or refused with a message naming the
// offending key. No file may run with its settings silently dropped (issue 18).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "test_util.h"

namespace seqpar {
namespace {

namespace fs = std::filesystem;

// The keys a file holds that must be accounted for: a JSON key, or its dotted path when a section
// above it is named as ignored (then the section's name covers it); YAML keys of the top level and
// of one section down (Accelerate's sections are one level deep; deeper are list items' fields).
std::set<std::string> keys_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::set<std::string> keys;
  const bool json = path.size() > 5 && path.substr(path.size() - 5) == ".json";
  if (json) {
    std::function<void(const nlohmann::json&, const std::string&)> walk = [&](const nlohmann::json& j,
                                                                             const std::string& prefix) {
      if (!j.is_object()) return;
      for (auto it = j.begin(); it != j.end(); ++it) {
        keys.insert(prefix + it.key());
        walk(it.value(), prefix + it.key() + ".");
      }
    };
    walk(nlohmann::json::parse(text), "");
    return keys;
  }
  const std::regex re(R"re((?:^|\n)( {0,2})([A-Za-z_][A-Za-z0-9_]*):([^\n]*))re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    const std::string value = std::regex_replace((*it)[3].str(), std::regex(R"(^\s+|\s*(#.*)?$)"), "");
    if (value != "{}" && value != "null" && value != "~") keys.insert((*it)[2].str());  // empty: nothing to drop
  }
  return keys;
}

// A key (or dotted path) is accounted for when the output names it, its last part, or a section
// above it.
bool accounted_for(const std::string& key, const std::string& output) {
  if (output.find(key) != std::string::npos) return true;
  std::string k = key;
  for (size_t dot = k.rfind('.'); dot != std::string::npos; dot = k.rfind('.')) {
    if (output.find(key.substr(key.rfind('.') + 1)) != std::string::npos &&
        output.find(k.substr(0, dot)) != std::string::npos)
      return true;
    k = k.substr(0, dot);
    if (output.find(k + ",") != std::string::npos || output.find(k + "\n") != std::string::npos) return true;
  }
  return false;
}

struct Outcome {
  int rc = 0;
  std::string output;
};

Outcome print_config(const std::string& file) {
  const bool json = file.size() > 5 && file.substr(file.size() - 5) == ".json";
  Outcome o;
  o.rc = testing::run_command(testing::binary_path() + " train --print-config " +
                                  (json ? "--deepspeed " : "--accelerate-config ") + file,
                              &o.output);
  return o;
}

std::vector<std::string> corpus() {
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(testing::source_path("tests/fixtures/configs")))
    if (e.is_regular_file() && e.path().filename() != "README.md") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ConfigCorpus, EveryFileIsResolvedWithEveryKeyAccountedForOrRefusedByKey) {
  const std::vector<std::string> files = corpus();
  ASSERT_GE(files.size(), 30u);
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    const Outcome o = print_config(f);
    const std::set<std::string> keys = keys_of(f);
    ASSERT_FALSE(keys.empty());
    if (o.rc == 0) {
      EXPECT_NE(o.output.find("resolved configuration"), std::string::npos) << o.output;
      for (const std::string& k : keys)
        EXPECT_TRUE(accounted_for(k, o.output)) << "key " << k << " neither used nor warned:\n" << o.output;
    } else {
      EXPECT_NE(o.output.find("seqpar: error:"), std::string::npos) << o.output;
      EXPECT_EQ(o.output.find("check failed"), std::string::npos) << o.output;
      bool names_a_key = false;
      for (const std::string& k : keys)
        names_a_key = names_a_key || o.output.find(k.substr(k.rfind('.') + 1)) != std::string::npos;
      EXPECT_TRUE(names_a_key) << o.output;
    }
  }
}

// What the corpus must resolve to, file by file (the table in docs/configs.md says the same).
TEST(ConfigCorpus, TrainerStyleFilesGetHfTrainerDefaultsAndBareOnesDeepSpeeds) {
  const std::string dir = testing::source_path("tests/fixtures/configs/");
  // transformers' zero-2 template: "auto" everywhere (fp16 "auto" is off), the optimizer offloaded to the cpu.
  Outcome o = print_config(dir + "transformers/ds_config_zero2.json");
  ASSERT_EQ(o.rc, 0) << o.output;
  EXPECT_TRUE(std::regex_search(o.output, std::regex(R"(\n  offload_optimizer +cpu +.*zero_optimization.offload_optimizer.device)")))
      << o.output;
  // DeepSpeedExamples' AutoTP file for the HF Trainer: "auto" values take HF Trainer's defaults.
  o = print_config(dir + "deepspeed/hf_integration_ds_config.json");
  ASSERT_EQ(o.rc, 0) << o.output;
  EXPECT_TRUE(std::regex_search(o.output, std::regex(R"(\n  lr +5e-05 +HF Trainer default \(auto in )"))) << o.output;
  EXPECT_TRUE(std::regex_search(o.output, std::regex(R"(\n  micro_batch +8 +HF Trainer default)"))) << o.output;
  EXPECT_TRUE(std::regex_search(o.output, std::regex(R"(\n  weight_decay +0 +HF Trainer default)"))) << o.output;
  EXPECT_TRUE(std::regex_search(o.output, std::regex(R"(\n  clip +1 +HF Trainer default)"))) << o.output;
  EXPECT_TRUE(std::regex_search(o.output, std::regex(R"(\n  sp +1 +HF Trainer default)"))) << o.output;
  EXPECT_NE(o.output.find("tensor_parallel"), std::string::npos) << o.output;  // warned as ignored
  // A bare DeepSpeed file: DeepSpeed's engine defaults where it says nothing.
  o = print_config(dir + "deepspeed/ds_zero3_leaf_qwen3_5.json");
  ASSERT_EQ(o.rc, 0) << o.output;
  EXPECT_TRUE(std::regex_search(o.output, std::regex(R"(\n  clip +0 +DeepSpeed default)"))) << o.output;
  EXPECT_TRUE(std::regex_search(o.output, std::regex(R"(\n  weight_decay +0 +DeepSpeed default)"))) << o.output;
  EXPECT_TRUE(std::regex_search(o.output, std::regex(R"(\n  lr +0.0001 +.*optimizer.params.lr)"))) << o.output;
  EXPECT_TRUE(std::regex_search(o.output, std::regex(R"(\n  lr_schedule +WarmupCosineLR +.*scheduler.type)")))
      << o.output;
  // TRL's 8-process data-parallel YAML: dp 8, sp 1 (never the demo's 4).
  o = print_config(dir + "trl/multi_gpu.yaml");
  ASSERT_EQ(o.rc, 0) << o.output;
  EXPECT_TRUE(std::regex_search(o.output, std::regex(R"(\n  sp +1 +HF Trainer default)"))) << o.output;
  EXPECT_TRUE(std::regex_search(o.output, std::regex(R"(\n  dp_replicate +8 )"))) << o.output;
  // TRL's context-parallel YAML: cp_size 2 is a ring of 2; its FSDP FULL_SHARD-equivalent is ZeRO stage 3.
  o = print_config(dir + "trl/context_parallel_2gpu.yaml");
  ASSERT_EQ(o.rc, 0) << o.output;
  EXPECT_TRUE(std::regex_search(o.output, std::regex(R"(\n  zero_stage +3 +.*fsdp_reshard_after_forward)"))) << o.output;
  // An ArcticTraining recipe is refused with the flag for each of its keys.
  o = print_config(dir + "arctictraining/run-h100-sp8-llama-8b.yml");
  EXPECT_NE(o.rc, 0);
  EXPECT_NE(o.output.find("ArcticTraining recipe"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("sequence_parallel_size -> --sp"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("tiled_mlp_compute -> --tiled-mlp-tokens"), std::string::npos) << o.output;
}

}  // namespace
}  // namespace seqpar
