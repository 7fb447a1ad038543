// Training checkpoints: save, validate, load, resume checks, rotation, and export to a Hugging
// Face model directory. docs/training.md is the user's guide.
//
// A checkpoint is one directory SAVE_DIR/step_000123/ holding
//   model.safetensors      the f32 weights under HF names (a master copy when the model computes in bf16)
//   config.json            HF LlamaForCausalLM config: the directory is itself an HF model directory
//   optimizer.safetensors  exp_avg.<name>, exp_avg_sq.<name> (AdamW moments, f32), master.<name> when the
//                          optimizer keeps f32 master weights; metadata step = AdamW's step count
//   trainer_state.json     format, step, data position, seed, the run's configuration (JSON, its hash,
//                          and the resolved text), loss/eval history and metrics records, the steps the
//                          non-finite guard skipped, the other files' sizes and XXH64 checksums, and its
//                          own checksum (`state_checksum`: of the file as written without that key)
// and SAVE_DIR/latest, a one-line text file naming the newest complete checkpoint ("step_000123").
//
// Crash safety. save_checkpoint writes everything into SAVE_DIR/.tmp_step_000123/ (each file
// fsynced), fsyncs that directory, renames it to step_000123 and fsyncs SAVE_DIR; only then does
// it replace `latest` (atomic rename, fsynced) and delete checkpoints beyond keep_last. A process
// killed at any point leaves `latest` naming a complete checkpoint; the leftover .tmp_ directory
// is not a checkpoint (load_checkpoint rejects it) and the next save removes it (as does the next
// trainer taking the save directory's lock). A save that fails with an error (disk full, a
// file-size limit, an unwritable directory) removes its temporary directory before the error
// reaches the caller; the previous checkpoint and `latest` are untouched.
//
// SAVE_DIR/.lock is held (flock) by the one trainer writing the directory (SaveDirLock); it holds
// that trainer's pid, host and start time, which a second trainer's refusal names.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arch/llama_config.h"
#include "core/dtype.h"
#include "io/safetensors.h"
#include "model/llama.h"
#include "train/loss_scaler.h"
#include "train/trainer.h"

namespace seqpar {

inline constexpr const char* kCheckpointFormat = "seqpar-checkpoint";
inline constexpr int kCheckpointVersion = 1;

// "step_000123" (at least six digits).
std::string checkpoint_name(int64_t step);

// What trainer_state.json holds, besides the files' sizes (added by save_checkpoint).
struct TrainerState {
  int64_t step = 0;  // optimizer steps done; the resumed run continues with step + 1
  uint64_t seed = 0;
  // Where the data stream stands after `step`: "recall" (the next batch index follows from step
  // alone) or "tokens" (the next step reads sequence data_index of epoch data_epoch).
  std::string data_source = "recall";
  int64_t data_epoch = 0;
  int64_t data_index = 0;
  nlohmann::json config;       // train_config_json(): compared on resume
  std::string config_hash;     // config_hash(config)
  std::string config_text;     // the resolved configuration as `--print-config` prints it ("" from the API)
  std::vector<double> losses;  // per step, steps 1..step
  std::vector<std::pair<int64_t, double>> eval_accuracy;  // (step, accuracy)
  std::vector<std::pair<int64_t, double>> eval_loss;      // (step, loss)
  std::vector<nlohmann::json> metrics;                    // every metrics record written so far
  // Steps whose update was skipped: by the non-finite guard (their loss: NaN), or by fp16's loss
  // scaler on an overflow (their loss finite; also in overflow_steps).
  std::vector<int64_t> skipped_steps;
  std::vector<int64_t> overflow_steps;
  std::optional<LossScalerState> loss_scaler;  // fp16's loss scaler after `step` (none: not fp16)
};

nlohmann::json trainer_state_to_json(const TrainerState& state);
// InputError "<source>: ..." for a missing or mistyped field.
TrainerState trainer_state_from_json(const nlohmann::json& j, const std::string& source);

// What one save writes. weights: the f32 weights (the optimizer's master copy when there is one);
// master: the master weights again when the optimizer keeps them (null otherwise).
struct CheckpointContents {
  const LlamaConfig* model_config = nullptr;
  const LlamaParams* weights = nullptr;
  const LlamaParams* exp_avg = nullptr;
  const LlamaParams* exp_avg_sq = nullptr;
  const LlamaParams* master = nullptr;
  int64_t optimizer_step = 0;
  TrainerState state;
};

// Called with the name of each stage as it completes ("model.safetensors", "config.json",
// "optimizer.safetensors", "trainer_state.json", "moved aside" (only when step_N existed),
// "rename", "latest"); throwing from it simulates a crash at that point (tests).
using CheckpointFaultHook = std::function<void(const std::string& stage)>;

// Writes SAVE_DIR/step_N/ as the header says and points SAVE_DIR/latest at it; then, with
// keep_last > 0, deletes the oldest step_* directories until keep_last remain among those at or
// before this step (never this one; checkpoints of later steps, left by a run that resumed from an
// earlier one, are not touched). A step_N that already exists is replaced. Returns the path.
std::string save_checkpoint(const std::string& save_dir, const CheckpointContents& contents, int keep_last = 0,
                            const CheckpointFaultHook& hook = {});

// A checkpoint read back and validated.
struct Checkpoint {
  std::string dir;
  TrainerState state;
  LlamaConfig model_config;
  SafetensorsData model;      // HF names, f32
  SafetensorsData optimizer;  // exp_avg.*, exp_avg_sq.*, master.*
  int64_t optimizer_step = 0;
  bool has_master = false;
};

// The exclusive lock of a save directory (flock on SAVE_DIR/.lock, created with the directory),
// held for the object's life: a second trainer on the same directory (another process, or another
// Trainer in this one) gets an InputError naming the holder's pid, host and start. Taking it also
// removes what killed saves left (.tmp_* directories, temporaries of `latest`): with the lock held
// nobody else is writing them.
class SaveDirLock {
 public:
  explicit SaveDirLock(const std::string& save_dir);
  ~SaveDirLock();
  SaveDirLock(const SaveDirLock&) = delete;
  SaveDirLock& operator=(const SaveDirLock&) = delete;

 private:
  int fd_ = -1;
};

// The newest complete checkpoint of a save directory (from SAVE_DIR/latest), or nullopt when the
// directory has no `latest`. InputError when `latest` names something that is not there.
std::optional<std::string> latest_checkpoint(const std::string& save_dir);

// A checkpoint directory from what a user names: a checkpoint directory itself, or a save
// directory (its `latest`). InputError otherwise, saying which.
std::string resolve_checkpoint_dir(const std::string& path);

// Reads and validates every file of a checkpoint directory: present, of the recorded size, parsable,
// every parameter and moment with its HF shape in f32. Every problem is an InputError
// "checkpoint '<dir>': <problem>" (an unfinished .tmp_ directory, a missing or truncated file, ...).
Checkpoint load_checkpoint(const std::string& dir);

// The checkpoint to resume from in a save directory: the one `latest` names (latest_checkpoint)
// when it loads; when it does not (a checksum mismatch, a corrupt file), the next older step_*
// directory that does, with a warning naming the one refused and why. The InputError of the
// newest when none loads.
Checkpoint load_newest_good_checkpoint(const std::string& save_dir);

// trainer_state.json's text for a state object: `state_checksum` set to the XXH64 of the text
// written without it (load_checkpoint verifies it the same way).
std::string sealed_state_text(nlohmann::json state);

// Copies a checkpoint's weights into params (f32, or rounded to params' dtype), and its moments,
// master weights and step count into the optimizer. The checkpoint's model config must be the
// params' (checked by the caller through check_resume_config).
void restore_from_checkpoint(const Checkpoint& ckpt, LlamaParams& params, AdamW& optimizer);

// The run's configuration as JSON: every setting that shapes the computation, the model's HF
// config, and the identity of the data files (`data` / `eval_data`: path, tokens, documents, mask).
// Per-invocation settings (resume, stop_at_step, config_text) are left out.
nlohmann::json train_config_json(const TrainConfig& config, const LlamaConfig& model, const nlohmann::json& data,
                                 const nlohmann::json& eval_data);
// 16 hex digits: FNV-1a 64 of the JSON's compact dump.
std::string config_hash(const nlohmann::json& config);

// Compares the configuration of a checkpoint with the one resuming it. Settings that decide what
// the saved state means (the model, seq_len, micro_batch, grad_accum, dp_replicate, dp_shard, sp,
// sp_mode, ulysses_degree, sp_layout, seed, the training data and shuffle, the recall task) must be
// equal: an InputError names each that differs, with both values. Changed optimizer, schedule or
// steps settings are allowed and returned as warnings (the run is then not bit-exact with an
// uninterrupted one); output, evaluation and checkpoint settings may change freely.
std::vector<std::string> check_resume_config(const nlohmann::json& saved, const nlohmann::json& now,
                                             const std::string& checkpoint_dir);

// seqpar export: a checkpoint (or a save directory's latest) to an HF model directory: config.json
// (torch_dtype / dtype = dtype) and model.safetensors (the weights in dtype: f32 or bf16, rounded
// to nearest even), metadata format=pt as transformers wants; plus the tokenizer and generation
// files (kExportCopiedFiles) found in tokenizer_dir: "" = the model directory the run started from
// (the checkpoint's model_dir) when it still exists, "none" = copy nothing. out_dir is created;
// every file is replaced atomically. Refused (InputError, before anything is written) when out_dir
// is a checkpoint or inside one, or a save directory: an export must never overwrite a run's files.
inline constexpr const char* kExportCopiedFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model", "generation_config.json"};
struct ExportResult {
  std::string checkpoint_dir;       // the checkpoint exported
  std::vector<std::string> copied;  // files copied from the tokenizer directory
};
ExportResult export_checkpoint(const std::string& checkpoint, const std::string& out_dir, DType dtype,
                               const std::string& tokenizer_dir = "");

}  // namespace seqpar
