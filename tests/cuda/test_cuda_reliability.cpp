// The run's guards across processes (docs/RELIABILITY.md, "Runs"), two ranks over NCCL under
// `seqpar launch` (needs 2 GPUs): SIGTERM to the launcher reaches every rank, which agree on the
// step to stop at, save once and exit 0, and the resumed run continues as the uninterrupted one;
// a diverging run stops every rank at the same step (no rank left waiting in a collective).
#include <arpa/inet.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "test_util.h"
#include "train/checkpoint.h"

namespace seqpar {
namespace {

using testing::free_port;

pid_t start(const std::string& cmd, const std::string& log) { return testing::start_command(cmd, log); }
int wait_exit(pid_t pid, double timeout_s = 300) { return testing::wait_exit(pid, timeout_s); }

using Clock = std::chrono::steady_clock;

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::map<int64_t, double> losses(const std::string& metrics) {
  std::map<int64_t, double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss") && j["loss"].is_number()) out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

bool two_gpus() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices >= 2;
}

// Two ranks (dp_replicate 2) over NCCL, one per GPU, under seqpar launch.
std::string launched_train(const std::string& args) {
  return fmt::format(
      "env NCCL_NVLS_ENABLE=0 {} launch --nproc-per-node 2 --master-port {} --timeout 300 -- {} train --head-dim 64 "
      "--device cuda --transport nccl --sp 1 --dp-replicate 2 --seq-len 64 --micro-batch 2 --num-pairs 4 "
      "--num-queries 4 --eval-every 0 --stop-at-accuracy 0 --warmup-steps 2 --log-every 1 {}",
      testing::binary_path(), free_port(), testing::binary_path(), args);
}

TEST(CudaReliability, SigtermToTheLauncherStopsEveryRankAtOneStepWithACheckpoint) {
  if (!two_gpus()) GTEST_SKIP() << "needs 2 GPUs (one NCCL rank per GPU)";
  const std::string d = testing::temp_dir();
  const pid_t pid =
      start(launched_train("--steps 1000000 --save-dir " + d + "/a --metrics-out " + d + "/a.jsonl"), d + "/a.log");
  const auto until = Clock::now() + std::chrono::seconds(240);
  while (losses(d + "/a.jsonl").size() < 3 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GE(losses(d + "/a.jsonl").size(), 3u) << text_of(d + "/a.log");
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  EXPECT_EQ(wait_exit(pid), 0) << text_of(d + "/a.log");
  const std::string log = text_of(d + "/a.log");
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(log.find(fmt::format("[rank {}] seqpar: received SIGTERM", r)), std::string::npos) << log;
  EXPECT_NE(log.find("stopped by SIGTERM after step"), std::string::npos) << log;
  const std::optional<std::string> latest = latest_checkpoint(d + "/a");
  ASSERT_TRUE(latest.has_value()) << log;
  const int64_t k = load_checkpoint(*latest).state.step;

  // Resumed to k + 2 against straight to k + 2 (NCCL's sums in a fixed order: within 1e-3 as
  // NcclTransportUnderSeqparLaunchMatchesLocal).
  const std::string to = fmt::format(" --stop-at-step {}", k + 2);
  ASSERT_EQ(wait_exit(start(
                launched_train("--steps 1000000 --resume --save-dir " + d + "/a --metrics-out " + d + "/r.jsonl" + to),
                d + "/r.log")),
            0)
      << text_of(d + "/r.log");
  ASSERT_EQ(
      wait_exit(start(launched_train("--steps 1000000 --save-dir " + d + "/b --metrics-out " + d + "/b.jsonl" + to),
                      d + "/b.log")),
      0)
      << text_of(d + "/b.log");
  const auto resumed = losses(d + "/r.jsonl"), straight = losses(d + "/b.jsonl");
  for (int64_t s = k + 1; s <= k + 2; ++s) {
    ASSERT_TRUE(resumed.count(s) && straight.count(s)) << s;
    EXPECT_NEAR(resumed.at(s), straight.at(s), 1e-3 * std::abs(straight.at(s))) << "step " << s;
  }
}

TEST(CudaReliability, ADivergingRunStopsEveryRankAtTheSameStep) {
  if (!two_gpus()) GTEST_SKIP() << "needs 2 GPUs (one NCCL rank per GPU)";
  const std::string d = testing::temp_dir();
  const int rc = wait_exit(
      start(launched_train("--steps 20 --lr 1e30 --clip 0 --save-dir " + d + "/a --save-every 1"), d + "/a.log"), 240);
  const std::string log = text_of(d + "/a.log");
  EXPECT_EQ(rc, 1) << log;  // the ranks' error exit, not the launcher's timeout (124) or a kill
  EXPECT_NE(log.find("the loss or the gradient norm is not finite"), std::string::npos) << log;
  const std::optional<std::string> latest = latest_checkpoint(d + "/a");
  ASSERT_TRUE(latest.has_value()) << log;
  const Checkpoint ck = load_checkpoint(*latest);  // the last good one loads
  EXPECT_NE(log.find(fmt::format("step {}: the loss or the gradient norm is not finite", ck.state.step + 1)),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace seqpar
