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
  std::string model, input, out;
  bool optimizer_step = false;
  TrainConfig options;
};

void run(FwdBwdArgs& a) {
  a.options.kernels = process_kernel_policy();
  SafetensorsData in = read_safetensors(a.input);
  const Tensor& ids = in.at("input_ids");
  const Tensor& labels = in.at("labels");
  log_info("fwdbwd: model {}, batch {}, sp={} ({}), device {}", a.model, shape_str(ids.shape()), a.options.parallel.sp,
           sp_mode_name(a.options.parallel.sp_mode), a.options.parallel.device.str());
  const Tensor* position_ids = in.find("position_ids");  // packed documents, optional
  auto out = run_fwdbwd(a.model, ids, labels, a.options, a.optimizer_step, position_ids);
  if (out.empty()) return;  // a non-leader process of a launched job: rank 0 writes
  write_safetensors(a.out, out);
  for (auto& [name, t] : out)
    if (name == "loss" || name == "grad_norm") log_info("{} = {:.8g}", name, t.data<float>()[0]);
  log_info("wrote {} tensors to {}", out.size(), a.out);
}

}  // namespace

void add_fwdbwd_command(CLI::App& app, int& rc) {
  auto args = std::make_shared<FwdBwdArgs>();
  CLI::App* c = app.add_subcommand(
      "fwdbwd",
      "One forward + backward (+ optional AdamW step) of a batch; writes logits, loss and gradients in HF "
      "shapes (the numerics check against Hugging Face transformers)");
  c->add_option("--model", args->model, "HF model directory (config.json + *.safetensors)")->required();
  c->add_option("--input", args->input,
                "safetensors with input_ids [B,S] and labels [B,S] (int32; -100 = ignore), and optionally "
                "position_ids [B,S]: packed documents as HF packs them (each counts 0, 1, ...)")
      ->required();
  c->add_option("--out", args->out, "output safetensors")->required();
  c->add_flag("--optimizer-step", args->optimizer_step,
              "also clip and take one AdamW step; writes grad_norm and param.*");
  args->options.parallel.sp = 1;  // one rank unless --sp says
  add_setting_options(*c, args->options, kFwdBwdCommand);
  c->callback([args, &rc] {
    run(*args);
    rc = 0;
  });
}

}  // namespace seqpar
