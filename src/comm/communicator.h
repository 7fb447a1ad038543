// Communicator: the collectives sequence parallelism needs, over any transport. parallel/ and
// train/ see only this interface; backends: `local` (ranks as threads of one process, CPU or
// CUDA memory) and `nccl` (comm/cuda/nccl_comm.h: one rank per process and GPU, CUDA builds).
//
// Contract for every backend:
// - Collective calls are made by every rank of the communicator in the same order.
// - Reductions are deterministic: the same inputs give bit-identical results on every rank and
//   every run (the local backend sums in rank order).
// - Tensors are contiguous; counts and offsets are in elements of the tensor's dtype.
// - A failure on one rank (an exception, a timeout) makes every other rank's pending and future
//   calls throw promptly with a message naming the failing rank and its error; nothing hangs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace seqpar {

enum class ReduceOp { kSum, kMax };

// A pending non-blocking operation; wait() completes it (and rethrows its failure).
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
};

struct P2POp {
  int peer;    // rank in this communicator
  Tensor buf;  // send: read from; recv: written into (sizes must match the peer's send)
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place on every rank. f32, bf16 and f16 (summed in f32), i32, i64.
  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  // out = concatenation over ranks (rank order) of each rank's `in` along dim 0; every rank's
  // `in` has the same shape; out.numel() == size() * in.numel().
  virtual void all_gather(Tensor& out, const Tensor& in) = 0;
  // in.numel() == size() * out.numel(); rank r gets the reduction of chunk r of every rank's in.
  virtual void reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) = 0;
  // in holds size() consecutive chunks, chunk p (send_counts[p] elements) goes to rank p; out
  // receives size() consecutive chunks, chunk p (recv_counts[p] elements) from rank p. Uneven
  // counts allowed; recv_counts[p] must equal rank p's send_counts[rank()].
  virtual void all_to_all(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_counts,
                          const std::vector<int64_t>& recv_counts) = 0;
  // Batched point-to-point: posts every send and receive, returns when all are complete.
  void send_recv(const std::vector<P2POp>& sends, const std::vector<P2POp>& recvs) {
    send_recv_async(sends, recvs)->wait();
  }
  // Non-blocking form: sends' buffers may be reused at once (they are copied or in flight on
  // the backend's stream), receive buffers are valid after wait(). This is what lets a ring post
  // the next hop before computing on the current block.
  virtual std::unique_ptr<CommRequest> send_recv_async(const std::vector<P2POp>& sends,
                                                       const std::vector<P2POp>& recvs) = 0;
  virtual void barrier() = 0;
  // Collective: ranks with the same color form a new communicator, ordered by (key, rank).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
};

// Equal all-to-all: in and out hold size() chunks of in.numel() / size() elements each.
void all_to_all_equal(Communicator& comm, Tensor& out, const Tensor& in);

// Non-blocking all_to_all (same counts and layout) through send_recv_async; the chunk a rank keeps
// is copied at once. out is valid after wait(). Every rank posts its all-to-alls (and other
// point-to-point operations) in the same order, so several may be in flight together: this is what
// lets Ulysses pipeline the head groups of a layer.
std::unique_ptr<CommRequest> all_to_all_async(Communicator& comm, Tensor& out, const Tensor& in,
                                              const std::vector<int64_t>& send_counts,
                                              const std::vector<int64_t>& recv_counts);

// ---- local backend: ranks as threads of one process ------------------------------------
struct LocalOptions {
  // A rank waiting longer than this in one call fails (and with it every rank), naming the
  // ranks that have not arrived.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// Runs fn on `world` threads, each with its own Communicator of rank r. Returns when all are
// done; if any rank threw, every other rank is failed promptly and the first error is rethrown
// as seqpar::Error("rank R: <message>").
void run_local_ranks(int world, const std::function<void(Communicator&)>& fn, const LocalOptions& options = {});

}  // namespace seqpar
