// seqpar launch: torchrun-style launcher. Spawns --nproc-per-node copies of a command with the
// torchrun variables set, prefixes every line they print with "[rank R] ", forwards SIGINT /
// SIGTERM / SIGHUP to them, and ends the whole job when one rank fails or --timeout passes.
//
// Process hygiene, so that no rank outlives the job:
// - each rank runs in its own process group, and every signal goes to the group, so a rank's own
//   children (a shell's `sleep`, a data loader) get it too;
// - the group's leader is a small guard process (a fork of the launcher, no exec) whose only
//   child is the rank: it passes the rank's exit status on as its own, and when the launcher dies
//   (even by SIGKILL: its end of a pipe the guards read closes) it kills the whole group, so
//   neither the rank nor the rank's children outlive the launcher; the rank has
//   PR_SET_PDEATHSIG = SIGKILL against its guard;
// - when a guard exits, whatever it left in its group is killed before it is reaped: the exit is
//   seen with waitid(WNOWAIT), so the group id cannot be reused while it is signalled.
// Signals are read through a signalfd together with the ranks' output pipes in one poll loop:
// the launcher is one thread and never blocks elsewhere.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"

extern char** environ;

namespace seqpar {

namespace {

using Clock = std::chrono::steady_clock;

struct LaunchArgs {
  int nproc_per_node = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double timeout_s = 0;  // 0: none
  double grace_s = 5;
  std::vector<std::string> command;
};

// One rank's output stream: a pipe, and the bytes of a line not finished yet.
struct Stream {
  int fd = -1;
  int out_fd = 1;  // where its lines go: the launcher's stdout or stderr
  std::string partial;
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;  // also its process group id
  bool running = false;
  Stream out, err;
};

// Writes all of s to fd; a closed reader (EPIPE: `seqpar launch ... | head`) drops the output.
void write_all(int fd, const std::string& s) {
  for (size_t done = 0; done < s.size();) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

void say(const std::string& message) { write_all(2, "seqpar launch: " + message + "\n"); }

std::string signal_text(int sig) {
  const char* name = sigabbrev_np(sig);
  return fmt::format("signal {} (SIG{})", sig, name ? name : "?");
}

// Line splitting: complete lines go out prefixed; a line longer than 64 KiB goes out in pieces so
// a rank printing without newlines cannot make the launcher hold unbounded memory.
void emit(const Rank& r, Stream& s, const char* data, size_t n, bool eof) {
  s.partial.append(data, n);
  const std::string prefix = fmt::format("[rank {}] ", r.rank);
  std::string out;
  size_t start = 0;
  for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1)
    out += prefix + s.partial.substr(start, nl - start + 1);
  s.partial.erase(0, start);
  if ((eof && !s.partial.empty()) || s.partial.size() > (64u << 10)) {
    out += prefix + s.partial + "\n";
    s.partial.clear();
  }
  if (!out.empty()) write_all(s.out_fd, out);
}

// True when fd is at EOF (or broken) after reading what was there.
bool drain(Rank& r, Stream& s) {
  char buf[65536];
  ssize_t n = ::read(s.fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return false;
  if (n <= 0) {
    emit(r, s, nullptr, 0, true);
    ::close(s.fd);
    s.fd = -1;
    return true;
  }
  emit(r, s, buf, static_cast<size_t>(n), false);
  return false;
}

// The child's environment: ours, with the torchrun variables of this rank replacing any there.
std::vector<std::string> rank_env(const LaunchArgs& a, int local_rank) {
  const int world = a.nnodes * a.nproc_per_node;
  const std::vector<std::pair<std::string, std::string>> set = {
      {"RANK", std::to_string(a.node_rank * a.nproc_per_node + local_rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_WORLD_SIZE", std::to_string(a.nproc_per_node)},
      {"GROUP_RANK", std::to_string(a.node_rank)},
      {"MASTER_ADDR", a.master_addr},
      {"MASTER_PORT", std::to_string(a.master_port)},
  };
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    bool replaced = name == "TORCHELASTIC_USE_AGENT_STORE";  // no torch agent store here
    for (const auto& [k, v] : set) replaced |= name == k;
    if (!replaced) env.push_back(kv);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

// Fails early, with the flag's name, when the port is taken on this host (node 0 runs rank 0,
// which will host the store there). The probe closes at once; a job that grabs the port in between
// still gets the store's own error.
void check_port_free(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  const int e = errno;
  ::close(fd);
  SEQPAR_INPUT_CHECK(rc == 0 || e != EADDRINUSE,
                     "--master-port={} is already in use on this host (another job?): rank 0 hosts the rendezvous "
                     "store there; pick a free port",
                     port);
}

// The most ranks one launcher starts (8 GPUs a node is the norm; CPU jobs may take more) and the
// most nodes: beyond them a mistyped count would fork until the machine's process or descriptor
// table runs out, taking other jobs with it.
constexpr int kMaxNprocPerNode = 1024;
constexpr int kMaxNnodes = 65536;

// The launcher holds two pipes per rank (four descriptors while one is being spawned): the
// process's descriptor limit must leave room for all of them, and its process limit for the ranks.
void check_machine_limits(const LaunchArgs& a) {
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    const rlim_t needed = 2 * static_cast<rlim_t>(a.nproc_per_node) + 64;
    SEQPAR_INPUT_CHECK(needed <= files.rlim_cur,
                       "--nproc-per-node={} needs about {} open files (two pipes per rank), but this process may "
                       "open {} (ulimit -n): raise the limit or start fewer ranks",
                       a.nproc_per_node, needed, files.rlim_cur);
  }
  rlimit procs{};
  if (::getrlimit(RLIMIT_NPROC, &procs) == 0 && procs.rlim_cur != RLIM_INFINITY)
    SEQPAR_INPUT_CHECK(static_cast<rlim_t>(a.nproc_per_node) < procs.rlim_cur,
                       "--nproc-per-node={} is more processes than this user may run ({}, ulimit -u)",
                       a.nproc_per_node, procs.rlim_cur);
}

void validate(const LaunchArgs& a) {
  SEQPAR_INPUT_CHECK(a.nproc_per_node >= 1 && a.nproc_per_node <= kMaxNprocPerNode,
                     "--nproc-per-node={} must be in [1, {}]", a.nproc_per_node, kMaxNprocPerNode);
  SEQPAR_INPUT_CHECK(a.nnodes >= 1 && a.nnodes <= kMaxNnodes, "--nnodes={} must be in [1, {}]", a.nnodes,
                     kMaxNnodes);
  check_machine_limits(a);
  SEQPAR_INPUT_CHECK(a.node_rank >= 0 && a.node_rank < a.nnodes, "--node-rank={} must be in [0, --nnodes={})",
                     a.node_rank, a.nnodes);
  SEQPAR_INPUT_CHECK(a.master_port >= 1 && a.master_port <= 65535, "--master-port={} must be in [1, 65535]",
                     a.master_port);
  SEQPAR_INPUT_CHECK(!a.master_addr.empty(), "--master-addr is empty");
  const bool loopback = a.master_addr == "localhost" || a.master_addr.rfind("127.", 0) == 0 || a.master_addr == "::1";
  SEQPAR_INPUT_CHECK(a.nnodes == 1 || !loopback,
                     "--master-addr={} with --nnodes={}: the other nodes cannot reach a loopback address; pass the "
                     "hostname or IP of node 0",
                     a.master_addr, a.nnodes);
  SEQPAR_INPUT_CHECK(a.timeout_s >= 0, "--timeout={} must be >= 0 (0: no limit)", a.timeout_s);
  SEQPAR_INPUT_CHECK(a.grace_s >= 0, "--kill-grace={} must be >= 0", a.grace_s);
  SEQPAR_INPUT_CHECK(!a.command.empty(), "no command to launch: give it after `--`");
}

// The guard of one rank (see the header): waits for the rank, or for the launcher's death (EOF on
// `life`, whose write end only the launcher holds), polling both. Async-signal-safe calls only
// (it runs between fork and _exit). The launcher's signals to the group stay pending here (they
// are blocked, the mask inherited), so only the rank acts on them.
[[noreturn]] void guard_rank(pid_t rank, int life) {
  for (;;) {
    pollfd p{life, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0 && p.revents != 0) {
      ::kill(-::getpid(), SIGKILL);  // the launcher is gone: the rank, its children and this guard
      ::_exit(128 + SIGKILL);
    }
    int status = 0;
    if (::waitpid(rank, &status, WNOHANG) != rank) continue;
    if (WIFEXITED(status)) ::_exit(WEXITSTATUS(status));
    // Die of the rank's signal, so the launcher reports it as the rank's.
    const int sig = WTERMSIG(status);
    ::signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    ::sigprocmask(SIG_UNBLOCK, &one, nullptr);
    ::kill(::getpid(), sig);
    ::_exit(128 + sig);
  }
}

// Forks the guard of rank `local_rank` (its own process group), which forks the rank: the rank
// asks to die with its guard, restores the signal state the launcher changed, wires its output to
// the pipes and execs. `life`: the pipe whose write end only the launcher keeps.
Rank spawn(const LaunchArgs& a, int local_rank, const sigset_t& blocked, const int life[2]) {
  Rank r;
  r.rank = a.node_rank * a.nproc_per_node + local_rank;
  int out[2], err[2];
  // Failures here are the machine's limits (the ranks already started are stopped by the caller).
  if (::pipe2(out, O_CLOEXEC) != 0)
    throw InputError(fmt::format("seqpar launch: cannot start rank {}: pipe() failed: {} (--nproc-per-node={})",
                                 r.rank, std::strerror(errno), a.nproc_per_node));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(out[0]);
    ::close(out[1]);
    throw InputError(fmt::format("seqpar launch: cannot start rank {}: pipe() failed: {} (--nproc-per-node={})",
                                 r.rank, std::strerror(e), a.nproc_per_node));
  }
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> env = rank_env(a, local_rank);
  std::vector<char*> envp, argv;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> cmd = a.command;
  for (auto& c : cmd) argv.push_back(c.data());
  argv.push_back(nullptr);
  const std::string exec_failed = fmt::format("seqpar launch: rank {}: cannot run '{}': ", r.rank, a.command[0]);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    throw InputError(fmt::format("seqpar launch: cannot start rank {}: fork() failed: {} (--nproc-per-node={})",
                                 r.rank, std::strerror(e), a.nproc_per_node));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::close(life[1]);                                   // the launcher's alone: its death is this pipe's EOF
    if (::getppid() != parent) ::_exit(128 + SIGKILL);  // the launcher died before the fork returned
    ::close(out[0]);
    ::close(err[0]);
    const pid_t guard = ::getpid();
    const pid_t rank = ::fork();
    if (rank < 0) ::_exit(127);
    if (rank > 0) {
      ::close(out[1]);
      ::close(err[1]);
      guard_rank(rank, life[0]);
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != guard) ::_exit(128 + SIGKILL);  // the guard died before prctl
    ::signal(SIGPIPE, SIG_DFL);
    ::sigprocmask(SIG_UNBLOCK, &blocked, nullptr);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int e = errno;
    (void)!::write(2, exec_failed.data(), exec_failed.size());
    const char* why = std::strerror(e);
    (void)!::write(2, why, std::strlen(why));
    (void)!::write(2, "\n", 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: no window where a signal to the group misses it
  ::close(out[1]);
  ::close(err[1]);
  r.pid = pid;
  r.running = true;
  r.out = {out[0], 1, {}};
  r.err = {err[0], 2, {}};
  return r;
}

class Launcher {
 public:
  explicit Launcher(const LaunchArgs& a) : a_(a) {}

  int run() {
    validate(a_);
    if (a_.node_rank == 0) check_port_free(a_.master_port);
    // Signals arrive through a signalfd; they must be blocked before anything else happens.
    sigset_t blocked;
    sigemptyset(&blocked);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&blocked, s);
    SEQPAR_CHECK(::sigprocmask(SIG_BLOCK, &blocked, &saved_mask_) == 0, "sigprocmask failed: {}", std::strerror(errno));
    sigfd_ = ::signalfd(-1, &blocked, SFD_CLOEXEC | SFD_NONBLOCK);
    SEQPAR_CHECK(sigfd_ >= 0, "signalfd failed: {}", std::strerror(errno));
    ::signal(SIGPIPE, SIG_IGN);

    start_ = Clock::now();
    try {
      SEQPAR_CHECK(::pipe2(life_, O_CLOEXEC) == 0, "pipe() failed: {}", std::strerror(errno));
      for (int i = 0; i < a_.nproc_per_node; ++i) ranks_.push_back(spawn(a_, i, blocked, life_));
    } catch (...) {
      begin_shutdown(SIGKILL);
      loop();
      throw;
    }
    loop();
    ::close(life_[0]);
    ::close(life_[1]);
    ::close(sigfd_);
    ::sigprocmask(SIG_SETMASK, &saved_mask_, nullptr);
    return exit_code_;
  }

 private:
  void loop() {
    for (;;) {
      bool any_running = false, any_open = false;
      for (const Rank& r : ranks_) {
        any_running |= r.running;
        any_open |= r.out.fd >= 0 || r.err.fd >= 0;
      }
      if (!any_running) {
        // Every rank is reaped; output still buffered in the pipes is read below. A pipe kept open
        // by a process that escaped its group (setsid) is abandoned after a second.
        if (!any_open) return;
        if (!drain_deadline_) drain_deadline_ = Clock::now() + std::chrono::seconds(1);
        if (Clock::now() >= *drain_deadline_) {
          for (Rank& r : ranks_)
            for (Stream* s : {&r.out, &r.err})
              if (s->fd >= 0) {
                emit(r, *s, nullptr, 0, true);
                ::close(s->fd);
                s->fd = -1;
              }
          return;
        }
      }
      std::vector<pollfd> fds = {{sigfd_, POLLIN, 0}};
      std::vector<std::pair<Rank*, Stream*>> owners = {{nullptr, nullptr}};
      for (Rank& r : ranks_)
        for (Stream* s : {&r.out, &r.err})
          if (s->fd >= 0) {
            fds.push_back({s->fd, POLLIN, 0});
            owners.push_back({&r, s});
          }
      ::poll(fds.data(), fds.size(), 50);
      for (size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents) drain(*owners[i].first, *owners[i].second);
      if (fds[0].revents & POLLIN) read_signals();
      reap();
      check_clocks();
    }
  }

  void read_signals() {
    signalfd_siginfo info;
    while (::read(sigfd_, &info, sizeof(info)) == sizeof(info)) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) continue;  // reap() runs after every poll
      if (shutting_down_ && interrupted_) {
        say(fmt::format("received {} again: killing the ranks (SIGKILL)", signal_text(sig)));
        signal_all(SIGKILL);
        continue;
      }
      say(fmt::format("received {}: forwarding it to the ranks", signal_text(sig)));
      interrupted_ = true;
      if (exit_code_ == 0) exit_code_ = 128 + sig;
      begin_shutdown(sig);
    }
  }

  // Sees every exited rank, kills what it left in its group, then reaps it.
  void reap() {
    for (;;) {
      siginfo_t info{};
      if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
      const pid_t pid = info.si_pid;
      ::kill(-pid, SIGKILL);  // leftovers of the rank's group; the zombie leader keeps the id ours
      int status = 0;
      ::waitpid(pid, &status, 0);
      Rank* r = nullptr;
      for (Rank& x : ranks_)
        if (x.pid == pid) r = &x;
      if (!r) continue;
      r->running = false;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      const bool signalled = WIFSIGNALED(status);
      const int code = signalled ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
      const std::string what = signalled ? fmt::format("rank {} killed by {}", r->rank, signal_text(WTERMSIG(status)))
                                         : fmt::format("rank {} exited with code {}", r->rank, code);
      if (shutting_down_) {
        say(what + " (stopped by the launcher)");
        continue;
      }
      say(what);
      exit_code_ = code;
      bool others = false;
      for (const Rank& x : ranks_) others |= x.running;
      if (others) say(fmt::format("terminating the other ranks (SIGTERM, then SIGKILL after {} s)", a_.grace_s));
      begin_shutdown(SIGTERM);
    }
  }

  void check_clocks() {
    const auto now = Clock::now();
    if (!shutting_down_ && a_.timeout_s > 0 && now - start_ >= std::chrono::duration<double>(a_.timeout_s)) {
      say(fmt::format("the job ran longer than --timeout={} s: terminating the ranks (SIGTERM, then SIGKILL after {} s)",
                      a_.timeout_s, a_.grace_s));
      exit_code_ = 124;
      begin_shutdown(SIGTERM);
    }
    if (shutting_down_ && !killed_ && now >= kill_at_) {
      std::vector<std::string> left;
      for (const Rank& r : ranks_)
        if (r.running) left.push_back(std::to_string(r.rank));
      if (!left.empty())
        say(fmt::format("rank(s) {} still running {} s after the signal: SIGKILL", fmt::join(left, ", "), a_.grace_s));
      signal_all(SIGKILL);
      killed_ = true;
    }
  }

  // Sends `sig` to every running rank's group; SIGKILL follows after the grace period.
  void begin_shutdown(int sig) {
    if (!shutting_down_) {
      shutting_down_ = true;
      kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a_.grace_s));
    }
    signal_all(sig);
    if (sig == SIGKILL) killed_ = true;
  }

  void signal_all(int sig) {
    for (const Rank& r : ranks_)
      if (r.running) ::kill(-r.pid, sig);
  }

  const LaunchArgs& a_;
  std::vector<Rank> ranks_;
  int sigfd_ = -1;
  int life_[2] = {-1, -1};  // the guards read [0]; [1] is the launcher's alone (spawn)
  sigset_t saved_mask_{};
  Clock::time_point start_, kill_at_;
  std::optional<Clock::time_point> drain_deadline_;
  bool shutting_down_ = false, interrupted_ = false, killed_ = false;
  int exit_code_ = 0;
};

}  // namespace

void add_launch_command(CLI::App& app, int& rc) {
  auto args = std::make_shared<LaunchArgs>();
  CLI::App* c = app.add_subcommand(
      "launch",
      "Run a command as the ranks of a job (torchrun-style): `seqpar launch --nproc-per-node 8 -- seqpar train ...`. "
      "Sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; prefixes output with "
      "\"[rank R] \"; ends the job when a rank fails");
  c->add_option("--nproc-per-node", args->nproc_per_node, "ranks on this node (one per GPU)")->required();
  c->add_option("--nnodes", args->nnodes, "nodes in the job")->capture_default_str();
  c->add_option("--node-rank", args->node_rank, "this node's index in [0, nnodes); RANK = node_rank * nproc + i")
      ->capture_default_str();
  c->add_option("--master-addr", args->master_addr, "host of rank 0, reachable from every node")
      ->capture_default_str();
  c->add_option("--master-port", args->master_port, "port of rank 0's rendezvous store")->capture_default_str();
  c->add_option("--timeout", args->timeout_s, "end the job after this many seconds (exit code 124); 0: no limit")
      ->capture_default_str();
  c->add_option("--kill-grace", args->grace_s, "seconds between SIGTERM and SIGKILL when ending the ranks")
      ->capture_default_str();
  c->add_option("command", args->command, "the command each rank runs, after `--`")->required();
  c->callback([args, &rc] { rc = Launcher(*args).run(); });
}

}  // namespace seqpar
