// Checkpoints: the write protocol, validation on load, the resume check and export
// (checkpoint.h says what each file holds and why the protocol is crash-safe).
#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/log.h"
#include "io/hf_config.h"
#include "train/config_resolve.h"

namespace seqpar {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kTmpPrefix = ".tmp_";
constexpr const char* kOldPrefix = ".old_";
constexpr const char* kFiles[] = {"model.safetensors", "config.json", "optimizer.safetensors", "trainer_state.json"};

// fsync a directory so the entries created or renamed in it are durable. Best effort, as
// io/safetensors does: some file systems refuse fsync on a directory.
void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// The step of a directory named step_<digits>, or -1.
int64_t step_of_name(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "step_") != 0) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || v > (INT64_MAX - 9) / 10) return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

// A user's path without trailing separators, so that its last component is the directory's name.
std::string strip_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  SEQPAR_INPUT_CHECK(in.is_open(), "{}: cannot open: {}", path.string(), std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The contents of a one-line file without its line end.
std::string strip_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<std::pair<std::string, Tensor>> prefixed(const LlamaParams& p, const std::string& prefix) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, t] : p.named()) out.emplace_back(prefix + name, t->to(Device::cpu()));
  return out;
}

// Removes a directory tree; errors are logged, not thrown (cleanup of what is no longer needed).
void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) log_warn("checkpoint: cannot remove {}: {}", p.string(), ec.message());
}

// Deletes the oldest step_* directories at or before `step` until keep_last remain.
void rotate(const fs::path& save_dir, int64_t step, int keep_last) {
  std::vector<std::pair<int64_t, fs::path>> dirs;
  for (const auto& e : fs::directory_iterator(save_dir)) {
    const int64_t s = step_of_name(e.path().filename().string());
    if (s >= 0 && s <= step && e.is_directory()) dirs.emplace_back(s, e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  const size_t keep = static_cast<size_t>(keep_last);
  for (size_t i = 0; i + keep < dirs.size(); ++i) {
    if (dirs[i].first == step) continue;
    remove_tree(dirs[i].second);
  }
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Every leaf of a JSON object as (dotted path, value), for naming what differs.
void flatten(const json& j, const std::string& prefix, std::vector<std::pair<std::string, json>>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else {
    out.emplace_back(prefix, j);
  }
}

std::string show(const json& v) {
  return v.is_null() ? std::string("(none)") : v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

std::string checkpoint_name(int64_t step) { return fmt::format("step_{:06d}", step); }

// ---- trainer_state.json ------------------------------------------------------------------

json trainer_state_to_json(const TrainerState& s) {
  json eval_acc = json::array(), eval_loss = json::array();
  for (auto& [step, v] : s.eval_accuracy) eval_acc.push_back({step, v});
  for (auto& [step, v] : s.eval_loss) eval_loss.push_back({step, v});
  return {
      {"format", kCheckpointFormat},
      {"version", kCheckpointVersion},
      {"step", s.step},
      {"seed", s.seed},
      // The trainer draws no random numbers after init: the data order is a function of (seed,
      // epoch) and the recall batches of (seed, batch index), so this is the whole RNG state.
      {"rng", {{"seed", s.seed}, {"data_epoch", s.data_epoch}}},
      {"data", {{"source", s.data_source}, {"epoch", s.data_epoch}, {"index", s.data_index}}},
      {"config", s.config},
      {"config_hash", s.config_hash},
      {"config_text", s.config_text},
      {"losses", s.losses},
      {"eval_accuracy", eval_acc},
      {"eval_loss", eval_loss},
      {"metrics", s.metrics},
  };
}

TrainerState trainer_state_from_json(const json& j, const std::string& source) {
  auto field = [&](const json& obj, const char* key) -> const json& {
    SEQPAR_INPUT_CHECK(obj.is_object() && obj.contains(key), "{}: field '{}' is missing", source, key);
    return obj.at(key);
  };
  TrainerState s;
  try {
    const std::string format = field(j, "format").get<std::string>();
    SEQPAR_INPUT_CHECK(format == kCheckpointFormat, "{}: format='{}', expected '{}'", source, format,
                       kCheckpointFormat);
    const int version = field(j, "version").get<int>();
    SEQPAR_INPUT_CHECK(version == kCheckpointVersion, "{}: version={}: this seqpar reads version {}", source, version,
                       kCheckpointVersion);
    s.step = field(j, "step").get<int64_t>();
    SEQPAR_INPUT_CHECK(s.step >= 1, "{}: step={} must be >= 1", source, s.step);
    s.seed = field(j, "seed").get<uint64_t>();
    const json& data = field(j, "data");
    s.data_source = field(data, "source").get<std::string>();
    SEQPAR_INPUT_CHECK(s.data_source == "recall" || s.data_source == "tokens",
                       "{}: data.source='{}', expected 'recall' or 'tokens'", source, s.data_source);
    s.data_epoch = field(data, "epoch").get<int64_t>();
    s.data_index = field(data, "index").get<int64_t>();
    s.config = field(j, "config");
    s.config_hash = field(j, "config_hash").get<std::string>();
    s.config_text = field(j, "config_text").get<std::string>();
    s.losses = field(j, "losses").get<std::vector<double>>();
    SEQPAR_INPUT_CHECK(static_cast<int64_t>(s.losses.size()) == s.step,
                       "{}: holds {} losses for step={}: there must be one per step", source, s.losses.size(), s.step);
    for (const json& e : field(j, "eval_accuracy"))
      s.eval_accuracy.emplace_back(e.at(0).get<int64_t>(), e.at(1).get<double>());
    for (const json& e : field(j, "eval_loss")) s.eval_loss.emplace_back(e.at(0).get<int64_t>(), e.at(1).get<double>());
    for (const json& m : field(j, "metrics")) s.metrics.push_back(m);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: {}", source, e.what()));
  }
  return s;
}

// ---- save -------------------------------------------------------------------------------

std::string save_checkpoint(const std::string& save_dir, const CheckpointContents& c, int keep_last,
                            const CheckpointFaultHook& hook) {
  SEQPAR_CHECK(c.model_config && c.weights && c.exp_avg && c.exp_avg_sq, "save_checkpoint: incomplete contents");
  const fs::path dir(save_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  SEQPAR_INPUT_CHECK(!ec && fs::is_directory(dir), "save_dir={}: cannot create the directory: {}", save_dir,
                     ec ? ec.message() : "not a directory");
  auto stage = [&](const std::string& s) {
    if (hook) hook(s);
  };
  // Leftovers of saves that did not finish (killed mid-write): never checkpoints, safe to drop,
  // except a moved-aside checkpoint that `latest` still names (latest_checkpoint falls back to it).
  std::string latest_name;
  if (fs::is_regular_file(dir / "latest", ec)) latest_name = strip_line(read_text(dir / "latest"));
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    const bool latest_aside = !latest_name.empty() && n == kOldPrefix + latest_name && !fs::exists(dir / latest_name);
    if (n.rfind(kTmpPrefix, 0) == 0 || (n.rfind(kOldPrefix, 0) == 0 && !latest_aside)) remove_tree(e.path());
  }

  const std::string name = checkpoint_name(c.state.step);
  const fs::path tmp = dir / (kTmpPrefix + name);
  const fs::path final_dir = dir / name;
  fs::create_directory(tmp, ec);
  SEQPAR_INPUT_CHECK(!ec, "save_dir={}: cannot create {}: {}", save_dir, tmp.string(), ec.message());

  // Each write is itself atomic and fsynced (io/safetensors.h); trainer_state.json goes last and
  // records the sizes of the others, so a load can tell a truncated file.
  const std::map<std::string, std::string> pt = {{"format", "pt"}};
  write_safetensors((tmp / "model.safetensors").string(), prefixed(*c.weights, ""), pt);
  stage("model.safetensors");
  write_file_atomic((tmp / "config.json").string(), hf_llama_config_json(*c.model_config, "float32"));
  stage("config.json");
  std::vector<std::pair<std::string, Tensor>> opt = prefixed(*c.exp_avg, "exp_avg.");
  for (auto& t : prefixed(*c.exp_avg_sq, "exp_avg_sq.")) opt.push_back(std::move(t));
  if (c.master)
    for (auto& t : prefixed(*c.master, "master.")) opt.push_back(std::move(t));
  write_safetensors((tmp / "optimizer.safetensors").string(), opt,
                    {{"step", std::to_string(c.optimizer_step)}, {"has_master", c.master ? "1" : "0"}});
  stage("optimizer.safetensors");
  json state = trainer_state_to_json(c.state);
  json sizes = json::object();
  for (const char* f : {"model.safetensors", "config.json", "optimizer.safetensors"})
    sizes[f] = static_cast<uint64_t>(fs::file_size(tmp / f));
  state["files"] = sizes;
  write_file_atomic((tmp / "trainer_state.json").string(), state.dump(1) + "\n");
  stage("trainer_state.json");
  fsync_dir(tmp);

  // Publish: the rename makes the checkpoint exist, complete. A step_N already there (a run that
  // resumed from an earlier checkpoint and reached N again) is moved aside first.
  const fs::path old = dir / (kOldPrefix + name);
  if (fs::exists(final_dir)) {
    fs::rename(final_dir, old, ec);
    SEQPAR_INPUT_CHECK(!ec, "save_dir={}: cannot move the existing {} aside: {}", save_dir, name, ec.message());
    stage("moved aside");
  }
  fs::rename(tmp, final_dir, ec);
  SEQPAR_INPUT_CHECK(!ec, "save_dir={}: cannot rename {} to {}: {}", save_dir, tmp.string(), name, ec.message());
  fsync_dir(dir);
  stage("rename");
  write_file_atomic((dir / "latest").string(), name + "\n");
  stage("latest");
  if (fs::exists(old)) remove_tree(old);
  if (keep_last > 0) rotate(dir, c.state.step, keep_last);
  return final_dir.string();
}

// ---- load -------------------------------------------------------------------------------

std::optional<std::string> latest_checkpoint(const std::string& save_dir) {
  const fs::path latest = fs::path(save_dir) / "latest";
  std::error_code ec;
  if (!fs::exists(latest, ec)) return std::nullopt;
  const std::string name = strip_line(read_text(latest));
  SEQPAR_INPUT_CHECK(step_of_name(name) >= 0, "{}: holds '{}', expected a checkpoint name like step_000123",
                     latest.string(), name);
  const fs::path dir = fs::path(save_dir) / name;
  if (!fs::is_directory(dir, ec)) {
    // A save that replaced an existing step_N was killed between moving the old one aside and
    // renaming the new one in: the old one is complete, under its temporary name.
    const fs::path old = fs::path(save_dir) / (kOldPrefix + name);
    SEQPAR_INPUT_CHECK(fs::is_regular_file(old / "trainer_state.json", ec), "{}: names {}, which does not exist",
                       latest.string(), dir.string());
    log_warn("{}: names {}, which a killed save moved to {}: using it", latest.string(), name, old.string());
    return old.string();
  }
  return dir.string();
}

std::string resolve_checkpoint_dir(const std::string& path_in) {
  const std::string path = strip_slashes(path_in);
  std::error_code ec;
  SEQPAR_INPUT_CHECK(fs::is_directory(path, ec), "checkpoint '{}': no such directory", path);
  const std::string n = fs::path(path).filename().string();
  SEQPAR_INPUT_CHECK(n.rfind(kTmpPrefix, 0) != 0,
                     "checkpoint '{}': an unfinished checkpoint (a save that did not complete; the previous "
                     "checkpoint named by the save directory's `latest` is intact)",
                     path);
  if (fs::exists(fs::path(path) / "trainer_state.json", ec)) return path;
  std::optional<std::string> latest = latest_checkpoint(path);
  if (latest) return *latest;
  SEQPAR_INPUT_CHECK(step_of_name(n) < 0,
                     "checkpoint '{}': trainer_state.json is missing (an incomplete or corrupt checkpoint)", path);
  throw InputError(fmt::format(
      "checkpoint '{}': neither a checkpoint directory (no trainer_state.json) nor a save directory (no `latest`)",
      path));
}

Checkpoint load_checkpoint(const std::string& dir_arg) {
  const std::string dir_in = strip_slashes(dir_arg);
  const fs::path dir(dir_in);
  const std::string where = fmt::format("checkpoint '{}'", dir_in);
  std::error_code ec;
  SEQPAR_INPUT_CHECK(fs::is_directory(dir, ec), "{}: no such directory", where);
  SEQPAR_INPUT_CHECK(dir.filename().string().rfind(kTmpPrefix, 0) != 0,
                     "{}: an unfinished checkpoint (a save that did not complete); resume from the save directory's "
                     "`latest` instead",
                     where);
  for (const char* f : kFiles)
    SEQPAR_INPUT_CHECK(fs::is_regular_file(dir / f, ec), "{}: {} is missing (an incomplete or corrupt checkpoint)",
                       where, f);
  Checkpoint ck;
  ck.dir = dir_in;
  json state;
  try {
    state = json::parse(read_text(dir / "trainer_state.json"));
  } catch (const json::exception& e) {
    throw InputError(
        fmt::format("{}: trainer_state.json is not valid JSON ({}): a corrupt checkpoint", where, e.what()));
  }
  ck.state = trainer_state_from_json(state, where + ": trainer_state.json");
  SEQPAR_INPUT_CHECK(state.contains("files") && state["files"].is_object(),
                     "{}: trainer_state.json has no 'files' (sizes of the checkpoint's files)", where);
  for (const char* f : {"model.safetensors", "config.json", "optimizer.safetensors"}) {
    SEQPAR_INPUT_CHECK(state["files"].contains(f) && state["files"][f].is_number_unsigned(),
                       "{}: trainer_state.json has no size for {}", where, f);
    const uint64_t want = state["files"][f].get<uint64_t>(), got = fs::file_size(dir / f);
    SEQPAR_INPUT_CHECK(got == want, "{}: {} is {} bytes but was written with {} ({}: a corrupt checkpoint)", where, f,
                       got, want, got < want ? "truncated" : "changed since");
  }
  const std::string name = dir.filename().string();
  if (step_of_name(name) >= 0)
    SEQPAR_INPUT_CHECK(step_of_name(name) == ck.state.step,
                       "{}: trainer_state.json says step={}, the directory name {}", where, ck.state.step, name);

  try {
    ck.model_config = load_hf_llama_config((dir / "config.json").string());
    ck.model = read_safetensors((dir / "model.safetensors").string());
    ck.optimizer = read_safetensors((dir / "optimizer.safetensors").string());
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {} (a corrupt checkpoint)", where, e.what()));
  }
  // Every parameter, moment and master weight present, with its HF shape, in f32.
  auto expect = [&](const SafetensorsData& data, const std::string& file, const std::string& name, const Shape& shape) {
    const Tensor* t = data.find(name);
    SEQPAR_INPUT_CHECK(t != nullptr, "{}: {}: tensor '{}' is missing", where, file, name);
    SEQPAR_INPUT_CHECK(t->shape() == shape && t->dtype() == DType::kF32,
                       "{}: {}: tensor '{}' is {}{}, expected f32{} (config.json)", where, file, name,
                       dtype_name(t->dtype()), shape_str(t->shape()), shape_str(shape));
  };
  auto meta = [&](const char* key) -> std::string {
    auto it = ck.optimizer.metadata.find(key);
    SEQPAR_INPUT_CHECK(it != ck.optimizer.metadata.end(), "{}: optimizer.safetensors has no metadata '{}'", where, key);
    return it->second;
  };
  try {
    ck.optimizer_step = std::stoll(meta("step"));
  } catch (const std::logic_error&) {
    throw InputError(
        fmt::format("{}: optimizer.safetensors: metadata step='{}' is not an integer", where, meta("step")));
  }
  ck.has_master = meta("has_master") == "1";
  for (auto& [pname, shape] : LlamaParams::shapes(ck.model_config)) {
    expect(ck.model, "model.safetensors", pname, shape);
    expect(ck.optimizer, "optimizer.safetensors", "exp_avg." + pname, shape);
    expect(ck.optimizer, "optimizer.safetensors", "exp_avg_sq." + pname, shape);
    if (ck.has_master) expect(ck.optimizer, "optimizer.safetensors", "master." + pname, shape);
  }
  return ck;
}

void restore_from_checkpoint(const Checkpoint& ck, LlamaParams& params, AdamW& optimizer) {
  auto copy_into = [](LlamaParams& dst, const SafetensorsData& src, const std::string& prefix) {
    for (auto& [name, t] : dst.named()) {
      const Tensor& s = src.at(prefix + name);
      t->copy_from(t->dtype() == s.dtype() ? s : s.to_dtype(t->dtype()).to(t->device()));
    }
  };
  if (optimizer.sharded()) {
    // A ZeRO-sharded optimizer takes the whole state and keeps its shard.
    copy_into(params, ck.model, "");
    LlamaParams m = LlamaParams::zeros(ck.model_config, DType::kF32, params.embed_tokens.device(), true);
    LlamaParams v = LlamaParams::zeros(ck.model_config, DType::kF32, params.embed_tokens.device(), true);
    LlamaParams master;
    copy_into(m, ck.optimizer, "exp_avg.");
    copy_into(v, ck.optimizer, "exp_avg_sq.");
    if (optimizer.has_master()) {
      master = LlamaParams::zeros(ck.model_config, DType::kF32, params.embed_tokens.device(), true);
      copy_into(master, ck.has_master ? ck.optimizer : ck.model, ck.has_master ? "master." : "");
    }
    optimizer.load_full_state(m, v, optimizer.has_master() ? &master : nullptr);
    optimizer.set_step_count(ck.optimizer_step);
    return;
  }
  // The weights to restore exactly are the f32 ones: the master copy when the optimizer keeps
  // one (params are then its rounding), else params themselves.
  LlamaParams& f32 = optimizer.weights(params);
  copy_into(f32, ck.has_master ? ck.optimizer : ck.model, ck.has_master ? "master." : "");
  if (optimizer.has_master()) copy_into(params, ck.model, "");
  copy_into(optimizer.exp_avg(), ck.optimizer, "exp_avg.");
  copy_into(optimizer.exp_avg_sq(), ck.optimizer, "exp_avg_sq.");
  optimizer.set_step_count(ck.optimizer_step);
}

// ---- the run's configuration and the resume check -----------------------------------------

json train_config_json(const TrainConfig& c, const LlamaConfig& model, const json& data, const json& eval_data) {
  const MeshShape m = sp_mesh_shape(c.sp_mode, c.sp, c.ulysses_degree);
  const OptimizerConfig& o = c.optimizer;
  const LrSchedule s = lr_schedule_of(c);
  json j = {
      {"model", json::parse(hf_llama_config_json(model, "float32"))},
      {"model_dir", c.model_dir},
      {"seq_len", c.task.seq_len},
      {"micro_batch", c.micro_batch},
      {"grad_accum", c.grad_accum},
      {"dp_replicate", c.dp_replicate},
      {"dp_shard", c.dp_shard},
      {"sp", c.sp},
      // With sp = 1 there is no SP attention: the mode is no part of the computation.
      {"sp_mode", c.sp == 1 ? std::string("none") : sp_mode_name(c.sp_mode)},
      {"ulysses_degree", m.ulysses},
      {"sp_layout", std::string(sp_layout_name(m.ring > 1 ? c.layout : SpLayout::kContiguous))},
      {"seed", c.seed},
      {"data", data},
      {"shuffle", c.shuffle},
      {"eval_data", eval_data},
      {"steps", c.steps},
      {"optimizer",
       {{"lr", o.adamw.lr},
        {"beta1", o.adamw.beta1},
        {"beta2", o.adamw.beta2},
        {"eps", o.adamw.eps},
        {"weight_decay", o.adamw.weight_decay},
        {"clip", o.clip}}},
      {"lr_schedule",
       {{"type", lr_schedule_type_name(s.type)},
        {"warmup_steps", s.warmup_steps},
        {"min_lr_ratio", s.min_lr_ratio},
        {"total_steps", s.total_steps},
        {"warmup_min_lr", s.warmup_min_lr},
        {"warmup_max_lr", s.warmup_max_lr},
        {"warmup_num_steps", s.warmup_num_steps},
        {"warmup_type", s.warmup_type == WarmupType::kLog ? "log" : "linear"},
        {"total_num_steps", s.total_num_steps},
        {"warmup_min_ratio", s.warmup_min_ratio},
        {"cos_min_ratio", s.cos_min_ratio}}},
      {"log_every", c.log_every},
      {"eval_every", c.eval_every},
      {"eval_batches", c.eval_batches},
      {"stop_at_accuracy", c.stop_at_accuracy},
      {"metrics_out", c.metrics_out},
      {"save_dir", c.save_dir},
      {"save_every", c.save_every},
      {"keep_last", c.keep_last},
  };
  // Every other declared setting as it is (the ones above are recorded resolved: the mesh's
  // actual mode, degree and layout, the data's identity rather than its path).
  // The optimizer's and seqpar's schedule's settings are in "optimizer" and "lr_schedule".
  for (const SettingDecl& d : train_settings()) {
    const bool nested = d.group == SettingGroup::kOptimizer || d.name == "warmup_steps" ||
                        d.name == "min_lr_ratio" || d.name == "lr_schedule";
    if (!nested && !j.contains(d.name)) j[d.name] = d.to_json(c);
  }
  if (c.data_path.empty()) {
    const RecallTaskConfig& t = c.task;
    j["task"] = {{"num_pairs", t.num_pairs},
                 {"num_queries", t.num_queries},
                 {"num_keys", t.num_keys},
                 {"num_values", t.num_values},
                 {"vocab_size", t.vocab_size}};
  } else {
    j["task"] = nullptr;
  }
  return j;
}

std::string config_hash(const json& config) { return fmt::format("{:016x}", fnv1a64(config.dump())); }

std::vector<std::string> check_resume_config(const json& saved, const json& now, const std::string& dir) {
  // The declared settings' rules (train/config.h), and the records that are not settings of their
  // own: the model's architecture and the recall task must match, the optimizer's and the
  // schedule's whole parameters may change with a warning.
  std::set<std::string> kMustMatch = {"model", "task"}, kWarn = {"optimizer", "lr_schedule"};
  for (const SettingDecl& d : train_settings()) {
    if (d.resume == ResumeRule::kMustMatch) kMustMatch.insert(d.name);
    if (d.resume == ResumeRule::kWarn) kWarn.insert(d.name);
  }
  std::vector<std::pair<std::string, json>> a, b;
  flatten(saved, "", a);
  flatten(now, "", b);
  std::map<std::string, json> before(a.begin(), a.end()), after(b.begin(), b.end());
  std::set<std::string> keys;
  for (auto& [k, v] : before) keys.insert(k);
  for (auto& [k, v] : after) keys.insert(k);
  std::vector<std::string> errors, warnings;
  for (const std::string& k : keys) {
    const json x = before.count(k) ? before[k] : json(nullptr), y = after.count(k) ? after[k] : json(nullptr);
    if (x == y) continue;
    const std::string top = k.substr(0, k.find('.'));
    if (kMustMatch.count(top)) {
      errors.push_back(fmt::format("{}={} in the checkpoint but {} now", k, show(x), show(y)));
    } else if (kWarn.count(top)) {
      warnings.push_back(
          fmt::format("resume: {} changes from {} (checkpoint {}) to {}: the run continues with the new "
                      "value, so it is not bit-exact with an uninterrupted run",
                      k, show(x), dir, show(y)));
    }
  }
  if (!errors.empty()) {
    std::string msg = fmt::format("cannot resume from checkpoint '{}': ", dir);
    for (size_t i = 0; i < errors.size(); ++i) msg += (i ? "; " : "") + errors[i];
    msg +=
        ". These settings must equal the checkpoint's (the model, seq_len, micro_batch, grad_accum, dp_replicate, "
        "dp_shard, sp, sp_mode, ulysses_degree, sp_layout, seed, the training data and shuffle, the recall task); "
        "optimizer, schedule, steps, output and checkpoint settings may change";
    throw InputError(msg);
  }
  return warnings;
}

// ---- export -----------------------------------------------------------------------------

ExportResult export_checkpoint(const std::string& checkpoint, const std::string& out_dir, DType dtype,
                               const std::string& tokenizer_dir) {
  SEQPAR_INPUT_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "--dtype={}: expected f32 or bf16",
                     dtype_name(dtype));
  const std::string dir = resolve_checkpoint_dir(checkpoint);
  Checkpoint ck = load_checkpoint(dir);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  SEQPAR_INPUT_CHECK(!ec && fs::is_directory(out_dir), "--out={}: cannot create the directory: {}", out_dir,
                     ec ? ec.message() : "not a directory");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, shape] : LlamaParams::shapes(ck.model_config)) {
    const Tensor& t = ck.model.at(name);
    tensors.emplace_back(name, dtype == DType::kF32 ? t : t.to_dtype(dtype));
  }
  write_safetensors((fs::path(out_dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  write_file_atomic((fs::path(out_dir) / "config.json").string(),
                    hf_llama_config_json(ck.model_config, dtype == DType::kF32 ? "float32" : "bfloat16"));

  ExportResult result{dir, {}};
  std::string from = tokenizer_dir;
  if (from.empty()) {
    const json& md = ck.state.config.contains("model_dir") ? ck.state.config["model_dir"] : json(nullptr);
    if (md.is_string() && fs::is_directory(md.get<std::string>(), ec)) from = md.get<std::string>();
  } else if (from != "none") {
    SEQPAR_INPUT_CHECK(fs::is_directory(from, ec), "--tokenizer-from={}: no such directory", from);
  }
  if (!from.empty() && from != "none") {
    for (const char* f : kExportCopiedFiles) {
      const fs::path src = fs::path(from) / f;
      if (!fs::is_regular_file(src, ec)) continue;
      write_file_atomic((fs::path(out_dir) / f).string(), read_text(src));
      result.copied.push_back(src.string());
    }
  }
  return result;
}

}  // namespace seqpar
