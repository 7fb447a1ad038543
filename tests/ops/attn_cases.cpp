// Attention in the op harness (op_harness.h): the cases, the one f64 reference (forward and
// backward, optionally with the bf16 GPU kernels' rounding), running a case on a backend and the
// checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attention/attention_backend.h"
#include "ops/op_harness.h"

namespace seqpar::optest {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The CPU suite runs the cases up to this much work (Tq * Tk * H * D): beyond it the f64
// reference and the CPU kernel take seconds each; the CUDA side runs every case.
constexpr int64_t kCpuWorkLimit = 160'000'000;

std::vector<int32_t> iota_pos(int64_t n, int32_t from = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = from + static_cast<int32_t>(i);
  return v;
}

// The reference's core on explicit operands: out, lse, and (with dout) the gradient
// contributions added to the starts.
AttnRef reference_core(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                       const std::vector<double>* dout, const std::vector<int32_t>& qseg,
                       const std::vector<int32_t>& qpos, const std::vector<int32_t>& kseg,
                       const std::vector<int32_t>& kpos, int64_t H, int64_t Hkv, int64_t D, bool causal, int32_t window,
                       double scale, DType lowp_dt, bool round_out, bool round_grads, const std::vector<float>* dq0,
                       const std::vector<float>* dk0, const std::vector<float>* dv0) {
  // lowp_dt: the 16-bit type the GPU kernels round P, dS and their outputs to (kF32: none).
  const bool lowp = lowp_dt != DType::kF32;
  auto lowp_round = [lowp_dt](double x) { return round_to(x, lowp_dt); };
  const int64_t Tq = static_cast<int64_t>(qseg.size()), Tk = static_cast<int64_t>(kseg.size()), G = H / Hkv;
  AttnRef r;
  r.out.assign(static_cast<size_t>(Tq * H * D), 0.0);
  r.lse.assign(static_cast<size_t>(Tq * H), -kInf);
  std::vector<double> gq(static_cast<size_t>(Tq * H * D), 0.0), gk(static_cast<size_t>(Tk * Hkv * D), 0.0),
      gv(static_cast<size_t>(Tk * Hkv * D), 0.0), s(static_cast<size_t>(Tk));
  for (int64_t h = 0; h < H; ++h) {
    const int64_t hk = h / G;
    for (int64_t i = 0; i < Tq; ++i) {
      const double* qi = &q[(i * H + h) * D];
      double mx = -kInf;
      for (int64_t j = 0; j < Tk; ++j) {
        s[j] = -kInf;
        if (qseg[i] != kseg[j] || (causal && kpos[j] > qpos[i])) continue;
        if (window > 0 && static_cast<int64_t>(qpos[i]) - kpos[j] >= window) continue;  // before the window
        const double* kj = &k[(j * Hkv + hk) * D];
        double acc = 0;
        for (int64_t d = 0; d < D; ++d) acc += qi[d] * kj[d];
        s[j] = scale * acc;
        mx = std::max(mx, s[j]);
      }
      if (mx == -kInf) continue;  // sees nothing: out 0, lse -inf, no gradient
      double sum = 0;
      for (int64_t j = 0; j < Tk; ++j)
        if (s[j] != -kInf) sum += std::exp(s[j] - mx);
      const double lse = mx + std::log(sum);
      r.lse[i * H + h] = lse;
      double* oi = &r.out[(i * H + h) * D];
      for (int64_t j = 0; j < Tk; ++j) {
        if (s[j] == -kInf) continue;
        double p = std::exp(s[j] - lse);
        if (lowp) p = lowp_round(p);
        const double* vj = &v[(j * Hkv + hk) * D];
        for (int64_t d = 0; d < D; ++d) oi[d] += p * vj[d];
      }
      if (lowp && round_out)
        for (int64_t d = 0; d < D; ++d) oi[d] = lowp_round(oi[d]);
      if (!dout) continue;
      // Backward of this row with its own final out and lse.
      const double* doi = &(*dout)[(i * H + h) * D];
      double delta = 0;
      for (int64_t d = 0; d < D; ++d) delta += doi[d] * oi[d];
      for (int64_t j = 0; j < Tk; ++j) {
        if (s[j] == -kInf) continue;
        double p = std::exp(s[j] - lse);
        if (lowp) p = lowp_round(p);
        const double* kj = &k[(j * Hkv + hk) * D];
        const double* vj = &v[(j * Hkv + hk) * D];
        double dp = 0;
        for (int64_t d = 0; d < D; ++d) dp += doi[d] * vj[d];
        double ds = p * (dp - delta);
        if (lowp) ds = lowp_round(ds);
        for (int64_t d = 0; d < D; ++d) {
          gv[(j * Hkv + hk) * D + d] += p * doi[d];
          gq[(i * H + h) * D + d] += scale * ds * kj[d];
          gk[(j * Hkv + hk) * D + d] += scale * ds * qi[d];
        }
      }
    }
  }
  if (!dout) return r;
  auto total = [&](const std::vector<float>* start, const std::vector<double>& g) {
    std::vector<double> t(g.size());
    for (size_t x = 0; x < g.size(); ++x) {
      t[x] = (start ? (*start)[x] : 0.0) + g[x];
      if (lowp && round_grads) t[x] = lowp_round(t[x]);
    }
    return t;
  };
  r.dq = total(dq0, gq);
  r.dk = total(dk0, gk);
  r.dv = total(dv0, gv);
  return r;
}

std::vector<int32_t> ints_of(const Tensor& t) {
  const int32_t* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

bool is_cudnn(const Backend& b) {
  return b.device.is_cuda() &&
         (b.attention.backend == AttentionBackend::kCudnn || b.attention.backend == AttentionBackend::kAuto);
}

int64_t num_docs(const AttnCase& c) {
  int64_t n = c.qseg.empty() ? 0 : 1;
  for (size_t i = 1; i < c.qseg.size(); ++i) n += c.qseg[i] != c.qseg[i - 1];
  return n;
}

TokenMeta meta_of(const std::vector<int32_t>& seg, const std::vector<int32_t>& pos) {
  const int64_t n = static_cast<int64_t>(seg.size());
  return {Tensor::from_vector<int32_t>({n}, seg), Tensor::from_vector<int32_t>({n}, pos)};
}

// The path `b` must report for `c` (kNone: any).
AttnPath expected_path(const AttnCase& c, const Backend& b) {
  if (b.device.is_cpu()) return AttnPath::kCpu;
  // auto takes cuDNN's dense graph (one document) only, the flash kernel otherwise (attention_cuda.cpp),
  // bf16 and f16 alike.
  if (b.attention.backend == AttentionBackend::kAuto &&
      (num_docs(c) != 1 || b.attention.cudnn_dense != CudnnDense::kOn))
    return AttnPath::kNone;
  if (is_cudnn(b))
    return num_docs(c) == 1 && b.attention.cudnn_dense == CudnnDense::kOn ? AttnPath::kCudnnDense
                                                                          : AttnPath::kCudnnRagged;
  if (b.attention.fwd_kernel == FlashKernel::kMma && b.attention.bwd_kernel == FlashKernel::kMma)
    return AttnPath::kFlashMma;
  if (b.attention.fwd_kernel == FlashKernel::kWgmma && b.attention.bwd_kernel == FlashKernel::kWgmma)
    return AttnPath::kFlashWgmma;
  return AttnPath::kNone;
}

}  // namespace

// ---- cases ------------------------------------------------------------------------------------

float AttnCase::scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))); }

bool AttnCase::visible(int64_t i, int64_t j) const {
  return qseg[i] == kseg[j] && (!causal || kpos[j] <= qpos[i]) &&
         (window <= 0 || static_cast<int64_t>(qpos[i]) - kpos[j] < window);
}

AttnCase attn_one_doc(const std::string& name, int64_t T, int64_t H, int64_t Hkv, int64_t D, bool causal) {
  AttnCase c;
  c.name = name;
  c.Tq = c.Tk = T;
  c.H = H;
  c.Hkv = Hkv;
  c.D = D;
  c.qseg = c.kseg = std::vector<int32_t>(static_cast<size_t>(T), 0);
  c.qpos = c.kpos = iota_pos(T);
  c.causal = causal;
  return c;
}

AttnCase attn_packed(const std::string& name, const std::vector<int32_t>& cu, int64_t H, int64_t Hkv, int64_t D,
                     bool causal) {
  AttnCase c = attn_one_doc(name, cu.back(), H, Hkv, D, causal);
  for (size_t d = 0; d + 1 < cu.size(); ++d)
    for (int32_t t = cu[d]; t < cu[d + 1]; ++t) c.qseg[t] = c.kseg[t] = static_cast<int32_t>(d);
  return c;
}

std::vector<AttnCase> attn_cases() {
  std::vector<AttnCase> cases;
  auto add = [&](AttnCase c, uint64_t seed) {
    c.seed = seed;
    cases.push_back(std::move(c));
  };
  auto write = [](AttnCase c) {
    c.mode = GradMode::kWrite;
    c.name += ", write";
    return c;
  };
  // Tiny cases: the CPU's finite differences; the CUDA kernels take D 64, 96 or 128 only.
  add(attn_packed("tiny packed 2 docs GQA D8 causal", {0, 3, 7}, 2, 1, 8, true), 1);
  {
    AttnCase c = attn_one_doc("tiny ring block D4 non-causal, an unseen row", 0, 2, 1, 4, false);
    c.qseg = {0, 0, 1, 0};
    c.qpos = {5, 6, 7, 8};
    c.kseg = {0, 0, 0, 0, 0};
    c.kpos = {0, 1, 2, 3, 4};
    c.Tq = 4;
    c.Tk = 5;
    c.expect_empty_rows = 2;
    add(c, 2);
  }
  // One causal document, MHA (the cuDNN dense graph's case).
  add(attn_one_doc("causal MHA D128 T=300", 300, 4, 4, 128, true), 11);
  add(write(attn_one_doc("causal MHA D128 T=300", 300, 4, 4, 128, true)), 61);
  add(write(attn_one_doc("causal MHA D128 T=333", 333, 4, 4, 128, true)), 88);
  add(write(attn_one_doc("causal GQA D64 T=257", 257, 8, 2, 64, true)), 62);
  add(attn_one_doc("causal GQA D64 T=257", 257, 8, 2, 64, true), 22);
  add(write(attn_one_doc("non-causal MQA D128 T=190", 190, 4, 1, 128, false)), 63);
  {
    // 200 queries against 180 keys; the last 50 queries are in a segment no key has.
    AttnCase c = attn_one_doc("non-causal GQA D64 Tq=200 Tk=180, unseen segment, f32 grads, device metadata", 0, 8, 2,
                              64, false);
    c.Tq = 200;
    c.Tk = 180;
    c.qpos = iota_pos(200);
    c.qseg.assign(200, 0);
    for (int i = 150; i < 200; ++i) c.qseg[i] = 1;
    c.kpos = iota_pos(180);
    c.kseg.assign(180, 0);
    c.grad_f32 = true;
    c.meta_on_device = true;
    c.expect_empty_rows = 50 * 8;
    add(c, 22);
  }
  // Packed documents (varlen): cuDNN's ragged graph, the flash kernel's tile skipping.
  add(attn_packed("varlen 3 docs GQA D128", {0, 100, 230, 333}, 4, 2, 128, true), 33);
  {
    AttnCase c = write(attn_packed("varlen 3 docs GQA D64, device metadata", {0, 100, 230, 333}, 8, 2, 64, true));
    c.meta_on_device = true;
    add(c, 99);
  }
  add(attn_packed("packed 4 docs GQA D128, 7-token docs first and last", {0, 7, 200, 333, 340}, 4, 2, 128, true), 33);
  add(write(attn_packed("packed 4 docs GQA D128, 7-token docs first and last", {0, 7, 200, 333, 340}, 4, 2, 128, true)),
      64);
  add(attn_packed("packed 3 docs non-causal MHA D64", {0, 100, 230, 333}, 4, 4, 64, false), 44);
  add(attn_packed("packed 3 docs non-causal MQA D128", {0, 150, 161, 290}, 4, 1, 128, false), 55);
  {
    // The GPU demo's per-rank call: 16 recall sequences of 128 tokens, few heads per rank.
    std::vector<int32_t> cu;
    for (int32_t d = 0; d <= 16; ++d) cu.push_back(128 * d);
    add(write(attn_packed("16 docs of 128, H=1 Hkv=1 D64", cu, 1, 1, 64, true)), 71);
    add(attn_packed("16 docs of 128, H=1 Hkv=1 D64", cu, 1, 1, 64, true), 72);
    add(write(attn_packed("16 docs of 128, H=2 Hkv=1 D64", cu, 2, 1, 64, true)), 73);
    add(write(attn_packed("16 docs of 128, H=4 Hkv=2 D64", cu, 4, 2, 64, true)), 74);
  }
  // Every head dim the CUDA kernels take (96: GPT 30B's; the mma.sync kernel and cuDNN, not wgmma).
  for (int64_t D : {64, 96, 128}) {
    const std::string d = " D" + std::to_string(D);
    add(attn_packed("two docs GQA T=261" + d, {0, 150, 261}, 4, 2, D, true), 66 + D);
    add(write(attn_packed("packed 3 docs GQA T=1000" + d, {0, 300, 437, 1000}, 4, 2, D, true)), 105 + D);
    {
      AttnCase c = attn_one_doc("causal GQA T=333, f32 out" + d, 333, 4, 2, D, true);
      c.out_f32 = true;
      add(c, 110 + D);
    }
    {
      // A ring step: queries at positions 600..999 against keys at 0..499 (every key before every
      // query), except 100 queries in a document no key belongs to.
      AttnCase c = attn_one_doc("ring block Tq=400 Tk=500 MQA, 100 unseen queries" + d, 0, 4, 1, D, true);
      c.Tq = 400;
      c.Tk = 500;
      c.qpos = iota_pos(400, 600);
      c.qseg.assign(400, 0);
      for (int i = 300; i < 400; ++i) c.qseg[i] = 1;
      c.kpos = iota_pos(500);
      c.kseg.assign(500, 0);
      c.expect_empty_rows = 100 * 4;
      add(c, 107 + D);
    }
    for (bool f32 : {false, true}) {
      // Keys 300.. in a segment no query has (whole unseen key tiles: kWrite must store their
      // zeros), queries 250..299 in a segment no key has (dq 0), keys partly seen.
      for (int64_t Tk : {400, 520}) {
        AttnCase c = attn_one_doc("unseen key tiles Tq=300 Tk=" + std::to_string(Tk) + d + (f32 ? " f32 grads" : ""), 0,
                                  4, 2, D, true);
        c.Tq = 300;
        c.Tk = Tk;
        c.qpos = iota_pos(300);
        c.qseg.assign(300, 0);
        for (int i = 250; i < 300; ++i) c.qseg[i] = 3;
        c.kpos = iota_pos(Tk);
        c.kseg.assign(static_cast<size_t>(Tk), 0);
        for (int64_t j = 300; j < Tk; ++j) c.kseg[j] = 2;
        c.grad_f32 = f32;
        c.expect_empty_rows = 50 * 4;
        add(write(c), 200 + D + (f32 ? 1 : 0) + Tk);
      }
    }
  }
  {
    // A zigzag shard of a 4-chunk causal sequence (chunks 0 and 3, 70 tokens each) against all keys.
    AttnCase c = attn_one_doc("zigzag queries MQA D64", 280, 4, 1, 64, true);
    c.qseg.clear();
    c.qpos.clear();
    for (int32_t t = 0; t < 280; ++t)
      if (t < 70 || t >= 210) {
        c.qseg.push_back(0);
        c.qpos.push_back(t);
      }
    c.Tq = static_cast<int64_t>(c.qpos.size());
    add(c, 44);
  }
  add(attn_one_doc("long causal GQA D64 T=1100, many tiles", 1100, 2, 1, 64, true), 55);
  add(write(attn_one_doc("causal MHA D128 T=1000", 1000, 2, 2, 128, true)), 201);
  // Head dim 96 (GPT 30B: 64 heads of 96): one document (cuDNN's dense graph), packed documents
  // (its ragged graph), many key tiles, non-causal, a window, accumulated gradients.
  add(attn_one_doc("causal MHA D96 T=300", 300, 4, 4, 96, true), 96);
  add(write(attn_one_doc("causal MHA D96 T=1000", 1000, 2, 2, 96, true)), 196);
  add(attn_packed("varlen 3 docs GQA D96", {0, 100, 230, 333}, 4, 2, 96, true), 296);
  add(write(attn_one_doc("non-causal MQA D96 T=190", 190, 4, 1, 96, false)), 396);
  {
    AttnCase c = attn_one_doc("causal GQA D64 T=1000, f32 grads", 1000, 8, 2, 64, true);
    c.grad_f32 = true;
    add(c, 202);
  }
  add(attn_one_doc("non-causal GQA D128 T=300", 300, 8, 2, 128, false), 203);
  {
    AttnCase c = write(attn_one_doc("non-causal MHA D64 T=1000, f32 grads", 1000, 2, 2, 64, false));
    c.grad_f32 = true;
    add(c, 204);
  }
  add(write(attn_one_doc("non-causal MHA D64 T=2500, 20 key tiles per query tile", 2500, 1, 1, 64, false)), 104);
  // Sliding windows (a query sees itself and the W - 1 positions before it): windows below, at and
  // above a key tile (64 / 128 keys), so the kernels skip whole tiles, run full tiles and mask
  // partial ones; packed documents; ring blocks whose keys lie partly or wholly before the window.
  auto windowed = [](AttnCase c, int32_t W) {
    c.window = W;
    c.name += ", window " + std::to_string(W);
    return c;
  };
  add(windowed(attn_packed("tiny packed 2 docs GQA D8 causal", {0, 5, 9}, 2, 1, 8, true), 3), 5);
  add(windowed(attn_one_doc("tiny causal D4", 7, 2, 2, 4, true), 1), 6);
  add(windowed(attn_one_doc("causal GQA D64 T=1000", 1000, 4, 2, 64, true), 100), 301);
  add(write(windowed(attn_one_doc("causal MHA D128 T=700", 700, 2, 2, 128, true), 64)), 302);
  add(windowed(attn_one_doc("causal MQA D128 T=333", 333, 4, 1, 128, true), 200), 303);
  add(write(windowed(attn_one_doc("causal GQA D96 T=700", 700, 4, 2, 96, true), 100)), 496);
  add(write(windowed(attn_one_doc("causal GQA D64 T=2000", 2000, 2, 1, 64, true), 513)), 304);
  add(windowed(attn_one_doc("causal GQA D64 T=300, window above T", 300, 4, 2, 64, true), 4096), 305);
  add(write(windowed(attn_packed("packed 3 docs causal GQA D64", {0, 150, 400, 777}, 4, 2, 64, true), 90)), 306);
  {
    AttnCase c = windowed(attn_one_doc("causal MHA D128 T=500, f32 out and grads", 500, 2, 2, 128, true), 77);
    c.out_f32 = c.grad_f32 = true;
    c.meta_on_device = true;
    add(c, 307);
  }
  for (int32_t W : {50, 300, 700}) {
    // A ring step: this rank's 300 queries (positions 600..899) against the previous rank's 300 keys
    // (300..599); at W = 50 most query rows see none of them.
    AttnCase c = attn_one_doc("ring block Tq=Tk=300 GQA D64", 300, 4, 2, 64, true);
    c.qpos = iota_pos(300, 600);
    c.kpos = iota_pos(300, 300);
    c = windowed(c, W);
    if (W == 50) c.expect_empty_rows = (300 - 49) * 4;
    add(W == 300 ? write(c) : c, 310 + W);
  }
  for (GradMode mode : {GradMode::kWrite, GradMode::kAccumulate}) {
    // A ring step whose keys all lie before every query's window: nothing is visible.
    AttnCase c = windowed(attn_one_doc("block wholly before the window T=256 MHA D64", 256, 2, 2, 64, true), 100);
    c.kpos = iota_pos(256, -1000);
    c.expect_empty_rows = 256 * 2;
    c.mode = mode;
    if (mode == GradMode::kWrite) c.name += ", write";
    add(c, 320);
  }
  for (GradMode mode : {GradMode::kWrite, GradMode::kAccumulate}) {
    // A ring step whose keys all come after every query: nothing is visible.
    AttnCase c = attn_one_doc("fully masked block T=300 MHA D128", 300, 2, 2, 128, true);
    c.kpos = iota_pos(300, 1000);
    c.expect_empty_rows = 300 * 2;
    c.mode = mode;
    if (mode == GradMode::kWrite) c.name += ", write";
    add(c, 213);
  }
  return cases;
}

AttnInputs attn_inputs(const AttnCase& c) {
  const size_t nq = static_cast<size_t>(c.Tq * c.H * c.D), nk = static_cast<size_t>(c.Tk * c.Hkv * c.D);
  AttnInputs in;
  in.q = stored(random_values(nq, c.seed + 1, -1.5f, 1.5f), DType::kBF16);
  in.k = stored(random_values(nk, c.seed + 2, -1.5f, 1.5f), DType::kBF16);
  in.v = stored(random_values(nk, c.seed + 3, -1.f, 1.f), DType::kBF16);
  in.dout = stored(random_values(nq, c.seed + 4, -1.f, 1.f), DType::kBF16);
  if (c.mode == GradMode::kWrite) {
    in.dq0.assign(nq, 0.f);
    in.dk0.assign(nk, 0.f);
    in.dv0.assign(nk, 0.f);
  } else {
    // Starting gradients of about the gradients' own size, so accumulation errors show;
    // representable in every gradient dtype (bf16's rounding, then f16's, which keeps a bf16 value
    // exact except in f16's subnormal range, where it leaves at most 8 significant bits).
    auto start = [](std::vector<float> v) { return stored(stored(v, DType::kBF16), DType::kF16); };
    in.dq0 = start(random_values(nq, c.seed + 5, -0.05f, 0.05f));
    in.dk0 = start(random_values(nk, c.seed + 6, -0.05f, 0.05f));
    in.dv0 = start(random_values(nk, c.seed + 7, -0.05f, 0.05f));
  }
  return in;
}

AttnRef attn_reference(const AttnCase& c, const AttnInputs& in, bool lowp) {
  return attn_reference(c, in, lowp ? DType::kBF16 : DType::kF32);
}

AttnRef attn_reference(const AttnCase& c, const AttnInputs& in, DType lowp_dt) {
  const std::vector<double> dout = to_double(in.dout);
  return reference_core(to_double(in.q), to_double(in.k), to_double(in.v), &dout, c.qseg, c.qpos, c.kseg, c.kpos, c.H,
                        c.Hkv, c.D, c.causal, c.window, c.scale(), lowp_dt, !c.out_f32, !c.grad_f32, &in.dq0, &in.dk0,
                        &in.dv0);
}

AttnRef attn_reference(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                       const TokenMeta& q_meta, const TokenMeta& k_meta, int64_t H, int64_t Hkv, int64_t D, bool causal,
                       double scale, int32_t window) {
  return reference_core(q, k, v, nullptr, ints_of(q_meta.seg), ints_of(q_meta.pos), ints_of(k_meta.seg),
                        ints_of(k_meta.pos), H, Hkv, D, causal, window, scale, DType::kF32, false, false, nullptr,
                        nullptr, nullptr);
}

AttnRef attn_reference(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                       const std::vector<double>& dout, const TokenMeta& q_meta, const TokenMeta& k_meta, int64_t H,
                       int64_t Hkv, int64_t D, bool causal, double scale) {
  return reference_core(q, k, v, &dout, ints_of(q_meta.seg), ints_of(q_meta.pos), ints_of(k_meta.seg),
                        ints_of(k_meta.pos), H, Hkv, D, causal, /*window=*/0, scale, DType::kF32, false, false, nullptr,
                        nullptr, nullptr);
}

// ---- running and checking -----------------------------------------------------------------------

std::string attn_unsupported(const AttnCase& c, const Backend& b) {
  if (b.device.is_cpu()) {
    if (c.work() > kCpuWorkLimit)
      return "too large for the CPU suite (Tq*Tk*H*D = " + std::to_string(c.work()) + "; the CUDA side runs it)";
    return "";
  }
  if (c.D != 64 && c.D != 96 && c.D != 128)
    return "the CUDA kernels take head dim 64, 96 or 128, not " + std::to_string(c.D);
  if (!b.unavailable.empty()) return b.unavailable;
  if (c.D == 96 && b.attention.backend == AttentionBackend::kFlash &&
      (b.attention.fwd_kernel == FlashKernel::kWgmma || b.attention.bwd_kernel == FlashKernel::kWgmma))
    return "the wgmma kernels take head dim 64 or 128; D=96 runs on the mma.sync kernel (docs/kernel-policy.md)";
  if (is_cudnn(b)) {
    if (c.out_f32 || c.grad_f32) return "cuDNN writes 16-bit outputs and gradients (f32 asked)";
    if (c.meta_on_device) return "cuDNN reads the document layout from host metadata (device metadata given)";
    std::string why;
    AttnArgs args{meta_of(c.qseg, c.qpos), meta_of(c.kseg, c.kpos), c.causal, c.scale()};
    args.window = c.window;
    if (!packed_docs(args, c.Tq, c.Tk, &why)) return "cuDNN is not exact here: " + why;
    if (b.attention.cudnn_dense == CudnnDense::kOff && num_docs(c) != 1)
      return "several documents: the ragged graph runs without the dense one too (the cudnn path covers it)";
  }
  return "";
}

AttnResult run_attention(const AttnCase& c, const AttnInputs& in, const Backend& b) {
  const Device dev = b.device;
  const bool cpu = dev.is_cpu();
  const DType io = cpu ? DType::kF32 : b.compute;  // bf16, or f16 (cuDNN's fp16 path)
  const DType out_dt = cpu || c.out_f32 ? DType::kF32 : io;
  const DType grad_dt = cpu || c.grad_f32 ? DType::kF32 : io;
  const Shape qs{c.Tq, c.H, c.D}, ks{c.Tk, c.Hkv, c.D};
  Tensor q = make_tensor(qs, in.q, io, dev), k = make_tensor(ks, in.k, io, dev), v = make_tensor(ks, in.v, io, dev);
  Tensor dout = make_tensor(qs, in.dout, io, dev);
  TokenMeta qm = meta_of(c.qseg, c.qpos), km = meta_of(c.kseg, c.kpos);
  if (!cpu && c.meta_on_device) {
    qm = {qm.seg.to(dev), qm.pos.to(dev)};
    km = {km.seg.to(dev), km.pos.to(dev)};
  }
  AttnResult r;
  AttnArgs fwd{qm, km, c.causal, c.scale(), b.attention};
  fwd.window = c.window;
  AttnArgs bwd = fwd;
  fwd.ran = &r.fwd_path;
  bwd.ran = &r.bwd_path;
  Tensor out = poisoned(qs, out_dt, dev), lse = poisoned({c.Tq, c.H}, DType::kF32, dev);
  attn_forward(out, lse, q, k, v, fwd);
  const bool write = c.mode == GradMode::kWrite;
  Tensor dq = write ? poisoned(qs, grad_dt, dev) : make_tensor(qs, in.dq0, grad_dt, dev);
  Tensor dk = write ? poisoned(ks, grad_dt, dev) : make_tensor(ks, in.dk0, grad_dt, dev);
  Tensor dv = write ? poisoned(ks, grad_dt, dev) : make_tensor(ks, in.dv0, grad_dt, dev);
  attn_backward(dq, dk, dv, dout, q, k, v, out, lse, bwd, c.mode);
  r.out = values_of(out);
  r.lse = values_of(lse);
  r.dq = values_of(dq);
  r.dk = values_of(dk);
  r.dv = values_of(dv);
  return r;
}

AttnExpect attn_expect(const AttnCase& c) {
  AttnExpect e;
  e.in = attn_inputs(c);
  e.exact = attn_reference(c, e.in, false);
  e.lowp = attn_reference(c, e.in, true);
  return e;
}

// The same-dtype reference of a GPU path: bf16's rounding, or f16's for an fp16 path (computed on
// first use: most callers never run one).
static const AttnRef& lowp_for(const AttnCase& c, const AttnExpect& e, const Backend& b, AttnRef* own16) {
  if (b.compute != DType::kF16) return e.lowp;
  if (!e.lowp16.out.empty()) return e.lowp16;
  *own16 = attn_reference(c, e.in, DType::kF16);
  return *own16;
}

bool check_attention(const AttnCase& c, const Backend& b, std::string* skipped, AttnResult* result,
                     const AttnExpect* expect) {
  if (const std::string why = attn_unsupported(c, b); !why.empty()) {
    if (skipped) *skipped = why;
    return false;
  }
  SCOPED_TRACE(c.name + " on " + b.name);
  AttnExpect own;
  if (!expect) {
    own.in = attn_inputs(c);
    own.exact = attn_reference(c, own.in, false);
    // The CPU's baseline is the exact result rounded to f32: no bf16 reference needed.
    if (!b.device.is_cpu() && b.compute != DType::kF16) own.lowp = attn_reference(c, own.in, true);
    expect = &own;
  }
  const AttnInputs& in = expect->in;
  const AttnRef& exact = expect->exact;
  AttnRef base;
  Rule rule{1e-6, false};  // the GPU rule: relative L2 within 2x bf16's, plus a tiny floor
  if (b.device.is_cpu()) {
    // f32 throughout: the same-dtype computation is the exact result rounded to f32.
    auto f32 = [](std::vector<double> v) {
      for (double& x : v) x = static_cast<float>(x);
      return v;
    };
    base = {f32(exact.out), f32(exact.lse), f32(exact.dq), f32(exact.dk), f32(exact.dv)};
    rule = Rule{1e-5, true};
  } else {
    AttnRef own16;
    base = lowp_for(c, *expect, b, &own16);
  }
  const AttnResult got = run_attention(c, in, b);
  if (result) *result = got;
  expect_within_2x("out", got.out, base.out, exact.out, rule);
  expect_lse("lse", got.lse, exact.lse, 1e-4);
  expect_within_2x("dq", got.dq, base.dq, exact.dq, rule);
  expect_within_2x("dk", got.dk, base.dk, exact.dk, rule);
  expect_within_2x("dv", got.dv, base.dv, exact.dv, rule);
  // Rows that see no key: out exactly 0 and dq exactly its start; keys no query sees: dk, dv
  // exactly their start (kWrite: 0, stored, never read).
  int64_t empty_rows = 0;
  for (int64_t r = 0; r < c.Tq * c.H; ++r) {
    if (exact.lse[r] != -kInf) continue;
    ++empty_rows;
    for (int64_t d = 0; d < c.D; ++d) {
      const size_t x = static_cast<size_t>(r * c.D + d);
      if (got.out[x] != 0.0 || got.dq[x] != in.dq0[x]) {
        ADD_FAILURE() << "row " << r / c.H << " head " << r % c.H << " sees no key but out[" << d
                      << "] = " << got.out[x] << ", dq = " << got.dq[x] << " (start " << in.dq0[x] << ")";
        break;
      }
    }
  }
  if (c.expect_empty_rows >= 0) {
    EXPECT_EQ(empty_rows, c.expect_empty_rows) << "rows that see no key";
  }
  for (int64_t j = 0; j < c.Tk; ++j) {
    bool seen = false;
    for (int64_t i = 0; i < c.Tq && !seen; ++i) seen = c.visible(i, j);
    if (seen) continue;
    for (int64_t x = j * c.Hkv * c.D; x < (j + 1) * c.Hkv * c.D; ++x) {
      if (got.dk[x] != in.dk0[x] || got.dv[x] != in.dv0[x]) {
        ADD_FAILURE() << "key " << j << " is seen by no query but dk = " << got.dk[x] << ", dv = " << got.dv[x];
        break;
      }
    }
  }
  const AttnPath want = expected_path(c, b);
  if (want != AttnPath::kNone) {
    EXPECT_EQ(got.fwd_path, want) << "the forward ran " << attn_path_name(got.fwd_path) << ", not "
                                  << attn_path_name(want);
    EXPECT_EQ(got.bwd_path, want) << "the backward ran " << attn_path_name(got.bwd_path) << ", not "
                                  << attn_path_name(want);
  }
  return true;
}

void check_attention_finite_differences(const AttnCase& c) {
  SCOPED_TRACE(c.name + ": finite differences of the f64 reference");
  ASSERT_LE(c.work(), 20000) << "finite differences are for small cases";
  AttnCase w = c;
  w.mode = GradMode::kWrite;  // the gradients alone
  const AttnInputs in = attn_inputs(w);
  const AttnRef ref = attn_reference(w, in, false);
  const std::vector<double> dout = to_double(in.dout);
  std::vector<double> q = to_double(in.q), k = to_double(in.k), v = to_double(in.v);
  auto loss = [&] {  // sum(out * dout)
    const AttnRef r = reference_core(q, k, v, nullptr, c.qseg, c.qpos, c.kseg, c.kpos, c.H, c.Hkv, c.D, c.causal,
                                     c.window, c.scale(), DType::kF32, false, false, nullptr, nullptr, nullptr);
    double s = 0;
    for (size_t i = 0; i < r.out.size(); ++i) s += r.out[i] * dout[i];
    return s;
  };
  const std::pair<std::vector<double>*, const std::vector<double>*> wrt[] = {
      {&q, &ref.dq}, {&k, &ref.dk}, {&v, &ref.dv}};
  const char* names[] = {"dq", "dk", "dv"};
  for (int which = 0; which < 3; ++which) {
    std::vector<double>& x = *wrt[which].first;
    const std::vector<double>& analytic = *wrt[which].second;
    double worst = 0, scale = 1;
    for (size_t i = 0; i < x.size(); ++i) {
      const double x0 = x[i], eps = 1e-5;
      x[i] = x0 + eps;
      const double lp = loss();
      x[i] = x0 - eps;
      const double lm = loss();
      x[i] = x0;
      worst = std::max(worst, std::fabs((lp - lm) / (2 * eps) - analytic[i]));
      scale = std::max(scale, std::fabs(analytic[i]));
    }
    EXPECT_LT(worst / scale, 1e-8) << names[which] << ": max |numeric - analytic| = " << worst;
  }
}

}  // namespace seqpar::optest
