// The `nccl` Communicator backend: one process per GPU, NCCL between them, rendezvous through
// the TCP store (comm/tcp_store.h): rank 0 makes the NCCL unique id and publishes it, the others
// read it.
//
// Streams. Collectives (all_reduce, all_gather, reduce_scatter, all_to_all) are queued on the
// calling thread's current stream (core/cuda/stream.h), like every kernel: stream-ordered after
// the work that produced their inputs, no host synchronisation. send_recv_async runs on the
// communicator's own stream, after the current stream's work so far; its request's wait() makes
// the current stream wait for it (no host block), so a ring posts the next hop, computes, then
// waits. Send buffers are copied first (on the current stream), so the caller may reuse them at
// once, as the contract says. CPU tensors work too, staged through the GPU (slow; for scalars).
// barrier() is the one host-blocking call.
//
// Failure handling, so that nothing hangs:
// - every communicator made from one make_nccl_communicator call (the world and its splits) shares
//   one watchdog thread. It polls, every 50 ms, each queued operation's completion event and
//   ncclCommGetAsyncError; an operation pending longer than NcclOptions::timeout, or an NCCL
//   asynchronous error, aborts (ncclCommAbort) every communicator of the job in this process and
//   publishes "rank R: <why>" in the store. Once a second it also reads that key, so a failure on
//   any rank aborts every rank within about a second. The abort also unblocks a host stuck in a
//   stream synchronisation behind a hung collective;
// - a failure inside a call on this rank (a bad argument, an NCCL error) is published the same
//   way before it is thrown;
// - after an abort, every call throws "<call> on rank R: communicator aborted: <first failure>".
// A process that dies outright is seen by the peers as an operation that never completes (or an
// NCCL socket error): the timeout covers it, and `seqpar launch` ends the whole job anyway.
//
// Numerics: reductions are NCCL's (ring or tree): bit-identical on every rank, but the order of
// the sum is NCCL's, not rank order, so results differ from the local backend in the last bits.
// bf16 (f16) sums are NCCL's native bf16 (f16) reduction (rounded to bf16 at each step), not the contract's
// single rounding of an f32 sum: reduce f32 tensors where that matters (see docs/launch.md).
// kMax of floats follows NCCL (NaN propagation is not guaranteed).
#pragma once

#if defined(SEQPAR_WITH_CUDA)
#include <chrono>
#include <memory>

#include "comm/communicator.h"

namespace seqpar {

class TcpStore;

struct NcclOptions {
  // Longest an operation may stay queued before the job is aborted; also bounds init and split.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

// Collective over the `world` ranks of the job sharing `store` (every rank calls it, in the same
// order as its other store rounds). The communicator lives on CUDA device `device` (usually the
// local rank). A rank that does not arrive within options.timeout makes the others fail, naming it.
std::unique_ptr<Communicator> make_nccl_communicator(std::shared_ptr<TcpStore> store, int rank, int world, int device,
                                                     const NcclOptions& options = {});

}  // namespace seqpar
#endif
