// The run's reliability guards (docs/RELIABILITY.md, "Runs"): the non-finite guard, steps with
// nothing to learn from, checkpoint checksums and cross-checks (with the fallback on resume), the
// optimizer step count parsed whole, export refusing to write over a checkpoint, and the save
// directory's lock. Signals, disks and the launcher are in tests/cli/test_reliability_cli.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/token_file.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/checksum.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace seqpar {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

TrainConfig tiny_run() {
  TrainConfig c = testing::tiny_recall_config();
  c.schedule.steps = 4;
  c.schedule.warmup_steps = 0;
  c.optimizer.adamw.lr = 1e-3f;
  c.optimizer.clip = 1.0;
  c.parallel.sp = 1;
  c.logging.eval_every = 0;
  c.data.eval_batches = 1;
  c.logging.log_every = 1;
  c.logging.quiet = true;
  return c;
}

// A run that diverges at step 2: a learning rate of 1e30 without clipping makes the weights huge
// after step 1, and step 2's forward overflows to NaN.
TrainConfig diverging_run() {
  TrainConfig c = tiny_run();
  c.optimizer.adamw.lr = 1e30f;
  c.optimizer.clip = 0;
  return c;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.is_open()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

template <typename E = InputError, typename F>
std::string expect_error(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << fragments[0];
  } catch (const E& e) {
    for (const std::string& frag : fragments)
      EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << "missing '" << frag << "' in: " << e.what();
    return e.what();
  }
  return "";
}

// Makes a hand-edited checkpoint consistent again: its files' sizes and checksums recorded anew
// and trainer_state.json resealed, so only the cross-checks between files can find the edit.
void reseal(const std::string& dir) {
  json state = json::parse(bytes_of(dir + "/trainer_state.json"));
  for (const char* f : {"model.safetensors", "config.json", "optimizer.safetensors"}) {
    state["files"][f] = static_cast<uint64_t>(fs::file_size(dir + "/" + f));
    state["checksums"][f] = checksum_text(file_xxh64(dir + "/" + f));
  }
  write_bytes(dir + "/trainer_state.json", sealed_state_text(state));
}

TEST(Checksum, Xxh64KnownValuesAndChunking) {
  // The algorithm's published values for the empty input and "abc" (seed 0).
  EXPECT_EQ(xxh64("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh64("abc", 3), 0x44BC2CF5AD770999ull);
  // A file read in chunks hashes like the buffer, at every tail length and across chunk bounds.
  const std::string dir = testing::temp_dir();
  std::string data;
  for (int i = 0; i < (1 << 20) + 77; ++i) data.push_back(static_cast<char>((i * 2654435761u) >> 13));
  for (size_t n : {size_t{0}, size_t{5}, size_t{31}, size_t{32}, size_t{33}, size_t{1} << 20, data.size()}) {
    write_bytes(dir + "/f", data.substr(0, n));
    EXPECT_EQ(file_xxh64(dir + "/f"), xxh64(data.data(), n)) << n;
  }
  EXPECT_NE(xxh64(data.data(), 64), xxh64(data.data() + 1, 64));
}

// The default policy: the first non-finite step stops the run with an error naming the step; the
// step's update is not applied, nothing of it is saved, and --keep-last has not deleted the last
// good checkpoint, which loads and resumes. On every rank alike (sp = 2 x dp = 2: no hang).
TEST(NonFinite, DefaultAbortsNamingTheStepAndKeepsTheLastGoodCheckpoint) {
  for (int sp : {1, 2}) {
    SCOPED_TRACE(sp);
    TrainConfig c = diverging_run();
    c.parallel.sp = sp;
    c.parallel.dp_replicate = sp;
    c.checkpoint.save_dir = testing::temp_dir() + "/ckpt";
    c.checkpoint.save_every = 1;
    c.checkpoint.keep_last = 1;
    expect_error<Error>([&] { run_training(c); },
                        {"step 2: the loss or the gradient norm is not finite", "on_nonfinite=abort",
                         "the last checkpoint, " + c.checkpoint.save_dir + "/step_000001, is intact"});
    EXPECT_EQ(latest_checkpoint(c.checkpoint.save_dir), c.checkpoint.save_dir + "/step_000001");
    EXPECT_FALSE(fs::exists(c.checkpoint.save_dir + "/step_000002"));
    const Checkpoint ck = load_checkpoint(c.checkpoint.save_dir + "/step_000001");
    EXPECT_EQ(ck.state.step, 1);
    for (const auto& [name, t] : ck.model.tensors)
      for (float v : t.to_f32_vector()) ASSERT_TRUE(std::isfinite(v)) << name;
    // And it resumes: the run goes on from step 2 (skipping, as its weights are those of lr 1e30).
    TrainConfig r = c;
    r.checkpoint.on_nonfinite = "skip";
    r.checkpoint.resume = ResumeFrom::parse("latest");
    const TrainResult res = run_training(r);
    EXPECT_EQ(res.first_step, 2);
    EXPECT_EQ(res.steps_run, 4);
    EXPECT_EQ(res.skipped_steps, (std::vector<int64_t>{2, 3, 4}));
  }
}

// skip: every non-finite step is skipped (no AdamW step: weights, moments and step count as they
// were), counted in the result, the log's metrics records and the checkpoint, which holds no NaN
// and loads (its NaN losses written as null).
TEST(NonFinite, SkipLeavesWeightsAndMomentsUnchangedAndCountsTheSteps) {
  TrainConfig c = diverging_run();
  c.checkpoint.on_nonfinite = "skip";
  c.checkpoint.save_dir = testing::temp_dir() + "/ckpt";
  c.checkpoint.save_every = 1;
  c.logging.metrics_out = testing::temp_dir() + "/m.jsonl";
  const TrainResult r = run_training(c);
  EXPECT_EQ(r.steps_run, 4);
  EXPECT_EQ(r.skipped_steps, (std::vector<int64_t>{2, 3, 4}));
  const std::string one = c.checkpoint.save_dir + "/step_000001", four = c.checkpoint.save_dir + "/step_000004";
  EXPECT_EQ(bytes_of(one + "/model.safetensors"), bytes_of(four + "/model.safetensors"));
  EXPECT_EQ(bytes_of(one + "/optimizer.safetensors"), bytes_of(four + "/optimizer.safetensors"));
  const Checkpoint ck = load_checkpoint(four);
  EXPECT_EQ(ck.optimizer_step, 1);
  EXPECT_EQ(ck.state.skipped_steps, (std::vector<int64_t>{2, 3, 4}));
  ASSERT_EQ(ck.state.losses.size(), 4u);
  EXPECT_TRUE(std::isfinite(ck.state.losses[0]));
  EXPECT_TRUE(std::isnan(ck.state.losses[3]));
  int skipped_records = 0;
  std::ifstream in(c.logging.metrics_out);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (j.value("skipped", false)) {
      ++skipped_records;
      EXPECT_EQ(j["skipped_steps"].get<int>(), skipped_records);
      EXPECT_TRUE(j["loss"].is_null());
    }
  }
  EXPECT_EQ(skipped_records, 3);
}

// abort after K in a row: the first K - 1 are skipped, the K-th stops the run; the count goes on
// across a resume (the checkpoint records the skipped steps).
TEST(NonFinite, AbortAfterKInARow) {
  TrainConfig c = diverging_run();
  c.schedule.steps = 8;
  c.checkpoint.max_nonfinite_steps = 3;
  c.checkpoint.save_dir = testing::temp_dir() + "/ckpt";
  c.checkpoint.save_every = 1;
  expect_error<Error>([&] { run_training(c); }, {"step 4:", "the 3th such step in a row", "max_nonfinite_steps=3"});
  EXPECT_EQ(load_checkpoint(*latest_checkpoint(c.checkpoint.save_dir)).state.step, 3);
  TrainConfig again = c;
  again.checkpoint.resume = ResumeFrom::parse("latest");
  again.checkpoint.max_nonfinite_steps = 4;  // two skipped before the checkpoint: steps 4 and 5 make four in a row
  expect_error<Error>([&] { run_training(again); }, {"step 5:", "the 4th such step in a row"});
}

TEST(NonFinite, SettingsAreValidated) {
  TrainConfig c = tiny_run();
  const SettingDecl* d = find_setting("on_nonfinite");
  ASSERT_NE(d, nullptr);
  expect_error([&] { d->set(c, "ignore", "--on-nonfinite"); }, {"--on-nonfinite=ignore: expected abort or skip"});
  c.checkpoint.on_nonfinite = "abort";
  c.checkpoint.max_nonfinite_steps = 0;
  expect_error([&] { Trainer t(c); }, {"max_nonfinite_steps=0 must be >= 1"});
}

// Steps with nothing to learn from: refused before training when it can be known.
TEST(NothingToLearn, SeqLenOneAndFullyMaskedDataAreRefusedBeforeTraining) {
  const std::string dir = testing::temp_dir();
  std::vector<std::vector<int32_t>> docs = {{1, 2, 3, 4, 5, 6, 7, 8}, {9, 10, 11, 12, 13, 14, 15, 16}};
  write_token_file(dir + "/masked.bin", docs, {std::vector<uint8_t>(8, 0), std::vector<uint8_t>(8, 0)});
  TrainConfig c = tiny_run();
  c.data.path = dir + "/masked.bin";
  c.data.task.seq_len = 4;
  c.data.micro_batch = 1;
  expect_error([&] { Trainer t(c); },
               {"data=" + dir + "/masked.bin", "no token of its 2 documents is a target", "nothing to learn from"});
  // Only the documents' first tokens labelled: no target either (labels shift inside a document).
  std::vector<uint8_t> first(8, 0);
  first[0] = 1;
  write_token_file(dir + "/first.bin", docs, {first, first});
  c.data.path = dir + "/first.bin";
  expect_error([&] { Trainer t(c); }, {"nothing to learn from"});
  write_token_file(dir + "/plain.bin", docs);
  c.data.path = dir + "/plain.bin";
  c.data.task.seq_len = 1;
  expect_error([&] { Trainer t(c); }, {"seq_len=1: a sequence of one token has no next token to predict"});
  c.data.task.seq_len = 4;
  EXPECT_NO_THROW(Trainer t(c));
}

// A flipped byte in any file is found by its checksum, naming the file; resuming from the save
// directory falls back to the previous checkpoint (said in the log), export refuses.
TEST(Checksums, FlippedBytesAreRefusedAndResumeFallsBack) {
  TrainConfig c = tiny_run();
  c.checkpoint.save_dir = testing::temp_dir() + "/ckpt";
  c.checkpoint.save_every = 2;
  run_training(c);
  const std::string two = c.checkpoint.save_dir + "/step_000002", four = c.checkpoint.save_dir + "/step_000004";
  const std::string model = bytes_of(four + "/model.safetensors");
  std::string flipped = model;
  flipped[flipped.size() - 3] ^= 0x10;  // inside the last tensor's bytes: the file still parses
  write_bytes(four + "/model.safetensors", flipped);
  expect_error([&] { load_checkpoint(four); }, {"checkpoint '" + four + "'", "model.safetensors: checksum mismatch"});
  expect_error([&] { export_checkpoint(four, testing::temp_dir() + "/hf", DType::kF32); },
               {"model.safetensors: checksum mismatch"});
  TrainConfig r = c;
  r.schedule.steps = 5;
  r.checkpoint.resume = ResumeFrom::parse("latest");
  const TrainResult res = run_training(r);
  EXPECT_EQ(res.resumed_from, two);
  EXPECT_EQ(res.first_step, 3);
  // An explicit path does not fall back.
  TrainConfig p = c;
  p.checkpoint.save_dir = "";
  p.checkpoint.save_every = 0;
  p.checkpoint.resume = ResumeFrom::parse(four);
  write_bytes(four + "/model.safetensors", flipped);
  expect_error([&] { run_training(p); }, {"model.safetensors: checksum mismatch"});

  // trainer_state.json's own checksum: a changed loss is found.
  std::string state = bytes_of(two + "/trainer_state.json");
  const size_t at = state.find("\"losses\"");
  ASSERT_NE(at, std::string::npos);
  const size_t digit = state.find_first_of("123456789", at + 12);
  state[digit] = state[digit] == '9' ? '8' : static_cast<char>(state[digit] + 1);
  write_bytes(two + "/trainer_state.json", state);
  expect_error([&] { load_checkpoint(two); }, {"trainer_state.json: checksum mismatch"});
}

// Files that disagree with each other (each checksum right): refused naming the file, before
// anything is allocated from the wrong size.
TEST(Checksums, FilesThatDisagreeAreRefused) {
  TrainConfig c = tiny_run();
  c.schedule.steps = 2;
  c.checkpoint.save_dir = testing::temp_dir() + "/ckpt";
  run_training(c);
  const std::string two = c.checkpoint.save_dir + "/step_000002";
  const std::string config = bytes_of(two + "/config.json");
  json cfg = json::parse(config);
  cfg["num_hidden_layers"] = 3;  // within every size bound (the tiny model has 2): only the cross-check sees it
  write_bytes(two + "/config.json", cfg.dump(2));
  reseal(two);
  expect_error([&] { load_checkpoint(two); },
               {"config.json disagrees with trainer_state.json's model", "num_hidden_layers=3"});
  expect_error([&] { export_checkpoint(two, testing::temp_dir() + "/hf", DType::kF32); }, {"config.json disagrees"});
  TrainConfig r = c;
  r.schedule.steps = 3;
  r.checkpoint.resume = ResumeFrom::parse(two);
  r.checkpoint.save_dir = "";
  expect_error([&] { run_training(r); }, {"config.json disagrees"});
  write_bytes(two + "/config.json", config);

  // The optimizer's step count, parsed whole and checked against the state's step.
  SafetensorsData opt = read_safetensors(two + "/optimizer.safetensors");
  const std::vector<std::pair<std::string, Tensor>> tensors = opt.tensors;
  for (const char* bad : {"12abc", "1e3", "", "-1", "2 "}) {
    SCOPED_TRACE(bad);
    write_safetensors(two + "/optimizer.safetensors", tensors, {{"step", bad}, {"has_master", "0"}});
    reseal(two);
    expect_error([&] { load_checkpoint(two); },
                 {"metadata step='" + std::string(bad) + "' is not a whole non-negative integer"});
  }
  write_safetensors(two + "/optimizer.safetensors", tensors, {{"step", "7"}, {"has_master", "0"}});
  reseal(two);
  expect_error([&] { load_checkpoint(two); }, {"metadata step=7 (AdamW's step count) disagrees with"});
  write_safetensors(two + "/optimizer.safetensors", tensors, {{"step", "2"}, {"has_master", "0"}});
  reseal(two);
  EXPECT_EQ(load_checkpoint(two).optimizer_step, 2);
}

// seqpar export never writes into a checkpoint (nor a save directory): refused before writing.
TEST(Export, RefusesToWriteOverACheckpoint) {
  TrainConfig c = tiny_run();
  c.schedule.steps = 2;
  c.checkpoint.save_dir = testing::temp_dir() + "/ckpt";
  run_training(c);
  const std::string two = c.checkpoint.save_dir + "/step_000002";
  const std::string model = bytes_of(two + "/model.safetensors");
  for (const std::string& out : {two, two + "/", two + "/hf", two + "/../step_000002/x"})
    expect_error([&] { export_checkpoint(c.checkpoint.save_dir, out, DType::kBF16); },
                 {"--out=" + out, "is a training checkpoint"});
  expect_error([&] { export_checkpoint(two, c.checkpoint.save_dir, DType::kBF16); }, {"a training save directory"});
  EXPECT_EQ(bytes_of(two + "/model.safetensors"), model);
  EXPECT_NO_THROW(load_checkpoint(two));
  EXPECT_NO_THROW(export_checkpoint(two, c.checkpoint.save_dir + "/hf", DType::kBF16));  // beside the checkpoints is fine
}

// One trainer per save directory: a second refuses naming the holder; the lock goes with the
// trainer. Taking it removes what killed saves left.
TEST(SaveDir, LockedWhileATrainerHoldsItAndLeftoversAreCleaned) {
  TrainConfig c = tiny_run();
  c.schedule.steps = 2;
  c.checkpoint.save_dir = testing::temp_dir() + "/ckpt";
  {
    Trainer first(c);
    expect_error([&] { Trainer second(c); }, {"save_dir=" + c.checkpoint.save_dir + " is in use by another trainer",
                                              fmt::format("pid {} on host", ::getpid()), c.checkpoint.save_dir + "/.lock"});
  }
  run_training(c);
  fs::create_directories(c.checkpoint.save_dir + "/.tmp_step_000009");
  write_bytes(c.checkpoint.save_dir + "/.tmp_step_000009/model.safetensors", std::string(1000, 'x'));
  write_bytes(c.checkpoint.save_dir + "/latest.tmp.123.0", "step_000009\n");
  { Trainer t(c); }
  EXPECT_FALSE(fs::exists(c.checkpoint.save_dir + "/.tmp_step_000009"));
  EXPECT_FALSE(fs::exists(c.checkpoint.save_dir + "/latest.tmp.123.0"));
  EXPECT_EQ(latest_checkpoint(c.checkpoint.save_dir), c.checkpoint.save_dir + "/step_000002");
}

}  // namespace
}  // namespace seqpar
