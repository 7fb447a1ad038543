#include "core/cuda/stream.h"

#include <chrono>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/error.h"
#include "core/profile.h"

namespace seqpar {

namespace {
thread_local cudaStream_t t_current_stream = nullptr;  // legacy default stream
}  // namespace

cudaStream_t current_stream() { return t_current_stream; }
void set_current_stream(cudaStream_t stream) { t_current_stream = stream; }

void host_wait(cudaStream_t stream, const char* why) {
  if (!profiling()) {
    SEQPAR_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  SEQPAR_CUDA_CHECK(cudaStreamSynchronize(stream));
  note_host_wait(why, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

// ---- Stream -----------------------------------------------------------------------------

Stream::Stream(int device, int priority) {
  if (device < 0) {
    SEQPAR_CUDA_CHECK(cudaGetDevice(&device));
  }
  device_ = device;
  int prev = 0;
  SEQPAR_CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != device) SEQPAR_CUDA_CHECK(cudaSetDevice(device));
  cudaError_t err = cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority);
  if (prev != device) cudaSetDevice(prev);
  SEQPAR_CUDA_CHECK(err);
}

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);  // destructors do not throw; destroy waits for nothing
}

Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

void Stream::synchronize() const { host_wait(stream_, "stream synchronize"); }

void Stream::wait(const Event& event) const { SEQPAR_CUDA_CHECK(cudaStreamWaitEvent(stream_, event.get(), 0)); }

// ---- Event ------------------------------------------------------------------------------

Event::Event(bool timing) {
  SEQPAR_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record(cudaStream_t stream) { SEQPAR_CUDA_CHECK(cudaEventRecord(event_, stream)); }
void Event::synchronize() const { SEQPAR_CUDA_CHECK(cudaEventSynchronize(event_)); }

bool Event::query() const {
  cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();  // not-ready is a state, not an error: clear it
    return false;
  }
  SEQPAR_CUDA_CHECK(err);
  return true;
}

float Event::elapsed_ms(const Event& start) const {
  float ms = 0.f;
  SEQPAR_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

void stream_wait_stream(cudaStream_t waiter, cudaStream_t producer) {
  if (waiter == producer) return;
  Event e;
  e.record(producer);
  SEQPAR_CUDA_CHECK(cudaStreamWaitEvent(waiter, e.get(), 0));
}

// ---- pinned host allocator --------------------------------------------------------------

namespace {

// cudaHostAlloc costs milliseconds (it pins pages), so freed blocks are cached by rounded size
// like the device pool. Accounting counts the bytes handed out.
class PinnedHostAllocator final : public Allocator {
 public:
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
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, rounded, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw Error(fmt::format("out of pinned host memory allocating {:.2f} MiB (pinned in use: {:.2f} MiB): {}",
                              bytes / 1048576.0, current_bytes() / 1048576.0, cudaGetErrorString(err)));
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

  Device device() const override { return Device::cpu(); }

 private:
  static size_t round(size_t bytes) {
    size_t g = bytes < (1u << 20) ? 4096 : (2u << 20);
    return (bytes + g - 1) / g * g;
  }

  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
};

}  // namespace

Allocator& pinned_host_allocator() {
  static PinnedHostAllocator* a = new PinnedHostAllocator();  // never destroyed: outlives static tensors
  return *a;
}

}  // namespace seqpar
