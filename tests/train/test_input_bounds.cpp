// Sizes from files and flags bounded and checked against each other before anything is
// allocated: the memory plan's arithmetic cannot overflow (a seq_len near 2^62 used to wrap its
// byte counts negative and "fit"), train refuses a run its plan says cannot fit, a config far
// beyond its checkpoint's tensors is refused from the headers before the model is allocated, and
// model sizes beyond any real Llama are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "arch/llama_config.h"
#include "core/allocator.h"
#include "core/error.h"
#include "test_util.h"
#include "train/hf_model.h"
#include "train/memory_plan.h"
#include "train/trainer.h"
#include "train_test_util.h"

namespace seqpar {
namespace {

namespace fs = std::filesystem;

std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("(not an InputError) ") + e.what();
  }
  return "(nothing thrown)";
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

MemoryPlanInput plan_input(int64_t seq_len) {
  MemoryPlanInput in;
  in.model = llama_preset("llama-3.1-8b");
  in.seq_len = seq_len;
  in.cuda = true;
  return in;
}

TEST(PlanBounds, HugeSeqLenIsRefusedNotWrapped) {
  for (int64_t s : {int64_t{1} << 62, (int64_t{1} << 62) + 12345, std::numeric_limits<int64_t>::max()})
    EXPECT_HAS(input_error_of([&] { (void)plan_memory(plan_input(s)); }), "must be <= 2^40");
  // Below the seq_len bound, the bytes bound: 2^40 tokens of an 8B model are ~1e20 bytes.
  EXPECT_HAS(input_error_of([&] { (void)plan_memory(plan_input(int64_t{1} << 40)); }),
             "beyond 2^60 (1 EiB): it cannot fit any machine");
  MemoryPlanInput in = plan_input(int64_t{1} << 30);
  in.micro_batch = 1 << 20;  // 2^50 tokens: the product is bounded too
  EXPECT_HAS(input_error_of([&] { (void)plan_memory(in); }),
             "tokens per step and data-parallel rank is more than 2^40");
}

TEST(PlanBounds, EveryPlanThatComputesIsPositiveAndOrdered) {
  // Just below the bound every number is positive and the peak grows with the sequence.
  int64_t last = 0;
  for (int64_t s = 1024; s <= (int64_t{1} << 30); s *= 16) {
    const MemoryPlan p = plan_memory(plan_input(s));
    for (const auto& [name, bytes] : p.resident) EXPECT_GE(bytes, 0) << name;
    for (const auto& [name, bytes] : p.phases) EXPECT_GE(bytes, 0) << name;
    EXPECT_GT(p.peak_bytes, last) << "seq_len " << s;
    last = p.peak_bytes;
  }
}

TEST(PlanBounds, LongestFittingSeqLenStopsAtTheBound) {
  // An absurd capacity: the search ends at the bound instead of failing a check.
  const int64_t s = longest_fitting_seq_len(plan_input(1024), std::numeric_limits<int64_t>::max() / 2);
  EXPECT_GT(s, 0);
  EXPECT_LE(s, int64_t{1} << 40);
}

TEST(PlanBounds, CheckPlanFitsRefusesWhatDoesNotFit) {
  const MemoryPlan p = plan_memory(plan_input(8192));
  EXPECT_NO_THROW(check_plan_fits(p, 1, p.peak_bytes, "cuda:0"));
  EXPECT_NO_THROW(check_plan_fits(p, 1, 0, "cuda:0"));  // unknown capacity
  EXPECT_HAS(input_error_of([&] { check_plan_fits(p, 2, p.peak_bytes, "cuda:0"); }), "on cuda:0 (2 rank(s) of");
  EXPECT_HAS(input_error_of([&] { check_plan_fits(p, 1, p.peak_bytes - 1, "cuda:0"); }), "the run cannot fit");
  EXPECT_HAS(input_error_of([&] { check_plan_fits(p, 1, p.peak_bytes - 1, "cuda:0", [] { return std::string("it fits with X"); }); }),
             "(seqpar plan, docs/memory.md); it fits with X");
}

TEST(PlanBounds, TrainRefusesARunThePlanSaysCannotFitBeforeAllocating) {
  // The tiny model with 2^35 tokens per sequence: tens of TiB, beyond this host's memory; the
  // trainer used to allocate the model and start.
  TrainConfig c = testing::tiny_recall_config();
  c.data.task.seq_len = int64_t{1} << 35;
  c.data.micro_batch = 1;
  c.schedule.steps = 1;
  const size_t before = cpu_allocator().current_bytes();
  const std::string msg = input_error_of([&] { Trainer t(c); });
  EXPECT_HAS(msg, "the run cannot fit");
  EXPECT_HAS(msg, "this host");
  // and says that none of the memory levers would make it fit (seqpar plan's levers_to_fit)
  EXPECT_HAS(msg, "none of seqpar's memory levers makes it fit at this length: more GPUs (--sp)");
  EXPECT_EQ(cpu_allocator().current_bytes(), before);
}

TEST(ConfigBounds, SizesBeyondAnyLlamaAreRefusedByName) {
  LlamaConfig c = llama_preset("tiny");
  c.num_layers = 1000000;
  EXPECT_EQ(input_error_of([&] { c.validate(); }),
            "num_hidden_layers=1000000 is larger than 4096, the most seqpar accepts (a corrupt config?)");
  c = llama_preset("tiny");
  c.hidden_size = int64_t{1} << 40;
  EXPECT_HAS(input_error_of([&] { c.validate(); }), "hidden_size=1099511627776 is larger than 131072");
  c = llama_preset("tiny");
  c.vocab_size = int64_t{1} << 31;
  EXPECT_HAS(input_error_of([&] { c.validate(); }), "vocab_size=2147483648 is larger than 2147483647");
}

// A copy of an HF fixture whose config.json is changed by `edit`.
std::string fixture_with_config(const std::function<void(nlohmann::json&)>& edit) {
  const std::string src = testing::source_path("tests/fixtures/hf/mha_tied");
  const std::string dir = testing::temp_dir();
  fs::copy_file(src + "/model.safetensors", dir + "/model.safetensors");
  std::ifstream in(src + "/config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  edit(j);
  std::ofstream(dir + "/config.json") << j.dump(2);
  return dir;
}

TEST(CheckpointBounds, ConfigFarBeyondTheTensorsIsRefusedBeforeAllocating) {
  // 4096 layers of 2^20-wide MLPs: terabytes if the model were allocated first.
  const std::string dir = fixture_with_config([](nlohmann::json& j) {
    j["num_hidden_layers"] = 4096;
    j["intermediate_size"] = 1 << 20;
  });
  cpu_allocator().reset_peak();
  const size_t before = cpu_allocator().current_bytes();
  const std::string msg = input_error_of([&] { (void)load_hf_model(dir); });
  EXPECT_HAS(msg, "parameter 'model.layers.0.mlp.gate_proj.weight' has shape");
  EXPECT_HAS(msg, "but config.json implies [1048576");
  // Nothing of the model's size was allocated (not even the checkpoint's own tensors were read).
  EXPECT_LE(cpu_allocator().peak_bytes(), before + (1u << 20));

  const std::string more_layers = fixture_with_config([](nlohmann::json& j) { j["num_hidden_layers"] = 4096; });
  EXPECT_HAS(input_error_of([&] { (void)load_hf_model(more_layers); }), "is missing from the checkpoint");
}

TEST(CheckpointBounds, TheFixtureStillLoads) {
  const auto model = load_hf_model(testing::source_path("tests/fixtures/hf/mha_tied"));
  EXPECT_GT(model->params().named().size(), 0u);
}

}  // namespace
}  // namespace seqpar
