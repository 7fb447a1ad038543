// Every op of kernels/ops.h, described once (op_harness.h): shapes, seeded random inputs, the f64
// reference through the CPU kernels' templates (kernels/cpu, instantiated for double) or the
// formula, and the finite-difference checks of the small cases. Shapes cover the CUDA kernels'
// vectorised and scalar paths (odd widths, tails).
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "ops/op_harness.h"

namespace seqpar::optest {

namespace {

std::string dims(const char* op, std::initializer_list<std::pair<const char*, int64_t>> d) {
  std::string s = op;
  for (const auto& [name, value] : d) s += std::string(" ") + name + "=" + std::to_string(value);
  return s;
}

const char* store_name(Store s) {
  switch (s) {
    case Store::kCompute:
      return "compute";
    case Store::kF32:
      return "f32";
    case Store::kBF16:
      return "bf16";
    case Store::kI32:
      return "i32";
  }
  return "?";
}

std::vector<int32_t> random_ints(size_t n, uint64_t seed, int32_t lo, int32_t hi) {  // [lo, hi)
  const std::vector<float> u = random_values(n, seed, 0.f, 1.f);
  std::vector<int32_t> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = std::min(hi - 1, lo + static_cast<int32_t>(u[i] * static_cast<float>(hi - lo)));
  return out;
}

Operand in(const std::string& name, const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f,
           Store store = Store::kCompute) {
  return {name, shape, Role::kIn, store, random_values(static_cast<size_t>(shape_numel(shape)), seed, lo, hi), {}};
}
Operand inout(const std::string& name, const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f,
              Store store = Store::kCompute) {
  Operand o = in(name, shape, seed, lo, hi, store);
  o.role = Role::kInOut;
  return o;
}
Operand out(const std::string& name, const Shape& shape, Store store = Store::kCompute) {
  return {name, shape, Role::kOut, store, {}, {}};
}
Operand ints(const std::string& name, std::vector<int32_t> v) {
  return {name, {static_cast<int64_t>(v.size())}, Role::kIn, Store::kI32, {}, std::move(v)};
}

std::vector<int32_t> as_ints(const std::vector<double>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

// ---- embedding ----------------------------------------------------------------------------------

void embedding_cases(std::vector<OpCase>& cases) {
  for (int64_t C : {64, 36}) {  // vectorised and scalar paths
    const int64_t T = 300, V = 500;
    OpCase c;
    c.name = dims("embedding_forward", {{"T", T}, {"C", C}, {"V", V}});
    c.operands = {ints("ids", random_ints(T, 2, 0, V)), in("wte", {V, C}, 1), out("out", {T, C})};
    c.run = [](Tensors& t, auto&, const Backend&) { embedding_forward(t.at("out"), t.at("ids"), t.at("wte")); };
    c.reference = [T, C, V](Values& v) {
      const std::vector<int32_t> ids = as_ints(v["ids"]);
      cpu::embedding_forward<double>(v["out"].data(), ids.data(), v["wte"].data(), T, C, V);
    };
    c.checked = {"out"};
    cases.push_back(c);
  }
  // dwte += dout at ids. An f32 accumulator (the training setting) takes many repeated ids; a bf16
  // one distinct ids (it rounds once per token).
  struct Variant {
    Store dout, dwte;
    bool repeats;
  };
  for (const Variant& var :
       {Variant{Store::kCompute, Store::kF32, true}, Variant{Store::kCompute, Store::kCompute, false},
        Variant{Store::kF32, Store::kBF16, false}}) {
    for (int64_t C : {64, 36}) {
      const int64_t T = 400, V = 500;
      std::vector<int32_t> ids = random_ints(T, 5, 0, var.repeats ? 40 : V);
      if (!var.repeats) std::iota(ids.begin(), ids.end(), 50);
      OpCase c;
      c.name = dims("embedding_backward", {{"T", T}, {"C", C}, {"V", V}}) + " dout " + store_name(var.dout) + " dwte " +
               store_name(var.dwte) + (var.repeats ? " repeated ids" : " distinct ids");
      c.operands = {ints("ids", ids), in("dout", {T, C}, 3, -1.f, 1.f, var.dout),
                    inout("dwte", {V, C}, 4, -1.f, 1.f, var.dwte)};
      c.run = [](Tensors& t, auto&, const Backend&) { embedding_backward(t.at("dwte"), t.at("dout"), t.at("ids")); };
      c.reference = [T, C, V](Values& v) {
        const std::vector<int32_t> ids = as_ints(v["ids"]);
        cpu::embedding_backward<double>(v["dwte"].data(), v["dout"].data(), ids.data(), T, C, V);
      };
      c.checked = {"dwte"};
      cases.push_back(c);
    }
  }
}

// ---- RMSNorm ------------------------------------------------------------------------------------

OpCase rmsnorm_case(int64_t T, int64_t C, Store weight, uint64_t seed) {
  const float eps = 1e-5f;
  OpCase c;
  c.name = dims("rmsnorm forward+backward", {{"T", T}, {"C", C}}) + " weight " + store_name(weight);
  c.operands = {in("x", {T, C}, seed, -2.f, 2.f),
                in("w", {C}, seed + 1, 0.5f, 1.5f, weight),
                in("dy", {T, C}, seed + 2),
                out("y", {T, C}),
                out("rstd", {T}, Store::kF32),
                out("dx", {T, C}),
                inout("dw", {C}, seed + 3, -1.f, 1.f, Store::kF32),
                inout("dx_acc", {T, C}, seed + 4),  // a residual gradient the backward adds into
                inout("dw2", {C}, seed + 5, -1.f, 1.f, Store::kF32)};
  c.run = [eps](Tensors& t, auto&, const Backend&) {
    rmsnorm_forward(t.at("y"), t.at("rstd"), t.at("x"), t.at("w"), eps);
    rmsnorm_backward(t.at("dx"), t.at("dw"), t.at("dy"), t.at("x"), t.at("w"), t.at("rstd"));
    rmsnorm_backward(t.at("dx_acc"), t.at("dw2"), t.at("dy"), t.at("x"), t.at("w"), t.at("rstd"), /*accumulate=*/true);
  };
  c.reference = [T, C, eps](Values& v) {
    cpu::rmsnorm_forward<double>(v["y"].data(), v["rstd"].data(), v["x"].data(), v["w"].data(), T, C, eps);
    cpu::rmsnorm_backward<double>(v["dx"].data(), v["dw"].data(), v["dy"].data(), v["x"].data(), v["w"].data(),
                                  v["rstd"].data(), T, C);
    cpu::rmsnorm_backward<double>(v["dx_acc"].data(), v["dw2"].data(), v["dy"].data(), v["x"].data(), v["w"].data(),
                                  v["rstd"].data(), T, C, /*accumulate=*/true);
  };
  c.checked = {"y", "rstd", "dx", "dw", "dx_acc", "dw2"};
  c.fd = {{"x", "y", "dy", "dx", false}, {"w", "y", "dy", "dw", true}};
  return c;
}

void rmsnorm_cases(std::vector<OpCase>& cases) {
  // C=256 vectorised; C=100 scalar; T=1200 > the backward grid, so blocks take several rows.
  for (Store w : {Store::kCompute, Store::kF32, Store::kBF16}) {
    OpCase big = rmsnorm_case(1200, 256, w, 10), small = rmsnorm_case(37, 100, w, 10);
    big.fd.clear();
    small.fd.clear();
    cases.push_back(big);
    cases.push_back(small);
  }
  cases.push_back(rmsnorm_case(3, 7, Store::kCompute, 14));  // small: finite differences
  // Short vectorised rows (at most 32 packs of 8) take the CUDA kernels that put a group of lanes on
  // a row: every group width, rows that end inside a warp, and (T = 40000 at C = 128, Qwen3's per-head
  // norm) more rows than the backward's grid has slots, so each slot takes several.
  for (auto [T, C] : {std::pair<int64_t, int64_t>{40000, 128}, {77, 8}, {50, 16}, {333, 24}, {999, 64}, {61, 200},
                      {45, 256}}) {
    OpCase row = rmsnorm_case(T, C, Store::kCompute, 20 + C);
    row.fd.clear();
    cases.push_back(row);
  }
}

// ---- LayerNorm ----------------------------------------------------------------------------------

// Forward, backward, and the backward again in place on a copy of dout (dinp = dout) into a second
// pair of parameter gradients. x is drawn off-centre (mean ~ 0.5), so a kernel that skips the
// mean (or takes the variance as E[x^2]) fails.
OpCase layernorm_case(int64_t T, int64_t C, Store weight, uint64_t seed) {
  const float eps = 1e-5f;
  OpCase c;
  c.name = dims("layernorm forward+backward", {{"T", T}, {"C", C}}) + " weight/bias " + store_name(weight);
  c.operands = {in("x", {T, C}, seed, -1.5f, 2.5f),
                in("w", {C}, seed + 1, 0.5f, 1.5f, weight),
                in("b", {C}, seed + 2, -0.5f, 0.5f, weight),
                in("dy", {T, C}, seed + 3),
                out("y", {T, C}),
                out("mean", {T}, Store::kF32),
                out("rstd", {T}, Store::kF32),
                out("dx", {T, C}),
                inout("dw", {C}, seed + 4, -1.f, 1.f, Store::kF32),
                inout("db", {C}, seed + 5, -1.f, 1.f, Store::kF32),
                inout("dx_in_place", {T, C}, seed + 3),  // the values of dy
                inout("dw2", {C}, seed + 6, -1.f, 1.f, Store::kF32),
                inout("db2", {C}, seed + 7, -1.f, 1.f, Store::kF32),
                inout("dx_acc", {T, C}, seed + 8),  // a residual gradient the backward adds into
                inout("dw3", {C}, seed + 9, -1.f, 1.f, Store::kF32),
                inout("db3", {C}, seed + 10, -1.f, 1.f, Store::kF32)};
  c.run = [eps](Tensors& t, auto&, const Backend&) {
    layernorm_forward(t.at("y"), t.at("mean"), t.at("rstd"), t.at("x"), t.at("w"), t.at("b"), eps);
    layernorm_backward(t.at("dx"), t.at("dw"), t.at("db"), t.at("dy"), t.at("x"), t.at("w"), t.at("mean"),
                       t.at("rstd"));
    Tensor& g = t.at("dx_in_place");
    layernorm_backward(g, t.at("dw2"), t.at("db2"), g, t.at("x"), t.at("w"), t.at("mean"), t.at("rstd"));
    layernorm_backward(t.at("dx_acc"), t.at("dw3"), t.at("db3"), t.at("dy"), t.at("x"), t.at("w"), t.at("mean"),
                       t.at("rstd"), /*accumulate=*/true);
  };
  c.reference = [T, C, eps](Values& v) {
    cpu::layernorm_forward<double>(v["y"].data(), v["mean"].data(), v["rstd"].data(), v["x"].data(), v["w"].data(),
                                   v["b"].data(), T, C, eps);
    cpu::layernorm_backward<double>(v["dx"].data(), v["dw"].data(), v["db"].data(), v["dy"].data(), v["x"].data(),
                                    v["w"].data(), v["mean"].data(), v["rstd"].data(), T, C);
    double* g = v["dx_in_place"].data();
    cpu::layernorm_backward<double>(g, v["dw2"].data(), v["db2"].data(), g, v["x"].data(), v["w"].data(),
                                    v["mean"].data(), v["rstd"].data(), T, C);
    cpu::layernorm_backward<double>(v["dx_acc"].data(), v["dw3"].data(), v["db3"].data(), v["dy"].data(),
                                    v["x"].data(), v["w"].data(), v["mean"].data(), v["rstd"].data(), T, C,
                                    /*accumulate=*/true);
  };
  c.checked = {"y", "mean", "rstd", "dx", "dw", "db", "dx_in_place", "dw2", "db2", "dx_acc", "dw3", "db3"};
  c.fd = {{"x", "y", "dy", "dx", false}, {"w", "y", "dy", "dw", true}, {"b", "y", "dy", "db", true}};
  return c;
}

void layernorm_cases(std::vector<OpCase>& cases) {
  // C=256 vectorised; C=100 scalar; T=1200 > the backward grid, so blocks take several rows.
  for (Store w : {Store::kCompute, Store::kF32, Store::kBF16}) {
    for (const auto& [T, C] : {std::pair<int64_t, int64_t>{1200, 256}, {37, 100}}) {
      OpCase c = layernorm_case(T, C, w, 70);
      c.fd.clear();
      cases.push_back(c);
    }
  }
  // C=1600 (GPT-2 XL): several packs per thread; C=8192: the backward's shared-memory partials
  // (2C floats) pass the 48 KiB default and take the opt-in.
  for (const auto& [T, C] : {std::pair<int64_t, int64_t>{64, 1600}, {24, 8192}}) {
    OpCase wide = layernorm_case(T, C, Store::kCompute, 71);
    wide.fd.clear();
    cases.push_back(wide);
  }
  cases.push_back(layernorm_case(3, 7, Store::kCompute, 72));  // small: finite differences
}

// ---- RoPE ---------------------------------------------------------------------------------------

void rope_cases(std::vector<OpCase>& cases) {
  struct Shape3s {
    int64_t T, H, D;
    bool fd;
    float scale;  // HF's attention_scaling on cos and sin (yarn, longrope); 1 = the plain rotation
  };
  for (const Shape3s& s :
       {Shape3s{50, 6, 64, false, 1.0f}, Shape3s{50, 3, 20, false, 1.0f}, Shape3s{3, 2, 8, true, 1.0f},
        Shape3s{50, 6, 64, false, 1.1386294f}, Shape3s{50, 3, 20, false, 1.4142135f}, Shape3s{3, 2, 8, true, 0.8f}}) {
    const auto [T, H, D, fd, scale] = s;  // 64: vectorised; 20: scalar (D/2 = 10)
    std::vector<float> inv_freq(static_cast<size_t>(D / 2));
    for (int64_t i = 0; i < D / 2; ++i)
      inv_freq[i] = static_cast<float>(1.0 / std::pow(500000.0, 2.0 * static_cast<double>(i) / static_cast<double>(D)));
    OpCase c;
    c.name = dims("rope forward, backward", {{"T", T}, {"H", H}, {"D", D}}) +
             (scale == 1.0f ? std::string() : " scale " + std::to_string(scale));
    Operand freq{"inv_freq", {D / 2}, Role::kIn, Store::kF32, inv_freq, {}};
    // long-context positions: large angles
    c.operands = {ints("pos", random_ints(T, 17, 0, 100000)), freq, inout("x", {T, H, D}, 18),
                  inout("g", {T, H, D}, 19)};
    c.run = [scale](Tensors& t, auto&, const Backend&) {
      rope_forward(t.at("x"), t.at("pos"), t.at("inv_freq"), scale);
      rope_backward(t.at("g"), t.at("pos"), t.at("inv_freq"), scale);
    };
    c.reference = [T, H, D, scale](Values& v) {
      const std::vector<int32_t> pos = as_ints(v["pos"]);
      const std::vector<float> f(v["inv_freq"].begin(), v["inv_freq"].end());
      cpu::rope_forward<double>(v["x"].data(), pos.data(), f.data(), T, H, D, scale);
      cpu::rope_backward<double>(v["g"].data(), pos.data(), f.data(), T, H, D, scale);
    };
    c.checked = {"x", "g"};
    // rope_backward is the transpose of rope_forward: d(sum(g0 * rope(x))) / dx = rope_backward(g0).
    if (fd) c.fd = {{"x", "x", "g", "g", false}};
    cases.push_back(c);
  }
}

// ---- Qwen3's head norm, then RoPE ----------------------------------------------------------------

// The forward, the backward, and the backward again in place on a copy of dout (dx = dout) into a second dweight;
// the reference is the two ops' composition (rmsnorm over the [T * H, D] rows, then rope).
OpCase head_norm_rope_case(int64_t T, int64_t H, int64_t D, float scale, Store weight, uint64_t seed) {
  const float eps = 1e-6f;
  std::vector<float> inv_freq(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i)
    inv_freq[i] = static_cast<float>(1.0 / std::pow(1000000.0, 2.0 * static_cast<double>(i) / static_cast<double>(D)));
  OpCase c;
  c.name = dims("head_norm_rope forward+backward", {{"T", T}, {"H", H}, {"D", D}}) + " weight " +
           store_name(weight) + (scale == 1.0f ? std::string() : " scale " + std::to_string(scale));
  c.operands = {ints("pos", random_ints(T, seed, 0, 100000)),  // long-context positions: large angles
                Operand{"inv_freq", {D / 2}, Role::kIn, Store::kF32, inv_freq, {}},
                in("x", {T, H, D}, seed + 1, -2.f, 2.f),
                in("w", {D}, seed + 2, 0.5f, 1.5f, weight),
                in("dy", {T, H, D}, seed + 3),
                out("y", {T, H, D}),
                out("rstd", {T * H}, Store::kF32),
                out("dx", {T, H, D}),
                inout("dw", {D}, seed + 4, -1.f, 1.f, Store::kF32),
                inout("dx_in_place", {T, H, D}, seed + 3),  // the values of dy
                inout("dw2", {D}, seed + 5, -1.f, 1.f, Store::kF32)};
  c.run = [eps, scale](Tensors& t, auto&, const Backend&) {
    head_norm_rope_forward(t.at("y"), t.at("rstd"), t.at("x"), t.at("w"), eps, t.at("pos"), t.at("inv_freq"), scale);
    head_norm_rope_backward(t.at("dx"), t.at("dw"), t.at("dy"), t.at("x"), t.at("w"), t.at("rstd"), t.at("pos"),
                            t.at("inv_freq"), scale);
    Tensor& g = t.at("dx_in_place");
    head_norm_rope_backward(g, t.at("dw2"), g, t.at("x"), t.at("w"), t.at("rstd"), t.at("pos"), t.at("inv_freq"),
                            scale);
  };
  c.reference = [T, H, D, eps, scale](Values& v) {
    const std::vector<int32_t> pos = as_ints(v["pos"]);
    const std::vector<float> f(v["inv_freq"].begin(), v["inv_freq"].end());
    cpu::rmsnorm_forward<double>(v["y"].data(), v["rstd"].data(), v["x"].data(), v["w"].data(), T * H, D, eps);
    cpu::rope_forward<double>(v["y"].data(), pos.data(), f.data(), T, H, D, scale);
    for (const char* name : {"dx", "dx_in_place"}) {
      std::vector<double>& g = v[name];
      g = v["dy"];
      cpu::rope_backward<double>(g.data(), pos.data(), f.data(), T, H, D, scale);
      const char* dw = std::string(name) == "dx" ? "dw" : "dw2";
      cpu::rmsnorm_backward<double>(g.data(), v[dw].data(), g.data(), v["x"].data(), v["w"].data(), v["rstd"].data(),
                                    T * H, D);
    }
  };
  c.checked = {"y", "rstd", "dx", "dw", "dx_in_place", "dw2"};
  c.fd = {{"x", "y", "dy", "dx", false}, {"w", "y", "dy", "dw", true}};
  return c;
}

void head_norm_rope_cases(std::vector<OpCase>& cases) {
  struct Shape {
    int64_t T, H, D;
    float scale;
    Store weight;
    bool fd;
  };
  // D = 128 (Qwen3) and 64 take the CUDA kernels of one pass, the token count ending inside a block; D = 16 their
  // narrowest lane group; D = 20 and 8 the two ops one after the other. T = 20000 at D = 128 gives the backward's
  // slots several tokens each. scale: yarn's attention_scaling on cos and sin.
  for (const Shape& s : {Shape{333, 3, 128, 1.0f, Store::kCompute, false}, Shape{50, 5, 64, 1.1386294f, Store::kF32, false},
                         Shape{20000, 2, 128, 1.0f, Store::kBF16, false}, Shape{37, 2, 20, 1.0f, Store::kCompute, false},
                         Shape{3, 2, 16, 1.0f, Store::kCompute, true}, Shape{3, 2, 8, 0.8f, Store::kCompute, true}}) {
    OpCase c = head_norm_rope_case(s.T, s.H, s.D, s.scale, s.weight, 90 + s.D);
    if (!s.fd) c.fd.clear();
    // D = 20 and 8 on CUDA: the two ops round in between, so only the relative-L2 form of the rule (3 x 2 x 8 in bf16
    // measured 2.1x the one-rounding baseline's max error, H100, fortieth session).
    c.rule.max_abs = s.D != 20 && s.D != 8;
    cases.push_back(c);
  }
}

// ---- SwiGLU -------------------------------------------------------------------------------------

void swiglu_cases(std::vector<OpCase>& cases) {
  struct Shape2 {
    int64_t T, F;
    bool fd;
  };
  for (const Shape2& s : {Shape2{30, 88, false}, Shape2{7, 13, false}, Shape2{2, 9, true}}) {  // packs; tail
    const auto [T, F, fd] = s;
    const int64_t n = T * F;
    OpCase c;
    c.name = dims("swiglu forward+backward", {{"T", T}, {"F", F}});
    c.operands = {in("gate", {T, F}, 19, -6.f, 6.f),
                  in("up", {T, F}, 20, -2.f, 2.f),
                  in("dy", {T, F}, 21),
                  out("y", {T, F}),
                  out("dgate", {T, F}),
                  out("dup", {T, F}),
                  out("y_again", {T, F})};  // the backward's recompute of y
    c.run = [](Tensors& t, auto&, const Backend&) {
      swiglu_forward(t.at("y"), t.at("gate"), t.at("up"));
      swiglu_backward(t.at("dgate"), t.at("dup"), t.at("dy"), t.at("gate"), t.at("up"), &t.at("y_again"));
    };
    c.reference = [n](Values& v) {
      cpu::swiglu_forward<double>(v["y"].data(), v["gate"].data(), v["up"].data(), n);
      cpu::swiglu_backward<double>(v["dgate"].data(), v["dup"].data(), v["dy"].data(), v["gate"].data(), v["up"].data(),
                                   n, v["y_again"].data());
    };
    c.checked = {"y", "dgate", "dup", "y_again"};
    if (fd) c.fd = {{"gate", "y", "dy", "dgate", false}, {"up", "y", "dy", "dup", false}};
    cases.push_back(c);
  }
}

// ---- GELU ---------------------------------------------------------------------------------------

// Forward and backward, and both again in place (out = inp, dinp = dout) on copies. Inputs span
// [-6, 6]: both tails (where erf / tanh saturate) and the curved middle.
void gelu_cases(std::vector<OpCase>& cases) {
  struct Shape2 {
    int64_t T, F;
    bool fd;
  };
  for (GeluKind kind : {GeluKind::kErf, GeluKind::kTanh}) {
    const bool tanh_approx = kind == GeluKind::kTanh;
    for (const Shape2& s : {Shape2{30, 88, false}, Shape2{7, 13, false}, Shape2{2, 9, true}}) {  // packs; tail
      const auto [T, F, fd] = s;
      const int64_t n = T * F;
      OpCase c;
      c.name = dims(tanh_approx ? "gelu tanh forward+backward" : "gelu erf forward+backward", {{"T", T}, {"F", F}});
      c.operands = {in("x", {T, F}, 80, -6.f, 6.f),
                    in("dy", {T, F}, 81),
                    out("y", {T, F}),
                    out("dx", {T, F}),
                    inout("y_in_place", {T, F}, 80, -6.f, 6.f),  // the values of x
                    inout("dx_in_place", {T, F}, 81)};           // the values of dy
      c.run = [kind](Tensors& t, auto&, const Backend&) {
        gelu_forward(t.at("y"), t.at("x"), kind);
        gelu_backward(t.at("dx"), t.at("dy"), t.at("x"), kind);
        Tensor& g = t.at("dx_in_place");
        gelu_backward(g, g, t.at("x"), kind);
        Tensor& y = t.at("y_in_place");
        gelu_forward(y, y, kind);
      };
      c.reference = [n, tanh_approx](Values& v) {
        cpu::gelu_forward<double>(v["y"].data(), v["x"].data(), n, tanh_approx);
        cpu::gelu_backward<double>(v["dx"].data(), v["dy"].data(), v["x"].data(), n, tanh_approx);
        double* g = v["dx_in_place"].data();
        cpu::gelu_backward<double>(g, g, v["x"].data(), n, tanh_approx);
        double* y = v["y_in_place"].data();
        cpu::gelu_forward<double>(y, y, n, tanh_approx);
      };
      c.checked = {"y", "dx", "y_in_place", "dx_in_place"};
      if (fd) c.fd = {{"x", "y", "dy", "dx", false}};
      cases.push_back(c);
    }
  }
}

// ---- matmul -------------------------------------------------------------------------------------

void matmul_cases(std::vector<OpCase>& cases) {
  struct Variant {
    Store out;
    float alpha, beta;
  };
  // out = alpha op(a) op(b) + beta out: a plain product, dW += dy^T x into an f32 gradient, and a
  // general alpha / beta; each in bf16 and (on the f32 backends) true f32 (TF32 would fail).
  const Variant variants[] = {{Store::kCompute, 1.f, 0.f}, {Store::kF32, 0.5f, 1.f}, {Store::kCompute, 0.7f, 0.5f}};
  struct Mnk {
    int64_t M, N, K;
  };
  for (const Mnk& s : {Mnk{96, 80, 72}, Mnk{33, 17, 29}, Mnk{256, 128, 1000}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (const Variant& var : variants) {
          const auto [M, N, K] = s;
          OpCase c;
          c.name = dims("matmul", {{"M", M}, {"N", N}, {"K", K}, {"ta", ta}, {"tb", tb}}) + " out " +
                   store_name(var.out) + " alpha=" + std::to_string(var.alpha) + " beta=" + std::to_string(var.beta);
          Operand o = var.beta == 0.f ? out("out", {M, N}, var.out) : inout("out", {M, N}, 32, -1.f, 1.f, var.out);
          c.operands = {in("a", ta ? Shape{K, M} : Shape{M, K}, 30 + M),
                        in("b", tb ? Shape{N, K} : Shape{K, N}, 31 + N), o};
          const float alpha = var.alpha, beta = var.beta;
          c.run = [ta, tb, alpha, beta](Tensors& t, auto&, const Backend&) {
            matmul(t.at("out"), t.at("a"), t.at("b"), ta, tb, alpha, beta);
          };
          c.reference = [M, N, K, ta, tb, alpha, beta](Values& v) {
            cpu::matmul_reference<double>(v["out"].data(), v["a"].data(), v["b"].data(), M, N, K, ta, tb, alpha, beta);
          };
          c.checked = {"out"};
          cases.push_back(c);
        }
      }
    }
  }
  // out = op(a) op(b) + beta * c with c apart from out (the layer's residual added by the GEMM):
  // c must stay as it was; a K of 0 leaves out = beta * c.
  for (const Mnk& s : {Mnk{96, 80, 72}, Mnk{33, 17, 29}, Mnk{40, 24, 0}}) {
    for (float beta : {1.f, 0.5f}) {
      const auto [M, N, K] = s;
      OpCase c;
      c.name = dims("matmul residual", {{"M", M}, {"N", N}, {"K", K}}) + " beta=" + std::to_string(beta);
      c.operands = {in("a", {M, K}, 37 + M), in("b", {N, K}, 38 + N), inout("c", {M, N}, 39, -1.f, 1.f),
                    out("out", {M, N})};
      c.run = [beta](Tensors& t, auto&, const Backend&) {
        matmul(t.at("out"), t.at("a"), t.at("b"), false, true, 1.f, beta, &t.at("c"));
      };
      c.reference = [M, N, K, beta](Values& v) {
        v["out"] = v["c"];
        cpu::matmul_reference<double>(v["out"].data(), v["a"].data(), v["b"].data(), M, N, K, false, true, 1.0, beta);
      };
      c.checked = {"out", "c"};
      cases.push_back(c);
    }
  }
  // A linear layer's forward and backward, as the model calls them (y = x W^T; dx = dy W;
  // dW += dy^T x), small enough for finite differences.
  const int64_t T = 5, In = 4, Out = 3;
  OpCase c;
  c.name = dims("matmul linear forward+backward", {{"T", T}, {"in", In}, {"out", Out}});
  c.operands = {in("x", {T, In}, 33), in("W", {Out, In}, 34), in("dy", {T, Out}, 35),
                out("y", {T, Out}),   out("dx", {T, In}),     inout("dW", {Out, In}, 36, -1.f, 1.f, Store::kF32)};
  c.run = [](Tensors& t, auto&, const Backend&) {
    matmul(t.at("y"), t.at("x"), t.at("W"), false, true);
    matmul(t.at("dx"), t.at("dy"), t.at("W"), false, false);
    matmul(t.at("dW"), t.at("dy"), t.at("x"), true, false, 1.f, 1.f);
  };
  c.reference = [T, In, Out](Values& v) {
    cpu::matmul_reference<double>(v["y"].data(), v["x"].data(), v["W"].data(), T, Out, In, false, true, 1.0, 0.0);
    cpu::matmul_reference<double>(v["dx"].data(), v["dy"].data(), v["W"].data(), T, In, Out, false, false, 1.0, 0.0);
    cpu::matmul_reference<double>(v["dW"].data(), v["dy"].data(), v["x"].data(), Out, In, T, true, false, 1.0, 1.0);
  };
  c.checked = {"y", "dx", "dW"};
  c.fd = {{"x", "y", "dy", "dx", false}, {"W", "y", "dy", "dW", true}};
  cases.push_back(c);
}

// ---- linear layers with their epilogues ---------------------------------------------------------

// linear_forward, linear_gelu_forward and linear_backward_gelu. On CUDA the 8-aligned widths (80)
// run cuBLASLt's epilogues (bias, GELU_AUX(_BIAS), DGELU; GELU's tanh form only), the odd ones (17)
// and the erf form run unfused (matmul, then the separate kernel: one rounding more, so those
// cases keep only the relative-L2 form of the 2x rule). Pre-activations and GELU inputs span both
// tails and the curved middle; around -3 the erf and tanh forms differ by 10%, so the f32 path
// tells them apart.
void linear_cases(std::vector<OpCase>& cases) {
  struct Tnk {
    int64_t T, N, K;
  };
  for (const Tnk& s : {Tnk{96, 80, 72}, Tnk{33, 17, 29}}) {
    const auto [T, N, K] = s;
    const bool fused_on_cuda = N % 8 == 0;
    // y = x w^T + bias + residual: bias, residual apart, y in place (residual = y), no bias.
    for (int variant = 0; variant < 4; ++variant) {
      const bool bias = variant != 3, residual = variant != 0, in_place = variant == 2;
      OpCase c;
      c.name = dims("linear_forward", {{"T", T}, {"N", N}, {"K", K}}) + (bias ? " bias" : "") +
               (residual ? (in_place ? " y+=" : " +residual") : "");
      c.operands = {in("x", {T, K}, 60 + T), in("w", {N, K}, 61 + N), in("b", {N}, 62, -1.f, 1.f),
                    in_place ? inout("y", {T, N}, 63) : out("y", {T, N}), inout("r", {T, N}, 64)};
      c.run = [bias, residual, in_place](Tensors& t, auto&, const Backend&) {
        const Tensor* r = !residual ? nullptr : in_place ? &t.at("y") : &t.at("r");
        linear_forward(t.at("y"), t.at("x"), t.at("w"), bias ? &t.at("b") : nullptr, r);
      };
      c.reference = [T, N, K, bias, residual, in_place](Values& v) {
        if (residual && !in_place) v["y"] = v["r"];
        cpu::matmul_reference<double>(v["y"].data(), v["x"].data(), v["w"].data(), T, N, K, false, true, 1.0,
                                      residual ? 1.0 : 0.0);
        if (bias) cpu::bias_forward<double>(v["y"].data(), v["b"].data(), T, N);
      };
      c.checked = {"y", "r"};
      c.rule.max_abs = fused_on_cuda || !bias || !residual;  // unfused: the bias added to a rounded sum
      cases.push_back(c);
    }
    for (GeluKind kind : {GeluKind::kTanh, GeluKind::kErf}) {
      const bool tanh_approx = kind == GeluKind::kTanh;
      const bool one_rounding = fused_on_cuda && tanh_approx;
      for (bool bias : {true, false}) {
        OpCase c;
        c.name = dims(tanh_approx ? "linear_gelu_forward tanh" : "linear_gelu_forward erf",
                      {{"T", T}, {"N", N}, {"K", K}}) +
                 (bias ? " bias" : "");
        // x w^T has a spread of about 0.6 sqrt(K / 9): pre-activations reach -3 and beyond.
        c.operands = {in("x", {T, K}, 65 + T, -1.5f, 1.5f), in("w", {N, K}, 66 + N, -1.5f, 1.5f),
                      in("b", {N}, 67, -2.f, 1.f), out("h", {T, N}), out("pre", {T, N})};
        c.run = [bias, kind](Tensors& t, auto&, const Backend&) {
          linear_gelu_forward(t.at("h"), t.at("pre"), t.at("x"), t.at("w"), bias ? &t.at("b") : nullptr, kind);
        };
        c.reference = [T, N, K, bias, tanh_approx](Values& v) {
          v["pre"].assign(static_cast<size_t>(T * N), 0.0);
          cpu::matmul_reference<double>(v["pre"].data(), v["x"].data(), v["w"].data(), T, N, K, false, true, 1.0, 0.0);
          if (bias) cpu::bias_forward<double>(v["pre"].data(), v["b"].data(), T, N);
          v["h"].assign(static_cast<size_t>(T * N), 0.0);
          cpu::gelu_forward<double>(v["h"].data(), v["pre"].data(), T * N, tanh_approx);
        };
        c.checked = {"h", "pre"};
        c.rule.max_abs = one_rounding;
        cases.push_back(c);
      }
      // dpre = (dy @ w) * gelu'(pre), and beside it y = gelu(pre) w^T (separate ops) for the
      // finite differences of the small case.
      for (const Tnk& b : {Tnk{T, N, K}, Tnk{5, 3, 8}}) {
        const auto [Tb, Nout, Kin] = b;  // pre [T, K], w [N, K], dy [T, N]
        const bool small = Tb == 5;
        OpCase c;
        c.name = dims(tanh_approx ? "linear_backward_gelu tanh" : "linear_backward_gelu erf",
                      {{"T", Tb}, {"N", Nout}, {"K", Kin}});
        c.operands = {in("pre", {Tb, Kin}, 68, -6.f, 6.f), in("w", {Nout, Kin}, 69), in("dy", {Tb, Nout}, 70),
                      out("dpre", {Tb, Kin}),           out("h", {Tb, Kin}),        out("y", {Tb, Nout})};
        c.run = [kind](Tensors& t, auto&, const Backend&) {
          linear_backward_gelu(t.at("dpre"), t.at("dy"), t.at("w"), t.at("pre"), kind);
          gelu_forward(t.at("h"), t.at("pre"), kind);
          matmul(t.at("y"), t.at("h"), t.at("w"), false, true);
        };
        c.reference = [Tb, Nout, Kin, tanh_approx](Values& v) {
          const int64_t n = Tb * Kin;
          v["h"].assign(static_cast<size_t>(n), 0.0);
          cpu::gelu_forward<double>(v["h"].data(), v["pre"].data(), n, tanh_approx);
          v["y"].assign(static_cast<size_t>(Tb * Nout), 0.0);
          cpu::matmul_reference<double>(v["y"].data(), v["h"].data(), v["w"].data(), Tb, Nout, Kin, false, true, 1.0,
                                        0.0);
          v["dpre"].assign(static_cast<size_t>(n), 0.0);
          cpu::matmul_reference<double>(v["dpre"].data(), v["dy"].data(), v["w"].data(), Tb, Kin, Nout, false, false,
                                        1.0, 0.0);
          cpu::gelu_backward<double>(v["dpre"].data(), v["dpre"].data(), v["pre"].data(), n, tanh_approx);
        };
        c.checked = {"dpre"};
        c.rule.max_abs = !small && one_rounding;
        if (small) c.fd = {{"pre", "y", "dy", "dpre", false}};
        cases.push_back(c);
      }
    }
  }
  // A biased linear layer's forward and backward as the model runs them (y = x w^T + b + r;
  // dx = dy w; dw += dy^T x; db += sum_t dy), small enough for finite differences.
  const int64_t T = 5, In = 4, Out = 3;
  OpCase c;
  c.name = dims("linear forward+backward with bias", {{"T", T}, {"in", In}, {"out", Out}});
  c.operands = {in("x", {T, In}, 71),
                in("w", {Out, In}, 72),
                in("b", {Out}, 73),
                in("r", {T, Out}, 74),
                in("dy", {T, Out}, 75),
                out("y", {T, Out}),
                out("dx", {T, In}),
                inout("dw", {Out, In}, 76, -1.f, 1.f, Store::kF32),
                inout("db", {Out}, 77, -1.f, 1.f, Store::kF32)};
  c.run = [](Tensors& t, auto&, const Backend&) {
    linear_forward(t.at("y"), t.at("x"), t.at("w"), &t.at("b"), &t.at("r"));
    matmul(t.at("dx"), t.at("dy"), t.at("w"), false, false);
    matmul(t.at("dw"), t.at("dy"), t.at("x"), true, false, 1.f, 1.f);
    bias_backward(t.at("db"), t.at("dy"));
  };
  c.reference = [T, In, Out](Values& v) {
    v["y"] = v["r"];
    cpu::matmul_reference<double>(v["y"].data(), v["x"].data(), v["w"].data(), T, Out, In, false, true, 1.0, 1.0);
    cpu::bias_forward<double>(v["y"].data(), v["b"].data(), T, Out);
    cpu::matmul_reference<double>(v["dx"].data(), v["dy"].data(), v["w"].data(), T, In, Out, false, false, 1.0, 0.0);
    cpu::matmul_reference<double>(v["dw"].data(), v["dy"].data(), v["x"].data(), Out, In, T, true, false, 1.0, 1.0);
    cpu::bias_backward<double>(v["db"].data(), v["dy"].data(), T, Out);
  };
  c.checked = {"y", "dx", "dw", "db"};
  c.rule.max_abs = false;  // unfused on CUDA (3 columns): the bias added to a rounded sum
  c.fd = {{"x", "y", "dy", "dx", false}, {"w", "y", "dy", "dw", true}, {"b", "y", "dy", "db", true}};
  cases.push_back(c);
}

// ---- cross-entropy ------------------------------------------------------------------------------

void cross_entropy_cases(std::vector<OpCase>& cases) {
  struct Shape2 {
    int64_t T, V;
    bool fd;
  };
  for (const Shape2& s : {Shape2{64, 1000, false}, Shape2{64, 997, false}, Shape2{4, 6, true}}) {  // packs; scalar
    const auto [T, V, fd] = s;
    std::vector<int32_t> targets = random_ints(T, 41, 0, static_cast<int32_t>(V));
    for (int64_t t = 0; t < T; t += 5) targets[t] = kIgnoreIndex;
    const float dloss = 1.f / 51.f;
    OpCase c;
    c.name = dims("cross_entropy forward+backward", {{"T", T}, {"V", V}});
    Operand inplace = inout("dlogits_in_place", {T, V}, 40, -4.f, 4.f);  // the same values as logits
    Operand from_lse = inout("dlogits_from_lse", {T, V}, 40, -4.f, 4.f);  // again, with the forward's lse
    // d(sum_t dloss * losses[t]) / dlogits is what cross_entropy_backward computes: the upstream.
    Operand upstream{"dlosses", {T}, Role::kIn, Store::kF32, std::vector<float>(static_cast<size_t>(T), dloss), {}};
    c.operands = {in("logits", {T, V}, 40, -4.f, 4.f),
                  ints("targets", targets),
                  out("losses", {T}, Store::kF32),
                  out("dlogits", {T, V}),
                  inplace,
                  from_lse,
                  out("lse", {T}, Store::kF32),
                  out("losses2", {T}, Store::kF32),
                  upstream};
    c.run = [dloss](Tensors& t, auto&, const Backend&) {
      cross_entropy_forward(t.at("losses"), t.at("logits"), t.at("targets"));
      cross_entropy_backward(t.at("dlogits"), t.at("logits"), t.at("targets"), dloss);
      Tensor& x = t.at("dlogits_in_place");  // dlogits written over logits
      cross_entropy_backward(x, x, t.at("targets"), dloss);
      // The forward keeping its logsumexp; the backward reading it (in place).
      cross_entropy_forward(t.at("losses2"), t.at("logits"), t.at("targets"), &t.at("lse"));
      Tensor& y = t.at("dlogits_from_lse");
      cross_entropy_backward(y, y, t.at("targets"), dloss, &t.at("lse"));
    };
    c.reference = [T, V, dloss](Values& v) {
      const std::vector<int32_t> tg = as_ints(v["targets"]);
      cpu::cross_entropy_forward<double>(v["losses"].data(), v["logits"].data(), tg.data(), T, V);
      cpu::cross_entropy_backward<double>(v["dlogits"].data(), v["logits"].data(), tg.data(), dloss, T, V);
      std::vector<double> x = v["dlogits_in_place"];
      cpu::cross_entropy_backward<double>(v["dlogits_in_place"].data(), x.data(), tg.data(), dloss, T, V);
      cpu::cross_entropy_forward<double>(v["losses2"].data(), v["logits"].data(), tg.data(), T, V, v["lse"].data());
      std::vector<double> y = v["dlogits_from_lse"];
      cpu::cross_entropy_backward<double>(v["dlogits_from_lse"].data(), y.data(), tg.data(), dloss, T, V,
                                          v["lse"].data());
    };
    c.checked = {"losses", "dlogits", "dlogits_in_place", "lse", "losses2", "dlogits_from_lse"};
    if (fd) c.fd = {{"logits", "losses", "dlosses", "dlogits", false}};
    cases.push_back(c);
  }
}

// ---- elementwise, reductions, cast ----------------------------------------------------------------

void elementwise_cases(std::vector<OpCase>& cases) {
  const int64_t n = 1003;  // 125 packs + a tail of 3
  // One op per case: each rounds its bf16 result once, as the same-dtype baseline does.
  for (Store y : {Store::kCompute, Store::kF32, Store::kBF16}) {
    for (Store x : {Store::kCompute, Store::kBF16}) {
      OpCase c;
      c.name = std::string("add_inplace n=1003 y ") + store_name(y) + " x " + store_name(x);
      c.operands = {inout("y", {n}, 50, -1.f, 1.f, y), in("x", {n}, 51, -1.f, 1.f, x)};
      c.run = [](Tensors& t, auto&, const Backend&) { add_inplace(t.at("y"), t.at("x")); };
      c.reference = [n](Values& v) { cpu::add_inplace<double>(v["y"].data(), v["x"].data(), n); };
      c.checked = {"y"};
      cases.push_back(c);
    }
    OpCase c;
    c.name = std::string("scale_inplace n=1003 y ") + store_name(y);
    c.operands = {inout("y", {n}, 52, -1.f, 1.f, y)};
    c.run = [](Tensors& t, auto&, const Backend&) { scale_inplace(t.at("y"), -1.7f); };
    c.reference = [n](Values& v) { cpu::scale_inplace<double>(v["y"].data(), -1.7, n); };
    c.checked = {"y"};
    cases.push_back(c);
  }
  // Linear-layer biases: rows of 77 (a column count that is no multiple of a warp) over 600 tokens
  // (several row blocks of the CUDA column sum).
  for (Store y : {Store::kCompute, Store::kF32}) {
    OpCase c;
    const int64_t T = 600, N = 77;
    c.name = std::string("bias_forward T=600 N=77 y ") + store_name(y);
    c.operands = {inout("y", {T, N}, 53, -1.f, 1.f, y), in("b", {N}, 54, -1.f, 1.f)};
    c.run = [](Tensors& t, auto&, const Backend&) { bias_forward(t.at("y"), t.at("b")); };
    c.reference = [T, N](Values& v) { cpu::bias_forward<double>(v["y"].data(), v["b"].data(), T, N); };
    c.checked = {"y"};
    cases.push_back(c);
  }
  for (int64_t T : {int64_t{600}, int64_t{5}}) {
    OpCase c;
    const int64_t N = 77;
    c.name = "bias_backward T=" + std::to_string(T) + " N=77 (db f32 +=)";
    c.operands = {inout("db", {N}, 55, -1.f, 1.f, Store::kF32), in("dy", {T, N}, 56, -1.f, 1.f)};
    c.run = [](Tensors& t, auto&, const Backend&) { bias_backward(t.at("db"), t.at("dy")); };
    c.reference = [T, N](Values& v) { cpu::bias_backward<double>(v["db"].data(), v["dy"].data(), T, N); };
    c.checked = {"db"};
    cases.push_back(c);
  }
  {
    OpCase c;
    const int64_t m = 1000003;
    c.name = "sum_squares n=1000003";
    c.operands = {in("x", {m}, 52, -3.f, 3.f)};
    c.run = [](Tensors& t, std::map<std::string, double>& s, const Backend&) { s["sum"] = sum_squares(t.at("x")); };
    c.reference = [m](Values& v) { v["sum"] = {cpu::sum_squares<double>(v["x"].data(), m)}; };
    c.checked = {"sum"};
    cases.push_back(c);
  }
  {
    OpCase c;
    const int64_t m = 1001;
    c.name = "cast f32 -> compute, bf16 -> f32 n=1001";
    c.operands = {in("x", {m}, 53, -100.f, 100.f, Store::kF32), out("y", {m}),
                  in("xb", {m}, 54, -100.f, 100.f, Store::kBF16), out("back", {m}, Store::kF32)};
    c.run = [](Tensors& t, auto&, const Backend&) {
      cast(t.at("y"), t.at("x"));
      cast(t.at("back"), t.at("xb"));
    };
    c.reference = [](Values& v) {
      v["y"] = v["x"];
      v["back"] = v["xb"];
    };
    c.checked = {"y", "back"};
    cases.push_back(c);
  }
}

// ---- optimizer ----------------------------------------------------------------------------------

void optimizer_cases(std::vector<OpCase>& cases) {
  const int64_t n = 4099;
  const AdamWConfig cfg{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  const float grad_scale = 0.8f;
  OpCase c;
  c.name = "adamw_step x3 n=4099 grad compute";
  c.operands = {inout("p", {n}, 60, -1.f, 1.f, Store::kF32), inout("m", {n}, 61, -0.1f, 0.1f, Store::kF32),
                inout("v", {n}, 62, 0.f, 0.01f, Store::kF32)};
  for (int step = 1; step <= 3; ++step) c.operands.push_back(in("g" + std::to_string(step), {n}, 63 + step));
  c.run = [cfg, grad_scale](Tensors& t, auto&, const Backend&) {
    for (int step = 1; step <= 3; ++step)
      adamw_step(t.at("p"), t.at("m"), t.at("v"), t.at("g" + std::to_string(step)), cfg, step, grad_scale);
  };
  // torch's formulas in double on the unrounded gradients (cfg's values), steps 1..steps.
  auto reference = [n, grad_scale](Values& v, int steps) {
    for (int step = 1; step <= steps; ++step) {
      const double bc1 = 1 - std::pow(0.9, step), bc2 = 1 - std::pow(0.95, step);
      const std::vector<double>& g = v["g" + std::to_string(step)];
      for (int64_t i = 0; i < n; ++i) {
        const double gi = g[i] * grad_scale;
        v["p"][i] *= 1 - 3e-3 * 0.1;
        v["m"][i] = 0.9 * v["m"][i] + 0.1 * gi;
        v["v"][i] = 0.95 * v["v"][i] + 0.05 * gi * gi;
        v["p"][i] -= 3e-3 / bc1 * v["m"][i] / (std::sqrt(v["v"][i]) / std::sqrt(bc2) + 1e-8);
      }
    }
  };
  c.reference = [reference](Values& v) { reference(v, 3); };
  c.checked = {"p", "m", "v"};
  cases.push_back(c);

  // The step with the updated weights also rounded into the compute dtype (the trainer's master
  // weights and their compute copy); f32 gradients; odd n: packs and a scalar tail.
  OpCase r;
  r.name = "adamw_step_rounded x2 n=4099 into compute";
  r.operands = {inout("p", {n}, 70, -1.f, 1.f, Store::kF32), inout("m", {n}, 71, -0.1f, 0.1f, Store::kF32),
                inout("v", {n}, 72, 0.f, 0.01f, Store::kF32), out("w", {n})};
  for (int step = 1; step <= 2; ++step)
    r.operands.push_back(in("g" + std::to_string(step), {n}, 73 + step, -1.f, 1.f, Store::kF32));
  r.run = [cfg, grad_scale](Tensors& t, auto&, const Backend&) {
    for (int step = 1; step <= 2; ++step)
      adamw_step_rounded(t.at("p"), t.at("m"), t.at("v"), t.at("g" + std::to_string(step)), t.at("w"), cfg, step,
                         grad_scale);
  };
  r.reference = [reference](Values& v) {
    reference(v, 2);
    v["w"] = v["p"];
  };
  r.checked = {"p", "m", "v", "w"};
  cases.push_back(r);

  OpCase clip;
  clip.name = "clip_coefficient";
  clip.run = [](Tensors&, std::map<std::string, double>& s, const Backend&) {
    s["below"] = clip_coefficient(0.5, 1.0);
    s["above"] = clip_coefficient(4.0, 1.0);
    s["off"] = clip_coefficient(4.0, 0.0);
  };
  clip.reference = [](Values& v) {
    v["below"] = {1.0};  // min(1, max_norm / (norm + 1e-6))
    v["above"] = {1.0 / (4.0 + 1e-6)};
    v["off"] = {1.0};
  };
  clip.checked = {"below", "above", "off"};
  clip.unsupported = [](const Backend& b) {
    return b.device.is_cpu() ? std::string() : std::string("a host computation: no tensor, nothing on the device");
  };
  cases.push_back(clip);
}

}  // namespace

std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  embedding_cases(cases);
  rmsnorm_cases(cases);
  layernorm_cases(cases);
  rope_cases(cases);
  head_norm_rope_cases(cases);
  swiglu_cases(cases);
  gelu_cases(cases);
  matmul_cases(cases);
  linear_cases(cases);
  cross_entropy_cases(cases);
  elementwise_cases(cases);
  optimizer_cases(cases);
  return cases;
}

}  // namespace seqpar::optest
