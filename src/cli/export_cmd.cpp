// seqpar export: a training checkpoint to a Hugging Face model directory (config.json +
// model.safetensors) that transformers loads. tools/verify_export.py checks one against
// transformers; docs/training.md describes both.
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/log.h"
#include "train/checkpoint.h"

namespace seqpar {

namespace {

struct ExportArgs {
  std::string checkpoint, out, dtype = "f32", tokenizer_from;
};

void run(const ExportArgs& a) {
  DType dtype;
  if (a.dtype == "f32" || a.dtype == "float32") {
    dtype = DType::kF32;
  } else if (a.dtype == "bf16" || a.dtype == "bfloat16") {
    dtype = DType::kBF16;
  } else if (a.dtype == "f16" || a.dtype == "float16" || a.dtype == "fp16") {
    dtype = DType::kF16;
  } else {
    throw InputError("--dtype=" + a.dtype + ": expected f32, bf16 or f16");
  }
  const ExportResult r = export_checkpoint(a.checkpoint, a.out, dtype, a.tokenizer_from);
  log_info("exported {} to {} ({}): config.json, model.safetensors", r.checkpoint_dir, a.out, dtype_name(dtype));
  for (const std::string& f : r.copied) log_info("copied {}", f);
  if (r.copied.empty())
    log_info("no tokenizer files copied (give --tokenizer-from DIR to add the tokenizer of the model trained)");
}

}  // namespace

void add_export_command(CLI::App& app, int& rc) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* c = app.add_subcommand(
      "export", "Export a training checkpoint to a Hugging Face model directory (config.json + model.safetensors)");
  c->add_option("--checkpoint", args->checkpoint,
                "checkpoint directory (step_NNNNNN), or a save directory (its newest checkpoint)")
      ->required();
  c->add_option("--out", args->out, "output directory (created; its config.json and model.safetensors are replaced)")
      ->required();
  c->add_option("--dtype", args->dtype, "weight dtype: f32 | bf16 | f16 (rounded to nearest even)")
      ->capture_default_str();
  c->add_option("--tokenizer-from", args->tokenizer_from,
                "directory to copy tokenizer.json, tokenizer_config.json, special_tokens_map.json, tokenizer.model "
                "and generation_config.json from, those present (default: the --model directory the run started "
                "from, when it still exists; none = copy nothing)");
  c->callback([args, &rc] {
    run(*args);
    rc = 0;
  });
}

}  // namespace seqpar
