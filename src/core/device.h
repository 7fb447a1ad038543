// Where a tensor's bytes live.
#pragma once

#include <cstdint>
#include <string>

namespace seqpar {

enum class DeviceType { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const;
};

// True when this binary was built with the CUDA backend.
bool cuda_built();

// "cpu" | "cuda" | "cuda:N" -> Device; an InputError naming `setting` and the value otherwise (or
// when this build has no CUDA).
Device parse_device(const std::string& text, const std::string& setting = "--device");

// How many CUDA devices this process can use (cudaGetDeviceCount); 0 when there are none or the
// driver cannot be used, with the reason in `why` (if given). Never throws: for checks that name a
// setting before any GPU work.
int cuda_device_count(std::string* why = nullptr);

// Makes `device` the calling thread's current GPU (cudaSetDevice); nothing for the CPU.
void set_current_device(Device device);
// Waits until every stream of `device` has finished its work (cudaDeviceSynchronize); nothing for
// the CPU. For timing.
void synchronize_device(Device device);
// Waits until the calling thread's current stream on `device` has finished its work
// (cudaStreamSynchronize): a step's own work, not what another stream overlaps with the next step.
// Nothing for the CPU. For timing steps.
void synchronize_current_stream(Device device);
// The device's total memory in bytes (cudaMemGetInfo); 0 for the CPU (no fixed budget).
int64_t device_total_bytes(Device device);
// The GPU's compute capability as major * 10 + minor (90 for Hopper), queried once per device and cached for the
// process (a device's never changes); 0 for the CPU.
int device_compute_capability(Device device);

}  // namespace seqpar
