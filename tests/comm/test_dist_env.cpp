// dist_env: the launcher conventions read from injected environments (never the real one),
// their precedence and their refusals; then real processes: `seqpar launch` runs this test binary
// as 3 ranks that meet through the TCP store (LaunchedRank below is what each rank runs).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include "comm/dist_env.h"
#include "comm/tcp_store.h"
#include "core/error.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::free_port;

using Env = std::map<std::string, std::string>;
using namespace std::chrono_literals;

DistEnv read(const Env& env) { return read_dist_env(map_env(env)); }

// The InputError message of read(env), or "<no error>".
std::string refusal(const Env& env) {
  try {
    read(env);
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no error>";
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

const Env kTorchrun = {{"RANK", "5"},        {"LOCAL_RANK", "1"},         {"WORLD_SIZE", "8"},
                       {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "node01"}, {"MASTER_PORT", "29600"}};
const Env kSlurm = {{"SLURM_PROCID", "6"},         {"SLURM_LOCALID", "2"},  {"SLURM_NTASKS", "8"},
                    {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_NODEID", "1"}, {"SLURM_NODELIST", "gpu[007-008]"}};
const Env kMpi = {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                  {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}};

Env with(Env e, const Env& changes) {
  for (const auto& [k, v] : changes) e[k] = v;
  return e;
}
Env without(Env e, const std::string& key) {
  e.erase(key);
  return e;
}

TEST(DistEnv, NoConventionIsASingleProcess) {
  DistEnv e = read({});
  EXPECT_EQ(e.convention, DistConvention::kSingle);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.store_port, 29500);
  EXPECT_EQ(e.str(), "single process: rank 0 of 1 (local 0 of 1), store 127.0.0.1:29500");
}

TEST(DistEnv, Torchrun) {
  DistEnv e = read(kTorchrun);
  EXPECT_EQ(e.convention, DistConvention::kTorchrun);
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "node01");
  EXPECT_EQ(e.master_port, 29600);
  EXPECT_EQ(e.store_port, 29600);
  // Under torchrun's agent, torch's store holds MASTER_PORT: seqpar's takes the next one.
  EXPECT_EQ(read(with(kTorchrun, {{"TORCHELASTIC_USE_AGENT_STORE", "True"}})).store_port, 29601);
  EXPECT_EQ(read(with(kTorchrun, {{"TORCHELASTIC_USE_AGENT_STORE", "False"}})).store_port, 29600);
  EXPECT_EQ(read(with(kTorchrun, {{"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"SEQPAR_STORE_PORT", "31000"}}))
                .store_port,
            31000);
  // A world of one needs no master.
  DistEnv one = read({{"RANK", "0"}, {"LOCAL_RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_WORLD_SIZE", "1"}});
  EXPECT_EQ(one.master_addr, "127.0.0.1");
  EXPECT_EQ(one.master_port, 29500);
}

TEST(DistEnv, TorchrunRefusals) {
  EXPECT_HAS(refusal(without(kTorchrun, "LOCAL_RANK")), "torchrun environment: LOCAL_RANK is not set");
  EXPECT_HAS(refusal(without(kTorchrun, "RANK")), "RANK is not set");
  EXPECT_HAS(refusal(with(kTorchrun, {{"RANK", "8"}})), "RANK=8 must be < WORLD_SIZE=8");
  EXPECT_HAS(refusal(with(kTorchrun, {{"RANK", "abc"}})), "RANK='abc' is not a non-negative integer");
  EXPECT_HAS(refusal(with(kTorchrun, {{"RANK", "-1"}})), "RANK='-1' is not a non-negative integer");
  EXPECT_HAS(refusal(with(kTorchrun, {{"WORLD_SIZE", "0"}, {"RANK", "0"}})), "WORLD_SIZE=0 must be >= 1");
  EXPECT_HAS(refusal(with(kTorchrun, {{"LOCAL_RANK", "4"}})), "LOCAL_RANK=4 must be < LOCAL_WORLD_SIZE=4");
  EXPECT_HAS(refusal(with(kTorchrun, {{"LOCAL_WORLD_SIZE", "9"}})), "LOCAL_WORLD_SIZE=9 must be in [1, WORLD_SIZE=8]");
  EXPECT_HAS(refusal(with(kTorchrun, {{"RANK", "0"}})), "LOCAL_RANK=1 cannot exceed RANK=0");
  EXPECT_HAS(refusal(without(kTorchrun, "MASTER_ADDR")), "WORLD_SIZE=8 needs MASTER_ADDR and MASTER_PORT, but "
                                                          "MASTER_ADDR is not set");
  EXPECT_HAS(refusal(with(kTorchrun, {{"MASTER_PORT", "70000"}})), "MASTER_PORT=70000 must be a TCP port");
  EXPECT_HAS(refusal(with(kTorchrun, {{"SEQPAR_STORE_PORT", "x"}})), "SEQPAR_STORE_PORT='x'");
}

TEST(DistEnv, Slurm) {
  DistEnv e = read(kSlurm);
  EXPECT_EQ(e.convention, DistConvention::kSlurm);
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "gpu007");  // first host of the node list
  EXPECT_EQ(e.master_port, 29500);
  // MASTER_ADDR / MASTER_PORT from the batch script win; the step's node list beats the job's.
  EXPECT_EQ(read(with(kSlurm, {{"MASTER_ADDR", "10.0.0.9"}, {"MASTER_PORT", "12345"}})).master_addr, "10.0.0.9");
  EXPECT_EQ(read(with(kSlurm, {{"MASTER_PORT", "12345"}})).store_port, 12345);
  EXPECT_EQ(read(with(kSlurm, {{"SLURM_STEP_NODELIST", "gpu[008]"}})).master_addr, "gpu008");
  // SLURM_NTASKS_PER_NODE is preferred; uneven nodes are read per SLURM_NODEID.
  EXPECT_EQ(read(with(kSlurm, {{"SLURM_NTASKS_PER_NODE", "4"}, {"SLURM_TASKS_PER_NODE", "garbage"}})).local_world_size,
            4);
  DistEnv uneven = read(with(kSlurm, {{"SLURM_NTASKS", "7"}, {"SLURM_TASKS_PER_NODE", "4,3"}}));
  EXPECT_EQ(uneven.local_world_size, 3);
  // One node, no node list: the loopback.
  DistEnv one = read({{"SLURM_PROCID", "1"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS", "2"},
                      {"SLURM_TASKS_PER_NODE", "2"}});
  EXPECT_EQ(one.master_addr, "127.0.0.1");
}

TEST(DistEnv, SlurmRefusals) {
  EXPECT_HAS(refusal(without(kSlurm, "SLURM_NTASKS")), "Slurm environment: SLURM_NTASKS is not set");
  EXPECT_HAS(refusal(without(kSlurm, "SLURM_TASKS_PER_NODE")), "neither SLURM_NTASKS_PER_NODE nor "
                                                               "SLURM_TASKS_PER_NODE is set");
  EXPECT_HAS(refusal(with(kSlurm, {{"SLURM_PROCID", "8"}})), "SLURM_PROCID=8 must be < SLURM_NTASKS=8");
  EXPECT_HAS(refusal(with(kSlurm, {{"SLURM_LOCALID", "4"}})), "SLURM_LOCALID=4 must be < SLURM_TASKS_PER_NODE=4");
  EXPECT_HAS(refusal(with(without(kSlurm, "SLURM_NODEID"), {{"SLURM_TASKS_PER_NODE", "4,3"}})),
             "SLURM_TASKS_PER_NODE='4,3' differs between nodes and SLURM_NODEID is not set");
  EXPECT_HAS(refusal(with(kSlurm, {{"SLURM_NODEID", "2"}})), "SLURM_NODEID=2 but SLURM_TASKS_PER_NODE='4(x2)' lists 2");
  EXPECT_HAS(refusal(without(kSlurm, "SLURM_NODELIST")), "spans several nodes (8 ranks, 4 on this node) but "
                                                         "MASTER_ADDR is not set");
  EXPECT_HAS(refusal(with(kSlurm, {{"SLURM_NODELIST", "gpu[007-008"}})), "'[' at offset 3 is never closed");
}

TEST(DistEnv, SlurmHostListsAndTaskCounts) {
  EXPECT_EQ(slurm_first_host("node01"), "node01");
  EXPECT_EQ(slurm_first_host("node[01-04,07],login2"), "node01");
  EXPECT_EQ(slurm_first_host("node7,node[1-3]"), "node7");
  EXPECT_EQ(slurm_first_host("gpu-a[009-010]-ib"), "gpu-a009-ib");
  EXPECT_EQ(slurm_first_host("rack[2,4]-n[10-11]"), "rack2-n10");
  EXPECT_THROW(slurm_first_host(""), InputError);
  EXPECT_THROW(slurm_first_host("n[]"), InputError);
  EXPECT_EQ(slurm_tasks_per_node("8"), (std::vector<int>{8}));
  EXPECT_EQ(slurm_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(slurm_tasks_per_node("1,4(x2)"), (std::vector<int>{1, 4, 4}));
  EXPECT_THROW(slurm_tasks_per_node("2(x3"), InputError);
  EXPECT_THROW(slurm_tasks_per_node("0"), InputError);
  EXPECT_THROW(slurm_tasks_per_node("2,,1"), InputError);
}

TEST(DistEnv, OpenMpi) {
  DistEnv e = read(kMpi);
  EXPECT_EQ(e.convention, DistConvention::kOpenMPI);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "127.0.0.1");  // one node
  EXPECT_EQ(read(with(kMpi, {{"MASTER_ADDR", "head"}, {"MASTER_PORT", "2222"}})).store_port, 2222);
  const Env multi = with(kMpi, {{"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_RANK", "7"}});
  EXPECT_HAS(refusal(multi), "mpirun -x MASTER_ADDR=<host>");
  EXPECT_EQ(read(with(multi, {{"MASTER_ADDR", "head"}})).master_addr, "head");
  EXPECT_HAS(refusal(without(kMpi, "OMPI_COMM_WORLD_LOCAL_SIZE")), "OMPI_COMM_WORLD_LOCAL_SIZE is not set");
  EXPECT_HAS(refusal(with(kMpi, {{"OMPI_COMM_WORLD_LOCAL_RANK", "4"}})),
             "OMPI_COMM_WORLD_LOCAL_RANK=4 must be < OMPI_COMM_WORLD_LOCAL_SIZE=4");
}

TEST(DistEnv, PrecedenceIsTorchrunThenSlurmThenMpi) {
  Env all = with(with(kMpi, kSlurm), kTorchrun);
  EXPECT_EQ(read(all).convention, DistConvention::kTorchrun);
  EXPECT_EQ(read(all).rank, 5);
  EXPECT_EQ(read(with(kMpi, kSlurm)).convention, DistConvention::kSlurm);
  EXPECT_EQ(read(with(kMpi, kSlurm)).rank, 6);
  // A half-set torchrun environment is an error, not a silent fall-through to Slurm.
  EXPECT_HAS(refusal(with(kSlurm, {{"WORLD_SIZE", "8"}})), "torchrun environment: RANK is not set");
}

TEST(DistEnv, OpenStoreRankZeroHostsTheOthersConnect) {
  DistEnv e = read({{"RANK", "0"}, {"LOCAL_RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2"},
                    {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(free_port())}});
  DistEnv e1 = e;
  e1.rank = e1.local_rank = 1;
  std::thread other([&] {
    auto s = open_store(e1, 2s);
    s->set("from1", "hi");
    s->barrier("b", 1, 2);
  });
  auto s = open_store(e, 2s);
  EXPECT_EQ(s->get("from1"), "hi");
  s->barrier("b", 0, 2);
  other.join();
}

// What each rank runs under `seqpar launch` (DistEnv.LaunchedRanks... below); run alone by ctest it
// is a world of one. SEQPAR_TEST_DIFFER_RANK=r makes rank r's config differ: every rank must then
// see the mismatch named.
TEST(LaunchedRank, MeetsItsPeersThroughTheStore) {
  DistEnv env = read_dist_env(process_env());
  if (env.convention == DistConvention::kSingle) env.store_port = 0;  // alone: any free port
  auto store = open_store(env, 10s);
  const int rank = env.rank, world = env.world_size;
  store->barrier("start", rank, world);
  store->set("local/" + std::to_string(rank), std::to_string(env.local_rank));
  for (int r = 0; r < world; ++r) EXPECT_EQ(store->get("local/" + std::to_string(r)), std::to_string(r));
  const char* differ = std::getenv("SEQPAR_TEST_DIFFER_RANK");
  const bool odd = differ && std::atoi(differ) == rank;
  const std::string config = std::string("model: tiny\nsp_size: ") + (odd ? "2" : "4") + "\n";
  if (differ) {
    try {
      verify_same_config(*store, rank, world, config);
      ADD_FAILURE() << "no mismatch reported";
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_HAS(m, fmt::format("rank {} has config", differ));
      EXPECT_HAS(m, "first difference at line 2");
    }
  } else {
    verify_same_config(*store, rank, world, config);
  }
  store->barrier("end", rank, world);  // rank 0 hosts the store: it stays until everyone is done
  std::printf("LAUNCHED_RANK_OK %d/%d %s\n", rank, world, convention_name(env.convention));
}

void launch_self(const std::string& env_prefix, int nproc) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = fmt::format("{}{} launch --nproc-per-node {} --master-port {} -- {} "
                                      "--gtest_filter=LaunchedRank.*",
                                      env_prefix, testing::binary_path(), nproc, free_port(), self);
  std::string out;
  const int rc = testing::run_command(cmd, &out);
  EXPECT_EQ(rc, 0) << out;
  for (int r = 0; r < nproc; ++r) EXPECT_HAS(out, fmt::format("[rank {}] LAUNCHED_RANK_OK {}/{} torchrun", r, r, nproc));
}

TEST(DistEnv, LaunchedRanksMeetThroughTheStore) { launch_self("", 3); }

TEST(DistEnv, LaunchedRanksAllSeeAConfigMismatch) { launch_self("SEQPAR_TEST_DIFFER_RANK=2 ", 3); }

}  // namespace
}  // namespace seqpar
