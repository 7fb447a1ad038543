// Checkpoints: the write protocol, validation on load, the resume check and export
// (checkpoint.h says what each file holds and why the protocol is crash-safe).
#include "train/checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "core/log.h"
#include "io/hf_config.h"
#include "io/input_file.h"
#include "train/checksum.h"
#include "train/config_resolve.h"
#include "train/hf_model.h"

namespace seqpar {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kTmpPrefix = ".tmp_";
constexpr const char* kOldPrefix = ".old_";
constexpr const char* kFiles[] = {"model.safetensors", "config.json", "optimizer.safetensors", "trainer_state.json"};
// The files trainer_state.json records the size and checksum of.
constexpr const char* kDataFiles[] = {"model.safetensors", "config.json", "optimizer.safetensors"};
constexpr const char* kLockFile = ".lock";
constexpr const char* kStateChecksum = "state_checksum";

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
      {"skipped_steps", s.skipped_steps},
      {"overflow_steps", s.overflow_steps},
      {"loss_scaler", s.loss_scaler ? loss_scaler_state_to_json(*s.loss_scaler) : json(nullptr)},
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
    // A step the non-finite guard skipped has a NaN loss, which JSON writes as null.
    for (const json& l : field(j, "losses"))
      s.losses.push_back(l.is_null() ? std::numeric_limits<double>::quiet_NaN() : l.get<double>());
    SEQPAR_INPUT_CHECK(static_cast<int64_t>(s.losses.size()) == s.step,
                       "{}: holds {} losses for step={}: there must be one per step", source, s.losses.size(), s.step);
    for (const json& e : field(j, "eval_accuracy"))
      s.eval_accuracy.emplace_back(e.at(0).get<int64_t>(), e.at(1).get<double>());
    for (const json& e : field(j, "eval_loss")) s.eval_loss.emplace_back(e.at(0).get<int64_t>(), e.at(1).get<double>());
    for (const json& m : field(j, "metrics")) s.metrics.push_back(m);
    if (j.contains("skipped_steps")) {  // absent in checkpoints of an older seqpar: none skipped
      s.skipped_steps = j.at("skipped_steps").get<std::vector<int64_t>>();
      for (int64_t k : s.skipped_steps)
        SEQPAR_INPUT_CHECK(k >= 1 && k <= s.step, "{}: skipped_steps holds {}, outside steps 1..{}", source, k, s.step);
    }
    if (j.contains("overflow_steps")) {  // absent before fp16: none
      s.overflow_steps = j.at("overflow_steps").get<std::vector<int64_t>>();
      for (int64_t k : s.overflow_steps)
        SEQPAR_INPUT_CHECK(std::count(s.skipped_steps.begin(), s.skipped_steps.end(), k) == 1,
                           "{}: overflow_steps holds {}, which skipped_steps does not", source, k);
    }
    if (j.contains("loss_scaler") && !j.at("loss_scaler").is_null())
      s.loss_scaler = loss_scaler_state_from_json(j.at("loss_scaler"), source);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: {}", source, e.what()));
  }
  return s;
}

// ---- save -------------------------------------------------------------------------------

namespace {

// Leftovers of saves that did not finish (killed mid-write): never checkpoints, safe to drop,
// except a moved-aside checkpoint that `latest` still names (latest_checkpoint falls back to it).
// Also the temporaries of `latest` itself (latest.tmp.<pid>.<n>, io/safetensors' atomic writes).
void remove_leftovers(const fs::path& dir) {
  std::error_code ec;
  std::string latest_name;
  if (fs::is_regular_file(dir / "latest", ec)) latest_name = strip_line(read_text(dir / "latest"));
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    const bool latest_aside = !latest_name.empty() && n == kOldPrefix + latest_name && !fs::exists(dir / latest_name);
    if (n.rfind(kTmpPrefix, 0) == 0 || n.rfind("latest.tmp.", 0) == 0 || (n.rfind(kOldPrefix, 0) == 0 && !latest_aside))
      remove_tree(e.path());
  }
}

// The four files of a checkpoint into `tmp`, each atomic and fsynced (io/safetensors.h);
// trainer_state.json goes last and records the sizes and checksums of the others, so a load can
// tell a truncated or altered file.
void write_checkpoint_files(const fs::path& tmp, const CheckpointContents& c,
                            const std::function<void(const std::string&)>& stage) {
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
  json sizes = json::object(), sums = json::object();
  for (const char* f : kDataFiles) {
    sizes[f] = static_cast<uint64_t>(fs::file_size(tmp / f));
    sums[f] = checksum_text(file_xxh64((tmp / f).string()));  // read back: what the disk holds
  }
  state["files"] = sizes;
  state["checksums"] = sums;
  write_file_atomic((tmp / "trainer_state.json").string(), sealed_state_text(std::move(state)));
  stage("trainer_state.json");
  fsync_dir(tmp);
}

}  // namespace

std::string sealed_state_text(json state) {
  state.erase(kStateChecksum);
  const std::string body = state.dump(1) + "\n";
  state[kStateChecksum] = checksum_text(xxh64(body.data(), body.size()));
  return state.dump(1) + "\n";
}

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
  remove_leftovers(dir);

  const std::string name = checkpoint_name(c.state.step);
  const fs::path tmp = dir / (kTmpPrefix + name);
  const fs::path final_dir = dir / name;
  fs::create_directory(tmp, ec);
  SEQPAR_INPUT_CHECK(!ec, "save_dir={}: cannot create {}: {}", save_dir, tmp.string(), ec.message());
  try {
    write_checkpoint_files(tmp, c, stage);
  } catch (const Error& e) {
    // A write that failed (disk full, file-size limit, I/O error): its space is given back now,
    // and `latest` still names the previous checkpoint. (A simulated kill, any other exception,
    // leaves the directory as a real kill would: the next save or start removes it.)
    remove_tree(tmp);
    std::string previous = "none yet";
    if (fs::is_regular_file(dir / "latest", ec)) previous = (dir / strip_line(read_text(dir / "latest"))).string();
    throw Error(
        fmt::format("save_dir={}: saving the checkpoint of step {} failed, nothing of it is left and the "
                    "previous checkpoint ({}) is intact: {}",
                    save_dir, c.state.step, previous, e.what()));
  }

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

// ---- the save directory's lock ------------------------------------------------------------

namespace {

std::string host_name() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}

}  // namespace

SaveDirLock::SaveDirLock(const std::string& save_dir) {
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  SEQPAR_INPUT_CHECK(!ec && fs::is_directory(save_dir), "save_dir={}: cannot create the directory: {}", save_dir,
                     ec ? ec.message() : "not a directory");
  const std::string path = (fs::path(save_dir) / kLockFile).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  SEQPAR_INPUT_CHECK(fd_ >= 0, "save_dir={}: cannot open its lock file {}: {} (is the directory writable?)", save_dir,
                     path, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder = strip_line(read_text(path));
    ::close(fd_);
    fd_ = -1;
    SEQPAR_INPUT_CHECK(err != EWOULDBLOCK,
                       "save_dir={} is in use by another trainer ({}; lock file {}): two runs on "
                       "one directory would overwrite each other's checkpoints; wait for it to end or give another "
                       "--save-dir",
                       save_dir, holder.empty() ? std::string("holder unknown") : holder, path);
    throw InputError(fmt::format("save_dir={}: cannot lock {}: {}", save_dir, path, std::strerror(err)));
  }
  // Ours: say who holds it (read by a refused second trainer), then drop what killed saves left.
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const std::string text = fmt::format("pid {} on host {}, since {}\n", ::getpid(), host_name(), when);
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    log_warn("save_dir={}: cannot write the holder into {}: {}", save_dir, path, std::strerror(errno));
  remove_leftovers(save_dir);
}

SaveDirLock::~SaveDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
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

namespace {

// trainer_state.json's own checksum (sealed_state_text) against the parsed file; false when it
// has none (a checkpoint of an older seqpar). Removes the key from `state`.
bool verify_state_checksum(json& state, const std::string& where) {
  if (!state.is_object() || !state.contains(kStateChecksum)) return false;
  const json recorded = state[kStateChecksum];
  state.erase(kStateChecksum);
  const std::string body = state.dump(1) + "\n";
  const std::string actual = checksum_text(xxh64(body.data(), body.size()));
  SEQPAR_INPUT_CHECK(recorded.is_string() && recorded.get<std::string>() == actual,
                     "{}: trainer_state.json: checksum mismatch (recorded {}, its contents give {}): the file was "
                     "altered or corrupted after it was written",
                     where, recorded.dump(), actual);
  return true;
}

// Every data file's bytes against the checksum recorded when it was written.
void verify_file_checksums(const json& state, const fs::path& dir, const std::string& where) {
  SEQPAR_INPUT_CHECK(state.contains("checksums") && state["checksums"].is_object(),
                     "{}: trainer_state.json has no 'checksums'", where);
  for (const char* f : kDataFiles) {
    const json& want = state["checksums"].contains(f) ? state["checksums"][f] : json(nullptr);
    SEQPAR_INPUT_CHECK(want.is_string(), "{}: trainer_state.json has no checksum for {}", where, f);
    const std::string got = checksum_text(file_xxh64((dir / f).string()));
    SEQPAR_INPUT_CHECK(got == want.get<std::string>(),
                       "{}: {}: checksum mismatch (recorded {}, the file gives {}): its bytes changed after it was "
                       "written (a corrupt checkpoint)",
                       where, f, want.get<std::string>(), got);
  }
}

// config.json against the model recorded in trainer_state.json's configuration, key by key.
void check_config_matches_state(const LlamaConfig& model, const json& config, const std::string& where) {
  SEQPAR_INPUT_CHECK(config.is_object() && config.contains("model") && config["model"].is_object(),
                     "{}: trainer_state.json's config has no 'model'", where);
  // Both sides through the same parser and writer, so that only a different model differs.
  const json recorded = json::parse(hf_llama_config_json(
      parse_hf_llama_config(config["model"].dump(), where + ": trainer_state.json's config.model"), "float32"));
  const json file = json::parse(hf_llama_config_json(model, "float32"));
  if (file == recorded) return;
  std::string diff;
  std::vector<std::pair<std::string, json>> a, b;
  flatten(file, "", a);
  flatten(recorded, "", b);
  std::map<std::string, json> fa(a.begin(), a.end()), fb(b.begin(), b.end());
  for (auto& [k, v] : fa)
    if (!fb.count(k) || fb[k] != v)
      diff += fmt::format("{}{}={} (trainer_state.json: {})", diff.empty() ? "" : ", ", k, show(v),
                          fb.count(k) ? show(fb[k]) : "(none)");
  for (auto& [k, v] : fb)
    if (!fa.count(k))
      diff += fmt::format("{}{} missing (trainer_state.json: {})", diff.empty() ? "" : ", ", k, show(v));
  throw InputError(
      fmt::format("{}: config.json disagrees with trainer_state.json's model: {}: files of different "
                  "checkpoints, or an edited config.json",
                  where, diff));
}

// optimizer.safetensors' metadata step, parsed whole (a prefix like "12abc" is no step count).
int64_t parse_step_count(const std::string& text, const std::string& where) {
  int64_t v = -1;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  SEQPAR_INPUT_CHECK(!text.empty() && ec == std::errc() && p == end && v >= 0,
                     "{}: optimizer.safetensors: metadata step='{}' is not a whole non-negative integer", where, text);
  return v;
}

}  // namespace

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
    state = json::parse(read_json_text((dir / "trainer_state.json").string(), kConfigInput, where + ": trainer_state.json"));
  } catch (const json::exception& e) {
    throw InputError(
        fmt::format("{}: trainer_state.json is not valid JSON ({}): a corrupt checkpoint", where, e.what()));
  }
  const bool checksummed = verify_state_checksum(state, where);
  ck.state = trainer_state_from_json(state, where + ": trainer_state.json");
  SEQPAR_INPUT_CHECK(state.contains("files") && state["files"].is_object(),
                     "{}: trainer_state.json has no 'files' (sizes of the checkpoint's files)", where);
  for (const char* f : kDataFiles) {
    SEQPAR_INPUT_CHECK(state["files"].contains(f) && state["files"][f].is_number_unsigned(),
                       "{}: trainer_state.json has no size for {}", where, f);
    const uint64_t want = state["files"][f].get<uint64_t>(), got = fs::file_size(dir / f);
    SEQPAR_INPUT_CHECK(got == want, "{}: {} is {} bytes but was written with {} ({}: a corrupt checkpoint)", where, f,
                       got, want, got < want ? "truncated" : "changed since");
  }
  if (checksummed) {
    verify_file_checksums(state, dir, where);
  } else {
    log_warn("{}: written by an older seqpar without checksums: its files are not verified", where);
  }
  const std::string name = dir.filename().string();
  if (step_of_name(name) >= 0)
    SEQPAR_INPUT_CHECK(step_of_name(name) == ck.state.step,
                       "{}: trainer_state.json says step={}, the directory name {}", where, ck.state.step, name);

  try {
    ck.model_config = load_hf_llama_config((dir / "config.json").string());
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {} (a corrupt checkpoint)", where, e.what()));
  }
  // config.json sizes every tensor read below: it must be the model trainer_state.json was saved
  // with, before anything is allocated from it.
  check_config_matches_state(ck.model_config, ck.state.config, where);
  try {
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
  ck.optimizer_step = parse_step_count(meta("step"), where);
  // AdamW counts the updates: every step but those the non-finite guard skipped.
  const int64_t updates = ck.state.step - static_cast<int64_t>(ck.state.skipped_steps.size());
  SEQPAR_INPUT_CHECK(ck.optimizer_step == updates,
                     "{}: optimizer.safetensors: metadata step={} (AdamW's step count) disagrees with "
                     "trainer_state.json (step {}, {} skipped: {} updates): files of different checkpoints",
                     where, ck.optimizer_step, ck.state.step, ck.state.skipped_steps.size(), updates);
  const std::string has_master = meta("has_master");
  SEQPAR_INPUT_CHECK(has_master == "0" || has_master == "1",
                     "{}: optimizer.safetensors: metadata has_master='{}', expected 0 or 1", where, has_master);
  ck.has_master = has_master == "1";
  for (auto& [pname, shape] : LlamaParams::shapes(ck.model_config)) {
    expect(ck.model, "model.safetensors", pname, shape);
    expect(ck.optimizer, "optimizer.safetensors", "exp_avg." + pname, shape);
    expect(ck.optimizer, "optimizer.safetensors", "exp_avg_sq." + pname, shape);
    if (ck.has_master) expect(ck.optimizer, "optimizer.safetensors", "master." + pname, shape);
  }
  return ck;
}

Checkpoint load_newest_good_checkpoint(const std::string& save_dir) {
  const std::optional<std::string> latest = latest_checkpoint(save_dir);
  SEQPAR_CHECK(latest.has_value(), "load_newest_good_checkpoint: {} has no `latest`", save_dir);
  try {
    return load_checkpoint(*latest);
  } catch (const InputError& newest) {
    // The older complete checkpoints, newest first (`latest` names the newest).
    const int64_t refused_step = step_of_name(fs::path(*latest).filename().string());
    std::vector<std::pair<int64_t, fs::path>> older;
    for (const auto& e : fs::directory_iterator(save_dir)) {
      const int64_t st = step_of_name(e.path().filename().string());
      if (st >= 0 && (refused_step < 0 || st < refused_step) && e.is_directory()) older.emplace_back(st, e.path());
    }
    std::sort(older.rbegin(), older.rend());
    for (const auto& [st, path] : older) {
      try {
        Checkpoint ck = load_checkpoint(path.string());
        log_warn("resume: refusing {}: {}; falling back to the previous checkpoint {} (step {})", *latest,
                 newest.what(), path.string(), st);
        return ck;
      } catch (const InputError& e) {
        log_warn("resume: {} does not load either: {}", path.string(), e.what());
      }
    }
    throw InputError(fmt::format("{} (and no older checkpoint in save_dir={} loads)", newest.what(), save_dir));
  }
}

void restore_from_checkpoint(const Checkpoint& ck, LlamaParams& params, AdamW& optimizer) {
  auto copy_into = [](LlamaParams& dst, const SafetensorsData& src, const std::string& prefix) {
    for (auto& [name, t] : dst.named()) {
      if (!t->defined()) continue;  // ZeRO-3: the model holds its edges only (the optimizer has the rest)
      const Tensor& s = src.at(prefix + name);
      t->copy_from(t->dtype() == s.dtype() ? s : s.to_dtype(t->dtype()).to(t->device()));
    }
  };
  if (optimizer.flat()) {
    // A flat optimizer (ZeRO, offload) takes the whole state and keeps its pieces.
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
  const MeshShape m = sp_mesh_shape(c.parallel.sp_mode, c.parallel.sp, c.parallel.ulysses_degree);
  const OptimizerConfig& o = c.optimizer;
  const LrSchedule s = lr_schedule_of(c);
  json j = {
      {"model", json::parse(hf_llama_config_json(model, "float32"))},
      {"model_dir", c.model.dir},
      {"seq_len", c.data.task.seq_len},
      {"micro_batch", c.data.micro_batch},
      {"grad_accum", c.data.grad_accum},
      {"dp_replicate", c.parallel.dp_replicate},
      {"dp_shard", c.parallel.dp_shard},
      {"sp", c.parallel.sp},
      // With sp = 1 there is no SP attention: the mode is no part of the computation.
      {"sp_mode", c.parallel.sp == 1 ? std::string("none") : sp_mode_name(c.parallel.sp_mode)},
      {"ulysses_degree", m.ulysses},
      {"sp_layout", std::string(sp_layout_name(m.ring > 1 ? c.parallel.layout : SpLayout::kContiguous))},
      {"seed", c.schedule.seed},
      {"data", data},
      {"shuffle", c.data.shuffle},
      {"eval_data", eval_data},
      {"steps", c.schedule.steps},
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
      {"log_every", c.logging.log_every},
      {"eval_every", c.logging.eval_every},
      {"eval_batches", c.data.eval_batches},
      {"stop_at_accuracy", c.logging.stop_at_accuracy},
      {"metrics_out", c.logging.metrics_out},
      {"save_dir", c.checkpoint.save_dir},
      {"save_every", c.checkpoint.save_every},
      {"keep_last", c.checkpoint.keep_last},
  };
  // Every other declared setting as it is (the ones above are recorded resolved: the mesh's
  // actual mode, degree and layout, the data's identity rather than its path).
  // The optimizer's and seqpar's schedule's settings are in "optimizer" and "lr_schedule".
  for (const SettingDecl& d : train_settings()) {
    const bool nested = d.group == SettingGroup::kOptimizer || d.name == "warmup_steps" ||
                        d.name == "min_lr_ratio" || d.name == "lr_schedule";
    if (!nested && !j.contains(d.name)) j[d.name] = d.to_json(c);
  }
  if (c.data.path.empty()) {
    const RecallTaskConfig& t = c.data.task;
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
  // A setting the checkpoint's seqpar did not record yet ran at what is now its default: resuming at
  // the default changes nothing.
  std::map<std::string, json> defaults;
  const TrainConfig default_config;
  for (const SettingDecl& d : train_settings()) defaults[d.name] = d.to_json(default_config);
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
    if (!before.count(k) && defaults.count(k) && defaults[k] == y) continue;
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

namespace {

// An export's --out must not be a checkpoint or inside one, nor a save directory: its files
// (config.json, model.safetensors) would overwrite a checkpoint's and leave it unloadable.
void refuse_export_over_checkpoint(const std::string& out_dir, const std::string& checkpoint_dir) {
  std::error_code ec;
  const fs::path out = fs::weakly_canonical(fs::absolute(out_dir, ec), ec);
  const fs::path ck = fs::weakly_canonical(fs::absolute(checkpoint_dir, ec), ec);
  for (fs::path p = out; !p.empty(); p = p.parent_path()) {
    const bool is_checkpoint =
        p == ck || fs::exists(p / "trainer_state.json", ec) || p.filename().string().rfind(kTmpPrefix, 0) == 0;
    SEQPAR_INPUT_CHECK(!is_checkpoint,
                       "--out={}: {} is a training checkpoint: the export would overwrite its config.json and "
                       "model.safetensors; give a directory outside every checkpoint",
                       out_dir, p.string());
    if (p == out)
      SEQPAR_INPUT_CHECK(!fs::exists(p / "latest", ec) && !fs::exists(p / kLockFile, ec),
                         "--out={}: a training save directory (it holds `latest` or {}): give a directory outside it",
                         out_dir, kLockFile);
    if (p == p.root_path()) break;
  }
}

}  // namespace

ExportResult export_checkpoint(const std::string& checkpoint, const std::string& out_dir, DType dtype,
                               const std::string& tokenizer_dir) {
  SEQPAR_INPUT_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
                     "--dtype={}: expected f32, bf16 or f16", dtype_name(dtype));
  const std::string dir = resolve_checkpoint_dir(checkpoint);
  refuse_export_over_checkpoint(out_dir, dir);
  Checkpoint ck = load_checkpoint(dir);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  SEQPAR_INPUT_CHECK(!ec && fs::is_directory(out_dir), "--out={}: cannot create the directory: {}", out_dir,
                     ec ? ec.message() : "not a directory");
  // HF's names and layout (train/hf_model.h: GPT-2's c_attn, Conv1D), from seqpar's.
  std::vector<std::pair<std::string, const Tensor*>> named;
  for (auto& [name, shape] : LlamaParams::shapes(ck.model_config)) named.emplace_back(name, &ck.model.at(name));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : to_hf_tensors(ck.model_config, named))
    tensors.emplace_back(name, dtype == DType::kF32 ? t : t.to_dtype(dtype));
  write_safetensors((fs::path(out_dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  write_file_atomic((fs::path(out_dir) / "config.json").string(),
                    hf_llama_config_json(ck.model_config, dtype == DType::kF32   ? "float32"
                                                          : dtype == DType::kF16 ? "float16"
                                                                                 : "bfloat16"));

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
