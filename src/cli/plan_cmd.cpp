// seqpar plan: will it fit? The per-GPU memory of a training step, by component, before any GPU
// work (train/memory_plan.h; docs/memory.md).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/kernel_env.h"
#include "core/error.h"
#include "io/hf_config.h"
#include "parallel/sp_attention.h"
#include "attention/attention_backend.h"
#include "train/memory_plan.h"
#include "train/memory_settings.h"

namespace seqpar {

namespace {

struct PlanArgs {
  MemoryPlanInput in;
  std::string model_dir, preset = "llama-3.2-1b", sp_mode = "ulysses", device = "cuda", attn = "sdpa";
  int gpus = 0;
  int gpus_per_host = 0;          // 0: all --gpus on one host (they share its memory)
  double gpu_memory_gib = 139.8;  // an H200 as the CUDA runtime reports it
  double host_memory_gib = 0;     // 0: this machine's MemAvailable
  std::string offload_optimizer = "none", offload_param = "none";
  bool json = false, longest = false, choose_levers = false;
};

void run(PlanArgs& a) {
  MemoryPlanInput& in = a.in;
  in.model = a.model_dir.empty() ? llama_preset(a.preset) : load_hf_llama_config(a.model_dir);
  SEQPAR_INPUT_CHECK(a.device == "cuda" || a.device == "cpu", "--device={} must be cuda or cpu", a.device);
  in.cuda = a.device == "cuda";
  in.cudnn_attention = attn_implementation_of(a.attn) == AttnImplementation::kSdpa;
  if (a.gpus == 0 && in.sp == 0) a.gpus = in.sp = 1;  // one GPU
  if (a.gpus == 0) a.gpus = in.sp;
  if (in.sp == 0) in.sp = a.gpus;
  SEQPAR_INPUT_CHECK(a.gpus >= 1 && in.sp >= 1 && a.gpus % in.sp == 0,
                     "--gpus={} must be a multiple of --sp={} (the rest is data parallelism)", a.gpus, in.sp);
  in.world = a.gpus;
  if (in.ulysses_head_groups == 0) in.ulysses_head_groups = process_kernel_policy().ulysses_head_groups;
  const SpMode mode = parse_sp_mode(a.sp_mode, "--sp-mode");
  if (mode == SpMode::kUlysses) {
    in.ulysses_degree = in.sp;
  } else if (mode == SpMode::kRing) {
    in.ulysses_degree = 1;
  } else {
    SEQPAR_INPUT_CHECK(in.ulysses_degree >= 1 && in.sp % in.ulysses_degree == 0,
                       "--ulysses-degree={} must divide --sp={} for --sp-mode hybrid", in.ulysses_degree, in.sp);
  }
  in.memory.offload_optimizer = parse_offload_device(a.offload_optimizer, "--offload-optimizer");
  in.memory.offload_param = parse_offload_device(a.offload_param, "--offload-param");
  const int64_t capacity = static_cast<int64_t>(a.gpu_memory_gib * (1ll << 30));
  SEQPAR_INPUT_CHECK(a.host_memory_gib >= 0, "--host-memory-gib={} must be >= 0 (0 = this machine's MemAvailable)",
                     a.host_memory_gib);
  // The host limit: the flag, else this machine's MemAvailable (a default only: some machines grow
  // MemTotal lazily, and the GPU machine is not this one).
  SEQPAR_INPUT_CHECK(a.gpus_per_host >= 0, "--gpus-per-host={} must be >= 0 (0 = all --gpus on one host)",
                     a.gpus_per_host);
  const int per_host = a.gpus_per_host > 0 ? std::min(a.gpus_per_host, a.gpus) : a.gpus;
  // The plan is per rank; the ranks of one host share its memory.
  const int64_t host_total = host_memory_capacity(a.host_memory_gib);
  const int64_t host_capacity = host_total / per_host;
  // The CPU backend's device memory is the host's: its peak is held against the host's share per rank.
  const int64_t device_capacity = in.cuda ? capacity : host_capacity;
  // checkpoint_placement=auto: seqpar train chooses the placement within auto_placement_capacity of a GPU's total (less
  // 2%), and so do --longest, the levers and the placement here, for a GPU of --gpu-memory-gib; whether the plan fits
  // is held against the whole of it, as the trainer's check is.
  const bool auto_placement = in.memory.checkpoint_placement == "auto" && in.memory.activation_checkpointing;
  const int64_t choose_capacity =
      auto_placement && in.cuda ? auto_placement_capacity(device_capacity) : device_capacity;
  const std::string fits_in = in.cuda ? fmt::format("{:.1f} GiB per GPU and {:.1f} GiB of host memory",
                                                    a.gpu_memory_gib, host_capacity / double(1ll << 30))
                                      : fmt::format("{:.1f} GiB of host memory per rank (the CPU backend's)",
                                                    host_capacity / double(1ll << 30));
  std::string host_source =
      a.host_memory_gib > 0
          ? fmt::format("--host-memory-gib {}", a.host_memory_gib)
          : fmt::format(
                "this machine's MemAvailable ({:.1f} of MemTotal {:.1f} GiB, /proc/meminfo; some machines grow "
                "it lazily and the GPU machine may differ: --host-memory-gib overrides it)",
                host_total / double(1ll << 30), host_memory_total_bytes() / double(1ll << 30));
  host_source += fmt::format(", shared by {} GPU(s) of the host: {:.1f} GiB per rank", per_host,
                             host_capacity / double(1ll << 30));
  std::string chose;
  SEQPAR_INPUT_CHECK(!a.choose_levers || a.longest, "--choose-levers needs --longest");
  if (a.longest) {
    SEQPAR_INPUT_CHECK(a.gpu_memory_gib > 0, "--gpu-memory-gib={} must be > 0", a.gpu_memory_gib);
    // Multiples of 1024 tokens per rank, so every rank's share is whole.
    int64_t longest = 0;
    if (a.choose_levers) {
      const LeverChoice c = choose_levers(in, choose_capacity, 1024ll * in.sp, host_capacity);
      in.memory = c.memory;
      longest = c.seq_len;
      chose = c.levers.empty() ? "nothing added" : c.levers;
    } else {
      longest = longest_fitting_seq_len(in, choose_capacity, 1024ll * in.sp, host_capacity);
    }
    SEQPAR_INPUT_CHECK(longest > 0, "not even {} tokens fit in {} with these settings", 1024ll * in.sp, fits_in);
    in.seq_len = longest;
  }
  SEQPAR_INPUT_CHECK(in.seq_len >= 1, "--seq-len is required (or --longest: the longest sequence that fits)");
  if (auto_placement) {  // (choose_levers keeps the placement and the checkpointing)
    in.memory.validate();
    const std::string source = in.cuda ? fmt::format("--gpu-memory-gib {} less the 2% seqpar train leaves",
                                                     a.gpu_memory_gib)
                                       : "the host's memory per rank: the CPU backend's";
    const std::string chosen = choose_checkpoint_placement(in, choose_capacity, host_capacity);
    SEQPAR_INPUT_CHECK(!chosen.empty(),
                       "--checkpoint-placement auto: no placement of the layers' inputs fits {} tokens in {:.2f} GiB "
                       "per GPU ({}) and {:.1f} GiB of host memory (even with all but one recomputed); {}",
                       in.seq_len, choose_capacity / double(1ll << 30), source,
                       host_capacity / double(1ll << 30),
                       describe_levers_to_fit(in, levers_to_fit(in, choose_capacity, host_capacity)));
    in.memory.checkpoint_placement = compact_checkpoint_placement(chosen);
    if (!a.json)
      std::printf("checkpoint placement chosen: --checkpoint-placement %s (within %.2f GiB: %s)\n",
                  in.memory.checkpoint_placement.c_str(), choose_capacity / double(1ll << 30), source.c_str());
  }
  const MemoryPlan p = plan_memory(in);
  const bool fits = device_capacity <= 0 || p.peak_bytes <= device_capacity;
  const bool host_ok = host_capacity <= 0 || p.host_start_bytes() <= host_capacity;
  // What would make a run that does not fit fit, at its length (the plan's levers, cheapest first).
  LeverChoice to_fit;
  if (!fits || !host_ok) to_fit = levers_to_fit(in, choose_capacity, host_capacity);
  if (!a.json) {
    if (a.longest)
      std::printf("longest sequence that fits in %s: %lld tokens (%lld per rank)\n", fits_in.c_str(),
                  static_cast<long long>(in.seq_len), static_cast<long long>(p.tokens_per_rank));
    if (a.choose_levers) std::printf("levers chosen: %s\n", chose.c_str());
    std::printf("host memory limit: %s\n", host_source.c_str());
    std::fputs(format_memory_plan(in, p, device_capacity, host_capacity).c_str(), stdout);
    if (!fits || !host_ok) std::printf("%s\n", describe_levers_to_fit(in, to_fit).c_str());
    return;
  }
  nlohmann::ordered_json j = {{"seq_len", in.seq_len},
                              {"tokens_per_rank", p.tokens_per_rank},
                              {"kept_bytes_per_token_layer", p.kept_per_token_layer},
                              {"layers_not_checkpointed", p.full_layers},
                              {"full_bytes_per_token_layer", p.full_per_token_layer},
                              {"resident_bytes", p.resident_bytes},
                              {"peak_bytes", p.peak_bytes},
                              {"peak_gib", static_cast<double>(p.peak_bytes) / (1ll << 30)},
                              {"peak_phase", p.peak_phase},
                              {"fits", fits},
                              {"sp_buffer_bytes", p.sp_buffers},
                              {"host_offload_bytes", p.host_offload_bytes},
                              {"host_bytes", p.host_bytes},
                              {"host_gib", static_cast<double>(p.host_bytes) / (1ll << 30)},
                              {"host_pinned_bytes", p.host_pinned_bytes},
                              {"host_capacity_bytes", host_capacity},
                              // While the ranks start: the initial weights' copy and the process beside it.
                              {"host_start_bytes", p.host_start_bytes()},
                              {"host_fits", host_ok},
                              {"zero_stage", in.memory.zero_stage},
                              {"offload_optimizer", offload_device_name(in.memory.offload_optimizer)},
                              {"offload_param", offload_device_name(in.memory.offload_param)},
                              {"offload_gradients", in.memory.offload_gradients},
                              {"checkpoint_offload", in.memory.checkpoint_offload},
                              {"checkpoint_placement", p.input_places}};
  if (a.choose_levers) j["levers_chosen"] = chose;
  // Where it does not fit: the levers that make it fit at this length ("" when none does).
  if (!fits || !host_ok) j["fits_with"] = to_fit.levers;
  for (const auto& [name, bytes] : p.host) j["host"][name] = bytes;
  for (const auto& [name, bytes] : p.resident) j["resident"][name] = bytes;
  for (const auto& [name, bytes] : p.phases) j["phases"][name] = bytes;
  std::puts(j.dump().c_str());
}

}  // namespace

void add_plan_command(CLI::App& app, int& rc) {
  auto args = std::make_shared<PlanArgs>();
  MemoryPlanInput& in = args->in;
  in.sp = 0;
  CLI::App* c = app.add_subcommand(
      "plan",
      "Will it fit? The per-GPU memory of a training step by component (weights, gradients, optimizer, "
      "activations, the step's largest phase), predicted without a GPU");
  c->add_option("--model", args->model_dir, "HF model directory (its config.json)");
  c->add_option("--preset", args->preset, "a known size instead: " + preset_choices())
      ->capture_default_str();
  c->add_option("--seq-len", in.seq_len, "tokens per sequence (or --longest)");
  c->add_flag("--longest", args->longest,
              "find the longest sequence (a multiple of 1024 tokens per rank) that fits in --gpu-memory-gib");
  c->add_option("--micro-batch", in.micro_batch, "sequences per step per data-parallel rank")->capture_default_str();
  c->add_option("--gpus", args->gpus, "GPUs of the job (default: --sp); the ones --sp leaves are data parallel");
  c->add_option("--sp", in.sp, "sequence-parallel degree (default: --gpus)");
  c->add_option("--sp-mode", args->sp_mode, "ulysses | ring | hybrid")->capture_default_str();
  c->add_option("--ulysses-degree", in.ulysses_degree, "hybrid: ranks per Ulysses group");
  c->add_flag("--activation-checkpointing,--gradient-checkpointing", in.memory.activation_checkpointing,
              "keep only each layer's input");
  c->add_flag("--checkpoint-offload", in.memory.checkpoint_offload,
              "with --activation-checkpointing: the layers' kept inputs wait in host memory (two stay on the GPU)");
  c->add_option("--checkpoint-placement", in.memory.checkpoint_placement,
                "with --activation-checkpointing: where each layer's input waits, g (GPU) / h (host) / r "
                "(recomputed) per layer from the bottom, each optionally after a count (16g8h8r), or auto: the "
                "fewest recomputed, then offloaded, layers that fit --gpu-memory-gib and the host memory");
  c->add_flag("--checkpoint-keep-attention", in.memory.checkpoint_keep_attention,
              "with checkpointing: also keep attention's output and context");
  c->add_option("--tiled-mlp-tokens", in.memory.mlp_tile_tokens, "tiled MLP tile (0 = untiled)")->capture_default_str();
  c->add_option("--tiled-loss-tokens", in.memory.loss_tile_tokens, "tiled loss tile (0 = untiled)")
      ->capture_default_str();
  c->add_option("--zero-stage", in.memory.zero_stage,
                "ZeRO stage (1-2 shard the AdamW state and gradients over --gpus, 3 also the layers' weights)")
      ->capture_default_str();
  c->add_option("--offload-optimizer", args->offload_optimizer,
                "cpu: AdamW's f32 master weights and moments in host memory, the step on the CPU")
      ->capture_default_str();
  c->add_flag("--offload-gradients", in.memory.offload_gradients,
              "with --offload-optimizer cpu: the f32 gradients in pinned host memory, a layer at a time on the GPU");
  c->add_option("--offload-param", args->offload_param,
                "cpu (with --zero-stage 3): the decoder layers' weights in host memory, copied in per layer")
      ->capture_default_str();
  c->add_flag(
      "--no-offload-param-pin-memory", [args](int64_t) { args->in.memory.offload_param_pin_memory = false; },
      "with --offload-param cpu: the host weights pageable (not counted as pinned)");
  c->add_option("--host-memory-gib", args->host_memory_gib,
                "host memory to fit in (default 0: this machine's MemAvailable from /proc/meminfo, which some "
                "machines grow lazily; give the GPU machine's)")
      ->capture_default_str();
  c->add_option("--gpus-per-host", args->gpus_per_host,
                "GPUs sharing one host's memory (default: all --gpus); the host limit per rank is its share")
      ->capture_default_str();
  c->add_flag("--choose-levers", args->choose_levers,
              "with --longest: also choose optimizer offload, ZeRO-3, parameter offload and checkpoint offload "
              "(with checkpointing), and print what was chosen");
  c->add_option("--device", args->device, "cuda (bf16, f32 master weights) | cpu (f32)")->capture_default_str();
  c->add_option("--attn-implementation", args->attn,
                "sdpa (cuDNN where exact and faster: its backward's workspace is counted where it runs, on a Hopper) | "
                "flash_attention_2 | flash_attention_3")
      ->capture_default_str();
  c->add_flag("--fp16", in.fp16, "cuda's 16-bit type is fp16 (mixed_precision fp16; the same bytes as bf16)");
  c->add_option("--gpu-memory-gib", args->gpu_memory_gib, "GPU memory to fit in (an H200: 139.8)")
      ->capture_default_str();
  c->add_flag("--json", args->json, "one JSON object instead of the table");
  c->callback([args, &rc] {
    run(*args);
    rc = 0;
  });
}

}  // namespace seqpar
