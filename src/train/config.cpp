// The one declaration of every training setting (train/config.h), and TrainConfig's rules.
#include "train/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <type_traits>

#include "attention/attention_backend.h"
#include "core/error.h"
#include "model/llama.h"

namespace seqpar {

using json = nlohmann::json;

void TrainConfig::validate() const {
  Problems problems;
  validate(problems);
  problems.raise();
}

void TrainConfig::validate(Problems& p) const {
  if (data.path.empty()) {
    p.attempt([&] { data.task.validate(); });
    SEQPAR_PROBLEM_CHECK(p, data.eval_path.empty(),
                         "eval_data={} needs data (--data): the recall task evaluates its own accuracy", data.eval_path);
  }
  validate_run(p);
  p.attempt([&] {
    const MeshShape m = sp_mesh_shape(parallel.sp_mode, parallel.sp, parallel.ulysses_degree);
    const int64_t multiple = sp_layout_multiple(m.ring > 1 ? parallel.layout : SpLayout::kContiguous, parallel.sp);
    SEQPAR_INPUT_CHECK(data.task.seq_len >= multiple,
                       "seq_len={} is too short for sp={} with the {} layout: each rank needs at least {} token(s)",
                       data.task.seq_len, parallel.sp, m.ring > 1 ? sp_layout_name(parallel.layout) : "contiguous", multiple / parallel.sp);
  });
}

void MemorySettings::validate() const {
  LlamaModel::policy_for(activation_checkpointing, checkpoint_keep_attention);  // checks the pair
  SEQPAR_INPUT_CHECK(activation_checkpointing || !checkpoint_offload,
                     "checkpoint_offload=true needs activation_checkpointing=true (--activation-checkpointing): it "
                     "moves the checkpointed layers' inputs to host memory");
  if (!checkpoint_placement.empty()) {
    SEQPAR_INPUT_CHECK(activation_checkpointing,
                       "checkpoint_placement={} needs activation_checkpointing=true (--activation-checkpointing): it "
                       "says where the checkpointed layers' inputs wait",
                       checkpoint_placement);
    SEQPAR_INPUT_CHECK(!checkpoint_offload,
                       "checkpoint_offload=true and checkpoint_placement={} both say where the layers' inputs wait: "
                       "give one (checkpoint_offload is every layer in host memory, \"h\" per layer)",
                       checkpoint_placement);
    if (checkpoint_placement != "auto") {
      const std::string per_layer = expand_checkpoint_placement(checkpoint_placement, -1);
      SEQPAR_INPUT_CHECK(!checkpoint_keep_attention || per_layer.find('r') == std::string::npos,
                         "checkpoint_placement={} recomputes layer inputs (r), which checkpoint_keep_attention=true "
                         "does not allow: a layer that keeps its attention is not run forward again; use g or h",
                         checkpoint_placement);
    }
  }
  SEQPAR_INPUT_CHECK(mlp_tile_tokens >= 0, "tiled_mlp_tokens={} must be >= 0 (0 = untiled)", mlp_tile_tokens);
  SEQPAR_INPUT_CHECK(loss_tile_tokens >= 0, "tiled_loss_tokens={} must be >= 0 (0 = untiled)", loss_tile_tokens);
  SEQPAR_INPUT_CHECK(zero_stage >= 0 && zero_stage <= 3, "zero_stage={} must be 0, 1, 2 or 3", zero_stage);
  SEQPAR_INPUT_CHECK(offload_param == OffloadDevice::kNone || zero_stage == 3,
                     "offload_param=cpu needs zero_stage=3 (--zero-stage 3): only stage 3 takes the layers' weights "
                     "off the GPU (zero_stage={})",
                     zero_stage);
  SEQPAR_INPUT_CHECK(!offload_gradients || offload_optimizer == OffloadDevice::kCpu,
                     "offload_gradients=true needs offload_optimizer=cpu (--offload-optimizer cpu): the gradients go "
                     "to host memory for the optimizer's step on the CPU");
  SEQPAR_INPUT_CHECK(host_memory_gib >= 0, "host_memory_gib={} must be >= 0 (0 = the machine's MemAvailable)",
                     host_memory_gib);
}

std::string expand_checkpoint_placement(const std::string& spec, int64_t layers) {
  std::string out;
  int64_t count = -1;  // a pending count, -1: none
  for (const char ch : spec) {
    if (ch == ' ' || ch == ',') {
      SEQPAR_INPUT_CHECK(count < 0,
                         "checkpoint_placement={}: a count must be followed by its letter (g, h, r or f)", spec);
      continue;
    }
    if (ch >= '0' && ch <= '9') {
      count = (count < 0 ? 0 : count) * 10 + (ch - '0');
      SEQPAR_INPUT_CHECK(count <= 1000000, "checkpoint_placement={}: a count is more than 1000000 layers", spec);
      continue;
    }
    SEQPAR_INPUT_CHECK(ch == 'g' || ch == 'h' || ch == 'r' || ch == 'f',
                       "checkpoint_placement={}: '{}' is not a placement: one letter per layer, g (GPU), h (host "
                       "memory), r (recomputed) or f (not checkpointed), each optionally after a count "
                       "(\"16g8h8r\", \"20g8f\"), or \"auto\"",
                       spec, std::string(1, ch));
    SEQPAR_INPUT_CHECK(count != 0, "checkpoint_placement={}: a count of 0 layers", spec);
    out.append(static_cast<size_t>(count < 0 ? 1 : count), ch);
    SEQPAR_INPUT_CHECK(out.size() <= 1000000, "checkpoint_placement={}: more than 1000000 layers", spec);
    count = -1;
  }
  SEQPAR_INPUT_CHECK(count < 0, "checkpoint_placement={}: it ends in a count without its letter (g, h, r or f)",
                     spec);
  SEQPAR_INPUT_CHECK(!out.empty(), "checkpoint_placement={}: no layer given (one letter per layer: g, h, r or f)",
                     spec);
  SEQPAR_INPUT_CHECK(layers < 0 || static_cast<int64_t>(out.size()) == layers,
                     "checkpoint_placement={} places {} layer(s) but the model has {} (num_hidden_layers)", spec,
                     out.size(), layers);
  return out;
}

std::string compact_checkpoint_placement(const std::string& expanded) {
  std::string out;
  for (size_t i = 0; i < expanded.size();) {
    size_t j = i;
    while (j < expanded.size() && expanded[j] == expanded[i]) ++j;
    out += (j - i > 1 ? std::to_string(j - i) : std::string()) + expanded[i];
    i = j;
  }
  return out;
}

const char* offload_device_name(OffloadDevice d) { return d == OffloadDevice::kCpu ? "cpu" : "none"; }

OffloadDevice parse_offload_device(const std::string& text, const std::string& flag) {
  if (text == "cpu") return OffloadDevice::kCpu;
  if (text == "none") return OffloadDevice::kNone;
  throw InputError(fmt::format("{}={}: expected cpu or none", flag, text));
}

void TrainConfig::validate_run() const {
  Problems problems;
  validate_run(problems);
  problems.raise();
}

void TrainConfig::validate_run(Problems& p) const {
  // The declared rules first (each setting's range), then the rules between settings.
  check_setting_rules(*this, p, nullptr, model.dir.empty());
  if (model.dir.empty()) p.attempt([&] { model.arch.validate(); });
  p.attempt([&] { memory.validate(); });
  if (precision.fp16()) p.attempt([&] { precision.scaler.validate(); });
  SEQPAR_PROBLEM_CHECK(p, checkpoint.save_every == 0 || !checkpoint.save_dir.empty(), "save_every={} needs save_dir (--save-dir)",
                       checkpoint.save_every);
  SEQPAR_PROBLEM_CHECK(p, !checkpoint.resume.from_save_dir() || !checkpoint.save_dir.empty(),
                       "resume={} needs save_dir (--save-dir), the directory to take the newest checkpoint from",
                       checkpoint.resume.str());
  if (parallel.sp >= 1) p.attempt([&] { (void)sp_mesh_shape(parallel.sp_mode, parallel.sp, parallel.ulysses_degree); });  // a degree must divide sp
}

ResumeFrom ResumeFrom::parse(const std::string& text) {
  if (text.empty()) return {};
  if (text == "latest") return {Kind::kLatest, ""};
  if (text == "auto") return {Kind::kAuto, ""};
  return {Kind::kPath, text};
}

std::string ResumeFrom::str() const {
  switch (kind) {
    case Kind::kNone:
      return "";
    case Kind::kLatest:
      return "latest";
    case Kind::kAuto:
      return "auto";
    case Kind::kPath:
      return path;
  }
  return "";
}

const char* setting_group_name(SettingGroup g) {
  switch (g) {
    case SettingGroup::kModel:
      return "model";
    case SettingGroup::kData:
      return "data";
    case SettingGroup::kParallel:
      return "parallel";
    case SettingGroup::kPrecision:
      return "precision";
    case SettingGroup::kMemory:
      return "memory";
    case SettingGroup::kOptimizer:
      return "optimizer";
    case SettingGroup::kSchedule:
      return "schedule";
    case SettingGroup::kCheckpoint:
      return "checkpoint";
    case SettingGroup::kLogging:
      return "logging";
  }
  return "?";
}

namespace {

// ---- a setting's value as text, from text, and as JSON, by type ------------------------------

template <typename T>
std::string text_of(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v;
  } else if constexpr (std::is_same_v<T, SpMode>) {
    return sp_mode_name(v);
  } else if constexpr (std::is_same_v<T, SpLayout>) {
    return std::string(sp_layout_name(v));
  } else if constexpr (std::is_same_v<T, Transport>) {
    return v == Transport::kLocal ? "local" : v == Transport::kNccl ? "nccl" : "auto";
  } else if constexpr (std::is_same_v<T, Device> || std::is_same_v<T, ResumeFrom>) {
    return v.str();
  } else if constexpr (std::is_same_v<T, AttnImplementation>) {
    return attn_implementation_name(v);
  } else if constexpr (std::is_same_v<T, OffloadDevice>) {
    return offload_device_name(v);
  } else if constexpr (std::is_same_v<T, LrScheduleType>) {
    return lr_schedule_type_name(v);
  } else if constexpr (std::is_same_v<T, Precision>) {
    return precision_name(v);
  } else {
    return fmt::format("{}", v);
  }
}

template <typename T>
T from_text(const std::string& s, const std::string& flag) {
  if constexpr (std::is_same_v<T, bool>) {
    if (s == "true" || s == "1" || s == "on" || s == "yes") return true;
    if (s == "false" || s == "0" || s == "off" || s == "no") return false;
    throw InputError(fmt::format("{}={}: expected true or false", flag, s));
  } else if constexpr (std::is_same_v<T, std::string>) {
    return s;
  } else if constexpr (std::is_same_v<T, SpMode>) {
    return parse_sp_mode(s, flag);
  } else if constexpr (std::is_same_v<T, SpLayout>) {
    return parse_sp_layout(s, flag);
  } else if constexpr (std::is_same_v<T, Transport>) {
    return parse_transport(s, flag);
  } else if constexpr (std::is_same_v<T, Device>) {
    return parse_device(s, flag);
  } else if constexpr (std::is_same_v<T, ResumeFrom>) {
    (void)flag;
    return ResumeFrom::parse(s);
  } else if constexpr (std::is_same_v<T, OffloadDevice>) {
    return parse_offload_device(s, flag);
  } else if constexpr (std::is_same_v<T, AttnImplementation>) {
    try {
      return attn_implementation_of(s);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}={}: {}", flag, s, e.what()));
    }
  } else if constexpr (std::is_same_v<T, LrScheduleType>) {
    return parse_lr_schedule_type(s, flag);
  } else if constexpr (std::is_same_v<T, Precision>) {
    return parse_precision(s, flag);
  } else if constexpr (std::is_integral_v<T>) {
    T v{};
    const char* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data(), end, v);
    SEQPAR_INPUT_CHECK(ec == std::errc() && p == end && !s.empty(), "{}={}: expected a whole number in [{}, {}]", flag,
                       s, std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    return v;
  } else {
    static_assert(std::is_floating_point_v<T>);
    // Whole text only, decimal (strtod also took leading spaces and hex floats), one optional '+'
    // (as Python's float() takes it), and finite also in the field's type (1e39 is inf as a float).
    double v = 0;
    const bool plus = !s.empty() && s[0] == '+';
    const char* begin = s.data() + (plus ? 1 : 0);
    const auto [end, ec] = std::from_chars(begin, s.data() + s.size(), v);
    SEQPAR_INPUT_CHECK(begin < s.data() + s.size() && !(plus && *begin == '-') && ec == std::errc() &&
                           end == s.data() + s.size() && std::isfinite(v) && std::isfinite(static_cast<T>(v)),
                       "{}={}: expected a finite decimal number", flag, s);
    return static_cast<T>(v);
  }
}

template <typename T>
json json_of(const T& v) {
  if constexpr (std::is_enum_v<T> || std::is_same_v<T, Device> || std::is_same_v<T, ResumeFrom>) {
    return text_of(v);
  } else {
    return v;
  }
}

template <typename T>
T from_json_value(const json& j, const std::string& name) {
  try {
    if constexpr (std::is_enum_v<T> || std::is_same_v<T, Device> || std::is_same_v<T, ResumeFrom>) {
      return from_text<T>(j.get<std::string>(), name);
    } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string>) {
      return j.get<T>();
    } else if constexpr (std::is_integral_v<T>) {
      // A whole number that fits the field: nlohmann's get<> would wrap -1 into a uint64_t seed.
      const bool fits = j.is_number_unsigned() ? j.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                        : j.is_number_integer()
                            ? j.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                  (j.get<int64_t>() < 0 ||
                                   static_cast<uint64_t>(j.get<int64_t>()) <=
                                       static_cast<uint64_t>(std::numeric_limits<T>::max()))
                            : false;
      SEQPAR_INPUT_CHECK(fits, "setting {}: {} is not a whole number in [{}, {}]", name, j.dump(),
                         std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
      return j.get<T>();
    } else {
      SEQPAR_INPUT_CHECK(j.is_number() && std::isfinite(static_cast<T>(j.get<double>())),
                         "setting {}: {} is not a finite number", name, j.dump());
      return j.get<T>();
    }
  } catch (const json::exception& e) {
    throw InputError(fmt::format("setting {}: {} is not a value of its type ({})", name, j.dump(), e.what()));
  }
}

// A declaration of a field of TrainConfig (reached by `field`).
template <typename T>
SettingDecl decl(std::string name, SettingGroup group, std::vector<std::string> flags, T& (*field)(TrainConfig&),
                 std::string help, std::string deepspeed = "", std::string accelerate = "") {
  SettingDecl d;
  d.name = std::move(name);
  d.group = group;
  d.flags = std::move(flags);
  d.help = std::move(help);
  d.deepspeed = std::move(deepspeed);
  d.accelerate = std::move(accelerate);
  d.is_switch = std::is_same_v<T, bool>;
  d.type_name = std::is_same_v<T, bool>       ? "BOOL"
                : std::is_integral_v<T>       ? "INT"
                : std::is_floating_point_v<T> ? "FLOAT"
                                              : "TEXT";
  d.get = [field](const TrainConfig& c) { return text_of(field(const_cast<TrainConfig&>(c))); };
  d.set = [field](TrainConfig& c, const std::string& v, const std::string& flag) { field(c) = from_text<T>(v, flag); };
  d.to_json = [field](const TrainConfig& c) { return json_of(field(const_cast<TrainConfig&>(c))); };
  const std::string n = d.name;
  d.from_json = [field, n](TrainConfig& c, const json& j) { field(c) = from_json_value<T>(j, n); };
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
    d.number = [field](const TrainConfig& c) { return static_cast<double>(field(const_cast<TrainConfig&>(c))); };
  if constexpr (std::is_same_v<T, SpMode>) d.choices = {"ulysses", "ring", "hybrid"};
  if constexpr (std::is_same_v<T, SpLayout>) d.choices = {"zigzag", "contiguous"};
  if constexpr (std::is_same_v<T, Transport>) d.choices = {"auto", "local", "nccl"};
  if constexpr (std::is_same_v<T, AttnImplementation>) d.choices = {"sdpa", "flash_attention_2", "flash_attention_3"};
  if constexpr (std::is_same_v<T, OffloadDevice>) d.choices = {"none", "cpu"};
  if constexpr (std::is_same_v<T, Precision>) d.choices = {"bf16", "fp16"};
  return d;
}

// The rule a numeric setting's every value must satisfy.
SettingDecl& ruled(SettingDecl& d, NumberRule rule) {
  SEQPAR_CHECK(d.number != nullptr, "setting {} is not numeric", d.name);
  d.rule = rule;
  return d;
}
constexpr double kInf = HUGE_VAL;
const NumberRule kPositive{0, kInf, true, false};   // > 0
const NumberRule kNonNegative{0, kInf};             // >= 0
const NumberRule kAtLeastOne{1, kInf};              // >= 1
const NumberRule kUnitOpen{0, 1, false, true};      // [0, 1)
const NumberRule kUnitClosed{0, 1};                 // [0, 1]

// The defaults by source (docs/configs.md says where each comes from): the demo's, HF
// TrainingArguments' (transformers 5), and DeepSpeed's engine's (deepspeed/runtime/constants.py and
// FusedAdam's constructor; no "scheduler" is a constant lr). Unset: TrainConfig's own.
void defaults(std::vector<SettingDecl>& s, const std::string& name, std::optional<std::string> demo,
              std::optional<std::string> hf, std::optional<std::string> ds);

SettingDecl with(SettingDecl d, unsigned commands, ResumeRule resume = ResumeRule::kFree) {
  d.commands = commands;
  d.resume = resume;
  return d;
}

constexpr unsigned kAll = kTrainCommand | kFwdBwdCommand | kBenchTrainCommand;
constexpr unsigned kTrainBench = kTrainCommand | kBenchTrainCommand;
using G = SettingGroup;
using R = ResumeRule;

SettingDecl& find_in(std::vector<SettingDecl>& s, const std::string& name) {
  for (SettingDecl& d : s)
    if (d.name == name) return d;
  SEQPAR_CHECK(false, "no setting {} declared", name);
  return s.front();
}

void declare_model(std::vector<SettingDecl>& s) {
  s.push_back(with(decl(
                       "model", G::kModel, {"--model"}, +[](TrainConfig& c) -> std::string& { return c.model.dir; },
                       "HF model directory to start from (config.json + *.safetensors); empty: the built-in tiny "
                       "Llama, randomly initialised"),
                   kTrainBench));
  // Declared before the sizes: the command line applies options in declaration order, so the size
  // flags override the preset's fields.
  s.push_back(with(decl(
                       "preset", G::kModel, {"--preset"}, +[](TrainConfig& c) -> std::string& { return c.model.preset; },
                       "a known architecture, randomly initialised, instead of the built-in tiny Llama (not with "
                       "--model): " +
                           preset_choices() + "; the size flags override its fields"),
                   kTrainCommand));
  s.back().empty_text = "(none)";
  s.back().choices = llama_preset_names();
  s.back().set = [](TrainConfig& c, const std::string& v, const std::string& flag) {
    if (!v.empty()) {
      const auto& names = llama_preset_names();
      SEQPAR_INPUT_CHECK(std::find(names.begin(), names.end(), v) != names.end(), "{}={}: not a known preset: {}", flag,
                         v, preset_choices());
      c.model.arch = llama_preset(v);
    }
    c.model.preset = v;
  };
  // A checkpoint records the model's every field: its preset is the name only.
  s.back().from_json = [](TrainConfig& c, const json& j) { c.model.preset = from_json_value<std::string>(j, "preset"); };
  s.push_back(decl(
      "hidden_size", G::kModel, {"--hidden-size"}, +[](TrainConfig& c) -> int64_t& { return c.model.arch.hidden_size; },
      "built-in model: hidden size"));
  s.push_back(decl(
      "intermediate_size", G::kModel, {"--intermediate-size"},
      +[](TrainConfig& c) -> int64_t& { return c.model.arch.intermediate_size; }, "built-in model: MLP width"));
  s.push_back(decl(
      "num_layers", G::kModel, {"--num-layers"}, +[](TrainConfig& c) -> int64_t& { return c.model.arch.num_layers; },
      "built-in model: decoder layers"));
  s.push_back(decl(
      "num_heads", G::kModel, {"--num-heads"}, +[](TrainConfig& c) -> int64_t& { return c.model.arch.num_heads; },
      "built-in model: query heads"));
  s.push_back(decl(
      "num_kv_heads", G::kModel, {"--num-kv-heads"}, +[](TrainConfig& c) -> int64_t& { return c.model.arch.num_kv_heads; },
      "built-in model: KV heads"));
  s.push_back(decl(
      "head_dim", G::kModel, {"--head-dim"}, +[](TrainConfig& c) -> int64_t& { return c.model.arch.head_dim; },
      "built-in model: head dim (CUDA needs 64, 96 or 128)"));
  s.push_back(decl(
      "max_position_embeddings", G::kModel, {"--max-position-embeddings"},
      +[](TrainConfig& c) -> int64_t& { return c.model.arch.max_position_embeddings; },
      "built-in model: the longest sequence it is built for (HF max_position_embeddings; a learned-position "
      "model's table size)"));
  s.push_back(decl(
      "init_std", G::kModel, {"--init-std"}, +[](TrainConfig& c) -> float& { return c.model.init_std; },
      "standard deviation of the random init (HF initializer_range; without --model only)"));
  s.push_back(with(
      decl(
          "attn_implementation", G::kModel, {"--attn-implementation"},
          +[](TrainConfig& c) -> AttnImplementation& { return c.model.attn_implementation; },
          "Hugging Face's attn_implementation: sdpa (cuDNN fused attention on CUDA where it is exact and measured "
          "faster, seqpar's flash kernel elsewhere), flash_attention_2 or flash_attention_3 (seqpar's flash kernel "
          "always); eager is rejected (it materialises the [S, S] scores)",
          "", "parallelism_config.parallelism_config_sp_attn_implementation"),
      kAll));
  find_in(s, "model").empty_text = "built-in demo Llama";
  for (const char* size : {"hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                           "max_position_embeddings"})
    find_in(s, size).builtin_model_only = true;
}

void declare_data(std::vector<SettingDecl>& s) {
  s.push_back(with(decl(
                       "data", G::kData, {"--data"}, +[](TrainConfig& c) -> std::string& { return c.data.path; },
                       "token file (SPTOK1, from `seqpar prepare-data`) to train on; empty: the built-in recall task"),
                   kTrainCommand, R::kMustMatch));
  s.push_back(decl(
      "eval_data", G::kData, {"--eval-data"}, +[](TrainConfig& c) -> std::string& { return c.data.eval_path; },
      "token file for the eval loss (with --data), at every --eval-every"));
  s.push_back(with(decl(
                       "shuffle", G::kData, {"--no-shuffle"}, +[](TrainConfig& c) -> bool& { return c.data.shuffle; },
                       "--no-shuffle reads the token file's documents and sequences in file order (default: a new "
                       "order every epoch)"),
                   kTrainCommand, R::kMustMatch));
  s.back().switch_value = "false";
  s.push_back(with(decl(
                       "document_mask", G::kData, {"--no-document-mask"},
                       +[](TrainConfig& c) -> bool& { return c.data.document_mask; },
                       "token data: attention stays inside each packed document and positions restart per document "
                       "(HF packing; Megatron's --reset-attention-mask --reset-position-ids); --no-document-mask makes "
                       "each sequence one stream whose documents see the ones before them, positions running on "
                       "(Megatron's default)"),
                   kTrainCommand, R::kWarn));
  s.back().switch_value = "false";
  s.push_back(with(decl(
                       "eod_mask_loss", G::kData, {"--eod-mask-loss"},
                       +[](TrainConfig& c) -> bool& { return c.data.eod_mask_loss; },
                       "with --no-document-mask: the prediction of a document's first token from the one before "
                       "it is not trained (Megatron's --eod-mask-loss: the EOD predicts nothing); with the document "
                       "mask it is so already"),
                   kTrainCommand, R::kWarn));
  s.push_back(with(decl(
                       "seq_len", G::kData, {"--seq-len"}, +[](TrainConfig& c) -> int64_t& { return c.data.task.seq_len; },
                       "tokens per sequence", "", "parallelism_config.parallelism_config_sp_seq_length"),
                   kTrainCommand, R::kMustMatch));
  s.push_back(
      with(decl(
               "micro_batch", G::kData, {"--micro-batch"}, +[](TrainConfig& c) -> int& { return c.data.micro_batch; },
               "sequences per micro-batch per data-parallel rank", "train_micro_batch_size_per_gpu"),
           kTrainBench, R::kMustMatch));
  s.push_back(with(decl(
                       "grad_accum", G::kData, {"--grad-accum"}, +[](TrainConfig& c) -> int& { return c.data.grad_accum; },
                       "micro-batches accumulated per step", "gradient_accumulation_steps",
                       "deepspeed_config.gradient_accumulation_steps"),
                   kTrainCommand, R::kMustMatch));
  s.push_back(with(decl(
                       "global_batch_size", G::kData, {"--global-batch-size"},
                       +[](TrainConfig& c) -> int64_t& { return c.data.global_batch; },
                       "sequences per optimizer step over all data-parallel ranks (Megatron's global batch, "
                       "DeepSpeed's train_batch_size): grad_accum = global_batch_size / (micro_batch × dp), which "
                       "must divide (0 = micro_batch × grad_accum × dp)"),
                   kTrainCommand));
  s.back().print_when_given = true;
  s.push_back(decl(
      "eval_batches", G::kData, {"--eval-batches"}, +[](TrainConfig& c) -> int& { return c.data.eval_batches; },
      "batches per evaluation (recall task), micro-batches per data-parallel rank (--eval-data)"));
  s.push_back(with(decl(
                       "num_pairs", G::kData, {"--num-pairs"}, +[](TrainConfig& c) -> int& { return c.data.task.num_pairs; },
                       "recall task: key-value pairs per sequence"),
                   kTrainCommand, R::kMustMatch));
  s.push_back(with(decl(
                       "num_queries", G::kData, {"--num-queries"},
                       +[](TrainConfig& c) -> int& { return c.data.task.num_queries; }, "recall task: queries per sequence"),
                   kTrainCommand, R::kMustMatch));
  find_in(s, "data").empty_text = "built-in recall task";
}

void declare_parallel(std::vector<SettingDecl>& s) {
  s.push_back(with(decl(
                       "sp", G::kParallel, {"--sp"}, +[](TrainConfig& c) -> int& { return c.parallel.sp; },
                       "sequence-parallel degree (ranks sharing one sequence)", "sequence_parallel_size",
                       "parallelism_config.parallelism_config_sp_size, parallelism_config.parallelism_config_cp_size"),
                   kAll, R::kMustMatch));
  s.push_back(with(decl(
                       "sp_mode", G::kParallel, {"--sp-mode"}, +[](TrainConfig& c) -> SpMode& { return c.parallel.sp_mode; },
                       "ulysses (all-to-all) | ring (k/v blocks around the ring) | hybrid (Ulysses inside, ring "
                       "across)",
                       "", "parallelism_config.parallelism_config_cp_size"),
                   kAll, R::kMustMatch));
  s.push_back(with(
      decl(
          "ulysses_degree", G::kParallel, {"--ulysses-degree"},
          +[](TrainConfig& c) -> int& { return c.parallel.ulysses_degree; }, "hybrid: ranks per Ulysses group (must divide sp)", "",
          "parallelism_config.parallelism_config_cp_size"),
      kAll, R::kMustMatch));
  s.push_back(
      with(decl(
               "sp_layout", G::kParallel, {"--sp-layout"}, +[](TrainConfig& c) -> SpLayout& { return c.parallel.layout; },
               "ring/hybrid token layout: zigzag (causal load balance) | contiguous"),
           kAll, R::kMustMatch));
  s.push_back(
      with(decl(
               "dp_replicate", G::kParallel, {"--dp-replicate"}, +[](TrainConfig& c) -> int& { return c.parallel.dp_replicate; },
               "data-parallel replicas", "", "parallelism_config.parallelism_config_dp_replicate_size"),
           kTrainCommand, R::kMustMatch));
  s.push_back(with(decl(
                       "dp_shard", G::kParallel, {"--dp-shard"}, +[](TrainConfig& c) -> int& { return c.parallel.dp_shard; },
                       "data-parallel shard degree", "", "parallelism_config.parallelism_config_dp_shard_size"),
                   kTrainCommand, R::kMustMatch));
  s.push_back(
      with(decl(
               "device", G::kParallel, {"--device"}, +[](TrainConfig& c) -> Device& { return c.parallel.device; },
               "cpu | cuda | cuda:N (CUDA: bf16 or fp16 compute, --mixed-precision; f32 gradients and "
               "master weights; every rank of this process on that GPU)"),
           kAll));
  s.push_back(
      with(decl(
               "transport", G::kParallel, {"--transport"}, +[](TrainConfig& c) -> Transport& { return c.parallel.transport; },
               "auto | local | nccl: ranks as threads of this process (local), or one process per rank and "
               "GPU over NCCL when started by seqpar launch / torchrun / Slurm / mpirun (auto: nccl when "
               "launched with --device cuda)"),
           kAll));
}

// Mixed precision and fp16's loss scaler (train/loss_scaler.h; DeepSpeed's fp16 section, its defaults).
void declare_precision(std::vector<SettingDecl>& s) {
  s.push_back(with(decl(
                       "mixed_precision", G::kPrecision, {"--mixed-precision", "--precision"},
                       +[](TrainConfig& c) -> Precision& { return c.precision.mixed_precision; },
                       "the GPU's compute type: bf16 (f32's exponent range, no loss scaling) | fp16 (IEEE half, "
                       "DeepSpeed's loss scaler: --loss-scale, --initial-scale-power, ...); weights and "
                       "activations only, gradients, master weights and moments stay f32; the CPU computes in "
                       "f32 with either (fp16 still runs the loss scaler)",
                       "fp16.enabled, bf16.enabled, bfloat16.enabled", "mixed_precision"),
                   kAll, R::kWarn));
  s.push_back(with(decl(
                       "loss_scale", G::kPrecision, {"--loss-scale"},
                       +[](TrainConfig& c) -> double& { return c.precision.scaler.loss_scale; },
                       "fp16: 0 = dynamic loss scaling, > 0 = this static scale (an overflow is then a non-finite "
                       "step for the on_nonfinite guard)",
                       "fp16.loss_scale"),
                   kAll, R::kWarn));
  s.push_back(
      with(decl(
               "initial_scale_power", G::kPrecision, {"--initial-scale-power"},
               +[](TrainConfig& c) -> int& { return c.precision.scaler.initial_scale_power; },
               "fp16, dynamic: the scale starts at 2^initial_scale_power (0 .. 127)", "fp16.initial_scale_power"),
           kAll, R::kWarn));
  s.push_back(
      with(decl(
               "loss_scale_window", G::kPrecision, {"--loss-scale-window"},
               +[](TrainConfig& c) -> int64_t& { return c.precision.scaler.loss_scale_window; },
               "fp16, dynamic: the scale doubles after this many overflow-free steps (>= 1)", "fp16.loss_scale_window"),
           kAll, R::kWarn));
  s.push_back(with(decl(
                       "hysteresis", G::kPrecision, {"--hysteresis"},
                       +[](TrainConfig& c) -> int& { return c.precision.scaler.hysteresis; },
                       "fp16, dynamic: overflows tolerated before the scale halves (DeepSpeed's delayed shift; "
                       "refilled when the scale doubles; >= 1)",
                       "fp16.hysteresis"),
                   kAll, R::kWarn));
  s.push_back(
      with(decl(
               "consecutive_hysteresis", G::kPrecision, {"--consecutive-hysteresis"},
               +[](TrainConfig& c) -> bool& { return c.precision.scaler.consecutive_hysteresis; },
               "fp16, dynamic: refill the hysteresis after every overflow-free step", "fp16.consecutive_hysteresis"),
           kAll, R::kWarn));
  s.push_back(with(decl(
                       "min_loss_scale", G::kPrecision, {"--min-loss-scale"},
                       +[](TrainConfig& c) -> double& { return c.precision.scaler.min_loss_scale; },
                       "fp16, dynamic: the scale never drops below it; an overflow at it is a non-finite step for the "
                       "on_nonfinite guard (DeepSpeed stops the run there) (> 0)",
                       "fp16.min_loss_scale"),
                   kAll, R::kWarn));
}

void declare_memory(std::vector<SettingDecl>& s) {
  s.push_back(
      with(decl(
               "activation_checkpointing", G::kMemory, {"--activation-checkpointing", "--gradient-checkpointing"},
               +[](TrainConfig& c) -> bool& { return c.memory.activation_checkpointing; },
               "keep only each decoder layer's input in forward and recompute the layer in backward (HF's "
               "gradient_checkpointing: the same gradients, far less activation memory, about one more "
               "forward)",
               "", "fsdp_config.fsdp_activation_checkpointing"),
           kAll));
  s.push_back(with(decl(
                       "checkpoint_keep_attention", G::kMemory, {"--checkpoint-keep-attention"},
                       +[](TrainConfig& c) -> bool& { return c.memory.checkpoint_keep_attention; },
                       "with --activation-checkpointing: also keep each layer's attention output and context (q, k, "
                       "v, LSE: O(tokens)), so backward recomputes the norms and the MLP but not attention or its "
                       "communication"),
                   kAll));
  s.push_back(with(decl(
                       "checkpoint_offload", G::kMemory, {"--checkpoint-offload"},
                       +[](TrainConfig& c) -> bool& { return c.memory.checkpoint_offload; },
                       "with --activation-checkpointing: each layer's kept input waits in host memory (pinned; the "
                       "copies overlap with compute) between its forward and its backward (ALST's checkpoint "
                       "offload)"),
                   kAll));
  s.push_back(with(decl(
                       "checkpoint_placement", G::kMemory, {"--checkpoint-placement"},
                       +[](TrainConfig& c) -> std::string& { return c.memory.checkpoint_placement; },
                       "with --activation-checkpointing: where each layer's kept input waits, one letter per layer "
                       "from the bottom, each optionally after a count: g (GPU), h (host memory, pinned), r (not "
                       "kept: recomputed in backward from the nearest kept input below, one more layer forward "
                       "each), f (not checkpointed: the layer keeps all its activations and its backward "
                       "recomputes nothing, as Megatron's --recompute-num-layers leaves the layers above N), e.g. "
                       "16g8h8r, 20g8f; auto: the memory plan chooses for the run's length, GPU and host memory "
                       "(fewest recomputed layers, then fewest offloaded; when every input fits on the GPU, the "
                       "most top layers f whose plan stays within 95% of it); empty: all on the GPU (seqpar plan "
                       "--longest prints the placement it assumed)"),
                   kAll));
  s.push_back(with(decl(
                       "tiled_mlp_tokens", G::kMemory, {"--tiled-mlp-tokens"},
                       +[](TrainConfig& c) -> int64_t& { return c.memory.mlp_tile_tokens; },
                       "tiled MLP (ALST's TiledMLP): each layer's MLP over tiles of this many tokens of a rank's "
                       "shard, recomputed in backward (0 = untiled; >= 0)"),
                   kAll));
  s.push_back(with(decl(
                       "tiled_loss_tokens", G::kMemory, {"--tiled-loss-tokens"},
                       +[](TrainConfig& c) -> int64_t& { return c.memory.loss_tile_tokens; },
                       "tiled loss: the LM head and cross-entropy over tiles of this many tokens, never a [tokens, "
                       "vocab] logits tensor (0 = untiled; >= 0)"),
                   kAll));
  s.push_back(
      with(decl(
               "zero_stage", G::kMemory, {"--zero-stage"}, +[](TrainConfig& c) -> int& { return c.memory.zero_stage; },
               "ZeRO: 1 shards the AdamW state (moments, f32 master weights) over the ranks; 2 also "
               "partitions the gradients; 3 also the decoder layers' weights (gathered per layer before its "
               "forward, recompute and backward); 0 = replicated",
               "zero_optimization.stage",
               "deepspeed_config.zero_stage, fsdp_config.fsdp_sharding_strategy, fsdp_config.fsdp_reshard_after_forward"),
           kTrainBench));
  s.back().choices = {"0", "1", "2", "3"};
  s.push_back(with(decl(
                       "offload_optimizer", G::kMemory, {"--offload-optimizer"},
                       +[](TrainConfig& c) -> OffloadDevice& { return c.memory.offload_optimizer; },
                       "cpu: the f32 master weights and AdamW moments (this rank's ZeRO share) in host memory, the "
                       "step on the CPU (all cores) streamed through pinned staging overlapped with the copies",
                       "zero_optimization.offload_optimizer.device", "deepspeed_config.offload_optimizer_device"),
                   kTrainBench));
  s.push_back(with(decl(
                       "offload_gradients", G::kMemory, {"--offload-gradients"},
                       +[](TrainConfig& c) -> bool& { return c.memory.offload_gradients; },
                       "with --offload-optimizer cpu: each layer's f32 gradients go to pinned host memory as its "
                       "backward ends, where the CPU step reads them (the GPU keeps one layer's and the edges' "
                       "instead of 4 bytes a parameter; the host holds them)"),
                   kTrainBench));
  s.push_back(with(decl(
                       "offload_param", G::kMemory, {"--offload-param"},
                       +[](TrainConfig& c) -> OffloadDevice& { return c.memory.offload_param; },
                       "cpu (needs --zero-stage 3): the decoder layers' bf16 weights in host memory, each layer "
                       "copied to the GPU before it runs, the next one prefetched",
                       "zero_optimization.offload_param.device",
                       "deepspeed_config.offload_param_device, fsdp_config.fsdp_offload_params"),
                   kTrainBench));
  s.push_back(with(decl(
                       "offload_param_pin_memory", G::kMemory, {"--no-offload-param-pin-memory"},
                       +[](TrainConfig& c) -> bool& { return c.memory.offload_param_pin_memory; },
                       "with --offload-param cpu: the host weights in pinned memory, so their copies are "
                       "asynchronous (--no-offload-param-pin-memory: pageable memory, synchronous copies)",
                       "zero_optimization.offload_param.pin_memory"),
                   kTrainBench));
  s.back().switch_value = "false";
  s.push_back(with(decl(
                       "host_memory_gib", G::kMemory, {"--host-memory-gib"},
                       +[](TrainConfig& c) -> double& { return c.memory.host_memory_gib; },
                       "host memory the run may use (GiB): the plan's host bytes (offload buffers, host optimizer "
                       "state and weights, staging) are checked against it before training starts (0 = the "
                       "machine's MemAvailable; >= 0)"),
                   kTrainBench));
}

void declare_optimizer(std::vector<SettingDecl>& s) {
  s.push_back(with(decl(
                       "lr", G::kOptimizer, {"--lr"}, +[](TrainConfig& c) -> float& { return c.optimizer.adamw.lr; },
                       "peak learning rate (> 0)", "optimizer.params.lr"),
                   kAll, R::kWarn));
  s.push_back(
      with(decl(
               "beta1", G::kOptimizer, {"--beta1"}, +[](TrainConfig& c) -> float& { return c.optimizer.adamw.beta1; },
               "AdamW beta1", "optimizer.params.betas[0]"),
           kAll, R::kWarn));
  s.push_back(
      with(decl(
               "beta2", G::kOptimizer, {"--beta2"}, +[](TrainConfig& c) -> float& { return c.optimizer.adamw.beta2; },
               "AdamW beta2", "optimizer.params.betas[1]"),
           kAll, R::kWarn));
  s.push_back(with(decl(
                       "eps", G::kOptimizer, {"--eps"}, +[](TrainConfig& c) -> float& { return c.optimizer.adamw.eps; },
                       "AdamW eps", "optimizer.params.eps"),
                   kAll, R::kWarn));
  s.push_back(with(decl(
                       "weight_decay", G::kOptimizer, {"--weight-decay"},
                       +[](TrainConfig& c) -> float& { return c.optimizer.adamw.weight_decay; },
                       "AdamW decoupled weight decay", "optimizer.params.weight_decay"),
                   kAll, R::kWarn));
  s.push_back(
      with(decl(
               "clip", G::kOptimizer, {"--clip"}, +[](TrainConfig& c) -> double& { return c.optimizer.clip; },
               "max global gradient norm (0 = no clipping)", "gradient_clipping", "deepspeed_config.gradient_clipping"),
           kAll, R::kWarn));
}

void declare_schedule(std::vector<SettingDecl>& s) {
  s.push_back(with(decl(
                       "steps", G::kSchedule, {"--steps"}, +[](TrainConfig& c) -> int64_t& { return c.schedule.steps; },
                       "optimizer steps (>= 1)"),
                   kTrainBench, R::kWarn));
  s.push_back(with(
      decl(
          "train_tokens", G::kSchedule, {"--train-tokens"}, +[](TrainConfig& c) -> int64_t& { return c.schedule.train_tokens; },
          "run length in tokens: steps = ceil(train_tokens / tokens per step), tokens per step = "
          "global batch × seq_len (0 = --steps)"),
      kTrainCommand, R::kWarn));
  s.back().print_when_given = true;
  s.push_back(with(
      decl(
          "warmup_steps", G::kSchedule, {"--warmup-steps"}, +[](TrainConfig& c) -> int64_t& { return c.schedule.warmup_steps; },
          "linear warmup steps (also DeepSpeed's warmup_num_steps)", "scheduler.params.warmup_num_steps"),
      kTrainCommand, R::kWarn));
  s.push_back(with(decl(
                       "warmup_tokens", G::kSchedule, {"--warmup-tokens"},
                       +[](TrainConfig& c) -> int64_t& { return c.schedule.warmup_tokens; },
                       "warmup length in tokens: warmup_steps = ceil(warmup_tokens / tokens per step) (0 = "
                       "--warmup-steps)"),
                   kTrainCommand, R::kWarn));
  s.back().print_when_given = true;
  s.push_back(with(decl(
                       "min_lr", G::kSchedule, {"--min-lr"}, +[](TrainConfig& c) -> double& { return c.schedule.min_lr; },
                       "the cosine schedule's floor as a learning rate: min_lr_ratio = min_lr / lr (>= 0; unset: "
                       "--min-lr-ratio)"),
                   kTrainCommand, R::kWarn));
  s.back().print_when_given = true;
  s.back().empty_text = "(none: min_lr_ratio)";
  s.back().get = [](const TrainConfig& c) { return c.schedule.min_lr < 0 ? std::string() : text_of(c.schedule.min_lr); };
  s.push_back(with(
      decl(
          "min_lr_ratio", G::kSchedule, {"--min-lr-ratio"}, +[](TrainConfig& c) -> float& { return c.schedule.min_lr_ratio; },
          "cosine decay floor as a fraction of lr (also WarmupCosineLR's cos_min_ratio)",
          "scheduler.params.cos_min_ratio"),
      kTrainCommand, R::kWarn));
  s.push_back(with(decl(
                       "seed", G::kSchedule, {"--seed"}, +[](TrainConfig& c) -> uint64_t& { return c.schedule.seed; },
                       "seed for init and data"),
                   kTrainCommand, R::kMustMatch));
}

void declare_lr_schedule(std::vector<SettingDecl>& s) {
  s.push_back(with(decl(
                       "lr_schedule", G::kSchedule, {"--lr-schedule"},
                       +[](TrainConfig& c) -> LrScheduleType& { return c.schedule.lr.type; },
                       "linear_cosine (linear warmup, cosine decay to min_lr_ratio × lr: the demo's) | linear (HF "
                       "Trainer's: linear warmup, linear decay to 0) | constant (DeepSpeed's engine without a "
                       "scheduler); a DeepSpeed file's scheduler.type sets WarmupLR, WarmupDecayLR or WarmupCosineLR",
                       "scheduler.type"),
                   kTrainCommand, R::kWarn));
  s.back().choices = {"linear_cosine", "linear", "constant"};
}

void declare_checkpoint(std::vector<SettingDecl>& s) {
  s.push_back(decl(
      "save_dir", G::kCheckpoint, {"--save-dir"}, +[](TrainConfig& c) -> std::string& { return c.checkpoint.save_dir; },
      "checkpoint directory (step_NNNNNN/ subdirectories and `latest`)"));
  s.push_back(decl(
      "save_every", G::kCheckpoint, {"--save-every"}, +[](TrainConfig& c) -> int64_t& { return c.checkpoint.save_every; },
      "save a checkpoint every N steps (0 = only at the end of the run, when --save-dir is given)"));
  s.push_back(decl(
      "keep_last", G::kCheckpoint, {"--keep-last"}, +[](TrainConfig& c) -> int& { return c.checkpoint.keep_last; },
      "keep only the newest K checkpoints (0 = keep all)"));
  s.push_back(decl(
      "resume", G::kCheckpoint, {"--resume"}, +[](TrainConfig& c) -> ResumeFrom& { return c.checkpoint.resume; },
      "resume from a checkpoint: `latest` (also --resume alone: the newest in --save-dir), `auto` (the "
      "newest if there is one, else start fresh), or a checkpoint or save directory"));
  s.push_back(decl(
      "stop_at_step", G::kCheckpoint, {"--stop-at-step"}, +[](TrainConfig& c) -> int64_t& { return c.checkpoint.stop_at_step; },
      "stop after this step (saving a checkpoint with --save-dir), the schedule still that of --steps; "
      "0 = run to --steps"));
}

// The run's reliability settings (docs/RELIABILITY.md): what a diverging step does.
constexpr const char* kNonFiniteChoices[] = {"abort", "skip"};

void declare_reliability(std::vector<SettingDecl>& s) {
  s.push_back(with(decl(
                       "on_nonfinite", G::kCheckpoint, {"--on-nonfinite"},
                       +[](TrainConfig& c) -> std::string& { return c.checkpoint.on_nonfinite; },
                       "a step whose loss or gradient norm is NaN or inf never updates the weights (no AdamW step, "
                       "moments unchanged, never saved): abort = stop the run (nonzero exit, naming the step) at the "
                       "--max-nonfinite-steps-th such step in a row, the earlier ones skipped; skip = skip every "
                       "such step and go on (DeepSpeed's skipped steps), counted in the log and the metrics"),
                   kTrainBench));
  s.back().choices = {kNonFiniteChoices[0], kNonFiniteChoices[1]};
  // A value outside the choices is refused where it is given (flag or JSON), naming the setting.
  auto set = s.back().set;
  s.back().set = [set](TrainConfig& c, const std::string& v, const std::string& flag) {
    set(c, v, flag);
    SEQPAR_INPUT_CHECK(v == kNonFiniteChoices[0] || v == kNonFiniteChoices[1], "{}={}: expected abort or skip", flag,
                       v);
  };
  s.push_back(with(decl(
                       "max_nonfinite_steps", G::kCheckpoint, {"--max-nonfinite-steps"},
                       +[](TrainConfig& c) -> int& { return c.checkpoint.max_nonfinite_steps; },
                       "with --on-nonfinite abort: how many non-finite steps in a row stop the run (>= 1; 1 = the "
                       "first)"),
                   kTrainBench));
}

void declare_logging(std::vector<SettingDecl>& s) {
  s.push_back(decl(
      "log_every", G::kLogging, {"--log-every"}, +[](TrainConfig& c) -> int& { return c.logging.log_every; },
      "print a progress line every N steps (>= 1)", "steps_per_print"));
  s.push_back(decl(
      "eval_every", G::kLogging, {"--eval-every"}, +[](TrainConfig& c) -> int& { return c.logging.eval_every; },
      "evaluate (recall accuracy, or the --eval-data loss) every N steps and at the end (0 = only at "
      "the end)"));
  s.push_back(decl(
      "stop_at_accuracy", G::kLogging, {"--stop-at-accuracy"},
      +[](TrainConfig& c) -> double& { return c.logging.stop_at_accuracy; },
      "stop once eval accuracy reaches this (0 = never)"));
  s.push_back(decl(
      "metrics_out", G::kLogging, {"--metrics-out"}, +[](TrainConfig& c) -> std::string& { return c.logging.metrics_out; },
      "JSONL metrics file (loss, tokens/s per log step; eval accuracy or loss); the plot goes next to "
      "it with the extension .svg"));
  s.push_back(with(decl(
                       "profile", G::kLogging, {"--profile"}, +[](TrainConfig& c) -> bool& { return c.logging.profile; },
                       "time every op (GEMM by shape, attention, norms, loss, optimizer) of rank 0's steps after the "
                       "first on the device, and print the table at the end (synchronises after each step)"),
                   kTrainBench));
}

// ---- other tools' flags --------------------------------------------------------------------

constexpr const char* kMegatron = "Megatron-DeepSpeed";

FlagAlias& megatron(std::vector<SettingDecl>& s, const std::string& name, const std::string& flag) {
  SettingDecl& d = find_in(s, name);
  FlagAlias a;
  a.flag = flag;
  a.tool = kMegatron;
  a.is_switch = d.is_switch;
  d.aliases.push_back(std::move(a));
  return d.aliases.back();
}

// Megatron-DeepSpeed's pretrain_gpt.py flags (megatron/arguments.py) that are seqpar settings.
// docs/coming-from-megatron-deepspeed.md is the user's table of all of them. Where Megatron and
// seqpar spell a flag alike (--num-layers, --hidden-size, --lr, --seed, --weight-decay,
// --zero-stage, --global-batch-size, --min-lr, --train-tokens, and fp16's --loss-scale,
// --min-loss-scale, --loss-scale-window, --hysteresis) it is the setting's own flag.
void declare_megatron_aliases(std::vector<SettingDecl>& s) {
  // --fp16 / --bf16: Megatron-DeepSpeed's switches, and HF Trainer's (TrainingArguments) alike.
  for (const char* p : {"fp16", "bf16"}) {
    FlagAlias& a = megatron(s, "mixed_precision", std::string("--") + p);
    a.tool = "Megatron-DeepSpeed, HF Trainer";
    a.is_switch = true;
    a.switch_value = p;
    a.note = std::string("mixed_precision ") + p;
  }
  // Megatron gives the initial scale itself (default 2^32); DeepSpeed and seqpar its power of 2.
  FlagAlias& initial = megatron(s, "initial_scale_power", "--initial-loss-scale");
  initial.note = "a power of 2, 2^p -> p";
  initial.translate = [](const std::string& v) -> std::string {
    const double x = from_text<double>(v, "--initial-loss-scale");  // whole text, decimal, finite
    int p = 0;
    const bool ok = x >= 1 && std::frexp(x, &p) == 0.5 && p - 1 <= 127;
    SEQPAR_INPUT_CHECK(ok,
                       "--initial-loss-scale={}: expected a power of 2 in [1, 2^127] (seqpar's dynamic scale starts "
                       "at 2^initial_scale_power, as DeepSpeed's does)",
                       v);
    return std::to_string(p - 1);
  };
  // Megatron resets positions and attention at each EOD only when asked; seqpar's document_mask does
  // both together (its masking rule orders keys by position, so one without the other is not a mask
  // it can express), and by default.
  for (const char* flag : {"--reset-attention-mask", "--reset-position-ids"}) {
    FlagAlias& a = megatron(s, "document_mask", flag);
    a.is_switch = true;
    a.switch_value = "true";
    a.note = "document_mask true: positions and attention reset together at each document (seqpar's default)";
  }
  megatron(s, "num_heads", "--num-attention-heads").note =
      "also num_kv_heads = num_heads and head_dim = hidden_size / num_heads unless given (Megatron's defaults)";
  megatron(s, "num_kv_heads", "--num-key-value-heads");
  megatron(s, "intermediate_size", "--ffn-hidden-size");
  megatron(s, "seq_len", "--seq-length");
  megatron(s, "micro_batch", "--micro-batch-size");
  megatron(s, "sp", "--ds-sequence-parallel-size").note = "DeepSpeed-Ulysses: sp_mode ulysses";
  megatron(s, "beta1", "--adam-beta1");
  megatron(s, "beta2", "--adam-beta2");
  megatron(s, "eps", "--adam-eps");
  megatron(s, "clip", "--clip-grad");
  megatron(s, "init_std", "--init-method-std");
  megatron(s, "steps", "--train-iters");
  megatron(s, "warmup_steps", "--lr-warmup-iters");
  megatron(s, "warmup_tokens", "--lr-warmup-tokens");
  megatron(s, "log_every", "--log-interval");
  megatron(s, "eval_every", "--eval-interval");
  megatron(s, "eval_batches", "--eval-iters");
  megatron(s, "save_every", "--save-interval");
  megatron(s, "save_dir", "--save");
  megatron(s, "activation_checkpointing", "--checkpoint-activations");
  megatron(s, "activation_checkpointing", "--deepspeed-activation-checkpointing");
  // Megatron's three flash-attention flags pick a Python package (flash-attn 1, its Triton kernel,
  // flash-attn 2); seqpar has one flash kernel of its own.
  for (const char* flag : {"--use-flash-attn", "--use-flash-attn-triton", "--use-flash-attn-v2"}) {
    FlagAlias& a = megatron(s, "attn_implementation", flag);
    a.is_switch = true;
    a.switch_value = "flash_attention_2";
    a.note = "attn_implementation flash_attention_2: seqpar's flash kernel";
  }
  // cosine: linear warmup from 0, cosine decay to min_lr (seqpar's linear_cosine, which reaches
  // each value one step earlier than Megatron, whose first iteration trains at lr 0 during warmup);
  // linear: linear decay (seqpar's linear, to 0); constant: the lr throughout.
  FlagAlias& style = megatron(s, "lr_schedule", "--lr-decay-style");
  style.note = "cosine -> linear_cosine, linear -> linear (decays to 0: --min-lr must be 0), constant -> constant";
  style.translate = [](const std::string& v) -> std::string {
    if (v == "cosine") return "linear_cosine";
    if (v == "linear" || v == "constant") return v;
    throw InputError(fmt::format(
        "--lr-decay-style={}: seqpar has cosine (its linear_cosine), linear and constant; Megatron's {} schedule is "
        "not implemented (Megatron-DeepSpeed's choices: constant, linear, cosine, inverse-square-root)",
        v, v));
  };
}

// Flags of other tools with no setting behind them: a reason instead of "unknown option".
std::vector<ForeignFlag> declare_foreign() {
  const std::string no_tp =
      "seqpar has no tensor or pipeline parallelism: it splits the sequence (--sp / --ds-sequence-parallel-size, "
      "DeepSpeed-Ulysses, or ring and hybrid), the optimizer state, gradients and weights (--zero-stage 1-3) and "
      "replicates the rest over data parallelism";
  std::vector<ForeignFlag> flags = {
      {"--tensor-model-parallel-size", kMegatron, true, "1", true, no_tp},
      {"--pipeline-model-parallel-size", kMegatron, true, "1", true, no_tp},
      {"--no-pipeline-parallel", kMegatron, false, "", false,
       "seqpar has no pipeline parallelism, so there is nothing to turn off"},
      {"--sequence-parallel", kMegatron, false, "", true,
       "--sequence-parallel is Megatron-LM's sequence parallel optimization, which splits the LayerNorm and dropout "
       "activations over the tensor-parallel group: it needs tensor parallelism (Megatron-DeepSpeed turns it off "
       "when --tensor-model-parallel-size is 1, and it cannot be combined with --ds-sequence-parallel-size), and "
       "seqpar has none. DeepSpeed's sequence parallelism (Ulysses), which splits the whole sequence, is "
       "--ds-sequence-parallel-size N (seqpar's --sp N)"},
  };
  // Megatron decays the lr over --lr-decay-iters / --lr-decay-tokens (default: the run); seqpar's
  // schedules decay over the whole run, so the value is accepted when it is the run's length.
  for (const char* flag : {"--lr-decay-iters", "--lr-decay-tokens"}) {
    ForeignFlag f;
    f.flag = flag;
    f.tool = kMegatron;
    f.takes_value = true;
    f.refused = false;
    f.reason = "seqpar's schedules decay over the whole run: accepted when it equals the run's length";
    f.checked = true;
    flags.push_back(f);
  }
  return flags;
}

// Every numeric setting's rule, checked on each value whatever its source.
void declare_rules(std::vector<SettingDecl>& s) {
  for (const char* size : {"hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim"})
    ruled(find_in(s, size), kAtLeastOne);
  for (const char* name : {"seq_len", "micro_batch", "grad_accum", "steps", "log_every", "sp", "dp_replicate",
                           "dp_shard", "num_pairs", "num_queries"})
    ruled(find_in(s, name), kAtLeastOne);
  for (const char* name : {"ulysses_degree", "tiled_mlp_tokens", "tiled_loss_tokens", "eval_batches", "eval_every",
                           "warmup_steps", "weight_decay", "clip", "save_every", "keep_last", "stop_at_step"})
    ruled(find_in(s, name), kNonNegative);
  for (const char* name : {"global_batch_size", "train_tokens", "warmup_tokens"}) ruled(find_in(s, name), kNonNegative);
  ruled(find_in(s, "max_position_embeddings"), kAtLeastOne);
  ruled(find_in(s, "init_std"), kPositive);
  ruled(find_in(s, "zero_stage"), NumberRule{0, 3});
  ruled(find_in(s, "lr"), kPositive);
  ruled(find_in(s, "eps"), kPositive);
  ruled(find_in(s, "beta1"), kUnitOpen);
  ruled(find_in(s, "beta2"), kUnitOpen);
  ruled(find_in(s, "min_lr_ratio"), kUnitClosed);
  ruled(find_in(s, "stop_at_accuracy"), kUnitClosed);
  ruled(find_in(s, "seed"), NumberRule{0, 18446744073709551615.0});  // finite: a JSON -1 never wraps
  // The loss scaler's static scale; the dynamic scaler's settings are checked only when it runs
  // (LossScalerConfig::validate, from config_resolve and TrainConfig::validate_run), as DeepSpeed
  // checks them only then (a static-scale file may carry unused values).
  ruled(find_in(s, "loss_scale"), kNonNegative);
}

void defaults(std::vector<SettingDecl>& s, const std::string& name, std::optional<std::string> demo,
              std::optional<std::string> hf, std::optional<std::string> ds) {
  SettingDecl& d = find_in(s, name);
  d.demo_default = std::move(demo);
  d.hf_default = std::move(hf);
  d.ds_default = std::move(ds);
}

// The defaults by source, one row per setting: demo, HF Trainer, DeepSpeed (std::nullopt: the
// setting's own default, TrainConfig's). HF: transformers' TrainingArguments (learning_rate 5e-5,
// weight_decay 0, adam_beta1/2 0.9/0.999, adam_epsilon 1e-8, max_grad_norm 1.0,
// per_device_train_batch_size 8, warmup_steps 0, lr_scheduler_type linear). DeepSpeed: FusedAdam's
// lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0; gradient_clipping 0 (GRADIENT_CLIPPING_DEFAULT);
// no scheduler section = the optimizer's lr throughout. DeepSpeed has no micro-batch default (it
// refuses a config without train_batch_size or train_micro_batch_size_per_gpu: config_resolve).
// sp is 1 unless a flag or file asks for more; only the demo splits over 4.
void declare_defaults(std::vector<SettingDecl>& s) {
  const std::nullopt_t own = std::nullopt;
  defaults(s, "sp", "4", "1", "1");
  defaults(s, "seq_len", "128", own, own);
  defaults(s, "micro_batch", "16", "8", own);
  defaults(s, "steps", "600", own, own);
  defaults(s, "lr", "0.003", "5e-05", "0.001");
  defaults(s, "beta1", "0.9", "0.9", "0.9");
  defaults(s, "beta2", "0.999", "0.999", "0.999");
  defaults(s, "eps", "1e-08", "1e-08", "1e-08");
  defaults(s, "weight_decay", "0.01", "0", "0");
  defaults(s, "clip", "1", "1", "0");
  defaults(s, "warmup_steps", "30", "0", "0");
  defaults(s, "lr_schedule", "linear_cosine", "linear", "constant");
  defaults(s, "eval_every", "25", own, own);
  defaults(s, "stop_at_accuracy", "0.95", own, own);
}

std::vector<SettingDecl> declare() {
  std::vector<SettingDecl> s;
  declare_model(s);
  declare_data(s);
  declare_parallel(s);
  declare_precision(s);
  declare_memory(s);
  declare_optimizer(s);
  declare_schedule(s);
  declare_lr_schedule(s);
  declare_checkpoint(s);
  declare_reliability(s);
  declare_logging(s);
  declare_megatron_aliases(s);
  declare_rules(s);
  declare_defaults(s);
  return s;
}

}  // namespace

void validate_nonfinite_settings(const TrainConfig& c) {
  SEQPAR_INPUT_CHECK(c.checkpoint.on_nonfinite == kNonFiniteChoices[0] || c.checkpoint.on_nonfinite == kNonFiniteChoices[1],
                     "on_nonfinite={}: expected abort or skip", c.checkpoint.on_nonfinite);
  SEQPAR_INPUT_CHECK(c.checkpoint.max_nonfinite_steps >= 1, "max_nonfinite_steps={} must be >= 1 (1 = abort at the first)",
                     c.checkpoint.max_nonfinite_steps);
}

const std::vector<ForeignFlag>& foreign_flags() {
  static const std::vector<ForeignFlag> flags = declare_foreign();
  return flags;
}

std::vector<std::string> SettingDecl::flags_given(const std::set<std::string>& given) const {
  std::vector<std::string> out;
  if (has_flag())
    for (const std::string& f : flags)
      if (given.count(f)) out.push_back(f);
  for (const FlagAlias& a : aliases)
    if (given.count(a.flag)) out.push_back(a.flag);
  return out;
}

const std::vector<SettingDecl>& train_settings() {
  static const std::vector<SettingDecl> settings = declare();
  return settings;
}

const char* defaults_source_name(DefaultsSource source) {
  switch (source) {
    case DefaultsSource::kDemo:
      return "demo default";
    case DefaultsSource::kHfTrainer:
      return "HF Trainer default";
    case DefaultsSource::kDeepSpeed:
      return "DeepSpeed default";
  }
  return "?";
}

std::string NumberRule::text() const {
  if (hi == HUGE_VAL) return fmt::format("{} {}", lo_open ? ">" : ">=", lo);
  if (lo == -HUGE_VAL) return fmt::format("{} {}", hi_open ? "<" : "<=", hi);
  return fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
}

namespace {

std::vector<std::string> split_keys(const std::string& keys) {
  std::vector<std::string> out;
  for (size_t at = 0; at < keys.size();) {
    const size_t end = std::min(keys.find(", ", at), keys.size());
    out.push_back(keys.substr(at, end - at));
    at = end + 2;
  }
  return out;
}

}  // namespace

std::vector<std::string> SettingDecl::deepspeed_keys() const { return split_keys(deepspeed); }
std::vector<std::string> SettingDecl::accelerate_keys() const { return split_keys(accelerate); }

const std::optional<std::string>& SettingDecl::default_for(DefaultsSource source) const {
  switch (source) {
    case DefaultsSource::kDemo:
      return demo_default;
    case DefaultsSource::kHfTrainer:
      return hf_default;
    case DefaultsSource::kDeepSpeed:
      return ds_default;
  }
  return demo_default;
}

void apply_defaults(TrainConfig& c, DefaultsSource source) {
  for (const SettingDecl& d : train_settings())
    if (const std::optional<std::string>& v = d.default_for(source)) d.set(c, *v, d.name);
}

void check_setting_rules(const TrainConfig& c, Problems& problems,
                         const std::function<std::string(const std::string&)>& source_of, bool model_sizes) {
  for (const SettingDecl& d : train_settings()) {
    if (!d.rule || (d.builtin_model_only && !model_sizes)) continue;
    const double v = d.number(c);
    const NumberRule& r = *d.rule;
    const bool ok = std::isfinite(v) && (r.lo_open ? v > r.lo : v >= r.lo) && (r.hi_open ? v < r.hi : v <= r.hi);
    if (ok) continue;
    const std::string source = source_of ? source_of(d.name) : std::string();
    problems.add(fmt::format("{}={} must be {}{}{}", d.name, d.get(c), r.text(),
                             d.has_flag() ? " (" + d.flag() + ")" : std::string(),
                             source.empty() ? std::string() : ", from " + source));
  }
}

DType PrecisionSettings::compute_dtype(Device device) const {
  if (device.is_cpu()) return DType::kF32;
  return fp16() ? DType::kF16 : DType::kBF16;
}

const char* precision_name(Precision p) { return p == Precision::kFp16 ? "fp16" : "bf16"; }

Precision parse_precision(const std::string& text, const std::string& flag) {
  if (text == "bf16" || text == "bfloat16") return Precision::kBf16;
  if (text == "fp16" || text == "float16" || text == "f16") return Precision::kFp16;
  throw InputError(
      fmt::format("{}={}: expected bf16 or fp16 (seqpar has no fp32 or fp8 GPU mode: the CPU computes in "
                  "f32)",
                  flag, text));
}

const char* lr_schedule_type_name(LrScheduleType t) {
  switch (t) {
    case LrScheduleType::kLinearCosine:
      return "linear_cosine";
    case LrScheduleType::kLinear:
      return "linear";
    case LrScheduleType::kConstant:
      return "constant";
    case LrScheduleType::kWarmupLR:
      return "WarmupLR";
    case LrScheduleType::kWarmupDecayLR:
      return "WarmupDecayLR";
    case LrScheduleType::kWarmupCosineLR:
      return "WarmupCosineLR";
  }
  return "?";
}

LrScheduleType parse_lr_schedule_type(const std::string& text, const std::string& setting) {
  for (LrScheduleType t : {LrScheduleType::kLinearCosine, LrScheduleType::kLinear, LrScheduleType::kConstant,
                           LrScheduleType::kWarmupLR, LrScheduleType::kWarmupDecayLR, LrScheduleType::kWarmupCosineLR})
    if (text == lr_schedule_type_name(t)) return t;
  throw InputError(fmt::format("{}={} must be one of linear_cosine, linear, constant (or, from a DeepSpeed file, "
                               "WarmupLR, WarmupDecayLR, WarmupCosineLR)",
                               setting, text));
}

const SettingDecl* find_setting(const std::string& name) {
  for (const SettingDecl& d : train_settings())
    if (d.name == name) return &d;
  return nullptr;
}

json settings_to_json(const TrainConfig& c) {
  json j = json::object();
  for (const SettingDecl& d : train_settings()) j[d.name] = d.to_json(c);
  return j;
}

void settings_from_json(TrainConfig& c, const json& j) {
  SEQPAR_INPUT_CHECK(j.is_object(), "settings: expected a JSON object, got {}", j.type_name());
  for (auto it = j.begin(); it != j.end(); ++it) {
    const SettingDecl* d = find_setting(it.key());
    SEQPAR_INPUT_CHECK(d != nullptr, "settings: unknown setting '{}'", it.key());
    d->from_json(c, it.value());
  }
}

std::string settings_markdown_table(const TrainConfig& defaults) {
  auto cell = [](const std::string& s) {
    std::string out;
    for (char ch : s) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
    return out;
  };
  auto code = [&](const std::string& s) { return s.empty() ? std::string() : fmt::format("`{}`", cell(s)); };
  auto keys = [&](const std::vector<std::string>& ks) {
    std::string out;
    for (const std::string& k : ks) out += (out.empty() ? "" : ", ") + code(k);
    return out;
  };
  std::string out =
      "| setting | group | flags | DeepSpeed | Accelerate | default | what |\n"
      "| --- | --- | --- | --- | --- | --- | --- |\n";
  for (const SettingDecl& d : train_settings()) {
    std::string flags;
    for (const std::string& f : d.flags) flags += (flags.empty() ? "" : ", ") + code(f);
    for (const FlagAlias& a : d.aliases)
      flags += (flags.empty() ? "" : ", ") + code(a.flag) + " (" + a.tool + (a.note.empty() ? "" : ": " + a.note) + ")";
    const std::string own = d.get(defaults);
    std::string def = own.empty() ? std::string("(none)") : code(own);
    if (d.demo_default || d.hf_default || d.ds_default) {
      auto by = [&](const std::optional<std::string>& v) { return v ? code(*v) : def; };
      def = fmt::format("demo {}; HF Trainer {}; DeepSpeed {}", by(d.demo_default), by(d.hf_default),
                        d.name == "micro_batch" && !d.ds_default ? std::string("(required)") : by(d.ds_default));
    }
    if (d.rule) def += fmt::format(" (rule: {})", cell(d.rule->text()));
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", code(d.name), setting_group_name(d.group), flags,
                       keys(d.deepspeed_keys()), keys(d.accelerate_keys()), def, cell(d.help));
  }
  for (const ForeignFlag& f : foreign_flags())
    out +=
        fmt::format("| ({}) | - | {} ({}) | | | | {} |\n",
                    f.checked   ? "checked"
                    : f.refused ? "refused"
                                : "accepted, no effect",
                    code(f.flag), f.tool,
                    cell((f.accepted.empty() ? std::string() : fmt::format("{} accepted; ", f.accepted)) + f.reason));
  return out;
}

}  // namespace seqpar
