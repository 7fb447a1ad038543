// Checkpoints: bit-exact resume (losses, every parameter and optimizer moment, with SP, DP and
// gradient accumulation), the directory layout and rotation, saves killed at every stage, corrupt
// checkpoints, refused resumes, and `seqpar export` read back and run through `seqpar fwdbwd`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/token_file.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "train/train_test_util.h"

namespace seqpar {
namespace {

namespace fs = std::filesystem;

TrainConfig tiny_run() {
  TrainConfig c = testing::tiny_recall_config();
  c.schedule.steps = 6;
  c.schedule.warmup_steps = 2;
  c.optimizer.adamw.lr = 1e-3f;
  c.optimizer.adamw.weight_decay = 0.01f;
  c.optimizer.clip = 1.0;
  c.parallel.sp = 1;
  c.logging.eval_every = 2;
  c.data.eval_batches = 1;
  c.logging.log_every = 1;
  c.logging.quiet = true;
  return c;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.is_open()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

template <typename F>
void expect_input_error(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no InputError; expected one containing: " << fragments[0];
  } catch (const InputError& e) {
    for (const std::string& frag : fragments)
      EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << "missing '" << frag << "' in: " << e.what();
  }
}

// N steps in one run == N/2 steps, stop, resume, N/2 steps: the same losses, evaluations and
// metrics, and byte-identical checkpoint files (every parameter and moment bitwise equal).
TEST(Checkpoint, ResumeIsBitExact) {
  struct Setting {
    const char* name;
    int sp;
    SpMode mode;
    int dp_replicate, grad_accum;
  };
  for (const Setting& s : {Setting{"sp=1", 1, SpMode::kUlysses, 1, 1}, Setting{"sp=2 ring", 2, SpMode::kRing, 1, 2},
                           Setting{"sp=2 ulysses x dp=2", 2, SpMode::kUlysses, 2, 1}}) {
    SCOPED_TRACE(s.name);
    TrainConfig c = tiny_run();
    c.logging.log_every = 2;  // the split run stops and resumes at step 3, between two records
    c.parallel.sp = s.sp;
    c.parallel.sp_mode = s.mode;
    c.parallel.dp_replicate = s.dp_replicate;
    c.data.grad_accum = s.grad_accum;
    const std::string root = testing::temp_dir();

    TrainConfig whole = c;
    whole.checkpoint.save_dir = root + "/whole";
    whole.checkpoint.save_every = 3;
    whole.logging.metrics_out = root + "/whole.jsonl";
    const TrainResult a = run_training(whole);

    TrainConfig first = c;
    first.checkpoint.save_dir = root + "/split";
    first.checkpoint.stop_at_step = 3;
    const TrainResult b1 = run_training(first);
    ASSERT_EQ(b1.steps_run, 3);
    ASSERT_EQ(b1.losses.size(), 3u);
    ASSERT_EQ(b1.checkpoints.size(), 1u);

    TrainConfig second = c;
    second.checkpoint.save_dir = root + "/split";
    second.checkpoint.resume = ResumeFrom::parse("latest");
    second.logging.metrics_out = root + "/split.jsonl";
    const TrainResult b2 = run_training(second);
    EXPECT_EQ(b2.first_step, 4);
    EXPECT_EQ(b2.steps_run, 6);
    EXPECT_EQ(fs::path(b2.resumed_from).filename(), "step_000003");

    ASSERT_EQ(a.losses.size(), 6u);
    ASSERT_EQ(b2.losses.size(), 6u);
    for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], b2.losses[i]) << "step " << i + 1;
    EXPECT_EQ(a.eval_accuracy, b2.eval_accuracy);
    EXPECT_NE(a.losses.front(), a.losses.back());
    for (const char* step : {"step_000003", "step_000006"})
      for (const char* file : {"model.safetensors", "optimizer.safetensors", "config.json"})
        EXPECT_TRUE(bytes_of(root + "/whole/" + step + "/" + file) == bytes_of(root + "/split/" + step + "/" + file))
            << step << "/" << file << " differs";

    // The metrics file of the resumed run reads as one run: the same records but for the timings
    // and the memory peaks (the allocator is shared by whatever else runs in the process).
    auto records = [](const std::string& path) {
      std::vector<nlohmann::json> out;
      std::ifstream in(path);
      std::string line;
      while (std::getline(in, line)) {
        nlohmann::json j = nlohmann::json::parse(line);
        j.erase("tokens_per_s");
        j.erase("peak_mem_gib");
        out.push_back(j);
      }
      return out;
    };
    EXPECT_EQ(records(whole.logging.metrics_out), records(second.logging.metrics_out));
    EXPECT_EQ(records(whole.logging.metrics_out).size(), 4u + 3u);  // steps 1, 2, 4, 6; evaluations at 2, 4, 6
  }
}

TEST(Checkpoint, DirectoryLayoutRotationAndState) {
  TrainConfig c = tiny_run();
  c.schedule.steps = 5;
  c.checkpoint.save_dir = testing::temp_dir() + "/ckpt";
  c.checkpoint.save_every = 1;
  c.checkpoint.keep_last = 2;
  const TrainResult r = run_training(c);
  ASSERT_EQ(r.checkpoints.size(), 5u);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(c.checkpoint.save_dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".lock", "latest", "step_000004", "step_000005"}));
  EXPECT_EQ(bytes_of(c.checkpoint.save_dir + "/latest"), "step_000005\n");
  EXPECT_EQ(latest_checkpoint(c.checkpoint.save_dir), c.checkpoint.save_dir + "/step_000005");
  EXPECT_EQ(resolve_checkpoint_dir(c.checkpoint.save_dir), c.checkpoint.save_dir + "/step_000005");

  const Checkpoint ck = load_checkpoint(c.checkpoint.save_dir + "/step_000005");
  EXPECT_EQ(ck.state.step, 5);
  EXPECT_EQ(ck.optimizer_step, 5);
  EXPECT_FALSE(ck.has_master);
  EXPECT_EQ(ck.state.seed, c.schedule.seed);
  EXPECT_EQ(ck.state.data_source, "recall");
  EXPECT_EQ(ck.state.losses, r.losses);
  EXPECT_EQ(ck.state.config_hash, config_hash(ck.state.config));
  EXPECT_EQ(ck.state.config["micro_batch"], 2);
  // The checkpoint is an HF model directory: config.json is the model's, weights under HF names.
  const LlamaConfig mc = load_hf_llama_config(c.checkpoint.save_dir + "/step_000005");
  EXPECT_EQ(mc.hidden_size, c.model.arch.hidden_size);
  EXPECT_EQ(mc.num_kv_heads, c.model.arch.num_kv_heads);
  EXPECT_NE(ck.model.find("model.layers.1.mlp.down_proj.weight"), nullptr);
  EXPECT_NE(ck.optimizer.find("exp_avg_sq.lm_head.weight"), nullptr);
  EXPECT_EQ(ck.model.metadata.at("format"), "pt");
  const nlohmann::json state = nlohmann::json::parse(bytes_of(c.checkpoint.save_dir + "/step_000005/trainer_state.json"));
  EXPECT_EQ(state["files"]["model.safetensors"].get<uint64_t>(),
            fs::file_size(c.checkpoint.save_dir + "/step_000005/model.safetensors"));
  EXPECT_EQ(state["rng"]["seed"].get<uint64_t>(), c.schedule.seed);
}

// A CheckpointContents for step `step` from a loaded checkpoint (weights, moments, state).
struct Contents {
  LlamaModel model;
  AdamW adamw;
  CheckpointContents contents;
  explicit Contents(const Checkpoint& ck, int64_t step)
      : model(ck.model_config), adamw(ck.model_config, OptimizerConfig{}, model.params(), Device::cpu()) {
    restore_from_checkpoint(ck, model.params(), adamw);
    contents = {&model.config(), &model.params(), &adamw.exp_avg(), &adamw.exp_avg_sq(), nullptr, step, ck.state};
    contents.state.step = step;
    contents.state.losses.resize(static_cast<size_t>(step), 1.0);
  }
};

// A save killed at any stage leaves `latest` naming the previous, loadable checkpoint; the
// unfinished directory is rejected with a clear error, and the next save cleans it up.
TEST(Checkpoint, KilledSaveLeavesThePreviousCheckpoint) {
  TrainConfig c = tiny_run();
  c.schedule.steps = 2;
  c.checkpoint.save_dir = testing::temp_dir() + "/ckpt";
  run_training(c);
  const std::string previous = c.checkpoint.save_dir + "/step_000002";
  const std::string previous_model = bytes_of(previous + "/model.safetensors");
  for (const char* stage :
       {"model.safetensors", "config.json", "optimizer.safetensors", "trainer_state.json", "rename"}) {
    SCOPED_TRACE(stage);
    Contents next(load_checkpoint(previous), 4);
    struct Killed {};
    EXPECT_THROW(save_checkpoint(c.checkpoint.save_dir, next.contents, 0,
                                 [&](const std::string& s) {
                                   if (s == stage) throw Killed{};
                                 }),
                 Killed);
    EXPECT_EQ(latest_checkpoint(c.checkpoint.save_dir), previous);
    const Checkpoint back = load_checkpoint(*latest_checkpoint(c.checkpoint.save_dir));
    EXPECT_EQ(back.state.step, 2);
    EXPECT_EQ(bytes_of(previous + "/model.safetensors"), previous_model);
    if (std::string(stage) == "rename") {
      // Killed after the rename, before `latest`: the new checkpoint is complete, only not yet named.
      EXPECT_EQ(load_checkpoint(c.checkpoint.save_dir + "/step_000004").state.step, 4);
      fs::remove_all(c.checkpoint.save_dir + "/step_000004");
    } else {
      const std::string tmp = c.checkpoint.save_dir + "/.tmp_step_000004";
      ASSERT_TRUE(fs::is_directory(tmp));
      expect_input_error([&] { load_checkpoint(tmp); }, {"checkpoint '" + tmp + "'", "an unfinished checkpoint"});
      expect_input_error([&] { resolve_checkpoint_dir(tmp); }, {"an unfinished checkpoint"});
      EXPECT_FALSE(fs::exists(c.checkpoint.save_dir + "/step_000004"));
    }
  }
  // The next complete save removes what the killed ones left and moves `latest`.
  Contents next(load_checkpoint(previous), 4);
  save_checkpoint(c.checkpoint.save_dir, next.contents);
  EXPECT_FALSE(fs::exists(c.checkpoint.save_dir + "/.tmp_step_000004"));
  EXPECT_EQ(latest_checkpoint(c.checkpoint.save_dir), c.checkpoint.save_dir + "/step_000004");
  EXPECT_EQ(load_checkpoint(c.checkpoint.save_dir + "/step_000004").state.step, 4);
}

// Saving a step that already has a checkpoint (a run resumed from an earlier one) replaces it;
// killed between moving the old one aside and renaming the new one in, `latest` still loads.
TEST(Checkpoint, ReplacingAStepIsCrashSafeToo) {
  TrainConfig c = tiny_run();
  c.schedule.steps = 2;
  c.checkpoint.save_dir = testing::temp_dir() + "/ckpt";
  run_training(c);
  const std::string step2 = c.checkpoint.save_dir + "/step_000002";
  struct Killed {};
  {
    Contents again(load_checkpoint(step2), 2);
    again.contents.state.losses = {7.0, 8.0};
    EXPECT_THROW(save_checkpoint(c.checkpoint.save_dir, again.contents, 0,
                                 [](const std::string& s) {
                                   if (s == "moved aside") throw Killed{};
                                 }),
                 Killed);
  }
  EXPECT_FALSE(fs::exists(step2));
  const std::optional<std::string> latest = latest_checkpoint(c.checkpoint.save_dir);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(*latest, c.checkpoint.save_dir + "/.old_step_000002");
  EXPECT_NE(load_checkpoint(*latest).state.losses, (std::vector<double>{7.0, 8.0}));
  Contents again(load_checkpoint(*latest), 2);
  again.contents.state.losses = {7.0, 8.0};
  save_checkpoint(c.checkpoint.save_dir, again.contents);
  EXPECT_EQ(load_checkpoint(step2).state.losses, (std::vector<double>{7.0, 8.0}));
  EXPECT_FALSE(fs::exists(c.checkpoint.save_dir + "/.old_step_000002"));
  EXPECT_EQ(latest_checkpoint(c.checkpoint.save_dir), step2);
}

TEST(Checkpoint, CorruptCheckpointsAreRejected) {
  TrainConfig c = tiny_run();
  c.schedule.steps = 2;
  c.checkpoint.save_dir = testing::temp_dir() + "/ckpt";
  run_training(c);
  const std::string good = c.checkpoint.save_dir + "/step_000002";
  auto copy = [&](const std::string& name) {
    const std::string dir = c.checkpoint.save_dir + "/" + name;
    fs::copy(good, dir);
    return dir;
  };
  // Truncated weights.
  std::string dir = copy("step_000010");
  fs::resize_file(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") - 100);
  expect_input_error([&] { load_checkpoint(dir); }, {"checkpoint '" + dir + "'", "model.safetensors is", "truncated"});
  // A missing file.
  dir = copy("step_000011");
  fs::remove(dir + "/optimizer.safetensors");
  expect_input_error([&] { load_checkpoint(dir); }, {"optimizer.safetensors is missing (an incomplete or corrupt"});
  // trainer_state.json cut short, or gone.
  dir = copy("step_000012");
  const std::string state = bytes_of(dir + "/trainer_state.json");
  std::ofstream(dir + "/trainer_state.json", std::ios::trunc) << state.substr(0, state.size() / 2);
  expect_input_error([&] { load_checkpoint(dir); }, {"trainer_state.json is not valid JSON"});
  fs::remove(dir + "/trainer_state.json");
  expect_input_error([&] { load_checkpoint(dir); }, {"trainer_state.json is missing"});
  expect_input_error([&] { resolve_checkpoint_dir(dir); }, {"trainer_state.json is missing"});
  // A directory whose name disagrees with its state (copied by hand under another step).
  dir = copy("step_000013");
  expect_input_error([&] { load_checkpoint(dir); }, {"trainer_state.json says step=2, the directory name step_000013"});
  // `latest` naming a directory that is gone.
  const std::string other = testing::temp_dir();
  std::ofstream(other + "/latest") << "step_000007\n";
  expect_input_error([&] { latest_checkpoint(other); }, {"names " + other + "/step_000007, which does not exist"});
  expect_input_error([&] { resolve_checkpoint_dir(testing::temp_dir()); },
                     {"neither a checkpoint directory (no trainer_state.json) nor a save directory (no `latest`)"});
  // Resuming from a corrupt checkpoint fails before any step.
  TrainConfig r = tiny_run();
  r.checkpoint.resume = ResumeFrom::parse(c.checkpoint.save_dir + "/step_000010");
  expect_input_error([&] { run_training(r); }, {"truncated"});
}

TEST(Checkpoint, ResumeWithOtherSettingsIsRefusedOrWarned) {
  TrainConfig c = tiny_run();
  c.schedule.steps = 2;
  c.checkpoint.save_dir = testing::temp_dir() + "/ckpt";
  run_training(c);
  const std::string dir = c.checkpoint.save_dir + "/step_000002";
  auto resumed = [&] {
    TrainConfig r = tiny_run();
    r.schedule.steps = 3;
    r.checkpoint.resume = ResumeFrom::parse(dir);
    return r;
  };
  TrainConfig r = resumed();
  r.parallel.sp = 2;
  expect_input_error([&] { run_training(r); },
                     {"cannot resume from checkpoint '" + dir + "'", "sp=1 in the checkpoint but 2 now"});
  r = resumed();
  r.data.micro_batch = 4;
  expect_input_error([&] { run_training(r); }, {"micro_batch=2 in the checkpoint but 4 now"});
  r = resumed();
  r.model.arch.intermediate_size = 64;
  expect_input_error([&] { run_training(r); }, {"model.intermediate_size=128 in the checkpoint but 64 now"});
  r = resumed();
  r.data.task.seq_len = 48;
  r.schedule.seed = 7;
  expect_input_error([&] { run_training(r); },
                     {"seed=1234 in the checkpoint but 7 now", "seq_len=32 in the checkpoint but 48 now"});
  r = resumed();
  r.parallel.dp_replicate = 2;
  expect_input_error([&] { run_training(r); }, {"dp_replicate=1 in the checkpoint but 2 now"});

  // Allowed: more steps, another lr (a warning says the run is no longer bit-exact), other outputs.
  r = resumed();
  r.optimizer.adamw.lr = 2e-3f;
  r.logging.log_every = 5;
  const Checkpoint ck = load_checkpoint(dir);
  const LlamaConfig mc = demo_model_config();
  const std::vector<std::string> warnings =
      check_resume_config(ck.state.config, train_config_json(r, mc, nullptr, nullptr), dir);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("changes from"), std::string::npos) << warnings[0];
  bool lr_named = false, steps_named = false;
  for (const std::string& w : warnings) {
    lr_named |= w.find("optimizer.lr changes") != std::string::npos;
    steps_named |= w.find("steps changes from 2") != std::string::npos;
    EXPECT_EQ(w.find("log_every"), std::string::npos) << w;
  }
  EXPECT_TRUE(lr_named && steps_named);
  // A checkpoint of an older seqpar has no document_mask: resuming at its default (what that seqpar
  // did) says nothing, resuming with another value warns.
  nlohmann::json older = ck.state.config;
  ASSERT_TRUE(older.contains("document_mask"));
  older.erase("document_mask");
  for (const bool mask : {true, false}) {
    TrainConfig o = r;
    o.data.document_mask = mask;
    bool named = false;
    for (const std::string& w : check_resume_config(older, train_config_json(o, mc, nullptr, nullptr), dir))
      named |= w.find("document_mask") != std::string::npos;
    EXPECT_EQ(named, !mask) << "document_mask " << mask;
  }
  const TrainResult out = run_training(r);
  EXPECT_EQ(out.first_step, 3);
  EXPECT_EQ(out.steps_run, 3);
  EXPECT_EQ(out.losses.size(), 3u);

  // A checkpoint already at the last step: nothing to do, the history comes back.
  r = resumed();
  r.schedule.steps = 2;
  const TrainResult none = run_training(r);
  EXPECT_EQ(none.steps_run, 2);
  EXPECT_EQ(none.losses, ck.state.losses);

  // latest / auto.
  r = tiny_run();
  r.checkpoint.resume = ResumeFrom::parse("latest");
  expect_input_error([&] { run_training(r); }, {"resume=latest needs save_dir"});
  r.checkpoint.save_dir = testing::temp_dir();
  expect_input_error([&] { run_training(r); }, {"resume=latest: save_dir=" + r.checkpoint.save_dir + " holds no checkpoint"});
  r.checkpoint.resume = ResumeFrom::parse("auto");
  r.schedule.steps = 1;
  EXPECT_EQ(run_training(r).first_step, 1);
  r.schedule.steps = 2;
  EXPECT_EQ(run_training(r).first_step, 2);  // now there is one
}

// `seqpar export` writes what transformers loads; read back here, and run through `seqpar fwdbwd`
// against the checkpoint itself (tools/verify_export.py does the transformers side).
TEST(Export, WritesAnHfDirectoryThatFwdbwdReadsLikeTheCheckpoint) {
  const std::string root = testing::temp_dir();
  std::string out;
  const std::string bin = testing::binary_path();
  ASSERT_EQ(testing::run_command(
                bin +
                    " train --sp 2 --steps 3 --seq-len 32 --num-pairs 4 --num-queries 4 --micro-batch 2 --eval-every 0 "
                    "--save-dir " +
                    quote(root + "/ckpt"),
                &out),
            0)
      << out;
  const std::string ckpt = root + "/ckpt/step_000003";
  ASSERT_EQ(testing::run_command(
                bin + " export --checkpoint " + quote(root + "/ckpt") + " --out " + quote(root + "/f32"), &out),
            0)
      << out;
  ASSERT_EQ(
      testing::run_command(
          bin + " export --checkpoint " + quote(ckpt) + " --out " + quote(root + "/bf16") + " --dtype bf16", &out),
      0)
      << out;

  const SafetensorsData ck = read_safetensors(ckpt + "/model.safetensors");
  const SafetensorsData f32 = read_safetensors(root + "/f32/model.safetensors");
  const SafetensorsData bf16 = read_safetensors(root + "/bf16/model.safetensors");
  EXPECT_EQ(f32.metadata.at("format"), "pt");
  EXPECT_EQ(bf16.metadata.at("format"), "pt");
  ASSERT_EQ(f32.tensors.size(), ck.tensors.size());
  ASSERT_EQ(bf16.tensors.size(), ck.tensors.size());
  for (const auto& [name, t] : ck.tensors) {
    const Tensor& a = f32.at(name);
    const Tensor& b = bf16.at(name);
    EXPECT_EQ(a.dtype(), DType::kF32) << name;
    EXPECT_EQ(b.dtype(), DType::kBF16) << name;
    EXPECT_EQ(a.to_f32_vector(), t.to_f32_vector()) << name;
    EXPECT_EQ(b.to_f32_vector(), t.to_dtype(DType::kBF16).to_f32_vector()) << name;
  }
  const nlohmann::json cfg32 = nlohmann::json::parse(bytes_of(root + "/f32/config.json"));
  const nlohmann::json cfg16 = nlohmann::json::parse(bytes_of(root + "/bf16/config.json"));
  EXPECT_EQ(cfg32["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(cfg32["torch_dtype"], "float32");
  EXPECT_EQ(cfg16["torch_dtype"], "bfloat16");
  EXPECT_EQ(cfg16["dtype"], "bfloat16");
  EXPECT_EQ(load_hf_llama_config(root + "/f32").num_kv_heads, demo_model_config().num_kv_heads);

  // fwdbwd on the export and on the checkpoint: the same logits (bf16: within its rounding).
  std::vector<int32_t> ids, labels;
  for (int i = 0; i < 2 * 24; ++i) {
    ids.push_back((i * 37 + 11) % 128);
    labels.push_back(i % 24 < 4 ? -100 : ids.back());
  }
  write_safetensors(root + "/batch.safetensors", {{"input_ids", Tensor::from_vector<int32_t>({2, 24}, ids)},
                                                  {"labels", Tensor::from_vector<int32_t>({2, 24}, labels)}});
  auto logits_of = [&](const std::string& model) {
    const std::string o = root + "/out_" + fs::path(model).filename().string() + ".safetensors";
    std::string log;
    EXPECT_EQ(testing::run_command(bin + " fwdbwd --model " + quote(model) + " --input " +
                                       quote(root + "/batch.safetensors") + " --out " + quote(o),
                                   &log),
              0)
        << log;
    return read_safetensors(o).at("logits").clone();
  };
  const Tensor from_ckpt = logits_of(ckpt);
  const Tensor from_f32 = logits_of(root + "/f32");
  const Tensor from_bf16 = logits_of(root + "/bf16");
  EXPECT_EQ(from_f32.to_f32_vector(), from_ckpt.to_f32_vector());
  const double err = testing::rel_error(from_bf16, from_ckpt);
  EXPECT_GT(err, 0);
  EXPECT_LT(err, 2e-2);

  // Errors name the problem.
  EXPECT_EQ(testing::run_command(bin + " export --checkpoint " + quote(root) + " --out " + quote(root + "/x"), &out),
            1);
  EXPECT_NE(out.find("neither a checkpoint directory"), std::string::npos) << out;
  EXPECT_EQ(testing::run_command(
                bin + " export --checkpoint " + quote(ckpt) + " --out " + quote(root + "/x") + " --dtype f8", &out),
            1);
  EXPECT_NE(out.find("--dtype=f8: expected f32, bf16 or f16"), std::string::npos) << out;
}

// Export takes the tokenizer files along: by default from the HF directory the run started from.
TEST(Export, CopiesTheTokenizerFilesOfTheModelTrained) {
  const std::string root = testing::temp_dir();
  const std::string model = root + "/model";
  fs::create_directories(model);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(testing::source_path("tests/fixtures/hf/gqa_untied/") + f, model + "/" + f);
  std::ofstream(model + "/tokenizer.json") << "{\"model\": {}}\n";
  std::ofstream(model + "/tokenizer_config.json") << "{\"eos_token\": \"</s>\"}\n";
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < 12; ++d) {
    docs.emplace_back();
    for (int i = 0; i < 10 + d; ++i) docs.back().push_back((d * 7 + i * 3) % 96);
  }
  write_token_file(root + "/tokens.bin", docs);
  TrainConfig c = tiny_run();
  c.model.dir = model;
  c.data.path = root + "/tokens.bin";
  c.schedule.steps = 1;
  c.checkpoint.save_dir = root + "/ckpt";
  run_training(c);

  ExportResult r = export_checkpoint(c.checkpoint.save_dir, root + "/out", DType::kF32);
  EXPECT_EQ(r.checkpoint_dir, c.checkpoint.save_dir + "/step_000001");
  EXPECT_EQ(r.copied, (std::vector<std::string>{model + "/tokenizer.json", model + "/tokenizer_config.json"}));
  EXPECT_EQ(bytes_of(root + "/out/tokenizer_config.json"), bytes_of(model + "/tokenizer_config.json"));
  EXPECT_EQ(load_hf_llama_config(root + "/out").num_kv_heads, 2);
  r = export_checkpoint(c.checkpoint.save_dir, root + "/none", DType::kF32, "none");
  EXPECT_TRUE(r.copied.empty());
  EXPECT_FALSE(fs::exists(root + "/none/tokenizer.json"));
  expect_input_error([&] { export_checkpoint(c.checkpoint.save_dir, root + "/x", DType::kF32, root + "/nowhere"); },
                     {"--tokenizer-from=" + root + "/nowhere: no such directory"});
}

TEST(Checkpoint, PrintConfigShowsDataAndCheckpointSettings) {
  std::string out;
  ASSERT_EQ(
      testing::run_command(testing::binary_path() +
                               " train --save-dir /tmp/somewhere --save-every 50 --keep-last 3 --resume --print-config",
                           &out),
      0)
      << out;
  for (const char* line : {"save_dir", "save_every", "keep_last", "resume", "data", "eval_data", "shuffle"})
    EXPECT_NE(out.find(std::string("\n  ") + line + " "), std::string::npos) << line << "\n" << out;
  EXPECT_NE(out.find("/tmp/somewhere"), std::string::npos);
  EXPECT_NE(out.find("latest"), std::string::npos);
  EXPECT_NE(out.find("--keep-last"), std::string::npos);
  EXPECT_NE(out.find("built-in recall task"), std::string::npos);
}

}  // namespace
}  // namespace seqpar

namespace seqpar {
namespace {

// `c` with ZeRO stage `zero`, saving every 3 steps to save_dir, stopping at `stop` (0: the end),
// resuming from `resume` ("" or "latest").
TrainResult run_with_zero(TrainConfig c, int zero, const std::string& save_dir, int64_t stop,
                          const std::string& resume) {
  c.memory.zero_stage = zero;
  c.checkpoint.save_dir = save_dir;
  c.checkpoint.save_every = 3;
  c.checkpoint.stop_at_step = stop;
  c.checkpoint.resume = ResumeFrom::parse(resume);
  return run_training(c);
}

// ZeRO stage 1: the optimizer state sharded over the world's ranks trains bit for bit as the
// replicated one (AdamW is element-wise), writes byte-identical checkpoints (the whole state,
// gathered), and a run resumes across stages in both directions.
TEST(Checkpoint, ZeroShardedOptimizerIsBitExact) {
  struct Setting {
    const char* name;
    int sp;
    SpMode mode;
    int dp_replicate;
  };
  for (const Setting& s : {Setting{"sp=2 ulysses x dp=2", 2, SpMode::kUlysses, 2},
                           Setting{"sp=3 ring (uneven shards)", 3, SpMode::kRing, 1}}) {
    SCOPED_TRACE(s.name);
    TrainConfig c = tiny_run();
    c.parallel.sp = s.sp;
    c.parallel.sp_mode = s.mode;
    c.parallel.dp_replicate = s.dp_replicate;
    const std::string root = testing::temp_dir();
    auto run = [&](int zero, const std::string& dir, int64_t stop, const std::string& resume) {
      return run_with_zero(c, zero, root + "/" + dir, stop, resume);
    };
    const TrainResult plain = run(0, "plain", 0, "");
    const TrainResult zero = run(1, "zero", 0, "");
    ASSERT_EQ(plain.losses.size(), 6u);
    ASSERT_EQ(zero.losses.size(), 6u);
    for (size_t i = 0; i < plain.losses.size(); ++i) EXPECT_EQ(zero.losses[i], plain.losses[i]) << "step " << i + 1;
    for (const char* step : {"step_000003", "step_000006"})
      for (const char* file : {"model.safetensors", "optimizer.safetensors"})
        EXPECT_TRUE(bytes_of(root + "/plain/" + step + "/" + file) == bytes_of(root + "/zero/" + step + "/" + file))
            << step << "/" << file << " differs";
    for (auto [first, second] : {std::pair{1, 0}, std::pair{0, 1}}) {
      const std::string dir = "mixed" + std::to_string(first) + std::to_string(second);
      run(first, dir, 3, "");
      const TrainResult resumed = run(second, dir, 0, "latest");
      ASSERT_EQ(resumed.losses.size(), 6u);
      for (size_t i = 0; i < plain.losses.size(); ++i)
        EXPECT_EQ(resumed.losses[i], plain.losses[i]) << "zero " << first << " then " << second << ", step " << i + 1;
    }
  }
}

}  // namespace
}  // namespace seqpar

namespace seqpar {
namespace {

// ZeRO stage 2: the gradients partitioned too (each layer's summed over the world as its backward
// ends, each rank keeping its shard, accumulated over micro-batches). The same training as
// replicated up to the grad norm's summation order (shards' squares summed over the ranks), less
// gradient memory than stage 1, and checkpoints a replicated run resumes (and the reverse).
TEST(Checkpoint, ZeroPartitionedGradientsTrainAlike) {
  struct Setting {
    const char* name;
    int sp;
    SpMode mode;
    int dp_replicate, grad_accum;
  };
  for (const Setting& s : {Setting{"sp=2 ulysses x dp=2", 2, SpMode::kUlysses, 2, 1},
                           Setting{"sp=3 ring (uneven shards), 2 micro-batches", 3, SpMode::kRing, 1, 2}}) {
    SCOPED_TRACE(s.name);
    TrainConfig c = tiny_run();
    c.parallel.sp = s.sp;
    c.parallel.sp_mode = s.mode;
    c.parallel.dp_replicate = s.dp_replicate;
    c.data.grad_accum = s.grad_accum;
    const std::string root = testing::temp_dir();
    auto run = [&](int zero, const std::string& dir, int64_t stop, const std::string& resume) {
      return run_with_zero(c, zero, root + "/" + dir, stop, resume);
    };
    auto expect_alike = [](const TrainResult& got, const TrainResult& want, const std::string& what) {
      ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
      for (size_t i = 0; i < want.losses.size(); ++i)
        EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::fabs(want.losses[i])) << what << ", step " << i + 1;
    };
    const TrainResult plain = run(0, "plain", 0, "");
    const TrainResult one = run(1, "one", 0, "");
    const TrainResult two = run(2, "two", 0, "");
    expect_alike(two, plain, "ZeRO-2");
    // Gradient memory: a shard, one layer and the edges instead of the whole buffer.
    EXPECT_LT(*std::max_element(two.step_peak_bytes.begin() + 1, two.step_peak_bytes.end()),
              *std::max_element(one.step_peak_bytes.begin() + 1, one.step_peak_bytes.end()));
    for (auto [first, second] : {std::pair{2, 0}, std::pair{0, 2}}) {
      const std::string dir = "mixed" + std::to_string(first) + std::to_string(second);
      run(first, dir, 3, "");
      expect_alike(run(second, dir, 0, "latest"), plain,
                   "ZeRO " + std::to_string(first) + " then " + std::to_string(second));
    }
  }
}

}  // namespace
}  // namespace seqpar
