// `seqpar launch` with small shell commands as ranks (CPU only, no store involved): the torchrun
// variables, the "[rank R] " prefixes, exit codes, a failing rank ending its siblings, signals
// forwarded, --timeout, SIGKILL after the grace period, and no process left behind (checked on
// the pids the ranks record, and on their background children).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

extern char** environ;

namespace {

using seqpar::testing::read_file;

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `seqpar launch <flags> -- sh -c <script>`; stdout and stderr together unless split.
int launch(const std::string& flags, const std::string& script, std::string* out, bool stdout_only = false) {
  std::string cmd = fmt::format("{} launch {} -- sh -c {}", seqpar::testing::binary_path(), flags, quote(script));
  if (stdout_only) cmd = "(" + cmd + " 2>/dev/null)";
  return seqpar::testing::run_command(cmd, out);
}

// Alive and not a zombie (a killed rank whose parent is gone may linger as one, unreaped by a
// container's init: it runs nothing).
bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::string stat = read_file(fmt::format("/proc/{}/stat", pid));
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// Pids the ranks wrote as files `prefix<rank>` in dir.
std::vector<pid_t> recorded_pids(const std::string& dir, const std::string& prefix, int n) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::string s = read_file(fmt::format("{}/{}{}", dir, prefix, r));
    if (!s.empty()) pids.push_back(std::stoi(s));
  }
  return pids;
}

// None of pids alive within `within` (the kernel may take a moment to deliver a death signal).
bool all_gone(const std::vector<pid_t>& pids, std::chrono::milliseconds within = 2000ms) {
  const auto deadline = Clock::now() + within;
  for (;;) {
    bool any = false;
    for (pid_t p : pids) any |= alive(p);
    if (!any) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

bool wait_for_text(const std::string& path, const std::vector<std::string>& needles, std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + within;
  for (;;) {
    std::string s = read_file(path);
    bool all = true;
    for (const auto& n : needles) all &= s.find(n) != std::string::npos;
    if (all) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

// The launcher as a child of this test (so it can be signalled), output to `log`.
pid_t spawn_launcher(const std::vector<std::string>& args, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<std::string> all = {seqpar::testing::binary_path(), "launch"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// Exit status of a spawned launcher, waiting at most `within` (-1 on timeout, then it is killed).
int wait_exit(pid_t pid, std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + within;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(10ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(Launch, SetsTheTorchrunVariablesAndPrefixesEveryLine) {
  std::string out;
  int rc = launch("--nproc-per-node 3 --master-port 29555",
                  "echo vars $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT; "
                  "echo to-stderr $RANK >&2; printf 'no newline %s' $RANK",
                  &out);
  EXPECT_EQ(rc, 0) << out;
  for (int r = 0; r < 3; ++r) {
    EXPECT_HAS(out, fmt::format("[rank {}] vars {} {} 3 3 127.0.0.1 29555\n", r, r, r));
    EXPECT_HAS(out, fmt::format("[rank {}] to-stderr {}\n", r, r));
    EXPECT_HAS(out, fmt::format("[rank {}] no newline {}\n", r, r));  // flushed at EOF, newline added
  }
  // stdout lines stay on stdout, stderr lines on stderr.
  rc = launch("--nproc-per-node 2", "echo out $RANK; echo err $RANK >&2", &out, /*stdout_only=*/true);
  EXPECT_EQ(rc, 0);
  EXPECT_HAS(out, "[rank 1] out 1");
  EXPECT_EQ(out.find("err"), std::string::npos) << out;
}

TEST(Launch, MultiNodeNumbering) {
  std::string out;
  int rc = launch("--nnodes 3 --node-rank 2 --nproc-per-node 2 --master-addr 10.1.2.3 --master-port 1234",
                  "echo vars $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT",
                  &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_HAS(out, "[rank 4] vars 4 0 6 2 2 10.1.2.3 1234");
  EXPECT_HAS(out, "[rank 5] vars 5 1 6 2 2 10.1.2.3 1234");
}

TEST(Launch, ReplacesInheritedLauncherVariables) {
  std::string out;
  // As if run inside another launcher's rank: the inherited values must not leak through.
  std::string cmd = fmt::format("RANK=7 WORLD_SIZE=9 TORCHELASTIC_USE_AGENT_STORE=True {} launch --nproc-per-node 1 -- "
                                "sh -c {}",
                                seqpar::testing::binary_path(),
                                quote("echo vars $RANK $WORLD_SIZE ${TORCHELASTIC_USE_AGENT_STORE:-unset}"));
  EXPECT_EQ(seqpar::testing::run_command(cmd, &out), 0) << out;
  EXPECT_HAS(out, "[rank 0] vars 0 1 unset");
}

TEST(Launch, ExitCodeOfTheFailingRankIsPropagated) {
  std::string out;
  int rc = launch("--nproc-per-node 3", "if [ $RANK = 1 ]; then exit 7; fi", &out);
  EXPECT_EQ(rc, 7) << out;
  EXPECT_HAS(out, "rank 1 exited with code 7");
  rc = launch("--nproc-per-node 1", "kill -SEGV $$", &out);
  EXPECT_EQ(rc, 128 + SIGSEGV) << out;
  EXPECT_HAS(out, "rank 0 killed by signal 11 (SIGSEGV)");
  rc = seqpar::testing::run_command(
      fmt::format("{} launch --nproc-per-node 2 -- /nonexistent/program", seqpar::testing::binary_path()), &out);
  EXPECT_EQ(rc, 127) << out;
  EXPECT_HAS(out, "cannot run '/nonexistent/program': No such file or directory");
}

TEST(Launch, AFailingRankEndsItsSiblingsPromptlyAndLeavesNoProcess) {
  const std::string dir = seqpar::testing::temp_dir();
  std::string out;
  const auto t0 = Clock::now();
  // Rank 1 fails after 0.3 s; ranks 0 and 2 sleep, each with a background child of its own.
  int rc = launch("--nproc-per-node 3",
                  fmt::format("echo $$ > {0}/pid$RANK; sleep 30 & echo $! > {0}/bg$RANK; "
                              "if [ $RANK = 1 ]; then sleep 0.3; exit 3; fi; wait",
                              dir),
                  &out);
  const auto took = Clock::now() - t0;
  EXPECT_EQ(rc, 3) << out;
  EXPECT_LT(took, 4000ms) << out;  // not the 30 s of the sleeps, nor the 5 s grace
  EXPECT_HAS(out, "rank 1 exited with code 3");
  EXPECT_HAS(out, "terminating the other ranks");
  auto pids = recorded_pids(dir, "pid", 3), bg = recorded_pids(dir, "bg", 3);
  ASSERT_EQ(pids.size(), 3u);
  ASSERT_EQ(bg.size(), 3u);
  pids.insert(pids.end(), bg.begin(), bg.end());
  EXPECT_TRUE(all_gone(pids, 200ms));
}

TEST(Launch, SigkillAfterTheGracePeriodForRanksIgnoringSigterm) {
  const std::string dir = seqpar::testing::temp_dir();
  std::string out;
  const auto t0 = Clock::now();
  int rc = launch("--nproc-per-node 2 --kill-grace 0.3",
                  fmt::format("trap '' TERM; echo $$ > {}/pid$RANK; if [ $RANK = 1 ]; then sleep 0.2; exit 5; fi; "
                              "while :; do sleep 0.05; done",
                              dir),
                  &out);
  EXPECT_EQ(rc, 5) << out;
  EXPECT_LT(Clock::now() - t0, 4000ms) << out;
  EXPECT_HAS(out, "rank(s) 0 still running 0.3 s after the signal: SIGKILL");
  EXPECT_HAS(out, "rank 0 killed by signal 9 (SIGKILL)");
  EXPECT_TRUE(all_gone(recorded_pids(dir, "pid", 2), 200ms));
}

TEST(Launch, TimeoutEndsTheJob) {
  std::string out;
  const auto t0 = Clock::now();
  int rc = launch("--nproc-per-node 2 --timeout 0.4", "exec sleep 30", &out);
  EXPECT_EQ(rc, 124) << out;
  EXPECT_LT(Clock::now() - t0, 4000ms);
  EXPECT_HAS(out, "the job ran longer than --timeout=0.4 s");
}

TEST(Launch, SignalsAreForwardedToTheRanks) {
  const std::string dir = seqpar::testing::temp_dir(), log = dir + "/log";
  pid_t pid = spawn_launcher({"--nproc-per-node", "2", "--", "sh", "-c",
                              "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.05; done"},
                             log);
  ASSERT_TRUE(wait_for_text(log, {"[rank 0] ready", "[rank 1] ready"}, 5000ms)) << read_file(log);
  ::kill(pid, SIGTERM);
  const int rc = wait_exit(pid, 5000ms);
  const std::string out = read_file(log);
  EXPECT_EQ(rc, 128 + SIGTERM) << out;
  EXPECT_HAS(out, "received signal 15 (SIGTERM): forwarding it to the ranks");
  EXPECT_HAS(out, "[rank 0] got TERM");
  EXPECT_HAS(out, "[rank 1] got TERM");
}

TEST(Launch, RanksDieWithAKilledLauncher) {
  const std::string dir = seqpar::testing::temp_dir(), log = dir + "/log";
  pid_t pid = spawn_launcher(
      {"--nproc-per-node", "2", "--", "sh", "-c", fmt::format("echo $$ > {}/pid$RANK; echo ready; exec sleep 30", dir)},
      log);
  ASSERT_TRUE(wait_for_text(log, {"[rank 0] ready", "[rank 1] ready"}, 5000ms)) << read_file(log);
  auto pids = recorded_pids(dir, "pid", 2);
  ASSERT_EQ(pids.size(), 2u);
  for (pid_t p : pids) EXPECT_TRUE(alive(p));
  ::kill(pid, SIGKILL);  // no chance to clean up: PR_SET_PDEATHSIG must do it
  wait_exit(pid, 2000ms);
  EXPECT_TRUE(all_gone(pids));
}

TEST(Launch, RefusesBadArguments) {
  std::string out;
  auto refuse = [&](const std::string& flags, const std::string& needle) {
    int rc = seqpar::testing::run_command(fmt::format("{} launch {}", seqpar::testing::binary_path(), flags), &out);
    EXPECT_NE(rc, 0) << flags;
    EXPECT_HAS(out, needle);
  };
  refuse("--nproc-per-node 0 -- true", "--nproc-per-node=0 must be in [1, 1024]");
  refuse("--nproc-per-node 2 --nnodes 2 --node-rank 2 --master-addr h -- true", "--node-rank=2 must be in [0, "
                                                                                "--nnodes=2)");
  refuse("--nproc-per-node 2 --nnodes 2 -- true", "--master-addr=127.0.0.1 with --nnodes=2");
  refuse("--nproc-per-node 2 --master-port 70000 -- true", "--master-port=70000 must be in [1, 65535]");
  refuse("--nproc-per-node 2 --timeout -1 -- true", "--timeout=-1 must be >= 0");
  refuse("--nproc-per-node 2", "command is required");
  // A port in use on node 0 is found before any rank starts.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  refuse(fmt::format("--nproc-per-node 1 --master-port {} -- echo started", port),
         fmt::format("--master-port={} is already in use on this host", port));
  EXPECT_EQ(out.find("started"), std::string::npos) << out;
  ::close(fd);
}

}  // namespace

// `seqpar train` across processes: on the CPU the ranks are threads of one process, so a launch
// of several processes is refused (each would otherwise run the whole job and write the same
// outputs), and --transport nccl needs a GPU; each message names the rule before any step.
TEST(Launch, TrainRefusesTransportsThatCannotWork) {
  const std::string bin = seqpar::testing::binary_path();
  std::string out;
  int rc = seqpar::testing::run_command(
      fmt::format("{} launch --nproc-per-node 2 --master-port {} -- {} train --steps 1 --sp 2", bin, 29500 + getpid() % 1000, bin),
      &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_HAS(out, "seqpar: error: torchrun: rank ");  // whichever rank fails first; the launcher ends the other
  EXPECT_HAS(out, "runs every rank as a thread of one process: start one process (without a launcher), or use "
                  "--device cuda");
  EXPECT_EQ(out.find("train: "), std::string::npos) << out;  // refused before any work
  EXPECT_EQ(out.find("step     1/"), std::string::npos) << out;
  rc = seqpar::testing::run_command(fmt::format("{} train --steps 1 --transport nccl", bin), &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_HAS(out, "--transport=nccl needs");
  rc = seqpar::testing::run_command(fmt::format("{} train --steps 1 --transport mpi", bin), &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_HAS(out, "--transport=mpi: expected auto, local or nccl");
}

namespace {

// --nproc-per-node is bounded by name and by this process's limits, before anything is forked
// (100000 used to fork until the pipe table ran out).
TEST(LaunchLimits, NprocPerNodeIsBoundedBeforeForking) {
  std::string out;
  EXPECT_NE(launch("--nproc-per-node 100000", "true", &out), 0);
  EXPECT_HAS(out, "--nproc-per-node=100000 must be in [1, 1024]");
  EXPECT_EQ(out.find("[rank"), std::string::npos) << out;  // no rank started
  EXPECT_NE(launch("--nproc-per-node 1 --nnodes 1000000", "true", &out), 0);
  EXPECT_HAS(out, "--nnodes=1000000 must be in [1, 65536]");
}

TEST(LaunchLimits, TheDescriptorLimitIsCheckedUpFront) {
  // 64 open files leave room for no more than a handful of ranks' pipes.
  std::string out;
  const std::string cmd = fmt::format("ulimit -n 64; {} launch --nproc-per-node 200 -- sh -c true",
                                      seqpar::testing::binary_path());
  EXPECT_NE(seqpar::testing::run_command("sh -c " + quote(cmd), &out), 0);
  EXPECT_HAS(out, "--nproc-per-node=200 needs about 464 open files (two pipes per rank), but this process may open 64");
}

}  // namespace
