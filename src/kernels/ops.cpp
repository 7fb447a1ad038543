// The dispatching entries of kernels/ops.h: check shapes, dtypes and devices (on in release
// builds, each message naming the op, the tensor, its shape and the expected one), then run the
// CPU kernel (f32) or the CUDA one (kernels/cuda/ops_cuda.h) by the tensors' device.
#include "kernels/ops.h"
#include "kernels/normal_draw.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>

#include "core/error.h"
#include "core/profile.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"

#if defined(SEQPAR_WITH_CUDA)
#include "kernels/cuda/ops_cuda.h"
// A call on CUDA tensors goes to the CUDA implementation of the same entry, after the checks.
#define SEQPAR_DISPATCH_CUDA(dev, call) \
  if ((dev).is_cuda()) return cuda_ops::call
#else
// Without the CUDA backend op_device() has already rejected CUDA tensors.
#define SEQPAR_DISPATCH_CUDA(dev, call) ((void)(dev))
#endif

namespace seqpar {

static_assert(kIgnoreIndex == cpu::kCrossEntropyIgnore, "ops.h and cpu/cross_entropy.h disagree on the ignore index");

namespace {

struct Arg {
  const char* name;
  const Tensor& t;
};

// Every tensor of one call must be defined and on one device; returns that device.
Device op_device(const char* op, std::initializer_list<Arg> args) {
  const Arg& first = *args.begin();
  for (const Arg& a : args) SEQPAR_CHECK(a.t.defined(), "{}: {} is an undefined tensor", op, a.name);
  const Device dev = first.t.device();
  for (const Arg& a : args) {
    SEQPAR_CHECK(a.t.device() == dev, "{}: {} is on {} but {} is on {}; all tensors of one op share a device", op,
                 a.name, a.t.device().str(), first.name, dev.str());
  }
#if !defined(SEQPAR_WITH_CUDA)
  SEQPAR_CHECK(dev.is_cpu(), "{}: tensors on {} in a build without the CUDA backend", op, dev.str());
#endif
  return dev;
}

void expect_ndim(const char* op, const Arg& a, int64_t ndim, const char* symbolic) {
  SEQPAR_CHECK(a.t.ndim() == ndim, "{}: {} has shape {}, expected a {}-D {} tensor", op, a.name,
               shape_str(a.t.shape()), ndim, symbolic);
}

// symbolic: the expected shape in glossary names, e.g. "[T, C]".
void expect_shape(const char* op, const Arg& a, const Shape& expected, const char* symbolic) {
  SEQPAR_CHECK(a.t.shape() == expected, "{}: {} has shape {}, expected {} = {}", op, a.name, shape_str(a.t.shape()),
               symbolic, shape_str(expected));
}

bool is_float_dtype(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

void expect_dtype(const char* op, const Arg& a, DType dtype) {
  SEQPAR_CHECK(a.t.dtype() == dtype, "{}: {} is {}, expected {}", op, a.name, a.t.str(), dtype_name(dtype));
}

// Activations, weights and their gradients: f32 on the CPU backend; f32, bf16 or f16 on CUDA, where
// the CUDA entry picks the kernel (and rejects combinations it does not implement).
void expect_float(const char* op, Device dev, std::initializer_list<Arg> args) {
  for (const Arg& a : args) {
    if (dev.is_cpu()) {
      SEQPAR_CHECK(a.t.dtype() == DType::kF32, "{}: {} is {}; the CPU backend computes in f32", op, a.name,
                   a.t.str());
    } else {
      SEQPAR_CHECK(is_float_dtype(a.t.dtype()), "{}: {} is {}, expected f32, bf16 or f16", op, a.name, a.t.str());
    }
  }
}

// Whether two tensors' byte ranges intersect (same device), to reject an output that overlaps an input.
bool overlaps(const Tensor& x, const Tensor& y) {
  if (x.nbytes() == 0 || y.nbytes() == 0 || !(x.device() == y.device())) return false;
  const auto* x0 = static_cast<const char*>(x.raw());
  const auto* y0 = static_cast<const char*>(y.raw());
  return x0 < y0 + y.nbytes() && y0 < x0 + x.nbytes();
}

// An output that may be an input itself (in place) but must not partly overlap it.
void expect_same_or_disjoint(const char* op, const Arg& out, const Arg& in) {
  SEQPAR_CHECK(!overlaps(out.t, in.t) || (out.t.raw() == in.t.raw() && out.t.nbytes() == in.t.nbytes()),
               "{}: {} {} partly overlaps {} {}; it may be {} itself or disjoint from it", op, out.name, out.t.str(),
               in.name, in.t.str(), in.name);
}

// out may share no memory with any of others.
void expect_disjoint(const char* op, const Arg& out, std::initializer_list<Arg> others) {
  for (const Arg& a : others)
    SEQPAR_CHECK(!overlaps(out.t, a.t), "{}: {} {} shares memory with {} {}", op, out.name, out.t.str(), a.name,
                 a.t.str());
}

float* f32(const Tensor& t) { return t.data<float>(); }
int32_t* i32(const Tensor& t) { return t.data<int32_t>(); }

}  // namespace

// ---- embedding --------------------------------------------------------------------------

void embedding_forward(Tensor& out, const Tensor& ids, const Tensor& wte) {
  const char* op = "embedding_forward";
  const Arg a_out{"out", out}, a_ids{"ids", ids}, a_wte{"wte", wte};
  const Device dev = op_device(op, {a_out, a_ids, a_wte});
  expect_ndim(op, a_ids, 1, "[T]");
  expect_ndim(op, a_wte, 2, "[V, C]");
  const int64_t T = ids.dim(0), V = wte.dim(0), C = wte.dim(1);
  expect_shape(op, a_out, {T, C}, "[T, C]");
  expect_dtype(op, a_ids, DType::kI32);
  expect_float(op, dev, {a_out, a_wte});
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, embedding_forward(out, ids, wte));
  cpu::embedding_forward(f32(out), i32(ids), f32(wte), T, C, V);
}

void embedding_backward(Tensor& dwte, const Tensor& dout, const Tensor& ids) {
  const char* op = "embedding_backward";
  const Arg a_dwte{"dwte", dwte}, a_dout{"dout", dout}, a_ids{"ids", ids};
  const Device dev = op_device(op, {a_dwte, a_dout, a_ids});
  expect_ndim(op, a_ids, 1, "[T]");
  expect_ndim(op, a_dwte, 2, "[V, C]");
  const int64_t T = ids.dim(0), V = dwte.dim(0), C = dwte.dim(1);
  expect_shape(op, a_dout, {T, C}, "[T, C]");
  expect_dtype(op, a_ids, DType::kI32);
  expect_float(op, dev, {a_dwte, a_dout});
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, embedding_backward(dwte, dout, ids));
  cpu::embedding_backward(f32(dwte), f32(dout), i32(ids), T, C, V);
}

// ---- RMSNorm ----------------------------------------------------------------------------

void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps) {
  const char* op = "rmsnorm_forward";
  const Arg a_out{"out", out}, a_rstd{"rstd", rstd}, a_inp{"inp", inp}, a_w{"weight", weight};
  const Device dev = op_device(op, {a_out, a_rstd, a_inp, a_w});
  expect_ndim(op, a_inp, 2, "[T, C]");
  const int64_t T = inp.dim(0), C = inp.dim(1);
  expect_shape(op, a_out, {T, C}, "[T, C]");
  expect_shape(op, a_w, {C}, "[C]");
  expect_shape(op, a_rstd, {T}, "[T]");
  expect_dtype(op, a_rstd, DType::kF32);
  expect_float(op, dev, {a_out, a_inp, a_w});
  SEQPAR_CHECK(eps >= 0.f, "{}: eps={} must be >= 0 (rms_norm_eps)", op, eps);
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, rmsnorm_forward(out, rstd, inp, weight, eps));
  cpu::rmsnorm_forward(f32(out), f32(rstd), f32(inp), f32(weight), T, C, eps);
}

void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                      const Tensor& rstd, bool accumulate) {
  const char* op = "rmsnorm_backward";
  const Arg a_dinp{"dinp", dinp}, a_dw{"dweight", dweight}, a_dout{"dout", dout}, a_inp{"inp", inp},
      a_w{"weight", weight}, a_rstd{"rstd", rstd};
  const Device dev = op_device(op, {a_dinp, a_dw, a_dout, a_inp, a_w, a_rstd});
  expect_ndim(op, a_inp, 2, "[T, C]");
  const int64_t T = inp.dim(0), C = inp.dim(1);
  expect_shape(op, a_dinp, {T, C}, "[T, C]");
  expect_shape(op, a_dout, {T, C}, "[T, C]");
  expect_shape(op, a_w, {C}, "[C]");
  expect_shape(op, a_dw, {C}, "[C]");
  expect_shape(op, a_rstd, {T}, "[T]");
  expect_dtype(op, a_rstd, DType::kF32);
  expect_float(op, dev, {a_dinp, a_dw, a_dout, a_inp, a_w});
  if (accumulate) expect_disjoint(op, a_dinp, {a_dout, a_inp, a_w, a_rstd, a_dw});
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, accumulate));
  cpu::rmsnorm_backward(f32(dinp), f32(dweight), f32(dout), f32(inp), f32(weight), f32(rstd), T, C, accumulate);
}

// ---- LayerNorm ----------------------------------------------------------------------------

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                       const Tensor& bias, float eps) {
  const char* op = "layernorm_forward";
  const Arg a_out{"out", out}, a_mean{"mean", mean}, a_rstd{"rstd", rstd}, a_inp{"inp", inp}, a_w{"weight", weight},
      a_b{"bias", bias};
  const Device dev = op_device(op, {a_out, a_mean, a_rstd, a_inp, a_w, a_b});
  expect_ndim(op, a_inp, 2, "[T, C]");
  const int64_t T = inp.dim(0), C = inp.dim(1);
  SEQPAR_CHECK(C > 0, "{}: inp has shape {}: C must be > 0 (a row's mean and variance)", op, shape_str(inp.shape()));
  expect_shape(op, a_out, {T, C}, "[T, C]");
  expect_shape(op, a_w, {C}, "[C]");
  expect_shape(op, a_b, {C}, "[C]");
  expect_shape(op, a_mean, {T}, "[T]");
  expect_shape(op, a_rstd, {T}, "[T]");
  expect_dtype(op, a_mean, DType::kF32);
  expect_dtype(op, a_rstd, DType::kF32);
  expect_float(op, dev, {a_out, a_inp, a_w, a_b});
  SEQPAR_CHECK(eps >= 0.f, "{}: eps={} must be >= 0 (layer_norm_epsilon)", op, eps);
  for (const Arg& a : {a_inp, a_w, a_b, a_mean, a_rstd})
    SEQPAR_CHECK(!overlaps(out, a.t), "{}: out {} shares memory with {} {}", op, out.str(), a.name, a.t.str());
  SEQPAR_CHECK(!overlaps(mean, rstd), "{}: mean and rstd share memory", op);
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, layernorm_forward(out, mean, rstd, inp, weight, bias, eps));
  cpu::layernorm_forward(f32(out), f32(mean), f32(rstd), f32(inp), f32(weight), f32(bias), T, C, eps);
}

void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd, bool accumulate) {
  const char* op = "layernorm_backward";
  const Arg a_dinp{"dinp", dinp}, a_dw{"dweight", dweight}, a_db{"dbias", dbias}, a_dout{"dout", dout},
      a_inp{"inp", inp}, a_w{"weight", weight}, a_mean{"mean", mean}, a_rstd{"rstd", rstd};
  const Device dev = op_device(op, {a_dinp, a_dw, a_db, a_dout, a_inp, a_w, a_mean, a_rstd});
  expect_ndim(op, a_inp, 2, "[T, C]");
  const int64_t T = inp.dim(0), C = inp.dim(1);
  SEQPAR_CHECK(C > 0, "{}: inp has shape {}: C must be > 0", op, shape_str(inp.shape()));
  expect_shape(op, a_dinp, {T, C}, "[T, C]");
  expect_shape(op, a_dout, {T, C}, "[T, C]");
  expect_shape(op, a_w, {C}, "[C]");
  expect_shape(op, a_dw, {C}, "[C]");
  expect_shape(op, a_db, {C}, "[C]");
  expect_shape(op, a_mean, {T}, "[T]");
  expect_shape(op, a_rstd, {T}, "[T]");
  for (const Arg& a : {a_dw, a_db, a_mean, a_rstd}) expect_dtype(op, a, DType::kF32);
  expect_float(op, dev, {a_dinp, a_dout, a_inp, a_w});
  if (accumulate) {
    expect_disjoint(op, a_dinp, {a_dout});
  } else {
    expect_same_or_disjoint(op, a_dinp, a_dout);
  }
  expect_disjoint(op, a_dinp, {a_inp, a_w, a_mean, a_rstd, a_dw, a_db});
  SEQPAR_CHECK(!overlaps(dweight, dbias), "{}: dweight and dbias share memory", op);
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, accumulate));
  cpu::layernorm_backward(f32(dinp), f32(dweight), f32(dbias), f32(dout), f32(inp), f32(weight), f32(mean), f32(rstd),
                          T, C, accumulate);
}

// ---- RoPE -------------------------------------------------------------------------------

namespace {
// Shared checks of rope_forward / rope_backward; returns the device.
Device rope_check(const char* op, const Arg& a_x, const Tensor& position_ids, const Tensor& inv_freq) {
  const Arg a_pos{"position_ids", position_ids}, a_freq{"inv_freq", inv_freq};
  const Device dev = op_device(op, {a_x, a_pos, a_freq});
  expect_ndim(op, a_x, 3, "[T, H, D]");
  const int64_t T = a_x.t.dim(0), D = a_x.t.dim(2);
  SEQPAR_CHECK(D % 2 == 0, "{}: {} has shape {}: head_dim D={} must be even (pairs (i, i + D/2) are rotated)", op,
               a_x.name, shape_str(a_x.t.shape()), D);
  expect_shape(op, a_pos, {T}, "[T]");
  expect_shape(op, a_freq, {D / 2}, "[D/2]");
  expect_dtype(op, a_pos, DType::kI32);
  expect_dtype(op, a_freq, DType::kF32);
  expect_float(op, dev, {a_x});
  return dev;
}
}  // namespace

void rope_forward(Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, float scale) {
  const Device dev = rope_check("rope_forward", {"x", x}, position_ids, inv_freq);
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, rope_forward(x, position_ids, inv_freq, scale));
  cpu::rope_forward(f32(x), i32(position_ids), f32(inv_freq), x.dim(0), x.dim(1), x.dim(2), scale);
}

void rope_backward(Tensor& dx, const Tensor& position_ids, const Tensor& inv_freq, float scale) {
  const Device dev = rope_check("rope_backward", {"dx", dx}, position_ids, inv_freq);
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, rope_backward(dx, position_ids, inv_freq, scale));
  cpu::rope_backward(f32(dx), i32(position_ids), f32(inv_freq), dx.dim(0), dx.dim(1), dx.dim(2), scale);
}

// ---- Qwen3's head norm, then RoPE -----------------------------------------------------------

namespace {
// Shared shape and dtype checks of head_norm_rope_forward / _backward (x [T, H, D], weight [D], rstd [T * H]) on
// device dev; outs have x's shape.
void head_norm_rope_check(const char* op, Device dev, std::initializer_list<Arg> outs, const Tensor& x,
                          const Tensor& weight, const Tensor& rstd, const Tensor& position_ids, const Tensor& inv_freq) {
  const Arg a_x{"x", x}, a_w{"weight", weight}, a_rstd{"rstd", rstd};
  const Arg a_pos{"position_ids", position_ids}, a_freq{"inv_freq", inv_freq};
  expect_ndim(op, a_x, 3, "[T, H, D]");
  const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2);
  SEQPAR_CHECK(D % 2 == 0, "{}: x has shape {}: head_dim D={} must be even (pairs (i, i + D/2) are rotated)", op,
               shape_str(x.shape()), D);
  expect_shape(op, a_w, {D}, "[D]");
  expect_shape(op, a_rstd, {T * H}, "[T * H]");
  expect_dtype(op, a_rstd, DType::kF32);
  expect_shape(op, a_pos, {T}, "[T]");
  expect_shape(op, a_freq, {D / 2}, "[D/2]");
  expect_dtype(op, a_pos, DType::kI32);
  expect_dtype(op, a_freq, DType::kF32);
  expect_float(op, dev, {a_x, a_w});
  for (const Arg& a : outs) expect_shape(op, a, x.shape(), "[T, H, D]");
}
}  // namespace

void head_norm_rope_forward(Tensor& out, Tensor& rstd, const Tensor& x, const Tensor& weight, float eps,
                            const Tensor& position_ids, const Tensor& inv_freq, float scale) {
  const char* op = "head_norm_rope_forward";
  const Arg a_out{"out", out}, a_rstd{"rstd", rstd}, a_x{"x", x}, a_w{"weight", weight};
  const Device dev = op_device(op, {a_out, a_rstd, a_x, a_w, {"position_ids", position_ids}, {"inv_freq", inv_freq}});
  head_norm_rope_check(op, dev, {a_out}, x, weight, rstd, position_ids, inv_freq);
  expect_float(op, dev, {a_out});
  expect_disjoint(op, a_out, {a_x, a_w, a_rstd});
  SEQPAR_CHECK(eps >= 0.f, "{}: eps={} must be >= 0 (rms_norm_eps)", op, eps);
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, head_norm_rope_forward(out, rstd, x, weight, eps, position_ids, inv_freq, scale));
  const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2);
  cpu::rmsnorm_forward(f32(out), f32(rstd), f32(x), f32(weight), T * H, D, eps);
  cpu::rope_forward(f32(out), i32(position_ids), f32(inv_freq), T, H, D, scale);
}

void head_norm_rope_backward(Tensor& dx, Tensor& dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                             const Tensor& rstd, const Tensor& position_ids, const Tensor& inv_freq, float scale) {
  const char* op = "head_norm_rope_backward";
  const Arg a_dx{"dx", dx}, a_dout{"dout", dout}, a_dw{"dweight", dweight}, a_x{"x", x}, a_w{"weight", weight},
      a_rstd{"rstd", rstd};
  const Device dev = op_device(
      op, {a_dx, a_dw, a_dout, a_x, a_w, a_rstd, {"position_ids", position_ids}, {"inv_freq", inv_freq}});
  head_norm_rope_check(op, dev, {a_dx, a_dout}, x, weight, rstd, position_ids, inv_freq);
  expect_shape(op, a_dw, {x.dim(2)}, "[D]");
  expect_float(op, dev, {a_dx, a_dout, a_dw});
  expect_same_or_disjoint(op, a_dx, a_dout);
  expect_disjoint(op, a_dx, {a_x, a_w, a_rstd, a_dw});
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev,
                       head_norm_rope_backward(dx, dweight, dout, x, weight, rstd, position_ids, inv_freq, scale));
  const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2);
  if (dx.raw() != dout.raw()) std::memcpy(dx.raw(), dout.raw(), dout.nbytes());
  cpu::rope_backward(f32(dx), i32(position_ids), f32(inv_freq), T, H, D, scale);
  cpu::rmsnorm_backward(f32(dx), f32(dweight), f32(dx), f32(x), f32(weight), f32(rstd), T * H, D);
}

// ---- SwiGLU -----------------------------------------------------------------------------

void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_forward";
  const Arg a_out{"out", out}, a_gate{"gate", gate}, a_up{"up", up};
  const Device dev = op_device(op, {a_out, a_gate, a_up});
  expect_ndim(op, a_gate, 2, "[T, F]");
  expect_shape(op, a_up, gate.shape(), "[T, F]");
  expect_shape(op, a_out, gate.shape(), "[T, F]");
  expect_float(op, dev, {a_out, a_gate, a_up});
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, swiglu_forward(out, gate, up));
  cpu::swiglu_forward(f32(out), f32(gate), f32(up), gate.numel());
}

void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up,
                     Tensor* out) {
  const char* op = "swiglu_backward";
  const Arg a_dgate{"dgate", dgate}, a_dup{"dup", dup}, a_dout{"dout", dout}, a_gate{"gate", gate}, a_up{"up", up};
  const Device dev = op_device(op, {a_dgate, a_dup, a_dout, a_gate, a_up});
  expect_ndim(op, a_gate, 2, "[T, F]");
  for (const Arg& a : {a_up, a_dout, a_dgate, a_dup}) expect_shape(op, a, gate.shape(), "[T, F]");
  expect_float(op, dev, {a_dgate, a_dup, a_dout, a_gate, a_up});
  SEQPAR_CHECK(!overlaps(dgate, dup), "{}: dgate and dup share memory", op);
  if (out != nullptr) {
    const Arg a_out{"out", *out};
    op_device(op, {a_gate, a_out});
    expect_shape(op, a_out, gate.shape(), "[T, F]");
    expect_float(op, dev, {a_out});
    expect_disjoint(op, a_out, {a_dgate, a_dup});
  }
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, swiglu_backward(dgate, dup, dout, gate, up, out));
  cpu::swiglu_backward(f32(dgate), f32(dup), f32(dout), f32(gate), f32(up), gate.numel(),
                       out != nullptr ? f32(*out) : nullptr);
}

// ---- GELU ---------------------------------------------------------------------------------

void gelu_forward(Tensor& out, const Tensor& inp, GeluKind kind) {
  const char* op = "gelu_forward";
  const Arg a_out{"out", out}, a_inp{"inp", inp};
  const Device dev = op_device(op, {a_out, a_inp});
  expect_shape(op, a_out, inp.shape(), "inp's shape");
  expect_float(op, dev, {a_out, a_inp});
  expect_same_or_disjoint(op, a_out, a_inp);
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, gelu_forward(out, inp, kind));
  cpu::gelu_forward(f32(out), f32(inp), inp.numel(), kind == GeluKind::kTanh);
}

void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, GeluKind kind) {
  const char* op = "gelu_backward";
  const Arg a_dinp{"dinp", dinp}, a_dout{"dout", dout}, a_inp{"inp", inp};
  const Device dev = op_device(op, {a_dinp, a_dout, a_inp});
  expect_shape(op, a_dout, inp.shape(), "inp's shape");
  expect_shape(op, a_dinp, inp.shape(), "inp's shape");
  expect_float(op, dev, {a_dinp, a_dout, a_inp});
  expect_same_or_disjoint(op, a_dinp, a_dout);
  expect_same_or_disjoint(op, a_dinp, a_inp);
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, gelu_backward(dinp, dout, inp, kind));
  cpu::gelu_backward(f32(dinp), f32(dout), f32(inp), inp.numel(), kind == GeluKind::kTanh);
}

// ---- matmul -----------------------------------------------------------------------------

void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta,
            const Tensor* c) {
  const char* op = "matmul";
  const Arg a_out{"out", out}, a_a{"a", a}, a_b{"b", b};
  const Device dev = op_device(op, {a_out, a_a, a_b});
  expect_ndim(op, a_a, 2, trans_a ? "[K, M]" : "[M, K]");
  expect_ndim(op, a_b, 2, trans_b ? "[N, K]" : "[K, N]");
  const int64_t M = trans_a ? a.dim(1) : a.dim(0);
  const int64_t K = trans_a ? a.dim(0) : a.dim(1);
  const int64_t Kb = trans_b ? b.dim(1) : b.dim(0);
  const int64_t N = trans_b ? b.dim(0) : b.dim(1);
  SEQPAR_CHECK(K == Kb,
               "{}: inner dims differ: op(a) is [M, K] = [{}, {}] (a {}, trans_a={}) but op(b) is [K, N] = [{}, {}] "
               "(b {}, trans_b={})",
               op, M, K, shape_str(a.shape()), trans_a, Kb, N, shape_str(b.shape()), trans_b);
  expect_shape(op, a_out, {M, N}, "[M, N]");
  expect_float(op, dev, {a_out, a_a, a_b});
  SEQPAR_CHECK(!overlaps(out, a) && !overlaps(out, b), "{}: out {} shares memory with an input (a {}, b {})", op,
               out.str(), a.str(), b.str());
  if (c != nullptr) {
    const Arg a_c{"c", *c};
    (void)op_device(op, {a_out, a_c});
    expect_shape(op, a_c, {M, N}, "[M, N]");
    expect_dtype(op, a_c, out.dtype());
    expect_same_or_disjoint(op, a_out, a_c);
  }
  ProfileScope prof(dev, __func__);
  if (prof.active())
    prof.detail(fmt::format("{}x{}x{} {}{} ->{}{}", M, N, K, trans_a ? 't' : 'n', trans_b ? 't' : 'n',
                            dtype_name(out.dtype()), beta != 0.f ? (c ? " +c" : " +=") : ""));
  SEQPAR_DISPATCH_CUDA(dev, matmul(out, a, b, trans_a, trans_b, alpha, beta, c));
  if (c != nullptr && beta != 0.f && c->raw() != out.raw()) std::memcpy(out.raw(), c->raw(), out.nbytes());
  cpu::matmul(f32(out), f32(a), f32(b), M, N, K, trans_a, trans_b, alpha, beta);
}

// ---- linear layers, with what follows the product fused --------------------------------------

namespace {

// The checks of the linear entries: x [T, K], w [N, K], y [T, N]; bias [N] in y's dtype.
void check_linear(const char* op, Device dev, const Tensor& y, const Tensor& x, const Tensor& w, const Tensor* bias) {
  expect_ndim(op, {"x", x}, 2, "[T, K]");
  expect_ndim(op, {"w", w}, 2, "[N, K]");
  SEQPAR_CHECK(w.dim(1) == x.dim(1), "{}: x is [T, K] = {} but w is [N, K] = {}: their K differ", op,
               shape_str(x.shape()), shape_str(w.shape()));
  expect_shape(op, {"y", y}, {x.dim(0), w.dim(0)}, "[T, N]");
  expect_float(op, dev, {{"y", y}, {"x", x}, {"w", w}});
  expect_disjoint(op, {"y", y}, {{"x", x}, {"w", w}});
  if (bias != nullptr) {
    const Arg a_bias{"bias", *bias};
    (void)op_device(op, {{"y", y}, a_bias});
    expect_shape(op, a_bias, {w.dim(0)}, "[N]");
    expect_dtype(op, a_bias, y.dtype());
    expect_disjoint(op, {"y", y}, {a_bias});
  }
}

// The profile's name for a linear entry's product: M x N x K (T x out x in) as matmul names its
// shapes, and what is fused into it.
std::string linear_detail(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor* bias, bool residual) {
  return fmt::format("{}x{}x{} ->{}{}{}", x.dim(0), w.dim(0), w.dim(1), dtype_name(y.dtype()), bias ? " +bias" : "",
                     residual ? " +residual" : "");
}

}  // namespace

void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual) {
  const char* op = "linear_forward";
  const Device dev = op_device(op, {{"y", y}, {"x", x}, {"w", w}});
  check_linear(op, dev, y, x, w, bias);
  if (residual != nullptr) {
    const Arg a_res{"residual", *residual};
    (void)op_device(op, {{"y", y}, a_res});
    expect_shape(op, a_res, y.shape(), "[T, N]");
    expect_dtype(op, a_res, y.dtype());
    expect_same_or_disjoint(op, {"y", y}, a_res);
  }
  ProfileScope prof(dev, __func__);
  if (prof.active()) prof.detail(linear_detail(y, x, w, bias, residual != nullptr));
  SEQPAR_DISPATCH_CUDA(dev, linear_forward(y, x, w, bias, residual));
  matmul(y, x, w, false, true, 1.f, residual != nullptr ? 1.f : 0.f, residual);
  if (bias != nullptr) bias_forward(y, *bias);
}

void linear_gelu_forward(Tensor& h, Tensor& pre, const Tensor& x, const Tensor& w, const Tensor* bias,
                         GeluKind kind) {
  const char* op = "linear_gelu_forward";
  const Device dev = op_device(op, {{"h", h}, {"pre", pre}, {"x", x}, {"w", w}});
  check_linear(op, dev, pre, x, w, bias);
  expect_shape(op, {"h", h}, pre.shape(), "pre's shape [T, N]");
  expect_dtype(op, {"h", h}, pre.dtype());
  expect_disjoint(op, {"h", h}, {{"pre", pre}, {"x", x}, {"w", w}});
  if (bias != nullptr) expect_disjoint(op, {"h", h}, {{"bias", *bias}});
  ProfileScope prof(dev, __func__);
  if (prof.active()) prof.detail(linear_detail(h, x, w, bias, false));
  SEQPAR_DISPATCH_CUDA(dev, linear_gelu_forward(h, pre, x, w, bias, kind));
  linear_forward(pre, x, w, bias);
  gelu_forward(h, pre, kind);
}

void linear_backward_gelu(Tensor& dpre, const Tensor& dy, const Tensor& w, const Tensor& pre, GeluKind kind) {
  const char* op = "linear_backward_gelu";
  const Arg a_dpre{"dpre", dpre}, a_dy{"dy", dy}, a_w{"w", w}, a_pre{"pre", pre};
  const Device dev = op_device(op, {a_dpre, a_dy, a_w, a_pre});
  expect_ndim(op, a_dy, 2, "[T, N]");
  expect_ndim(op, a_w, 2, "[N, K]");
  SEQPAR_CHECK(w.dim(0) == dy.dim(1), "{}: dy is [T, N] = {} but w is [N, K] = {}: their N differ", op,
               shape_str(dy.shape()), shape_str(w.shape()));
  expect_shape(op, a_pre, {dy.dim(0), w.dim(1)}, "[T, K]");
  expect_shape(op, a_dpre, pre.shape(), "[T, K]");
  expect_dtype(op, a_pre, dpre.dtype());
  expect_float(op, dev, {a_dpre, a_dy, a_w, a_pre});
  expect_disjoint(op, a_dpre, {a_dy, a_w, a_pre});
  ProfileScope prof(dev, __func__);
  if (prof.active()) prof.detail(fmt::format("{}x{}x{}", dy.dim(0), w.dim(1), w.dim(0)));
  SEQPAR_DISPATCH_CUDA(dev, linear_backward_gelu(dpre, dy, w, pre, kind));
  matmul(dpre, dy, w, false, false);
  gelu_backward(dpre, dpre, pre, kind);
}

// ---- cross-entropy ----------------------------------------------------------------------

void cross_entropy_forward(Tensor& losses, const Tensor& logits, const Tensor& targets, Tensor* lse) {
  const char* op = "cross_entropy_forward";
  const Arg a_loss{"losses", losses}, a_logits{"logits", logits}, a_tgt{"targets", targets};
  const Device dev = op_device(op, {a_loss, a_logits, a_tgt});
  expect_ndim(op, a_logits, 2, "[T, V]");
  const int64_t T = logits.dim(0), V = logits.dim(1);
  expect_shape(op, a_tgt, {T}, "[T]");
  expect_shape(op, a_loss, {T}, "[T]");
  expect_dtype(op, a_tgt, DType::kI32);
  expect_dtype(op, a_loss, DType::kF32);
  expect_float(op, dev, {a_logits});
  if (lse) {
    const Arg a_lse{"lse", *lse};
    (void)op_device(op, {a_loss, a_lse});
    expect_shape(op, a_lse, {T}, "[T]");
    expect_dtype(op, a_lse, DType::kF32);
    expect_disjoint(op, a_lse, {a_loss, a_logits, a_tgt});
  }
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, cross_entropy_forward(losses, logits, targets, lse));
  cpu::cross_entropy_forward(f32(losses), f32(logits), i32(targets), T, V, lse ? f32(*lse) : nullptr);
}

void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, float dloss,
                            const Tensor* lse) {
  const char* op = "cross_entropy_backward";
  const Arg a_dlogits{"dlogits", dlogits}, a_logits{"logits", logits}, a_tgt{"targets", targets};
  const Device dev = op_device(op, {a_dlogits, a_logits, a_tgt});
  expect_ndim(op, a_logits, 2, "[T, V]");
  const int64_t T = logits.dim(0), V = logits.dim(1);
  expect_shape(op, a_dlogits, {T, V}, "[T, V]");
  expect_shape(op, a_tgt, {T}, "[T]");
  expect_dtype(op, a_tgt, DType::kI32);
  expect_float(op, dev, {a_dlogits, a_logits});
  expect_same_or_disjoint(op, a_dlogits, a_logits);
  if (lse) {
    const Arg a_lse{"lse", *lse};
    (void)op_device(op, {a_dlogits, a_lse});
    expect_shape(op, a_lse, {T}, "[T]");
    expect_dtype(op, a_lse, DType::kF32);
    expect_disjoint(op, a_dlogits, {a_lse});
  }
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, cross_entropy_backward(dlogits, logits, targets, dloss, lse));
  cpu::cross_entropy_backward(f32(dlogits), f32(logits), i32(targets), dloss, T, V, lse ? f32(*lse) : nullptr);
}

// ---- elementwise ------------------------------------------------------------------------

void add_inplace(Tensor& y, const Tensor& x) {
  const char* op = "add_inplace";
  const Arg a_y{"y", y}, a_x{"x", x};
  const Device dev = op_device(op, {a_y, a_x});
  expect_shape(op, a_x, y.shape(), "y's shape");
  expect_float(op, dev, {a_y, a_x});
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, add_inplace(y, x));
  cpu::add_inplace(f32(y), f32(x), y.numel());
}

void bias_forward(Tensor& y, const Tensor& b) {
  const char* op = "bias_forward";
  const Arg a_y{"y", y}, a_b{"b", b};
  const Device dev = op_device(op, {a_y, a_b});
  SEQPAR_CHECK(y.ndim() == 2, "{}: y must be [T, N], got {}", op, y.str());
  expect_shape(op, a_b, {y.dim(1)}, "[N] of y [T, N]");
  expect_float(op, dev, {a_y, a_b});
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, bias_forward(y, b));
  cpu::bias_forward(f32(y), f32(b), y.dim(0), y.dim(1));
}

void bias_backward(Tensor& db, const Tensor& dy) {
  const char* op = "bias_backward";
  const Arg a_db{"db", db}, a_dy{"dy", dy};
  const Device dev = op_device(op, {a_db, a_dy});
  SEQPAR_CHECK(dy.ndim() == 2, "{}: dy must be [T, N], got {}", op, dy.str());
  expect_shape(op, a_db, {dy.dim(1)}, "[N] of dy [T, N]");
  SEQPAR_CHECK(db.dtype() == DType::kF32, "{}: db must be f32 (gradients are), got {}", op, db.str());
  expect_float(op, dev, {a_db, a_dy});
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, bias_backward(db, dy));
  cpu::bias_backward(f32(db), f32(dy), dy.dim(0), dy.dim(1));
}

void cast(Tensor& out, const Tensor& in) {
  const char* op = "cast";
  const Arg a_out{"out", out}, a_in{"in", in};
  const Device dev = op_device(op, {a_out, a_in});
  expect_shape(op, a_in, out.shape(), "out's shape");
  for (const Arg& a : {a_out, a_in})
    SEQPAR_CHECK(is_float_dtype(a.t.dtype()), "{}: {} is {}, expected f32, bf16 or f16", op, a.name, a.t.str());
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, cast(out, in));
  if (out.dtype() == in.dtype()) {
    out.copy_from(in);
    return;
  }
  // Through f32 (exact from bf16 and f16), rounded once to the narrow type.
  const int64_t n = in.numel();
  auto load = [&](int64_t i) {
    if (in.dtype() == DType::kBF16) return bf16_to_f32(in.data<bf16>()[i]);
    if (in.dtype() == DType::kF16) return f16_to_f32(in.data<f16>()[i]);
    return in.data<float>()[i];
  };
  if (out.dtype() == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) out.data<bf16>()[i] = f32_to_bf16(load(i));
  } else if (out.dtype() == DType::kF16) {
    for (int64_t i = 0; i < n; ++i) out.data<f16>()[i] = f32_to_f16(load(i));
  } else {
    for (int64_t i = 0; i < n; ++i) out.data<float>()[i] = load(i);
  }
}

void scale_inplace(Tensor& y, float s) {
  const char* op = "scale_inplace";
  const Arg a_y{"y", y};
  const Device dev = op_device(op, {a_y});
  expect_float(op, dev, {a_y});
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, scale_inplace(y, s));
  cpu::scale_inplace(f32(y), s, y.numel());
}

void normal_fill(Tensor& y, uint64_t key, float std, int64_t offset) {
  const char* op = "normal_fill";
  const Arg a_y{"y", y};
  const Device dev = op_device(op, {a_y});
  // Also bf16 and f16 on the CPU (a GPU run's initial weights wait on the host in its compute dtype).
  SEQPAR_CHECK(is_float_dtype(y.dtype()), "normal_fill: y is {} (f32, bf16 or f16)", dtype_name(y.dtype()));
  SEQPAR_CHECK(offset >= 0 && offset % 2 == 0, "normal_fill: offset={} (even, >= 0: a pair is one draw)", offset);
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, normal_fill(y, key, std, offset));
  const int64_t n = y.numel(), j0 = offset / 2;
  float* f = y.dtype() == DType::kF32 ? y.data<float>() : nullptr;
  bf16* h = y.dtype() == DType::kBF16 ? y.data<bf16>() : nullptr;
  f16* q = y.dtype() == DType::kF16 ? y.data<f16>() : nullptr;
  auto put = [&](int64_t i, float x) {
    if (f)
      f[i] = x;
    else if (h)
      h[i] = f32_to_bf16(x);
    else
      q[i] = f32_to_f16(x);
  };
  for (int64_t i = 0; i < n; i += 2) {
    float a, b;
    normal_pair(key, j0 + i / 2, std, a, b);
    put(i, a);
    if (i + 1 < n) put(i + 1, b);
  }
}

void check_device_errors(Device device) {
#if defined(SEQPAR_WITH_CUDA)
  if (device.is_cuda()) cuda_ops::check_device_errors(device);
#else
  (void)device;
#endif
}

double sum_squares(const Tensor& x) {
  const char* op = "sum_squares";
  const Arg a_x{"x", x};
  const Device dev = op_device(op, {a_x});
  expect_float(op, dev, {a_x});
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, sum_squares(x));
  return cpu::sum_squares(f32(x), x.numel());
}

// ---- AdamW ------------------------------------------------------------------------------

void adamw_step(Tensor& param, Tensor& m, Tensor& v, const Tensor& grad, const AdamWConfig& cfg, int64_t step,
                float grad_scale) {
  const char* op = "adamw_step";
  const Arg a_p{"param", param}, a_m{"m", m}, a_v{"v", v}, a_g{"grad", grad};
  const Device dev = op_device(op, {a_p, a_m, a_v, a_g});
  for (const Arg& a : {a_m, a_v, a_g}) expect_shape(op, a, param.shape(), "param's shape");
  for (const Arg& a : {a_p, a_m, a_v}) expect_dtype(op, a, DType::kF32);
  SEQPAR_CHECK(is_float_dtype(grad.dtype()), "{}: grad is {}, expected f32, bf16 or f16", op, grad.str());
  // Validates the hyperparameters and step on every device, before any memory is touched.
  const cpu::AdamWScalars s =
      cpu::adamw_scalars(cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, step, grad_scale);
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, adamw_step(param, m, v, grad, cfg, step, grad_scale));
  if (grad.dtype() == DType::kBF16) {
    cpu::adamw_step(f32(param), f32(m), f32(v), grad.data<bf16>(), param.numel(), s);
  } else if (grad.dtype() == DType::kF16) {
    cpu::adamw_step(f32(param), f32(m), f32(v), grad.data<f16>(), param.numel(), s);
  } else {
    cpu::adamw_step(f32(param), f32(m), f32(v), f32(grad), param.numel(), s);
  }
}

void adamw_step_rounded(Tensor& param, Tensor& m, Tensor& v, const Tensor& grad, Tensor& rounded,
                        const AdamWConfig& cfg, int64_t step, float grad_scale) {
  const char* op = "adamw_step_rounded";
  const Arg a_p{"param", param}, a_g{"grad", grad}, a_r{"rounded", rounded};
  const Device dev = op_device(op, {a_p, a_g, a_r});
  expect_shape(op, a_r, param.shape(), "param's shape");
  expect_dtype(op, a_g, DType::kF32);
  SEQPAR_CHECK(is_float_dtype(rounded.dtype()), "{}: rounded is {}, expected f32, bf16 or f16", op, rounded.str());
  if (rounded.dtype() == DType::kF32) {  // nothing to round: the composition
    adamw_step(param, m, v, grad, cfg, step, grad_scale);
    cast(rounded, param);
    return;
  }
  const Arg a_m{"m", m}, a_v{"v", v};
  for (const Arg& a : {a_m, a_v, a_g}) expect_shape(op, a, param.shape(), "param's shape");
  for (const Arg& a : {a_p, a_m, a_v}) expect_dtype(op, a, DType::kF32);
  ProfileScope prof(dev, __func__);
  SEQPAR_DISPATCH_CUDA(dev, adamw_step_rounded(param, m, v, grad, rounded, cfg, step, grad_scale));
  const cpu::AdamWScalars s =
      cpu::adamw_scalars(cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, step, grad_scale);
  if (rounded.dtype() == DType::kBF16) {
    cpu::adamw_step_rounded(f32(param), f32(m), f32(v), f32(grad), rounded.data<bf16>(), param.numel(), s);
  } else {
    cpu::adamw_step_rounded(f32(param), f32(m), f32(v), f32(grad), rounded.data<f16>(), param.numel(), s);
  }
}

float clip_coefficient(double total_norm, double max_norm) {
  if (max_norm <= 0.0) return 1.f;
  SEQPAR_CHECK(!(total_norm < 0.0), "clip_coefficient: total_norm={} must be >= 0", total_norm);
  const double coef = max_norm / (total_norm + 1e-6);
  // A NaN norm (a NaN or inf gradient came in earlier) stays NaN, as in torch, so the step
  // visibly poisons the parameters instead of being silently left unclipped. An inf norm gives 0.
  if (std::isnan(coef)) return std::numeric_limits<float>::quiet_NaN();
  return static_cast<float>(std::min(coef, 1.0));
}

}  // namespace seqpar
