#include "io/bounded_child.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

namespace seqpar {

namespace {

// The child's resident bytes, or -1 where /proc cannot say.
int64_t resident_bytes_of(pid_t pid) {
  const std::string path = fmt::format("/proc/{}/statm", pid);
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return -1;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  if (n != 2) return -1;
  return static_cast<int64_t>(resident) * ::sysconf(_SC_PAGESIZE);
}

}  // namespace

ChildOutcome run_in_bounded_child(const std::function<void()>& f, const ChildLimits& limits) {
  ChildOutcome out;
  // The child starts with the parent's resident pages (shared until written): its growth is bounded.
  const int64_t base = std::max<int64_t>(0, resident_bytes_of(::getpid()));
  const pid_t pid = ::fork();
  if (pid < 0) {  // no child: the caller's own parse runs unbounded, as before this check existed
    out.finished = true;
    return out;
  }
  if (pid == 0) {
    // The child: f, then out without the parent's exit handlers (atexit, static destructors, a
    // sanitizer's leak check of memory the parent owns).
    int code = 0;
    try {
      f();
    } catch (...) {
      code = 1;  // an exception is an end too: the caller's in-process parse meets it again
    }
    ::_exit(code);
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto stop = [&](std::string why) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    out.stopped = std::move(why);
    return out;
  };
  for (auto pause = std::chrono::microseconds(50);; pause = std::min(pause * 2, std::chrono::microseconds(10000))) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) {
        out.finished = true;
      } else {
        out.stopped = WIFSIGNALED(status) ? fmt::format("died by signal {}", WTERMSIG(status)) : "ended abnormally";
      }
      return out;
    }
    if (r < 0 && errno != EINTR) {  // (not ours to reap: someone else waited for it)
      out.finished = true;
      return out;
    }
    const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    if (ms > limits.wall_ms) return stop(fmt::format("ran past {} ms", limits.wall_ms));
    const int64_t rss = resident_bytes_of(pid);
    if (rss - base > limits.resident_bytes)
      return stop(fmt::format("used more than {} MiB", limits.resident_bytes >> 20));
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace seqpar
