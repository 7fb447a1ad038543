// Tensor: shape, dtype, device and a shared storage. Always contiguous (row-major); views only
// reshape or take a range of rows (dim 0), so every tensor is one dense block of bytes.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace seqpar {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

// Owns bytes from an Allocator; freed when the last Tensor referring to it goes.
class Storage {
 public:
  Storage(size_t bytes, Allocator& alloc);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return alloc_->device(); }

 private:
  void* data_;
  size_t bytes_;
  Allocator* alloc_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor: defined() == false

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  // From a given allocator (its device): e.g. pinned host memory.
  static Tensor empty(const Shape& shape, DType dtype, Allocator& alloc);
  // Host f32/i32/i64 tensor from values (size must equal the shape's element count).
  template <typename T>
  static Tensor from_vector(const Shape& shape, const std::vector<T>& values);

  bool defined() const { return defined_; }
  const Shape& shape() const { return shape_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const;  // negative i counts from the end
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

  void* raw() const;
  template <typename T>
  T* data() const {
    SEQPAR_CHECK(dtype_ == dtype_of<T>::value, "tensor holds {}, accessed as {}", dtype_name(dtype_),
                 dtype_name(dtype_of<T>::value));
    return static_cast<T*>(raw());
  }

  // Same bytes, new shape (same element count).
  Tensor view(const Shape& shape) const;
  // Rows [begin, end) of dim 0, sharing storage.
  Tensor rows(int64_t begin, int64_t end) const;
  // Deep copy, optionally to another device.
  Tensor clone() const;
  Tensor to(Device device) const;
  // Copies src's bytes into this tensor (same dtype and element count; any devices).
  void copy_from(const Tensor& src);
  // Sets every element to zero.
  void zero();
  // Host f32 copy of any float tensor (bf16 is widened), for tests and outputs.
  std::vector<float> to_f32_vector() const;
  Tensor to_dtype(DType dtype) const;  // host only for now

  std::string str() const;  // "bf16[4, 8] cpu"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
  Device device_;
  bool defined_ = false;
};

// Shape assertion that stays on in release builds: names the tensor and both shapes.
void check_shape(const Tensor& t, const Shape& expected, const char* name);
void check_dtype(const Tensor& t, DType expected, const char* name);

// Copies n bytes between any two devices (host<->device, device<->device, host<->host).
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n);
// Copies `rows` rows of `width` bytes, row i from src + i*src_pitch to dst + i*dst_pitch (a
// strided block, e.g. a range of heads out of [T, H, D]); any devices.
void copy_bytes_2d(void* dst, size_t dst_pitch, Device dst_dev, const void* src, size_t src_pitch, Device src_dev,
                   size_t width, size_t rows);

}  // namespace seqpar
