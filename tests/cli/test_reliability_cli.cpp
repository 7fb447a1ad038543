// The run's promises against the real binary (docs/RELIABILITY.md, "Runs"): SIGTERM finishes the
// step, saves and exits 0, and the resumed run is bit-exact; a second signal exits at once; a
// second trainer on a locked save directory is refused naming the holder; a file-size limit, a
// full disk and a read-only directory give a clear error and leave the previous checkpoint
// intact; a SIGKILLed `seqpar launch` takes its ranks' children with it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "test_util.h"
#include "train/checkpoint.h"

namespace seqpar {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Starts `sh -c "exec <cmd>"` with its output into `log` (and, with fsize > 0, RLIMIT_FSIZE).
pid_t start(const std::string& cmd, const std::string& log, rlim_t fsize = 0) {
  return testing::start_command(cmd, log, fsize);
}
// The exit code (128 + signal when killed); -1 after timeout_s (the process is then killed).
int wait_exit(pid_t pid, double timeout_s = 120) { return testing::wait_exit(pid, timeout_s); }

int run(const std::string& cmd, const std::string& log, rlim_t fsize = 0) { return wait_exit(start(cmd, log, fsize)); }

int64_t line_count(const std::string& path) {
  std::ifstream in(path);
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

bool wait_for(const std::function<bool()>& ready, double timeout_s = 60) {
  const auto until = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (!ready()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// A process that is gone or a zombie.
bool dead(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = s.rfind(')');
  return close == std::string::npos || s.size() < close + 3 || s[close + 2] == 'Z';
}

// A small run of the built-in model on the CPU (two in-process ranks), with a schedule long enough
// to be stopped by a signal.
std::string train(const std::string& extra) {
  return testing::binary_path() +
         " train --seq-len 32 --micro-batch 2 --num-pairs 4 --num-queries 4 --sp 2 --eval-every 0 "
         "--stop-at-accuracy 0 --warmup-steps 2 --log-every 1 " +
         extra;
}

std::string tmp_dirs_in(const std::string& dir) {
  std::string found;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(".tmp_", 0) == 0) found += e.path().string() + " ";
  return found;
}

TEST(Signals, SigtermSavesAfterTheStepAndTheResumeIsBitExact) {
  const std::string d = testing::temp_dir();
  const std::string long_run = "--steps 1000000 --save-dir " + d + "/a --metrics-out " + d + "/a.jsonl";
  const pid_t pid = start(train(long_run), d + "/a.log");
  ASSERT_TRUE(wait_for([&] { return line_count(d + "/a.jsonl") >= 3; })) << bytes_of(d + "/a.log");
  // The save directory is locked while it runs: a second trainer is refused, naming the holder.
  EXPECT_EQ(run(train("--steps 2 --save-dir " + d + "/a"), d + "/second.log"), 1);
  const std::string second = bytes_of(d + "/second.log");
  EXPECT_NE(second.find("save_dir=" + d + "/a is in use by another trainer (pid " + std::to_string(pid) + " on host"),
            std::string::npos)
      << second;
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  EXPECT_EQ(wait_exit(pid), 0) << bytes_of(d + "/a.log");
  const std::string log = bytes_of(d + "/a.log");
  EXPECT_NE(log.find("received SIGTERM: finishing the current step"), std::string::npos) << log;
  EXPECT_NE(log.find("stopped by SIGTERM after step"), std::string::npos) << log;
  const std::optional<std::string> latest = latest_checkpoint(d + "/a");
  ASSERT_TRUE(latest.has_value()) << log;
  const int64_t k = load_checkpoint(*latest).state.step;
  EXPECT_GE(k, 3);
  EXPECT_LT(k, 1000000);

  // Resumed to k + 2 == run straight to k + 2: byte-identical weights and optimizer state.
  const std::string to = " --stop-at-step " + std::to_string(k + 2);
  ASSERT_EQ(run(train("--steps 1000000 --save-dir " + d + "/a --resume" + to), d + "/resume.log"), 0)
      << bytes_of(d + "/resume.log");
  ASSERT_EQ(run(train("--steps 1000000 --save-dir " + d + "/b" + to), d + "/b.log"), 0) << bytes_of(d + "/b.log");
  const std::string step = checkpoint_name(k + 2);
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_TRUE(bytes_of(d + "/a/" + step + "/" + f) == bytes_of(d + "/b/" + step + "/" + f)) << f << " differs";
}

TEST(Signals, ASecondSignalExitsAtOnce) {
  const std::string d = testing::temp_dir();
  // Steps of a larger model, so the second signal comes while the first one's step still runs.
  const std::string big = testing::binary_path() +
                          " train --seq-len 1024 --micro-batch 2 --num-pairs 4 --num-queries 4 --sp 2 --eval-every 0 "
                          "--stop-at-accuracy 0 --log-every 1 --hidden-size 256 --intermediate-size 1024 "
                          "--num-layers 2 --steps 1000000 --save-dir " +
                          d + "/a --metrics-out " + d + "/a.jsonl";
  const pid_t pid = start(big, d + "/a.log");
  ASSERT_TRUE(wait_for([&] { return line_count(d + "/a.jsonl") >= 1; })) << bytes_of(d + "/a.log");
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  ASSERT_TRUE(wait_for([&] { return bytes_of(d + "/a.log").find("received SIGINT") != std::string::npos; }));
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  const int rc = wait_exit(pid);
  const std::string log = bytes_of(d + "/a.log");
  if (rc == 0 && log.find("stopped by SIGINT") != std::string::npos)
    GTEST_SKIP() << "the step and the save ended before the second signal came: nothing to check";
  EXPECT_EQ(rc, 128 + SIGINT) << log;
  EXPECT_NE(log.find("received SIGINT again: exiting now, without saving"), std::string::npos) << log;
}

// A file-size limit (RLIMIT_FSIZE): without the fix the kernel's SIGXFSZ killed the trainer
// silently (exit 153); now the write fails with EFBIG, named, and nothing of the save is left.
TEST(Disks, FileSizeLimitGivesAClearErrorAndKeepsThePreviousCheckpoint) {
  const std::string d = testing::temp_dir();
  ASSERT_EQ(run(train("--steps 2 --save-dir " + d + "/ckpt"), d + "/first.log"), 0) << bytes_of(d + "/first.log");
  const std::string model = bytes_of(d + "/ckpt/step_000002/model.safetensors");
  // model.safetensors (~360 kB) fits, optimizer.safetensors (~730 kB) does not.
  const int rc = run(train("--steps 4 --save-dir " + d + "/ckpt --resume"), d + "/limited.log", 500000);
  const std::string log = bytes_of(d + "/limited.log");
  EXPECT_EQ(rc, 1) << log;
  EXPECT_NE(log.find("saving the checkpoint of step 4 failed"), std::string::npos) << log;
  EXPECT_NE(log.find("File too large"), std::string::npos) << log;
  EXPECT_NE(log.find("the previous checkpoint (" + d + "/ckpt/step_000002) is intact"), std::string::npos) << log;
  EXPECT_EQ(tmp_dirs_in(d + "/ckpt"), "");
  EXPECT_EQ(latest_checkpoint(d + "/ckpt"), d + "/ckpt/step_000002");
  EXPECT_EQ(bytes_of(d + "/ckpt/step_000002/model.safetensors"), model);
  EXPECT_NO_THROW(load_checkpoint(d + "/ckpt/step_000002"));
}

// A full disk and a read-only directory, on a tiny tmpfs (needs the right to mount: root in a
// container that allows it; skipped, saying so, elsewhere).
TEST(Disks, FullDiskAndReadOnlyDirectoryKeepThePreviousCheckpoint) {
  const std::string d = testing::temp_dir();
  const std::string mnt = d + "/mnt";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1600k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "): full-disk test not run";
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const std::string ckpt = mnt + "/ckpt";
  // One checkpoint (~1.1 MB) fits; the second does not.
  ASSERT_EQ(run(train("--steps 2 --save-dir " + ckpt), d + "/first.log"), 0) << bytes_of(d + "/first.log");
  const std::string model = bytes_of(ckpt + "/step_000002/model.safetensors");
  int rc = run(train("--steps 4 --save-dir " + ckpt + " --resume"), d + "/full.log");
  std::string log = bytes_of(d + "/full.log");
  EXPECT_EQ(rc, 1) << log;
  EXPECT_NE(log.find("saving the checkpoint of step 4 failed"), std::string::npos) << log;
  EXPECT_NE(log.find("No space left on device"), std::string::npos) << log;
  EXPECT_EQ(tmp_dirs_in(ckpt), "");
  EXPECT_EQ(latest_checkpoint(ckpt), ckpt + "/step_000002");
  EXPECT_EQ(bytes_of(ckpt + "/step_000002/model.safetensors"), model);
  EXPECT_NO_THROW(load_checkpoint(ckpt + "/step_000002"));

  // Read-only: refused before any step (the lock file cannot be opened for writing).
  ASSERT_EQ(::mount("tmpfs", mnt.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, "size=1600k"), 0) << std::strerror(errno);
  rc = run(train("--steps 4 --save-dir " + ckpt + " --resume"), d + "/ro.log");
  log = bytes_of(d + "/ro.log");
  EXPECT_EQ(rc, 1) << log;
  EXPECT_NE(log.find("save_dir=" + ckpt + ": cannot open its lock file"), std::string::npos) << log;
  EXPECT_NE(log.find("Read-only file system"), std::string::npos) << log;
  EXPECT_EQ(log.find("step     3"), std::string::npos) << log;
  EXPECT_NO_THROW(load_checkpoint(ckpt + "/step_000002"));
}

// prepare-data killed mid-run left OUTPUT.tmp.<pid>.<n> behind forever: the next start removes
// the temporaries whose process is gone, and keeps a live one's.
TEST(Disks, PrepareDataRemovesStaleTemporariesOfKilledRuns) {
  const std::string d = testing::temp_dir();
  std::ofstream(d + "/a.jsonl") << "{\"text\": \"hello there\"}\n";
  const std::string stale = d + "/t.bin.tmp.4194305.0";  // above Linux's largest pid: no such process
  const std::string live = d + "/t.bin.tmp." + std::to_string(::getpid()) + ".7";
  std::ofstream(stale) << std::string(4096, 'x');
  std::ofstream(live) << "x";
  const int rc = run(testing::binary_path() + " prepare-data --tokenizer " +
                         testing::source_path("tests/fixtures/tokenizer/llama3/tokenizer.json") + " --input " + d +
                         "/a.jsonl --output " + d + "/t.bin",
                     d + "/prep.log");
  EXPECT_EQ(rc, 0) << bytes_of(d + "/prep.log");
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_NE(bytes_of(d + "/prep.log").find("removed " + stale + ", left by a run that did not finish"),
            std::string::npos);
  EXPECT_TRUE(fs::exists(d + "/t.bin"));
}

// seqpar launch SIGKILLed: its ranks die, and so do the ranks' own children.
TEST(Launch, KilledLauncherTakesTheRanksChildrenWithIt) {
  const std::string d = testing::temp_dir();
  const pid_t launcher = start(testing::binary_path() + " launch --nproc-per-node 2 -- sh -c 'sleep 300 & echo $! > " +
                                   d + "/child.$LOCAL_RANK; echo $$ > " + d + "/rank.$LOCAL_RANK; wait'",
                               d + "/launch.log");
  auto pid_in = [&](const std::string& f) {
    std::ifstream in(d + "/" + f);
    pid_t p = 0;
    in >> p;
    return p;
  };
  ASSERT_TRUE(wait_for([&] {
    for (const char* f : {"child.0", "child.1", "rank.0", "rank.1"})
      if (pid_in(f) <= 0) return false;
    return true;
  })) << bytes_of(d + "/launch.log");
  ::kill(launcher, SIGKILL);
  EXPECT_EQ(wait_exit(launcher), 128 + SIGKILL);
  for (const char* f : {"child.0", "child.1", "rank.0", "rank.1"}) {
    const pid_t p = pid_in(f);
    EXPECT_TRUE(wait_for([&] { return dead(p); }, 10)) << f << " (pid " << p << ") outlived the launcher";
    if (!dead(p)) ::kill(p, SIGKILL);
  }
}

}  // namespace
}  // namespace seqpar
