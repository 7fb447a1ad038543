// Merging defaults < DeepSpeed JSON < Accelerate YAML < flags into one TrainConfig, with the
// source of every value; and the learning-rate schedules. See config_resolve.h and docs/configs.md.
#include "train/config_resolve.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <type_traits>

#include "core/error.h"

namespace seqpar {

namespace {

namespace fs = std::filesystem;

std::string schedule_name(LrScheduleType t) { return lr_schedule_type_name(t); }

LrScheduleType schedule_type(const std::string& ds_name) {
  if (ds_name == "WarmupLR") return LrScheduleType::kWarmupLR;
  if (ds_name == "WarmupDecayLR") return LrScheduleType::kWarmupDecayLR;
  return LrScheduleType::kWarmupCosineLR;  // the parser accepts only these three
}

template <typename T>
std::string show(const T& v) {
  if constexpr (std::is_same_v<T, LrScheduleType>) {
    return schedule_name(v);
  } else if constexpr (std::is_same_v<T, AttnImplementation>) {
    return attn_implementation_name(v);
  } else if constexpr (std::is_same_v<T, OffloadDevice>) {
    return offload_device_name(v);
  } else if constexpr (std::is_same_v<T, SpMode>) {
    return sp_mode_name(v);
  } else if constexpr (std::is_same_v<T, Precision>) {
    return precision_name(v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.empty() ? "(none)" : v;
  } else {
    return fmt::format("{}", v);
  }
}

using R = const ResolvedConfig&;

bool is_linear_cosine(R r) { return r.train.schedule.lr.type == LrScheduleType::kLinearCosine; }
bool is_seqpar_schedule(LrScheduleType t) {
  return t == LrScheduleType::kLinearCosine || t == LrScheduleType::kLinear || t == LrScheduleType::kConstant;
}
bool has_warmup_steps(R r) {
  return is_linear_cosine(r) || r.train.schedule.lr.type == LrScheduleType::kLinear;
}
bool is_deepspeed_schedule(R r) { return !is_seqpar_schedule(r.train.schedule.lr.type); }
bool has_warmup_lrs(R r) {
  return r.train.schedule.lr.type == LrScheduleType::kWarmupLR ||
         r.train.schedule.lr.type == LrScheduleType::kWarmupDecayLR;
}
bool has_total_steps(R r) {
  return r.train.schedule.lr.type == LrScheduleType::kWarmupDecayLR ||
         r.train.schedule.lr.type == LrScheduleType::kWarmupCosineLR;
}
bool is_cosine(R r) { return r.train.schedule.lr.type == LrScheduleType::kWarmupCosineLR; }

// The printed settings that are not declared settings (train/config.h) of their own: values
// derived from several settings, and what the files say that seqpar records or checks. Printed
// after the declared ones, each with its value and whether it applies (null: always).
struct SettingDef {
  const char* name;
  std::string (*value)(R);
  bool (*applies)(R) = nullptr;
};

const SettingDef kDerived[] = {
    {"train_batch_size", [](R r) { return show(r.train_batch_size); }},
    {"world", [](R r) { return show(r.world); }},
    {"optimizer", [](R r) { return r.recorded.optimizer; }},
    {"warmup_min_lr", [](R r) { return show(r.train.schedule.lr.warmup_min_lr); }, has_warmup_lrs},
    {"warmup_max_lr", [](R r) { return show(r.train.schedule.lr.warmup_max_lr); }, has_warmup_lrs},
    {"warmup_num_steps", [](R r) { return show(r.train.schedule.lr.warmup_num_steps); }, is_deepspeed_schedule},
    {"warmup_type",
     [](R r) { return std::string(r.train.schedule.lr.warmup_type == WarmupType::kLog ? "log" : "linear"); },
     is_deepspeed_schedule},
    {"total_num_steps", [](R r) { return show(r.train.schedule.lr.total_num_steps); }, has_total_steps},
    {"warmup_min_ratio", [](R r) { return show(r.train.schedule.lr.warmup_min_ratio); }, is_cosine},
    {"cos_min_ratio", [](R r) { return show(r.train.schedule.lr.cos_min_ratio); }, is_cosine},
    {"sp_comm_dtype", [](R r) { return r.recorded.sp_comm_dtype; }},
    {"wall_clock_breakdown", [](R r) { return show(r.recorded.wall_clock_breakdown); }},
    {"seq_length_is_variable", [](R r) { return show(r.recorded.seq_length_is_variable); }},
    {"distributed_type", [](R r) { return r.recorded.distributed_type; }},
    {"num_processes",
     [](R r) { return r.recorded.num_processes > 0 ? show(r.recorded.num_processes) : std::string("(world)"); }},
    {"num_machines", [](R r) { return show(r.recorded.num_machines); }},
    {"machine_rank", [](R r) { return show(r.recorded.machine_rank); }},
    {"main_process_ip", [](R r) { return show(r.recorded.main_process_ip); }},
    {"main_process_port",
     [](R r) { return r.recorded.main_process_port > 0 ? show(r.recorded.main_process_port) : std::string("(none)"); }},
};

// The settings whose flags set these derived settings too (DeepSpeed's schedule parameters).
const std::pair<const char*, const char*> kDerivedFlags[] = {
    {"warmup_max_lr", "lr"}, {"warmup_num_steps", "warmup_steps"}, {"cos_min_ratio", "min_lr_ratio"}};

// A declared setting as --print-config shows it; whether it applies (seqpar's own schedule's
// parameters only with that schedule; the built-in model's sizes only without --model).
std::string display(const SettingDecl& d, R r) {
  if (d.name == "model" && r.train.model.dir.empty() && !r.train.model.preset.empty())
    return "preset " + r.train.model.preset + ", random init";
  const std::string v = d.get(r.train);
  return v.empty() ? d.empty_text : v;
}

// The loss scaler's settings (fp16 only).
bool is_scaler_setting(const std::string& name) {
  for (const char* s : {"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                        "consecutive_hysteresis", "min_loss_scale"})
    if (name == s) return true;
  return false;
}

bool applies(const SettingDecl& d, R r, const std::set<std::string>& given) {
  if (d.print_when_given) return !d.flags_given(given).empty();
  if (is_scaler_setting(d.name)) return r.train.precision.fp16();
  if (d.name == "warmup_steps") return has_warmup_steps(r);
  if (d.name == "min_lr_ratio") return is_linear_cosine(r);
  return !d.builtin_model_only || r.train.model.dir.empty();
}

struct Origin {
  ConfigLayer layer = ConfigLayer::kDefault;
  std::string text = "seqpar default";
};

// DeepSpeed's offload device ("none" | "cpu"; ds_config refuses "nvme") as the setting's type.
DsValue<OffloadDevice> offload_device(const DsValue<std::string>& v) {
  DsValue<OffloadDevice> out;
  out.state = static_cast<DsValue<OffloadDevice>::State>(v.state);
  out.key = v.key;
  out.value = v.value == "cpu" ? OffloadDevice::kCpu : OffloadDevice::kNone;
  return out;
}

class Resolver {
 public:
  Resolver(const CommandLine& cli, DefaultsSource defaults) : cli_(cli), defaults_(defaults) {
    out_.train = cli.values;
    out_.defaults = defaults;
    // What no flag sets starts at the defaults of the tool the run's files come from (config.h).
    const TrainConfig own;
    for (const SettingDecl& d : train_settings()) {
      if (const std::vector<std::string> f = d.flags_given(cli.given); !f.empty()) {
        origin_[d.name] = Origin{ConfigLayer::kFlag, f.front()};
        continue;
      }
      origin_[d.name] = Origin{};
      if (d.builtin_model_only && !cli.values.model.preset.empty()) {
        origin_[d.name].text = "--preset " + cli.values.model.preset;
      } else if (!cli.source_defaults) {
        origin_[d.name].text = "default";
      } else if (const std::optional<std::string>& v = d.default_for(defaults)) {
        d.set(out_.train, *v, d.name);
        origin_[d.name].text = defaults_source_name(defaults);
      } else if (d.demo_default) {
        d.set(out_.train, d.get(own), d.name);  // the demo's value is the demo's only
      }
    }
    // A preset is the built-in model's architecture: the model's source.
    if (!cli.values.model.preset.empty() && cli.values.model.dir.empty() && origin_["model"].layer == ConfigLayer::kDefault)
      origin_["model"] = origin_.at("preset");
    for (const SettingDef& d : kDerived) origin_[d.name] = Origin{};
    if (!cli.source_defaults)
      for (const SettingDef& d : kDerived) origin_[d.name].text = "default";
    for (auto [name, setting] : kDerivedFlags)
      if (flag_of(setting)) origin_[name] = Origin{ConfigLayer::kFlag, *flag_of(setting)};
    // The flags that also set DeepSpeed's schedule parameters (docs/configs.md).
    LrSchedule& s = out_.train.schedule.lr;
    if (flag_of("lr")) s.warmup_max_lr = cli.values.optimizer.adamw.lr;
    if (flag_of("warmup_steps")) s.warmup_num_steps = cli.values.schedule.warmup_steps;
    if (flag_of("min_lr_ratio")) s.cos_min_ratio = cli.values.schedule.min_lr_ratio;
  }

  void apply_deepspeed(const DsConfig& ds) {
    TrainConfig& t = out_.train;
    RecordedSettings& rec = out_.recorded;
    for (const std::string& w : ds.warnings) out_.warnings.push_back(w);
    from_ds(ds, "micro_batch", t.data.micro_batch, ds.train_micro_batch_size_per_gpu);
    from_ds(ds, "grad_accum", t.data.grad_accum, ds.gradient_accumulation_steps);
    from_ds(ds, "sp", t.parallel.sp, ds.sequence_parallel_size);
    train_batch_ = ds.train_batch_size;
    train_batch_file_ = ds.source;
    from_ds(ds, "zero_stage", t.memory.zero_stage, ds.zero_stage);
    from_ds(ds, "offload_optimizer", t.memory.offload_optimizer, offload_device(ds.offload_optimizer_device));
    from_ds(ds, "offload_param", t.memory.offload_param, offload_device(ds.offload_param_device));
    from_ds(ds, "offload_param_pin_memory", t.memory.offload_param_pin_memory, ds.offload_param_pin_memory);
    apply_ds_precision(ds);
    if (ds.optimizer.present) {
      const DsOptimizer& o = ds.optimizer;
      std::string name = o.type;
      if (o.type == "Adam") name = o.adam_w_mode ? "Adam (adam_w_mode: AdamW)" : "Adam (adam_w_mode false)";
      offer("optimizer", rec.optimizer, name, ConfigLayer::kDeepSpeed, ds.source + ": optimizer.type");
      rec.adam_w_mode = o.adam_w_mode;
      adam_file_ = ds.source;
      from_ds(ds, "lr", t.optimizer.adamw.lr, o.lr);
      if (!o.betas.absent())
        for (const char* name : {"beta1", "beta2"}) check_declared(name, o.betas.key, /*deepspeed=*/true);
      if (o.betas.is_set()) {
        offer("beta1", t.optimizer.adamw.beta1, o.betas.value[0], ConfigLayer::kDeepSpeed,
              ds.source + ": " + o.betas.key);
        offer("beta2", t.optimizer.adamw.beta2, o.betas.value[1], ConfigLayer::kDeepSpeed,
              ds.source + ": " + o.betas.key);
      } else if (o.betas.is_auto()) {
        auto_["beta1"] = auto_["beta2"] = ds.source + ": " + o.betas.key;
      }
      from_ds(ds, "eps", t.optimizer.adamw.eps, o.eps);
      from_ds(ds, "weight_decay", t.optimizer.adamw.weight_decay, o.weight_decay);
    }
    from_ds(ds, "clip", t.optimizer.clip, ds.gradient_clipping);
    from_ds(ds, "log_every", t.logging.log_every, ds.steps_per_print);
    from_ds(ds, "wall_clock_breakdown", rec.wall_clock_breakdown, ds.wall_clock_breakdown);
    from_ds(ds, "sp_comm_dtype", rec.sp_comm_dtype, ds.seq_parallel_communication_data_type);
    if (ds.scheduler.present) {
      check_declared("lr_schedule", "scheduler.type", /*deepspeed=*/true);
      scheduler_ = ds.scheduler;
      scheduler_file_ = ds.source;
      offer("lr_schedule", t.schedule.lr.type, schedule_type(ds.scheduler.type), ConfigLayer::kDeepSpeed,
            ds.source + ": scheduler.type");
    }
  }

  void apply_accelerate(const AccelerateConfig& a, ConfigLayer layer = ConfigLayer::kAccelerate) {
    TrainConfig& t = out_.train;
    RecordedSettings& rec = out_.recorded;
    yaml_layer_ = layer;
    for (const std::string& w : a.warnings) out_.warnings.push_back(w);
    from_yaml(a, "distributed_type", rec.distributed_type, a.distributed_type);
    from_yaml(a, "num_processes", rec.num_processes, a.num_processes);
    from_yaml(a, "num_machines", rec.num_machines, a.num_machines);
    from_yaml(a, "machine_rank", rec.machine_rank, a.machine_rank);
    from_yaml(a, "main_process_ip", rec.main_process_ip, a.main_process_ip);
    from_yaml(a, "main_process_port", rec.main_process_port, a.main_process_port);
    if (a.mixed_precision.has() && *a.mixed_precision != "no") {
      YamlValue<Precision> mp;
      mp.key = a.mixed_precision.key;
      mp.value = *a.mixed_precision == "fp16" ? Precision::kFp16 : Precision::kBf16;
      from_yaml(a, "mixed_precision", t.precision.mixed_precision, mp);
    } else if (a.mixed_precision.has()) {
      out_.warnings.push_back(
          fmt::format("{}: mixed_precision=no: seqpar computes in bf16 on the GPU all the same "
                      "(it has no fp32 GPU mode; the CPU computes in f32)",
                      a.source));
    }
    from_yaml(a, "zero_stage", t.memory.zero_stage, a.zero_stage);
    for (auto [name, field, v] : {std::tuple{"offload_optimizer", &t.memory.offload_optimizer, &a.offload_optimizer_device},
                                  std::tuple{"offload_param", &t.memory.offload_param, &a.offload_param_device}}) {
      if (!v->has()) continue;
      YamlValue<OffloadDevice> d;
      d.key = v->key;
      d.value = **v == "cpu" ? OffloadDevice::kCpu : OffloadDevice::kNone;
      from_yaml(a, name, *field, d);
    }
    from_yaml(a, "grad_accum", t.data.grad_accum, a.gradient_accumulation_steps);
    from_yaml(a, "clip", t.optimizer.clip, a.gradient_clipping);
    from_yaml(a, "sp_comm_dtype", rec.sp_comm_dtype, a.seq_parallel_communication_data_type);
    from_yaml(a, "sp", t.parallel.sp, a.sp_size);
    from_yaml(a, "dp_replicate", t.parallel.dp_replicate, a.dp_replicate_size);
    from_yaml(a, "dp_shard", t.parallel.dp_shard, a.dp_shard_size);
    from_yaml(a, "seq_len", t.data.task.seq_len, a.sp_seq_length);
    from_yaml(a, "seq_length_is_variable", rec.seq_length_is_variable, a.sp_seq_length_is_variable);
    if (a.sp_attn_implementation.has()) check_declared("attn_implementation", a.sp_attn_implementation.key, false);
    if (a.sp_attn_implementation.has())
      offer("attn_implementation", t.model.attn_implementation, attn_implementation_of(*a.sp_attn_implementation), layer,
            a.source + ": " + a.sp_attn_implementation.key);
    apply_context_parallel(a);
    from_yaml(a, "zero_stage", t.memory.zero_stage, a.fsdp_zero_stage);
    from_yaml(a, "activation_checkpointing", t.memory.activation_checkpointing, a.fsdp_activation_checkpointing);
  }

  // fp16.enabled / bf16.enabled onto mixed_precision (ds_config refused both true), and fp16's
  // loss scaler. "auto" leaves the precision to the command line (--fp16 / --bf16), as HF
  // Trainer's trainer_config_process fills fp16.enabled from --fp16 and bf16.enabled from --bf16
  // (both off by default: fp32 there; seqpar's GPU path then computes in bf16).
  void apply_ds_precision(const DsConfig& ds) {
    TrainConfig& t = out_.train;
    for (const DsValue<bool>* v : {&ds.fp16_enabled, &ds.bf16_enabled}) {
      if (v->absent()) continue;
      check_declared("mixed_precision", v->key, /*deepspeed=*/true);
      if (v->is_auto()) auto_.emplace("mixed_precision", ds.source + ": " + v->key);
      if (!v->is_set() || !v->value) continue;
      offer("mixed_precision", t.precision.mixed_precision, v == &ds.fp16_enabled ? Precision::kFp16 : Precision::kBf16,
            ConfigLayer::kDeepSpeed, ds.source + ": " + v->key);
    }
    LossScalerConfig& sc = t.precision.scaler;
    from_ds(ds, "loss_scale", sc.loss_scale, ds.loss_scale);
    from_ds(ds, "initial_scale_power", sc.initial_scale_power, ds.initial_scale_power);
    from_ds(ds, "loss_scale_window", sc.loss_scale_window, ds.loss_scale_window);
    from_ds(ds, "hysteresis", sc.hysteresis, ds.hysteresis);
    from_ds(ds, "consecutive_hysteresis", sc.consecutive_hysteresis, ds.consecutive_hysteresis);
    from_ds(ds, "min_loss_scale", sc.min_loss_scale, ds.min_loss_scale);
  }

  // The loss scaler's settings checked when fp16 runs them (DeepSpeed checks the dynamic scaler's
  // only when it is used); given for a bf16 run, they are named as unused.
  void check_scaler(Problems& p) {
    const TrainConfig& t = out_.train;
    if (t.precision.fp16()) {
      p.attempt([&] {
        try {
          t.precision.scaler.validate();
        } catch (const InputError& e) {
          const std::string m = e.what();
          const std::string name = m.substr(0, m.find('='));
          throw InputError(origin_.count(name) ? m + " (" + source_text(name) + ")" : m);
        }
      });
      return;
    }
    std::string unused;
    for (const SettingDecl& d : train_settings())
      if (is_scaler_setting(d.name) && origin_.at(d.name).layer != ConfigLayer::kDefault)
        unused += (unused.empty() ? "" : ", ") + d.name + "=" + d.get(t) + " (" + source_text(d.name) + ")";
    if (!unused.empty())
      out_.warnings.push_back(
          fmt::format("{}: the loss scaler's settings are not used: mixed_precision={} ({}); "
                      "fp16 runs the loss scaler",
                      unused, precision_name(t.precision.mixed_precision), source_text("mixed_precision")));
  }

  // Accelerate's context parallelism (PyTorch's ring attention) is seqpar's ring: cp_size ranks
  // around the ring; with sp_size > 1 too, Ulysses inside (sp_size) and the ring across (hybrid).
  void apply_context_parallel(const AccelerateConfig& a) {
    if (!a.cp_size.has() || *a.cp_size == 1) return;
    TrainConfig& t = out_.train;
    const std::string src = a.source + ": " + a.cp_size.key;
    for (const char* name : {"sp", "sp_mode", "ulysses_degree"}) check_declared(name, a.cp_size.key, false);
    const int64_t ulysses = a.sp_size.has() ? *a.sp_size : 1;
    offer("sp", t.parallel.sp, ulysses * *a.cp_size, yaml_layer_,
          ulysses > 1 ? src + " × " + a.sp_size.key : src);
    offer("sp_mode", t.parallel.sp_mode, ulysses > 1 ? SpMode::kHybrid : SpMode::kRing, yaml_layer_, src);
    if (ulysses > 1) offer("ulysses_degree", t.parallel.ulysses_degree, static_cast<int>(ulysses), yaml_layer_, src);
  }

  ResolvedConfig finish(Problems& p) {
    check_flags(p);
    p.attempt([&] { resolve_world(); });
    p.attempt([&] { resolve_batch(); });
    resolve_megatron(p);
    p.attempt([&] { resolve_schedule(); });
    p.attempt([&] { check_adam_mode(); });
    check_deepspeed_batch(p);
    check_schedule_source(p);
    check_scaler(p);
    // The built-in model's sizes are checked by validate() (add_sources names their source).
    check_setting_rules(
        out_.train, p, [&](const std::string& name) { return source_text(name); }, /*model_sizes=*/false);
    if (out_.recorded.num_machines > 1)
      out_.warnings.push_back(fmt::format(
          "num_machines={} ({}) is recorded, but `seqpar train` runs all {} ranks in this process on this machine",
          out_.recorded.num_machines, origin_.at("num_machines").text, out_.world));
    for (const SettingDecl& d : train_settings())
      if (applies(d, out_, cli_.given)) out_.settings.push_back({d.name, display(d, out_), source_text(d.name)});
    for (const SettingDef& d : kDerived) {
      if (d.applies && !d.applies(out_)) continue;
      out_.settings.push_back({d.name, d.value(out_), source_text(d.name)});
    }
    return std::move(out_);
  }

 private:
  // The flag (or alias) that gave a setting on the command line, if one did.
  std::optional<std::string> flag_of(const std::string& name) const {
    const SettingDecl* d = find_setting(name);
    SEQPAR_CHECK(d != nullptr, "no setting {}", name);
    const std::vector<std::string> f = d->flags_given(cli_.given);
    if (f.empty()) return std::nullopt;
    return f.front();
  }

  // The command line's own rules: one flag per setting (an alias and the setting's flag both given
  // would leave one of them silently unused), and the foreign flags (config.h foreign_flags()):
  // refused ones an error with their reason, accepted ones a note, each once.
  void check_flags(Problems& p) {
    for (const SettingDecl& d : train_settings()) {
      const std::vector<std::string> f = d.flags_given(cli_.given);
      if (f.size() < 2) continue;
      std::string list;
      for (const std::string& x : f) list += (list.empty() ? "" : " and ") + x;
      p.add(fmt::format("{} both set {}: give one of them", list, d.name));
    }
    std::set<std::string> noted;
    for (const auto& [flag, value] : cli_.values.foreign_given) {
      const ForeignFlag* ff = nullptr;
      for (const ForeignFlag& x : foreign_flags())
        if (x.flag == flag) ff = &x;
      SEQPAR_CHECK(ff != nullptr, "no foreign flag {}", flag);
      if (ff->checked || (ff->takes_value && value == ff->accepted)) continue;
      if (ff->refused) {
        p.add(ff->takes_value
                  ? fmt::format("{}={} ({}) is not supported: {}{}", flag, value, ff->tool, ff->reason,
                                ff->accepted.empty() ? "" : fmt::format(" (only {} is accepted)", ff->accepted))
                  : fmt::format("{} ({}) is not supported: {}", flag, ff->tool, ff->reason));
      } else if (noted.insert(flag).second) {
        out_.warnings.push_back(fmt::format("{}{} ({}) has no effect: {}", flag,
                                            ff->takes_value ? " " + value : std::string(), ff->tool, ff->reason));
      }
    }
  }

  // The conversions from Megatron-DeepSpeed's units (docs/coming-from-megatron-deepspeed.md), after
  // the batch is known: tokens -> steps, the floor lr -> its ratio, Megatron's model-shape defaults,
  // and the schedule styles seqpar maps onto its own.
  void resolve_megatron(Problems& p) {
    TrainConfig& t = out_.train;
    // --num-attention-heads as Megatron reads it: no GQA unless --num-key-value-heads, and the head
    // dim hidden / heads unless --kv-channels (seqpar's --head-dim).
    if (flag_of("num_heads") == std::optional<std::string>("--num-attention-heads") && t.model.dir.empty()) {
      if (!flag_of("num_kv_heads")) {
        t.model.arch.num_kv_heads = t.model.arch.num_heads;
        origin_.at("num_kv_heads") = Origin{ConfigLayer::kFlag, "derived: num_heads (--num-attention-heads)"};
      }
      if (!flag_of("head_dim") && t.model.arch.num_heads > 0 && t.model.arch.hidden_size % t.model.arch.num_heads == 0) {
        t.model.arch.head_dim = t.model.arch.hidden_size / t.model.arch.num_heads;
        origin_.at("head_dim") = Origin{ConfigLayer::kFlag, "derived: hidden_size / num_heads (--num-attention-heads)"};
      }
    }
    if (const auto f = flag_of("sp"); f == std::optional<std::string>("--ds-sequence-parallel-size"))
      SEQPAR_PROBLEM_CHECK(p, t.parallel.sp_mode == SpMode::kUlysses,
                           "--ds-sequence-parallel-size is DeepSpeed-Ulysses, but sp_mode={} ({}); use --sp with "
                           "--sp-mode {} instead",
                           sp_mode_name(t.parallel.sp_mode), source_text("sp_mode"), sp_mode_name(t.parallel.sp_mode));
    const int64_t tokens_per_step = out_.train_batch_size * t.data.task.seq_len;
    const std::string per_step = fmt::format("tokens per step = train_batch_size × seq_len = {} × {} = {}",
                                             out_.train_batch_size, t.data.task.seq_len, tokens_per_step);
    auto steps_of = [&](const char* tokens_name, int64_t tokens, const char* steps_name, int64_t& steps) {
      if (tokens <= 0 || tokens_per_step <= 0) return;
      const auto f = flag_of(steps_name);
      SEQPAR_PROBLEM_CHECK(p, !f, "{}={} ({}) and {}={} ({}) both give the length: give one of them", tokens_name,
                           tokens, source_text(tokens_name), steps_name, steps, f.value_or(""));
      if (f) return;
      steps = (tokens + tokens_per_step - 1) / tokens_per_step;
      origin_.at(steps_name) = Origin{ConfigLayer::kFlag, fmt::format("derived: ceil({} / tokens per step) = ceil({} / "
                                                                      "{}) ({} from {}; {})",
                                                                      tokens_name, tokens, tokens_per_step, tokens_name,
                                                                      source_text(tokens_name), per_step)};
    };
    steps_of("train_tokens", t.schedule.train_tokens, "steps", t.schedule.steps);
    steps_of("warmup_tokens", t.schedule.warmup_tokens, "warmup_steps", t.schedule.warmup_steps);
    // Megatron's decay length: seqpar decays over the run, so it must be the run's length.
    for (const auto& [flag, value] : cli_.values.foreign_given) {
      if (flag != "--lr-decay-iters" && flag != "--lr-decay-tokens") continue;
      int64_t n = 0;
      const char* end = value.data() + value.size();
      const auto [ptr, ec] = std::from_chars(value.data(), end, n);
      if (ec != std::errc() || ptr != end || n < 1) {
        p.add(fmt::format("{}={}: expected a whole number >= 1", flag, value));
        continue;
      }
      const bool tokens = flag == "--lr-decay-tokens";
      if (tokens && tokens_per_step <= 0) continue;  // the batch's own error says why
      const int64_t decay_steps = tokens ? (n + tokens_per_step - 1) / tokens_per_step : n;
      SEQPAR_PROBLEM_CHECK(p, decay_steps == t.schedule.steps,
                           "{}={} decays the lr over {} steps{}, but the run has steps={} ({}): seqpar's schedules "
                           "decay over the whole run; give the run's length, or leave {} out",
                           flag, value, decay_steps,
                           tokens ? fmt::format(" (ceil({} / tokens per step); {})", n, per_step) : std::string(),
                           t.schedule.steps, source_text("steps"), flag);
    }
    if (t.schedule.warmup_tokens > 0 && !flag_of("warmup_steps")) {
      t.schedule.lr.warmup_num_steps = t.schedule.warmup_steps;
      origin_.at("warmup_num_steps") = origin_.at("warmup_steps");
    }
    if (t.schedule.min_lr >= 0) {
      const auto f = flag_of("min_lr_ratio");
      SEQPAR_PROBLEM_CHECK(p, !f, "min_lr={} ({}) and min_lr_ratio={} ({}) both set the floor: give one of them",
                           t.schedule.min_lr, source_text("min_lr"), t.schedule.min_lr_ratio, f.value_or(""));
      const float lr = t.optimizer.adamw.lr;
      SEQPAR_PROBLEM_CHECK(p, lr > 0 && t.schedule.min_lr <= lr, "min_lr={} ({}) must be <= lr={} ({})", t.schedule.min_lr,
                           source_text("min_lr"), lr, source_text("lr"));
      if (!f && lr > 0 && t.schedule.min_lr <= lr) {
        t.schedule.min_lr_ratio = static_cast<float>(t.schedule.min_lr / static_cast<double>(lr));
        t.schedule.lr.cos_min_ratio = t.schedule.min_lr_ratio;  // (WarmupCosineLR's floor too, as --min-lr-ratio sets it)
        origin_.at("min_lr_ratio") =
            Origin{ConfigLayer::kFlag, fmt::format("derived: min_lr / lr = {} / {} ({}, {})", t.schedule.min_lr, lr,
                                                   source_text("min_lr"), source_text("lr"))};
        origin_.at("cos_min_ratio") = origin_.at("min_lr_ratio");
      }
    } else {
      SEQPAR_PROBLEM_CHECK(p, t.schedule.min_lr == -1, "min_lr={} ({}) must be >= 0", t.schedule.min_lr, source_text("min_lr"));
    }
    // Megatron's linear style decays to min_lr and its constant style warms up first; seqpar's
    // linear decays to 0 and its constant has no warmup, so only the cases where the two agree pass.
    if (flag_of("lr_schedule") == std::optional<std::string>("--lr-decay-style")) {
      const LrScheduleType type = t.schedule.lr.type;
      if (type == LrScheduleType::kLinear)
        SEQPAR_PROBLEM_CHECK(p, t.schedule.min_lr <= 0,
                             "--lr-decay-style linear decays to 0 in seqpar (HF Trainer's linear schedule), but "
                             "min_lr={} ({}); use --lr-decay-style cosine for a floor, or --min-lr 0",
                             t.schedule.min_lr, source_text("min_lr"));
      if (type == LrScheduleType::kConstant)
        SEQPAR_PROBLEM_CHECK(p, t.schedule.warmup_steps == 0,
                             "--lr-decay-style constant has no warmup in seqpar, but warmup_steps={} ({}); give "
                             "--lr-warmup-iters 0, or use --lr-decay-style cosine",
                             t.schedule.warmup_steps, source_text("warmup_steps"));
    }
  }

  std::string source_text(const std::string& name) const {
    const Origin& o = origin_.at(name);
    auto it = auto_.find(name);
    if (it != auto_.end() && o.layer != ConfigLayer::kDeepSpeed && o.layer != ConfigLayer::kAccelerate &&
        o.layer != ConfigLayer::kEnvironment)
      return o.text + " (auto in " + it->second + ")";
    return o.text;
  }

  // A value from `layer` for setting `name`: taken unless a higher layer set it; a different
  // value overriding (or overridden by) another file's or flag's value is a warning.
  template <typename F, typename V>
  void offer(const std::string& name, F& field, const V& value, ConfigLayer layer, const std::string& source) {
    F v;
    if constexpr (std::is_integral_v<F> && !std::is_same_v<F, bool> && std::is_integral_v<V>) {
      SEQPAR_INPUT_CHECK(value <= static_cast<V>(std::numeric_limits<F>::max()), "{}={} is too large (at most {})",
                         source, value, std::numeric_limits<F>::max());
      v = static_cast<F>(value);
    } else {
      v = static_cast<F>(value);
    }
    Origin& o = origin_.at(name);
    if (o.layer > layer) {
      if (!(field == v))
        out_.warnings.push_back(
            fmt::format("{}: {}={} is overridden by {}={}", name, source, show(v), o.text, show(field)));
      return;
    }
    if (o.layer != ConfigLayer::kDefault && !(field == v))
      out_.warnings.push_back(
          fmt::format("{}: {}={} is overridden by {}={}", name, o.text, show(field), source, show(v)));
    field = v;
    o = Origin{layer, source};
  }

  // A file's key applied to a declared setting must be one that its declaration names (config.h,
  // SettingDecl::deepspeed / accelerate): the declaration says which keys set what, and the docs
  // table is made from it. Settings without a declaration (kDerived) have no list.
  void check_declared(const std::string& name, const std::string& key, bool deepspeed) const {
    const SettingDecl* d = find_setting(name);
    if (d == nullptr) return;
    for (const std::string& k : deepspeed ? d->deepspeed_keys() : d->accelerate_keys())
      if (k == key || k.substr(0, k.find('[')) == key) return;
    SEQPAR_CHECK(false, "setting {} is set from the {} key {}, which its declaration in train/config.cpp does not name",
                 name, deepspeed ? "DeepSpeed" : "Accelerate", key);
  }

  template <typename F, typename T>
  void from_ds(const DsConfig& ds, const std::string& name, F& field, const DsValue<T>& v) {
    if (!v.absent()) check_declared(name, v.key, /*deepspeed=*/true);
    if (v.is_set()) offer(name, field, v.value, ConfigLayer::kDeepSpeed, ds.source + ": " + v.key);
    if (v.is_auto()) auto_[name] = ds.source + ": " + v.key;
  }

  template <typename F, typename T>
  void from_yaml(const AccelerateConfig& a, const std::string& name, F& field, const YamlValue<T>& v) {
    if (!v.has()) return;
    check_declared(name, v.key, /*deepspeed=*/false);
    offer(name, field, *v, yaml_layer_, a.source + ": " + v.key);
  }

  // num_processes (when the YAML gives it) is the world: dp_replicate × dp_shard × sp must equal
  // it. Left at its default, dp_replicate is what fills the world (as DeepSpeed's dp = world / sp).
  //
  // Under a launcher (cli_.launch_world > 0) the launch's process count plays the same part, and
  // num_processes, when given, must agree with it.
  void resolve_world() {
    TrainConfig& t = out_.train;
    int64_t n = out_.recorded.num_processes;
    std::string n_src = n > 0 ? origin_.at("num_processes").text : std::string();
    if (cli_.launch_world > 0) {
      SEQPAR_INPUT_CHECK(n <= 0 || n == cli_.launch_world,
                         "num_processes={} ({}) but the launch started {} processes ({}): they must be equal", n, n_src,
                         cli_.launch_world, cli_.launch_source);
      if (n <= 0) {
        n = cli_.launch_world;
        n_src = cli_.launch_source;
      }
    }
    Origin& world = origin_.at("world");
    if (n <= 0) {
      world = Origin{ConfigLayer::kDefault, "derived: sp × dp_replicate × dp_shard"};
      out_.world = t.world();
      return;
    }
    const bool from_yaml = out_.recorded.num_processes > 0;
    const char* n_name = from_yaml ? "num_processes" : "world";
    Origin& dpr = origin_.at("dp_replicate");
    if (dpr.layer == ConfigLayer::kDefault) {
      const int64_t per = static_cast<int64_t>(t.parallel.sp) * t.parallel.dp_shard;
      SEQPAR_INPUT_CHECK(per > 0 && n % per == 0,
                         "{}={} ({}) must equal dp_replicate × dp_shard × sp; with sp={} ({}) and "
                         "dp_shard={} ({}), dp_replicate would be {} / ({} × {}) = {} / {}, not a whole number",
                         n_name, n, n_src, t.parallel.sp, source_text("sp"), t.parallel.dp_shard, source_text("dp_shard"), n, t.parallel.sp,
                         t.parallel.dp_shard, n, per);
      t.parallel.dp_replicate = static_cast<int>(n / per);
      dpr = Origin{from_yaml ? ConfigLayer::kAccelerate : ConfigLayer::kDefault,
                   fmt::format("derived: {} / (sp × dp_shard)", n_name)};
    }
    const int64_t product = static_cast<int64_t>(t.parallel.dp_replicate) * t.parallel.dp_shard * t.parallel.sp;
    SEQPAR_INPUT_CHECK(product == n,
                       "{}={} ({}) must equal dp_replicate × dp_shard × sp = {} × {} × {} = {} "
                       "(dp_replicate from {}, dp_shard from {}, sp from {})",
                       n_name, n, n_src, t.parallel.dp_replicate, t.parallel.dp_shard, t.parallel.sp, product, source_text("dp_replicate"),
                       source_text("dp_shard"), source_text("sp"));
    world = Origin{from_yaml ? ConfigLayer::kAccelerate : ConfigLayer::kDefault, n_src};
    out_.world = static_cast<int>(n);
  }

  // DeepSpeed's batch triple: train_batch_size = micro × grad_accum × dp_world, dp_world = world / sp.
  // Given train_batch_size and one of the other two, the third is derived as DeepSpeed does;
  // given all three, they must agree.
  void resolve_batch() {
    TrainConfig& t = out_.train;
    const int64_t dp = static_cast<int64_t>(t.parallel.dp_replicate) * t.parallel.dp_shard;
    Origin& tb = origin_.at("train_batch_size");
    // Megatron's --global-batch-size is the same number as DeepSpeed's train_batch_size, and wins.
    const bool from_flag = t.data.global_batch > 0;
    if (from_flag && train_batch_.is_set() && train_batch_.value != t.data.global_batch)
      out_.warnings.push_back(fmt::format("train_batch_size: {}: {}={} is overridden by {}={}", train_batch_file_,
                                          train_batch_.key, train_batch_.value, source_text("global_batch_size"),
                                          t.data.global_batch));
    if (!from_flag && !train_batch_.is_set()) {
      out_.train_batch_size = static_cast<int64_t>(t.data.micro_batch) * t.data.grad_accum * dp;
      tb = Origin{ConfigLayer::kDefault, "derived: micro_batch × grad_accum × dp_world"};
      if (train_batch_.is_auto()) auto_["train_batch_size"] = train_batch_file_ + ": " + train_batch_.key;
      return;
    }
    const int64_t want = from_flag ? t.data.global_batch : train_batch_.value;
    const std::string want_src =
        from_flag ? source_text("global_batch_size") : train_batch_file_ + ": " + train_batch_.key;
    const char* want_name = from_flag ? "global_batch_size" : "train_batch_size";
    const ConfigLayer want_layer = from_flag ? ConfigLayer::kFlag : ConfigLayer::kDeepSpeed;
    auto specified = [&](const char* name) {
      return origin_.at(name).layer != ConfigLayer::kDefault || auto_.count(name) > 0;
    };
    const std::string dp_text =
        fmt::format("dp_world = world / sequence_parallel_size = {} / {} = {}", out_.world, t.parallel.sp, dp);
    auto derive = [&](const char* name, int& field, int64_t other, const char* other_name) {
      const int64_t per = other * dp;
      SEQPAR_INPUT_CHECK(want % per == 0,
                         "{}={} ({}) must equal train_micro_batch_size_per_gpu × "
                         "gradient_accumulation_steps × dp_world, but it is not a multiple of {} × dp_world = {} × {} "
                         "= {}, so {} cannot be derived ({})",
                         want_name, want, want_src, other_name, other, dp, per, name, dp_text);
      field = static_cast<int>(want / per);
      origin_.at(name) = Origin{want_layer, fmt::format("derived: {} / ({} × dp_world)", want_name, other_name)};
    };
    const bool micro = specified("micro_batch"), accum = specified("grad_accum");
    if (micro && !accum) {
      derive("grad_accum", t.data.grad_accum, t.data.micro_batch, "micro_batch");
    } else if (accum && !micro) {
      derive("micro_batch", t.data.micro_batch, t.data.grad_accum, "grad_accum");
    } else if (!micro && !accum) {
      if (t.data.grad_accum != 1) {
        t.data.grad_accum = 1;
        origin_.at("grad_accum") = Origin{want_layer, "derived: 1, as DeepSpeed sets it"};
      }
      derive("micro_batch", t.data.micro_batch, t.data.grad_accum, "grad_accum");
    }
    const int64_t product = static_cast<int64_t>(t.data.micro_batch) * t.data.grad_accum * dp;
    SEQPAR_INPUT_CHECK(want == product,
                       "{}={} ({}) must equal train_micro_batch_size_per_gpu × "
                       "gradient_accumulation_steps × dp_world = {} × {} × {} = {}, where {} (micro_batch from {}, "
                       "grad_accum from {}, sp from {})",
                       want_name, want, want_src, t.data.micro_batch, t.data.grad_accum, dp, product, dp_text,
                       source_text("micro_batch"), source_text("grad_accum"), source_text("sp"));
    out_.train_batch_size = want;
    tb = Origin{want_layer, want_src};
  }

  // A DeepSpeed schedule parameter: a flag wins; then the file's value; "auto" takes the
  // trainer's value; absent, DeepSpeed's default.
  template <typename F, typename T>
  void pick(const char* name, F& field, const DsValue<T>& v, std::optional<F> auto_value, const std::string& auto_of,
            F default_value, const std::string& default_text) {
    Origin& o = origin_.at(name);
    const std::string where = scheduler_file_ + ": " + v.key;
    if (o.layer == ConfigLayer::kFlag) {
      if (v.is_set() && !(static_cast<F>(v.value) == field))
        out_.warnings.push_back(
            fmt::format("{}: {}={} is overridden by {}={}", name, where, show(v.value), o.text, show(field)));
      return;
    }
    if (v.is_set()) {
      field = static_cast<F>(v.value);
      o = Origin{ConfigLayer::kDeepSpeed, where};
    } else if (v.is_auto()) {
      SEQPAR_INPUT_CHECK(auto_value.has_value(), "{}: \"auto\" is not accepted here", where);
      field = *auto_value;
      o = Origin{ConfigLayer::kDeepSpeed, auto_of + " (auto in " + where + ")"};
    } else {
      field = default_value;
      o = Origin{ConfigLayer::kDeepSpeed, scheduler_file_ + ": " + default_text};
    }
  }

  void resolve_schedule() {
    if (!scheduler_) return;
    const DsScheduler& s = *scheduler_;
    TrainConfig& t = out_.train;
    LrSchedule& ls = t.schedule.lr;
    const bool cosine = ls.type == LrScheduleType::kWarmupCosineLR;
    const bool decay = ls.type == LrScheduleType::kWarmupDecayLR;
    const double lr = t.optimizer.adamw.lr;
    pick("warmup_num_steps", ls.warmup_num_steps, s.warmup_num_steps, std::optional<int64_t>(t.schedule.warmup_steps),
         source_text("warmup_steps"), int64_t{1000}, "DeepSpeed's default");
    // DeepSpeed takes max(2, warmup_num_steps), so 0 (HF Trainer's "auto" with no warmup) is valid.
    SEQPAR_INPUT_CHECK(ls.warmup_num_steps >= 0, "warmup_num_steps={} ({}) must be >= 0", ls.warmup_num_steps,
                       source_text("warmup_num_steps"));
    if (!cosine) {
      pick("warmup_min_lr", ls.warmup_min_lr, s.warmup_min_lr, std::optional<double>(0.0),
           "0, as the HF Trainer fills it", 0.0, "DeepSpeed's default");
      // WarmupLR's max defaults to the optimizer's lr (None in DeepSpeed); WarmupDecayLR's to 0.001.
      pick("warmup_max_lr", ls.warmup_max_lr, s.warmup_max_lr, std::optional<double>(lr), source_text("lr"),
           decay ? 0.001 : lr, decay ? "DeepSpeed's default" : "DeepSpeed's default (the optimizer's lr)");
      SEQPAR_INPUT_CHECK(ls.warmup_min_lr <= ls.warmup_max_lr, "warmup_min_lr={} ({}) must be <= warmup_max_lr={} ({})",
                         ls.warmup_min_lr, source_text("warmup_min_lr"), ls.warmup_max_lr,
                         source_text("warmup_max_lr"));
    }
    if (cosine || decay) {
      pick("total_num_steps", ls.total_num_steps, s.total_num_steps, std::optional<int64_t>(t.schedule.steps),
           source_text("steps"), int64_t{0}, "(required)");
      SEQPAR_INPUT_CHECK(ls.total_num_steps >= 1, "total_num_steps={} ({}) must be >= 1", ls.total_num_steps,
                         source_text("total_num_steps"));
    }
    if (cosine) {
      pick("warmup_min_ratio", ls.warmup_min_ratio, s.warmup_min_ratio, std::optional<double>(), "", 0.0,
           "DeepSpeed's default");
      pick("cos_min_ratio", ls.cos_min_ratio, s.cos_min_ratio, std::optional<double>(), "", 1e-4,
           "DeepSpeed's default");
    }
    ls.warmup_type = s.warmup_type.is_set() && s.warmup_type.value == "linear" ? WarmupType::kLinear : WarmupType::kLog;
    origin_.at("warmup_type") =
        Origin{ConfigLayer::kDeepSpeed,
               scheduler_file_ + ": " + (s.warmup_type.is_set() ? s.warmup_type.key : "DeepSpeed's default")};
  }

  // DeepSpeed's own rule, for a bare DeepSpeed file (no Trainer fills the batch): "Either
  // train_batch_size or train_micro_batch_size_per_gpu needs to be provided".
  void check_deepspeed_batch(Problems& p) {
    if (defaults_ != DefaultsSource::kDeepSpeed || !cli_.source_defaults) return;
    const bool micro = origin_.at("micro_batch").layer != ConfigLayer::kDefault;
    SEQPAR_PROBLEM_CHECK(p, micro || train_batch_.is_set(),
                         "micro_batch: {} has neither train_batch_size nor train_micro_batch_size_per_gpu, which "
                         "DeepSpeed requires (\"Either train_batch_size or train_micro_batch_size_per_gpu needs to "
                         "be provided\"); add one, or give --micro-batch",
                         train_batch_file_);
  }

  // DeepSpeed's schedulers take their parameters from a DeepSpeed file's scheduler section.
  void check_schedule_source(Problems& p) {
    const LrScheduleType type = out_.train.schedule.lr.type;
    SEQPAR_PROBLEM_CHECK(p, is_seqpar_schedule(type) || scheduler_.has_value(),
                         "lr_schedule={} ({}) is a DeepSpeed scheduler: its parameters come from a DeepSpeed file's "
                         "scheduler section (--deepspeed); from the command line: linear_cosine, linear or constant",
                         lr_schedule_type_name(type), source_text("lr_schedule"));
  }

  // DeepSpeed's Adam with adam_w_mode false is L2-regularised Adam: the same as AdamW only
  // without weight decay. The decay may come from "auto" or a flag, so this is checked last.
  void check_adam_mode() {
    if (out_.recorded.adam_w_mode) return;
    const float wd = out_.train.optimizer.adamw.weight_decay;
    SEQPAR_INPUT_CHECK(wd == 0,
                       "{}: optimizer Adam with adam_w_mode=false is L2-regularised Adam, which seqpar does not "
                       "implement; weight_decay={} ({}) must be 0, or use AdamW (or adam_w_mode true, DeepSpeed's "
                       "default)",
                       adam_file_, wd, source_text("weight_decay"));
  }

  const CommandLine& cli_;
  const DefaultsSource defaults_;
  ConfigLayer yaml_layer_ = ConfigLayer::kAccelerate;
  ResolvedConfig out_;
  std::map<std::string, Origin> origin_;
  std::map<std::string, std::string> auto_;  // setting -> "file: key" that said "auto"
  DsValue<int64_t> train_batch_;
  std::string train_batch_file_, scheduler_file_, adam_file_;
  std::optional<DsScheduler> scheduler_;
};

}  // namespace

std::string ResolvedConfig::source_of(const std::string& name) const {
  for (const ResolvedSetting& s : settings)
    if (s.name == name) return s.source;
  return "";
}

std::string ResolvedConfig::value_of(const std::string& name) const {
  for (const ResolvedSetting& s : settings)
    if (s.name == name) return s.value;
  return "";
}

DefaultsSource defaults_source(const CommandLine& cli, const DsConfig* ds, const AccelerateConfig* acc,
                               const AccelerateConfig* env) {
  if (acc || env) return DefaultsSource::kHfTrainer;
  // (A file that is no DeepSpeed config is reported as such: DeepSpeed's own rules would only add noise.)
  if (ds) return ds->uses_auto || !ds->readable ? DefaultsSource::kHfTrainer : DefaultsSource::kDeepSpeed;
  if (!cli.values.model.dir.empty() || !cli.values.model.preset.empty() || !cli.values.data.path.empty())
    return DefaultsSource::kHfTrainer;
  return DefaultsSource::kDemo;
}

ResolvedConfig resolve_train_config(const CommandLine& cli, const DsConfig* ds, const AccelerateConfig* acc,
                                    const AccelerateConfig* env, Problems* collect) {
  Problems local;
  Problems& p = collect ? *collect : local;
  const DsConfig* yaml_ds = acc && acc->deepspeed ? &*acc->deepspeed : env && env->deepspeed ? &*env->deepspeed : nullptr;
  if (ds && yaml_ds) {
    std::error_code e1, e2;
    const fs::path a = fs::weakly_canonical(ds->source, e1), b = fs::weakly_canonical(yaml_ds->source, e2);
    SEQPAR_PROBLEM_CHECK(p, !e1 && !e2 && a == b,
                         "two DeepSpeed configs: --deepspeed {} and {}: deepspeed_config.deepspeed_config_file = {}; "
                         "give one of them",
                         ds->source, acc && acc->deepspeed ? acc->source : env->source, yaml_ds->source);
  }
  Resolver r(cli, defaults_source(cli, ds, acc, env));
  p.attempt([&] {
    if (ds)
      r.apply_deepspeed(*ds);
    else if (yaml_ds)
      r.apply_deepspeed(*yaml_ds);
  });
  if (acc) p.attempt([&] { r.apply_accelerate(*acc); });
  if (env) p.attempt([&] { r.apply_accelerate(*env, ConfigLayer::kEnvironment); });
  ResolvedConfig out = r.finish(p);
  if (!collect) p.raise();
  return out;
}

ResolvedConfig resolve_train_config(const CommandLine& cli, const std::string& deepspeed_path,
                                    const std::string& accelerate_path, const AccelerateConfig* env,
                                    Problems* collect) {
  Problems local;
  Problems& p = collect ? *collect : local;
  std::optional<DsConfig> ds;
  std::optional<AccelerateConfig> acc;
  if (!deepspeed_path.empty()) ds = load_ds_config(deepspeed_path, &p);
  if (!accelerate_path.empty()) acc = load_accelerate_config(accelerate_path, &p);
  ResolvedConfig out = resolve_train_config(cli, ds ? &*ds : nullptr, acc ? &*acc : nullptr, env, &p);
  if (!collect) p.raise();
  return out;
}

void add_sources(Problems& problems, const ResolvedConfig& config) {
  for (std::string& m : problems.list()) {
    const size_t eq = m.find('=');
    if (eq == std::string::npos || m.find(", from ") != std::string::npos) continue;
    const std::string source = config.source_of(m.substr(0, eq));
    if (!source.empty()) m += " (" + m.substr(0, eq) + " from " + source + ")";
  }
}

std::string format_resolved_config(const ResolvedConfig& config) {
  size_t name_w = 0, value_w = 0;
  for (const ResolvedSetting& s : config.settings) {
    name_w = std::max(name_w, s.name.size());
    value_w = std::max(value_w, s.value.size());
  }
  std::string out = "seqpar train: resolved configuration (setting, value, source)\n";
  for (const ResolvedSetting& s : config.settings)
    out += fmt::format("  {:<{}}  {:<{}}  {}\n", s.name, name_w, s.value, value_w, s.source);
  if (!config.warnings.empty()) {
    out += "warnings:\n";
    for (const std::string& w : config.warnings) out += "  " + w + "\n";
  }
  return out;
}

LrSchedule lr_schedule_of(const TrainConfig& c) {
  LrSchedule s = c.schedule.lr;
  s.base_lr = c.optimizer.adamw.lr;
  if (s.type == LrScheduleType::kLinearCosine || s.type == LrScheduleType::kLinear) {
    s.warmup_steps = c.schedule.warmup_steps;
    s.min_lr_ratio = c.schedule.min_lr_ratio;
    s.total_steps = c.schedule.steps;
  }
  return s;
}

float scheduled_lr(const LrSchedule& s, int64_t step) {
  if (s.type == LrScheduleType::kConstant) return static_cast<float>(s.base_lr);
  if (s.type == LrScheduleType::kLinear) {
    // transformers' get_linear_schedule_with_warmup: LambdaLR's current_step counts from 0 at the
    // first optimizer step.
    const int64_t i = step - 1;
    if (i < s.warmup_steps) return static_cast<float>(s.base_lr * i / std::max<int64_t>(1, s.warmup_steps));
    const double left = static_cast<double>(s.total_steps - i) / std::max<int64_t>(1, s.total_steps - s.warmup_steps);
    return static_cast<float>(s.base_lr * std::max(0.0, left));
  }
  if (s.type == LrScheduleType::kLinearCosine) {
    const double lr = s.base_lr;
    if (step <= s.warmup_steps) return static_cast<float>(lr * step / std::max<int64_t>(1, s.warmup_steps));
    const double progress =
        static_cast<double>(step - s.warmup_steps) / std::max<int64_t>(1, s.total_steps - s.warmup_steps);
    const double cosine = 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
    return static_cast<float>(lr * (s.min_lr_ratio + (1.0 - s.min_lr_ratio) * cosine));
  }
  // DeepSpeed (deepspeed/runtime/lr_schedules.py), in its own operation order so the doubles
  // agree: i is last_batch_iteration, W the warmup length after DeepSpeed's max(2, ...).
  const int64_t i = step - 2;
  const int64_t W = std::max<int64_t>(2, s.warmup_num_steps);
  const double inverse_log_warm_up = 1.0 / std::log(static_cast<double>(W));
  auto warmup_gamma = [&] {
    return s.warmup_type == WarmupType::kLog ? inverse_log_warm_up * std::log(static_cast<double>(i + 1))
                                             : static_cast<double>(i) / static_cast<double>(W);
  };
  if (s.type == LrScheduleType::kWarmupCosineLR) {
    if (i < 0) return 0.f;  // the constructor's lr: DeepSpeed returns 0 before the first step()
    double ratio;
    if (i < W) {
      ratio = s.warmup_min_ratio + warmup_gamma() * (1. - s.warmup_min_ratio);
    } else {
      const double real_last_step = static_cast<double>(i - W + 1);
      const double real_total_steps = static_cast<double>(std::max<int64_t>(1, s.total_num_steps - W));
      const double cosine_progress = std::min(1.0, real_last_step / real_total_steps);
      const double ratio_delta = 1. - s.cos_min_ratio;
      ratio = (1 + std::cos(M_PI * cosine_progress)) / 2;
      ratio = std::max(0.0, s.cos_min_ratio + ratio_delta * ratio);
    }
    return static_cast<float>(s.base_lr * ratio);
  }
  if (i < 0) return static_cast<float>(s.warmup_min_lr);  // the constructor's lr: min_lrs
  double gamma;
  if (i < W) {
    gamma = warmup_gamma();
  } else if (s.type == LrScheduleType::kWarmupLR) {
    gamma = 1.0;
  } else {
    gamma = std::max(
        0.0, static_cast<double>(s.total_num_steps - i) / std::max(1.0, static_cast<double>(s.total_num_steps - W)));
  }
  const double delta_lr = s.warmup_max_lr - s.warmup_min_lr;
  return static_cast<float>(s.warmup_min_lr + delta_lr * gamma);
}

}  // namespace seqpar
