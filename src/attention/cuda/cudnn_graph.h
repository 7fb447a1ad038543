// The cuDNN backend graph API pieces of cudnn_sdpa.cpp: owned descriptors, a graph builder, and
// the fused-attention forward and backward graphs (cudnn-frontend's SDPA composites, built by
// hand). Private to attention/cuda; compiled only with cuDNN >= 9.11 (see cudnn_sdpa.cpp).
#pragma once

#include <cudnn.h>
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/error.h"

namespace seqpar::cuda_attn::cudnn_graph {

// ---- error checks and descriptors --------------------------------------------------------------

// cuDNN's status name plus its last detailed message (which names the failing rule).
std::string cudnn_message(cudnnStatus_t status);

#define SEQPAR_CUDNN_CHECK(stmt) SEQPAR_LIB_CHECK(stmt, CUDNN_STATUS_SUCCESS, cudnn_message)

// An owned backend descriptor.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type) { SEQPAR_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }
  ~Desc() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept {
    if (this != &o) {
      if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
      d_ = std::exchange(o.d_, nullptr);
    }
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const void* values, int64_t n = 1) {
    SEQPAR_CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, n, values));
  }
  void set_desc(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t d) {
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &d);
  }
  void finalize() { SEQPAR_CUDNN_CHECK(cudnnBackendFinalize(d_)); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// ---- graph building ----------------------------------------------------------------------------

using Dims = std::array<int64_t, 4>;

// Tensor ids of the variant pack (below kFirstInternal: tensors bound to memory at execution).
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV,
  kScale,                                 // attention scale, f32 passed by value
  kSeqLenQ, kSeqLenKV,                    // i32 [B]: document lengths (the same array for both)
  kRaggedQ, kRaggedKV, kRaggedStats,      // i64 [B + 1]: element offsets of each document
  kSoftmaxSum, kDQAccum, kDKFull, kDVFull,  // backward workspaces (f32 / bf16, ragged)
  kFirstInternal = 100,
};

// The tensors and operations of one graph, kept alive as long as its plan.
class Graph {
 public:
  // A tensor with a fixed uid (kFirstInternal and up are assigned by virt()/constant()).
  void tensor(int64_t uid, const Dims& dims, const Dims& strides, cudnnDataType_t dtype, bool is_virtual,
              int64_t ragged_uid = 0, bool by_value = false) {
    Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &dtype);
    t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), 4);
    t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4);
    t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid);
    t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment);
    if (is_virtual) {
      const bool yes = true;
      t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &yes);
    }
    if (by_value) {
      const bool yes = true;
      t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &yes);
    }
    if (ragged_uid != 0) t.set_desc(CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, at(ragged_uid));
    t.finalize();
    by_uid_[uid] = t.get();
    tensors_.push_back(std::move(t));
    if (!is_virtual && !by_value) bound_.push_back(uid);
  }
  // An intermediate that lives only inside the fused kernel.
  int64_t virt(const Dims& dims, const Dims& strides, cudnnDataType_t dtype, int64_t ragged_uid = 0) {
    const int64_t uid = next_uid_++;
    tensor(uid, dims, strides, dtype, /*is_virtual=*/true, ragged_uid);
    return uid;
  }
  // A scalar fused into the graph (its value travels in the variant pack, from the plan).
  int64_t constant(float value) {
    const int64_t uid = next_uid_++;
    tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, false, 0, /*by_value=*/true);
    constants_.push_back({uid, value});
    return uid;
  }

  // y = mode(x [, b [, t]]); GEN_INDEX takes an axis.
  void pointwise(cudnnPointwiseMode_t mode, int64_t y, int64_t x, int64_t b = 0, int64_t t = 0,
                 cudnnDataType_t precision = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode);
    pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &precision);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, &axis);
    pw.finalize();
    Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw.get());
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, at(x));
    if (b != 0) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, at(b));
    if (t != 0) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, at(t));
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, at(y));
    const float one = 1.f;
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, &one);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, &one);
    op.finalize();
    parts_.push_back(std::move(pw));
    ops_.push_back(std::move(op));
  }

  // c = a @ b (batched over dims 0-1, GQA by broadcast of b's heads); the overrides give the
  // per-document valid extent of m, n or k (the document lengths).
  void matmul(int64_t c, int64_t a, int64_t b, int64_t m_override, int64_t n_override, int64_t k_override) {
    Desc mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &f32);
    mm.finalize();
    Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, at(a));
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, at(b));
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, at(c));
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm.get());
    if (m_override != 0) op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, at(m_override));
    if (n_override != 0) op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, at(n_override));
    if (k_override != 0) op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, at(k_override));
    op.finalize();
    parts_.push_back(std::move(mm));
    ops_.push_back(std::move(op));
  }

  // y = reduce(x) over the dims where y is 1.
  void reduction(cudnnReduceTensorOp_t mode, int64_t y, int64_t x) {
    Desc r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    const bool deterministic = false;
    r.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &f32);
    r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &mode);
    r.set(CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, &deterministic);
    r.finalize();
    Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r.get());
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, at(x));
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, at(y));
    op.finalize();
    parts_.push_back(std::move(r));
    ops_.push_back(std::move(op));
  }

  // y = x viewed with y's dims and strides (a transpose of the last two dims here).
  void reshape(int64_t y, int64_t x) {
    Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, at(x));
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, at(y));
    op.finalize();
    ops_.push_back(std::move(op));
  }

  std::vector<cudnnBackendDescriptor_t> op_handles() const {
    std::vector<cudnnBackendDescriptor_t> v;
    for (const Desc& d : ops_) v.push_back(d.get());
    return v;
  }
  const std::vector<int64_t>& bound() const { return bound_; }
  const std::vector<std::pair<int64_t, float>>& constants() const { return constants_; }

 private:
  cudnnBackendDescriptor_t at(int64_t uid) const {
    auto it = by_uid_.find(uid);
    SEQPAR_CHECK(it != by_uid_.end(), "cuDNN graph: tensor uid {} used before it was made", uid);
    return it->second;
  }

  std::vector<Desc> tensors_, parts_, ops_;
  std::unordered_map<int64_t, cudnnBackendDescriptor_t> by_uid_;
  std::vector<int64_t> bound_;                         // non-virtual tensors bound at execution
  std::vector<std::pair<int64_t, float>> constants_;  // by-value scalars and their values
  int64_t next_uid_ = kFirstInternal;
};

// One graph's shape. Ragged (dense = false): B documents, S the padded per-document extent (>= the
// longest document), a padding mask by document lengths. Dense: one sequence of exactly S = T
// tokens, no ragged offsets, no lengths, no padding mask (what PyTorch's SDPA builds).
struct Shape4 {
  int64_t B, S, H, Hkv, D;
  bool causal;
  bool dense = false;
  bool half = false;  // the 16-bit tensors (q, k, v, o, do, dq, dk, dv, P) in fp16 instead of bf16
  auto tie() const { return std::tie(B, S, H, Hkv, D, causal, dense, half); }
  bool operator<(const Shape4& o) const { return tie() < o.tie(); }
  std::string str() const {
    return fmt::format("{} docs={} S={} H={} Hkv={} D={} causal={} {}", dense ? "dense" : "ragged", B, S, H, Hkv, D,
                       causal, half ? "fp16" : "bf16");
  }
  // cuDNN's type of the 16-bit tensors.
  cudnnDataType_t io_type() const { return half ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }
  // The ragged-offset tensor of a bound tensor: `uid`, or none in a dense graph.
  int64_t ragged(int64_t uid) const { return dense ? 0 : uid; }
  // The GEMM M/N/K override (a document-length tensor): `uid`, or none in a dense graph.
  int64_t len(int64_t uid) const { return dense ? 0 : uid; }
};

// Strides of a token-major ragged tensor [T, h, d] viewed as [B, h, S, d] ("BSHD" per document).
inline Dims bshd(const Shape4& s, int64_t h, int64_t d) { return {s.S * h * d, d, h * d, 1}; }

// The SDPA graphs of one shape: forward (O and Stats from Q, K, V) and backward (dQ, dK, dV).
void forward_graph(Graph& g, const Shape4& s);
void backward_graph(Graph& g, const Shape4& s);

}  // namespace seqpar::cuda_attn::cudnn_graph
