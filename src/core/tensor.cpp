#include "core/tensor.h"

#include <cstring>

namespace seqpar {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    SEQPAR_CHECK(d >= 0, "negative dimension in shape {}", shape_str(s));
    n *= d;
  }
  return n;
}

Storage::Storage(size_t bytes, Allocator& alloc) : data_(alloc.allocate(bytes)), bytes_(bytes), alloc_(&alloc) {}
Storage::~Storage() { alloc_->deallocate(data_, bytes_); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return empty(shape, dtype, allocator_for(device));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Allocator& alloc) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.defined_ = true;
  t.device_ = alloc.device();
  t.storage_ = std::make_shared<Storage>(t.nbytes(), alloc);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero();
  return t;
}

template <typename T>
Tensor Tensor::from_vector(const Shape& shape, const std::vector<T>& values) {
  Tensor t = empty(shape, dtype_of<T>::value);
  SEQPAR_CHECK_EQ(static_cast<int64_t>(values.size()), t.numel(), "from_vector: values vs shape {}", shape_str(shape));
  if (!values.empty()) std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}
template Tensor Tensor::from_vector<float>(const Shape&, const std::vector<float>&);
template Tensor Tensor::from_vector<int32_t>(const Shape&, const std::vector<int32_t>&);
template Tensor Tensor::from_vector<int64_t>(const Shape&, const std::vector<int64_t>&);
template Tensor Tensor::from_vector<bf16>(const Shape&, const std::vector<bf16>&);
template Tensor Tensor::from_vector<f16>(const Shape&, const std::vector<f16>&);

int64_t Tensor::dim(int64_t i) const {
  int64_t n = ndim();
  if (i < 0) i += n;
  SEQPAR_CHECK(i >= 0 && i < n, "dim {} out of range for shape {}", i, shape_str(shape_));
  return shape_[i];
}

void* Tensor::raw() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_;
}

Tensor Tensor::view(const Shape& shape) const {
  SEQPAR_CHECK_EQ(shape_numel(shape), numel_, "view {} of {}", shape_str(shape), shape_str(shape_));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  SEQPAR_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "rows [{}, {}) of {}", begin, end,
               shape_str(shape_));
  int64_t row_elems = shape_[0] ? numel_ / shape_[0] : 0;
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.numel_ = (end - begin) * row_elems;
  t.offset_ = offset_ + static_cast<size_t>(begin * row_elems) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::clone() const { return to(device_); }

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  SEQPAR_CHECK(dtype_ == src.dtype_ && numel_ == src.numel_, "copy {} into {}", src.str(), str());
  copy_bytes(raw(), device_, src.raw(), src.device_, nbytes());
}

std::vector<float> Tensor::to_f32_vector() const {
  Tensor host = device_.is_cpu() ? *this : to(Device::cpu());
  std::vector<float> out(numel_);
  if (dtype_ == DType::kF32) {
    if (numel_) std::memcpy(out.data(), host.raw(), nbytes());
  } else if (dtype_ == DType::kBF16) {
    const bf16* p = host.data<bf16>();
    for (int64_t i = 0; i < numel_; ++i) out[i] = bf16_to_f32(p[i]);
  } else if (dtype_ == DType::kF16) {
    const f16* p = host.data<f16>();
    for (int64_t i = 0; i < numel_; ++i) out[i] = f16_to_f32(p[i]);
  } else if (dtype_ == DType::kI32) {
    const int32_t* p = host.data<int32_t>();
    for (int64_t i = 0; i < numel_; ++i) out[i] = static_cast<float>(p[i]);
  } else {
    const int64_t* p = host.data<int64_t>();
    for (int64_t i = 0; i < numel_; ++i) out[i] = static_cast<float>(p[i]);
  }
  return out;
}

Tensor Tensor::to_dtype(DType dtype) const {
  SEQPAR_CHECK(device_.is_cpu(), "to_dtype on {} (host tensors only)", str());
  if (dtype == dtype_) return clone();
  Tensor out = empty(shape_, dtype);
  if (dtype == DType::kF32) {
    std::vector<float> v = to_f32_vector();
    if (numel_) std::memcpy(out.raw(), v.data(), out.nbytes());
  } else if (dtype == DType::kBF16) {
    SEQPAR_CHECK(dtype_ == DType::kF32, "to_dtype {} -> bf16", dtype_name(dtype_));
    const float* p = data<float>();
    bf16* q = out.data<bf16>();
    for (int64_t i = 0; i < numel_; ++i) q[i] = f32_to_bf16(p[i]);
  } else if (dtype == DType::kF16) {
    SEQPAR_CHECK(dtype_ == DType::kF32, "to_dtype {} -> f16", dtype_name(dtype_));
    const float* p = data<float>();
    f16* q = out.data<f16>();
    for (int64_t i = 0; i < numel_; ++i) q[i] = f32_to_f16(p[i]);
  } else {
    SEQPAR_CHECK(false, "to_dtype {} -> {} is not supported", dtype_name(dtype_), dtype_name(dtype));
  }
  return out;
}

std::string Tensor::str() const {
  return fmt::format("{}{} {}", dtype_name(dtype_), shape_str(shape_), device_.str());
}

void check_shape(const Tensor& t, const Shape& expected, const char* name) {
  SEQPAR_CHECK(t.shape() == expected, "{} has shape {}, expected {}", name, shape_str(t.shape()), shape_str(expected));
}

void check_dtype(const Tensor& t, DType expected, const char* name) {
  SEQPAR_CHECK(t.dtype() == expected, "{} has dtype {}, expected {}", name, dtype_name(t.dtype()),
               dtype_name(expected));
}

#if !defined(SEQPAR_WITH_CUDA)
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) {
  SEQPAR_CHECK(dst_dev.is_cpu() && src_dev.is_cpu(), "CUDA copy in a build without CUDA");
  if (n) std::memmove(dst, src, n);
}
void Tensor::zero() {
  if (nbytes()) std::memset(raw(), 0, nbytes());
}
void copy_bytes_2d(void* dst, size_t dst_pitch, Device dst_dev, const void* src, size_t src_pitch, Device src_dev,
                   size_t width, size_t rows) {
  SEQPAR_CHECK(dst_dev.is_cpu() && src_dev.is_cpu(), "CUDA copy in a build without CUDA");
  for (size_t i = 0; i < rows; ++i)
    std::memcpy(static_cast<char*>(dst) + i * dst_pitch, static_cast<const char*>(src) + i * src_pitch, width);
}
#endif

}  // namespace seqpar
