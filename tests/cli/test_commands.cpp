// A missing or mistyped command names the commands there and the nearest one,
// and fails.
#include <gtest/gtest.h>

#include <string>

#include "core/device.h"
#include "test_util.h"

namespace seqpar {
namespace {

std::string run(const std::string& args, int* rc) {
  std::string out;
  *rc = testing::run_command(testing::binary_path() + " " + args + " 2>&1", &out);
  return out;
}

TEST(Commands, AMistypedCommandSuggestsTheNearest) {
  int rc = 0;
  std::string out = run("trian --steps 3", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("unknown command 'trian' for 'seqpar' (did you mean 'train'?)"), std::string::npos) << out;
  EXPECT_NE(out.find("prepare-data"), std::string::npos) << out;  // the list of commands
  out = run("--log-level warn bench trian", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("unknown command 'trian' for 'seqpar bench' (did you mean 'train'?)"), std::string::npos) << out;
  out = run("frobnicate", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("unknown command 'frobnicate' for 'seqpar'; its commands:"), std::string::npos) << out;
}

// --device cuda where no GPU can be used: a clear error naming the setting and the driver's reason,
// before the model is built or the plan printed (not a failed check deep in the allocator).
TEST(Commands, CudaWithoutAGpuIsAClearErrorFirst) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  int rc = 0;
  const std::string out = run("train --device cuda --preset llama-3.2-1b --seq-len 8192 --steps 1", &rc);
  EXPECT_NE(rc, 0);
#if defined(SEQPAR_WITH_CUDA)
  EXPECT_NE(out.find("device=cuda:0: "), std::string::npos) << out;
  EXPECT_NE(out.find("run it on a GPU machine, or --device cpu"), std::string::npos) << out;
#else  // (a build without the CUDA backend, e.g. tools/sanitize.sh's, says so instead)
  EXPECT_NE(out.find("--device=cuda: this seqpar was built without CUDA"), std::string::npos) << out;
#endif
  EXPECT_EQ(out.find("check failed"), std::string::npos) << out;
  EXPECT_EQ(out.find("Memory plan"), std::string::npos) << out;
}

// An Accelerate YAML given to --config is one problem, naming the flag it belongs to: not also
// DeepSpeed's batch rule for a file that is no DeepSpeed config.
TEST(Commands, AYamlGivenToConfigIsOneProblemNamingTheFlag) {
  const std::string path = testing::temp_dir() + "/accelerate.yaml";
  testing::write_file(path, "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 2\n");
  int rc = 0;
  const std::string out = run("train --config " + path + " --print-config", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("give it with --accelerate-config"), std::string::npos) << out;
  EXPECT_EQ(out.find("train_micro_batch_size_per_gpu"), std::string::npos) << out;
  EXPECT_EQ(out.find("problems in the configuration"), std::string::npos) << out;  // "2 problems ..."
}

// The CPU backend's memory is the host's: the plan of a CPU run says whether it fits there.
TEST(Commands, PlanOfACpuRunSaysWhetherItFitsTheHost) {
  int rc = 0;
  std::string out = run("plan --device cpu --preset llama-3.2-1b --seq-len 131072 --host-memory-gib 64", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("of host memory per rank (the CPU backend's) (does NOT fit"), std::string::npos) << out;
  out = run("plan --device cpu --preset llama-3.2-1b --seq-len 131072 --host-memory-gib 64 --json", &rc);
  EXPECT_NE(out.find("\"fits\":false"), std::string::npos) << out;
  out = run("plan --device cpu --preset llama-3.2-1b --seq-len 1024 --host-memory-gib 64 --json", &rc);
  EXPECT_NE(out.find("\"fits\":true"), std::string::npos) << out;
}

// --longest of a CPU run searches within the host's memory per rank, which its plan is then held against (it searched
// within --gpu-memory-gib, 139.8 GiB by default, and the plan of the length it found did not fit 64 GiB).
TEST(Commands, LongestOfACpuRunFitsTheHost) {
  int rc = 0;
  const std::string out =
      run("plan --device cpu --preset llama-3.2-1b --longest --activation-checkpointing --host-memory-gib 64", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("longest sequence that fits in 64.0 GiB of host memory per rank (the CPU backend's): "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("of 64.00 GiB of host memory per rank (the CPU backend's) (fits)"), std::string::npos) << out;
  EXPECT_EQ(out.find("does NOT fit"), std::string::npos) << out;
}

// A GPU run that keeps nothing in host memory still needs the initial weights' host copy while the
// ranks start (per process: the 30B preset's bf16 weights, 55.7 GiB): the plan's verdict is on that
// figure, not on the steady host memory alone (it said "55.66 GiB of 2.88 GiB (fits)").
TEST(Commands, PlanOfAGpuRunJudgesTheHostWithTheInitialWeightsCopy) {
  int rc = 0;
  const std::string base = "plan --preset gpt-30b-32k --seq-len 32768 --sp 8 --zero-stage 3 --host-memory-gib ";
  std::string out = run(base + "64", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("of 8.00 GiB (does NOT fit while the ranks start, the initial weights' copy"), std::string::npos)
      << out;
  out = run(base + "1024", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("of 128.00 GiB (fits)"), std::string::npos) << out;
  out = run(base + "64 --json", &rc);
  EXPECT_NE(out.find("\"host_fits\":false"), std::string::npos) << out;
}

// A plan that does not fit says which levers make it fit at its length (and --json has them).
TEST(Commands, PlanThatDoesNotFitNamesTheLeversThatDo) {
  int rc = 0;
  const std::string keep =
      "plan --preset llama-3.2-3b --seq-len 65536 --activation-checkpointing --checkpoint-keep-attention "
      "--tiled-loss-tokens 8192 --host-memory-gib 256 ";
  const std::string base = keep + "--gpu-memory-gib 79.2";
  std::string out = run(base, &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("(does NOT fit"), std::string::npos) << out;
  EXPECT_NE(out.find("it fits with --"), std::string::npos) << out;
  out = run(base + " --json", &rc);
  EXPECT_NE(out.find("\"fits\":false"), std::string::npos) << out;
  EXPECT_NE(out.find("\"fits_with\":\"--"), std::string::npos) << out;
  out = run(keep + "--checkpoint-placement auto --gpu-memory-gib 40", &rc);  // no placement fits 40 GiB as given
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--checkpoint-placement auto: no placement"), std::string::npos) << out;
  EXPECT_NE(out.find("it fits with --"), std::string::npos) << out;
  out = run("plan --preset llama-3.2-3b --seq-len 8192 --gpu-memory-gib 79.2 --host-memory-gib 256", &rc);
  EXPECT_EQ(out.find("it fits with"), std::string::npos) << out;
}

// checkpoint_placement=auto: seqpar plan chooses for a GPU of --gpu-memory-gib what seqpar train chooses on a card of
// that total (its total less 2%, auto_placement_capacity), and says within how much. The placements are the ones
// seqpar train ran on an H100 (79.19 GiB as the CUDA runtime reports it; bench/NOTES.md, thirty-seventh and
// thirty-eighth sessions); before, plan chose within the whole 79.19 GiB and said 5g23f for Qwen3-1.7B at 32K.
TEST(Commands, PlanChoosesTheAutoPlacementTheTrainerChoosesOnThatCard) {
  int rc = 0;
  const std::string keep =
      " --activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto "
      "--gpu-memory-gib 79.19 --host-memory-gib 256";
  for (const auto& [model, placement] : {std::pair{"--preset qwen3-1.7b --seq-len 32768", "6g22f"},
                                         {"--preset llama-3.2-1b --seq-len 131072", "11g5f"},
                                         {"--preset llama-3.2-1b --seq-len 65536", "3g13f"},
                                         {"--preset llama-3.2-3b --seq-len 65536", "9h19g"}}) {
    const std::string out = run(std::string("plan ") + model + keep, &rc);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find(std::string("checkpoint placement chosen: --checkpoint-placement ") + placement +
                       " (within 77.61 GiB: --gpu-memory-gib 79.19 less the 2% seqpar train leaves)"),
              std::string::npos)
        << model << "\n" << out;
  }
}

// bench attention names the head dims the CUDA attention takes (96 among them), before any GPU work.
TEST(Commands, BenchAttentionRefusesAHeadDimTheKernelsDoNotTake) {
  int rc = 0;
  const std::string out = run("bench attention --head-dims 64,80 --seq-lens 128", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--head-dims: D=80 is not supported by the CUDA attention (64, 96 or 128)"), std::string::npos)
      << out;
}

// bench attention takes flash, cudnn and auto (what sdpa runs) and names them for anything else, before any GPU work.
TEST(Commands, BenchAttentionNamesItsBackends) {
  int rc = 0;
  const std::string out = run("bench attention --backend sdpa --seq-lens 128", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--backend=sdpa must be flash, cudnn or auto"), std::string::npos) << out;
  for (const char* ok : {"flash", "cudnn", "auto"}) {
    const std::string o = run(std::string("bench attention --backend ") + ok + " --seq-lens 128", &rc);
    EXPECT_EQ(o.find("must be flash, cudnn or auto"), std::string::npos) << o;
  }
}

TEST(Commands, NoCommandListsThem) {
  int rc = 0;
  std::string out = run("", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("'seqpar' needs a command: version, fwdbwd, train"), std::string::npos) << out;
  out = run("bench", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("'seqpar bench' needs a command: attention, sp-attention, train"), std::string::npos) << out;
  out = run("bench --help", &rc);  // help is not an error
  EXPECT_EQ(rc, 0) << out;
  out = run("version", &rc);
  EXPECT_EQ(rc, 0) << out;
}

}  // namespace
}  // namespace seqpar
