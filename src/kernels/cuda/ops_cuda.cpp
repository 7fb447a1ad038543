// Tensor-level CUDA entries of kernels/ops.h (matmul is in matmul.cpp): device, dtype and shape
// checks, then the raw launchers of launchers.h on the calling thread's current stream.
#include "kernels/cuda/ops_cuda.h"

#include <cuda_runtime.h>

#include <cmath>
#include <map>
#include <memory>

#include "core/cuda/stream.h"
#include "core/cuda_check.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cuda/launchers.h"

namespace seqpar::cuda_ops {

namespace {

bool is_float(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

// Every tensor defined and on the same CUDA device as the first; makes that device current for
// the scope (restoring the previous one).
class DeviceScope {
 public:
  DeviceScope(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> tensors) {
    const Tensor* first = tensors.begin()->second;
    for (const auto& [name, t] : tensors) {
      SEQPAR_CHECK(t->defined(), "{}: {} is undefined", op, name);
      SEQPAR_CHECK(t->device().is_cuda() && t->device() == first->device(),
                   "{}: {} is {}; every tensor must be on {} (a CUDA device)", op, name, t->str(),
                   first->device().str());
    }
    SEQPAR_CUDA_CHECK(cudaGetDevice(&prev_));
    dev_ = first->device().index;
    if (prev_ != dev_) SEQPAR_CUDA_CHECK(cudaSetDevice(dev_));
  }
  ~DeviceScope() {
    if (prev_ != dev_) cudaSetDevice(prev_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = 0, dev_ = 0;
};

void check_float(const Tensor& t, const char* op, const char* name) {
  SEQPAR_CHECK(is_float(t.dtype()), "{}: {} is {}; expected f32, bf16 or f16", op, name, t.str());
}

// The ops that check their token ids or targets on the device (the CPU path checks them on the
// host and throws at once).
enum CheckedOp { kEmbeddingForward, kEmbeddingBackward, kCrossEntropyForward, kCrossEntropyBackward, kCheckedOps };
const char* checked_op_name(int op) {
  static const char* const names[kCheckedOps] = {"embedding_forward", "embedding_backward", "cross_entropy_forward",
                                                 "cross_entropy_backward"};
  return names[op];
}

// The device error slots (launchers.h) of this thread and device, one int[3] per checked op, zero
// until a kernel reports bad input. Nothing waits for them when a kernel is queued: the device
// keeps running and check_device_errors() reads them all with one host wait.
class ErrorSlots {
 public:
  ErrorSlots() {
    SEQPAR_CUDA_CHECK(cudaMalloc(&dev_, kInts * sizeof(int)));
    SEQPAR_CUDA_CHECK(cudaMemset(dev_, 0, kInts * sizeof(int)));
    SEQPAR_CUDA_CHECK(cudaMallocHost(&host_, kInts * sizeof(int)));
  }
  ~ErrorSlots() {  // no checks: may run at exit
    cudaFree(dev_);
    cudaFreeHost(host_);
  }
  ErrorSlots(const ErrorSlots&) = delete;
  ErrorSlots& operator=(const ErrorSlots&) = delete;

  // The slot of `op`, remembering the vocabulary size for the message.
  int* slot(CheckedOp op, int64_t vocab) {
    vocab_[op] = vocab;
    armed_ = true;
    return dev_ + 3 * op;
  }

  // Waits for the stream once; throws the first op's report (clearing every slot) if any.
  void check(cudaStream_t stream) {
    if (!armed_) return;
    SEQPAR_CUDA_CHECK(cudaMemcpyAsync(host_, dev_, kInts * sizeof(int), cudaMemcpyDeviceToHost, stream));
    host_wait(stream, "device error flags");
    armed_ = false;
    for (int op = 0; op < kCheckedOps; ++op) {
      const int* r = host_ + 3 * op;
      if (r[0] == 0) continue;
      const int where = r[1], value = r[2];
      SEQPAR_CUDA_CHECK(cudaMemsetAsync(dev_, 0, kInts * sizeof(int), stream));
      const char* name = checked_op_name(op);
      if (op == kEmbeddingForward || op == kEmbeddingBackward)
        throw InputError(fmt::format("{}: token {} has id {}, outside the vocabulary [0, V={}) (was the data "
                                     "tokenized for a larger vocab_size than the model's?)",
                                     name, where, value, vocab_[op]));
      throw InputError(fmt::format("{}: token {} has target {}, outside the vocabulary [0, V={}) and not the ignore "
                                   "index {}",
                                   name, where, value, vocab_[op], kIgnoreIndex));
    }
  }

 private:
  static constexpr int kInts = 3 * kCheckedOps;
  int* dev_ = nullptr;
  int* host_ = nullptr;
  int64_t vocab_[kCheckedOps] = {};
  bool armed_ = false;  // a checked op ran since the last check
};

ErrorSlots& error_slots(int device) {
  thread_local std::map<int, std::unique_ptr<ErrorSlots>> slots;
  auto& s = slots[device];
  if (!s) s = std::make_unique<ErrorSlots>();  // allocated on the current device (DeviceScope)
  return *s;
}

}  // namespace

void check_device_errors(Device device) {
  int prev = 0;
  SEQPAR_CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != device.index) SEQPAR_CUDA_CHECK(cudaSetDevice(device.index));
  try {
    error_slots(device.index).check(current_stream());
  } catch (...) {
    if (prev != device.index) cudaSetDevice(prev);
    throw;
  }
  if (prev != device.index) SEQPAR_CUDA_CHECK(cudaSetDevice(prev));
}

// ---- embedding ----------------------------------------------------------------------------

void embedding_forward(Tensor& out, const Tensor& ids, const Tensor& wte) {
  DeviceScope scope("embedding_forward", {{"out", &out}, {"ids", &ids}, {"wte", &wte}});
  check_dtype(ids, DType::kI32, "embedding_forward ids");
  check_float(out, "embedding_forward", "out");
  check_float(wte, "embedding_forward", "wte");
  SEQPAR_CHECK(wte.ndim() == 2, "embedding_forward: wte must be [V, C], got {}", wte.str());
  const int64_t T = ids.numel(), V = wte.dim(0), C = wte.dim(1);
  check_shape(ids, {T}, "embedding_forward ids");
  check_shape(out, {T, C}, "embedding_forward out");
  cudaStream_t stream = current_stream();
  cuda_kernels::embedding_forward(out.raw(), out.dtype(), ids.data<int32_t>(), wte.raw(), wte.dtype(), T, C, V,
                                  error_slots(out.device().index).slot(kEmbeddingForward, V), stream);
}

void embedding_backward(Tensor& dwte, const Tensor& dout, const Tensor& ids) {
  DeviceScope scope("embedding_backward", {{"dwte", &dwte}, {"dout", &dout}, {"ids", &ids}});
  check_dtype(ids, DType::kI32, "embedding_backward ids");
  check_float(dwte, "embedding_backward", "dwte");
  check_float(dout, "embedding_backward", "dout");
  SEQPAR_CHECK(dwte.ndim() == 2, "embedding_backward: dwte must be [V, C], got {}", dwte.str());
  const int64_t T = ids.numel(), V = dwte.dim(0), C = dwte.dim(1);
  check_shape(ids, {T}, "embedding_backward ids");
  check_shape(dout, {T, C}, "embedding_backward dout");
  cudaStream_t stream = current_stream();
  cuda_kernels::embedding_backward(dwte.raw(), dwte.dtype(), dout.raw(), dout.dtype(), ids.data<int32_t>(), T, C, V,
                                   error_slots(dwte.device().index).slot(kEmbeddingBackward, V), stream);
}

// ---- RMSNorm ------------------------------------------------------------------------------

// Rows of C = the last dim; every leading dim is folded into T.
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps) {
  DeviceScope scope("rmsnorm_forward", {{"out", &out}, {"rstd", &rstd}, {"inp", &inp}, {"weight", &weight}});
  check_float(inp, "rmsnorm_forward", "inp");
  check_float(weight, "rmsnorm_forward", "weight");
  check_dtype(out, inp.dtype(), "rmsnorm_forward out");
  check_dtype(rstd, DType::kF32, "rmsnorm_forward rstd");
  SEQPAR_CHECK(inp.ndim() >= 1 && inp.dim(-1) > 0, "rmsnorm_forward: inp {} has no rows", inp.str());
  const int64_t C = inp.dim(-1), T = inp.numel() / C;
  check_shape(out, inp.shape(), "rmsnorm_forward out");
  check_shape(weight, {C}, "rmsnorm_forward weight");
  SEQPAR_CHECK(rstd.numel() == T, "rmsnorm_forward: rstd {} must hold {} rows", rstd.str(), T);
  cuda_kernels::rmsnorm_forward(out.raw(), rstd.data<float>(), inp.raw(), inp.dtype(), weight.raw(), weight.dtype(),
                                T, C, eps, current_stream());
}

void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                      const Tensor& rstd, bool accumulate) {
  DeviceScope scope("rmsnorm_backward", {{"dinp", &dinp},
                                         {"dweight", &dweight},
                                         {"dout", &dout},
                                         {"inp", &inp},
                                         {"weight", &weight},
                                         {"rstd", &rstd}});
  check_float(inp, "rmsnorm_backward", "inp");
  check_float(weight, "rmsnorm_backward", "weight");
  check_float(dweight, "rmsnorm_backward", "dweight");
  check_dtype(dinp, inp.dtype(), "rmsnorm_backward dinp");
  check_dtype(dout, inp.dtype(), "rmsnorm_backward dout");
  check_dtype(rstd, DType::kF32, "rmsnorm_backward rstd");
  SEQPAR_CHECK(inp.ndim() >= 1 && inp.dim(-1) > 0, "rmsnorm_backward: inp {} has no rows", inp.str());
  const int64_t C = inp.dim(-1), T = inp.numel() / C;
  check_shape(dinp, inp.shape(), "rmsnorm_backward dinp");
  check_shape(dout, inp.shape(), "rmsnorm_backward dout");
  check_shape(weight, {C}, "rmsnorm_backward weight");
  check_shape(dweight, {C}, "rmsnorm_backward dweight");
  SEQPAR_CHECK(rstd.numel() == T, "rmsnorm_backward: rstd {} must hold {} rows", rstd.str(), T);
  // The per-block dweight partials live in shared memory while a block works: C floats.
  SEQPAR_CHECK(C <= 48 * 1024, "rmsnorm_backward: C={} exceeds the supported 49152 (shared-memory partials)", C);
  const int blocks = cuda_kernels::norm_backward_blocks(T);
  ScratchBytes partials(inp.device(), static_cast<size_t>(blocks) * C * sizeof(float));
  cuda_kernels::rmsnorm_backward(dinp.raw(), dweight.raw(), dweight.dtype(), static_cast<float*>(partials.get()),
                                 dout.raw(), inp.raw(), inp.dtype(), weight.raw(), weight.dtype(), rstd.data<float>(),
                                 T, C, accumulate, current_stream());
}

// ---- LayerNorm ----------------------------------------------------------------------------

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                       const Tensor& bias, float eps) {
  const char* op = "layernorm_forward";
  DeviceScope scope(op, {{"out", &out},
                         {"mean", &mean},
                         {"rstd", &rstd},
                         {"inp", &inp},
                         {"weight", &weight},
                         {"bias", &bias}});
  check_float(inp, op, "inp");
  check_float(weight, op, "weight");
  check_dtype(out, inp.dtype(), "layernorm_forward out");
  check_dtype(bias, weight.dtype(), "layernorm_forward bias");
  check_dtype(mean, DType::kF32, "layernorm_forward mean");
  check_dtype(rstd, DType::kF32, "layernorm_forward rstd");
  SEQPAR_CHECK(inp.ndim() == 2 && inp.dim(1) > 0, "{}: inp must be [T, C] with C > 0, got {}", op, inp.str());
  const int64_t T = inp.dim(0), C = inp.dim(1);
  check_shape(out, inp.shape(), "layernorm_forward out");
  check_shape(weight, {C}, "layernorm_forward weight");
  check_shape(bias, {C}, "layernorm_forward bias");
  check_shape(mean, {T}, "layernorm_forward mean");
  check_shape(rstd, {T}, "layernorm_forward rstd");
  cuda_kernels::layernorm_forward(out.raw(), mean.data<float>(), rstd.data<float>(), inp.raw(), inp.dtype(),
                                  weight.raw(), bias.raw(), weight.dtype(), T, C, eps, current_stream());
}

void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd, bool accumulate) {
  const char* op = "layernorm_backward";
  DeviceScope scope(op, {{"dinp", &dinp},
                         {"dweight", &dweight},
                         {"dbias", &dbias},
                         {"dout", &dout},
                         {"inp", &inp},
                         {"weight", &weight},
                         {"mean", &mean},
                         {"rstd", &rstd}});
  check_float(inp, op, "inp");
  check_float(weight, op, "weight");
  check_dtype(dinp, inp.dtype(), "layernorm_backward dinp");
  check_dtype(dout, inp.dtype(), "layernorm_backward dout");
  check_dtype(dweight, DType::kF32, "layernorm_backward dweight");
  check_dtype(dbias, DType::kF32, "layernorm_backward dbias");
  check_dtype(mean, DType::kF32, "layernorm_backward mean");
  check_dtype(rstd, DType::kF32, "layernorm_backward rstd");
  SEQPAR_CHECK(inp.ndim() == 2 && inp.dim(1) > 0, "{}: inp must be [T, C] with C > 0, got {}", op, inp.str());
  const int64_t T = inp.dim(0), C = inp.dim(1);
  check_shape(dinp, inp.shape(), "layernorm_backward dinp");
  check_shape(dout, inp.shape(), "layernorm_backward dout");
  check_shape(weight, {C}, "layernorm_backward weight");
  check_shape(dweight, {C}, "layernorm_backward dweight");
  check_shape(dbias, {C}, "layernorm_backward dbias");
  check_shape(mean, {T}, "layernorm_backward mean");
  check_shape(rstd, {T}, "layernorm_backward rstd");
  // The per-block dweight and dbias partials live in shared memory while a block works: 2C floats
  // (up to 192 KiB; sm_90 gives a block 227 KiB).
  SEQPAR_CHECK(C <= 24 * 1024, "{}: C={} exceeds the supported 24576 (shared-memory partials of dweight and dbias)",
               op, C);
  const int blocks = cuda_kernels::norm_backward_blocks(T);
  ScratchBytes partials(inp.device(), static_cast<size_t>(blocks) * 2 * C * sizeof(float));
  cuda_kernels::layernorm_backward(dinp.raw(), dweight.data<float>(), dbias.data<float>(),
                                   static_cast<float*>(partials.get()), dout.raw(), inp.raw(), inp.dtype(),
                                   weight.raw(), weight.dtype(), mean.data<float>(), rstd.data<float>(), T, C,
                                   accumulate, current_stream());
}

// ---- GELU ---------------------------------------------------------------------------------

void gelu_forward(Tensor& out, const Tensor& inp, GeluKind kind) {
  DeviceScope scope("gelu_forward", {{"out", &out}, {"inp", &inp}});
  check_float(inp, "gelu_forward", "inp");
  check_dtype(out, inp.dtype(), "gelu_forward out");
  check_shape(out, inp.shape(), "gelu_forward out");
  cuda_kernels::gelu_forward(out.raw(), inp.raw(), inp.dtype(), inp.numel(), kind == GeluKind::kTanh,
                             current_stream());
}

void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, GeluKind kind) {
  DeviceScope scope("gelu_backward", {{"dinp", &dinp}, {"dout", &dout}, {"inp", &inp}});
  check_float(inp, "gelu_backward", "inp");
  check_dtype(dout, inp.dtype(), "gelu_backward dout");
  check_dtype(dinp, inp.dtype(), "gelu_backward dinp");
  check_shape(dout, inp.shape(), "gelu_backward dout");
  check_shape(dinp, inp.shape(), "gelu_backward dinp");
  cuda_kernels::gelu_backward(dinp.raw(), dout.raw(), inp.raw(), inp.dtype(), inp.numel(), kind == GeluKind::kTanh,
                              current_stream());
}

// ---- RoPE ---------------------------------------------------------------------------------

namespace {
void rope_apply(const char* op, Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, bool inverse,
                float scale) {
  DeviceScope scope(op, {{"x", &x}, {"position_ids", &position_ids}, {"inv_freq", &inv_freq}});
  check_float(x, op, "x");
  check_dtype(position_ids, DType::kI32, "rope position_ids");
  check_dtype(inv_freq, DType::kF32, "rope inv_freq");
  SEQPAR_CHECK(x.ndim() == 3, "{}: x must be [T, H, D], got {}", op, x.str());
  const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2);
  SEQPAR_CHECK(D % 2 == 0, "{}: head_dim D={} must be even", op, D);
  check_shape(position_ids, {T}, "rope position_ids");
  check_shape(inv_freq, {D / 2}, "rope inv_freq");
  cuda_kernels::rope(x.raw(), x.dtype(), position_ids.data<int32_t>(), inv_freq.data<float>(), T, H, D, inverse, scale,
                     current_stream());
}
}  // namespace

void rope_forward(Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, float scale) {
  rope_apply("rope_forward", x, position_ids, inv_freq, false, scale);
}

void rope_backward(Tensor& dx, const Tensor& position_ids, const Tensor& inv_freq, float scale) {
  rope_apply("rope_backward", dx, position_ids, inv_freq, true, scale);
}

// ---- Qwen3's head norm, then RoPE ----------------------------------------------------------

// One pass (head_norm_rope.cu) where its kernels apply (D a power of two from 16 to 256, 16-byte aligned tensors),
// else the two ops above one after the other: the same values up to the rounding between them.
void head_norm_rope_forward(Tensor& out, Tensor& rstd, const Tensor& x, const Tensor& weight, float eps,
                            const Tensor& position_ids, const Tensor& inv_freq, float scale) {
  const char* op = "head_norm_rope_forward";
  DeviceScope scope(op, {{"out", &out}, {"rstd", &rstd}, {"x", &x}, {"weight", &weight},
                         {"position_ids", &position_ids}, {"inv_freq", &inv_freq}});
  check_float(x, op, "x");
  check_float(weight, op, "weight");
  check_dtype(out, x.dtype(), "head_norm_rope_forward out");
  const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2);
  if (!cuda_kernels::head_norm_rope_fused(D, {out.raw(), x.raw(), weight.raw(), inv_freq.raw()})) {
    Tensor rows = out.view({T * H, D});
    cuda_ops::rmsnorm_forward(rows, rstd, x.view({T * H, D}), weight, eps);
    cuda_ops::rope_forward(out, position_ids, inv_freq, scale);
    return;
  }
  cuda_kernels::head_norm_rope_forward(out.raw(), rstd.data<float>(), x.raw(), x.dtype(), weight.raw(), weight.dtype(),
                                       position_ids.data<int32_t>(), inv_freq.data<float>(), T, H, D, eps, scale,
                                       current_stream());
}

void head_norm_rope_backward(Tensor& dx, Tensor& dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                             const Tensor& rstd, const Tensor& position_ids, const Tensor& inv_freq, float scale) {
  const char* op = "head_norm_rope_backward";
  DeviceScope scope(op, {{"dx", &dx}, {"dweight", &dweight}, {"dout", &dout}, {"x", &x}, {"weight", &weight},
                         {"rstd", &rstd}, {"position_ids", &position_ids}, {"inv_freq", &inv_freq}});
  check_float(x, op, "x");
  check_float(weight, op, "weight");
  check_float(dweight, op, "dweight");
  check_dtype(dx, x.dtype(), "head_norm_rope_backward dx");
  check_dtype(dout, x.dtype(), "head_norm_rope_backward dout");
  const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2);
  if (!cuda_kernels::head_norm_rope_fused(D, {dx.raw(), dout.raw(), x.raw(), weight.raw(), inv_freq.raw()})) {
    if (dx.raw() != dout.raw())
      SEQPAR_CUDA_CHECK(
          cudaMemcpyAsync(dx.raw(), dout.raw(), dout.nbytes(), cudaMemcpyDeviceToDevice, current_stream()));
    cuda_ops::rope_backward(dx, position_ids, inv_freq, scale);
    Tensor rows = dx.view({T * H, D});
    cuda_ops::rmsnorm_backward(rows, dweight, rows, x.view({T * H, D}), weight, rstd, /*accumulate=*/false);
    return;
  }
  ScratchBytes partials(x.device(), static_cast<size_t>(cuda_kernels::head_norm_rope_backward_blocks(T, D)) * D *
                                        sizeof(float));
  cuda_kernels::head_norm_rope_backward(dx.raw(), dweight.raw(), dweight.dtype(), static_cast<float*>(partials.get()),
                                        dout.raw(), x.raw(), x.dtype(), weight.raw(), weight.dtype(),
                                        rstd.data<float>(), position_ids.data<int32_t>(), inv_freq.data<float>(), T, H,
                                        D, scale, current_stream());
}

// ---- SwiGLU -------------------------------------------------------------------------------

void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) {
  DeviceScope scope("swiglu_forward", {{"out", &out}, {"gate", &gate}, {"up", &up}});
  check_float(gate, "swiglu_forward", "gate");
  check_dtype(up, gate.dtype(), "swiglu_forward up");
  check_dtype(out, gate.dtype(), "swiglu_forward out");
  check_shape(up, gate.shape(), "swiglu_forward up");
  check_shape(out, gate.shape(), "swiglu_forward out");
  cuda_kernels::swiglu_forward(out.raw(), gate.raw(), up.raw(), gate.dtype(), gate.numel(), current_stream());
}

void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up,
                     Tensor* out) {
  DeviceScope scope("swiglu_backward",
                    {{"dgate", &dgate}, {"dup", &dup}, {"dout", &dout}, {"gate", &gate}, {"up", &up}});
  check_float(gate, "swiglu_backward", "gate");
  const std::pair<const char*, const Tensor*> others[] = {
      {"swiglu_backward dgate", &dgate}, {"swiglu_backward dup", &dup}, {"swiglu_backward dout", &dout},
      {"swiglu_backward up", &up}, {"swiglu_backward out", out}};
  for (const auto& [name, t] : others) {
    if (t == nullptr) continue;
    check_dtype(*t, gate.dtype(), name);
    check_shape(*t, gate.shape(), name);
  }
  cuda_kernels::swiglu_backward(dgate.raw(), dup.raw(), dout.raw(), gate.raw(), up.raw(),
                                out != nullptr ? out->raw() : nullptr, gate.dtype(), gate.numel(), current_stream());
}

// ---- cross-entropy ------------------------------------------------------------------------

void cross_entropy_forward(Tensor& losses, const Tensor& logits, const Tensor& targets, Tensor* lse) {
  DeviceScope scope("cross_entropy_forward", {{"losses", &losses}, {"logits", &logits}, {"targets", &targets}});
  check_float(logits, "cross_entropy_forward", "logits");
  check_dtype(targets, DType::kI32, "cross_entropy_forward targets");
  check_dtype(losses, DType::kF32, "cross_entropy_forward losses");
  SEQPAR_CHECK(logits.ndim() == 2, "cross_entropy_forward: logits must be [T, V], got {}", logits.str());
  const int64_t T = logits.dim(0), V = logits.dim(1);
  check_shape(targets, {T}, "cross_entropy_forward targets");
  check_shape(losses, {T}, "cross_entropy_forward losses");
  cudaStream_t stream = current_stream();
  if (lse) check_shape(*lse, {T}, "cross_entropy_forward lse");
  cuda_kernels::cross_entropy_forward(losses.data<float>(), lse ? lse->data<float>() : nullptr, logits.raw(),
                                      logits.dtype(), targets.data<int32_t>(), T, V,
                                      error_slots(logits.device().index).slot(kCrossEntropyForward, V), stream);
}

void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, float dloss,
                            const Tensor* lse) {
  DeviceScope scope("cross_entropy_backward", {{"dlogits", &dlogits}, {"logits", &logits}, {"targets", &targets}});
  check_float(logits, "cross_entropy_backward", "logits");
  check_dtype(dlogits, logits.dtype(), "cross_entropy_backward dlogits");
  check_dtype(targets, DType::kI32, "cross_entropy_backward targets");
  SEQPAR_CHECK(logits.ndim() == 2, "cross_entropy_backward: logits must be [T, V], got {}", logits.str());
  const int64_t T = logits.dim(0), V = logits.dim(1);
  check_shape(dlogits, logits.shape(), "cross_entropy_backward dlogits");
  check_shape(targets, {T}, "cross_entropy_backward targets");
  cudaStream_t stream = current_stream();
  if (lse) check_shape(*lse, {T}, "cross_entropy_backward lse");
  cuda_kernels::cross_entropy_backward(dlogits.raw(), logits.raw(), logits.dtype(), targets.data<int32_t>(),
                                       lse ? lse->data<float>() : nullptr, dloss, T, V,
                                       error_slots(logits.device().index).slot(kCrossEntropyBackward, V), stream);
}

// ---- elementwise --------------------------------------------------------------------------

void add_inplace(Tensor& y, const Tensor& x) {
  DeviceScope scope("add_inplace", {{"y", &y}, {"x", &x}});
  check_float(y, "add_inplace", "y");
  check_float(x, "add_inplace", "x");
  check_shape(x, y.shape(), "add_inplace x");
  cuda_kernels::add_inplace(y.raw(), y.dtype(), x.raw(), x.dtype(), y.numel(), current_stream());
}

void bias_forward(Tensor& y, const Tensor& b) {
  DeviceScope scope("bias_forward", {{"y", &y}, {"b", &b}});
  check_float(y, "bias_forward", "y");
  check_float(b, "bias_forward", "b");
  cuda_kernels::bias_forward(y.raw(), y.dtype(), b.raw(), b.dtype(), y.dim(0), y.dim(1), current_stream());
}

void bias_backward(Tensor& db, const Tensor& dy) {
  DeviceScope scope("bias_backward", {{"db", &db}, {"dy", &dy}});
  check_float(dy, "bias_backward", "dy");
  const int64_t T = dy.dim(0), N = dy.dim(1);
  // One f32 partial column sum per block of kBiasRows rows, then an ordered sum: deterministic.
  Tensor partials = Tensor::empty({cuda_kernels::bias_row_blocks(T), N}, DType::kF32, dy.device());
  cuda_kernels::bias_backward(db.data<float>(), dy.raw(), dy.dtype(), partials.data<float>(), T, N, current_stream());
}

void scale_inplace(Tensor& y, float s) {
  DeviceScope scope("scale_inplace", {{"y", &y}});
  check_float(y, "scale_inplace", "y");
  cuda_kernels::scale_inplace(y.raw(), y.dtype(), s, y.numel(), current_stream());
}

void normal_fill(Tensor& y, uint64_t key, float std, int64_t offset) {
  DeviceScope scope("normal_fill", {{"y", &y}});
  check_float(y, "normal_fill", "y");
  cuda_kernels::normal_fill(y.raw(), y.dtype(), key, std, offset, y.numel(), current_stream());
}

void cast(Tensor& out, const Tensor& in) {
  DeviceScope scope("cast", {{"out", &out}, {"in", &in}});
  check_float(out, "cast", "out");
  check_float(in, "cast", "in");
  check_shape(out, in.shape(), "cast out");
  cuda_kernels::cast(out.raw(), out.dtype(), in.raw(), in.dtype(), in.numel(), current_stream());
}

double sum_squares(const Tensor& x) {
  DeviceScope scope("sum_squares", {{"x", &x}});
  check_float(x, "sum_squares", "x");
  if (x.numel() == 0) return 0.0;
  cudaStream_t stream = current_stream();
  ScratchBytes scratch(x.device(), (cuda_kernels::kSumSquaresBlocks + 1) * sizeof(double));
  auto* partials = static_cast<double*>(scratch.get());
  cuda_kernels::sum_squares(partials, x.raw(), x.dtype(), x.numel(), stream);
  double result = 0.0;
  SEQPAR_CUDA_CHECK(cudaMemcpyAsync(&result, partials + cuda_kernels::kSumSquaresBlocks, sizeof(double),
                                    cudaMemcpyDeviceToHost, stream));
  host_wait(stream, "sum of squares");
  return result;
}

// ---- AdamW --------------------------------------------------------------------------------

void adamw_step(Tensor& param, Tensor& m, Tensor& v, const Tensor& grad, const AdamWConfig& cfg, int64_t step,
                float grad_scale, Tensor* rounded) {
  DeviceScope scope("adamw_step", {{"param", &param}, {"m", &m}, {"v", &v}, {"grad", &grad}});
  SEQPAR_CHECK(rounded == nullptr || rounded->device() == param.device(), "adamw_step: rounded {} must be on {}",
               rounded != nullptr ? rounded->str() : std::string(), param.device().str());
  check_dtype(param, DType::kF32, "adamw_step param");
  check_dtype(m, DType::kF32, "adamw_step m");
  check_dtype(v, DType::kF32, "adamw_step v");
  check_float(grad, "adamw_step", "grad");
  check_shape(m, param.shape(), "adamw_step m");
  check_shape(v, param.shape(), "adamw_step v");
  check_shape(grad, param.shape(), "adamw_step grad");
  const cpu::AdamWScalars s =
      cpu::adamw_scalars(cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, step, grad_scale);
  const cuda_kernels::AdamWArgs args{s.decay,         s.one_minus_beta1, s.beta2, s.one_minus_beta2,
                                     s.neg_step_size, s.bias_correction2_sqrt, s.eps, s.grad_scale};
  cuda_kernels::adamw(param.data<float>(), m.data<float>(), v.data<float>(), grad.raw(), grad.dtype(), param.numel(),
                      args, current_stream(), rounded != nullptr ? rounded->raw() : nullptr,
                      rounded != nullptr ? rounded->dtype() : DType::kF32);
}

void adamw_step_rounded(Tensor& param, Tensor& m, Tensor& v, const Tensor& grad, Tensor& rounded,
                        const AdamWConfig& cfg, int64_t step, float grad_scale) {
  check_float(rounded, "adamw_step_rounded", "rounded");
  check_shape(rounded, param.shape(), "adamw_step_rounded rounded");
  adamw_step(param, m, v, grad, cfg, step, grad_scale, &rounded);
}

}  // namespace seqpar::cuda_ops
