#include "diag/bench_gemm.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/bench_util.h"
#include "core/error.h"
#include "core/tensor.h"

#if defined(SEQPAR_WITH_CUDA)
#include <cuda_runtime.h>

#include "core/cuda/stream.h"
#include "core/cuda_check.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/matmul_policy.h"
#include "kernels/ops.h"
#endif

namespace seqpar {

void add_bench_gemm_options(CLI::App& cmd, BenchGemmOptions& o) {
  cmd.add_option("--preset", o.preset,
                 "shapes: square | llama-1b | llama-3b | all; or ops (the memory-bound ops at Llama-1B sizes)")
      ->check(CLI::IsMember({"square", "llama-1b", "llama-3b", "all", "ops"}))
      ->capture_default_str();
  cmd.add_option("--tokens", o.tokens, "T, tokens of the Llama projection GEMMs")->capture_default_str();
  cmd.add_option("--square", o.square, "edge of the square GEMM")->capture_default_str();
  cmd.add_option("--warmup", o.warmup, "untimed runs per shape")->capture_default_str();
  cmd.add_option("--iters", o.iters, "timed runs per shape (the median is reported)")->capture_default_str();
  cmd.add_option("--algo", o.algo,
                 "cuBLASLt configuration per shape: heuristic (first pick), autotune (timed candidates), or both "
                 "(each shape both ways, and a table of the two on stderr)")
      ->check(CLI::IsMember({"heuristic", "autotune", "both"}))
      ->capture_default_str();
  cmd.add_flag("--autotune", o.autotune, "the same as --algo autotune");
  cmd.add_option("--tune-ms", o.tune_ms,
                 "autotune budget per shape in ms (0: the process's matmul policy, 50 or $SEQPAR_GEMM_AUTOTUNE_MS)")
      ->capture_default_str();
  cmd.add_option("--out", o.out, "also append the JSON lines to this file");
  cmd.add_option("--device", o.device, "CUDA device index")->capture_default_str();
  cmd.add_option("--shapes", o.shapes, "only these shapes of the preset (comma-separated names)");
  cmd.add_flag("--sweep", o.sweep,
               "time every autotune candidate of each shape (JSON bench gemm_candidate), the best first on stderr");
  cmd.add_option("--tune-repeats", o.tune_repeats,
                 "tune each shape this many times afresh and time each choice (JSON bench gemm_tune)")
      ->capture_default_str();
  cmd.add_option("--rounds", o.rounds, "--sweep / --tune-repeats: interleaved rounds of --iters runs")
      ->capture_default_str();
  cmd.add_flag("--serve", o.serve,
               "print the shapes, then time the shape named on each stdin line \"NAME ITERS\" (for "
               "bench/peers/gemm_interleaved.py, which alternates with PyTorch shape by shape)");
}

namespace {

struct GemmShape {
  std::string name;
  int64_t M, N, K;
  bool trans_a, trans_b;
};

struct ModelDims {
  const char* name;
  int64_t C, F, H, Hkv, D;
};

// Llama-3.2-1B and -3B (config.json: hidden_size, intermediate_size, heads, kv heads, head_dim).
constexpr ModelDims kModels[] = {{"llama-1b", 2048, 8192, 32, 8, 64}, {"llama-3b", 3072, 8192, 24, 8, 128}};

// A linear layer y = x W^T, x [T, in], W [out, in] (ops.h's conventions):
//   fwd   y  = x W^T     matmul(y, x, W, false, true)    M=T,   N=out, K=in
//   dgrad dx = dy W      matmul(dx, dy, W, false, false) M=T,   N=in,  K=out
//   wgrad dW = dy^T x    matmul(dW, dy, x, true, false)  M=out, N=in,  K=T
void add_linear(std::vector<GemmShape>& v, const std::string& name, int64_t T, int64_t in, int64_t out) {
  v.push_back({name + ".fwd", T, out, in, false, true});
  v.push_back({name + ".dgrad", T, in, out, false, false});
  v.push_back({name + ".wgrad", out, in, T, true, false});
}

std::vector<GemmShape> bench_shapes(const BenchGemmOptions& o) {
  SEQPAR_INPUT_CHECK(o.preset == "square" || o.preset == "llama-1b" || o.preset == "llama-3b" || o.preset == "all" ||
                         o.preset == "ops",
                     "--preset={} must be one of square, llama-1b, llama-3b, all, ops", o.preset);
  SEQPAR_INPUT_CHECK(o.tokens > 0 && o.square > 0, "--tokens={} and --square={} must be positive", o.tokens,
                     o.square);
  SEQPAR_INPUT_CHECK(o.iters > 0 && o.warmup >= 0, "--iters={} must be > 0 and --warmup={} >= 0", o.iters,
                     o.warmup);
  SEQPAR_INPUT_CHECK(o.algo == "heuristic" || o.algo == "autotune" || o.algo == "both",
                     "--algo={} must be one of heuristic, autotune, both", o.algo);
  SEQPAR_INPUT_CHECK(o.tune_ms >= 0, "--tune-ms={} must be >= 0 (0: matmul's default budget)", o.tune_ms);
  SEQPAR_INPUT_CHECK(o.tune_repeats >= 0 && o.rounds >= 1, "--tune-repeats={} must be >= 0 and --rounds={} >= 1",
                     o.tune_repeats, o.rounds);
  SEQPAR_INPUT_CHECK(!o.serve || (!o.sweep && o.tune_repeats == 0),
                     "--serve cannot be combined with --sweep or --tune-repeats");
  std::vector<GemmShape> v;
  if (o.preset == "square" || o.preset == "all")
    v.push_back({"square." + std::to_string(o.square), o.square, o.square, o.square, false, false});
  for (const ModelDims& m : kModels) {
    if (o.preset != m.name && o.preset != "all") continue;
    const std::string p = m.name;
    const int64_t T = o.tokens;
    add_linear(v, p + ".q", T, m.C, m.H * m.D);
    add_linear(v, p + ".k", T, m.C, m.Hkv * m.D);
    add_linear(v, p + ".v", T, m.C, m.Hkv * m.D);
    add_linear(v, p + ".o", T, m.H * m.D, m.C);
    add_linear(v, p + ".gate", T, m.C, m.F);
    add_linear(v, p + ".up", T, m.C, m.F);
    add_linear(v, p + ".down", T, m.F, m.C);
  }
  if (o.shapes.empty()) return v;
  std::vector<GemmShape> picked;
  std::string unknown;
  size_t from = 0;
  while (from <= o.shapes.size()) {
    const size_t comma = std::min(o.shapes.find(',', from), o.shapes.size());
    const std::string name = o.shapes.substr(from, comma - from);
    from = comma + 1;
    if (name.empty()) continue;
    auto it = std::find_if(v.begin(), v.end(), [&](const GemmShape& s) { return s.name == name; });
    if (it == v.end()) {
      unknown += (unknown.empty() ? "" : ", ") + name;
    } else {
      picked.push_back(*it);
    }
  }
  SEQPAR_INPUT_CHECK(unknown.empty(), "--shapes: {} not among the shapes of --preset={} (names like {})", unknown,
                     o.preset, v.empty() ? std::string("square.8192") : v.back().name);
  return picked;
}

}  // namespace

#if defined(SEQPAR_WITH_CUDA)

namespace {

struct Timing {
  double median_ms, min_ms;
};

Timing summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

// Median and best of `iters` runs of f after `warmup` untimed ones, each run between two events.
template <typename F>
Timing time_runs(int warmup, int iters, cudaStream_t stream, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<Event> start, stop;
  for (int i = 0; i < iters; ++i) {
    start.emplace_back(true);
    stop.emplace_back(true);
  }
  for (int i = 0; i < iters; ++i) {
    start[i].record(stream);
    f();
    stop[i].record(stream);
  }
  SEQPAR_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms(iters);
  for (int i = 0; i < iters; ++i) ms[i] = stop[i].elapsed_ms(start[i]);
  return summarize(std::move(ms));
}

// The same for two alternatives run in alternation (f, g, f, g, ...), so that drift in clocks or
// temperature during the measurement hits both alike and their ratio is fair.
template <typename F, typename G>
std::pair<Timing, Timing> time_alternating(int warmup, int iters, cudaStream_t stream, F&& f, G&& g) {
  for (int i = 0; i < warmup; ++i) {
    f();
    g();
  }
  std::vector<Event> ev;
  for (int i = 0; i < 4 * iters; ++i) ev.emplace_back(true);
  for (int i = 0; i < iters; ++i) {
    ev[4 * i].record(stream);
    f();
    ev[4 * i + 1].record(stream);
    ev[4 * i + 2].record(stream);
    g();
    ev[4 * i + 3].record(stream);
  }
  SEQPAR_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> mf(iters), mg(iters);
  for (int i = 0; i < iters; ++i) {
    mf[i] = ev[4 * i + 1].elapsed_ms(ev[4 * i]);
    mg[i] = ev[4 * i + 3].elapsed_ms(ev[4 * i + 2]);
  }
  return {summarize(std::move(mf)), summarize(std::move(mg))};
}

// A device tensor of random values in [lo, hi) (never zeros: they run faster than real data).
Tensor random_device(const Shape& shape, DType dt, Device dev, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t = Tensor::empty(shape, dt, dev);
  cuda_kernels::fill_uniform(t.raw(), dt, t.numel(), seed, lo, hi, current_stream());
  return t;
}

Tensor random_ids(int64_t n, int32_t hi, Device dev, uint64_t seed) {
  std::vector<int32_t> v(n);
  uint64_t x = seed;
  for (auto& id : v) {  // xorshift64: any spread of ids will do
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    id = static_cast<int32_t>(x % static_cast<uint64_t>(hi));
  }
  return Tensor::from_vector<int32_t>({n}, v).to(dev);
}

// One shape of `--algo both`: the heuristic first pick against the autotuned choice.
struct CompareRow {
  std::string name;
  int64_t M = 0, N = 0, K = 0;
  double heuristic_tflops = 0, tuned_tflops = 0, tune_ms = 0;
  int timed = 0, candidates = 0;
  std::string chosen;
};

// The table on stderr (stdout carries only JSON lines), with the geometric mean of tuned/heuristic.
void print_compare_table(const std::vector<CompareRow>& rows, double budget_ms) {
  std::fprintf(stderr, "%-24s %6s %6s %6s %10s %10s %6s %8s %9s  %s\n", "GEMM (bf16, f32 acc)", "M", "N", "K",
               "heur TF/s", "tuned TF/s", "ratio", "tune ms", "timed/of", "chosen");
  double log_sum = 0, tune_total = 0, worst = INFINITY;
  for (const CompareRow& r : rows) {
    const double ratio = r.tuned_tflops / r.heuristic_tflops;
    log_sum += std::log(ratio);
    tune_total += r.tune_ms;
    worst = std::min(worst, ratio);
    std::fprintf(stderr, "%-24s %6lld %6lld %6lld %10.0f %10.0f %6.3f %8.1f %4d/%-4d  %s\n", r.name.c_str(),
                 static_cast<long long>(r.M), static_cast<long long>(r.N), static_cast<long long>(r.K),
                 r.heuristic_tflops, r.tuned_tflops, ratio, r.tune_ms, r.timed, r.candidates, r.chosen.c_str());
  }
  if (!rows.empty())
    std::fprintf(stderr,
                 "autotuned/heuristic TFLOP/s: geometric mean %.3f, min %.3f over %zu shapes; tuning %.0f ms in "
                 "all (budget %.0f ms per shape)\n",
                 std::exp(log_sum / static_cast<double>(rows.size())), worst, rows.size(), tune_total, budget_ms);
}

// The memory-bound ops at Llama-3.2-1B sizes (T tokens, C=2048, F=8192, H=32, D=64; the loss on a
// 4096-token tile of V=128256 logits), bf16 activations: achieved bytes per second against a
// device-to-device copy timed in the same run. bytes = the fewest an op must move (each input read
// once, each output written once).
void bench_ops(const BenchGemmOptions& o, Device dev, const cudaDeviceProp& prop, JsonLines& out) {
  const int64_t T = o.tokens, C = 2048, F = 8192, H = 32, D = 64, V = 128256, TL = 4096;
  const DType bf = DType::kBF16, f32 = DType::kF32;
  cudaStream_t stream = current_stream();
  uint64_t seed = 100;
  auto report = [&](const std::string& name, double bytes, const Timing& t, double copy_gbps) {
    const double gbps = bytes / (t.median_ms * 1e-3) / 1e9;
    nlohmann::json j = {{"bench", "op"},           {"impl", "seqpar"},
                        {"name", name},            {"bytes", bytes},
                        {"ms", t.median_ms},       {"ms_min", t.min_ms},
                        {"gbps", gbps},            {"of_copy", copy_gbps > 0 ? gbps / copy_gbps : 1.0},
                        {"tokens", T},             {"iters", o.iters},
                        {"device", prop.name},     {"date", utc_now("%Y-%m-%d")}};
    out.write(j);
    return gbps;
  };
  const int w = o.warmup, n = o.iters;
  // ceiling: a 1 GiB device-to-device copy (bytes read + written)
  double copy_gbps = 0;
  {
    const int64_t elems = int64_t{1} << 29;
    Tensor a = random_device({elems}, bf, dev, seed++), b = Tensor::empty({elems}, bf, dev);
    Timing t = time_runs(w, n, stream, [&] {
      SEQPAR_CUDA_CHECK(cudaMemcpyAsync(b.raw(), a.raw(), a.nbytes(), cudaMemcpyDeviceToDevice, stream));
    });
    copy_gbps = report("copy.d2d", 2.0 * a.nbytes(), t, 0);
  }
  {
    Tensor x = random_device({T, C}, bf, dev, seed++), w8 = random_device({C}, bf, dev, seed++, 0.5f, 1.5f);
    Tensor y = Tensor::empty({T, C}, bf, dev), r = Tensor::empty({T}, f32, dev);
    Tensor dy = random_device({T, C}, bf, dev, seed++), dx = Tensor::empty({T, C}, bf, dev);
    Tensor dw = random_device({C}, f32, dev, seed++);
    report("rmsnorm.fwd", 2.0 * x.nbytes() + r.nbytes(),
           time_runs(w, n, stream, [&] { rmsnorm_forward(y, r, x, w8, 1e-5f); }), copy_gbps);
    report("rmsnorm.bwd", 3.0 * x.nbytes() + r.nbytes(),
           time_runs(w, n, stream, [&] { rmsnorm_backward(dx, dw, dy, x, w8, r); }), copy_gbps);
    Tensor pos = random_ids(T, 131072, dev, seed++);
    Tensor inv = random_device({D / 2}, f32, dev, seed++, 1e-6f, 1.f);
    Tensor q = random_device({T, H, D}, bf, dev, seed++);
    report("rope.fwd.q", 2.0 * q.nbytes(), time_runs(w, n, stream, [&] { rope_forward(q, pos, inv); }), copy_gbps);
    report("add.bf16", 3.0 * x.nbytes(), time_runs(w, n, stream, [&] { add_inplace(y, x); }), copy_gbps);
    Tensor wte = random_device({V, C}, bf, dev, seed++), ids = random_ids(T, static_cast<int32_t>(V), dev, seed++);
    report("embedding.fwd", 2.0 * y.nbytes(), time_runs(w, n, stream, [&] { embedding_forward(y, ids, wte); }),
           copy_gbps);
    Tensor dwte = random_device({V, C}, f32, dev, seed++);
    // dout read once, each touched f32 row of dwte read and written once
    report("embedding.bwd.f32", dy.nbytes() + 2.0 * T * C * 4,
           time_runs(w, n, stream, [&] { embedding_backward(dwte, dy, ids); }), copy_gbps);
  }
  {
    Tensor g = random_device({T, F}, bf, dev, seed++, -4.f, 4.f), u = random_device({T, F}, bf, dev, seed++);
    Tensor y = Tensor::empty({T, F}, bf, dev), dy = random_device({T, F}, bf, dev, seed++);
    Tensor dg = Tensor::empty({T, F}, bf, dev), du = Tensor::empty({T, F}, bf, dev);
    report("swiglu.fwd", 3.0 * g.nbytes(), time_runs(w, n, stream, [&] { swiglu_forward(y, g, u); }), copy_gbps);
    report("swiglu.bwd", 5.0 * g.nbytes(), time_runs(w, n, stream, [&] { swiglu_backward(dg, du, dy, g, u); }),
           copy_gbps);
  }
  {
    Tensor logits = random_device({TL, V}, bf, dev, seed++, -8.f, 8.f), losses = Tensor::empty({TL}, f32, dev);
    Tensor targets = random_ids(TL, static_cast<int32_t>(V), dev, seed++), dl = Tensor::empty({TL, V}, bf, dev);
    report("cross_entropy.fwd", logits.nbytes() + losses.nbytes(),
           time_runs(w, n, stream, [&] { cross_entropy_forward(losses, logits, targets); }), copy_gbps);
    // reads the row twice (logsumexp, then the gradient) and writes it once: 3 row passes, of
    // which the fewest possible are 2 (the second read is the price of the ops.h contract, which
    // passes no saved logsumexp)
    report("cross_entropy.bwd", 2.0 * logits.nbytes(),
           time_runs(w, n, stream, [&] { cross_entropy_backward(dl, logits, targets, 1.f / TL); }), copy_gbps);
  }
  {
    const int64_t P = int64_t{64} << 20;  // parameters
    Tensor p = random_device({P}, f32, dev, seed++), m = random_device({P}, f32, dev, seed++, -0.1f, 0.1f);
    Tensor v = random_device({P}, f32, dev, seed++, 0.f, 0.01f), g = random_device({P}, bf, dev, seed++);
    AdamWConfig cfg;
    int64_t step = 1;
    report("adamw.bf16grad", 6.0 * p.nbytes() + g.nbytes(),
           time_runs(w, n, stream, [&] { adamw_step(p, m, v, g, cfg, step++, 1.f); }), copy_gbps);
    report("sum_squares.f32", p.nbytes(), time_runs(w, n, stream, [&] { (void)sum_squares(p); }), copy_gbps);
  }
}

}  // namespace

// --serve: the shapes as JSON lines, then one timing per request (see bench_gemm.h).
static int serve_gemm(const BenchGemmOptions& o, const std::vector<GemmShape>& shapes, Device dev) {
  for (const GemmShape& s : shapes)
    std::printf("%s\n", nlohmann::json{{"shape", s.name}, {"m", s.M}, {"n", s.N}, {"k", s.K}, {"trans_a", s.trans_a},
                                       {"trans_b", s.trans_b}}
                            .dump()
                            .c_str());
  std::printf("{\"ready\": true}\n");
  std::fflush(stdout);
  struct Operands {
    Tensor a, b, c;
  };
  std::map<std::string, Operands> ready;
  cudaStream_t stream = current_stream();
  uint64_t seed = 1;
  std::string name;
  int iters = 0;
  while (std::cin >> name && name != "quit" && std::cin >> iters) {
    auto it = std::find_if(shapes.begin(), shapes.end(), [&](const GemmShape& s) { return s.name == name; });
    if (it == shapes.end() || iters < 1) {
      std::printf("%s\n", nlohmann::json{{"name", name}, {"error", "unknown shape or iters < 1"}}.dump().c_str());
      std::fflush(stdout);
      continue;
    }
    const GemmShape& s = *it;
    Operands& op = ready[name];
    if (!op.c.defined()) {
      op.a = random_device(s.trans_a ? Shape{s.K, s.M} : Shape{s.M, s.K}, DType::kBF16, dev, seed++);
      op.b = random_device(s.trans_b ? Shape{s.N, s.K} : Shape{s.K, s.N}, DType::kBF16, dev, seed++);
      op.c = Tensor::empty({s.M, s.N}, DType::kBF16, dev);
    }
    const Timing t = time_runs(o.warmup, iters, stream, [&] { matmul(op.c, op.a, op.b, s.trans_a, s.trans_b); });
    std::printf("%s\n", nlohmann::json{{"name", name},
                                       {"ms", t.median_ms},
                                       {"ms_min", t.min_ms},
                                       {"config", cuda_ops::matmul_config_str(cuda_ops::last_matmul_tuning().chosen)}}
                            .dump()
                            .c_str());
    std::fflush(stdout);
  }
  return 0;
}

namespace {

// Per index i < n, the median over `rounds` rounds of the median of `iters` runs of run(i); the
// order rotates from round to round, so drift and neighbours hit every index alike.
template <typename F>
std::vector<double> interleaved_medians(int n, int rounds, int warmup, int iters, cudaStream_t stream, F&& run) {
  std::vector<std::vector<double>> per(n);
  for (int r = 0; r < rounds; ++r)
    for (int j = 0; j < n; ++j) {
      const int i = (j + r) % n;
      per[i].push_back(time_runs(warmup, iters, stream, [&] { run(i); }).median_ms);
    }
  std::vector<double> m(n);
  for (int i = 0; i < n; ++i) m[i] = summarize(std::move(per[i])).median_ms;
  return m;
}

}  // namespace

// --sweep and --tune-repeats (bench_gemm.h): the autotune against the ground truth of its pool.
static int diagnose_gemm(const BenchGemmOptions& o, const std::vector<GemmShape>& shapes, Device dev,
                         const cudaDeviceProp& prop, JsonLines& out) {
  if (o.tune_ms > 0) set_matmul_policy({matmul_policy().autotune, o.tune_ms});
  const bool autotune_before = matmul_policy().autotune;
  cudaStream_t stream = current_stream();
  uint64_t seed = 1;
  for (const GemmShape& s : shapes) {
    Tensor a = random_device(s.trans_a ? Shape{s.K, s.M} : Shape{s.M, s.K}, DType::kBF16, dev, seed++);
    Tensor b = random_device(s.trans_b ? Shape{s.N, s.K} : Shape{s.K, s.N}, DType::kBF16, dev, seed++);
    Tensor c = Tensor::empty({s.M, s.N}, DType::kBF16, dev);
    const double flops = 2.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * static_cast<double>(s.K);
    cuda_ops::clear_matmul_plans();
    const std::vector<cuda_ops::MatmulConfig> pool = cuda_ops::matmul_candidates(c, a, b, s.trans_a, s.trans_b);
    const int n = static_cast<int>(pool.size());
    auto base = [&](const char* bench) {
      return nlohmann::json{{"bench", bench}, {"name", s.name},       {"m", s.M},
                            {"n", s.N},       {"k", s.K},             {"budget_ms", matmul_policy().autotune_budget_ms},
                            {"device", prop.name}, {"date", utc_now("%Y-%m-%d")}};
    };
    std::vector<double> truth;
    if (o.sweep) {
      truth = interleaved_medians(n, o.rounds, 1, o.iters, stream, [&](int i) {
        cuda_ops::set_matmul_forced_candidate(i);
        matmul(c, a, b, s.trans_a, s.trans_b);
      });
      cuda_ops::set_matmul_forced_candidate(-1);
      std::vector<int> order(n);
      for (int i = 0; i < n; ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](int x, int y) { return truth[x] < truth[y]; });
      for (int r = 0; r < n; ++r) {
        const int i = order[r];
        nlohmann::json j = base("gemm_candidate");
        j["index"] = i;
        j["place"] = r;
        j["config"] = cuda_ops::matmul_config_str(pool[i]);
        j["split_k"] = pool[i].split_k;
        j["ms"] = truth[i];
        j["tflops"] = flops / (truth[i] * 1e-3) / 1e12;
        j["of_best"] = truth[order[0]] / truth[i];
        out.write(j);
      }
      std::fprintf(stderr, "%s (M=%lld N=%lld K=%lld): %d candidates; the best, and the heuristic's first pick [0]:\n",
                   s.name.c_str(), static_cast<long long>(s.M), static_cast<long long>(s.N),
                   static_cast<long long>(s.K), n);
      for (int r = 0; r < n; ++r)
        if (r < 6 || order[r] == 0)
          std::fprintf(stderr, "  %3d. [%2d] %.4f ms %.3f of best  %s\n", r + 1, order[r], truth[order[r]],
                       truth[order[0]] / truth[order[r]], cuda_ops::matmul_config_str(pool[order[r]]).c_str());
    }
    std::map<std::string, int> chosen;  // config -> times chosen
    for (int rep = 0; rep < o.tune_repeats; ++rep) {
      cuda_ops::clear_matmul_plans();
      set_matmul_policy({true, matmul_policy().autotune_budget_ms});
      SEQPAR_CUDA_CHECK(cudaStreamSynchronize(stream));
      matmul(c, a, b, s.trans_a, s.trans_b);  // tunes
      const cuda_ops::MatmulTuning t = cuda_ops::last_matmul_tuning();
      const std::string config = cuda_ops::matmul_config_str(t.chosen);
      const auto at = std::find_if(pool.begin(), pool.end(),
                                   [&](const cuda_ops::MatmulConfig& p) { return cuda_ops::matmul_config_str(p) == config; });
      const double ms = interleaved_medians(1, o.rounds, o.warmup, o.iters, stream,
                                            [&](int) { matmul(c, a, b, s.trans_a, s.trans_b); })[0];
      ++chosen[config];
      nlohmann::json j = base("gemm_tune");
      j["repeat"] = rep;
      j["config"] = config;
      j["index"] = at == pool.end() ? -1 : static_cast<int>(at - pool.begin());
      j["split_k"] = t.chosen.split_k;
      j["ms"] = ms;
      j["tune_best_ms"] = t.best_ms;
      j["tune_ms"] = t.tune_ms;
      j["timed"] = t.timed;
      if (!truth.empty() && at != pool.end()) {
        const double best = *std::min_element(truth.begin(), truth.end());
        j["sweep_ms"] = truth[at - pool.begin()];
        j["sweep_of_best"] = best / truth[at - pool.begin()];
      }
      out.write(j);
    }
    if (o.tune_repeats > 0) {
      std::fprintf(stderr, "%s: %d tunings chose %zu distinct configurations:\n", s.name.c_str(), o.tune_repeats,
                   chosen.size());
      for (const auto& [config, count] : chosen) std::fprintf(stderr, "  %2d x %s\n", count, config.c_str());
    }
  }
  set_matmul_policy({autotune_before, matmul_policy().autotune_budget_ms});
  return 0;
}

int run_bench_gemm(const BenchGemmOptions& o) {
  const std::vector<GemmShape> shapes = o.preset == "ops" ? std::vector<GemmShape>{} : bench_shapes(o);
  int count = 0;
  SEQPAR_CUDA_CHECK(cudaGetDeviceCount(&count));
  SEQPAR_INPUT_CHECK(o.device >= 0 && o.device < count, "--device={} but this machine has {} CUDA device(s)",
                     o.device, count);
  SEQPAR_CUDA_CHECK(cudaSetDevice(o.device));
  cudaDeviceProp prop{};
  SEQPAR_CUDA_CHECK(cudaGetDeviceProperties(&prop, o.device));
  const Device dev = Device::cuda(o.device);
  JsonLines out(o.out);
  if (o.preset == "ops") {
    bench_ops(o, dev, prop, out);
    return 0;
  }
  if (o.serve) return serve_gemm(o, shapes, dev);
  if (o.sweep || o.tune_repeats > 0) return diagnose_gemm(o, shapes, dev, prop, out);
  const std::string algo = o.autotune ? "autotune" : o.algo;
  const bool heuristic = algo != "autotune", tuned = algo != "heuristic";
  if (o.tune_ms > 0) set_matmul_policy({matmul_policy().autotune, o.tune_ms});
  const bool autotune_before = matmul_policy().autotune;
  cudaStream_t stream = current_stream();
  uint64_t seed = 1;
  std::vector<CompareRow> table;
  for (const GemmShape& s : shapes) {
    Tensor a = random_device(s.trans_a ? Shape{s.K, s.M} : Shape{s.M, s.K}, DType::kBF16, dev, seed++);
    Tensor b = random_device(s.trans_b ? Shape{s.N, s.K} : Shape{s.K, s.N}, DType::kBF16, dev, seed++);
    Tensor c = Tensor::empty({s.M, s.N}, DType::kBF16, dev);
    const double flops = 2.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * static_cast<double>(s.K);
    auto line = [&](const char* impl, const Timing& t, const cuda_ops::MatmulConfig& cfg) {
      return nlohmann::json{{"bench", "gemm"},
                            {"impl", impl},
                            {"name", s.name},
                            {"m", s.M},
                            {"n", s.N},
                            {"k", s.K},
                            {"trans_a", s.trans_a},
                            {"trans_b", s.trans_b},
                            {"dtype", "bf16"},
                            {"out_dtype", "bf16"},
                            {"ms", t.median_ms},
                            {"ms_min", t.min_ms},
                            {"tflops", flops / (t.median_ms * 1e-3) / 1e12},
                            {"family", cuda_ops::matmul_family_name(cfg.family)},
                            {"config", cuda_ops::matmul_config_str(cfg)},
                            {"iters", o.iters},
                            {"device", prop.name},
                            {"date", utc_now("%Y-%m-%d")}};
    };
    // Every shape plans (and tunes) afresh, so identical shapes (k and v) are independent samples
    // of the tuning.
    cuda_ops::clear_matmul_plans();
    CompareRow row;
    row.name = s.name;
    row.M = s.M;
    row.N = s.N;
    row.K = s.K;
    auto run_heuristic = [&] {
      set_matmul_policy({false, matmul_policy().autotune_budget_ms});
      matmul(c, a, b, s.trans_a, s.trans_b);
    };
    auto run_tuned = [&] {
      set_matmul_policy({true, matmul_policy().autotune_budget_ms});
      matmul(c, a, b, s.trans_a, s.trans_b);
    };
    cuda_ops::MatmulConfig heuristic_config;
    if (heuristic) {
      run_heuristic();
      heuristic_config = cuda_ops::last_matmul_tuning().chosen;
    }
    cuda_ops::MatmulTuning tuning;
    double first_call_ms = 0;
    if (tuned) {
      // The first call tunes (it synchronises the stream): its host time is the cost a training
      // run pays once per shape.
      SEQPAR_CUDA_CHECK(cudaStreamSynchronize(stream));
      const auto t0 = std::chrono::steady_clock::now();
      run_tuned();
      SEQPAR_CUDA_CHECK(cudaStreamSynchronize(stream));
      first_call_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      tuning = cuda_ops::last_matmul_tuning();
    }
    Timing th{}, tt{};
    if (heuristic && tuned) {
      std::tie(th, tt) = time_alternating(o.warmup, o.iters, stream, run_heuristic, run_tuned);
    } else if (heuristic) {
      th = time_runs(o.warmup, o.iters, stream, run_heuristic);
    } else {
      tt = time_runs(o.warmup, o.iters, stream, run_tuned);
    }
    if (heuristic) {
      row.heuristic_tflops = flops / (th.median_ms * 1e-3) / 1e12;
      out.write(line("seqpar", th, heuristic_config));
    }
    if (tuned) {
      nlohmann::json j = line("seqpar-autotune", tt, tuning.chosen);
      j["tune_ms"] = tuning.tune_ms;
      j["tune_budget_ms"] = matmul_policy().autotune_budget_ms;
      j["first_call_ms"] = first_call_ms;
      j["candidates"] = tuning.candidates;
      j["timed"] = tuning.timed;
      j["tune_best_ms"] = tuning.best_ms;
      j["tune_heuristic_ms"] = tuning.heuristic_ms;
      row.tuned_tflops = flops / (tt.median_ms * 1e-3) / 1e12;
      if (heuristic) j["vs_heuristic"] = row.tuned_tflops / row.heuristic_tflops;
      out.write(j);
      row.tune_ms = tuning.tune_ms;
      row.timed = tuning.timed;
      row.candidates = tuning.candidates;
      row.chosen = cuda_ops::matmul_config_str(tuning.chosen);
    }
    table.push_back(row);
  }
  set_matmul_policy({autotune_before, matmul_policy().autotune_budget_ms});
  if (heuristic && tuned) print_compare_table(table, matmul_policy().autotune_budget_ms);
  return 0;
}

#else

int run_bench_gemm(const BenchGemmOptions& o) {
  bench_shapes(o);  // still validates the options
  std::fprintf(stderr, "seqpar-diag: error: gemm needs the CUDA backend (this build has -DSEQPAR_CUDA=OFF)\n");
  return 1;
}

#endif

}  // namespace seqpar
