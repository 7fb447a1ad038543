// Op-level timing: where a training step's time goes. While profiling is on (set_profiling; `seqpar`
// calls it at start-up for SEQPAR_PROFILE=1, cli/kernel_env.h), each op of kernels/ops.h and attention/attention.h and each
// collective of the communicators (comm/; a send/receive as its wait) runs inside a ProfileScope: on a CUDA device two timing events on the current stream around its
// work, on the CPU the wall time of the call (CPU ops are synchronous). take_profile() waits for
// the recorded events and returns the time per op name, summed since the previous take.
//
// Only the outermost scope of a thread counts (an op that calls other ops is timed once, as
// itself). What runs outside any scope (copies, memsets, the allocator, host work) and the
// device's idle time are not in the profile: a step's wall time minus the profile's sum is that
// remainder (format_profile prints it). Off, a scope costs one relaxed atomic load.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"

namespace seqpar {

struct ProfileEntry {
  std::string name;
  int64_t calls = 0;
  double ms = 0;  // device time (CUDA) or wall time (CPU), summed over the calls
};

// On for every thread (off until someone calls it), or for the calling thread only (a trainer profiles
// its leading rank's steps); profiling() is on if either is.
void set_profiling(bool on);
void set_thread_profiling(bool on);
bool profiling();

class ProfileScope {
 public:
  ProfileScope(Device device, const char* op);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

  // Whether this scope is timed (profiling on and no enclosing scope on this thread).
  bool active() const { return active_; }
  // Appends " <what>" to the op's name, e.g. a GEMM's shape; ignored unless active().
  void detail(const std::string& what);

 private:
  bool counted_ = false;  // this scope raised the thread's depth
  bool active_ = false;
  Device device_;
  std::string name_;
  int slot_ = -1;  // the CUDA event pair, when on a CUDA device
  std::chrono::steady_clock::time_point start_;
};

// A host wait on the device (a stream synchronisation: a copy to or from host memory, a value
// the host needs) and its reason. While profiling is on for the calling thread it appears in
// take_profile() as "host wait: <why>", its calls and the wall time the host waited (outside any
// op's device time). `seqpar train --profile` shows with it where a step waits for the device.
void note_host_wait(const char* why, double ms);

// "12.50 MiB": a size for an op's name detail (communication).
std::string profile_bytes(size_t bytes);

// The totals per name since the previous call (all threads and devices), most time first; waits
// for the CUDA events recorded so far.
std::vector<ProfileEntry> take_profile();

// A table of the `top` entries with each one's share of `wall_ms` (the steps' wall time, which
// the profile covers; 0: shares of the profiled sum), and the remainder as its own line.
std::string format_profile(const std::vector<ProfileEntry>& entries, double wall_ms, int top = 25);
// Whether an entry is a host wait (note_host_wait's "host wait: <why>"): host time, which may pass
// while the device runs ops, so it is not part of the ops' sum.
bool is_host_wait(const ProfileEntry& e);
// The summed time of the entries that are ops (device time on CUDA), host waits excluded.
double ops_ms(const std::vector<ProfileEntry>& entries);

}  // namespace seqpar
