// Where a command's ranks come from: threads of this process (the `local` transport), or, when
// the process was started by a launcher (seqpar launch, torchrun, Slurm, Open MPI), one rank per
// process over NCCL (the `nccl` transport, CUDA builds).
#pragma once

#include <functional>
#include <string>

#include "comm/communicator.h"
#include "core/device.h"

namespace seqpar {

enum class Transport { kAuto, kLocal, kNccl };
// "auto" | "local" | "nccl"; InputError naming `setting` otherwise.
Transport parse_transport(const std::string& name, const std::string& setting = "--transport");

struct JobRank {
  Communicator& world;
  Device device;  // this rank's device: the requested one, or cuda:<local rank> under NCCL
  bool leader;    // world rank 0: the one that writes outputs
};

// Runs fn on every rank of the job. kAuto: NCCL when the environment says a launcher started
// this process with more than one rank and the device is CUDA, else local threads. kNccl: the
// environment's world must equal `world` (InputError naming both), every rank must hold the same
// `config_text` (InputError naming the ranks that differ). Returns in every process; only the
// leader's fn should write outputs.
void run_job(int world, Device device, Transport transport, const std::string& config_text,
             const std::function<void(JobRank&)>& fn);

// run_job's checks of the launch against the request, without starting anything: call it before
// any work so that a wrong launch fails first (InputError naming the launch and the rule).
void check_job(int world, Device device, Transport transport);

// The transport run_job will use for `requested` (kAuto resolved from the environment).
Transport job_transport(Transport requested, Device device);

// Whether this process hosts the job's leader (world rank 0) under run_job's choice of transport:
// always with local threads, rank 0's process under NCCL. What only one process may do before or
// after the ranks run (progress lines, the metrics file, the plot) asks this.
bool hosts_leader(Device device, Transport transport);

}  // namespace seqpar
