// The `nccl` Communicator (see nccl_comm.h for streams, failure handling and numerics).
//
// Layout of this file: a Job (what the communicators of one make_nccl_communicator call share:
// the mutex every NCCL call runs under, the first failure, the watchdog thread), then NcclComm
// (one ncclComm_t), its request, and the factory.
//
// Every communicator is created non-blocking (ncclConfig_t::blocking = 0): init, split and group
// calls may return ncclInProgress, and settle() polls ncclCommGetAsyncError until they are done,
// with a deadline and dropping the mutex between polls. That is what lets init time out instead
// of waiting forever for a rank that never comes, and lets the watchdog abort a communicator
// while the main thread waits.
//
// Locking: Job::mu guards the job's state and every NCCL call on its communicators (NCCL calls on
// one communicator must not run concurrently, and ncclCommAbort comes from the watchdog thread).
// Host waits for the GPU (barrier, staging of CPU tensors) never hold it.
#include "comm/cuda/nccl_comm.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>
#include <utility>

#include "comm/tcp_store.h"
#include "core/cuda/stream.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/profile.h"

namespace seqpar {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
  }
  throw Error("nccl: unknown dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

// Makes `device` current for a scope (NCCL calls and allocations go to the communicator's GPU).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    SEQPAR_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != device) SEQPAR_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(prev_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
};

bool overlap(const Tensor& a, const Tensor& b) {
  auto pa = static_cast<const char*>(a.raw()), pb = static_cast<const char*>(b.raw());
  return a.nbytes() && b.nbytes() && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// One ncclComm_t and the operations queued on it that have not completed yet.
struct Slot {
  ncclComm_t comm = nullptr;  // null once aborted or destroyed
  std::string name;           // "world", "split(color=1, key=0)": for messages
  struct Pending {
    cudaEvent_t event;
    std::string what;
    Clock::time_point since;
  };
  std::deque<Pending> pending;

  void drop_pending() {
    for (auto& p : pending) cudaEventDestroy(p.event);
    pending.clear();
  }
};

// ---- Job: shared by the communicators of one make_nccl_communicator call on this rank ------------
class Job {
 public:
  Job(std::shared_ptr<TcpStore> store, int world_rank, int device, std::string fail_key, const NcclOptions& options)
      : store_(std::move(store)), rank_(world_rank), device_(device), fail_key_(std::move(fail_key)),
        options_(options) {
    // The watchdog's own connection, with short timeouts: it must never be stuck behind a
    // blocking get of the main thread, nor for long on a store that is gone.
    TcpStoreOptions o;
    o.timeout = 5s;
    o.connect_timeout = 5s;
    o.rank = world_rank;
    watch_store_ = std::make_unique<TcpStore>(store_->host(), store_->port(), false, o);
    watchdog_ = std::thread([this] { watchdog_loop(); });
  }

  ~Job() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
  }

  std::mutex mu;

  TcpStore& store() { return *store_; }
  int rank() const { return rank_; }
  int device() const { return device_; }
  const NcclOptions& options() const { return options_; }
  const std::string& fail_key() const { return fail_key_; }

  void add_locked(Slot* s) { slots_.push_back(s); }
  void remove_locked(Slot* s) { std::erase(slots_, s); }

  bool failed_locked() const { return !failure_.empty(); }
  void throw_if_failed_locked(std::string_view call) const {
    if (!failure_.empty()) throw Error(fmt::format("{} on rank {} aborted: {}", call, rank_, failure_));
  }
  void throw_if_failed(std::string_view call) {
    std::lock_guard<std::mutex> lock(mu);
    throw_if_failed_locked(call);
  }

  // Records the first failure ("rank R: why"), aborts every communicator of the job, and (for a
  // failure of this rank) has the watchdog publish it so the other ranks abort too.
  void fail_locked(const std::string& failure, bool publish) {
    if (!failure_.empty()) return;
    failure_ = failure;
    int aborted = 0;
    for (Slot* s : slots_) {
      s->drop_pending();
      if (s->comm) {
        ncclCommAbort(s->comm);
        s->comm = nullptr;
        ++aborted;
      }
    }
    std::fprintf(stderr, "seqpar nccl: rank %d: %s; aborted %d communicator(s)\n", rank_, failure.c_str(), aborted);
    if (publish) {
      publish_ = failure;
      cv_.notify_all();
    }
  }
  void fail(const std::string& failure, bool publish) {
    std::lock_guard<std::mutex> lock(mu);
    fail_locked(failure, publish);
  }

  // Queues a completion event for `what` on `stream`, for the watchdog to watch.
  void track_locked(Slot& slot, cudaStream_t stream, std::string what) {
    cudaEvent_t ev = nullptr;
    SEQPAR_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    const cudaError_t err = cudaEventRecord(ev, stream);
    if (err != cudaSuccess) cudaEventDestroy(ev);
    SEQPAR_CUDA_CHECK(err);
    slot.pending.push_back({ev, std::move(what), Clock::now()});
  }

  // Waits until the non-blocking NCCL calls just made on `slot` have finished (ncclInProgress ->
  // ncclSuccess). Throws on an NCCL error, on a job failure, or at the deadline; `on_timeout` says
  // what the timeout means. The mutex is dropped between polls.
  void settle(std::unique_lock<std::mutex>& lock, Slot& slot, std::string_view call, Clock::time_point deadline,
              const std::function<std::string()>& on_timeout) {
    for (auto pause = 10us;; pause = std::min(pause * 2, std::chrono::microseconds(2000))) {
      throw_if_failed_locked(call);
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(slot.comm, &state);
      if (r != ncclSuccess) state = r;
      if (state == ncclSuccess) return;
      if (state != ncclInProgress)
        throw Error(fmt::format("{} on rank {} ({}): NCCL error: {} ({})", call, rank_, slot.name,
                                ncclGetErrorString(state), ncclGetLastError(slot.comm)));
      if (Clock::now() >= deadline) throw Error(on_timeout());
      lock.unlock();
      std::this_thread::sleep_for(pause);
      lock.lock();
    }
  }

  // Blocks the host until `event` completes; throws on a job failure or after options.timeout.
  void host_wait(cudaEvent_t event, std::string_view what) {
    const auto deadline = Clock::now() + options_.timeout;
    for (auto pause = 5us;; pause = std::min(pause * 2, std::chrono::microseconds(1000))) {
      throw_if_failed(what);
      const cudaError_t q = cudaEventQuery(event);
      if (q == cudaSuccess) {
        throw_if_failed(what);  // an abort also lets the event complete
        return;
      }
      if (q != cudaErrorNotReady) SEQPAR_CUDA_CHECK(q);
      if (Clock::now() >= deadline) {
        const std::string why = fmt::format("rank {}: {} did not complete within {} ms (a peer is stuck, slow or gone)",
                                            rank_, what, options_.timeout.count());
        fail(why, true);
        throw Error(why);
      }
      std::this_thread::sleep_for(pause);
    }
  }

 private:
  // Every 50 ms: reap completed operations, fail on one pending too long or on an NCCL
  // asynchronous error. Every second: read the job's failure key in the store. Publishes this
  // rank's failure as soon as there is one.
  void watchdog_loop() {
    cudaSetDevice(device_);
    auto next_store_check = Clock::now() + 1s;
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv_.wait_for(lock, 50ms, [&] { return stop_ || !publish_.empty(); });
      if (failure_.empty()) poll_locked();
      std::string to_publish = std::exchange(publish_, std::string());
      const bool check = !stop_ && failure_.empty() && store_ok_ && Clock::now() >= next_store_check;
      if (!to_publish.empty() || check) {
        lock.unlock();
        std::string remote;
        try {
          if (!to_publish.empty()) {
            watch_store_->set(fail_key_, to_publish);
          } else if (watch_store_->check({fail_key_})[0]) {
            remote = watch_store_->get(fail_key_);
          }
        } catch (const std::exception&) {
          store_ok_ = false;  // the store's host has gone (the job is ending): stop asking
        }
        lock.lock();
        if (!remote.empty()) fail_locked(remote, false);
        next_store_check = Clock::now() + 1s;
      }
      if (stop_) return;
    }
  }

  void poll_locked() {
    const auto now = Clock::now();
    for (Slot* s : slots_) {
      while (!s->pending.empty()) {
        const cudaError_t q = cudaEventQuery(s->pending.front().event);
        if (q == cudaErrorNotReady) break;
        if (q != cudaSuccess) {
          fail_locked(fmt::format("rank {}: CUDA error while {} was queued: {}", rank_, s->pending.front().what,
                                  cudaGetErrorString(q)),
                      true);
          return;
        }
        cudaEventDestroy(s->pending.front().event);
        s->pending.pop_front();
      }
      if (!s->pending.empty() && now - s->pending.front().since > options_.timeout) {
        fail_locked(fmt::format("rank {}: {} did not complete within {} ms (a peer is stuck, slow or gone)", rank_,
                                s->pending.front().what, options_.timeout.count()),
                    true);
        return;
      }
      ncclResult_t state = ncclSuccess;
      if (s->comm && ncclCommGetAsyncError(s->comm, &state) == ncclSuccess && state != ncclSuccess &&
          state != ncclInProgress) {
        fail_locked(fmt::format("rank {}: NCCL asynchronous error in communicator {}: {} ({})", rank_, s->name,
                                ncclGetErrorString(state), ncclGetLastError(s->comm)),
                    true);
        return;
      }
    }
  }

  std::shared_ptr<TcpStore> store_;
  std::unique_ptr<TcpStore> watch_store_;
  const int rank_;
  const int device_;
  const std::string fail_key_;
  const NcclOptions options_;
  std::vector<Slot*> slots_;
  std::string failure_;  // the first failure; non-empty once the job is aborted
  std::string publish_;  // this rank's failure, for the watchdog to publish
  bool stop_ = false;
  bool store_ok_ = true;
  std::condition_variable cv_;
  std::thread watchdog_;
};

// ---- the request of send_recv_async --------------------------------------------------------------
class NcclRequest final : public CommRequest {
 public:
  struct HostRecv {
    Tensor host;  // the caller's CPU buffer
    Tensor dev;   // where NCCL receives it
  };
  NcclRequest(std::shared_ptr<Job> job, std::vector<Tensor> send_copies, std::vector<HostRecv> host_recvs)
      : job_(std::move(job)), send_copies_(std::move(send_copies)), host_recvs_(std::move(host_recvs)) {
    SEQPAR_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~NcclRequest() override {
    // Never waited: still order the current stream after the transfer, so that the send copies
    // freed here cannot be handed to work that runs before NCCL has read them.
    if (!waited_) cudaStreamWaitEvent(current_stream(), done_, 0);
    cudaEventDestroy(done_);
  }
  cudaEvent_t done() const { return done_; }

  void wait() override {
    if (waited_) return;
    waited_ = true;
    DeviceGuard guard(job_->device());
    // The current stream's stall until the transfer is done: the exposed communication time.
    ProfileScope prof(Device::cuda(job_->device()), "comm.send_recv wait");
    if (!host_recvs_.empty()) {
      job_->host_wait(done_, "send_recv");
      for (auto& r : host_recvs_) r.host.copy_from(r.dev);
    } else {
      SEQPAR_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), done_, 0));
    }
    job_->throw_if_failed("send_recv");
    send_copies_.clear();
  }

 private:
  std::shared_ptr<Job> job_;
  std::vector<Tensor> send_copies_;
  std::vector<HostRecv> host_recvs_;
  cudaEvent_t done_ = nullptr;
  bool waited_ = false;
};

// ---- the communicator ------------------------------------------------------------------------------
class NcclComm final : public Communicator {
 public:
  // Adopts an initialised (settled) communicator; the caller holds job->mu.
  NcclComm(std::shared_ptr<Job> job, ncclComm_t comm, std::string name)
      : job_(std::move(job)), slot_(std::make_unique<Slot>()), device_(job_->device()),
        comm_stream_(device_), barrier_buf_(Tensor::empty({1}, DType::kI32, Device::cuda(device_))),
        uncaught_at_start_(std::uncaught_exceptions()) {
    slot_->comm = comm;
    slot_->name = std::move(name);
    SEQPAR_LIB_CHECK(ncclCommUserRank(comm, &rank_), ncclSuccess, ncclGetErrorString);
    SEQPAR_LIB_CHECK(ncclCommCount(comm, &size_), ncclSuccess, ncclGetErrorString);
    job_->add_locked(slot_.get());
  }

  ~NcclComm() override {
    DeviceGuard guard(device_);
    std::unique_lock<std::mutex> lock(job_->mu);
    if (slot_->comm && std::uncaught_exceptions() > uncaught_at_start_) {
      // Destroyed by an exception on its way out of this rank: the job is failing; say so at once.
      job_->fail_locked(fmt::format("rank {}: communicator {} destroyed while an exception was propagating",
                                    job_->rank(), slot_->name),
                        true);
    }
    if (slot_->comm) {
      // Flush what is queued (it needs the peers), then free; abort when that cannot finish.
      try {
        const ncclResult_t r = ncclCommFinalize(slot_->comm);
        if (r != ncclSuccess && r != ncclInProgress)
          throw Error(fmt::format("ncclCommFinalize: {}", ncclGetErrorString(r)));
        job_->settle(lock, *slot_, "destroying the communicator", Clock::now() + job_->options().timeout,
                     [] { return std::string("finalize timed out"); });
        if (slot_->comm) ncclCommDestroy(slot_->comm);
      } catch (const std::exception& e) {
        if (slot_->comm) ncclCommAbort(slot_->comm);
        std::fprintf(stderr, "seqpar nccl: rank %d: communicator %s aborted at destruction: %s\n", job_->rank(),
                     slot_->name.c_str(), e.what());
      }
      slot_->comm = nullptr;
    }
    slot_->drop_pending();
    job_->remove_locked(slot_.get());
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    ProfileScope prof(t.device(), "comm.all_reduce");
    if (prof.active()) prof.detail(profile_bytes(t.nbytes()));
    guarded([&] {
      Tensor d = device_tensor(t, "all_reduce", "t", true);
      enqueue("all_reduce", t, current_stream(), [&](ncclComm_t c, cudaStream_t s) {
        return ncclAllReduce(d.raw(), d.raw(), static_cast<size_t>(d.numel()), nccl_dtype(d.dtype()), nccl_op(op), c, s);
      });
      finish(t, d, "all_reduce");
    });
  }

  void all_gather(Tensor& out, const Tensor& in) override {
    ProfileScope prof(in.device(), "comm.all_gather");
    if (prof.active()) prof.detail(profile_bytes(in.nbytes()));
    guarded([&] {
      SEQPAR_CHECK(out.defined() && in.defined() && out.dtype() == in.dtype() && out.numel() == size_ * in.numel(),
                   "all_gather: out {} must hold {} ranks x in {} ({} elements of {})", out.str(), size_, in.str(),
                   size_ * in.numel(), dtype_name(in.dtype()));
      Tensor di = device_tensor(in, "all_gather", "in", true), dout = device_tensor(out, "all_gather", "out", false);
      // In place is NCCL's: `in` exactly this rank's chunk of `out`; any other overlap is a race.
      const bool in_place = di.raw() == static_cast<char*>(dout.raw()) + rank_ * di.nbytes();
      SEQPAR_CHECK(in_place || !overlap(di, dout), "all_gather: in {} overlaps out {} other than as chunk {}",
                   in.str(), out.str(), rank_);
      enqueue("all_gather", in, current_stream(), [&](ncclComm_t c, cudaStream_t s) {
        return ncclAllGather(di.raw(), dout.raw(), static_cast<size_t>(di.numel()), nccl_dtype(di.dtype()), c, s);
      });
      finish(out, dout, "all_gather");
    });
  }

  void reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    ProfileScope prof(in.device(), "comm.reduce_scatter");
    if (prof.active()) prof.detail(profile_bytes(in.nbytes()));
    guarded([&] {
      SEQPAR_CHECK(out.defined() && in.defined() && out.dtype() == in.dtype() && in.numel() == size_ * out.numel(),
                   "reduce_scatter: in {} must hold {} ranks x out {} ({} elements of {})", in.str(), size_,
                   out.str(), size_ * out.numel(), dtype_name(out.dtype()));
      Tensor di = device_tensor(in, "reduce_scatter", "in", true);
      Tensor dout = device_tensor(out, "reduce_scatter", "out", false);
      const bool in_place = dout.raw() == static_cast<char*>(di.raw()) + rank_ * dout.nbytes();
      SEQPAR_CHECK(in_place || !overlap(di, dout), "reduce_scatter: out {} overlaps in {} other than as chunk {}",
                   out.str(), in.str(), rank_);
      enqueue("reduce_scatter", in, current_stream(), [&](ncclComm_t c, cudaStream_t s) {
        return ncclReduceScatter(di.raw(), dout.raw(), static_cast<size_t>(dout.numel()), nccl_dtype(di.dtype()),
                                 nccl_op(op), c, s);
      });
      finish(out, dout, "reduce_scatter");
    });
  }

  // Uneven counts: one group of sends and receives, zero-sized chunks skipped, this rank's own
  // chunk a device copy. NCCL cannot check that recv_counts match the peers' send_counts: a
  // mismatch truncates or hangs (then the watchdog's timeout ends it).
  void all_to_all(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_counts,
                  const std::vector<int64_t>& recv_counts) override {
    ProfileScope prof(in.device(), "comm.all_to_all");
    if (prof.active()) prof.detail(profile_bytes(in.nbytes()));
    guarded([&] {
      SEQPAR_CHECK(out.defined() && in.defined() && out.dtype() == in.dtype(),
                   "all_to_all: out {} and in {} must be defined and of one dtype", out.str(), in.str());
      check_counts(send_counts, in, "send_counts", "in");
      check_counts(recv_counts, out, "recv_counts", "out");
      Tensor di = device_tensor(in, "all_to_all", "in", true), dout = device_tensor(out, "all_to_all", "out", false);
      SEQPAR_CHECK(!overlap(di, dout), "all_to_all: in {} and out {} overlap; NCCL needs separate buffers", in.str(),
                   out.str());
      SEQPAR_CHECK(send_counts[static_cast<size_t>(rank_)] == recv_counts[static_cast<size_t>(rank_)],
                   "all_to_all: rank {} sends itself {} elements but expects {}", rank_,
                   send_counts[static_cast<size_t>(rank_)], recv_counts[static_cast<size_t>(rank_)]);
      const size_t es = dtype_size(in.dtype());
      const auto dt = nccl_dtype(in.dtype());
      enqueue("all_to_all", in, current_stream(), [&](ncclComm_t c, cudaStream_t s) {
        const auto* src = static_cast<const char*>(di.raw());
        auto* dst = static_cast<char*>(dout.raw());
        int64_t soff = 0, roff = 0;
        ncclResult_t r = ncclGroupStart();
        for (int p = 0; p < size_ && (r == ncclSuccess || r == ncclInProgress); ++p) {
          const int64_t ns = send_counts[static_cast<size_t>(p)], nr = recv_counts[static_cast<size_t>(p)];
          if (p == rank_) {
            // A failed copy here leaves the group open: the job is aborted then (guarded).
            if (ns) SEQPAR_CUDA_CHECK(cudaMemcpyAsync(dst + roff * es, src + soff * es, static_cast<size_t>(ns) * es,
                                                      cudaMemcpyDeviceToDevice, s));
          } else {
            if (ns) r = ncclSend(src + soff * es, static_cast<size_t>(ns), dt, p, c, s);
            if (nr && (r == ncclSuccess || r == ncclInProgress))
              r = ncclRecv(dst + roff * es, static_cast<size_t>(nr), dt, p, c, s);
          }
          soff += ns;
          roff += nr;
        }
        const ncclResult_t end = ncclGroupEnd();
        return r == ncclSuccess || r == ncclInProgress ? end : r;
      });
      finish(out, dout, "all_to_all");
    });
  }

  std::unique_ptr<CommRequest> send_recv_async(const std::vector<P2POp>& sends,
                                               const std::vector<P2POp>& recvs) override {
    return guarded([&]() -> std::unique_ptr<CommRequest> {
      for (const auto* ops : {&sends, &recvs})
        for (const P2POp& op : *ops) {
          SEQPAR_CHECK(op.peer >= 0 && op.peer < size_, "send_recv: peer {} is not a rank of this {}-rank communicator",
                       op.peer, size_);
          SEQPAR_CHECK(op.buf.defined(), "send_recv: an undefined tensor for peer {}", op.peer);
          if (op.buf.device().is_cuda())
            SEQPAR_CHECK(op.buf.device().index == device_, "send_recv: buffer {} is not on this communicator's cuda:{}",
                         op.buf.str(), device_);
        }
      DeviceGuard guard(device_);
      // Sends are copied on the current stream (after their producers): the caller may reuse them.
      std::vector<Tensor> copies;
      for (const P2POp& op : sends) {
        Tensor c = Tensor::empty(op.buf.shape(), op.buf.dtype(), Device::cuda(device_));
        c.copy_from(op.buf);
        copies.push_back(c);
      }
      std::vector<Tensor> targets;
      std::vector<NcclRequest::HostRecv> host_recvs;
      for (const P2POp& op : recvs) {
        if (op.buf.device().is_cuda()) {
          targets.push_back(op.buf);
        } else {
          host_recvs.push_back({op.buf, Tensor::empty(op.buf.shape(), op.buf.dtype(), Device::cuda(device_))});
          targets.push_back(host_recvs.back().dev);
        }
      }
      // The communication stream starts after everything queued on the current stream so far
      // (the send copies, and earlier readers of the receive buffers).
      order_.record(current_stream());
      comm_stream_.wait(order_);
      auto request = std::make_unique<NcclRequest>(job_, copies, std::move(host_recvs));
      const Tensor& first = sends.empty() ? (recvs.empty() ? barrier_buf_ : recvs[0].buf) : sends[0].buf;
      enqueue("send_recv", first, comm_stream_.get(), [&](ncclComm_t c, cudaStream_t s) {
        ncclResult_t r = ncclGroupStart();
        for (size_t i = 0; i < sends.size() && (r == ncclSuccess || r == ncclInProgress); ++i)
          if (copies[i].numel())
            r = ncclSend(copies[i].raw(), static_cast<size_t>(copies[i].numel()), nccl_dtype(copies[i].dtype()),
                         sends[i].peer, c, s);
        for (size_t i = 0; i < recvs.size() && (r == ncclSuccess || r == ncclInProgress); ++i)
          if (targets[i].numel())
            r = ncclRecv(targets[i].raw(), static_cast<size_t>(targets[i].numel()), nccl_dtype(targets[i].dtype()),
                         recvs[i].peer, c, s);
        const ncclResult_t end = ncclGroupEnd();
        return r == ncclSuccess || r == ncclInProgress ? end : r;
      });
      SEQPAR_CUDA_CHECK(cudaEventRecord(request->done(), comm_stream_.get()));
      return request;
    });
  }

  // A one-element all-reduce on the communication stream, waited for by the host.
  void barrier() override {
    guarded([&] {
      DeviceGuard guard(device_);
      enqueue("barrier", barrier_buf_, comm_stream_.get(), [&](ncclComm_t c, cudaStream_t s) {
        return ncclAllReduce(barrier_buf_.raw(), barrier_buf_.raw(), 1, ncclInt32, ncclSum, c, s);
      });
      barrier_done_.record(comm_stream_.get());
      job_->host_wait(barrier_done_.get(), "barrier");
    });
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    return guarded([&]() -> std::unique_ptr<Communicator> {
      SEQPAR_CHECK(color >= 0, "split: color={} must be >= 0", color);
      DeviceGuard guard(device_);
      std::unique_lock<std::mutex> lock(job_->mu);
      job_->throw_if_failed_locked("split");
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      ncclComm_t child = nullptr;
      check(ncclCommSplit(slot_->comm, color, key, &child, &config), "split");
      // Non-blocking: the parent reports when the split is through; only then is `child` set,
      // and it may still be initialising itself.
      const auto deadline = Clock::now() + job_->options().timeout;
      job_->settle(lock, *slot_, "split", deadline, [&] { return split_timeout(); });
      SEQPAR_CHECK(child != nullptr, "split: NCCL returned no communicator for color {}", color);
      const std::string name = fmt::format("split(color={}, key={}) of {}", color, key, slot_->name);
      Slot probe;
      probe.comm = child;
      probe.name = name;
      try {
        job_->settle(lock, probe, "split", deadline, [&] { return split_timeout(); });
      } catch (...) {
        ncclCommAbort(child);
        throw;
      }
      return std::make_unique<NcclComm>(job_, child, name);
    });
  }

 private:
  std::string split_timeout() const {
    return fmt::format("split on rank {}: NCCL did not finish within {} ms (did every rank of {} call split?)", rank_,
                       job_->options().timeout.count(), slot_->name);
  }

  // Any failure inside a call aborts the job (and tells the other ranks through the store), then
  // propagates.
  template <typename F>
  auto guarded(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const std::exception& e) {
      job_->fail(fmt::format("rank {}: {}", job_->rank(), e.what()), true);
      throw;
    }
  }

  void check(ncclResult_t r, std::string_view call) const {
    if (r != ncclSuccess && r != ncclInProgress)
      throw Error(fmt::format("{} on rank {} ({}): NCCL error: {} ({})", call, rank_, slot_->name,
                              ncclGetErrorString(r), ncclGetLastError(slot_->comm)));
  }

  // Issues NCCL calls under the job's mutex, waits for them to be queued (non-blocking mode), and
  // hands their completion to the watchdog.
  template <typename Issue>
  void enqueue(std::string_view call, const Tensor& about, cudaStream_t stream, Issue issue) {
    DeviceGuard guard(device_);
    std::unique_lock<std::mutex> lock(job_->mu);
    job_->throw_if_failed_locked(call);
    check(issue(slot_->comm, stream), call);
    job_->settle(lock, *slot_, call, Clock::now() + job_->options().timeout, [&] {
      return fmt::format("{} on rank {}: NCCL did not queue it within {} ms", call, rank_,
                         job_->options().timeout.count());
    });
    job_->track_locked(*slot_, stream, fmt::format("{} #{} ({}) on {}", call, ++calls_, about.str(), slot_->name));
  }

  // The device bytes an operation works on: the tensor itself when it lives on this
  // communicator's GPU; for a CPU tensor a device copy (of its data when copy_in).
  Tensor device_tensor(const Tensor& t, std::string_view call, const char* name, bool copy_in) const {
    SEQPAR_CHECK(t.defined(), "{}: `{}` is an undefined tensor", call, name);
    if (t.device().is_cuda()) {
      SEQPAR_CHECK(t.device().index == device_, "{}: `{}` {} is not on this communicator's device cuda:{}", call,
                   name, t.str(), device_);
      return t;
    }
    DeviceGuard guard(device_);
    return copy_in ? t.to(Device::cuda(device_)) : Tensor::empty(t.shape(), t.dtype(), Device::cuda(device_));
  }

  // Copies a staged result back into a CPU tensor (a host synchronisation), then makes sure the
  // job did not fail meanwhile: an abort lets the stream finish with garbage.
  void finish(Tensor& t, const Tensor& dev, std::string_view call) {
    if (!t.device().is_cpu()) return;
    DeviceGuard guard(device_);
    t.copy_from(dev);
    job_->throw_if_failed(call);
  }

  void check_counts(const std::vector<int64_t>& counts, const Tensor& t, const char* name, const char* tname) const {
    SEQPAR_CHECK(static_cast<int>(counts.size()) == size_, "all_to_all: {} has {} entries, the communicator {} ranks",
                 name, counts.size(), size_);
    int64_t sum = 0;
    for (size_t q = 0; q < counts.size(); ++q) {
      SEQPAR_CHECK(counts[q] >= 0, "all_to_all: {}[{}]={} must be >= 0", name, q, counts[q]);
      sum += counts[q];
    }
    SEQPAR_CHECK(sum == t.numel(), "all_to_all: {} sum to {} but `{}` {} has {} elements", name, sum, tname, t.str(),
                 t.numel());
  }

  std::shared_ptr<Job> job_;
  std::unique_ptr<Slot> slot_;
  const int device_;
  int rank_ = 0, size_ = 0;
  Stream comm_stream_;  // send_recv and barrier
  Event order_, barrier_done_;
  Tensor barrier_buf_;  // i32[1]
  uint64_t calls_ = 0;
  const int uncaught_at_start_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::shared_ptr<TcpStore> store, int rank, int world, int device,
                                                     const NcclOptions& options) {
  SEQPAR_CHECK(store != nullptr, "make_nccl_communicator: no store");
  SEQPAR_CHECK(world >= 1 && rank >= 0 && rank < world, "make_nccl_communicator: rank={} must be in [0, world={})",
               rank, world);
  SEQPAR_CHECK(options.timeout.count() > 0, "make_nccl_communicator: timeout={} ms must be > 0",
               options.timeout.count());
  int devices = 0;
  SEQPAR_CUDA_CHECK(cudaGetDeviceCount(&devices));
  SEQPAR_INPUT_CHECK(device >= 0 && device < devices,
                     "rank {}: CUDA device {} does not exist ({} visible): one GPU per local rank is needed (check "
                     "--nproc-per-node and CUDA_VISIBLE_DEVICES)",
                     rank, device, devices);
  DeviceGuard guard(device);

  // The unique id travels through the store; each call gets its own keys.
  const std::string prefix = fmt::format("nccl/{}/", store->next_round("nccl"));
  store->set(prefix + "arrived/" + std::to_string(rank), "1");
  ncclUniqueId id;
  if (rank == 0) {
    SEQPAR_LIB_CHECK(ncclGetUniqueId(&id), ncclSuccess, ncclGetErrorString);
    store->set(prefix + "id", std::string(id.internal, sizeof(id.internal)));
  } else {
    const std::string bytes = store->get(prefix + "id");
    SEQPAR_CHECK(bytes.size() == sizeof(id.internal), "NCCL unique id from the store has {} bytes, expected {}",
                 bytes.size(), sizeof(id.internal));
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }

  auto job = std::make_shared<Job>(store, rank, device, prefix + "failed", options);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  std::unique_lock<std::mutex> lock(job->mu);
  const ncclResult_t r = ncclCommInitRankConfig(&comm, world, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress)
    throw Error(fmt::format("NCCL init of a {}-rank communicator on rank {} (cuda:{}) failed: {} ({})", world, rank,
                            device, ncclGetErrorString(r), ncclGetLastError(comm)));
  Slot probe;
  probe.comm = comm;
  probe.name = "world";
  try {
    job->settle(lock, probe, "NCCL init", Clock::now() + options.timeout, [&] {
      // Which ranks never came, from the store (a fresh connection: ours may be mid-call).
      std::vector<std::string> keys;
      for (int q = 0; q < world; ++q) keys.push_back(prefix + "arrived/" + std::to_string(q));
      std::vector<int> missing;
      try {
        auto present = store->check(keys);
        for (int q = 0; q < world; ++q)
          if (!present[static_cast<size_t>(q)]) missing.push_back(q);
      } catch (const std::exception&) {
      }
      return fmt::format("NCCL init of a {}-rank communicator timed out after {} ms on rank {}: {}", world,
                         options.timeout.count(), rank,
                         missing.empty() ? "every rank arrived, but NCCL could not connect them (network? "
                                           "NCCL_SOCKET_IFNAME? run with NCCL_DEBUG=INFO)"
                                         : rank_list(missing) + " never arrived");
    });
  } catch (const std::exception& e) {
    if (comm) ncclCommAbort(comm);
    lock.unlock();
    job->fail(fmt::format("rank {}: {}", rank, e.what()), true);
    throw;
  }
  return std::make_unique<NcclComm>(job, comm, "world");
}

}  // namespace seqpar
