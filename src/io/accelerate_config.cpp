// Accelerate YAML -> AccelerateConfig (yaml-cpp). docs/configs.md lists every key and its effect.
//
// YAML typing follows the file: a quoted scalar is a string (num_processes: "4" is refused where
// an integer is expected), a plain one is converted; null / ~ / an empty value counts as absent.
#include "io/accelerate_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "io/bounded_child.h"
#include "io/input_file.h"
#include "io/config_kind.h"

namespace seqpar {

namespace {

namespace fs = std::filesystem;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Scalar:
      return n.Tag() == "!" ? "string \"" + n.Scalar() + "\"" : "'" + n.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "nothing";
  }
}

// Typed reads from one YAML mapping; keys never read are reported by unread().
class Reader {
 public:
  Reader(const YAML::Node& map, const std::string& source, std::string prefix)
      : map_(map), source_(source), prefix_(std::move(prefix)) {}

  std::string key(const std::string& name) const { return prefix_ + name; }

  // The node under `name`, or an invalid node when absent or null.
  YAML::Node get(const std::string& name) {
    read_.push_back(name);
    YAML::Node n = map_[name];
    if (!n.IsDefined() || n.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
    return n;
  }

  bool has(const std::string& name) const {
    YAML::Node n = map_[name];
    return n.IsDefined() && !n.IsNull();
  }

  YAML::Node mapping(const std::string& name) {
    YAML::Node n = get(name);
    if (n.IsDefined()) expect(n.IsMap(), name, "a mapping", n);
    return n;
  }

  YamlValue<int64_t> integer(const std::string& name, int64_t min, int64_t max) {
    YamlValue<int64_t> out;
    out.key = key(name);
    YAML::Node n = get(name);
    if (!n.IsDefined()) return out;
    int64_t v = 0;
    bool ok = plain(n) && YAML::convert<int64_t>::decode(n, v) && v >= min && v <= max;
    expect(ok, name,
           max == INT64_MAX ? fmt::format("an integer >= {}", min) : fmt::format("an integer in {}..{}", min, max), n);
    out.value = v;
    return out;
  }

  YamlValue<double> number(const std::string& name, double min) {
    YamlValue<double> out;
    out.key = key(name);
    YAML::Node n = get(name);
    if (!n.IsDefined()) return out;
    double v = 0;
    // yaml-cpp reads .inf and .nan as numbers; a clipping norm or a rate must be finite.
    bool ok = plain(n) && YAML::convert<double>::decode(n, v) && std::isfinite(v) && v >= min;
    expect(ok, name, fmt::format("a finite number >= {}", min), n);
    out.value = v;
    return out;
  }

  YamlValue<bool> boolean(const std::string& name) {
    YamlValue<bool> out;
    out.key = key(name);
    YAML::Node n = get(name);
    if (!n.IsDefined()) return out;
    bool v = false;
    expect(plain(n) && YAML::convert<bool>::decode(n, v), name, "true or false", n);
    out.value = v;
    return out;
  }

  YamlValue<std::string> string(const std::string& name) {
    YamlValue<std::string> out;
    out.key = key(name);
    YAML::Node n = get(name);
    if (!n.IsDefined()) return out;
    expect(n.IsScalar(), name, "a string", n);
    out.value = n.Scalar();
    return out;
  }

  // A string among `choices`.
  YamlValue<std::string> choice(const std::string& name, const std::vector<std::string>& choices) {
    YamlValue<std::string> out = string(name);
    if (out.has())
      SEQPAR_INPUT_CHECK(std::find(choices.begin(), choices.end(), *out) != choices.end(),
                         "{}: '{}' must be one of {}, got '{}'", source_, out.key, join(choices), *out);
    return out;
  }

  std::vector<std::string> unread() const {
    std::vector<std::string> out;
    for (auto it = map_.begin(); it != map_.end(); ++it) {
      const std::string k = it->first.Scalar();
      if (std::find(read_.begin(), read_.end(), k) == read_.end()) out.push_back(prefix_ + k);
    }
    return out;
  }

  void expect(bool ok, const std::string& name, const std::string& expected, const YAML::Node& n) const {
    SEQPAR_INPUT_CHECK(ok, "{}: '{}' must be {}, got {}", source_, key(name), expected, describe(n));
  }

 private:
  // A plain (unquoted) scalar: YAML's numbers and booleans are never quoted.
  static bool plain(const YAML::Node& n) { return n.IsScalar() && n.Tag() != "!"; }

  const YAML::Node map_;
  const std::string& source_;
  std::string prefix_;
  std::vector<std::string> read_;
};


void parse_deepspeed_section(Reader& top, AccelerateConfig& c, const std::string& base_dir,
                             std::vector<std::string>& unread, Problems& problems) {
  YAML::Node d = top.mapping("deepspeed_config");
  if (!d.IsDefined()) return;
  Reader r(d, c.source, "deepspeed_config.");
  YamlValue<std::string> file = r.string("deepspeed_config_file");
  c.zero_stage = r.integer("zero_stage", 0, 3);
  c.gradient_accumulation_steps = r.integer("gradient_accumulation_steps", 1, INT64_MAX);
  c.gradient_clipping = r.number("gradient_clipping", 0);
  c.seq_parallel_communication_data_type = r.choice("seq_parallel_communication_data_type", {"fp32", "bf16"});
  std::vector<std::string> inline_keys;
  for (const YamlValue<int64_t>* v : {&c.zero_stage, &c.gradient_accumulation_steps})
    if (v->has()) inline_keys.push_back(v->key);
  if (c.gradient_clipping.has()) inline_keys.push_back(c.gradient_clipping.key);
  if (c.seq_parallel_communication_data_type.has()) inline_keys.push_back(c.seq_parallel_communication_data_type.key);
  for (const char* what : {"offload_optimizer_device", "offload_param_device"}) {
    YamlValue<std::string> device = r.choice(what, {"none", "cpu", "nvme"});
    if (!device.has()) continue;
    inline_keys.push_back(device.key);
    const bool opt = std::string(what) == "offload_optimizer_device";
    SEQPAR_INPUT_CHECK(*device != "nvme",
                       "{}: '{}'=nvme is not supported: seqpar offloads the {} to host memory (cpu) or keeps it on "
                       "the device (none)",
                       c.source, device.key, opt ? "optimizer state" : "parameters");
    (opt ? c.offload_optimizer_device : c.offload_param_device) = device;
  }
  YamlValue<bool> save16 = r.boolean("zero3_save_16bit_model");
  if (save16.has()) {
    inline_keys.push_back(save16.key);
    c.warnings.push_back(fmt::format("{}: {}={} has no effect: `seqpar export` writes the trained model (--dtype bf16 "
                                     "or f32)",
                                     c.source, save16.key, *save16 ? "true" : "false"));
  }
  // A model-construction switch, and a launcher choice: nothing to do in seqpar, said so.
  for (const char* what : {"zero3_init_flag", "deepspeed_multinode_launcher"}) {
    YAML::Node n = r.get(what);
    if (n.IsDefined())
      c.warnings.push_back(fmt::format("{}: deepspeed_config.{}={} has no effect: {}", c.source, what, n.Scalar(),
                                       std::string(what) == "zero3_init_flag"
                                           ? "seqpar builds each rank's model itself"
                                           : "seqpar launches its own ranks (seqpar launch)"));
  }

  if (file.has()) {
    // Accelerate refuses inline DeepSpeed settings next to a config file; so does seqpar, rather
    // than guess which one the user meant.
    SEQPAR_INPUT_CHECK(inline_keys.empty(),
                       "{}: '{}' is given, so these keys belong in that file, not in the YAML: {} (Accelerate "
                       "refuses the same)",
                       c.source, file.key, join(inline_keys));
    fs::path p(*file);
    if (p.is_relative()) p = fs::path(base_dir) / p;
    c.deepspeed_config_file = p.lexically_normal().string();
    std::error_code ec;  // (the throwing overload ends a run in std::terminate on e.g. a name too long)
    const bool found = fs::exists(c.deepspeed_config_file, ec);
    SEQPAR_INPUT_CHECK(!ec, "{}: '{}'={}: cannot be looked up ({}; a relative path is taken from the YAML's directory)",
                       c.source, file.key, *file, ec.message());
    SEQPAR_INPUT_CHECK(found,
                       "{}: '{}'={}: no such file (looked for {}; a relative path is taken from the YAML's directory)",
                       c.source, file.key, *file, c.deepspeed_config_file);
    c.deepspeed = load_ds_config(c.deepspeed_config_file, &problems);
  }
  for (std::string& k : r.unread()) unread.push_back(k);
}

void parse_parallelism_section(Reader& top, AccelerateConfig& c, std::vector<std::string>& unread) {
  YAML::Node p = top.mapping("parallelism_config");
  if (!p.IsDefined()) return;
  Reader r(p, c.source, "parallelism_config.");
  const std::string pre = "parallelism_config_";
  c.sp_size = r.integer(pre + "sp_size", 1, INT64_MAX);
  c.dp_replicate_size = r.integer(pre + "dp_replicate_size", 1, INT64_MAX);
  c.dp_shard_size = r.integer(pre + "dp_shard_size", 1, INT64_MAX);
  YamlValue<int64_t> tp = r.integer(pre + "tp_size", 1, INT64_MAX);
  if (tp.has() && *tp == 1) c.warnings.push_back(fmt::format("{}: {}=1 is what seqpar does (no tensor parallelism)",
                                                             c.source, tp.key));
  SEQPAR_INPUT_CHECK(!tp.has() || *tp == 1, "{}: '{}'={} is not supported: seqpar has no tensor parallelism (use 1)",
                     c.source, tp.key, tp.has() ? *tp : 0);
  c.cp_size = r.integer(pre + "cp_size", 1, INT64_MAX);
  YamlValue<std::string> cp_backend = r.choice(pre + "cp_backend", {"torch"});  // Accelerate's only one
  YamlValue<std::string> cp_comm = r.choice(pre + "cp_comm_strategy", {"allgather", "alltoall"});
  if (cp_comm.has())
    c.warnings.push_back(fmt::format(
        "{}: {}={} is not needed: seqpar's ring passes each k/v block to the next rank, overlapped with the "
        "attention on the current one",
        c.source, cp_comm.key, *cp_comm));
  c.sp_backend = r.string(pre + "sp_backend");
  if (c.sp_backend.has() && *c.sp_backend == "deepspeed")
    c.warnings.push_back(fmt::format("{}: {}=deepspeed is what seqpar implements (DeepSpeed-Ulysses / ALST)", c.source,
                                     c.sp_backend.key));
  SEQPAR_INPUT_CHECK(!c.sp_backend.has() || *c.sp_backend == "deepspeed",
                     "{}: '{}'={} is not supported: seqpar implements DeepSpeed's Ulysses sequence parallelism (ALST); "
                     "use deepspeed",
                     c.source, c.sp_backend.key, c.sp_backend.has() ? *c.sp_backend : "");
  c.sp_seq_length_is_variable = r.boolean(pre + "sp_seq_length_is_variable");
  c.sp_seq_length = r.integer(pre + "sp_seq_length", 1, INT64_MAX);
  c.sp_attn_implementation = r.string(pre + "sp_attn_implementation");
  if (c.sp_attn_implementation.has()) {
    const std::string& a = *c.sp_attn_implementation;
    SEQPAR_INPUT_CHECK(a != "eager",
                       "{}: '{}'=eager is not supported: eager materialises the [S,S] score matrix and cannot be "
                       "sequence-parallel; use sdpa or flash_attention_2",
                       c.source, c.sp_attn_implementation.key);
    SEQPAR_INPUT_CHECK(a == "sdpa" || a == "flash_attention_2" || a == "flash_attention_3",
                       "{}: '{}' must be one of sdpa, flash_attention_2, flash_attention_3, got '{}'", c.source,
                       c.sp_attn_implementation.key, a);
  }
  for (std::string& k : r.unread()) unread.push_back(k);
}


// fsdp_config onto seqpar's levers (accelerate/utils/dataclasses.py FullyShardedDataParallelPlugin
// names the keys): sharding → ZeRO stage (FULL_SHARD → 3), offload_params → parameter offload,
// activation checkpointing → activation checkpointing; hybrid sharding is refused; what only changes
// how FSDP wraps, prefetches or saves is named in a warning; an unknown key is a problem.
void parse_fsdp_section(Reader& top, AccelerateConfig& c, Problems& problems) {
  YAML::Node f = top.mapping("fsdp_config");
  if (!f.IsDefined()) return;
  Reader r(f, c.source, "fsdp_config.");
  problems.attempt([&] {
    const YamlValue<int64_t> version = r.integer("fsdp_version", 1, 2);
    if (version.has())
      c.warnings.push_back(fmt::format("{}: {}={} is read: seqpar's ZeRO stages stand for FSDP 1 and 2 alike",
                                       c.source, version.key, *version));
  });
  // FSDP1's ShardingStrategy by name or number (FULL_SHARD 1 = ZeRO 3, SHARD_GRAD_OP 2 = ZeRO 2, NO_SHARD 3 =
  // ZeRO 0, HYBRID_SHARD 4,
  // HYBRID_SHARD_ZERO2 5); FSDP2's fsdp_reshard_after_forward true / false (= FULL_SHARD / SHARD_GRAD_OP),
  // which newer Accelerate also accepts holding a strategy name.
  auto stage_of = [&](const std::string& key, const std::string& v) -> int64_t {
    if (v == "SHARD_GRAD_OP" || v == "2" || v == "false") return 2;
    if (v == "NO_SHARD" || v == "3") return 0;
    if (v == "FULL_SHARD" || v == "1" || v == "true") return 3;  // parameters sharded too: ZeRO stage 3
    if (v == "HYBRID_SHARD" || v == "HYBRID_SHARD_ZERO2" || v == "4" || v == "5")
      throw InputError(fmt::format("{}: '{}'={} (shard inside a node, replicate across) is not supported: seqpar's "
                                   "ZeRO shards over every rank; use SHARD_GRAD_OP (stage 2) or NO_SHARD",
                                   c.source, key, v));
    throw InputError(fmt::format("{}: '{}' must be one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, "
                                 "HYBRID_SHARD_ZERO2 (or 1-5, or true / false), got '{}'",
                                 c.source, key, v));
  };
  for (const char* name : {"fsdp_sharding_strategy", "fsdp_reshard_after_forward"}) problems.attempt([&] {
    YamlValue<std::string> v = r.string(name);
    if (!v.has()) return;
    const int64_t stage = stage_of(v.key, *v);
    if (!c.fsdp_zero_stage.has()) {
      c.fsdp_zero_stage.key = v.key;
      c.fsdp_zero_stage.value = stage;
    }
  });
  problems.attempt([&] {
    // FSDP's CPUOffload(offload_params=True) keeps the parameters (and so their optimizer state) on
    // the host: seqpar's parameter offload, with ZeRO stage 3.
    YamlValue<bool> offload = r.boolean("fsdp_offload_params");
    if (offload.has() && *offload && !c.offload_param_device.has()) {
      c.offload_param_device.key = offload.key;
      c.offload_param_device.value = "cpu";
    } else if (offload.has() && !*offload) {
      c.warnings.push_back(fmt::format("{}: {}=false is what seqpar does without --offload-param cpu", c.source,
                                       offload.key));
    }
  });
  problems.attempt([&] { c.fsdp_activation_checkpointing = r.boolean("fsdp_activation_checkpointing"); });
  // No effect in seqpar, each for its reason: named, never dropped silently.
  const std::pair<const char*, const char*> kNoEffect[] = {
      {"fsdp_state_dict_type", "seqpar's checkpoints (--save-dir) are its own, and `seqpar export` writes a full HF "
                               "checkpoint"},
      {"fsdp_cpu_ram_efficient_loading", "every rank reads the safetensors it needs itself"},
      {"fsdp_sync_module_states", "every rank starts from the same checkpoint or seed"},
      {"fsdp_auto_wrap_policy", "seqpar shards per tensor, not per wrapped module"},
      {"fsdp_transformer_layer_cls_to_wrap", "seqpar shards per tensor, not per wrapped module"},
      {"fsdp_min_num_params", "seqpar shards per tensor, not per wrapped module"},
      {"fsdp_backward_prefetch", "seqpar's ZeRO has no parameter prefetch"},
      {"fsdp_forward_prefetch", "seqpar's ZeRO has no parameter prefetch"},
      {"fsdp_use_orig_params", "seqpar's optimizer sees the HF parameters by name"},
  };
  for (auto [key, why] : kNoEffect) {
    YAML::Node n = r.get(key);
    if (n.IsDefined())
      c.warnings.push_back(
          fmt::format("{}: fsdp_config.{}={} has no effect in seqpar: {}", c.source, key, n.Scalar(), why));
  }
  for (const std::string& k : r.unread())
    problems.add(fmt::format("{}: '{}' is not an FSDP setting seqpar knows (it maps fsdp_sharding_strategy, "
                             "fsdp_reshard_after_forward, fsdp_offload_params, fsdp_activation_checkpointing); remove it",
                             c.source, k));
}

// yaml-cpp keeps the first of two equal keys; PyYAML (Accelerate's reader) the last. Rather than
// differ from Accelerate silently, a key given twice is refused.
void find_duplicate_keys(const YAML::Node& n, const std::string& path, const std::string& source, Problems& p) {
  if (n.IsMap()) {
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string k = it->first.Scalar();
      if (!seen.insert(k).second)
        p.add(fmt::format("{}: '{}{}' appears twice (Accelerate's YAML reader would take the last, seqpar's the "
                          "first; keep one)",
                          source, path, k));
      find_duplicate_keys(it->second, path + k + ".", source, p);
    }
  } else if (n.IsSequence()) {
    for (const YAML::Node& e : n) find_duplicate_keys(e, path, source, p);
  }
}

}  // namespace

AccelerateConfig parse_accelerate_config(const std::string& yaml_text, const std::string& source,
                                         const std::string& base_dir, Problems* collect) {
  Problems local;
  Problems& p = collect ? *collect : local;
  AccelerateConfig c;
  c.source = source;
  YAML::Node root;
  check_yaml_depth(yaml_text, source);
  // The pre-scan refuses the malformed YAML that yaml-cpp 0.7 is known to loop on; a child process
  // bounded in time and memory parses it first in case of one not known yet (docs/fuzzing.md).
  const ChildOutcome trial = run_in_bounded_child([&] { (void)YAML::LoadAll(yaml_text); });
  SEQPAR_INPUT_CHECK(trial.finished,
                     "{}: the YAML parser (yaml-cpp) did not finish with this file: it {}; yaml-cpp 0.7 loops on some "
                     "malformed YAML (a ',' or a bracket outside a list, stray quotes): not an Accelerate config as "
                     "`accelerate config` writes them: refused",
                     source, trial.stopped);
  try {
    // yaml.safe_load (Accelerate's) refuses a stream of several documents; so does seqpar.
    std::vector<YAML::Node> docs = YAML::LoadAll(yaml_text);
    if (docs.size() > 1)
      p.add(fmt::format("{}: holds {} YAML documents (separated by ---); an Accelerate config is one document, as "
                        "Accelerate's yaml.safe_load requires",
                        source, docs.size()));
    if (!docs.empty()) root = docs.front();
  } catch (const YAML::Exception& e) {
    p.add(fmt::format("{}: not valid YAML: {} (line {}, column {})", source, e.msg, e.mark.line + 1,
                      e.mark.column + 1));
  }
  if (!p.empty() && !root.IsDefined()) {
    if (!collect) p.raise();
    return c;
  }
  if (!root.IsMap()) {
    p.add(fmt::format("{}: an Accelerate config must be a YAML mapping, got {}", source, describe(root)));
    if (!collect) p.raise();
    return c;
  }
  find_duplicate_keys(root, "", source, p);
  ConfigKeys keys;
  for (auto it = root.begin(); it != root.end(); ++it) {
    keys.keys.push_back(it->first.Scalar());
    if (it->second.IsScalar()) keys.scalars[it->first.Scalar()] = it->second.Scalar();
  }
  const ConfigKind kind = config_kind_of(keys);
  if (kind != ConfigKind::kAccelerate) {
    p.add(fmt::format("{}: not an Accelerate config: {}", source, config_kind_advice(kind, keys)));
    if (!collect) p.raise();
    return c;
  }

  Reader top(root, c.source, "");
  std::vector<std::string> unread;

  p.attempt([&] {
    c.distributed_type = top.string("distributed_type");
    if (c.distributed_type.has()) {
      const std::string& t = *c.distributed_type;
      SEQPAR_INPUT_CHECK(t == "NO" || t == "MULTI_CPU" || t == "MULTI_GPU" || t == "DEEPSPEED" || t == "FSDP",
                         "{}: 'distributed_type'={} is not supported by seqpar (supported: NO, MULTI_CPU, MULTI_GPU, "
                         "DEEPSPEED, FSDP)",
                         source, t);
    }
  });
  p.attempt([&] { c.num_processes = top.integer("num_processes", 1, INT64_MAX); });
  p.attempt([&] { c.num_machines = top.integer("num_machines", 1, INT64_MAX); });
  p.attempt([&] { c.machine_rank = top.integer("machine_rank", 0, INT64_MAX); });
  if (c.machine_rank.has() && c.num_machines.has())
    SEQPAR_PROBLEM_CHECK(p, *c.machine_rank < *c.num_machines, "{}: 'machine_rank'={} must be < 'num_machines'={}",
                         source, *c.machine_rank, *c.num_machines);
  if (c.num_machines.has() && c.num_processes.has())
    SEQPAR_PROBLEM_CHECK(p, *c.num_processes % *c.num_machines == 0,
                         "{}: 'num_processes'={} (the total over all machines) must be a multiple of 'num_machines'={}",
                         source, *c.num_processes, *c.num_machines);
  p.attempt([&] { c.main_process_ip = top.string("main_process_ip"); });
  p.attempt([&] { c.main_process_port = top.integer("main_process_port", 1, 65535); });
  p.attempt([&] {
    c.mixed_precision = top.choice("mixed_precision", {"no", "bf16", "fp16", "fp8"});
    if (!c.mixed_precision.has()) return;
    // bf16 and fp16 are seqpar's mixed_precision (fp16 with DeepSpeed's loss scaler); "no" is
    // recorded (config_resolve says that the GPU computes in bf16 all the same).
    SEQPAR_INPUT_CHECK(*c.mixed_precision != "fp8",
                       "{}: 'mixed_precision'=fp8 is not supported: seqpar computes in bf16 or fp16 (CUDA) or fp32 "
                       "(CPU); use bf16 or fp16",
                       source);
  });
  p.attempt([&] { parse_deepspeed_section(top, c, base_dir, unread, p); });
  p.attempt([&] { parse_parallelism_section(top, c, unread); });
  p.attempt([&] { parse_fsdp_section(top, c, p); });

  for (std::string& k : top.unread()) unread.push_back(k);
  if (!unread.empty())
    c.warnings.push_back(fmt::format("{}: {} not read by seqpar (ignored): {}", source,
                                     unread.size() == 1 ? "this key is" : "these keys are", join(unread)));
  if (!collect) p.raise();
  return c;
}

AccelerateConfig load_accelerate_config(const std::string& path, Problems* problems) {
  std::string text;
  try {
    text = read_input_file(path, kAccelerateConfigInput);
  } catch (const InputError& e) {
    if (!problems) throw;
    problems->add(e.what());
    AccelerateConfig c;
    c.source = path;
    return c;
  }
  std::string dir = fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  return parse_accelerate_config(text, path, dir, problems);
}

}  // namespace seqpar
