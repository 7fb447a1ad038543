#include "train/fwdbwd.h"

#include "core/error.h"
#include "io/hf_config.h"
#include "kernels/ops.h"

namespace seqpar {

namespace {

std::vector<int64_t> as_i64(const Tensor& t) {
  std::vector<int64_t> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.dtype() == DType::kI32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
  return v;
}

// The packed documents of each row from HF's packed position_ids (DataCollatorWithFlattening's, what
// flash_attention_2 reads): every document counts 0, 1, ..., its length - 1, so a document starts at
// each 0; a row starts with one.
void set_doc_lens(std::vector<Sequence>& rows, const Tensor& position_ids, const Tensor& input_ids) {
  SEQPAR_INPUT_CHECK(position_ids.shape() == input_ids.shape(), "position_ids has shape {} but input_ids has shape {}",
                     shape_str(position_ids.shape()), shape_str(input_ids.shape()));
  SEQPAR_INPUT_CHECK(position_ids.dtype() == DType::kI32 || position_ids.dtype() == DType::kI64,
                     "position_ids must be int32 or int64, got {}", dtype_name(position_ids.dtype()));
  const int64_t B = input_ids.dim(0), S = input_ids.dim(1);
  const std::vector<int64_t> pos = as_i64(position_ids);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> lens;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t p = pos[b * S + s];
      const int64_t next = s == 0 ? 0 : pos[b * S + s - 1] + 1;
      SEQPAR_INPUT_CHECK(p == 0 || p == next,
                         "position_ids[{}, {}] = {}: packed documents count 0, 1, 2, ... each, so it must be 0 (a new "
                         "document) or {} (the one before + 1)",
                         b, s, p, s == 0 ? 0 : next);
      if (p == 0) lens.push_back(0);
      ++lens.back();
    }
    if (lens.size() > 1) rows[b].doc_lens = std::move(lens);  // one document: the default
  }
}

// Every input problem is found here, before any model work.
std::vector<Sequence> batch_rows(const Tensor& input_ids, const Tensor& labels, const Tensor* position_ids,
                                 int64_t vocab_size) {
  SEQPAR_INPUT_CHECK(input_ids.ndim() == 2, "input_ids must be [B, S], got shape {}", shape_str(input_ids.shape()));
  SEQPAR_INPUT_CHECK(labels.shape() == input_ids.shape(), "labels has shape {} but input_ids has shape {}",
                     shape_str(labels.shape()), shape_str(input_ids.shape()));
  SEQPAR_INPUT_CHECK(input_ids.dtype() == DType::kI32 || input_ids.dtype() == DType::kI64,
                     "input_ids must be int32 or int64, got {}", dtype_name(input_ids.dtype()));
  SEQPAR_INPUT_CHECK(labels.dtype() == DType::kI32 || labels.dtype() == DType::kI64,
                     "labels must be int32 or int64, got {}", dtype_name(labels.dtype()));
  const int64_t B = input_ids.dim(0), S = input_ids.dim(1);
  SEQPAR_INPUT_CHECK(B > 0 && S > 0, "input_ids must not be empty (shape {})", shape_str(input_ids.shape()));
  std::vector<int64_t> ids = as_i64(input_ids), lab = as_i64(labels);
  std::vector<Sequence> rows(B);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      int64_t id = ids[b * S + s], l = lab[b * S + s];
      SEQPAR_INPUT_CHECK(id >= 0 && id < vocab_size, "input_ids[{}, {}] = {} is outside the vocabulary [0, {})", b, s,
                         id, vocab_size);
      SEQPAR_INPUT_CHECK(l == kIgnoreIndex || (l >= 0 && l < vocab_size),
                         "labels[{}, {}] = {} is outside the vocabulary [0, {}) and is not -100", b, s, l, vocab_size);
      rows[b].input_ids.push_back(static_cast<int32_t>(id));
      rows[b].labels.push_back(static_cast<int32_t>(l));
    }
  }
  if (position_ids != nullptr) set_doc_lens(rows, *position_ids, input_ids);
  return rows;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> run_fwdbwd(const std::string& model_dir, const Tensor& input_ids,
                                                       const Tensor& labels, const TrainConfig& config,
                                                       bool optimizer_step, const Tensor* position_ids) {
  // Every input problem is found first, before the model's weights are read.
  const LlamaConfig model = load_hf_llama_config(model_dir);
  std::vector<Sequence> rows = batch_rows(input_ids, labels, position_ids, model.vocab_size);
  SEQPAR_INPUT_CHECK(config.parallel.sp >= 1, "--sp={} must be >= 1", config.parallel.sp);
  TrainConfig c = config;
  c.model.dir = model_dir;
  c.data.path.clear();
  c.data.eval_path.clear();
  c.data.task.seq_len = input_ids.dim(1);
  c.data.micro_batch = static_cast<int>(input_ids.dim(0));
  c.data.grad_accum = 1;
  c.schedule.steps = 1;
  c.parallel.dp_replicate = c.parallel.dp_shard = 1;
  c.checkpoint.resume = {};
  c.checkpoint.save_dir.clear();
  c.logging.metrics_out.clear();
  c.logging.quiet = true;
  return Trainer(c, std::move(rows)).run_batch(optimizer_step);
}

}  // namespace seqpar
