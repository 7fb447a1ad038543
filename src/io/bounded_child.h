// A third-party parser that can loop on malformed input (yaml-cpp 0.7 does, allocating without
// bound: docs/fuzzing.md) is first run in a forked child process bounded in wall time and resident
// memory. Only when the child finishes is the same parse run in the process itself (a parse is
// deterministic: it then finishes there too). A child that is stopped becomes an InputError for the
// caller to word; nothing is left running.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace seqpar {

struct ChildLimits {
  int64_t wall_ms = 3000;                  // a config parses in well under a millisecond
  int64_t resident_bytes = int64_t{512} << 20;  // the child's growth of resident memory (/proc/PID/statm), polled
};

struct ChildOutcome {
  bool finished = false;  // f returned and the child exited by itself
  std::string stopped;    // else why: "ran past 3000 ms", "used more than 512 MiB", "died by signal 6", ...
};

// Runs f in a forked child (f's result and output are discarded: the child only says that it ends).
// Where fork itself fails (no processes left), f is not run and the outcome says finished: the
// caller's own in-process parse is then all there is.
ChildOutcome run_in_bounded_child(const std::function<void()>& f, const ChildLimits& limits = {});

}  // namespace seqpar
