#include "comm/dist_env.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "comm/tcp_store.h"
#include "core/error.h"

namespace seqpar {

namespace {

constexpr int kDefaultPort = 29500;

// Reads the variables of one convention, each a non-negative integer, and says which convention
// an error belongs to.
class Vars {
 public:
  Vars(EnvLookup env, const char* convention) : env_(std::move(env)), convention_(convention) {}

  std::optional<std::string> get(const std::string& name) const { return env_(name); }

  // A required integer: absent or not a number is an InputError naming the variable.
  int required(const std::string& name, const std::string& why) const {
    auto v = env_(name);
    SEQPAR_INPUT_CHECK(v.has_value(), "{} environment: {} is not set ({})", convention_, name, why);
    return parse(name, *v);
  }
  std::optional<int> optional(const std::string& name) const {
    auto v = env_(name);
    if (!v) return std::nullopt;
    return parse(name, *v);
  }
  int parse(const std::string& name, const std::string& v) const {
    bool digits = !v.empty() && v.size() <= 9;
    for (char c : v) digits &= c >= '0' && c <= '9';
    SEQPAR_INPUT_CHECK(digits, "{} environment: {}='{}' is not a non-negative integer", convention_, name, v);
    return std::atoi(v.c_str());
  }
  const char* convention() const { return convention_; }

 private:
  EnvLookup env_;
  const char* convention_;
};

int parse_port(const Vars& vars, const std::string& name, const std::string& value) {
  const int port = vars.parse(name, value);
  SEQPAR_INPUT_CHECK(port >= 1 && port <= 65535, "{} environment: {}={} must be a TCP port in [1, 65535]",
                     vars.convention(), name, port);
  return port;
}

// Ranks and sizes must agree with each other, whatever the convention.
void check_consistent(const DistEnv& e, const std::string& rank_var, const std::string& local_var,
                      const std::string& world_var, const std::string& local_world_var) {
  const char* c = convention_name(e.convention);
  SEQPAR_INPUT_CHECK(e.world_size >= 1, "{} environment: {}={} must be >= 1", c, world_var, e.world_size);
  SEQPAR_INPUT_CHECK(e.rank < e.world_size, "{} environment: {}={} must be < {}={}", c, rank_var, e.rank, world_var,
                     e.world_size);
  SEQPAR_INPUT_CHECK(e.local_world_size >= 1 && e.local_world_size <= e.world_size,
                     "{} environment: {}={} must be in [1, {}={}]", c, local_world_var, e.local_world_size, world_var,
                     e.world_size);
  SEQPAR_INPUT_CHECK(e.local_rank < e.local_world_size, "{} environment: {}={} must be < {}={}", c, local_var,
                     e.local_rank, local_world_var, e.local_world_size);
  SEQPAR_INPUT_CHECK(e.local_rank <= e.rank, "{} environment: {}={} cannot exceed {}={} (ranks on other nodes "
                     "come first)", c, local_var, e.local_rank, rank_var, e.rank);
}

// MASTER_ADDR when set; else `fallback` (empty: none). A job on one node needs none: 127.0.0.1.
std::string master_addr(const DistEnv& e, const Vars& vars, const std::string& fallback, const std::string& hint) {
  if (auto a = vars.get("MASTER_ADDR")) {
    SEQPAR_INPUT_CHECK(!a->empty(), "{} environment: MASTER_ADDR is set but empty", vars.convention());
    return *a;
  }
  if (!fallback.empty()) return fallback;
  SEQPAR_INPUT_CHECK(e.world_size == e.local_world_size,
                     "{} environment: the job spans several nodes ({} ranks, {} on this node) but MASTER_ADDR is not "
                     "set: {}",
                     vars.convention(), e.world_size, e.local_world_size, hint);
  return "127.0.0.1";
}

DistEnv read_torchrun(const Vars& v) {
  DistEnv e;
  e.convention = DistConvention::kTorchrun;
  const std::string why = "RANK or WORLD_SIZE is set, so all of RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE must be";
  e.rank = v.required("RANK", why);
  e.local_rank = v.required("LOCAL_RANK", why);
  e.world_size = v.required("WORLD_SIZE", why);
  e.local_world_size = v.required("LOCAL_WORLD_SIZE", why);
  check_consistent(e, "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE");
  auto addr = v.get("MASTER_ADDR");
  auto port = v.get("MASTER_PORT");
  SEQPAR_INPUT_CHECK(e.world_size == 1 || (addr && port),
                     "torchrun environment: WORLD_SIZE={} needs MASTER_ADDR and MASTER_PORT, but {} not set",
                     e.world_size, !addr && !port ? "neither is" : (!addr ? "MASTER_ADDR is" : "MASTER_PORT is"));
  e.master_addr = master_addr(e, v, "", "");
  e.master_port = port ? parse_port(v, "MASTER_PORT", *port) : kDefaultPort;
  // torchrun's agent serves torch's own store on MASTER_PORT; seqpar's takes the next port.
  e.store_port = e.master_port;
  if (v.get("TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True")) {
    SEQPAR_INPUT_CHECK(e.master_port < 65535,
                       "torchrun environment: MASTER_PORT=65535 leaves no port for seqpar's store (MASTER_PORT + 1); "
                       "set SEQPAR_STORE_PORT");
    e.store_port = e.master_port + 1;
  }
  return e;
}

DistEnv read_slurm(const Vars& v) {
  DistEnv e;
  e.convention = DistConvention::kSlurm;
  const std::string why = "SLURM_PROCID is set: run the ranks with srun, which sets it";
  e.rank = v.required("SLURM_PROCID", why);
  e.local_rank = v.required("SLURM_LOCALID", why);
  e.world_size = v.required("SLURM_NTASKS", why);
  std::string local_var;
  if (auto n = v.optional("SLURM_NTASKS_PER_NODE")) {
    e.local_world_size = *n;
    local_var = "SLURM_NTASKS_PER_NODE";
  } else {
    auto spec = v.get("SLURM_TASKS_PER_NODE");
    SEQPAR_INPUT_CHECK(spec.has_value(), "Slurm environment: neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE "
                                         "is set ({})", why);
    std::vector<int> per_node = slurm_tasks_per_node(*spec);
    auto node = v.optional("SLURM_NODEID");
    bool uniform = std::all_of(per_node.begin(), per_node.end(), [&](int n) { return n == per_node[0]; });
    if (node) {
      SEQPAR_INPUT_CHECK(static_cast<size_t>(*node) < per_node.size(),
                         "Slurm environment: SLURM_NODEID={} but SLURM_TASKS_PER_NODE='{}' lists {} nodes", *node,
                         *spec, per_node.size());
      e.local_world_size = per_node[static_cast<size_t>(*node)];
    } else {
      SEQPAR_INPUT_CHECK(uniform, "Slurm environment: SLURM_TASKS_PER_NODE='{}' differs between nodes and "
                                  "SLURM_NODEID is not set, so this node's task count is unknown", *spec);
      e.local_world_size = per_node[0];
    }
    local_var = "SLURM_TASKS_PER_NODE";
  }
  check_consistent(e, "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", local_var);
  std::string first;
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"})
    if (auto list = v.get(name); list && first.empty()) first = slurm_first_host(*list);
  e.master_addr = master_addr(e, v, first, "set MASTER_ADDR or run under srun, which sets SLURM_NODELIST");
  auto port = v.get("MASTER_PORT");
  e.master_port = port ? parse_port(v, "MASTER_PORT", *port) : kDefaultPort;
  e.store_port = e.master_port;
  return e;
}

DistEnv read_openmpi(const Vars& v) {
  DistEnv e;
  e.convention = DistConvention::kOpenMPI;
  const std::string why = "OMPI_COMM_WORLD_RANK is set: run the ranks with Open MPI's mpirun, which sets it";
  e.rank = v.required("OMPI_COMM_WORLD_RANK", why);
  e.local_rank = v.required("OMPI_COMM_WORLD_LOCAL_RANK", why);
  e.world_size = v.required("OMPI_COMM_WORLD_SIZE", why);
  e.local_world_size = v.required("OMPI_COMM_WORLD_LOCAL_SIZE", why);
  check_consistent(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
                   "OMPI_COMM_WORLD_LOCAL_SIZE");
  e.master_addr = master_addr(e, v, "",
                              "pass the host of rank 0 with `mpirun -x MASTER_ADDR=<host> -x MASTER_PORT=<port>`");
  auto port = v.get("MASTER_PORT");
  e.master_port = port ? parse_port(v, "MASTER_PORT", *port) : kDefaultPort;
  e.store_port = e.master_port;
  return e;
}

}  // namespace

const char* convention_name(DistConvention c) {
  switch (c) {
    case DistConvention::kSingle: return "single process";
    case DistConvention::kTorchrun: return "torchrun";
    case DistConvention::kSlurm: return "Slurm";
    case DistConvention::kOpenMPI: return "Open MPI";
  }
  return "?";
}

std::string DistEnv::str() const {
  return fmt::format("{}: rank {} of {} (local {} of {}), store {}:{}", convention_name(convention), rank, world_size,
                     local_rank, local_world_size, master_addr, store_port);
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

EnvLookup map_env(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const std::string& name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

DistEnv read_dist_env(const EnvLookup& env) {
  DistEnv e;
  if (env("RANK") || env("WORLD_SIZE")) {
    e = read_torchrun(Vars(env, "torchrun"));
  } else if (env("SLURM_PROCID")) {
    e = read_slurm(Vars(env, "Slurm"));
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    e = read_openmpi(Vars(env, "Open MPI"));
  } else {
    Vars v(env, "single process");
    if (auto a = v.get("MASTER_ADDR"); a && !a->empty()) e.master_addr = *a;
    if (auto p = v.get("MASTER_PORT")) e.master_port = parse_port(v, "MASTER_PORT", *p);
    e.store_port = e.master_port;
  }
  if (auto p = env("SEQPAR_STORE_PORT")) e.store_port = parse_port(Vars(env, convention_name(e.convention)),
                                                                    "SEQPAR_STORE_PORT", *p);
  return e;
}

std::string slurm_first_host(const std::string& nodelist) {
  std::string host;
  for (size_t i = 0; i < nodelist.size() && nodelist[i] != ',';) {
    if (nodelist[i] != '[') {
      host += nodelist[i++];
      continue;
    }
    // A bracket group "[01-04,07]": its first item's first number, zero padding kept.
    const size_t close = nodelist.find(']', i);
    SEQPAR_INPUT_CHECK(close != std::string::npos, "Slurm node list '{}': '[' at offset {} is never closed",
                       nodelist, i);
    std::string first = nodelist.substr(i + 1, close - i - 1);
    first = first.substr(0, first.find_first_of(",-"));
    SEQPAR_INPUT_CHECK(!first.empty(), "Slurm node list '{}': empty range at offset {}", nodelist, i);
    host += first;
    i = close + 1;
  }
  SEQPAR_INPUT_CHECK(!host.empty(), "Slurm node list '{}' names no host", nodelist);
  return host;
}

std::vector<int> slurm_tasks_per_node(const std::string& spec) {
  std::vector<int> out;
  Vars v(map_env({}), "Slurm");
  size_t i = 0;
  while (i <= spec.size()) {
    size_t end = spec.find(',', i);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(i, end - i);
    int repeat = 1;
    if (auto open = item.find("(x"); open != std::string::npos) {
      SEQPAR_INPUT_CHECK(item.back() == ')', "Slurm environment: SLURM_TASKS_PER_NODE='{}': bad item '{}'", spec, item);
      repeat = v.parse("SLURM_TASKS_PER_NODE", item.substr(open + 2, item.size() - open - 3));
      item = item.substr(0, open);
    }
    const int n = v.parse("SLURM_TASKS_PER_NODE", item);
    SEQPAR_INPUT_CHECK(n >= 1 && repeat >= 1, "Slurm environment: SLURM_TASKS_PER_NODE='{}': counts must be >= 1",
                       spec);
    out.insert(out.end(), static_cast<size_t>(repeat), n);
    i = end + 1;
  }
  return out;
}

std::shared_ptr<TcpStore> open_store(const DistEnv& env, std::chrono::milliseconds timeout) {
  TcpStoreOptions o;
  o.timeout = timeout;
  o.connect_timeout = timeout;
  o.rank = env.rank;
  return std::make_shared<TcpStore>(env.master_addr, env.store_port, /*host_server=*/env.rank == 0, o);
}

}  // namespace seqpar
