#include "cli/bench_train.h"

#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "cli/kernel_env.h"
#include "comm/dist_env.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/log.h"
#include "core/profile.h"
#include "data/token_file.h"
#include "io/hf_config.h"
#include "train/memory_plan.h"
#include "train/trainer.h"

namespace seqpar {

TrainConfig BenchTrainOptions::defaults() {
  TrainConfig c;
  c.parallel.sp = 1;
  c.data.micro_batch = 1;
  c.schedule.steps = 4;
  c.parallel.device = Device::cuda(0);
  // A benchmark's optimizer: a small lr (the weights stay near their init), clipping as HF's.
  c.optimizer.adamw.lr = 1e-5f;
  c.optimizer.clip = 1.0;
  return c;
}

void add_bench_train_options(CLI::App& cmd, BenchTrainOptions& o) {
  cmd.add_option("--preset", o.preset, "model size: " + preset_choices())
      ->check(CLI::IsMember(llama_preset_names()))
      ->capture_default_str();
  cmd.add_option("--seq-lens", o.seq_lens, "sequence lengths, comma-separated")->capture_default_str();
  cmd.add_option("--out", o.out, "also append the JSON lines here");
  cmd.add_option("--layers", o.layers, "number of layers instead of the model's (0: the model's)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--sliding-window", o.sliding_window,
                 "sliding window of every layer instead of the model's (-1: the model's, 0: none, W: a token "
                 "sees itself and the W - 1 tokens before it)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 30))
      ->capture_default_str();
  add_setting_options(cmd, o.train, kBenchTrainCommand);
  // Here an empty --model means the preset, not train's built-in tiny Llama.
  cmd.get_option("--model")->description("HF model directory instead of a preset (its config.json and weights)");
}

namespace {

using json = nlohmann::json;

// The profile's calls and times multiplied by `factor` (per step from the sum over steps).
std::vector<ProfileEntry> scaled_profile(std::vector<ProfileEntry> entries, double factor) {
  for (ProfileEntry& e : entries) {
    e.ms *= factor;
    e.calls = static_cast<int64_t>(std::llround(static_cast<double>(e.calls) * factor));
  }
  return entries;
}

// FLOPs of one training step (see bench_train.h).
double step_flops(const LlamaConfig& c, int64_t seq_len, int64_t sequences) {
  const double C = static_cast<double>(c.hidden_size), F = static_cast<double>(c.intermediate_size);
  const double HD = static_cast<double>(c.num_heads * c.head_dim),
               KD = static_cast<double>(c.num_kv_heads * c.head_dim);
  const double mlp_mats = c.mlp == MlpKind::kSwiGlu ? 3 : 2;  // gate, up, down | up, down (GELU: GPT)
  const double per_layer = C * HD * 2 + C * KD * 2 + mlp_mats * C * F + 2 * C;
  const double params = static_cast<double>(c.num_layers) * per_layer + C + static_cast<double>(c.vocab_size) * C;
  const double tokens = static_cast<double>(seq_len) * static_cast<double>(sequences);
  const double S = static_cast<double>(seq_len);
  // Query-key pairs a causal layer computes: S²/2, less the (S − W)²/2 outside a sliding window W.
  double attention = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const double W = static_cast<double>(c.layer_window(l));
    const double pairs = W > 0 && W < S ? (S * S - (S - W) * (S - W)) / 2 : S * S / 2;
    attention += 3.5 * 4 * pairs * HD * static_cast<double>(sequences);
  }
  return 6 * params * tokens + attention;
}

}  // namespace

int run_bench_train(const BenchTrainOptions& o) {
  const std::vector<int64_t> seq_lens = parse_int_list(o.seq_lens, "--seq-lens");
  const TrainConfig& base = o.train;
  SEQPAR_INPUT_CHECK(base.schedule.steps >= 1, "--steps={} must be >= 1 (with 2 or more the first is not timed)",
                     base.schedule.steps);
  SEQPAR_INPUT_CHECK(base.data.micro_batch >= 1, "--micro-batch={} must be >= 1", base.data.micro_batch);
  const Device device = base.parallel.device;
  const Transport transport = base.parallel.transport;
  const int sp = base.parallel.sp;
  LlamaConfig model = base.model.dir.empty() ? llama_preset(o.preset) : load_hf_llama_config(base.model.dir);
  SEQPAR_INPUT_CHECK(o.layers == 0 || base.model.dir.empty(),
                     "--layers={}: the layer count of a --model directory is its checkpoint's (give a --preset)",
                     o.layers);
  if (o.layers > 0) model.num_layers = o.layers;
  if (o.sliding_window >= 0) {
    model.sliding_window = o.sliding_window;
    model.sliding_layers.assign(static_cast<size_t>(model.num_layers), o.sliding_window > 0);
  } else if (!model.sliding_layers.empty()) {
    model.sliding_layers.resize(static_cast<size_t>(model.num_layers), model.sliding_layers.back());
  }
  // Under a launcher the world is the launch's: dp fills what sp leaves.
  int dp = 1;
  if (device.is_cuda() && job_transport(transport, device) == Transport::kNccl) {
    const DistEnv env = read_dist_env(process_env());
    SEQPAR_INPUT_CHECK(sp >= 1 && env.world_size % sp == 0, "--sp={} must divide the launch's {} processes", sp,
                       env.world_size);
    dp = env.world_size / sp;
  }
  const bool leader = hosts_leader(device, transport);
  const std::string dir = (std::filesystem::temp_directory_path() /
                           fmt::format("seqpar-bench-train-{}-{}", static_cast<long>(::getpid()), std::time(nullptr)))
                              .string();
  std::filesystem::create_directories(dir);
  JsonLines out(leader ? o.out : std::string());
  for (int64_t S : seq_lens) {
    // Synthetic data: one document per sequence, random tokens.
    const int64_t sequences = static_cast<int64_t>(base.data.micro_batch) * dp;
    const std::string data = fmt::format("{}/tokens_{}.bin", dir, S);
    {
      std::mt19937_64 rng(static_cast<uint64_t>(S));
      std::vector<std::vector<int32_t>> docs(static_cast<size_t>(sequences * base.schedule.steps));
      for (auto& d : docs) {
        d.resize(static_cast<size_t>(S));
        for (auto& t : d) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(model.vocab_size));
      }
      write_token_file(data, docs);
    }
    // The user's settings, on synthetic data: one document per sequence, no evaluation, each step
    // timed to its end.
    TrainConfig c = base;
    c.model.arch = model;
    c.data.path = data;
    c.data.shuffle = false;
    c.data.task.seq_len = S;
    c.schedule.warmup_steps = 1;
    c.parallel.dp_replicate = dp;
    c.kernels = process_kernel_policy();
    c.logging.eval_every = 0;
    // Progress on stderr (the JSON lines go to stdout): the setup's phases and every step, so a
    // long run (an 8B model's setup and steps take minutes) shows where it is.
    c.logging.log_every = 1;
    c.logging.quiet = false;
    c.logging.time_steps = true;
    // checkpoint_placement=auto: chosen for this length here (as the trainer would), so the line and
    // the plan name the placement that ran.
    if (c.memory.checkpoint_placement == "auto" && c.memory.activation_checkpointing) {
      const int ranks = job_transport(transport, device) == Transport::kLocal ? sp * dp : 1;
      const std::string chosen = auto_checkpoint_placement(c, model, ranks);
      if (!chosen.empty()) c.memory.checkpoint_placement = chosen;
    }
    json line = {{"bench", "train"},
                 {"impl", "seqpar"},
                 {"model", base.model.dir.empty() ? o.preset : base.model.dir},
                 {"layers", model.num_layers},
                 {"sliding_window", model.sliding_layers.empty() || !model.sliding_layers[0] ? 0 : model.sliding_window},
                 {"seq_len", S},
                 {"micro_batch", base.data.micro_batch},
                 {"sp", sp},
                 {"sp_mode", sp_mode_name(base.parallel.sp_mode)},
                 {"dp", dp},
                 {"activation_checkpointing", base.memory.activation_checkpointing},
                 {"checkpoint_keep_attention", base.memory.checkpoint_keep_attention},
                 {"checkpoint_offload", base.memory.checkpoint_offload},
                 {"checkpoint_placement", c.memory.checkpoint_placement},
                 {"attn_implementation", attn_implementation_name(base.model.attn_implementation)},
                 {"tiled_mlp_tokens", base.memory.mlp_tile_tokens},
                 {"tiled_loss_tokens", base.memory.loss_tile_tokens},
                 {"zero_stage", base.memory.zero_stage},
                 {"offload_optimizer", offload_device_name(base.memory.offload_optimizer)},
                 {"offload_param", offload_device_name(base.memory.offload_param)},
                 {"offload_gradients", base.memory.offload_gradients},
                 {"device", device.str()}};
    if (c.memory.checkpoint_placement != "auto") {  // (auto that fits nowhere: the trainer names it)
      // The plan's two peaks beside the measured ones (docs/memory.md: the plan within 5%).
      const MemoryPlan plan = plan_memory(memory_plan_input(c, model));
      line["plan_peak_gib"] = static_cast<double>(plan.peak_bytes) / (1ll << 30);
      line["plan_host_gib"] = static_cast<double>(plan.host_bytes) / (1ll << 30);
    }
    try {
      allocator_for(device).reset_peak();  // this length's peak, not the previous one's
      const TrainResult r = run_training(c);
      if (r.step_seconds.empty()) continue;  // not the leader's process
      // The first step is not timed (first-use costs: plans, autotune) unless it is the only one (a
      // step at a length that takes minutes, where those costs are noise: "timed_steps" says which).
      // Nor is the last of three or more: it waits for its own optimizer step, which every other step
      // of an offloaded optimizer overlaps with the next forward (the steady state is the steps between).
      const size_t n = r.step_seconds.size();
      const size_t skip = n > 1 ? 1 : 0, drop_last = n > 2 ? 1 : 0;
      std::vector<double> timed(r.step_seconds.begin() + static_cast<std::ptrdiff_t>(skip),
                                r.step_seconds.end() - static_cast<std::ptrdiff_t>(drop_last));
      line["timed_steps"] = skip == 0   ? "the only step (with its first-use costs)"
                            : drop_last ? "steps 2 to the one before the last"
                                        : "step 2 (with the wait for its own optimizer step)";
      std::sort(timed.begin(), timed.end());
      const double secs = timed[timed.size() / 2];
      const int world = sp * dp;
      line["step_ms"] = secs * 1e3;
      line["tokens_per_s_per_gpu"] = static_cast<double>(S * sequences) / secs / world;
      line["tflops_per_gpu"] = step_flops(model, S, sequences) / secs / world / 1e12;
      // The timed steps' peak (the first step's also holds the run's setup, e.g. a CPU run's host
      // copy of the initial weights).
      const int64_t peak =
          *std::max_element(r.step_peak_bytes.begin() + static_cast<std::ptrdiff_t>(skip), r.step_peak_bytes.end());
      line["peak_mem_gib"] = static_cast<double>(peak) / (1024.0 * 1024.0 * 1024.0);
      // The process's resident host peak (ru_maxrss: every host byte touched, pinned or not, the
      // initial weights' host copy included).
      struct rusage ru {};
      getrusage(RUSAGE_SELF, &ru);
      line["host_peak_gib"] = static_cast<double>(ru.ru_maxrss) / (1024.0 * 1024.0);
      line["loss"] = r.losses.back();
      if (base.logging.profile && r.profile_steps > 0) {
        const double per = 1.0 / static_cast<double>(r.profile_steps);
        const double wall_ms = r.profile_seconds * 1e3 * per;
        const std::vector<ProfileEntry> step = scaled_profile(r.profile, per);
        std::fprintf(stderr, "profile, S=%lld, per step (mean of %lld steps, %.1f ms of wall each):\n%s",
                     static_cast<long long>(S), static_cast<long long>(r.profile_steps), wall_ms,
                     format_profile(step, wall_ms, 40).c_str());
        json top = json::array();
        for (const ProfileEntry& e : step)
          if (top.size() < 40) top.push_back({{"op", e.name}, {"calls", e.calls}, {"ms", e.ms}});
        line["profile"] = top;
        line["profile_outside_ms"] = wall_ms - ops_ms(step);
      }
    } catch (const std::exception& e) {
      std::string what = e.what();
      line["error"] = what.substr(0, 300);  // e.g. out of memory: the line says so, the next length runs
    }
    std::filesystem::remove(data);
    if (!leader) continue;
    line["date"] = utc_now("%Y-%m-%dT%H:%M:%SZ");
    out.write(line);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}

}  // namespace seqpar
