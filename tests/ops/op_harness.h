// One harness for every op of kernels/ops.h and for attention, on every backend (the idea of
// ggml's test-backend-ops): each case is described ONCE here (shapes, a seeded random input
// generator that never yields zeros, a double-precision reference), and runs on
//   - the CPU f32 path (tests/ops/test_ops.cpp, in the CPU suite), checked against the f64
//     reference, plus finite differences of the f64 reference for the small cases with a backward;
//   - every CUDA path that supports it (tests/cuda/test_cuda_op_harness.cpp): the ops in bf16, f16
//     and f32 storage; attention through the mma.sync kernels, the Hopper wgmma kernels and cuDNN,
//     chosen through AttentionPolicy, each in bf16 and f16. A path that cannot run a case is reported as skipped, with
//     the reason (ggml's supports_op).
// Outputs are poisoned with NaN bytes before every call (an unwritten element fails), and the
// tolerance is flash-attention's rule: a path's error against the f64 reference must stay within
// 2x the error of a same-dtype computation against it (plus a small floor, for results the
// same-dtype computation gets exactly):
//   ops:        the same-dtype computation is the CPU f32 path on inputs stored as the backend
//               stores them, its outputs rounded the same way (for the CPU path itself: the f64
//               reference rounded to f32);
//   attention:  the f64 reference with the path's 16-bit rounding (bf16 or f16) where the GPU
//               kernels round (P and dS before their matmuls, the 16-bit outputs), since the kernels
//               multiply P and dS in that type.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/ops.h"

namespace seqpar::optest {

// ---- values -----------------------------------------------------------------------------------

// Uniform in [lo, hi), deterministic from seed, never exactly 0 (a zero hides a wrong factor).
std::vector<float> random_values(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f);
// The values as `dt` holds them (bf16, f16: rounded to nearest even), widened back to f32.
std::vector<float> stored(const std::vector<float>& v, DType dt);
float round_bf16(double x);
// x rounded to `dt` (bf16 or f16; f32 and others: to f32) and widened back.
float round_to(double x, DType dt);
std::vector<double> to_double(const std::vector<float>& v);
// A tensor on `device` whose every byte is 0xFF: NaN in f32, bf16 and f16.
Tensor poisoned(const Shape& shape, DType dt, Device device);
// A tensor of `dt` on `device` holding `v` (rounded when dt is bf16 or f16).
Tensor make_tensor(const Shape& shape, const std::vector<float>& v, DType dt, Device device);
// A tensor's values as doubles (a device tensor is copied back; the device is synchronised).
std::vector<double> values_of(const Tensor& t);

// ---- the rule ---------------------------------------------------------------------------------

struct ErrStats {
  double max_abs = 0, rel_l2 = 0;
  int64_t first_bad = -1;  // the first non-finite element
};
ErrStats error_vs(const std::vector<double>& got, const std::vector<double>& ref);

struct Rule {
  double floor_rel = 1e-5;  // added to 2x the baseline's error (relative L2; max abs: x max |ref|)
  bool max_abs = true;      // also the max-abs form of the rule, not only relative L2
};
// The 2x rule: `got` (the path) against `ref` (f64), within 2x `same_dtype`'s error plus the
// floor. Non-finite elements in `got` fail (unwritten poison or overflow).
void expect_within_2x(const std::string& what, const std::vector<double>& got, const std::vector<double>& same_dtype,
                      const std::vector<double>& ref, const Rule& rule = {});

// ---- where a case runs ------------------------------------------------------------------------

struct Backend {
  std::string name;  // "cpu-f32", "cuda-bf16", "cuda-flash-mma", ...
  Device device = Device::cpu();
  DType compute = DType::kF32;  // storage of the ops' float tensors (attention: of q, k, v, dout)
  AttentionPolicy attention;    // the attention paths' policy
  // Why this backend cannot run on this machine (e.g. the wgmma kernels without an sm_90 device,
  // cuDNN not built in); "" when it can. Its cases are reported as skipped with this reason.
  std::string unavailable;
};
Backend cpu_backend();

// ---- op cases ---------------------------------------------------------------------------------

enum class Role { kIn, kOut, kInOut };  // kOut starts poisoned; kInOut starts from its values
// How an operand is stored on a backend: like the compute dtype, always f32, always bf16 (f32 on
// the CPU, which computes in f32), or i32 indices.
enum class Store { kCompute, kF32, kBF16, kI32 };

struct Operand {
  std::string name;
  Shape shape;
  Role role = Role::kIn;
  Store store = Store::kCompute;
  std::vector<float> values;  // kIn / kInOut floats
  std::vector<int32_t> ints;  // kI32
  bool on_host = false;       // kept in host memory on every backend (e.g. attention metadata)
};

using Tensors = std::map<std::string, Tensor>;
using Values = std::map<std::string, std::vector<double>>;  // by operand (or scalar result) name

struct OpCase {
  std::string name;
  std::vector<Operand> operands;
  // The ops.h calls on the backend's tensors; scalar results (sum_squares, clip_coefficient) go
  // into `scalars` under their names.
  std::function<void(Tensors& t, std::map<std::string, double>& scalars, const Backend& b)> run;
  // The same in double (kernels/cpu templates or the formula): `v` holds every operand's initial
  // value; the function leaves each output's (and scalar result's) final value there.
  std::function<void(Values& v)> reference;
  std::vector<std::string> checked;  // outputs and scalar results compared
  // "" when the backend runs the case, else why not.
  std::function<std::string(const Backend& b)> unsupported;
  Rule rule;
  // Finite-difference checks of the reference (CPU, small cases): d(sum(upstream0 * output)) /
  // d(wrt0) == grad, with upstream0 and wrt0 the initial values and grad the final value of
  // `grad` (minus its initial value when it accumulates).
  struct Fd {
    std::string wrt, output, upstream, grad;
    bool accumulates = false;
  };
  std::vector<Fd> fd;
};

// Every case of every op of kernels/ops.h: embedding, RMSNorm, LayerNorm, RoPE, SwiGLU, GELU (erf,
// tanh), matmul (transposes, alpha/beta, f32 out), cross-entropy, add/scale, sum of squares, cast,
// AdamW, clip coefficient.
std::vector<OpCase> op_cases();

DType dtype_on(const Operand& o, const Backend& b);
// Runs `c` on `b` with its outputs poisoned; returns every operand's final value and the scalars.
Values run_op(const OpCase& c, const Backend& b);
// The case on `b`, every checked output against the reference by the rule. Returns false (and
// checks nothing) when the backend does not support the case, with the reason in *skipped.
bool check_op(const OpCase& c, const Backend& b, std::string* skipped);
// The finite-difference checks of the case's reference (c.fd); false when it has none.
bool check_op_finite_differences(const OpCase& c);

// ---- attention ----------------------------------------------------------------------------------

// One attention problem (attention.h's masking rule on explicit per-token metadata).
struct AttnCase {
  std::string name;
  int64_t Tq = 0, Tk = 0, H = 0, Hkv = 0, D = 0;
  std::vector<int32_t> qseg, qpos, kseg, kpos;
  bool causal = true;
  int32_t window = 0;                     // sliding window (AttnArgs::window); 0 = none
  GradMode mode = GradMode::kAccumulate;  // kAccumulate: gradients start random; kWrite: NaN
  bool out_f32 = false;                   // out dtype on a bf16 path (the CPU is f32 throughout)
  bool grad_f32 = false;                  // dq/dk/dv dtype on a bf16 path
  bool meta_on_device = false;            // CUDA paths get device metadata
  int64_t expect_empty_rows = -1;         // (token, head) rows that see no key, when >= 0
  uint64_t seed = 1;
  float scale() const;
  bool visible(int64_t i, int64_t j) const;
  int64_t work() const { return Tq * Tk * H * D; }
};

// One document of T tokens, queries and keys the same tokens.
AttnCase attn_one_doc(const std::string& name, int64_t T, int64_t H, int64_t Hkv, int64_t D, bool causal);
// Packed documents (cu_seqlens), each attending within itself.
AttnCase attn_packed(const std::string& name, const std::vector<int32_t>& cu, int64_t H, int64_t Hkv, int64_t D,
                     bool causal);

// Every attention case (causal, varlen, GQA/MQA, ring blocks with Tq != Tk and offset positions,
// rows and keys that see nothing, both GradModes, f32 outputs and gradients).
std::vector<AttnCase> attn_cases();

struct AttnInputs {
  std::vector<float> q, k, v, dout;  // bf16-representable values
  std::vector<float> dq0, dk0, dv0;  // kAccumulate's starting gradients (zeros for kWrite)
};
AttnInputs attn_inputs(const AttnCase& c);

// The f64 reference: out, lse, and the gradients as stored (start + contribution). With `lowp`,
// the bf16 computation: P rounded to bf16 before P V and dV, dS rounded to bf16, and the bf16
// outputs rounded (out unless out_f32, the gradient totals unless grad_f32).
struct AttnRef {
  std::vector<double> out, lse, dq, dk, dv;
};
AttnRef attn_reference(const AttnCase& c, const AttnInputs& in, bool lowp);
// The same with the 16-bit type the kernels round to: kBF16 (= lowp), kF16 (cuDNN's fp16 path), kF32 (none).
AttnRef attn_reference(const AttnCase& c, const AttnInputs& in, DType lowp_dt);
// The reference on raw double operands and metadata (the CPU attention tests' naive reference).
AttnRef attn_reference(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                       const TokenMeta& q_meta, const TokenMeta& k_meta, int64_t H, int64_t Hkv, int64_t D, bool causal,
                       double scale, int32_t window = 0);
// The same with the gradients of loss = <out, dout> (dq, dk, dv from zero, f64 throughout).
AttnRef attn_reference(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                       const std::vector<double>& dout, const TokenMeta& q_meta, const TokenMeta& k_meta, int64_t H,
                       int64_t Hkv, int64_t D, bool causal, double scale);

struct AttnResult {
  std::vector<double> out, lse, dq, dk, dv;
  AttnPath fwd_path = AttnPath::kNone, bwd_path = AttnPath::kNone;
};
// attn_forward then attn_backward on `b` (its device, dtype and policy), outputs NaN-poisoned
// (and the gradients too under kWrite).
AttnResult run_attention(const AttnCase& c, const AttnInputs& in, const Backend& b);
// "" when `b` runs the case, else why not (the CUDA paths' rules: head dims, cuDNN's layouts, ...).
std::string attn_unsupported(const AttnCase& c, const Backend& b);
// A case's inputs and its two references, computed once for all the backends that run it (the
// f64 reference of the long cases takes seconds).
struct AttnExpect {
  AttnInputs in;
  AttnRef exact, lowp;
  AttnRef lowp16;  // f16's rounding: empty until a caller fills it (check_attention computes it when needed)
};
AttnExpect attn_expect(const AttnCase& c);
// Runs `c` on `b` and checks: out, dq, dk, dv by the 2x rule against the bf16 reference (f32 paths:
// against the reference rounded to f32); lse within 1e-4 (+1e-5 relative), -inf rows exactly;
// rows that see no key: out 0, dq = its start; keys no query sees: dk, dv = their start; the
// path the calls report (AttnArgs::ran). Returns false, with *skipped set, when unsupported.
// `expect`: attn_expect(c), when the caller has it already.
bool check_attention(const AttnCase& c, const Backend& b, std::string* skipped, AttnResult* result = nullptr,
                     const AttnExpect* expect = nullptr);
// Finite differences of the f64 reference's backward (loss = sum(out * w)) for a small case.
void check_attention_finite_differences(const AttnCase& c);

// lse against an exact one: -inf rows exactly, finite rows within tol + 1e-5 relative.
void expect_lse(const std::string& what, const std::vector<double>& got, const std::vector<double>& want, double tol);
double rel_l2(const std::vector<double>& got, const std::vector<double>& ref);

}  // namespace seqpar::optest
