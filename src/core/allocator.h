// Allocators with current/peak accounting. Every tensor byte comes from one of these, so the
// peak the allocator reports is the number `seqpar plan` must predict.
#pragma once

#include <atomic>
#include <cstddef>

#include "core/device.h"

namespace seqpar {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;

  size_t current_bytes() const { return current_; }
  size_t peak_bytes() const { return peak_; }
  // Ranks as threads on one allocator (the local transport): the largest peak of one rank's own
  // bytes since reset_peak(), as that rank's own device would see it. A thread's allocations count
  // for the rank set_allocation_rank() named on it (none: only in the totals), a free for the rank
  // that allocated. An allocator that keeps no ranks (the CUDA pool) answers peak_bytes().
  virtual size_t rank_peak_bytes() const { return peak_bytes(); }
  // Starts a new peak window at the current usage (e.g. per training step), the ranks' too.
  virtual void reset_peak() { peak_ = current_.load(); }

 protected:
  void account_alloc(size_t bytes);
  void account_free(size_t bytes) { current_ -= bytes; }

 private:
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
};

// Host memory, 64-byte aligned (cache lines, AVX-512).
Allocator& cpu_allocator();

// The rank this thread's host allocations count for (Allocator::rank_peak_bytes); -1: none. Ranks
// 0 .. kAllocationRanks - 1 are kept apart, others count in the totals only.
void set_allocation_rank(int rank);
inline constexpr int kAllocationRanks = 64;

// Host memory for what the CPU backend offloads (core/offload.h): the same memory as
// cpu_allocator(), accounted apart, so the "device" peak shows what offloading took off it.
Allocator& offload_host_allocator();

// The allocator for a device: CPU, or the CUDA caching pool of that GPU.
Allocator& allocator_for(Device device);

// This process's resident host memory now and at its peak (Linux /proc/self/status VmRSS and
// VmHWM: every host byte touched, pageable or pinned, the libraries' own included); 0 and 0 where
// the file cannot be read.
struct ProcessMemory {
  int64_t resident = 0, peak = 0;
};
ProcessMemory process_memory();

// Scratch bytes of a device's allocator for one scope (raw memory for a kernel's workspace).
// On the CUDA pool, returning them before the queued kernels ran is safe for reuse on the same
// stream (stream order); a caller that used them on another stream synchronises first.
class ScratchBytes {
 public:
  ScratchBytes(Device device, size_t bytes)
      : alloc_(allocator_for(device)), bytes_(bytes), ptr_(alloc_.allocate(bytes)) {}
  ~ScratchBytes() { alloc_.deallocate(ptr_, bytes_); }
  ScratchBytes(const ScratchBytes&) = delete;
  ScratchBytes& operator=(const ScratchBytes&) = delete;
  void* get() const { return ptr_; }

 private:
  Allocator& alloc_;
  size_t bytes_;
  void* ptr_;
};

}  // namespace seqpar
