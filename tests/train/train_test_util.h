// Shared by the trainer's tests: the smallest training run that learns something.
#pragma once

#include "train/trainer.h"

namespace seqpar::testing {

// The demo's tiny Llama on a 32-token recall task (4 pairs, 4 queries of 3 tokens, filler), two
// sequences per micro-batch: a step takes milliseconds. Callers set the steps, mesh and outputs.
inline TrainConfig tiny_recall_config() {
  TrainConfig c;
  c.model.arch = demo_model_config();
  c.data.task.seq_len = 32;
  c.data.task.num_pairs = 4;
  c.data.task.num_queries = 4;
  c.data.micro_batch = 2;
  return c;
}

}  // namespace seqpar::testing
