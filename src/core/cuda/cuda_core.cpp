// CUDA side of core/: the caching device allocator, cross-device copies, zero-fill. Copies and
// fills are queued on the calling thread's current stream (core/cuda/stream.h).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "core/cuda/stream.h"
#include "core/cuda_check.h"
#include "core/tensor.h"

namespace seqpar {

namespace {

// Caching allocator: freed blocks go to a per-size free list and are reused; cudaMalloc only on a
// miss. On out-of-memory the cache is released and the allocation retried once. Accounting
// counts bytes handed out (requested size), the figure `seqpar plan` predicts.
class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device) : device_(device) {}

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    size_t rounded = round(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(rounded);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        account_alloc(bytes);
        return p;
      }
    }
    SEQPAR_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, rounded);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_cache();
      err = cudaMalloc(&p, rounded);
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw Error(fmt::format("CUDA out of memory on cuda:{} allocating {:.2f} MiB (seqpar holds {:.2f} MiB, "
                              "device free {:.2f} of {:.2f} MiB): {}",
                              device_, bytes / 1048576.0, current_bytes() / 1048576.0, free_b / 1048576.0,
                              total_b / 1048576.0, cudaGetErrorString(err)));
    }
    account_alloc(bytes);
    return p;
  }

  void deallocate(void* ptr, size_t bytes) override {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    free_[round(bytes)].push_back(ptr);
    account_free(bytes);
  }

  Device device() const override { return Device::cuda(device_); }

  void release_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, ptrs] : free_)
      for (void* p : ptrs) cudaFree(p);
    free_.clear();
  }

 private:
  static size_t round(size_t bytes) {
    // 512-byte granularity below 1 MiB, 2 MiB above: bounded waste, good reuse across steps.
    size_t g = bytes < (1u << 20) ? 512 : (2u << 20);
    return (bytes + g - 1) / g * g;
  }

  int device_;
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
};

}  // namespace

bool cuda_built() { return true; }

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = fmt::format("cudaGetDeviceCount: {}", cudaGetErrorString(e));
    (void)cudaGetLastError();  // not sticky: clear it
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount found no device";
  return n;
}

void set_current_device(Device device) {
  if (device.is_cuda()) SEQPAR_CUDA_CHECK(cudaSetDevice(device.index));
}

void synchronize_device(Device device) {
  if (!device.is_cuda()) return;
  int current = 0;
  SEQPAR_CUDA_CHECK(cudaGetDevice(&current));
  SEQPAR_CHECK_EQ(current, device.index, "synchronize_device: the calling thread's current GPU");
  SEQPAR_CUDA_CHECK(cudaDeviceSynchronize());
}

void synchronize_current_stream(Device device) {
  if (!device.is_cuda()) return;
  int current = 0;
  SEQPAR_CUDA_CHECK(cudaGetDevice(&current));
  SEQPAR_CHECK_EQ(current, device.index, "synchronize_current_stream: the calling thread's current GPU");
  SEQPAR_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
}

int device_compute_capability(Device device) {
  if (!device.is_cuda()) return 0;
  // By device index (0: not queried yet); a race only queries twice.
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices];
  SEQPAR_CHECK(device.index >= 0 && device.index < kMaxDevices, "CUDA device index {} out of range [0, {})",
               device.index, kMaxDevices);
  int cc = known[device.index].load(std::memory_order_relaxed);
  if (cc == 0) {
    int major = 0, minor = 0;
    SEQPAR_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index));
    SEQPAR_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device.index));
    cc = major * 10 + minor;
    known[device.index].store(cc, std::memory_order_relaxed);
  }
  return cc;
}

int64_t device_total_bytes(Device device) {
  if (!device.is_cuda()) return 0;
  set_current_device(device);
  size_t free_b = 0, total_b = 0;
  SEQPAR_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return static_cast<int64_t>(total_b);
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  static std::mutex mu;
  static std::map<int, CudaCachingAllocator*> pools;  // never destroyed: outlives static tensors
  std::lock_guard<std::mutex> lock(mu);
  auto& p = pools[device.index];
  if (!p) p = new CudaCachingAllocator(device.index);
  return *p;
}

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) {
  if (n == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memmove(dst, src, n);
    return;
  }
  cudaStream_t stream = current_stream();
  SEQPAR_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream));
  // A copy that touches host memory returns with the bytes in place (callers read or reuse the
  // host buffer at once); a device-to-device copy stays queued, ordered with the stream's kernels.
  if (dst_dev.is_cpu()) host_wait(stream, "copy to host");
  if (src_dev.is_cpu() && !dst_dev.is_cpu()) host_wait(stream, "copy from host");
}

void copy_bytes_2d(void* dst, size_t dst_pitch, Device dst_dev, const void* src, size_t src_pitch, Device src_dev,
                   size_t width, size_t rows) {
  if (width == 0 || rows == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    for (size_t i = 0; i < rows; ++i)
      std::memcpy(static_cast<char*>(dst) + i * dst_pitch, static_cast<const char*>(src) + i * src_pitch, width);
    return;
  }
  cudaStream_t stream = current_stream();
  SEQPAR_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDefault, stream));
  if (dst_dev.is_cpu()) host_wait(stream, "copy to host");  // as copy_bytes
  if (src_dev.is_cpu() && !dst_dev.is_cpu()) host_wait(stream, "copy from host");
}

void Tensor::zero() {
  if (!nbytes()) return;
  if (device_.is_cpu()) {
    std::memset(raw(), 0, nbytes());
  } else {
    SEQPAR_CUDA_CHECK(cudaMemsetAsync(raw(), 0, nbytes(), current_stream()));
  }
}

}  // namespace seqpar
