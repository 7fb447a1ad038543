// The `nccl` communicator on real GPUs. NCCL refuses two ranks of one communicator on one GPU,
// so several ranks means several processes on several GPUs:
// - NcclRank.* is what each rank runs: every collective against its serial meaning, bit-identical
//   results across ranks, uneven all-to-all, async send/recv with the send buffer reused at once,
//   split, CPU tensors, then the failure paths (a rank failing inside a call, a rank that never
//   comes). Run alone (as gpu_check.sh does) it is a world of one on GPU 0;
// - NcclComm.TwoRanksThroughSeqparLaunch runs NcclRank.* as 2 processes through `seqpar launch`
//   on a machine with 2 GPUs, and skips (saying so) on one with fewer.
// Runs on the GPU machine only (tools/gpu_check.sh); ctest does not run it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_test_util.h"
#include "comm/cuda/nccl_comm.h"
#include "comm/dist_env.h"
#include "comm/tcp_store.h"
#include "core/cuda/stream.h"
#include "core/cuda_check.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::free_port;

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::comm_input;
using testing::serial_reduce;

constexpr DType kDTypes[] = {DType::kF32, DType::kBF16, DType::kI32, DType::kI64};

std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor h = t.to(Device::cpu());
  const auto* p = static_cast<const uint8_t*>(h.raw());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

// Exact for integers and max; sums of floats within `tol` (NCCL's order is not rank order).
void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  if (tol == 0 || got.dtype() == DType::kI32 || got.dtype() == DType::kI64) {
    EXPECT_EQ(bytes_of(got), bytes_of(want)) << what;
  } else {
    EXPECT_LE(testing::rel_error(got.to(Device::cpu()), want), tol) << what;
  }
}

struct Rank {
  DistEnv env;
  std::shared_ptr<TcpStore> store;
  Device gpu;
};

// Each NcclRank test opens its own store; launched, test k uses port MASTER_PORT + k, so that a
// rank starting test k + 1 can never reach rank 0's store of test k, still lingering.
Rank join(int test_index) {
  Rank r;
  r.env = read_dist_env(process_env());
  if (r.env.convention == DistConvention::kSingle)
    r.env.store_port = 0;  // alone: any free port
  else
    r.env.store_port += test_index;
  r.store = open_store(r.env, 60s);
  r.gpu = Device::cuda(r.env.local_rank);
  SEQPAR_CUDA_CHECK(cudaSetDevice(r.env.local_rank));
  return r;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(NcclRank, CollectivesMatchTheirSerialMeaning) {
  Rank me = join(0);
  const int rank = me.env.rank, P = me.env.world_size;
  auto comm = make_nccl_communicator(me.store, rank, P, me.env.local_rank, {.timeout = 60s});
  ASSERT_EQ(comm->rank(), rank);
  ASSERT_EQ(comm->size(), P);
  const int64_t n = 1000 * P + 7 * (P > 1);  // all_reduce length: not a multiple of anything
  // Floats: NCCL sums in its own order. With 2 ranks there is one addition per element: exact.
  const double sum_tol = P <= 2 ? 0 : 2e-6, bf16_tol = P <= 2 ? 0 : 1e-2;

  for (DType dt : kDTypes) {
    std::vector<Tensor> ins;
    for (int q = 0; q < P; ++q) ins.push_back(comm_input(dt, n, 100 + q));
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      Tensor t = ins[static_cast<size_t>(rank)].to(me.gpu);
      comm->all_reduce(t, op);
      const double tol = op == ReduceOp::kMax ? 0 : (dt == DType::kBF16 ? bf16_tol : sum_tol);
      expect_close(t, serial_reduce(ins, op, 0, n), tol, fmt::format("all_reduce {}", dtype_name(dt)));
      // Every rank holds the same bits.
      Tensor all = Tensor::empty({P * n}, dt, me.gpu);
      comm->all_gather(all, t);
      for (int q = 0; q < P; ++q) EXPECT_EQ(bytes_of(all.rows(q * n, (q + 1) * n)), bytes_of(t)) << "rank " << q;
    }
    // all_gather: rank order, exact; also in place (in = this rank's chunk of out).
    const int64_t m = 333;
    Tensor out = Tensor::empty({P * m}, dt, me.gpu);
    comm->all_gather(out, comm_input(dt, m, 200 + rank).to(me.gpu));
    for (int q = 0; q < P; ++q) EXPECT_EQ(bytes_of(out.rows(q * m, (q + 1) * m)), bytes_of(comm_input(dt, m, 200 + q)));
    Tensor inplace = Tensor::zeros({P * m}, dt, me.gpu);
    Tensor mine = inplace.rows(rank * m, (rank + 1) * m);
    mine.copy_from(comm_input(dt, m, 200 + rank));
    comm->all_gather(inplace, mine);
    EXPECT_EQ(bytes_of(inplace), bytes_of(out));
    // reduce_scatter: chunk `rank` of the reduction.
    std::vector<Tensor> rs_ins;
    for (int q = 0; q < P; ++q) rs_ins.push_back(comm_input(dt, P * m, 300 + q));
    Tensor rs = Tensor::empty({m}, dt, me.gpu);
    comm->reduce_scatter(rs, rs_ins[static_cast<size_t>(rank)].to(me.gpu), ReduceOp::kSum);
    expect_close(rs, serial_reduce(rs_ins, ReduceOp::kSum, rank * m, (rank + 1) * m),
                 dt == DType::kBF16 ? bf16_tol : sum_tol, "reduce_scatter");
  }

  // Uneven all-to-all with empty chunks: rank r sends (r + 2p) % 3 * 5 elements to rank p.
  auto count = [](int from, int to) -> int64_t { return (from + 2 * to) % 3 * 5; };
  auto chunk = [&](int from, int to) { return comm_input(DType::kF32, 16, 1000 + from * 64 + to).rows(0, count(from, to)); };
  std::vector<int64_t> sc, rc;
  int64_t ns = 0, nr = 0;
  for (int p = 0; p < P; ++p) {
    sc.push_back(count(rank, p));
    rc.push_back(count(p, rank));
    ns += sc.back();
    nr += rc.back();
  }
  Tensor a2a_in = Tensor::empty({ns}, DType::kF32), a2a_out = Tensor::empty({nr}, DType::kF32, me.gpu);
  for (int p = 0, off = 0; p < P; off += static_cast<int>(sc[static_cast<size_t>(p)]), ++p)
    a2a_in.rows(off, off + sc[static_cast<size_t>(p)]).copy_from(chunk(rank, p));
  comm->all_to_all(a2a_out, a2a_in.to(me.gpu), sc, rc);
  for (int p = 0, off = 0; p < P; off += static_cast<int>(rc[static_cast<size_t>(p)]), ++p)
    EXPECT_EQ(bytes_of(a2a_out.rows(off, off + rc[static_cast<size_t>(p)])), bytes_of(chunk(p, rank))) << "from " << p;

  // Async ring: post, overwrite the send buffers at once (the contract lets the caller), wait.
  // Two messages to the same peer match in posting order.
  const int next = (rank + 1) % P, prev = (rank + P - 1) % P;
  Tensor s1 = comm_input(DType::kBF16, 4096, 2000 + rank).to(me.gpu), s2 = comm_input(DType::kI64, 17, 3000 + rank).to(me.gpu);
  Tensor r1 = Tensor::empty({4096}, DType::kBF16, me.gpu), r2 = Tensor::empty({17}, DType::kI64, me.gpu);
  auto req = comm->send_recv_async({{next, s1}, {next, s2}}, {{prev, r1}, {prev, r2}});
  s1.zero();
  s2.zero();
  req->wait();
  EXPECT_EQ(bytes_of(r1), bytes_of(comm_input(DType::kBF16, 4096, 2000 + prev)));
  EXPECT_EQ(bytes_of(r2), bytes_of(comm_input(DType::kI64, 17, 3000 + prev)));
  // CPU tensors are staged through the GPU.
  Tensor cpu = comm_input(DType::kF32, 64, 4000 + rank);
  comm->all_reduce(cpu, ReduceOp::kMax);
  std::vector<Tensor> cpu_ins;
  for (int q = 0; q < P; ++q) cpu_ins.push_back(comm_input(DType::kF32, 64, 4000 + q));
  EXPECT_EQ(bytes_of(cpu), bytes_of(serial_reduce(cpu_ins, ReduceOp::kMax, 0, 64)));
  Tensor host_recv = Tensor::empty({64}, DType::kF32);
  comm->send_recv({{next, comm_input(DType::kF32, 64, 5000 + rank)}}, {{prev, host_recv}});
  EXPECT_EQ(bytes_of(host_recv), bytes_of(comm_input(DType::kF32, 64, 5000 + prev)));

  // split: odd and even ranks, ordered by descending rank (key = -rank).
  auto sub = comm->split(rank % 2, -rank);
  const int members = (P - rank % 2 + 1) / 2;
  EXPECT_EQ(sub->size(), members);
  EXPECT_EQ(sub->rank(), (P - 1 - rank) / 2);  // members above this rank come first
  Tensor one = Tensor::from_vector<int32_t>({1}, {1 << rank}).to(me.gpu);
  sub->all_reduce(one, ReduceOp::kSum);
  int32_t mask = 0;
  for (int q = rank % 2; q < P; q += 2) mask |= 1 << q;
  EXPECT_EQ(one.to(Device::cpu()).data<int32_t>()[0], mask);
  comm->barrier();
  sub.reset();
  std::printf("NCCL_RANK_OK %d/%d collectives\n", rank, P);
}

TEST(NcclRank, AFailingRankAbortsEveryRank) {
  Rank me = join(1);
  const int rank = me.env.rank, P = me.env.world_size;
  auto comm = make_nccl_communicator(me.store, rank, P, me.env.local_rank, {.timeout = 20s});
  Tensor in = Tensor::zeros({8}, DType::kF32, me.gpu);
  if (rank == P - 1) {
    // A bad argument on the last rank: it throws here and tells the others.
    Tensor wrong = Tensor::empty({3}, DType::kF32, me.gpu);
    std::string e = error_of([&] { comm->all_gather(wrong, in); });
    EXPECT_NE(e.find("must hold"), std::string::npos) << e;
  }
  // Everyone's next call fails promptly, naming the failing rank and its error (not after 20 s).
  const auto t0 = Clock::now();
  std::string e = error_of([&] { comm->barrier(); });
  EXPECT_LT(Clock::now() - t0, 5s);
  EXPECT_NE(e.find(fmt::format("aborted: rank {}: ", P - 1)), std::string::npos) << e;
  EXPECT_NE(e.find("all_gather: out f32[3]"), std::string::npos) << e;
  std::printf("NCCL_RANK_OK %d/%d failure\n", rank, P);
}

TEST(NcclRank, ARankThatNeverComesTimesOut) {
  Rank me = join(2);
  const int rank = me.env.rank, P = me.env.world_size;
  if (P < 2) GTEST_SKIP() << "needs 2 ranks (a peer that does not come)";
  auto comm = make_nccl_communicator(me.store, rank, P, me.env.local_rank, {.timeout = 1500ms});
  if (rank == 0) {
    // Rank 0 waits in a barrier the others join too late: its own timeout ends it.
    std::string e = error_of([&] { comm->barrier(); });
    EXPECT_NE(e.find("did not complete within 1500 ms"), std::string::npos) << e;
  } else {
    std::this_thread::sleep_for(4s);  // by now rank 0 has given up and said so in the store
    std::string e = error_of([&] { comm->barrier(); });
    EXPECT_NE(e.find("aborted: rank 0: barrier"), std::string::npos) << e;
  }
  std::printf("NCCL_RANK_OK %d/%d timeout\n", rank, P);
}

TEST(NcclComm, TwoRanksThroughSeqparLaunch) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << "needs 2 GPUs (NCCL does not put two ranks on one GPU); this machine has " << devices;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  // NVLink multicast stays off on shared machines.
  const std::string cmd = fmt::format("NCCL_NVLS_ENABLE=0 {} launch --nproc-per-node 2 --master-port {} --timeout 120 "
                                      "-- {} --gtest_filter=NcclRank.*",
                                      testing::binary_path(), free_port(), self);
  std::string out;
  const int rc = testing::run_command(cmd, &out);
  EXPECT_EQ(rc, 0) << out;
  for (int r = 0; r < 2; ++r)
    for (const char* what : {"collectives", "failure", "timeout"})
      EXPECT_NE(out.find(fmt::format("[rank {}] NCCL_RANK_OK {}/2 {}", r, r, what)), std::string::npos)
          << what << "\n" << out;
}

}  // namespace
}  // namespace seqpar
