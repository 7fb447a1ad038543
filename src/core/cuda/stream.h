// CUDA streams and events as RAII handles, the calling thread's current stream, and the pinned
// host allocator. Every CUDA op queues its work on current_stream(); code that wants overlap
// (checkpoint offload, ring communication) makes its own Stream, runs under a StreamGuard, and
// orders the streams with Events.
//
// Free of fmt and Tensor, so nvcc-compiled sources may include it too.
//
// Ordering caveat: the CUDA caching pool (core/cuda/cuda_core.cpp) is not stream-aware. A block
// freed while work on stream A still uses it may be handed to work on stream B; whoever frees a
// tensor used on a side stream must first make the current stream wait for that stream (Event).
#pragma once

#if defined(SEQPAR_WITH_CUDA)
#include <cuda_runtime.h>

#include "core/allocator.h"

namespace seqpar {

// The calling thread's current stream. Until a thread sets one it is the legacy default stream
// (0), which orders itself with every blocking stream: the simplest, fully ordered setting.
cudaStream_t current_stream();
void set_current_stream(cudaStream_t stream);

// Sets the current stream for a scope and restores the previous one.
class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t stream) : prev_(current_stream()) { set_current_stream(stream); }
  ~StreamGuard() { set_current_stream(prev_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  cudaStream_t prev_;
};

// Blocks the host until `stream` has done its queued work: the one way code here waits for the
// device, so that the profile can count each wait with its reason (core/profile.h).
void host_wait(cudaStream_t stream, const char* why);

class Event;

// An owned, non-blocking stream (it does not implicitly wait for the legacy default stream).
class Stream {
 public:
  // device < 0: the current device. Lower priority numbers run first (cudaDeviceGetStreamPriorityRange).
  explicit Stream(int device = -1, int priority = 0);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  void synchronize() const;
  // Work queued on this stream after this call waits until `event` has completed.
  void wait(const Event& event) const;

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

// An owned event. Without timing it is the cheap kind meant for ordering streams.
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(cudaStream_t stream);
  void record() { record(current_stream()); }
  void synchronize() const;
  bool query() const;  // true once every recorded work has completed
  // Milliseconds from `start` to this event; both timing events, both recorded and completed.
  float elapsed_ms(const Event& start) const;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Makes `waiter` wait for all work queued so far on `producer` (records a throwaway event).
void stream_wait_stream(cudaStream_t waiter, cudaStream_t producer);

// Page-locked host memory (cudaHostAlloc, portable), with the same current/peak accounting as the
// other allocators. Its device() is the CPU: these are host bytes that copy engines reach directly,
// for asynchronous offload of checkpoints and optimizer state.
Allocator& pinned_host_allocator();

}  // namespace seqpar
#endif
