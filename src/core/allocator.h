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
  // Starts a new peak window at the current usage (e.g. per training step).
  void reset_peak() { peak_ = current_.load(); }

 protected:
  void account_alloc(size_t bytes);
  void account_free(size_t bytes) { current_ -= bytes; }

 private:
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
};

// Host memory, 64-byte aligned (cache lines, AVX-512).
Allocator& cpu_allocator();

// The allocator for a device: CPU, or the CUDA caching pool of that GPU.
Allocator& allocator_for(Device device);

}  // namespace seqpar
