// A training run's signals (docs/RELIABILITY.md): while a StopSignals lives, the first SIGTERM or
// SIGINT asks the run to stop (the trainer finishes the step it is in, every rank agreeing on the
// step through one all-reduce, saves a checkpoint and returns normally: exit 0); a second one ends
// the process at once (exit 128 + signal, with a message). SIGXFSZ (a file-size limit reached) is
// ignored, so the write that crosses the limit fails with EFBIG and the checkpoint writer reports
// it as an error naming the file, instead of the process dying without a word.
#pragma once

namespace seqpar {

class StopSignals {
 public:
  StopSignals();   // installs the handlers (and clears a stop left by an earlier run)
  ~StopSignals();  // restores what was there before
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

// The signal that asked the run to stop (SIGTERM, SIGINT), or 0.
int stop_signal_pending();

}  // namespace seqpar
