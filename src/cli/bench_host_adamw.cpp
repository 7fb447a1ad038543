#include "cli/bench_host_adamw.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "cli/bench_util.h"
#include "core/error.h"
#include "core/tensor.h"
#include "model/llama.h"
#include "train/optimizer.h"

namespace seqpar {

void add_bench_host_adamw_options(CLI::App& cmd, BenchHostAdamWOptions& o) {
  cmd.add_option("--params", o.params, "elements updated per step (f32 weights, moments and gradients in host memory)")
      ->capture_default_str();
  cmd.add_option("--threads", o.threads, "thread counts, comma-separated; \"all\" = every core")->capture_default_str();
  cmd.add_option("--steps", o.steps, "timed steps (after one untimed); the median is reported")->capture_default_str();
  cmd.add_option("--out", o.out, "also append the JSON lines to this file");
}

int run_bench_host_adamw(const BenchHostAdamWOptions& o) {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (o.params < 1 || o.params > (int64_t{1} << 36))
    throw InputError(fmt::format("--params {}: must be in [1, 2^36]", o.params));
  if (o.steps < 1) throw InputError(fmt::format("--steps {}: must be >= 1", o.steps));
  std::string list = o.threads;
  for (size_t at; (at = list.find("all")) != std::string::npos;) list.replace(at, 3, std::to_string(cores));
  const std::vector<int64_t> threads = parse_int_list(list, "--threads");
  for (int64_t t : threads)
    if (t > 4096) throw InputError(fmt::format("--threads {}: at most 4096", t));

  const int64_t n = o.params, chunk = AdamW::kStreamChunk;
  fmt::print(stderr, "bench host-adamw: {} elements ({:.1f} GiB of f32 state and gradients), chunks of {}\n", n,
             16.0 * static_cast<double>(n) / (1 << 30), chunk);
  Tensor w = Tensor::empty({n}, DType::kF32), m = Tensor::empty({n}, DType::kF32), v = Tensor::empty({n}, DType::kF32),
         g = Tensor::empty({n}, DType::kF32), out = Tensor::empty({n}, DType::kBF16);
  {  // first touch by every core (as the optimizer fills its state), values of a trained model's scale
    HostThreads fill(cores);
    fill.ranges(n, LlamaParams::kFlatAlign, [&](int64_t lo, int64_t hi) {
      float *pw = w.data<float>(), *pm = m.data<float>(), *pv = v.data<float>(), *pg = g.data<float>();
      for (int64_t i = lo; i < hi; ++i) {
        const float x = static_cast<float>((static_cast<uint64_t>(i) * 2654435761u) % 2001) / 1000.f - 1.f;  // [-1, 1]
        pw[i] = 0.02f * x;
        pm[i] = 1e-4f * x;
        pv[i] = 1e-8f * (1.f + x);
        pg[i] = 1e-3f * x;
      }
      out.rows(lo, hi).zero();
    });
  }
  AdamWConfig adamw;
  adamw.lr = 1e-5f;
  adamw.beta2 = 0.95f;
  adamw.weight_decay = 0.1f;
  JsonLines lines(o.out);
  int64_t step = 0;
  for (int64_t t : threads) {
    HostThreads pool(static_cast<int>(t));
    std::vector<double> ms;
    for (int s = 0; s <= o.steps; ++s) {
      ++step;
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t lo = 0; lo < n; lo += chunk) {
        const int64_t hi = std::min(n, lo + chunk);
        host_adamw_chunk(pool, w.rows(lo, hi), m.rows(lo, hi), v.rows(lo, hi), g.rows(lo, hi), out.rows(lo, hi), adamw,
                         step, 1.f);
      }
      const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (s > 0) ms.push_back(dt);  // the first touches the code and the pool
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2], elems = static_cast<double>(n) / (med / 1e3);
    lines.write({{"bench", "host_adamw"},
                 {"impl", "seqpar"},
                 {"params", n},
                 {"threads", t},
                 {"cores", cores},
                 {"ms", med},
                 {"gelem_per_s", elems / 1e9},
                 {"gb_per_s", 30.0 * elems / 1e9},
                 {"ms_per_billion", med * 1e9 / static_cast<double>(n)},
                 {"date", utc_now("%Y-%m-%dT%H:%M:%SZ")}});
  }
  return 0;
}

}  // namespace seqpar
