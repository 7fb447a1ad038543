// `seqpar fwdbwd` against Hugging Face transformers: for every fixture in tests/fixtures/hf
// (written by tools/make_hf_fixtures.py and, the gpt2_* ones, tools/make_gpt2_fixtures.py: a small
// checkpoint, a batch, and transformers'
// float64 logits, loss, gradients, grad norm and parameters after one clipped AdamW step), the
// binary's output must match within ||a - b|| / ||b|| <= 1e-4 (logits, grad.*) and 1e-5 (loss,
// grad_norm, param.*). Then the CLI's refusals of broken checkpoints and batches.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "io/safetensors.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using seqpar::SafetensorsData;
using seqpar::Tensor;

// Every case the generator writes; FixtureSet.MatchesTheGenerator keeps this list honest.
const std::vector<std::string> kCases = {"gqa_untied", "mha_tied", "gqa_llama3_rope", "bf16_weights", "v4_spelling",
                                         "llama3_v4_spelling", "gqa_d64",
                                         // the families (issue 17)
                                         "qwen2_untied", "qwen2_tied_window", "qwen3_head_dim", "qwen3_bias_window",
                                         "mistral_window", "mistral_full_tied", "mistral_d64_window", "qwen2_d64",
                                         "qwen3_d64_packed",
                                         // rope_scaling types (issue 18 item 7)
                                         "rope_linear_v4", "rope_dynamic", "rope_yarn", "rope_longrope",
                                         // the GPT family (issue 16; tools/make_gpt2_fixtures.py)
                                         "gpt2_gelu_new", "gpt2_gelu_erf", "gpt2_near_positions", "gpt2_d64",
                                         // packed documents (position_ids as HF packs them)
                                         "llama_packed", "gpt2_packed", "qwen2_packed_window"};

constexpr double kTolLoose = 1e-4;  // logits, grad.*: f32 sums of many terms
constexpr double kTolTight = 1e-5;  // loss, grad_norm, param.*

std::string fixture_dir(const std::string& name) { return seqpar::testing::source_path("tests/fixtures/hf/" + name); }

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.is_open()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
}

// The optimizer flags from meta.json, printed with every digit of the double.
std::string optimizer_flags(const std::string& dir) {
  nlohmann::json meta = read_json(dir + "/meta.json");
  std::string flags = " --optimizer-step";
  for (const char* key : {"lr", "beta1", "beta2", "eps", "weight_decay", "clip"}) {
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    flags += fmt::format(" --{} {:.17g}", flag, meta.at(key).get<double>());
  }
  return flags;
}

struct CliRun {
  int rc = 0;
  std::string output;
  std::string out_path;
};

CliRun run_fwdbwd(const std::string& model_dir, const std::string& input, const std::string& extra_flags) {
  CliRun r;
  r.out_path = seqpar::testing::temp_dir() + "/out.safetensors";
  std::string cmd = fmt::format("{} fwdbwd --model {} --input {} --out {}{}", quote(seqpar::testing::binary_path()),
                                quote(model_dir), quote(input), quote(r.out_path), extra_flags);
  r.rc = seqpar::testing::run_command(cmd, &r.output);
  return r;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Compares OUT with expected.safetensors. Without the optimizer step, param.* must be absent and
// grad_norm is compared only when the binary wrote it.
void compare_with_expected(const std::string& name, const SafetensorsData& out, bool optimizer_step,
                           const std::string& label = "") {
  SafetensorsData expected = seqpar::read_safetensors(fixture_dir(name) + "/expected.safetensors");
  std::set<std::string> expected_names;
  struct Worst {
    double err = 0;
    std::string name = "-";
  } logits, grads, loss, grad_norm, params;
  for (const auto& [tname, want] : expected.tensors) {
    expected_names.insert(tname);
    const bool is_param = starts_with(tname, "param.");
    if (!optimizer_step && is_param) continue;
    const Tensor* got = out.find(tname);
    if (tname == "grad_norm" && !optimizer_step && got == nullptr) continue;
    if (got == nullptr) {
      ADD_FAILURE() << name << ": '" << tname << "' is missing from the output";
      continue;
    }
    EXPECT_EQ(got->shape(), want.shape()) << name << ": '" << tname << "' has shape " << seqpar::shape_str(got->shape())
                                          << ", expected " << seqpar::shape_str(want.shape());
    const double err = seqpar::testing::rel_error(*got, want);
    const bool loose = tname == "logits" || starts_with(tname, "grad.");
    EXPECT_LE(err, loose ? kTolLoose : kTolTight) << name << ": '" << tname << "' relative error";
    Worst& w = tname == "logits"             ? logits
               : starts_with(tname, "grad.") ? grads
               : tname == "loss"             ? loss
               : tname == "grad_norm"        ? grad_norm
                                             : params;
    if (err >= w.err) w = {err, tname};
  }
  // A gradient or parameter the reference does not have (e.g. lm_head.weight of a tied model).
  for (const auto& [tname, t] : out.tensors) {
    if (starts_with(tname, "grad.") || starts_with(tname, "param.")) {
      EXPECT_TRUE(expected_names.count(tname))
          << name << ": the output has '" << tname << "', which the HF model does not have";
    }
    if (!optimizer_step) {
      EXPECT_FALSE(starts_with(tname, "param.")) << name << ": '" << tname << "' without --optimizer-step";
    }
  }
  std::string line = fmt::format("[{}{}] worst relative errors: logits {:.2e}, {} {:.2e}, loss {:.2e}", name, label,
                                 logits.err, grads.name, grads.err, loss.err);
  if (grad_norm.name != "-") line += fmt::format(", grad_norm {:.2e}", grad_norm.err);
  line += optimizer_step ? fmt::format(", {} {:.2e}", params.name, params.err) : std::string();
  std::printf("%s\n", line.c_str());
}

class FwdBwdHf : public ::testing::TestWithParam<std::string> {};

TEST_P(FwdBwdHf, MatchesTransformersWithOptimizerStep) {
  const std::string dir = fixture_dir(GetParam());
  CliRun r = run_fwdbwd(dir, dir + "/input.safetensors", optimizer_flags(dir));
  ASSERT_EQ(r.rc, 0) << r.output;
  SafetensorsData out = seqpar::read_safetensors(r.out_path);
  compare_with_expected(GetParam(), out, /*optimizer_step=*/true);
  fs::remove_all(fs::path(r.out_path).parent_path());
}

TEST_P(FwdBwdHf, MatchesTransformersWithoutOptimizerStep) {
  const std::string dir = fixture_dir(GetParam());
  CliRun r = run_fwdbwd(dir, dir + "/input.safetensors", "");
  ASSERT_EQ(r.rc, 0) << r.output;
  SafetensorsData out = seqpar::read_safetensors(r.out_path);
  compare_with_expected(GetParam(), out, /*optimizer_step=*/false, ", no step");
  fs::remove_all(fs::path(r.out_path).parent_path());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FwdBwdHf, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The same numbers with the sequence cut over P ranks (threads): every strategy must give back
// HF's results, whatever the layout, padding and KV-head replication it needs.
struct SpMode {
  const char* label;
  const char* flags;
};
const std::vector<SpMode> kSpModes = {
    {"ulysses2", " --sp 2 --sp-mode ulysses"},
    {"ulysses4", " --sp 4 --sp-mode ulysses"},  // Hkv < 4 in most cases: KV heads replicated
    {"ring2", " --sp 2 --sp-mode ring"},        // zigzag layout
    {"ring4_contiguous", " --sp 4 --sp-mode ring --sp-layout contiguous"},  // windows skip hops here
    {"hybrid4", " --sp 4 --sp-mode hybrid --ulysses-degree 2"},
};

class FwdBwdHfSp : public ::testing::TestWithParam<std::tuple<std::string, SpMode>> {};

TEST_P(FwdBwdHfSp, MatchesTransformers) {
  const auto& [name, mode] = GetParam();
  const std::string dir = fixture_dir(name);
  CliRun r = run_fwdbwd(dir, dir + "/input.safetensors", optimizer_flags(dir) + mode.flags);
  const nlohmann::json config = read_json(dir + "/config.json");
  const int64_t heads = config.contains("n_head") ? config["n_head"].get<int64_t>()  // gpt2
                                                  : config["num_attention_heads"].get<int64_t>();
  if (std::string(mode.label) == "ulysses4" && heads < 4) {
    // Fewer query heads than Ulysses ranks: refused before any work, naming both.
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.output.find("ulysses degree 4 exceeds num_attention_heads=" + std::to_string(heads)),
              std::string::npos)
        << r.output;
    return;
  }
  ASSERT_EQ(r.rc, 0) << r.output;
  SafetensorsData out = seqpar::read_safetensors(r.out_path);
  compare_with_expected(name, out, /*optimizer_step=*/true, std::string(", ") + mode.label);
  fs::remove_all(fs::path(r.out_path).parent_path());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FwdBwdHfSp,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::ValuesIn(kSpModes)),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, SpMode>>& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).label;
                         });

// The GPT family with the memory levers: activation checkpointing (also keeping attention, also
// with checkpoint offload), the tiled MLP and the tiled loss (tiles that do not divide the shard), alone and with sequence
// parallelism, give transformers' numbers as the plain run does.
class FwdBwdHfGptLevers : public ::testing::TestWithParam<std::tuple<std::string, SpMode>> {};

TEST_P(FwdBwdHfGptLevers, MatchTransformers) {
  const auto& [name, lever] = GetParam();
  const std::string dir = fixture_dir(name);
  for (const char* sp : {"", " --sp 2 --sp-mode ring", " --sp 4 --sp-mode hybrid --ulysses-degree 2"}) {
    CliRun r = run_fwdbwd(dir, dir + "/input.safetensors", optimizer_flags(dir) + lever.flags + sp);
    ASSERT_EQ(r.rc, 0) << r.output;
    compare_with_expected(name, seqpar::read_safetensors(r.out_path), /*optimizer_step=*/true,
                          std::string(", ") + lever.label + sp);
    fs::remove_all(fs::path(r.out_path).parent_path());
  }
}

const std::vector<SpMode> kGptLevers = {
    {"checkpointing", " --activation-checkpointing"},
    {"checkpointing_keep_attention", " --activation-checkpointing --checkpoint-keep-attention"},
    {"tiled_mlp_and_loss", " --tiled-mlp-tokens 5 --tiled-loss-tokens 7"},
    {"checkpoint_offload", " --activation-checkpointing --checkpoint-offload"},
    {"all", " --activation-checkpointing --tiled-mlp-tokens 3 --tiled-loss-tokens 4"},
};

INSTANTIATE_TEST_SUITE_P(Gpt2, FwdBwdHfGptLevers,
                         ::testing::Combine(::testing::Values("gpt2_gelu_new", "gpt2_gelu_erf", "gpt2_packed"),
                                            ::testing::ValuesIn(kGptLevers)),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, SpMode>>& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).label;
                         });

// The directory holds exactly the cases above, each complete: a fixture added by the generator
// but not listed here would otherwise never be checked.
TEST(FwdBwdHfFixtures, MatchesTheGenerator) {
  std::set<std::string> on_disk;
  for (const auto& entry : fs::directory_iterator(seqpar::testing::source_path("tests/fixtures/hf")))
    if (entry.is_directory()) on_disk.insert(entry.path().filename().string());
  EXPECT_EQ(on_disk, std::set<std::string>(kCases.begin(), kCases.end()));
  for (const std::string& name : kCases) {
    for (const char* file :
         {"config.json", "model.safetensors", "input.safetensors", "expected.safetensors", "meta.json"})
      EXPECT_TRUE(fs::is_regular_file(fixture_dir(name) + "/" + file)) << name << "/" << file;
  }
}

// --- refusals -----------------------------------------------------------------------------------

// A writable copy of a fixture's checkpoint and input.
std::string copy_fixture(const std::string& name) {
  std::string dir = seqpar::testing::temp_dir() + "/" + name;
  fs::copy(fixture_dir(name), dir, fs::copy_options::recursive);
  for (const auto& entry : fs::directory_iterator(dir))
    fs::permissions(entry.path(), fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
  return dir;
}

// Runs fwdbwd (with the optimizer step) on a broken copy and checks that it fails, says why
// (every `needles` string appears in its output), and writes no output file.
void expect_refusal(const std::string& dir, const std::string& input, const std::vector<std::string>& needles) {
  CliRun r = run_fwdbwd(dir, input, optimizer_flags(dir));
  EXPECT_NE(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("error"), std::string::npos) << r.output;
  for (const std::string& needle : needles)
    EXPECT_NE(r.output.find(needle), std::string::npos) << "no '" << needle << "' in:\n" << r.output;
  EXPECT_FALSE(fs::exists(r.out_path)) << "an output was written despite the error";
  fs::remove_all(fs::path(r.out_path).parent_path());
  fs::remove_all(fs::path(dir).parent_path());
}

// Rewrites DIR/model.safetensors through `edit` (name -> tensor list).
template <typename Edit>
void rewrite_checkpoint(const std::string& dir, Edit edit) {
  SafetensorsData data = seqpar::read_safetensors(dir + "/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors = data.tensors;
  edit(tensors);
  seqpar::write_safetensors(dir + "/model.safetensors", tensors, data.metadata);
}

void write_input(const std::string& path, const Tensor& input_ids, const Tensor& labels) {
  seqpar::write_safetensors(path, {{"input_ids", input_ids}, {"labels", labels}});
}

TEST(FwdBwdHfRefusals, TruncatedCheckpoint) {
  const std::string dir = copy_fixture("gqa_untied");
  const std::string file = dir + "/model.safetensors";
  fs::resize_file(file, fs::file_size(file) / 2);
  expect_refusal(dir, dir + "/input.safetensors", {"model.safetensors"});
}

TEST(FwdBwdHfRefusals, ConfigWithoutHiddenSize) {
  const std::string dir = copy_fixture("gqa_untied");
  nlohmann::json config = read_json(dir + "/config.json");
  ASSERT_EQ(config.erase("hidden_size"), 1u);
  write_json(dir + "/config.json", config);
  expect_refusal(dir, dir + "/input.safetensors", {"hidden_size", "missing"});
}

TEST(FwdBwdHfRefusals, CheckpointMissingAParameter) {
  const std::string dir = copy_fixture("mha_tied");
  const std::string victim = "model.layers.1.mlp.up_proj.weight";
  rewrite_checkpoint(dir, [&](auto& tensors) {
    auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& t) { return t.first == victim; });
    ASSERT_NE(it, tensors.end());
    tensors.erase(it);
  });
  expect_refusal(dir, dir + "/input.safetensors", {victim, "missing"});
}

TEST(FwdBwdHfRefusals, ParameterWithTheWrongShape) {
  const std::string dir = copy_fixture("gqa_untied");
  // k_proj is [Hkv * D, C] = [16, 32]; stored transposed it has the right element count and the
  // wrong shape, which a loader that checks sizes only would accept.
  const std::string victim = "model.layers.0.self_attn.k_proj.weight";
  rewrite_checkpoint(dir, [&](auto& tensors) {
    auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& t) { return t.first == victim; });
    ASSERT_NE(it, tensors.end());
    ASSERT_EQ(it->second.shape(), (seqpar::Shape{16, 32}));
    it->second = it->second.clone().view({32, 16});
  });
  expect_refusal(dir, dir + "/input.safetensors", {victim, "shape", "[32, 16]"});
}

TEST(FwdBwdHfRefusals, LabelOutsideTheVocabulary) {
  const std::string dir = copy_fixture("gqa_untied");
  SafetensorsData in = seqpar::read_safetensors(dir + "/input.safetensors");
  Tensor labels = in.at("labels").clone();
  ASSERT_EQ(labels.dtype(), seqpar::DType::kI32);
  const int64_t S = labels.dim(1);
  labels.data<int32_t>()[S + 3] = 96;  // [1, 3]; vocab_size is 96
  write_input(dir + "/bad_input.safetensors", in.at("input_ids"), labels);
  expect_refusal(dir, dir + "/bad_input.safetensors", {"labels", "96"});
}

TEST(FwdBwdHfRefusals, InputIdOutsideTheVocabulary) {
  const std::string dir = copy_fixture("gqa_untied");
  SafetensorsData in = seqpar::read_safetensors(dir + "/input.safetensors");
  Tensor ids = in.at("input_ids").clone();
  ids.data<int32_t>()[5] = 1000;
  write_input(dir + "/bad_input.safetensors", ids, in.at("labels"));
  expect_refusal(dir, dir + "/bad_input.safetensors", {"input_ids", "1000"});
}

TEST(FwdBwdHfRefusals, LabelsShapeDiffersFromInputIds) {
  const std::string dir = copy_fixture("gqa_untied");
  SafetensorsData in = seqpar::read_safetensors(dir + "/input.safetensors");
  const Tensor& ids = in.at("input_ids");
  const int64_t B = ids.dim(0), S = ids.dim(1);
  std::vector<int32_t> short_labels(static_cast<size_t>(B * (S - 1)), 7);
  write_input(dir + "/bad_input.safetensors", ids, Tensor::from_vector<int32_t>({B, S - 1}, short_labels));
  expect_refusal(dir, dir + "/bad_input.safetensors", {"labels", "input_ids", fmt::format("[{}, {}]", B, S - 1)});
}

// Packed position_ids that do not count 0, 1, ... per document are refused before any work, naming
// the element and what it may be; of another shape, naming both shapes.
TEST(FwdBwdHfRefusals, PositionIdsThatAreNotPackedDocuments) {
  const std::string dir = copy_fixture("llama_packed");
  SafetensorsData in = seqpar::read_safetensors(dir + "/input.safetensors");
  Tensor pos = in.at("position_ids").clone();
  ASSERT_EQ(pos.dtype(), seqpar::DType::kI32);
  const int64_t S = pos.dim(1);
  ASSERT_EQ(pos.data<int32_t>()[S + 4], 4);  // row 1, its first document (12 tokens)
  pos.data<int32_t>()[S + 4] = 7;
  seqpar::write_safetensors(dir + "/bad_input.safetensors",
                            {{"input_ids", in.at("input_ids")}, {"labels", in.at("labels")}, {"position_ids", pos}});
  CliRun r = run_fwdbwd(dir, dir + "/bad_input.safetensors", optimizer_flags(dir));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("position_ids[1, 4] = 7"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("must be 0 (a new document) or 4"), std::string::npos) << r.output;
  std::vector<int32_t> short_pos(static_cast<size_t>(2 * (S - 1)), 0);
  seqpar::write_safetensors(dir + "/bad_input.safetensors",
                            {{"input_ids", in.at("input_ids")},
                             {"labels", in.at("labels")},
                             {"position_ids", Tensor::from_vector<int32_t>({2, S - 1}, short_pos)}});
  expect_refusal(dir, dir + "/bad_input.safetensors", {"position_ids has shape [2, 19]", "input_ids"});
}

// The same packed batch without its position_ids is one document a row: not HF's packed numbers.
TEST(FwdBwdHfPacked, WithoutPositionIdsTheDocumentsMix) {
  const std::string dir = copy_fixture("llama_packed");
  SafetensorsData in = seqpar::read_safetensors(dir + "/input.safetensors");
  write_input(dir + "/unpacked.safetensors", in.at("input_ids"), in.at("labels"));
  CliRun r = run_fwdbwd(dir, dir + "/unpacked.safetensors", "");
  ASSERT_EQ(r.rc, 0) << r.output;
  SafetensorsData out = seqpar::read_safetensors(r.out_path);
  SafetensorsData expected = seqpar::read_safetensors(fixture_dir("llama_packed") + "/expected.safetensors");
  EXPECT_GT(seqpar::testing::rel_error(out.at("logits"), expected.at("logits")), 100 * kTolLoose);
  fs::remove_all(fs::path(r.out_path).parent_path());
  fs::remove_all(fs::path(dir).parent_path());
}

// A batch longer than the model's n_positions (the learned position table) is refused before any
// work, naming both; a GPT-2 checkpoint missing a tensor names it by its GPT-2 name.
TEST(FwdBwdHfRefusals, Gpt2SequenceBeyondNPositions) {
  const std::string dir = copy_fixture("gpt2_near_positions");  // S = n_positions = 20
  nlohmann::json config = read_json(dir + "/config.json");
  config["n_positions"] = 19;
  config["n_ctx"] = 19;
  write_json(dir + "/config.json", config);
  rewrite_checkpoint(dir, [&](auto& tensors) {
    for (auto& [tname, t] : tensors)
      if (tname == "transformer.wpe.weight") t = t.rows(0, 19).clone();
  });
  expect_refusal(dir, dir + "/input.safetensors", {"seq_len (the batch's longest document)=20", "n_positions=19"});
}

// Packed documents restart their positions: rows longer than n_positions run when every document
// fits (gpt2_packed: rows of 20, its longest document 13), and give the fixture's numbers with the
// position table cut to those rows; one row fewer is refused, naming the longest document.
TEST(FwdBwdHfPacked, Gpt2RowsBeyondNPositionsWhenEveryDocumentFits) {
  for (const int rows : {13, 12}) {
    const std::string dir = copy_fixture("gpt2_packed");
    nlohmann::json config = read_json(dir + "/config.json");
    config["n_positions"] = rows;
    config["n_ctx"] = rows;
    write_json(dir + "/config.json", config);
    rewrite_checkpoint(dir, [&](auto& tensors) {
      for (auto& [tname, t] : tensors)
        if (tname == "transformer.wpe.weight") t = t.rows(0, rows).clone();
    });
    if (rows == 12) {
      expect_refusal(dir, dir + "/input.safetensors", {"seq_len (the batch's longest document)=13", "n_positions=12"});
      continue;
    }
    CliRun r = run_fwdbwd(dir, dir + "/input.safetensors", "");
    ASSERT_EQ(r.rc, 0) << r.output;
    SafetensorsData out = seqpar::read_safetensors(r.out_path);
    SafetensorsData expected = seqpar::read_safetensors(fixture_dir("gpt2_packed") + "/expected.safetensors");
    EXPECT_LE(seqpar::testing::rel_error(out.at("logits"), expected.at("logits")), kTolLoose);
    EXPECT_LE(seqpar::testing::rel_error(out.at("loss"), expected.at("loss")), kTolTight);
    fs::remove_all(fs::path(r.out_path).parent_path());
    fs::remove_all(fs::path(dir).parent_path());
  }
}

TEST(FwdBwdHfRefusals, Gpt2CheckpointMissingAParameter) {
  const std::string dir = copy_fixture("gpt2_gelu_new");
  const std::string victim = "transformer.h.1.attn.c_attn.bias";
  rewrite_checkpoint(dir, [&](auto& tensors) {
    auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& t) { return t.first == victim; });
    ASSERT_NE(it, tensors.end());
    tensors.erase(it);
  });
  expect_refusal(dir, dir + "/input.safetensors", {victim, "missing"});
}

// A checkpoint saved from GPT2Model (no "transformer." prefix, the attention-mask buffers older
// transformers wrote beside the weights, as OpenAI's original GPT-2 files hold them) gives the
// same numbers: the names map onto the same tensors.
TEST(FwdBwdHfGpt2, BareGpt2ModelNamesLoad) {
  const std::string dir = copy_fixture("gpt2_gelu_new");
  rewrite_checkpoint(dir, [&](auto& tensors) {
    for (auto& [tname, t] : tensors) {
      ASSERT_EQ(tname.rfind("transformer.", 0), 0u) << tname;
      tname = tname.substr(std::string("transformer.").size());
    }
    tensors.emplace_back("h.0.attn.bias", Tensor::zeros({1, 1, 4, 4}, seqpar::DType::kF32));
  });
  CliRun r = run_fwdbwd(dir, dir + "/input.safetensors", optimizer_flags(dir));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(r.output.find("ignoring unexpected tensor"), std::string::npos) << r.output;
  compare_with_expected("gpt2_gelu_new", seqpar::read_safetensors(r.out_path), /*optimizer_step=*/true,
                        ", GPT2Model names");
  fs::remove_all(fs::path(r.out_path).parent_path());
  fs::remove_all(fs::path(dir).parent_path());
}

}  // namespace
