// libFuzzer target: the checkpoint loader (train/checkpoint.h) with an arbitrary state file. A
// valid tiny checkpoint is written once; each input replaces its trainer_state.json and the whole
// directory is loaded as resume and export load it (every file cross-checked).
#include "fuzz_util.h"
#include "model/llama.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

namespace {

namespace fs = std::filesystem;

// A tiny checkpoint: step_1 of a one-layer model (the state file it wrote is the seed's shape).
std::string make_checkpoint() {
  static seqpar::LlamaConfig config = [] {
    seqpar::LlamaConfig c;
    c.vocab_size = 16, c.hidden_size = 8, c.intermediate_size = 16, c.num_layers = 1;
    c.num_heads = 2, c.num_kv_heads = 1, c.head_dim = 4, c.max_position_embeddings = 64;
    return c;
  }();
  static seqpar::LlamaParams w = seqpar::LlamaParams::zeros(config, seqpar::DType::kF32, seqpar::Device::cpu());
  static seqpar::LlamaParams m = seqpar::LlamaParams::zeros(config, seqpar::DType::kF32, seqpar::Device::cpu());
  static seqpar::LlamaParams v = seqpar::LlamaParams::zeros(config, seqpar::DType::kF32, seqpar::Device::cpu());
  seqpar::CheckpointContents c;
  c.model_config = &config;
  c.weights = &w;
  c.exp_avg = &m;
  c.exp_avg_sq = &v;
  c.optimizer_step = 1;
  c.state.step = 1;
  c.state.losses = {1.0};
  const std::string save = (seqpar::fuzz::scratch_dir() / "save").string();
  return seqpar::save_checkpoint(save, c);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = make_checkpoint();
  {
    std::ofstream out(fs::path(dir) / "trainer_state.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  seqpar::fuzz::refuse_only_by_input_error([&] { (void)seqpar::load_checkpoint(dir); });
  return 0;
}
