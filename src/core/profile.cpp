#include "core/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"

#if defined(SEQPAR_WITH_CUDA)
#include "core/cuda/stream.h"
#include "core/cuda_check.h"
#endif

namespace seqpar {

namespace {

std::atomic<bool> g_on{false};
thread_local int t_depth = 0;
thread_local bool t_on = false;

struct Totals {
  std::mutex mu;
  std::map<std::string, ProfileEntry> by_name;
#if defined(SEQPAR_WITH_CUDA)
  // Recorded CUDA scopes whose times are not read yet, and the event pairs free for reuse (by
  // device: an event belongs to the device current when it was made).
  struct Pending {
    std::string name;
    int device;
    int slot;
  };
  std::vector<Pending> pending;
  std::map<int, std::vector<std::unique_ptr<Event>>> starts, stops;
  std::map<int, std::vector<int>> free_slots;
#endif
};

Totals& totals() {
  static Totals t;
  return t;
}

void add(Totals& t, const std::string& name, double ms) {
  ProfileEntry& e = t.by_name[name];
  e.name = name;
  e.calls += 1;
  e.ms += ms;
}

}  // namespace

void set_profiling(bool on) { g_on.store(on, std::memory_order_relaxed); }
void set_thread_profiling(bool on) { t_on = on; }

bool profiling() { return t_on || g_on.load(std::memory_order_relaxed); }

ProfileScope::ProfileScope(Device device, const char* op) : device_(device) {
  if (!profiling()) return;
  counted_ = true;
  if (t_depth++ > 0) return;
#if defined(SEQPAR_WITH_CUDA)
  if (device.is_cuda()) {
    // An event belongs to the device current when it is made and recorded: an op on another
    // device than the thread's current one is not timed.
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device.index) return;
  }
#endif
  active_ = true;
  name_ = op;
#if defined(SEQPAR_WITH_CUDA)
  if (device.is_cuda()) {
    Totals& t = totals();
    std::lock_guard<std::mutex> lock(t.mu);
    std::vector<int>& free = t.free_slots[device.index];
    if (free.empty()) {
      t.starts[device.index].push_back(std::make_unique<Event>(true));
      t.stops[device.index].push_back(std::make_unique<Event>(true));
      free.push_back(static_cast<int>(t.starts[device.index].size()) - 1);
    }
    slot_ = free.back();
    free.pop_back();
    t.starts[device.index][static_cast<size_t>(slot_)]->record();
    return;
  }
#endif
  start_ = std::chrono::steady_clock::now();
}

void ProfileScope::detail(const std::string& what) {
  if (active_) name_ += " " + what;
}

ProfileScope::~ProfileScope() {
  if (!counted_) return;
  --t_depth;
  if (!active_) return;
  Totals& t = totals();
#if defined(SEQPAR_WITH_CUDA)
  if (slot_ >= 0) {
    std::lock_guard<std::mutex> lock(t.mu);
    t.stops[device_.index][static_cast<size_t>(slot_)]->record();
    t.pending.push_back({std::move(name_), device_.index, slot_});
    return;
  }
#endif
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  std::lock_guard<std::mutex> lock(t.mu);
  add(t, name_, ms);
}

void note_host_wait(const char* why, double ms) {
  if (!profiling()) return;
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mu);
  add(t, std::string("host wait: ") + why, ms);
}

std::string profile_bytes(size_t bytes) { return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / 1048576.0); }

std::vector<ProfileEntry> take_profile() {
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mu);
#if defined(SEQPAR_WITH_CUDA)
  for (const Totals::Pending& p : t.pending) {
    const Event& stop = *t.stops[p.device][static_cast<size_t>(p.slot)];
    stop.synchronize();
    add(t, p.name, stop.elapsed_ms(*t.starts[p.device][static_cast<size_t>(p.slot)]));
    t.free_slots[p.device].push_back(p.slot);
  }
  t.pending.clear();
#endif
  std::vector<ProfileEntry> out;
  out.reserve(t.by_name.size());
  for (auto& [name, e] : t.by_name) out.push_back(e);
  t.by_name.clear();
  std::sort(out.begin(), out.end(), [](const ProfileEntry& a, const ProfileEntry& b) { return a.ms > b.ms; });
  return out;
}

bool is_host_wait(const ProfileEntry& e) { return e.name.rfind("host wait: ", 0) == 0; }

double ops_ms(const std::vector<ProfileEntry>& entries) {
  double sum = 0;
  for (const ProfileEntry& e : entries)
    if (!is_host_wait(e)) sum += e.ms;
  return sum;
}

std::string format_profile(const std::vector<ProfileEntry>& entries, double wall_ms, int top) {
  const double sum = ops_ms(entries);
  const double base = wall_ms > 0 ? wall_ms : sum;
  std::string s = fmt::format("{:<58} {:>8} {:>11} {:>7}\n", "op", "calls", "ms", "share");
  auto line = [&](const std::string& name, int64_t calls, double ms) {
    s += fmt::format("{:<58} {:>8} {:>11.2f} {:>6.1f}%\n", name.size() > 58 ? name.substr(0, 57) + "~" : name, calls,
                     ms, base > 0 ? 100.0 * ms / base : 0.0);
  };
  double rest = 0;
  int64_t rest_calls = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (static_cast<int>(i) < top) {
      line(entries[i].name, entries[i].calls, entries[i].ms);
    } else {
      rest += entries[i].ms;
      rest_calls += entries[i].calls;
    }
  }
  if (rest_calls > 0) line(fmt::format("({} more ops)", entries.size() - static_cast<size_t>(top)), rest_calls, rest);
  s += fmt::format("{:<58} {:>8} {:>11.2f} {:>6.1f}%\n", "profiled ops in all (host waits not counted)", "", sum,
                   base > 0 ? 100.0 * sum / base : 0.0);
  if (wall_ms > 0)
    s += fmt::format("{:<58} {:>8} {:>11.2f} {:>6.1f}%\n", "outside the ops (copies, host work, idle device)", "",
                     wall_ms - sum, 100.0 * (wall_ms - sum) / wall_ms);
  return s;
}

}  // namespace seqpar
