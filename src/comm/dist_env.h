// Who am I in a multi-process job: rank, local rank, world, local world and where rank 0's TCP
// store listens, read from the launcher's environment variables. Three conventions, first match
// wins:
//   torchrun / seqpar launch   RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   Slurm (srun)               SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NTASKS_PER_NODE or
//                              SLURM_TASKS_PER_NODE (+ SLURM_NODEID), master = MASTER_ADDR or the first
//                              host of SLURM_STEP_NODELIST / SLURM_NODELIST / SLURM_JOB_NODELIST
//   Open MPI (mpirun)          OMPI_COMM_WORLD_RANK, _LOCAL_RANK, _SIZE, _LOCAL_SIZE; master = MASTER_ADDR,
//                              or 127.0.0.1 when every rank is on one node
// None of them: a single process (rank 0 of 1). MASTER_PORT defaults to 29500 where the
// convention does not set it. seqpar's store listens on MASTER_PORT, except under torchrun's
// agent (TORCHELASTIC_USE_AGENT_STORE=True: torch's own store already holds MASTER_PORT), where it
// takes MASTER_PORT + 1; SEQPAR_STORE_PORT overrides both.
//
// Values that contradict each other (RANK >= WORLD_SIZE, a convention half set, a non-number)
// are InputErrors naming the variables and their values. The environment comes through a lookup
// function, so tests inject maps and never depend on the real environment.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace seqpar {

class TcpStore;

enum class DistConvention { kSingle, kTorchrun, kSlurm, kOpenMPI };
const char* convention_name(DistConvention c);  // "single process", "torchrun", "Slurm", "Open MPI"

struct DistEnv {
  DistConvention convention = DistConvention::kSingle;
  int rank = 0;
  int local_rank = 0;        // rank on this node: picks the GPU
  int world_size = 1;
  int local_world_size = 1;  // ranks on this node
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int store_port = 29500;    // where rank 0 hosts seqpar's TCP store (see the top of this file)

  std::string str() const;  // "torchrun: rank 3 of 8 (local 3 of 4), store 10.0.0.1:29500"
};

// name -> value, nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup process_env();                                          // getenv
EnvLookup map_env(std::map<std::string, std::string> values);     // tests

DistEnv read_dist_env(const EnvLookup& env);

// Slurm's compressed host lists: "node[01-04,07],login2" -> "node01" (the first host; rank 0 of
// a step runs there).
std::string slurm_first_host(const std::string& nodelist);
// "2(x3),1" -> {2, 2, 2, 1}: tasks on each node of the step.
std::vector<int> slurm_tasks_per_node(const std::string& spec);

// Connects this rank to the job's TCP store: rank 0 hosts it on store_port, every rank connects.
std::shared_ptr<TcpStore> open_store(const DistEnv& env,
                                     std::chrono::milliseconds timeout = std::chrono::minutes(5));

}  // namespace seqpar
