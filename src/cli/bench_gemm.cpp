#include "cli/bench_gemm.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

#if defined(SEQPAR_WITH_CUDA)
#include <cuda_runtime.h>

#include "core/cuda/stream.h"
#include "core/cuda_check.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/ops_cuda.h"
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
  cmd.add_flag("--autotune", o.autotune, "pick each shape's cuBLASLt algorithm by timing the top candidates");
  cmd.add_option("--out", o.out, "also write the JSON lines to this file");
  cmd.add_option("--device", o.device, "CUDA device index")->capture_default_str();
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
  return v;
}

[[maybe_unused]] std::string today() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

}  // namespace

#if defined(SEQPAR_WITH_CUDA)

namespace {

struct Timing {
  double median_ms, min_ms;
};

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
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
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

class JsonOut {
 public:
  explicit JsonOut(const std::string& path) {
    if (path.empty()) return;
    file_.open(path);
    SEQPAR_INPUT_CHECK(file_.good(), "--out={}: cannot open for writing", path);
  }
  void write(const nlohmann::json& j) {
    const std::string line = j.dump();
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    if (file_.is_open()) file_ << line << "\n" << std::flush;
  }

 private:
  std::ofstream file_;
};

// The memory-bound ops at Llama-3.2-1B sizes (T tokens, C=2048, F=8192, H=32, D=64; the loss on a
// 4096-token tile of V=128256 logits), bf16 activations: achieved bytes per second against a
// device-to-device copy timed in the same run. bytes = the fewest an op must move (each input read
// once, each output written once).
void bench_ops(const BenchGemmOptions& o, Device dev, const cudaDeviceProp& prop, JsonOut& out) {
  const int64_t T = o.tokens, C = 2048, F = 8192, H = 32, D = 64, V = 128256, TL = 4096;
  const DType bf = DType::kBF16, f32 = DType::kF32;
  cudaStream_t stream = current_stream();
  uint64_t seed = 100;
  auto report = [&](const std::string& name, double bytes, const Timing& t, double copy_gbps) {
    const double gbps = bytes / (t.median_ms * 1e-3) / 1e9;
    nlohmann::json j = {{"bench", "op"},           {"impl", o.autotune ? "seqpar-autotune" : "seqpar"},
                        {"name", name},            {"bytes", bytes},
                        {"ms", t.median_ms},       {"ms_min", t.min_ms},
                        {"gbps", gbps},            {"of_copy", copy_gbps > 0 ? gbps / copy_gbps : 1.0},
                        {"tokens", T},             {"iters", o.iters},
                        {"device", prop.name},     {"date", today()}};
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
  JsonOut out(o.out);
  if (o.preset == "ops") {
    bench_ops(o, dev, prop, out);
    return 0;
  }
  cuda_ops::set_matmul_autotune(o.autotune);
  cudaStream_t stream = current_stream();
  uint64_t seed = 1;
  for (const GemmShape& s : shapes) {
    Tensor a = random_device(s.trans_a ? Shape{s.K, s.M} : Shape{s.M, s.K}, DType::kBF16, dev, seed++);
    Tensor b = random_device(s.trans_b ? Shape{s.N, s.K} : Shape{s.K, s.N}, DType::kBF16, dev, seed++);
    Tensor c = Tensor::empty({s.M, s.N}, DType::kBF16, dev);
    const Timing t = time_runs(o.warmup, o.iters, stream, [&] { matmul(c, a, b, s.trans_a, s.trans_b); });
    const double flops = 2.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * static_cast<double>(s.K);
    out.write({{"bench", "gemm"},
               {"impl", o.autotune ? "seqpar-autotune" : "seqpar"},
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
               {"iters", o.iters},
               {"device", prop.name},
               {"date", today()}});
  }
  return 0;
}

#else

int run_bench_gemm(const BenchGemmOptions& o) {
  bench_shapes(o);  // still validates the options
  std::fprintf(stderr, "seqpar: error: bench gemm needs the CUDA backend (this build has -DSEQPAR_CUDA=OFF)\n");
  return 1;
}

#endif

}  // namespace seqpar
