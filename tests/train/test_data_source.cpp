// Training on a token file (--data): which sequences each step, micro-batch and dp rank read, and
// how epochs roll over; the loss of a step against the model run by hand on the file's tokens
// (packed documents never attend across, the loss mask is honoured); SP and DP degrees; the
// eval loss of --eval-data; resume across an epoch boundary; errors before training.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"
#include "data/token_file.h"
#include "train/checkpoint.h"
#include "train/hf_model.h"
#include "train/trainer.h"

namespace seqpar {
namespace {

namespace fs = std::filesystem;

struct Corpus {
  std::vector<std::vector<int32_t>> docs;
  std::vector<std::vector<uint8_t>> masks;  // empty: no loss mask
};

// Exactly `tokens` tokens in documents of 5..40 tokens (the last one shorter), ids in [2, 128);
// with_mask: the first third of each document is a "prompt" (mask 0).
Corpus make_corpus(int64_t tokens, uint64_t seed, bool with_mask) {
  std::mt19937_64 rng(seed);
  Corpus c;
  int64_t n = 0;
  while (n < tokens) {
    const int len = static_cast<int>(std::min<int64_t>(5 + static_cast<int64_t>(rng() % 36), tokens - n));
    std::vector<int32_t> doc(static_cast<size_t>(len));
    for (int32_t& t : doc) t = 2 + static_cast<int32_t>(rng() % 126);
    if (with_mask) {
      std::vector<uint8_t> m(static_cast<size_t>(len), 1);
      for (int i = 0; i < len / 3; ++i) m[static_cast<size_t>(i)] = 0;
      c.masks.push_back(m);
    }
    c.docs.push_back(doc);
    n += len;
  }
  return c;
}

std::string write_corpus(const Corpus& c) {
  const std::string path = testing::temp_dir() + "/tokens.bin";
  write_token_file(path, c.docs, c.masks);
  return path;
}

TrainConfig data_run(const std::string& path) {
  TrainConfig c;
  c.model.arch = demo_model_config();
  c.data.path = path;
  c.data.task.seq_len = 32;
  c.data.micro_batch = 2;
  c.schedule.steps = 3;
  c.schedule.warmup_steps = 1;
  c.optimizer.adamw.lr = 1e-3f;
  c.optimizer.clip = 1.0;
  c.parallel.sp = 1;
  c.logging.eval_every = 0;
  c.logging.log_every = 1;
  c.logging.quiet = true;
  return c;
}

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

void expect_close_losses(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t s = 0; s < want.size(); ++s)
    EXPECT_LE(std::fabs(got[s] - want[s]), 1e-5 * std::fabs(want[s])) << what << ": step " << s + 1;
}

// Each epoch's first E × M sequences are read once each (E steps of M = micro × accum × dp), in
// the dataset's order; then the next epoch.
TEST(TokenData, StepsReadEachSequenceOfAnEpochOnceThenRollOver) {
  const Corpus corpus = make_corpus(37 * 32, 1, false);
  auto file = std::make_shared<const TokenFile>(write_corpus(corpus));
  TokenDataset data(file, 32, 99, /*shuffle=*/true);
  ASSERT_GE(data.num_sequences(), 37);
  TrainConfig c = data_run(file->path());
  c.data.micro_batch = 2;
  c.data.grad_accum = 2;
  const int dp = 2;
  const int64_t M = 8, E = data.num_sequences() / M;
  // Sequence contents -> index, per epoch (the tokens are random, so sequences are distinct).
  auto index_of = [&](int64_t epoch) {
    std::map<std::vector<int32_t>, int64_t> m;
    for (int64_t i = 0; i < data.num_sequences(); ++i) m[data.get(epoch, i).input_ids] = i;
    return m;
  };
  const auto epoch0 = index_of(0), epoch1 = index_of(1);
  std::vector<int64_t> seen;
  for (int64_t step = 1; step <= E + 1; ++step) {
    for (int m = 0; m < c.data.grad_accum; ++m)
      for (int d = 0; d < dp; ++d)
        for (const Sequence& s : token_data_batch(data, c, dp, step, m, d)) {
          const auto& idx = step <= E ? epoch0 : epoch1;
          ASSERT_TRUE(idx.count(s.input_ids)) << "step " << step;
          seen.push_back(idx.at(s.input_ids) + (step <= E ? 0 : 1000));
        }
  }
  // Epoch 0: 0 .. E*M-1 in order; the step after it starts epoch 1 at index 0.
  std::vector<int64_t> want;
  for (int64_t i = 0; i < E * M; ++i) want.push_back(i);
  for (int64_t i = 0; i < M; ++i) want.push_back(1000 + i);
  EXPECT_EQ(seen, want);
  EXPECT_EQ(token_data_position(data.num_sequences(), M, E), (std::pair<int64_t, int64_t>{1, 0}));
  EXPECT_EQ(token_data_position(data.num_sequences(), M, E + 1), (std::pair<int64_t, int64_t>{1, M}));
  // dp = 2 with one micro-batch reads, per step, what dp = 1 with two micro-batches reads.
  TrainConfig one = c;
  one.data.grad_accum = 1;
  for (int64_t step = 1; step <= 3; ++step)
    for (int d = 0; d < 2; ++d) {
      const auto a = token_data_batch(data, one, 2, step, 0, d);
      const auto b = token_data_batch(data, c, 1, step, d, 0);
      ASSERT_EQ(a.size(), b.size());
      for (size_t j = 0; j < a.size(); ++j) EXPECT_EQ(a[j].input_ids, b[j].input_ids);
    }
}

// The trainer's first loss is the model's loss on the file's first sequences, built here by hand
// from the documents (file order): packed with doc_lens, or each document piece as a row of its
// own — the same loss, so no token attends across a document. Prompt tokens (mask 0) have no label.
TEST(TokenData, FirstLossIsTheModelOnTheFileAsWritten) {
  for (bool with_mask : {false, true}) {
    SCOPED_TRACE(with_mask ? "with a loss mask" : "no loss mask");
    constexpr int L = 96;  // several documents per sequence
    const Corpus corpus = make_corpus(6 * L, 2, with_mask);
    TrainConfig c = data_run(write_corpus(corpus));
    c.data.task.seq_len = L;
    c.data.shuffle = false;
    c.schedule.steps = 1;
    c.model.init_std = 0.5f;  // sharp attention, so what a token attends to shows in the loss
    const TrainResult r = run_training(c);
    ASSERT_EQ(r.losses.size(), 1u);

    // The stream in file order, and sequences 0 and 1 of it.
    std::vector<int32_t> stream, labels, doc_of;
    for (size_t d = 0; d < corpus.docs.size(); ++d)
      for (size_t i = 0; i < corpus.docs[d].size(); ++i) {
        stream.push_back(corpus.docs[d][i]);
        labels.push_back(with_mask && corpus.masks[d][i] == 0 ? -100 : corpus.docs[d][i]);
        doc_of.push_back(static_cast<int32_t>(d));
      }
    std::vector<Sequence> packed, pieces;
    for (int s = 0; s < 2; ++s) {
      Sequence row;
      for (int i = s * L; i < (s + 1) * L; ++i) {
        if (i == s * L || doc_of[i] != doc_of[i - 1]) {
          row.doc_lens.push_back(0);
          pieces.emplace_back();
        }
        row.input_ids.push_back(stream[i]);
        row.labels.push_back(labels[i]);
        ++row.doc_lens.back();
        pieces.back().input_ids.push_back(stream[i]);
        pieces.back().labels.push_back(labels[i]);
      }
      packed.push_back(row);
    }
    ASSERT_GT(packed[0].doc_lens.size(), 2u) << "the test wants packed documents";
    auto loss_of = [&](const std::vector<Sequence>& rows) {
      LlamaModel model(c.model.arch);
      init_llama_params(model.params(), c.model.arch, c.schedule.seed, c.model.init_std);
      SpBatch b = make_sp_batch(rows, 1, SpLayout::kContiguous);
      const Shard& sh = b.shards[0];
      LocalAttention attn(shard_token_meta(sh));
      auto t = [](const std::vector<int32_t>& v) {
        return Tensor::from_vector<int32_t>({static_cast<int64_t>(v.size())}, v);
      };
      LossStats s = model.forward({t(sh.input_ids), t(sh.position_ids), t(sh.targets)}, attn);
      EXPECT_EQ(s.good_tokens, b.good_tokens);

      return static_cast<double>(static_cast<float>(s.loss_sum) / s.good_tokens);
    };
    EXPECT_NEAR(r.losses[0], loss_of(packed), 1e-6 * r.losses[0]);
    EXPECT_NEAR(r.losses[0], loss_of(pieces), 1e-5 * r.losses[0]);
    // Letting the documents see each other (same targets: a document's first label is dropped so
    // the previous document's last token still predicts nothing) changes the loss: the checks
    // above can fail.
    std::vector<Sequence> unpacked = packed;
    for (Sequence& s : unpacked) {
      int at = 0;
      for (int len : s.doc_lens) {
        s.labels[static_cast<size_t>(at)] = -100;
        at += len;
      }
      s.doc_lens.clear();
    }
    EXPECT_GT(std::fabs(r.losses[0] - loss_of(unpacked)), 1e-3 * r.losses[0]);

    // document_mask false (--no-document-mask, Megatron's default): each sequence is one stream, its
    // documents seeing the ones before them, positions running on, a document's last token
    // predicting the next one's first.
    TrainConfig m = c;
    m.data.document_mask = false;
    const TrainResult rm = run_training(m);
    ASSERT_EQ(rm.losses.size(), 1u);
    std::vector<Sequence> streams = packed;
    for (Sequence& s : streams) s.doc_lens.clear();
    EXPECT_NEAR(rm.losses[0], loss_of(streams), 1e-6 * rm.losses[0]);
    EXPECT_GT(std::fabs(rm.losses[0] - r.losses[0]), 1e-3 * r.losses[0]);
    // With eod_mask_loss too (Megatron's --eod-mask-loss): the stream, without the targets that cross
    // into the next document (the `unpacked` rows above).
    m.data.eod_mask_loss = true;
    const TrainResult re = run_training(m);
    ASSERT_EQ(re.losses.size(), 1u);
    EXPECT_NEAR(re.losses[0], loss_of(unpacked), 1e-6 * re.losses[0]);
    if (with_mask) {  // every document's first token is in its masked prompt: nothing to take out
      EXPECT_EQ(re.losses[0], rm.losses[0]);
    } else {  // a few targets of a hundred and more: a small change, far above rounding
      EXPECT_GT(std::fabs(re.losses[0] - rm.losses[0]), 1e-5 * rm.losses[0]);
    }
    // With the document mask it changes nothing: a document's last token predicts nothing already.
    TrainConfig e = c;
    e.data.eod_mask_loss = true;
    EXPECT_EQ(run_training(e).losses[0], r.losses[0]);
  }
}

TEST(TokenData, SpAndDpDegreesReproduceDegreeOne) {
  const Corpus corpus = make_corpus(40 * 32, 3, true);
  const std::string path = write_corpus(corpus);
  TrainConfig base = data_run(path);
  base.data.grad_accum = 2;
  const TrainResult ref = run_training(base);
  ASSERT_EQ(ref.losses.size(), 3u);
  EXPECT_EQ(ref.steps_per_epoch, ref.num_sequences / 4);
  struct Setting {
    SpMode mode;
    int sp, u;
  };
  for (const Setting& s :
       {Setting{SpMode::kUlysses, 2, 0}, Setting{SpMode::kRing, 4, 0}, Setting{SpMode::kHybrid, 4, 2}}) {
    TrainConfig c = base;
    c.parallel.sp = s.sp;
    c.parallel.sp_mode = s.mode;
    c.parallel.ulysses_degree = s.u;
    const TrainResult r = run_training(c);
    expect_close_losses(r.losses, ref.losses, sp_mode_name(s.mode) + " sp=" + std::to_string(s.sp));
    EXPECT_EQ(r.steps_per_epoch, ref.steps_per_epoch) << "steps per epoch must not depend on SP";
  }
  TrainConfig dp = base;
  dp.data.grad_accum = 1;
  dp.parallel.dp_replicate = 2;
  dp.parallel.sp = 2;
  dp.parallel.sp_mode = SpMode::kRing;
  const TrainResult r = run_training(dp);
  expect_close_losses(r.losses, ref.losses, "dp=2 sp=2 vs grad_accum=2");
  EXPECT_EQ(r.steps_per_epoch, ref.steps_per_epoch);
}

// Several epochs, stopped mid-way and resumed across the epoch boundary with sp = 2: the same
// losses bit for bit, and the data position in the checkpoint.
TEST(TokenData, EpochsRollOverAndResumeIsBitExact) {
  const Corpus corpus = make_corpus(9 * 32, 4, false);  // 9 sequences: 2 steps of 4 per epoch, 1 unused
  TrainConfig c = data_run(write_corpus(corpus));
  c.parallel.sp = 2;
  c.parallel.sp_mode = SpMode::kRing;
  c.data.grad_accum = 2;
  c.schedule.steps = 5;
  const std::string root = testing::temp_dir();
  TrainConfig whole = c;
  whole.checkpoint.save_dir = root + "/whole";
  const TrainResult a = run_training(whole);
  EXPECT_EQ(a.num_sequences, 9);
  EXPECT_EQ(a.steps_per_epoch, 2);
  EXPECT_EQ(a.data_epoch, 2);
  EXPECT_EQ(a.data_index, 4);
  for (double l : a.losses) EXPECT_TRUE(std::isfinite(l) && l > 0);

  TrainConfig first = c;
  first.checkpoint.save_dir = root + "/split";
  first.checkpoint.stop_at_step = 3;
  run_training(first);
  const Checkpoint ck = load_checkpoint(root + "/split/step_000003");
  EXPECT_EQ(ck.state.data_source, "tokens");
  EXPECT_EQ(ck.state.data_epoch, 1);
  EXPECT_EQ(ck.state.data_index, 4);
  EXPECT_EQ(ck.state.config["data"]["num_tokens"].get<int64_t>(), [&] {
    int64_t n = 0;
    for (auto& d : corpus.docs) n += static_cast<int64_t>(d.size());
    return n;
  }());
  TrainConfig second = c;
  second.checkpoint.save_dir = root + "/split";
  second.checkpoint.resume = ResumeFrom::parse("latest");
  const TrainResult b = run_training(second);
  ASSERT_EQ(b.losses.size(), a.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], b.losses[i]) << "step " << i + 1;
  const SafetensorsData wa = read_safetensors(root + "/whole/step_000005/model.safetensors");
  const SafetensorsData wb = read_safetensors(root + "/split/step_000005/model.safetensors");
  for (const auto& [name, t] : wa.tensors) EXPECT_EQ(t.to_f32_vector(), wb.at(name).to_f32_vector()) << name;

  // Another file (same size, other tokens) is not the checkpoint's data.
  TrainConfig other = second;
  other.data.path = write_corpus(make_corpus(9 * 32, 5, false));
  other.checkpoint.resume = ResumeFrom::parse(root + "/split/step_000003");
  expect_input_error([&] { run_training(other); }, {"cannot resume", "data."});
}

// --eval-data: the loss of the final weights (read back from the checkpoint) on the eval file's
// first eval_batches × micro_batch × dp sequences, and the same with SP.
TEST(TokenData, EvalDataGivesTheEvalLoss) {
  const std::string train_path = write_corpus(make_corpus(12 * 32, 6, true));
  const Corpus eval_corpus = make_corpus(6 * 32, 7, true);
  const std::string eval_path = write_corpus(eval_corpus);
  TrainConfig c = data_run(train_path);
  c.data.eval_path = eval_path;
  c.logging.eval_every = 2;
  c.data.eval_batches = 2;
  c.schedule.steps = 3;
  c.checkpoint.save_dir = testing::temp_dir();
  const TrainResult r = run_training(c);
  ASSERT_EQ(r.eval_loss.size(), 2u);  // steps 2 and 3 (the last)
  EXPECT_EQ(r.eval_loss[0].first, 2);
  EXPECT_EQ(r.eval_loss[1].first, 3);
  EXPECT_TRUE(r.eval_accuracy.empty());

  const Checkpoint ck = load_checkpoint(c.checkpoint.save_dir + "/step_000003");
  LlamaModel model(ck.model_config);
  load_params_from(model.params(), ck.model_config, ck.model, ck.dir);
  TokenDataset eval(std::make_shared<const TokenFile>(eval_path), 32, c.schedule.seed, /*shuffle=*/false);
  double loss_sum = 0;
  int64_t good = 0;
  for (int b = 0; b < 2; ++b) {
    std::vector<Sequence> rows = {eval.get(0, 2 * b), eval.get(0, 2 * b + 1)};
    SpBatch batch = make_sp_batch(rows, 1, SpLayout::kContiguous);
    const Shard& sh = batch.shards[0];
    LocalAttention attn(shard_token_meta(sh));
    auto t = [](const std::vector<int32_t>& v) {
      return Tensor::from_vector<int32_t>({static_cast<int64_t>(v.size())}, v);
    };
    loss_sum += model.forward({t(sh.input_ids), t(sh.position_ids), t(sh.targets)}, attn).loss_sum;
    good += batch.good_tokens;
  }
  EXPECT_NEAR(r.eval_loss.back().second, static_cast<float>(loss_sum) / good, 1e-6 * r.eval_loss.back().second);

  TrainConfig sp = c;
  sp.checkpoint.save_dir.clear();
  sp.parallel.sp = 2;
  const TrainResult rs = run_training(sp);
  ASSERT_EQ(rs.eval_loss.size(), 2u);
  EXPECT_NEAR(rs.eval_loss[1].second, r.eval_loss[1].second, 1e-5 * r.eval_loss[1].second);
}

TEST(TokenData, BadDataFailsBeforeTraining) {
  // A token beyond the model's vocabulary, at the very end of the file.
  Corpus corpus = make_corpus(8 * 32, 8, false);
  corpus.docs.back().back() = 200;
  TrainConfig c = data_run(write_corpus(corpus));
  c.logging.metrics_out = testing::temp_dir() + "/metrics.jsonl";
  expect_input_error([&] { run_training(c); }, {"data=" + c.data.path, "token 200 at index", "is >= vocab_size=128",
                                                "the model's vocab_size is 128"});
  EXPECT_FALSE(fs::exists(c.logging.metrics_out)) << "nothing may start before the data is checked";
  // Fewer sequences than one step reads.
  c = data_run(write_corpus(make_corpus(3 * 32, 9, false)));
  c.data.micro_batch = 4;
  expect_input_error(
      [&] { run_training(c); },
      {"data=" + c.data.path, "fewer than one step reads (micro_batch × grad_accum × dp = 4 × 1 × 1 = 4)"});
  // An eval file without training data.
  c = data_run("");
  c.data.task.seq_len = 64;
  c.data.eval_path = "eval.bin";
  expect_input_error([&] { run_training(c); }, {"eval_data=eval.bin needs data (--data)"});
  // A file that is not a token file.
  const std::string junk = testing::temp_dir() + "/junk.bin";
  std::ofstream(junk) << "not a token file at all, but long enough to have a header";
  c = data_run(junk);
  expect_input_error([&] { run_training(c); }, {"token file '" + junk + "'"});
}

// The command line: seqpar train --data, with the epoch arithmetic in its log.
TEST(TokenData, TrainCommandTrainsOnAFile) {
  const std::string path = write_corpus(make_corpus(10 * 32, 10, true));
  const std::string dir = testing::temp_dir();
  std::string out;
  const int rc =
      testing::run_command(testing::binary_path() + " train --data " + path +
                               " --seq-len 32 --micro-batch 2 --steps 3 --sp 2 --metrics-out " + dir + "/m.jsonl",
                           &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(
      out.find("sequences of 32 tokens; 2 sequences per step (micro_batch 2 x grad_accum 1 x dp 1) -> 5 steps per "
               "epoch"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("done: 3 steps"), std::string::npos) << out;
  EXPECT_EQ(out.find("recall accuracy"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir + "/m.svg"));
}

}  // namespace
}  // namespace seqpar
