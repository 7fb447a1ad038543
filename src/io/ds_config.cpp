// DeepSpeed JSON -> DsConfig. What each key means, and what "auto" resolves to, is in
// docs/configs.md; the checks here are the ones that need only the file itself.
#include "io/ds_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "io/input_file.h"
#include "io/config_kind.h"
#include "io/json_describe.h"

namespace seqpar {

namespace {

using nlohmann::json;

std::string describe(const json& j) { return describe_json(j); }

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

constexpr bool kAuto = true;  // for readability at call sites: the key accepts "auto"

// Typed reads from one JSON object. Every key read is marked; the keys never read are the ones
// seqpar ignores, reported by unread(). A null value counts as absent (Python's None: DeepSpeed
// then uses its default).
class Reader {
 public:
  Reader(const json& obj, const std::string& source, std::string prefix)
      : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

  std::string key(const char* name) const { return prefix_ + name; }

  const json* get(const char* name) {
    read_.push_back(name);
    if (!obj_.contains(name) || obj_[name].is_null()) return nullptr;
    return &obj_[name];
  }

  // The object under `name` (nullptr when absent).
  const json* object(const char* name) {
    const json* v = get(name);
    if (v) expect(v->is_object(), name, "an object", *v, false);
    return v;
  }

  DsValue<int64_t> integer(const char* name, int64_t min, int64_t max, bool allow_auto) {
    DsValue<int64_t> out;
    out.key = key(name);
    const json* v = get(name);
    if (!v) return out;
    if (auto_value(*v, allow_auto, out)) return out;
    std::string expected =
        max == INT64_MAX ? fmt::format("an integer >= {}", min) : fmt::format("an integer in {}..{}", min, max);
    expect(v->is_number_integer() && v->get<int64_t>() >= min && v->get<int64_t>() <= max, name, expected, *v,
           allow_auto);
    out.value = v->get<int64_t>();
    out.state = DsValue<int64_t>::State::kSet;
    return out;
  }

  // A number in [min, max] (max_open: the upper bound excluded).
  DsValue<double> number(const char* name, double min, double max, bool allow_auto, bool max_open = false,
                         bool min_open = false) {
    DsValue<double> out;
    out.key = key(name);
    const json* v = get(name);
    if (!v) return out;
    if (auto_value(*v, allow_auto, out)) return out;
    bool ok = v->is_number() && std::isfinite(v->get<double>());  // 1e999 parses as inf
    if (ok) {
      const double x = v->get<double>();
      ok = (min_open ? x > min : x >= min) && (max_open ? x < max : x <= max);
    }
    std::string expected = "a number";
    if (max == HUGE_VAL)
      expected += fmt::format(" {} {}", min_open ? ">" : ">=", min);
    else
      expected += fmt::format(" in {}{}, {}{}", min_open ? "(" : "[", min, max, max_open ? ")" : "]");
    expect(ok, name, expected, *v, allow_auto);
    out.value = v->get<double>();
    out.state = DsValue<double>::State::kSet;
    return out;
  }

  DsValue<bool> boolean(const char* name, bool allow_auto) {
    DsValue<bool> out;
    out.key = key(name);
    const json* v = get(name);
    if (!v) return out;
    if (auto_value(*v, allow_auto, out)) return out;
    expect(v->is_boolean(), name, "true or false", *v, allow_auto);
    out.value = v->get<bool>();
    out.state = DsValue<bool>::State::kSet;
    return out;
  }

  // A string among `choices` (exact spelling).
  DsValue<std::string> choice(const char* name, const std::vector<std::string>& choices) {
    DsValue<std::string> out;
    out.key = key(name);
    const json* v = get(name);
    if (!v) return out;
    const bool ok = v->is_string() && std::find(choices.begin(), choices.end(), v->get<std::string>()) != choices.end();
    expect(ok, name, "one of " + join(quoted(choices)), *v, false);
    out.value = v->get<std::string>();
    out.state = DsValue<std::string>::State::kSet;
    return out;
  }

  std::string string(const char* name) {
    const json* v = get(name);
    if (!v) return "";
    expect(v->is_string(), name, "a string", *v, false);
    return v->get<std::string>();
  }

  // The keys present in the object and never read, with their full dotted path.
  std::vector<std::string> unread() const {
    std::vector<std::string> out;
    for (auto it = obj_.begin(); it != obj_.end(); ++it)
      if (std::find(read_.begin(), read_.end(), it.key()) == read_.end()) out.push_back(prefix_ + it.key());
    return out;
  }

  bool has(const char* name) const { return obj_.contains(name) && !obj_[name].is_null(); }
  const std::string& source() const { return source_; }

  void expect(bool ok, const char* name, const std::string& expected, const json& v, bool allow_auto) const {
    SEQPAR_INPUT_CHECK(ok, "{}: '{}' must be {}{}, got {}", source_, key(name), expected,
                       allow_auto ? " or \"auto\"" : "", describe(v));
  }

 private:
  template <typename T>
  static bool auto_value(const json& v, bool allow_auto, DsValue<T>& out) {
    if (allow_auto && v.is_string() && v.get<std::string>() == "auto") {
      out.state = DsValue<T>::State::kAuto;
      return true;
    }
    return false;
  }
  static std::vector<std::string> quoted(const std::vector<std::string>& items) {
    std::vector<std::string> out;
    for (const std::string& s : items) out.push_back("\"" + s + "\"");
    return out;
  }

  const json& obj_;
  const std::string& source_;
  std::string prefix_;
  std::vector<std::string> read_;
};

void parse_zero(Reader& top, DsConfig& c, std::vector<std::string>& unread, Problems& p) {
  const json* z = top.object("zero_optimization");
  if (!z) return;
  Reader r(*z, c.source, "zero_optimization.");
  p.attempt([&] { c.zero_stage = r.integer("stage", 0, 3, false); });
  for (const char* what : {"offload_optimizer", "offload_param"}) p.attempt([&] {
    const json* o = r.object(what);
    if (!o) return;
    const bool opt = std::string(what) == "offload_optimizer";
    Reader ro(*o, c.source, std::string("zero_optimization.") + what + ".");
    DsValue<std::string> device = ro.choice("device", {"none", "cpu", "nvme"});
    SEQPAR_INPUT_CHECK(!device.is_set() || device.value != "nvme",
                       "{}: '{}'=\"nvme\" is not supported: seqpar offloads the {} to host memory (\"cpu\") or "
                       "keeps it on the device (\"none\")",
                       c.source, device.key, opt ? "optimizer state" : "parameters");
    (opt ? c.offload_optimizer_device : c.offload_param_device) = device;
    DsValue<bool> pin = ro.boolean("pin_memory", false);
    if (opt && pin.is_set() && !pin.value)
      c.warnings.push_back(fmt::format(
          "{}: {}=false changes nothing: seqpar's host optimizer state is never copied by DMA (the gradients "
          "and weights pass through small staging buffers, which are always pinned)",
          c.source, pin.key));
    if (!opt) c.offload_param_pin_memory = pin;
    if (opt) {
      DsValue<double> ratio = ro.number("ratio", 0, 1, false);
      SEQPAR_INPUT_CHECK(!ratio.is_set() || ratio.value == 1.0,
                         "{}: '{}'={} is not supported: seqpar offloads the whole optimizer state (ratio 1.0)",
                         c.source, ratio.key, ratio.value);
    }
    // DeepSpeed's buffer-count / NVMe tuning: read and named, seqpar's staging is fixed.
    for (const char* k : {"buffer_count", "fast_init", "nvme_path", "buffer_size", "max_in_cpu", "pipeline_read",
                          "pipeline_write", "pipeline"}) {
      if (!ro.has(k)) continue;
      ro.get(k);
      c.warnings.push_back(fmt::format("{}: zero_optimization.{}.{} is ignored: seqpar's offload uses two fixed "
                                       "staging buffers (docs/memory.md)",
                                       c.source, what, k));
    }
    for (std::string& k : ro.unread()) unread.push_back(k);
  });
  // The knobs DeepSpeed's stage 3 is tuned with: seqpar gathers exactly one decoder
  // layer at a time (prefetching the next), keeps the embedding, final norm and LM head whole, and
  // reduces each layer's gradients as its backward ends, so these have nothing to set.
  for (const char* k : {"stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "stage3_max_live_parameters",
                        "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
                        "stage3_gather_fp16_weights_on_model_save", "sub_group_size", "zero_hpz_partition_size",
                        "zero_quantized_weights", "zero_quantized_gradients", "mics_shard_size"}) {
    if (!r.has(k)) continue;
    r.get(k);
    c.warnings.push_back(fmt::format(
        "{}: zero_optimization.{} is ignored: seqpar gathers one decoder layer at a time (the next prefetched), keeps "
        "the embedding, final norm and LM head whole and reduces each layer's gradients as its backward ends "
        "(docs/memory.md)",
        c.source, k));
  }
  for (std::string& k : r.unread()) unread.push_back(k);
}

void parse_precision(Reader& top, DsConfig& c, std::vector<std::string>& unread) {
  // DeepSpeed accepts "bfloat16" as the older name of "bf16".
  for (const char* name : {"bf16", "bfloat16"}) {
    const json* b = top.object(name);
    if (!b) continue;
    Reader r(*b, c.source, std::string(name) + ".");
    c.bf16_enabled = r.boolean("enabled", kAuto);
    for (std::string& k : r.unread()) unread.push_back(k);
  }
  // DeepSpeed's prescale_gradients divides the gradients by the world before the all-reduce instead
  // of after (against fp16 overflow in the reduction); seqpar reduces f32 gradients, where the two
  // orders give the same mean.
  if (top.has("prescale_gradients")) {
    const DsValue<bool> v = top.boolean("prescale_gradients", false);
    if (v.is_set())
      c.warnings.push_back(
          fmt::format("{}: prescale_gradients={} has nothing to set: seqpar all-reduces f32 "
                      "gradients and divides once, the same mean as dividing first",
                      c.source, v.value ? "true" : "false"));
  }
  // fp16 with DeepSpeed's loss scaler (train/loss_scaler.h): honoured. The scaler's keys are read as
  // DeepSpeed types them; their rules (a window >= 1, a floor > 0, ...) are DeepSpeed's too, checked
  // only when the dynamic scaler runs (train/config_resolve), as DeepSpeed checks them.
  if (const json* f = top.object("fp16")) {
    Reader r(*f, c.source, "fp16.");
    c.fp16_enabled = r.boolean("enabled", kAuto);
    c.loss_scale = r.number("loss_scale", 0, HUGE_VAL, kAuto);
    c.initial_scale_power = r.integer("initial_scale_power", 0, INT64_MAX, kAuto);
    c.loss_scale_window = r.integer("loss_scale_window", 0, INT64_MAX, kAuto);
    c.hysteresis = r.integer("hysteresis", 0, INT64_MAX, kAuto);
    c.consecutive_hysteresis = r.boolean("consecutive_hysteresis", kAuto);
    c.min_loss_scale = r.number("min_loss_scale", 0, HUGE_VAL, kAuto);
    // Inputs are token ids and the model computes in fp16 already: auto_cast has nothing to cast.
    const DsValue<bool> auto_cast = r.boolean("auto_cast", false);
    if (auto_cast.is_set())
      c.warnings.push_back(
          fmt::format("{}: fp16.auto_cast={} has nothing to cast: seqpar's inputs are token ids "
                      "and the model computes in fp16 throughout",
                      c.source, auto_cast.value ? "true" : "false"));
    // seqpar keeps f32 master weights and gradients (DeepSpeed allows fp16 ones with its CPU Adam only).
    const DsValue<bool> master16 = r.boolean("fp16_master_weights_and_grads", false);
    SEQPAR_INPUT_CHECK(!(master16.is_set() && master16.value),
                       "{}: 'fp16.fp16_master_weights_and_grads'=true is not supported: seqpar keeps the master "
                       "weights, gradients and AdamW moments in f32 (fp16 is the compute type only); remove it or "
                       "set it to false",
                       c.source);
    if (master16.is_set())
      c.warnings.push_back(
          fmt::format("{}: fp16.fp16_master_weights_and_grads=false is what seqpar does: f32 master "
                      "weights, gradients and moments",
                      c.source));
    for (std::string& k : r.unread()) unread.push_back(k);
  }
  // DeepSpeed: "bfloat16 and fp16 modes cannot be simultaneously enabled".
  SEQPAR_INPUT_CHECK(
      !(c.fp16_enabled.is_set() && c.fp16_enabled.value && c.bf16_enabled.is_set() && c.bf16_enabled.value),
      "{}: '{}'=true and '{}'=true: bf16 and fp16 cannot both be enabled (DeepSpeed refuses it too); "
      "enable one",
      c.source, c.fp16_enabled.key, c.bf16_enabled.key);
}

void parse_optimizer(Reader& top, DsConfig& c, std::vector<std::string>& unread, Problems& problems) {
  const json* o = top.object("optimizer");
  if (!o) return;
  Reader r(*o, c.source, "optimizer.");
  DsOptimizer& opt = c.optimizer;
  opt.present = true;
  SEQPAR_INPUT_CHECK(r.has("type"), "{}: 'optimizer.type' is missing (supported: AdamW, Adam)", c.source);
  opt.type = r.string("type");
  const std::string t = lower(opt.type);
  SEQPAR_INPUT_CHECK(t == "adamw" || t == "adam",
                     "{}: 'optimizer.type'=\"{}\" is not supported (supported: AdamW, Adam; seqpar's optimizer is "
                     "AdamW with torch semantics)",
                     c.source, opt.type);
  opt.type = t == "adamw" ? "AdamW" : "Adam";
  if (const json* p = r.object("params")) {
    Reader rp(*p, c.source, "optimizer.params.");
    problems.attempt([&] { opt.lr = rp.number("lr", 0, HUGE_VAL, kAuto, false, true); });
    problems.attempt([&] { opt.eps = rp.number("eps", 0, HUGE_VAL, kAuto, false, true); });
    problems.attempt([&] { opt.weight_decay = rp.number("weight_decay", 0, HUGE_VAL, kAuto); });
    opt.betas.key = "optimizer.params.betas";
    problems.attempt([&] {
    if (const json* b = rp.get("betas")) {
      if (b->is_string() && b->get<std::string>() == "auto") {
        opt.betas.state = DsValue<std::array<double, 2>>::State::kAuto;
      } else {
        bool ok = b->is_array() && b->size() == 2;
        for (size_t i = 0; ok && i < 2; ++i)
          ok = (*b)[i].is_number() && std::isfinite((*b)[i].get<double>()) && (*b)[i].get<double>() >= 0 &&
               (*b)[i].get<double>() < 1;
        rp.expect(ok, "betas", "a list of two numbers in [0, 1)", *b, kAuto);
        opt.betas.value = {(*b)[0].get<double>(), (*b)[1].get<double>()};
        opt.betas.state = DsValue<std::array<double, 2>>::State::kSet;
      }
    }
    });
    // adam_w_mode only changes Adam (DeepSpeed's AdamW forces it on); torch_adam picks the torch
    // implementation of the same algorithm.
    DsValue<bool> w_mode = rp.boolean("adam_w_mode", false);
    if (w_mode.is_set()) opt.adam_w_mode = opt.type == "AdamW" || w_mode.value;
    const DsValue<bool> torch_adam = rp.boolean("torch_adam", false);
    // Both pick among DeepSpeed's implementations (fused, CPU, torch's) of the same update: named,
    // so a reader of the output sees them taken.
    std::string impl;
    if (torch_adam.is_set()) impl += fmt::format("optimizer.params.torch_adam={}", torch_adam.value);
    if (w_mode.is_set() && (opt.type == "AdamW" || w_mode.value))
      impl += fmt::format("{}optimizer.params.adam_w_mode={}", impl.empty() ? "" : ", ", w_mode.value);
    if (!impl.empty())
      c.warnings.push_back(
          fmt::format("{}: {} pick an implementation of AdamW in DeepSpeed; seqpar runs its own "
                      "(torch semantics: decoupled weight decay, bias correction)",
                      c.source, impl));
    DsValue<bool> bias_correction = rp.boolean("bias_correction", false);
    SEQPAR_INPUT_CHECK(!bias_correction.is_set() || bias_correction.value,
                       "{}: 'optimizer.params.bias_correction'=false is not supported: seqpar's AdamW always applies "
                       "Adam's bias correction (torch semantics)",
                       c.source);
    DsValue<bool> amsgrad = rp.boolean("amsgrad", false);
    SEQPAR_INPUT_CHECK(!amsgrad.is_set() || !amsgrad.value,
                       "{}: 'optimizer.params.amsgrad'=true is not supported: seqpar's AdamW has no AMSGrad variant",
                       c.source);
    if (!opt.adam_w_mode && opt.weight_decay.is_set())
      SEQPAR_INPUT_CHECK(opt.weight_decay.value == 0,
                         "{}: optimizer Adam with 'optimizer.params.adam_w_mode'=false and weight_decay={} is "
                         "L2-regularised Adam, which seqpar does not implement; use AdamW (or adam_w_mode true, "
                         "DeepSpeed's default), or weight_decay 0",
                         c.source, opt.weight_decay.value);
    for (std::string& k : rp.unread()) unread.push_back(k);
  }
  for (std::string& k : r.unread()) unread.push_back(k);
}

void parse_scheduler(Reader& top, DsConfig& c, std::vector<std::string>& unread) {
  const json* s = top.object("scheduler");
  if (!s) return;
  Reader r(*s, c.source, "scheduler.");
  DsScheduler& sch = c.scheduler;
  sch.present = true;
  SEQPAR_INPUT_CHECK(r.has("type"),
                     "{}: 'scheduler.type' is missing (supported: WarmupLR, WarmupDecayLR, "
                     "WarmupCosineLR)",
                     c.source);
  sch.type = r.string("type");
  SEQPAR_INPUT_CHECK(sch.type == "WarmupLR" || sch.type == "WarmupDecayLR" || sch.type == "WarmupCosineLR",
                     "{}: 'scheduler.type'=\"{}\" is not supported (supported: WarmupLR, WarmupDecayLR, "
                     "WarmupCosineLR)",
                     c.source, sch.type);
  const bool cosine = sch.type == "WarmupCosineLR";
  const bool decay = sch.type == "WarmupDecayLR";
  const json* p = r.object("params");
  static const json kEmpty = json::object();
  Reader rp(p ? *p : kEmpty, c.source, "scheduler.params.");

  // The parameters each DeepSpeed constructor takes; any other is a TypeError there.
  std::vector<std::string> valid = {"warmup_num_steps", "warmup_type"};
  if (cosine) {
    valid.insert(valid.end(), {"total_num_steps", "warmup_min_ratio", "cos_min_ratio"});
  } else {
    valid.insert(valid.end(), {"warmup_min_lr", "warmup_max_lr"});
    if (decay) valid.push_back("total_num_steps");
  }
  if (p) {
    for (auto it = p->begin(); it != p->end(); ++it)
      SEQPAR_INPUT_CHECK(std::find(valid.begin(), valid.end(), it.key()) != valid.end(),
                         "{}: 'scheduler.params.{}' is not a parameter of {} (its parameters: {})", c.source, it.key(),
                         sch.type, join(valid));
  }
  sch.warmup_num_steps = rp.integer("warmup_num_steps", 0, INT64_MAX, kAuto);  // DeepSpeed: max(2, it)
  sch.warmup_type = rp.choice("warmup_type", {"log", "linear"});
  if (cosine || decay) {
    sch.total_num_steps = rp.integer("total_num_steps", 1, INT64_MAX, kAuto);
    SEQPAR_INPUT_CHECK(!sch.total_num_steps.absent(),
                       "{}: 'scheduler.params.total_num_steps' is required by {} (a number, or \"auto\" for --steps)",
                       c.source, sch.type);
  }
  if (cosine) {
    sch.warmup_min_ratio = rp.number("warmup_min_ratio", 0, 1, false);
    sch.cos_min_ratio = rp.number("cos_min_ratio", 0, 1, false);
  } else {
    sch.warmup_min_lr = rp.number("warmup_min_lr", 0, HUGE_VAL, kAuto);
    sch.warmup_max_lr = rp.number("warmup_max_lr", 0, HUGE_VAL, kAuto, false, true);
    if (sch.warmup_min_lr.is_set() && sch.warmup_max_lr.is_set())
      SEQPAR_INPUT_CHECK(sch.warmup_min_lr.value <= sch.warmup_max_lr.value,
                         "{}: 'scheduler.params.warmup_min_lr'={} must be <= 'scheduler.params.warmup_max_lr'={}",
                         c.source, sch.warmup_min_lr.value, sch.warmup_max_lr.value);
  }
  for (std::string& k : r.unread()) unread.push_back(k);
}

// Parses like DeepSpeed's loader: json.load with an object_pairs_hook that raises on a duplicate
// key (dict_raise_error_on_duplicate_keys), so a key given twice is refused, not "the last wins".
json parse_refusing_duplicates(const std::string& text, const std::string& source, Problems& problems) {
  struct Level {
    std::set<std::string> keys;
    std::string path;
  };
  std::vector<Level> levels;
  std::string last_key;
  json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      const std::string path = levels.empty() ? "" : levels.back().path + last_key + ".";
      levels.push_back({{}, path});
    } else if (event == json::parse_event_t::object_end) {
      if (!levels.empty()) levels.pop_back();
    } else if (event == json::parse_event_t::key && !levels.empty()) {
      last_key = parsed.get<std::string>();
      if (!levels.back().keys.insert(last_key).second)
        problems.add(fmt::format("{}: '{}{}' appears twice (DeepSpeed refuses duplicate keys in its config, "
                                 "\"Duplicate key in DeepSpeed config\"; keep one)",
                                 source, levels.back().path, last_key));
    }
    return true;
  };
  return json::parse(text, cb);
}

ConfigKeys json_keys(const json& root) {
  ConfigKeys k;
  for (auto it = root.begin(); it != root.end(); ++it) {
    k.keys.push_back(it.key());
    if (it.value().is_string()) k.scalars[it.key()] = it.value().get<std::string>();
  }
  return k;
}

// Text that is not JSON: if it is a YAML mapping, say what kind of file it looks like.
std::string not_json_advice(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '{' || text[first] == '[')) return "";  // JSON, broken
  try {
    YAML::Node y = YAML::Load(text);
    if (!y.IsMap()) return "";
    ConfigKeys k;
    for (auto it = y.begin(); it != y.end(); ++it) {
      k.keys.push_back(it->first.Scalar());
      if (it->second.IsScalar()) k.scalars[it->first.Scalar()] = it->second.Scalar();
    }
    const ConfigKind kind = config_kind_of(k);
    return "; it is YAML, not JSON" +
           (kind == ConfigKind::kUnknown ? std::string() : ": " + config_kind_advice(kind, k));
  } catch (const YAML::Exception&) {
    return "";
  }
}

bool contains_auto(const json& j) {
  if (j.is_string()) return j.get<std::string>() == "auto";
  if (j.is_structured())
    for (const json& v : j)
      if (contains_auto(v)) return true;
  return false;
}

}  // namespace

DsConfig parse_ds_config(const std::string& json_text, const std::string& source, Problems* collect) {
  Problems local;
  Problems& p = collect ? *collect : local;
  DsConfig c;
  c.source = source;
  json root;
  try {
    Problems duplicates;
    check_json_depth(json_text, source);
    root = parse_refusing_duplicates(json_text, source, duplicates);
    p.append(duplicates);
  } catch (const json::exception& e) {
    p.add(fmt::format("{}: not valid JSON: {}{}", source, e.what(), not_json_advice(json_text)));
    if (!collect) p.raise();
    c.readable = false;
    return c;
  }
  if (!root.is_object()) {
    p.add(fmt::format("{}: a DeepSpeed config must be a JSON object, got {}", source, describe(root)));
    if (!collect) p.raise();
    c.readable = false;
    return c;
  }
  const ConfigKeys keys = json_keys(root);
  const ConfigKind kind = config_kind_of(keys);
  if (kind != ConfigKind::kDeepSpeed && !(kind == ConfigKind::kUnknown && keys.keys.empty())) {
    p.add(fmt::format("{}: not a DeepSpeed config: {}", source, config_kind_advice(kind, keys)));
    if (!collect) p.raise();
    c.readable = false;
    return c;
  }
  c.uses_auto = contains_auto(root);
  Reader top(root, c.source, "");
  std::vector<std::string> unread;

  // Each key and section on its own, so every problem of the file is reported at once.
  p.attempt([&] { c.train_batch_size = top.integer("train_batch_size", 1, INT64_MAX, kAuto); });
  p.attempt([&] {
    c.train_micro_batch_size_per_gpu = top.integer("train_micro_batch_size_per_gpu", 1, INT64_MAX, kAuto);
  });
  p.attempt([&] { c.gradient_accumulation_steps = top.integer("gradient_accumulation_steps", 1, INT64_MAX, kAuto); });
  p.attempt([&] { c.sequence_parallel_size = top.integer("sequence_parallel_size", 1, INT64_MAX, kAuto); });
  p.attempt([&] { parse_zero(top, c, unread, p); });
  p.attempt([&] { parse_precision(top, c, unread); });
  p.attempt([&] { parse_optimizer(top, c, unread, p); });
  p.attempt([&] { parse_scheduler(top, c, unread); });
  p.attempt([&] {
    if (top.object("activation_checkpointing"))
      c.warnings.push_back(fmt::format(
          "{}: activation_checkpointing configures DeepSpeed's own checkpointing API, which Hugging Face models do "
          "not call (their switch is TrainingArguments.gradient_checkpointing); it is ignored: seqpar's equivalent "
          "is --activation-checkpointing",
          source));
  });
  p.attempt([&] { c.gradient_clipping = top.number("gradient_clipping", 0, HUGE_VAL, kAuto); });
  p.attempt([&] { c.steps_per_print = top.integer("steps_per_print", 1, INT64_MAX, false); });
  p.attempt([&] { c.wall_clock_breakdown = top.boolean("wall_clock_breakdown", false); });
  p.attempt([&] {
    c.seq_parallel_communication_data_type = top.choice("seq_parallel_communication_data_type", {"fp32", "bf16"});
  });

  for (std::string& k : top.unread()) unread.push_back(k);
  if (!unread.empty())
    c.warnings.push_back(fmt::format("{}: {} not read by seqpar (ignored): {}", source,
                                     unread.size() == 1 ? "this key is" : "these keys are", join(unread)));
  if (!collect) p.raise();
  return c;
}

DsConfig load_ds_config(const std::string& path, Problems* problems) {
  std::string text;
  try {
    text = read_input_file(path, kDeepSpeedConfigInput);
  } catch (const InputError& e) {
    if (!problems) throw;
    problems->add(e.what());
    DsConfig c;
    c.source = path;
    c.readable = false;
    return c;
  }
  return parse_ds_config(text, path, problems);
}

}  // namespace seqpar
