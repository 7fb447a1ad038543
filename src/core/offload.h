// Moving device tensors to host memory and back, overlapped with the compute stream's work: what
// ALST calls activation checkpoint offload (a checkpointed layer's input waits in host memory
// between its forward and its backward).
//
// On a CUDA device: the host side is pinned memory (pinned_host_allocator), the copies run on the
// queue's own copy stream, ordered with the caller's current stream by events:
//   put(t)       the copy starts once the work queued so far on the current stream is done (so t
//                is complete), and overlaps with what is queued after; t's device memory goes back
//                to the pool when the copy has finished (the queue holds it until then);
//   prefetch(h)  a device buffer is taken from the pool and the copy back starts once the work
//                queued so far is done (the pool is not stream-aware: the block may have been in
//                use by that work), overlapping with what is queued after;
//   take(h)      the tensor on the device; work queued on the current stream from now on runs after
//                the copy back (prefetched or not), and the queue holds no reference to it;
//   a prefetch or take of a tensor whose copy out has not finished returns the device tensor that
//                is still being copied (no copy back; its host copy is abandoned).
// So the device memory of an offloaded tensor is at most one buffer at any time: while its copy
// out is unfinished, or from its prefetch until the caller drops what take returned.
// At most kMaxInFlight copies to the host are unfinished at a time: put waits for the oldest
// beyond that, which bounds the device memory held for them.
// On the CPU: plain copies, the host side from offload_host_allocator() (the CPU "device" is host
// memory too; the separate accounting shows what left it).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>

#include "core/allocator.h"
#include "core/tensor.h"

namespace seqpar {

class HostOffload {
 public:
  struct Handle;  // one offloaded tensor
  static constexpr int kMaxInFlight = 2;

  explicit HostOffload(Device device);
  ~HostOffload();  // waits for the copies in flight
  HostOffload(const HostOffload&) = delete;
  HostOffload& operator=(const HostOffload&) = delete;

  Device device() const { return device_; }
  // Starts moving t (on this queue's device) to the host; the caller drops its references.
  std::shared_ptr<Handle> put(Tensor t);
  // Starts the copy back to the device (optional: take() does it when it was not).
  void prefetch(Handle& h);
  // The tensor back on the device, its host copy released; a handle is taken once.
  Tensor take(Handle& h);
  // Gives the device memory of the copies that have finished back to the pool now (otherwise that
  // happens at the next put or prefetch): a caller about to reach its memory peak calls it.
  void collect() { release_finished(false); }

 private:
  struct Impl;
  void release_finished(bool wait_all);

  Device device_;
  std::unique_ptr<Impl> impl_;
};

// A tensor's values on their way to the host, read later: on a CUDA device the copy into pinned
// memory is queued on the current stream and nothing waits until get(), so the device goes on
// with the work queued after it (a step's loss is read once its backward is queued). On the CPU it
// is the tensor itself.
class HostCopy {
 public:
  HostCopy() = default;
  explicit HostCopy(const Tensor& src);
  // The host tensor; the first call on CUDA waits for the copy (a host wait, core/profile.h).
  const Tensor& get();

 private:
  Tensor host_;
  std::shared_ptr<void> done_;  // CUDA: the event recorded after the copy
};

// Host memory for what a device moves out of its own memory: pinned (page-locked, what an async
// copy to or from a GPU needs) on a CUDA device when `pinned`, else pageable; on the CPU,
// offload_host_allocator() (the same memory as the "device", accounted apart).
Allocator& host_allocator_for(Device device, bool pinned = true);

// A copy stream that callers order with tickets: the optimizer offload's staging copies and the
// parameter offload's layer fetches (train/). On a CUDA device the copies run on the stream's own
// CUDA stream, each after the work queued so far on the caller's current stream (its source is
// complete and its destination no longer read); the host side must be pinned memory for the copy
// to be asynchronous. On the CPU a copy runs at once and the waits return at once: the same calls,
// so the CPU tests run the code path.
class CopyStream {
 public:
  explicit CopyStream(Device device);
  ~CopyStream();  // waits for the copies in flight
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  Device device() const { return device_; }
  // Queues dst <- src (same dtype and element count; one of them on this stream's device, the
  // other host memory, or both host memory on the CPU); returns the copy's ticket. Both tensors
  // are held until the copy has finished. after_current: the copy waits for the work queued so far
  // on the caller's current stream; false when the caller knows the source is complete and the
  // destination unread (a thread of its own whose current stream is not the compute stream, e.g.
  // the overlapped optimizer step, train/optimizer.h). One thread at a time uses a CopyStream.
  int64_t copy(const Tensor& dst, const Tensor& src, bool after_current = true);
  // The host thread blocks until copy `ticket` (and every copy queued before it) has finished.
  void host_wait(int64_t ticket);
  // Work queued on the caller's current stream from now on runs after copy `ticket`.
  void stream_wait(int64_t ticket);

 private:
  struct Impl;
  Device device_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqpar
