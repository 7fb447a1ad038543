#include "core/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <new>

#include "core/error.h"

namespace seqpar {

void Allocator::account_alloc(size_t bytes) {
  size_t now = current_ += bytes;
  size_t prev = peak_.load();
  while (now > prev && !peak_.compare_exchange_weak(prev, now)) {
  }
}

namespace {

thread_local int t_allocation_rank = -1;

// A block's first 64 bytes (a cache line, so the caller's bytes stay 64-byte aligned) hold the rank
// it counts for.
constexpr size_t kHeader = 64;

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    size_t rounded = (bytes + 63) / 64 * 64;
    char* p = static_cast<char*>(std::aligned_alloc(64, kHeader + rounded));
    if (!p) throw Error(fmt::format("out of host memory allocating {} bytes (in use: {})", bytes, current_bytes()));
    const int rank = t_allocation_rank >= 0 && t_allocation_rank < kAllocationRanks ? t_allocation_rank : -1;
    *reinterpret_cast<int*>(p) = rank;
    account_alloc(bytes);
    if (rank >= 0) {
      Rank& r = ranks_[rank];
      const size_t now = r.current += bytes;
      size_t prev = r.peak.load();
      while (now > prev && !r.peak.compare_exchange_weak(prev, now)) {
      }
    }
    return p + kHeader;
  }
  void deallocate(void* ptr, size_t bytes) override {
    if (!ptr) return;
    char* p = static_cast<char*>(ptr) - kHeader;
    const int rank = *reinterpret_cast<const int*>(p);
    std::free(p);
    account_free(bytes);
    if (rank >= 0) ranks_[rank].current -= bytes;
  }
  Device device() const override { return Device::cpu(); }

  size_t rank_peak_bytes() const override {
    size_t best = 0;
    for (const Rank& r : ranks_) best = std::max(best, r.peak.load());
    return best;
  }
  void reset_peak() override {
    Allocator::reset_peak();
    for (Rank& r : ranks_) r.peak = r.current.load();
  }

 private:
  struct Rank {
    std::atomic<size_t> current{0}, peak{0};
  };
  Rank ranks_[kAllocationRanks];
};

}  // namespace

void set_allocation_rank(int rank) { t_allocation_rank = rank; }

Allocator& cpu_allocator() {
  static CpuAllocator a;
  return a;
}

Allocator& offload_host_allocator() {
  static CpuAllocator a;
  return a;
}

#if !defined(SEQPAR_WITH_CUDA)
Allocator& allocator_for(Device device) {
  SEQPAR_CHECK(device.is_cpu(), "this seqpar was built without CUDA (-DSEQPAR_CUDA=OFF); device {} is unavailable",
               device.str());
  return cpu_allocator();
}
bool cuda_built() { return false; }
int cuda_device_count(std::string* why) {
  if (why) *why = "this seqpar was built without CUDA (-DSEQPAR_CUDA=OFF)";
  return 0;
}
void set_current_device(Device device) {
  SEQPAR_CHECK(device.is_cpu(), "this seqpar was built without CUDA (-DSEQPAR_CUDA=OFF); device {} is unavailable",
               device.str());
}
void synchronize_device(Device device) { set_current_device(device); }
void synchronize_current_stream(Device device) { set_current_device(device); }
int64_t device_total_bytes(Device device) {
  set_current_device(device);
  return 0;
}
int device_compute_capability(Device device) {
  set_current_device(device);
  return 0;
}
#endif

std::string Device::str() const { return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index); }

Device parse_device(const std::string& s, const std::string& setting) {
  if (s == "cpu") return Device::cpu();
  const bool cuda = s == "cuda" || s.rfind("cuda:", 0) == 0;
  SEQPAR_INPUT_CHECK(cuda, "{}={}: expected cpu, cuda or cuda:N", setting, s);
  SEQPAR_INPUT_CHECK(cuda_built(), "{}={}: this seqpar was built without CUDA (-DSEQPAR_CUDA=OFF)", setting, s);
  const std::string index = s == "cuda" ? "0" : s.substr(5);
  SEQPAR_INPUT_CHECK(!index.empty() && index.size() < 6 && index.find_first_not_of("0123456789") == std::string::npos,
                     "{}={}: expected cpu, cuda or cuda:N", setting, s);
  return Device::cuda(std::stoi(index));
}

ProcessMemory process_memory() {
  ProcessMemory m;
  std::ifstream in("/proc/self/status");
  std::string key;
  int64_t kib = 0;
  while (in >> key) {
    if (key == "VmRSS:" && in >> kib) m.resident = kib * 1024;
    else if (key == "VmHWM:" && in >> kib) m.peak = kib * 1024;
    else in.ignore(1 << 16, '\n');
  }
  return m;
}

}  // namespace seqpar
