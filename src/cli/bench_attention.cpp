#include "cli/bench_attention.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention/attention_backend.h"
#include "cli/bench_util.h"
#include "cli/kernel_env.h"
#include "core/error.h"
#include "core/tensor.h"

#if defined(SEQPAR_WITH_CUDA)
#include <cuda_runtime.h>

#include "attention/cuda/attention_cuda.h"
#include "attention/cuda/attn_launch.h"
#include "attention/cuda/cudnn_sdpa.h"
#include "core/cuda/stream.h"
#include "core/cuda_check.h"
#include "kernels/cuda/launchers.h"
#endif

namespace seqpar {

void add_bench_attention_options(CLI::App& cmd, BenchAttentionOptions& o) {
  cmd.add_option("--seq-lens", o.seq_lens, "S values, comma-separated")->capture_default_str();
  cmd.add_option("--head-dims", o.head_dims, std::string("D values, comma-separated (") + kCudaAttentionHeadDims + ")")->capture_default_str();
  cmd.add_option("--heads", o.heads, "H, query heads")->capture_default_str();
  cmd.add_option("--kv-heads", o.kv_heads, "Hkv, KV heads (0: same as --heads)")->capture_default_str();
  cmd.add_option("--causal", o.causal, "causal mask")->capture_default_str();
  cmd.add_option("--passes", o.passes, "what to time: fwd, fwd_bwd (comma-separated)")->capture_default_str();
  cmd.add_option("--warmup", o.warmup, "untimed runs per measurement")->capture_default_str();
  cmd.add_option("--iters", o.iters, "timed runs per measurement (the median is reported)")->capture_default_str();
  cmd.add_option("--out", o.out, "also append the JSON lines to this file");
  cmd.add_option("--device", o.device, "CUDA device index")->capture_default_str();
  cmd.add_option("--backend", o.backend,
                 "flash (seqpar's kernel), cudnn (cuDNN fused SDPA) or auto (per call and direction, what sdpa runs)")
      ->capture_default_str();
}

namespace {

struct Plan {
  std::vector<int64_t> seq_lens, head_dims;
  int64_t H, Hkv;
  bool fwd, fwd_bwd;
  AttentionBackend backend;
};

Plan validate(const BenchAttentionOptions& o) {
  Plan p;
  p.seq_lens = parse_int_list(o.seq_lens, "--seq-lens");
  p.head_dims = parse_int_list(o.head_dims, "--head-dims");
  for (int64_t D : p.head_dims)
    SEQPAR_INPUT_CHECK(cuda_attention_head_dim(D), "--head-dims: D={} is not supported by the CUDA attention ({})", D,
                       kCudaAttentionHeadDims);
  p.H = o.heads;
  p.Hkv = o.kv_heads == 0 ? o.heads : o.kv_heads;
  SEQPAR_INPUT_CHECK(p.H > 0 && p.Hkv > 0 && p.H % p.Hkv == 0,
                     "--heads={} must be a positive multiple of --kv-heads={}", o.heads, p.Hkv);
  SEQPAR_INPUT_CHECK(o.iters > 0 && o.warmup >= 0, "--iters={} must be > 0 and --warmup={} >= 0", o.iters, o.warmup);
  p.fwd = p.fwd_bwd = false;
  std::stringstream ss(o.passes);
  std::string item;
  while (std::getline(ss, item, ',')) {
    SEQPAR_INPUT_CHECK(item == "fwd" || item == "fwd_bwd", "--passes={}: '{}' is neither fwd nor fwd_bwd", o.passes,
                       item);
    (item == "fwd" ? p.fwd : p.fwd_bwd) = true;
  }
  SEQPAR_INPUT_CHECK(p.fwd || p.fwd_bwd, "--passes={} names nothing to time", o.passes);
  SEQPAR_INPUT_CHECK(o.backend == "flash" || o.backend == "cudnn" || o.backend == "auto",
                     "--backend={} must be flash, cudnn or auto", o.backend);
  p.backend = parse_attention_backend(o.backend);
  return p;
}

}  // namespace

#if defined(SEQPAR_WITH_CUDA)

int run_bench_attention(const BenchAttentionOptions& o) {
  const Plan plan = validate(o);
  int count = 0;
  SEQPAR_CUDA_CHECK(cudaGetDeviceCount(&count));
  SEQPAR_INPUT_CHECK(o.device >= 0 && o.device < count, "--device={} but this machine has {} CUDA device(s)",
                     o.device, count);
  SEQPAR_CUDA_CHECK(cudaSetDevice(o.device));
  cudaDeviceProp prop{};
  SEQPAR_CUDA_CHECK(cudaGetDeviceProperties(&prop, o.device));
  const Device dev = Device::cuda(o.device);
  JsonLines sink(o.out);
  cudaStream_t stream = current_stream();
  // The environment's kernel choices (tiles, kernel families, cuDNN's graph) with this run's backend.
  AttentionPolicy policy = process_kernel_policy().attention;
  policy.backend = plan.backend;
  uint64_t seed = 1;
  for (int64_t D : plan.head_dims) {
    for (int64_t S : plan.seq_lens) {
      const int64_t H = plan.H, Hkv = plan.Hkv;
      // Random operands (never zeros); one causal sequence, metadata already on the device.
      Tensor q = Tensor::empty({S, H, D}, DType::kBF16, dev), dout = Tensor::empty({S, H, D}, DType::kBF16, dev);
      Tensor k = Tensor::empty({S, Hkv, D}, DType::kBF16, dev), v = Tensor::empty({S, Hkv, D}, DType::kBF16, dev);
      for (Tensor* t : {&q, &k, &v, &dout})
        cuda_kernels::fill_uniform(t->raw(), DType::kBF16, t->numel(), seed++, -1.f, 1.f, stream);
      Tensor out = Tensor::empty({S, H, D}, DType::kBF16, dev), lse = Tensor::empty({S, H}, DType::kF32, dev);
      // The backward writes (=) its gradients, as PyTorch's does: no zero-fill, no read-add.
      Tensor dq = Tensor::empty({S, H, D}, DType::kBF16, dev);
      Tensor dk = Tensor::empty({S, Hkv, D}, DType::kBF16, dev), dv = Tensor::empty({S, Hkv, D}, DType::kBF16, dev);
      // Metadata on the device for the flash kernel; cuDNN reads the document layout on the host.
      const TokenMeta host_meta = token_meta_from_cu_seqlens({0, static_cast<int32_t>(S)});
      const TokenMeta meta = plan.backend != AttentionBackend::kFlash
                                 ? host_meta
                                 : TokenMeta{host_meta.seg.to(dev), host_meta.pos.to(dev)};
      // Which path each call took, counted over the runs of a pass (every timed run must be the
      // chosen backend's, not a fallback).
      AttnPath fwd_ran = AttnPath::kNone, bwd_ran = AttnPath::kNone;
      const AttnArgs args{meta, meta, o.causal, static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))), policy};
      AttnArgs fwd_args = args, bwd_args = args;
      fwd_args.ran = &fwd_ran;
      bwd_args.ran = &bwd_ran;
      const double fwd_flops = 4.0 * S * S * H * D * (o.causal ? 0.5 : 1.0);

      for (int pass = 0; pass < 2; ++pass) {
        const bool with_bwd = pass == 1;
        if (with_bwd ? !plan.fwd_bwd : !plan.fwd) continue;
        std::map<AttnPath, int64_t> fwd_paths, bwd_paths;
        auto step = [&] {
          cuda_attn::attn_forward(out, lse, q, k, v, fwd_args);
          ++fwd_paths[fwd_ran];
          if (with_bwd) {
            cuda_attn::attn_backward(dq, dk, dv, dout, q, k, v, out, lse, bwd_args, GradMode::kWrite);
            ++bwd_paths[bwd_ran];
          }
        };
        for (int i = 0; i < o.warmup; ++i) step();
        std::vector<Event> start, stop;
        for (int i = 0; i < o.iters; ++i) {
          start.emplace_back(true);
          stop.emplace_back(true);
        }
        for (int i = 0; i < o.iters; ++i) {
          start[i].record(stream);
          step();
          stop[i].record(stream);
        }
        SEQPAR_CUDA_CHECK(cudaStreamSynchronize(stream));
        std::vector<double> ms(o.iters);
        for (int i = 0; i < o.iters; ++i) ms[i] = stop[i].elapsed_ms(start[i]);
        std::sort(ms.begin(), ms.end());
        const double median = ms[ms.size() / 2];
        const double flops = with_bwd ? 3.5 * fwd_flops : fwd_flops;
        const cuda_attn::FwdTile ft = cuda_attn::fwd_tile(static_cast<int>(D), policy.fwd_tile);
        const cuda_attn::BwdTile bt = cuda_attn::bwd_tile(static_cast<int>(D), policy.bwd_tile);
        nlohmann::ordered_json j = {{"bench", "attention"},
                            {"impl", fmt::format("seqpar_{}", attention_backend_name(plan.backend))},
                            {"S", S},
                            {"H", H},
                            {"Hkv", Hkv},
                            {"D", D},
                            {"causal", o.causal},
                            {"pass", with_bwd ? "fwd_bwd" : "fwd"},
                            {"dtype", "bf16"},
                            {"grad_mode", "write"},
                            {"ms", median},
                            {"ms_min", ms.front()},
                            {"tflops", flops / (median * 1e-3) / 1e12},
                            {"iters", o.iters},
                            {"fwd_tile", fmt::format("{}x{}x{}", ft.bm, ft.bn, ft.warps)},
                            {"bwd_tile", fmt::format("{}x{}x{}", bt.bm, bt.bn, bt.warps)},
                            {"device", prop.name},
                            {"date", utc_now("%Y-%m-%d")}};
        if (plan.backend == AttentionBackend::kAuto) {
          // The path every run of each direction took (auto chooses per call and direction).
          auto ran = [](std::map<AttnPath, int64_t>& paths) {
            std::string r;
            for (const auto& [path, n] : paths)
              r += fmt::format("{}{} x{}", r.empty() ? "" : ", ", attn_path_name(path), n);
            return r;
          };
          j["fwd_path"] = ran(fwd_paths);
          if (with_bwd) j["bwd_path"] = ran(bwd_paths);
        }
        if (plan.backend == AttentionBackend::kCudnn) {
          // Every timed run must have been cuDNN's, not the flash fallback.
          const int64_t runs = o.warmup + o.iters;
          j.erase("fwd_tile");
          j.erase("bwd_tile");
          j["cudnn_version"] = cuda_attn::cudnn_runtime_version();
          // Which cuDNN graph ran (SEQPAR_CUDNN_DENSE, cudnn_sdpa.h): dense for every run, ragged
          // for every run, or a mix (a dense plan cuDNN refused falls back to ragged, with a warning).
          auto graph = [&](std::map<AttnPath, int64_t>& paths) {
            const int64_t dense = paths[AttnPath::kCudnnDense];
            return dense == runs ? "dense" : dense == 0 ? "ragged" : "mixed";
          };
          auto on_cudnn = [](std::map<AttnPath, int64_t>& paths) {
            return paths[AttnPath::kCudnnDense] + paths[AttnPath::kCudnnRagged];
          };
          j["cudnn_graph"] = graph(fwd_paths);
          if (with_bwd) j["cudnn_graph_bwd"] = graph(bwd_paths);
          j["cudnn_dense_env"] = policy.cudnn_dense == CudnnDense::kOn ? 1 : 0;
          if (on_cudnn(fwd_paths) != runs || (with_bwd && on_cudnn(bwd_paths) != runs))
            j["error"] = "cuDNN fell back to the flash kernel for some runs (see the warnings)";
        }
        sink.write(j);
      }
    }
  }
  return 0;
}

#else

int run_bench_attention(const BenchAttentionOptions& o) {
  validate(o);  // still validates the options
  std::fprintf(stderr, "seqpar: error: bench attention needs the CUDA backend (this build has -DSEQPAR_CUDA=OFF)\n");
  return 1;
}

#endif

}  // namespace seqpar
