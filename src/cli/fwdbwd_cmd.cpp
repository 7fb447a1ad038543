// seqpar fwdbwd: one forward/backward (and optional AdamW step) of a batch, written in HF shapes.
#include <memory>
#include <string>

#include "attention/attention_backend.h"
#include "cli/commands.h"
#include "cli/kernel_env.h"
#include "core/log.h"
#include "io/safetensors.h"
#include "train/fwdbwd.h"

namespace seqpar {

namespace {

struct FwdBwdArgs {
  std::string model, input, out, sp_mode = "ulysses", layout = "zigzag", device = "cpu";
  std::string attn_implementation = "flash_attention_2";
  std::string transport = "auto";
  FwdBwdOptions options;
};

void run(FwdBwdArgs& a) {
  a.options.sp_mode = parse_sp_mode(a.sp_mode, "--sp-mode");
  a.options.layout = parse_sp_layout(a.layout, "--sp-layout");
  a.options.device = parse_device(a.device);
  a.options.transport = parse_transport(a.transport);
  a.options.kernels = process_kernel_policy();
  a.options.kernels.attention.backend = parse_attn_implementation(a.attn_implementation);
  SafetensorsData in = read_safetensors(a.input);
  const Tensor& ids = in.at("input_ids");
  const Tensor& labels = in.at("labels");
  log_info("fwdbwd: model {}, batch {}, sp={} ({}), device {}", a.model, shape_str(ids.shape()), a.options.sp_size,
           a.sp_mode, a.device);
  auto out = run_fwdbwd(a.model, ids, labels, a.options);
  if (out.empty()) return;  // a non-leader process of a launched job: rank 0 writes
  write_safetensors(a.out, out);
  for (auto& [name, t] : out)
    if (name == "loss" || name == "grad_norm") log_info("{} = {:.8g}", name, t.data<float>()[0]);
  log_info("wrote {} tensors to {}", out.size(), a.out);
}

}  // namespace

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda" || s.rfind("cuda:", 0) == 0) {
    SEQPAR_INPUT_CHECK(cuda_built(), "--device={}: this seqpar was built without CUDA (-DSEQPAR_CUDA=OFF)", s);
    const std::string index = s == "cuda" ? "0" : s.substr(5);
    SEQPAR_INPUT_CHECK(!index.empty() && index.find_first_not_of("0123456789") == std::string::npos,
                       "--device={}: expected cpu, cuda or cuda:N", s);
    return Device::cuda(std::stoi(index));
  }
  throw InputError("--device=" + s + ": expected cpu, cuda or cuda:N");
}

void add_fwdbwd_command(CLI::App& app, int& rc) {
  auto args = std::make_shared<FwdBwdArgs>();
  CLI::App* c = app.add_subcommand(
      "fwdbwd", "One forward + backward (+ optional AdamW step) of a batch; writes logits, loss and gradients in HF "
                "shapes (the numerics check against Hugging Face transformers)");
  c->add_option("--model", args->model, "HF model directory (config.json + *.safetensors)")->required();
  c->add_option("--input", args->input, "safetensors with input_ids [B,S] and labels [B,S] (int32; -100 = ignore)")
      ->required();
  c->add_option("--out", args->out, "output safetensors")->required();
  FwdBwdOptions& o = args->options;
  c->add_flag("--optimizer-step", o.optimizer_step, "also clip and take one AdamW step; writes grad_norm and param.*");
  c->add_flag("--activation-checkpointing", o.activation_checkpointing,
              "keep only each decoder layer's input in forward and recompute the layer in backward (the same "
              "results, less activation memory)");
  c->add_flag("--checkpoint-keep-attention", o.checkpoint_keep_attention,
              "with --activation-checkpointing: also keep each layer's attention output and context, so "
              "backward does not recompute attention");
  c->add_flag("--checkpoint-offload", o.checkpoint_offload,
              "with --activation-checkpointing: each layer's kept input waits in host memory (pinned, copies "
              "overlapped with compute) between its forward and its backward");
  c->add_option("--tiled-mlp-tokens", o.mlp_tile_tokens,
                "run each MLP over tiles of this many tokens, recomputed in backward (0 = untiled)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--lr", o.optimizer.adamw.lr, "AdamW learning rate")->capture_default_str();
  c->add_option("--beta1", o.optimizer.adamw.beta1, "AdamW beta1")->capture_default_str();
  c->add_option("--beta2", o.optimizer.adamw.beta2, "AdamW beta2")->capture_default_str();
  c->add_option("--eps", o.optimizer.adamw.eps, "AdamW eps")->capture_default_str();
  c->add_option("--weight-decay", o.optimizer.adamw.weight_decay, "AdamW decoupled weight decay")
      ->capture_default_str();
  c->add_option("--clip", o.optimizer.clip, "max global gradient norm (0 = no clipping)")->capture_default_str();
  c->add_option("--sp", o.sp_size, "sequence-parallel degree: ranks (threads) sharing the sequence")
      ->capture_default_str();
  c->add_option("--sp-mode", args->sp_mode, "ulysses | ring | hybrid")->capture_default_str();
  c->add_option("--ulysses-degree", o.ulysses_degree, "hybrid: ranks of each Ulysses group (the rest form the ring)");
  c->add_option("--sp-layout", args->layout, "token layout for ring/hybrid: zigzag | contiguous")
      ->capture_default_str();
  c->add_option("--device", args->device, "cpu | cuda | cuda:N")->capture_default_str();
  c->add_option("--attn-implementation", args->attn_implementation,
                "CUDA attention, by HF's names: flash_attention_2 | flash_attention_3 (seqpar's flash kernel), sdpa "
                "(cuDNN fused SDPA where it is exact, else flash); eager is refused")
      ->capture_default_str();
  c->add_option("--transport", args->transport,
                "auto | local | nccl: ranks as threads of this process (local), or one process per rank over "
                "NCCL when started by seqpar launch / torchrun / Slurm / mpirun (auto: nccl when launched with "
                "--device cuda)")
      ->capture_default_str();
  c->callback([args, &rc] {
    run(*args);
    rc = 0;
  });
}

}  // namespace seqpar
