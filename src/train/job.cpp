#include "train/job.h"

#include "comm/dist_env.h"
#include "comm/tcp_store.h"
#include "core/log.h"
#if defined(SEQPAR_WITH_CUDA)
#include "comm/cuda/nccl_comm.h"
#endif

namespace seqpar {

Transport parse_transport(const std::string& name, const std::string& setting) {
  if (name == "auto") return Transport::kAuto;
  if (name == "local") return Transport::kLocal;
  if (name == "nccl") return Transport::kNccl;
  throw InputError(fmt::format("{}={}: expected auto, local or nccl", setting, name));
}

namespace {

// kAuto resolved: NCCL when a launcher started several processes and the device is a GPU.
Transport resolve(Transport transport, Device device, const DistEnv& env) {
  if (transport != Transport::kAuto) return transport;
  return env.world_size > 1 && device.is_cuda() ? Transport::kNccl : Transport::kLocal;
}

}  // namespace

Transport job_transport(Transport requested, Device device) {
  return resolve(requested, device, read_dist_env(process_env()));
}

bool hosts_leader(Device device, Transport transport) {
  const DistEnv env = read_dist_env(process_env());
  return resolve(transport, device, env) == Transport::kLocal || env.rank == 0;
}

void check_job(int world, Device device, Transport transport) {
  const DistEnv env = read_dist_env(process_env());
  const bool chosen = transport != Transport::kAuto;
  transport = resolve(transport, device, env);
  if (transport == Transport::kLocal) {
    // Several launched processes each running the whole job as threads would write the same
    // outputs: refuse, whichever way local was chosen.
    SEQPAR_INPUT_CHECK(env.world_size == 1,
                       "{}, but {} runs every rank as a thread of one process: start one process (without a "
                       "launcher), or use --device cuda (one GPU per process over NCCL)",
                       env.str(), chosen ? "--transport=local" : fmt::format("--device {}", device.str()));
    return;
  }
#if defined(SEQPAR_WITH_CUDA)
  SEQPAR_INPUT_CHECK(device.is_cuda(), "--transport=nccl needs --device cuda (got {})", device.str());
  SEQPAR_INPUT_CHECK(env.world_size == world,
                     "the launch has world_size={} ({}) but the command asks for {} ranks: they must be equal",
                     env.world_size, env.str(), world);
#else
  (void)world;
  throw InputError("--transport=nccl needs the CUDA backend (this build has -DSEQPAR_CUDA=OFF)");
#endif
}

void run_job(int world, Device device, Transport transport, const std::string& config_text,
             const std::function<void(JobRank&)>& fn) {
  check_job(world, device, transport);
  const DistEnv env = read_dist_env(process_env());
  transport = resolve(transport, device, env);
  if (transport == Transport::kLocal) {
    run_local_ranks(world, [&](Communicator& comm) {
      set_current_device(device);
      set_allocation_rank(comm.rank());  // the CPU allocator keeps each rank's own peak
      JobRank r{comm, device, comm.rank() == 0};
      fn(r);
    });
    return;
  }
#if defined(SEQPAR_WITH_CUDA)
  const Device mine = Device::cuda(env.local_rank);
  set_current_device(mine);
  log_info("nccl transport: {}", env.str());
  std::shared_ptr<TcpStore> store = open_store(env);
  verify_same_config(*store, env.rank, env.world_size, config_text);
  std::unique_ptr<Communicator> comm = make_nccl_communicator(store, env.rank, env.world_size, env.local_rank);
  JobRank r{*comm, mine, env.rank == 0};
  fn(r);
#else
  (void)config_text;
  (void)fn;
  throw InputError("--transport=nccl needs the CUDA backend (this build has -DSEQPAR_CUDA=OFF)");
#endif
}

}  // namespace seqpar
