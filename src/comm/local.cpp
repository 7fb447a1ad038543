// The `local` Communicator backend: every rank is a thread of this process.
//
// One World per run_local_ranks call holds what all its communicators share: one mutex and one
// condition variable (a handful of threads, so one wake-everyone signal is simpler than
// per-waiter ones and costs nothing measurable), the abort flag with the first failure, and
// which ranks' functions have returned. Each communicator (the world one and every split of it)
// is a Group: its members, the collective rendezvous, and the point-to-point mailboxes. Each rank
// holds a LocalComm: its view of one Group plus its own call counters.
//
// Collectives meet in numbered rendezvous: rank r's k-th rendezvous on a group posts a Post in
// slot k % 2 and waits until every member has entered rendezvous k. Two slots suffice: a rank
// reads the posts of round k before it enters round k + 1, and nobody can start round k + 2
// (overwriting slot k % 2) before everyone entered k + 1. A collective is one rendezvous to
// exchange pointers (the "exchange"), then copies and arithmetic straight from the peers'
// buffers, separated by plain synchronisations ("phases"), the last of which keeps every rank in
// the call until no peer reads its buffers any more. Once the exchange completed, every rank only
// copies and computes until the end of the call, so the phases always complete; they ignore the
// abort flag, and a rank that throws inside a call still passes its remaining phases on the way
// out (Phases' destructor). Without that, a rank leaving early (its own error, or an abort from
// elsewhere) would free a buffer a peer is still reading.
//
// Failure: any exception inside a call, or in a rank's function, aborts the World with that
// rank's message (the first one wins); every wait checks the flag, so every rank blocked in a
// call, or entering one later, throws at once. A wait that can never succeed (the awaited rank's
// function has returned) or that passes LocalOptions::timeout aborts the World too.
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <string_view>
#include <thread>
#include <tuple>

#include "comm/communicator.h"
#include "core/profile.h"

namespace seqpar {

namespace {

using Clock = std::chrono::steady_clock;

// ---- world: shared by every communicator of one run ------------------------------------------
struct World {
  World(int n, std::chrono::milliseconds t) : size(n), timeout(t), returned(static_cast<size_t>(n), false) {}

  const int size;
  const std::chrono::milliseconds timeout;
  std::mutex mu;
  std::condition_variable cv;
  bool aborted = false;
  int failed_rank = -1;  // world rank of the first failure
  std::string failed_message;
  bool failed_input = false;   // the first failure was an InputError
  std::vector<bool> returned;  // rank's function has returned: it will never call again

  // Records the first failure and wakes every waiter; later failures (mostly the "aborted
  // because ..." errors the first one causes) are dropped. Caller holds mu.
  void fail_locked(int world_rank, const std::string& message, bool input) {
    if (aborted) return;
    aborted = true;
    failed_rank = world_rank;
    failed_message = message;
    failed_input = input;
    cv.notify_all();
  }
  void fail(int world_rank, const std::string& message, bool input) {
    std::lock_guard<std::mutex> lock(mu);
    fail_locked(world_rank, message, input);
  }

  void throw_if_aborted_locked(std::string_view call) const {
    if (aborted) throw Error(fmt::format("{} aborted because rank {} failed: {}", call, failed_rank, failed_message));
  }

  // Waits until ready(). Throws when the world is aborted, and aborts it (then throws) when
  // stuck(timed_out) explains why the wait cannot succeed: stuck(false) names a peer that can
  // never come (its function returned), stuck(true) is the timeout message. Caller holds mu.
  template <typename Ready, typename Stuck>
  void wait_locked(std::unique_lock<std::mutex>& lock, int world_rank, std::string_view call, Ready ready,
                   Stuck stuck) {
    const auto deadline = Clock::now() + timeout;
    while (!ready()) {
      throw_if_aborted_locked(call);
      std::string why = stuck(false);
      if (why.empty() && Clock::now() >= deadline) why = stuck(true);
      if (!why.empty()) {
        fail_locked(world_rank, why, false);
        throw Error(why);
      }
      cv.wait_until(lock, deadline);
    }
  }
};

// What a rank contributes to one rendezvous. Pointers are host memory (CUDA tensors are staged).
struct Post {
  std::string_view op;  // the call: every rank of a rendezvous must be in the same one
  const void* in = nullptr;
  void* out = nullptr;  // all_reduce: where peers write their reduced slice
  DType dtype = DType::kF32;
  int64_t numel = 0;                       // of `in`
  const int64_t* send_counts = nullptr;    // all_to_all: size() entries
  int color = 0, key = 0;                  // split
};

// ---- group: one communicator's shared state --------------------------------------------------
struct Group {
  Group(std::shared_ptr<World> w, std::vector<int> m)
      : world(std::move(w)), members(std::move(m)), entered(members.size(), 0) {
    for (auto& slot : posts) slot.resize(members.size());
  }
  int size() const { return static_cast<int>(members.size()); }
  // "rank 2", or "rank 2 (world rank 6)" when the numbering differs from the world's.
  std::string who(int q) const {
    bool is_world = size() == world->size && members[q] == q;
    return is_world ? fmt::format("rank {}", q) : fmt::format("rank {} (world rank {})", q, members[q]);
  }

  std::shared_ptr<World> world;
  std::vector<int> members;        // world rank of each rank of this group
  std::vector<uint64_t> entered;   // rendezvous entered so far, per rank
  std::vector<Post> posts[2];      // by rendezvous parity
  // Point-to-point: (src, dst, seq) -> host copy of the sent bytes. seq counts the sends from src
  // to dst, so the k-th send matches the k-th receive whatever order requests are waited in.
  std::map<std::tuple<int, int, uint64_t>, Tensor> mailbox;
  // Split results being picked up: (rendezvous index of the split, color) -> group, ranks to come.
  struct Child {
    std::shared_ptr<Group> group;
    int pending = 0;
  };
  std::map<std::pair<uint64_t, int>, Child> children;
};

// ---- reductions: in rank order, so every rank and every run gets the same bits ---------------

// One step of a reduction. Sums of integers wrap (two's complement) instead of overflowing into
// undefined behaviour; max propagates NaN (once a NaN is in, it stays).
template <typename T>
T combine(T a, T b, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return op == ReduceOp::kSum ? static_cast<T>(static_cast<U>(a) + static_cast<U>(b)) : std::max(a, b);
  } else {
    if (op == ReduceOp::kSum) return a + b;
    if (std::isnan(a)) return a;
    return (std::isnan(b) || b > a) ? b : a;
  }
}

// dst[i] = ((srcs[0][off + i] (op) srcs[1][off + i]) (op) srcs[2][off + i]) ... for i < n: always
// in rank order, which makes the result bit-identical on every rank and every run. T is the
// element type, Acc the accumulator: f32 for f32, bf16 and f16 (bf16 and f16 are widened, combined in f32 and
// rounded once at the end), the type itself for integers. dst must not alias srcs.
template <typename T, typename Acc>
void reduce_typed(T* dst, const std::vector<const void*>& srcs, int64_t off, int64_t n, ReduceOp op) {
  auto widen = [](T x) -> Acc {
    if constexpr (std::is_same_v<T, bf16>)
      return bf16_to_f32(x);
    else if constexpr (std::is_same_v<T, f16>)
      return f16_to_f32(x);
    else
      return x;
  };
  std::vector<Acc> acc(static_cast<size_t>(n));  // (n,)
  const T* s0 = static_cast<const T*>(srcs[0]) + off;
  for (int64_t i = 0; i < n; ++i) acc[i] = widen(s0[i]);
  for (size_t q = 1; q < srcs.size(); ++q) {
    const T* s = static_cast<const T*>(srcs[q]) + off;
    for (int64_t i = 0; i < n; ++i) acc[i] = combine<Acc>(acc[i], widen(s[i]), op);
  }
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bf16>)
      dst[i] = f32_to_bf16(acc[i]);
    else if constexpr (std::is_same_v<T, f16>)
      dst[i] = f32_to_f16(acc[i]);
    else
      dst[i] = acc[i];
  }
}

void reduce_into(void* dst, const std::vector<const void*>& srcs, int64_t off, int64_t n, DType dtype, ReduceOp op) {
  if (n == 0) return;
  switch (dtype) {
    case DType::kF32: return reduce_typed<float, float>(static_cast<float*>(dst), srcs, off, n, op);
    case DType::kBF16: return reduce_typed<bf16, float>(static_cast<bf16*>(dst), srcs, off, n, op);
    case DType::kF16: return reduce_typed<f16, float>(static_cast<f16*>(dst), srcs, off, n, op);
    case DType::kI32: return reduce_typed<int32_t, int32_t>(static_cast<int32_t*>(dst), srcs, off, n, op);
    case DType::kI64: return reduce_typed<int64_t, int64_t>(static_cast<int64_t*>(dst), srcs, off, n, op);
  }
}

// Host bytes of a tensor. A CPU tensor is used in place. A CUDA tensor is staged through a host
// copy: correct for any device pair (copy_bytes), not fast; this backend has no device-to-device
// copies between the threads (on GPUs, the `nccl` backend is the fast path: comm/cuda/nccl_comm).
struct HostBytes {
  Tensor staged;  // defined only for a device tensor
  void* ptr = nullptr;

  HostBytes(const Tensor& t, bool copy_in) {
    if (t.device().is_cpu()) {
      ptr = t.raw();
    } else {
      staged = copy_in ? t.to(Device::cpu()) : Tensor::empty(t.shape(), t.dtype(), Device::cpu());
      ptr = staged.raw();
    }
  }
  // Copies the staged bytes back into the device tensor t (nothing for a CPU tensor).
  void write_back(Tensor& t) const {
    if (staged.defined()) t.copy_from(staged);
  }
};

// A collective of one rank: out = in, on the tensors' own device (no host staging), skipped when
// they are the same memory.
void copy_alone(Tensor& out, const Tensor& in) {
  if (out.raw() != in.raw() && in.numel() > 0) out.copy_from(in);
}

// Skips a copy onto itself: an in-place all_gather's own chunk, which peers may be reading.
void copy_host(void* dst, const void* src, size_t n) {
  if (n && dst != src) std::memcpy(dst, src, n);
}

// Balanced split of n elements over p ranks: rank r owns [begin(r), begin(r + 1)).
int64_t slice_begin(int64_t n, int p, int r) { return r * (n / p) + std::min<int64_t>(r, n % p); }

void check_tensor(const Tensor& t, std::string_view call, const char* name) {
  SEQPAR_CHECK(t.defined(), "{}: `{}` is an undefined tensor", call, name);
}

// ---- the per-rank communicator ---------------------------------------------------------------
class LocalComm final : public Communicator {
 public:
  LocalComm(std::shared_ptr<Group> group, int rank)
      : g_(std::move(group)),
        world_(*g_->world),
        rank_(rank),
        world_rank_(g_->members[static_cast<size_t>(rank)]),
        send_seq_(g_->members.size(), 0),
        recv_seq_(g_->members.size(), 0) {}

  int rank() const override { return rank_; }
  int size() const override { return g_->size(); }

  void all_reduce(Tensor& t, ReduceOp op) override {
    ProfileScope prof(t.device(), "comm.all_reduce");
    if (prof.active()) prof.detail(profile_bytes(t.nbytes()));
    guarded([&] {
      check_tensor(t, "all_reduce", "t");
      if (size() == 1) return;  // one rank: the reduction is the tensor itself (no host staging)
      HostBytes h(t, /*copy_in=*/true);
      auto all = exchange({.op = "all_reduce", .in = h.ptr, .out = h.ptr, .dtype = t.dtype(), .numel = t.numel()});
      Phases phases(*this, 2);
      check_same_input(all, "all_reduce", "t");
      // Rank r reduces slice r of every rank's tensor, then writes it into every rank's tensor.
      const int64_t lo = slice_begin(t.numel(), size(), rank_), hi = slice_begin(t.numel(), size(), rank_ + 1);
      const size_t es = dtype_size(t.dtype());
      std::vector<std::byte> slice(static_cast<size_t>(hi - lo) * es);
      reduce_into(slice.data(), inputs(all), lo, hi - lo, t.dtype(), op);
      phases.next();  // every rank has read every input
      for (const Post& p : all) copy_host(static_cast<std::byte*>(p.out) + lo * es, slice.data(), slice.size());
      phases.next();  // every slice is written everywhere
      h.write_back(t);
    });
  }

  void all_gather(Tensor& out, const Tensor& in) override {
    ProfileScope prof(in.device(), "comm.all_gather");
    if (prof.active()) prof.detail(profile_bytes(in.nbytes()));
    guarded([&] {
      check_tensor(out, "all_gather", "out");
      check_tensor(in, "all_gather", "in");
      SEQPAR_CHECK(out.dtype() == in.dtype() && out.numel() == size() * in.numel(),
                   "all_gather: out {} must hold {} ranks x in {} ({} elements of {})", out.str(), size(), in.str(),
                   size() * in.numel(), dtype_name(in.dtype()));
      if (size() == 1) return copy_alone(out, in);
      HostBytes hin(in, true), hout(out, false);
      auto all = exchange({.op = "all_gather", .in = hin.ptr, .dtype = in.dtype(), .numel = in.numel()});
      Phases phases(*this, 1);
      check_same_input(all, "all_gather", "in");
      const size_t bytes = in.nbytes();
      for (size_t q = 0; q < all.size(); ++q) copy_host(static_cast<std::byte*>(hout.ptr) + q * bytes, all[q].in, bytes);
      phases.next();
      hout.write_back(out);
    });
  }

  void reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    ProfileScope prof(in.device(), "comm.reduce_scatter");
    if (prof.active()) prof.detail(profile_bytes(in.nbytes()));
    guarded([&] {
      check_tensor(out, "reduce_scatter", "out");
      check_tensor(in, "reduce_scatter", "in");
      SEQPAR_CHECK(out.dtype() == in.dtype() && in.numel() == size() * out.numel(),
                   "reduce_scatter: in {} must hold {} ranks x out {} ({} elements of {})", in.str(), size(),
                   out.str(), size() * out.numel(), dtype_name(out.dtype()));
      if (size() == 1) return copy_alone(out, in);
      HostBytes hin(in, true);
      // Reduced into a separate buffer: out may be a view of this rank's own chunk of in.
      Tensor result = Tensor::empty(out.shape(), out.dtype(), Device::cpu());
      auto all = exchange({.op = "reduce_scatter", .in = hin.ptr, .dtype = in.dtype(), .numel = in.numel()});
      Phases phases(*this, 1);
      check_same_input(all, "reduce_scatter", "in");
      reduce_into(result.raw(), inputs(all), rank_ * out.numel(), out.numel(), out.dtype(), op);
      phases.next();
      out.copy_from(result);
    });
  }

  void all_to_all(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_counts,
                  const std::vector<int64_t>& recv_counts) override {
    ProfileScope prof(in.device(), "comm.all_to_all");
    if (prof.active()) prof.detail(profile_bytes(in.nbytes()));
    guarded([&] {
      check_tensor(out, "all_to_all", "out");
      check_tensor(in, "all_to_all", "in");
      SEQPAR_CHECK(out.dtype() == in.dtype(), "all_to_all: out {} and in {} differ in dtype", out.str(), in.str());
      check_counts(send_counts, in, "send_counts", "in");
      check_counts(recv_counts, out, "recv_counts", "out");
      if (size() == 1) {
        SEQPAR_CHECK(send_counts[0] == recv_counts[0], "all_to_all: {} sends itself {} elements but expects {}",
                     g_->who(rank_), send_counts[0], recv_counts[0]);
        return copy_alone(out, in);
      }
      HostBytes hin(in, true), hout(out, false);
      auto all = exchange(
          {.op = "all_to_all", .in = hin.ptr, .dtype = in.dtype(), .numel = in.numel(), .send_counts = send_counts.data()});
      Phases phases(*this, 1);
      const size_t es = dtype_size(in.dtype());
      int64_t recv_off = 0;
      for (int q = 0; q < size(); ++q) {
        const Post& p = all[static_cast<size_t>(q)];
        SEQPAR_CHECK(p.dtype == in.dtype(), "all_to_all: {} sends {} but {} expects {}", g_->who(q), dtype_name(p.dtype),
                     g_->who(rank_), dtype_name(in.dtype()));
        const int64_t n = p.send_counts[rank_];
        SEQPAR_CHECK(n == recv_counts[static_cast<size_t>(q)],
                     "all_to_all: {} has recv_counts[{}]={} but {} has send_counts[{}]={}", g_->who(rank_), q,
                     recv_counts[static_cast<size_t>(q)], g_->who(q), rank_, n);
        const int64_t send_off = std::accumulate(p.send_counts, p.send_counts + rank_, int64_t{0});
        copy_host(static_cast<std::byte*>(hout.ptr) + recv_off * es, static_cast<const std::byte*>(p.in) + send_off * es,
                  static_cast<size_t>(n) * es);
        recv_off += n;
      }
      phases.next();
      hout.write_back(out);
    });
  }

  std::unique_ptr<CommRequest> send_recv_async(const std::vector<P2POp>& sends,
                                               const std::vector<P2POp>& recvs) override;

  void barrier() override {
    guarded([&] { exchange({.op = "barrier"}); });
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    return guarded([&] {
      SEQPAR_CHECK(color >= 0, "split: color={} must be >= 0", color);
      auto all = exchange({.op = "split", .color = color, .key = key});
      const uint64_t round = rounds_ - 1;  // the same on every rank: names this split
      std::vector<int> ranks;              // parent ranks of the new group, ordered by (key, rank)
      for (int q = 0; q < size(); ++q)
        if (all[static_cast<size_t>(q)].color == color) ranks.push_back(q);
      std::stable_sort(ranks.begin(), ranks.end(),
                       [&](int a, int b) { return all[static_cast<size_t>(a)].key < all[static_cast<size_t>(b)].key; });
      std::vector<int> members;
      for (int q : ranks) members.push_back(g_->members[static_cast<size_t>(q)]);
      const int new_rank = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin());

      std::shared_ptr<Group> child;
      {
        std::lock_guard<std::mutex> lock(world_.mu);
        auto& entry = g_->children[{round, color}];
        if (!entry.group) {
          entry.group = std::make_shared<Group>(g_->world, members);
          entry.pending = static_cast<int>(members.size());
        }
        child = entry.group;
        if (--entry.pending == 0) g_->children.erase({round, color});
      }
      return std::unique_ptr<Communicator>(std::make_unique<LocalComm>(child, new_rank));
    });
  }

  // Runs one call: any failure inside it aborts the world (so peers never hang on a rank that
  // failed and caught its error), then propagates.
  template <typename F>
  auto guarded(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const InputError& e) {
      world_.fail(world_rank_, e.what(), true);
      throw;
    } catch (const std::exception& e) {
      world_.fail(world_rank_, e.what(), false);
      throw;
    }
  }

  const std::shared_ptr<Group>& group() const { return g_; }
  int world_rank() const { return world_rank_; }

 private:
  // The rest of a collective after its exchange: `count` plain synchronisations, each waiting for
  // every rank, none of them giving up (see the top of this file). The destructor passes the
  // ones not taken yet, so that a rank throwing inside the call still does.
  class Phases {
   public:
    Phases(LocalComm& comm, int count) : comm_(comm), left_(count) {}
    ~Phases() {
      while (left_ > 0) next();
    }
    Phases(const Phases&) = delete;
    Phases& operator=(const Phases&) = delete;
    void next() {
      --left_;
      comm_.phase();
    }

   private:
    LocalComm& comm_;
    int left_;
  };

  // Waits until every rank has entered this rendezvous; no abort check and no timeout: only
  // called between an exchange and the end of the call, where every rank is sure to come.
  void phase() {
    std::unique_lock<std::mutex> lock(world_.mu);
    const uint64_t k = rounds_++;
    g_->entered[static_cast<size_t>(rank_)] = k + 1;
    world_.cv.notify_all();
    world_.cv.wait(lock, [&] {
      for (uint64_t e : g_->entered)
        if (e < k + 1) return false;
      return true;
    });
  }

  // Posts `mine` for this rank's next rendezvous on the group, waits for every rank, returns all
  // posts in rank order. Every rank must be in the same call.
  std::vector<Post> exchange(const Post& mine) {
    std::unique_lock<std::mutex> lock(world_.mu);
    world_.throw_if_aborted_locked(mine.op);
    const uint64_t k = rounds_++;
    std::vector<Post>& slot = g_->posts[k % 2];
    slot[static_cast<size_t>(rank_)] = mine;
    g_->entered[static_cast<size_t>(rank_)] = k + 1;
    world_.cv.notify_all();
    auto arrived = [&](int q) { return g_->entered[static_cast<size_t>(q)] >= k + 1; };
    world_.wait_locked(
        lock, world_rank_, mine.op,
        [&] {
          for (int q = 0; q < size(); ++q)
            if (!arrived(q)) return false;
          return true;
        },
        [&](bool timed_out) { return describe_missing(mine.op, k, arrived, timed_out); });
    std::vector<Post> all = slot;
    lock.unlock();
    for (int q = 0; q < size(); ++q)
      SEQPAR_CHECK(all[static_cast<size_t>(q)].op == all[0].op,
                   "collective mismatch in call #{} of a {}-rank communicator: {} called {}, {} called {}", k + 1,
                   size(), g_->who(0), all[0].op, g_->who(q), all[static_cast<size_t>(q)].op);
    return all;
  }

  // Why rendezvous k cannot complete: the ranks that have not arrived. Empty when it may still
  // complete (no timeout yet and every missing rank can still come). Caller holds the mutex.
  template <typename Arrived>
  std::string describe_missing(std::string_view op, uint64_t k, Arrived arrived, bool timed_out) const {
    std::vector<std::string> missing;
    bool any_returned = false;
    for (int q = 0; q < size(); ++q) {
      if (arrived(q)) continue;
      bool gone = world_.returned[static_cast<size_t>(g_->members[static_cast<size_t>(q)])];
      any_returned |= gone;
      missing.push_back(g_->who(q) + (gone ? " (its function has returned)" : ""));
    }
    if (!timed_out && !any_returned) return {};
    std::string head = timed_out ? fmt::format("{} timed out after {} ms", op, world_.timeout.count())
                                 : fmt::format("{} can never complete", op);
    return fmt::format("{} on {} (call #{} of a {}-rank communicator): {} did not arrive", head, g_->who(rank_), k + 1,
                       size(), fmt::join(missing, ", "));
  }

  void check_same_input(const std::vector<Post>& all, std::string_view call, const char* name) const {
    for (int q = 0; q < size(); ++q) {
      const Post& p = all[static_cast<size_t>(q)];
      SEQPAR_CHECK(p.dtype == all[0].dtype && p.numel == all[0].numel,
                   "{}: every rank's `{}` must have the same dtype and element count, but {} has {} x {} and {} has "
                   "{} x {}",
                   call, name, g_->who(0), all[0].numel, dtype_name(all[0].dtype), g_->who(q), p.numel,
                   dtype_name(p.dtype));
    }
  }

  static std::vector<const void*> inputs(const std::vector<Post>& all) {
    std::vector<const void*> v;
    for (const Post& p : all) v.push_back(p.in);
    return v;
  }

  void check_counts(const std::vector<int64_t>& counts, const Tensor& t, const char* name, const char* tname) const {
    SEQPAR_CHECK(static_cast<int>(counts.size()) == size(), "all_to_all: {} has {} entries, the communicator {} ranks",
                 name, counts.size(), size());
    int64_t sum = 0;
    for (size_t q = 0; q < counts.size(); ++q) {
      SEQPAR_CHECK(counts[q] >= 0, "all_to_all: {}[{}]={} must be >= 0", name, q, counts[q]);
      sum += counts[q];
    }
    SEQPAR_CHECK(sum == t.numel(), "all_to_all: {} sum to {} but `{}` {} has {} elements", name, sum, tname, t.str(),
                 t.numel());
  }

  std::shared_ptr<Group> g_;
  World& world_;
  const int rank_;
  const int world_rank_;
  uint64_t rounds_ = 0;                  // rendezvous entered on this group
  std::vector<uint64_t> send_seq_;       // sends posted to each peer
  std::vector<uint64_t> recv_seq_;       // receives posted from each peer
};

// Receives posted by send_recv_async, completed in wait(). Holds the group alive, so it may
// outlive the LocalComm that made it.
class LocalRequest final : public CommRequest {
 public:
  struct Recv {
    int peer;
    uint64_t seq;
    Tensor buf;
  };
  LocalRequest(const LocalComm& comm, std::vector<Recv> recvs)
      : g_(comm.group()), world_rank_(comm.world_rank()), rank_(comm.rank()), recvs_(std::move(recvs)) {}

  void wait() override {
    // Wall time on the CPU; on a GPU the events bracket the host-staged receives.
    ProfileScope prof(recvs_.empty() ? Device::cpu() : recvs_.front().buf.device(), "comm.send_recv wait");
    comm_guard([&] {
      World& world = *g_->world;
      for (; next_ < recvs_.size(); ++next_) {
        Recv& r = recvs_[next_];
        const auto key = std::make_tuple(r.peer, rank_, r.seq);
        Tensor msg;
        {
          std::unique_lock<std::mutex> lock(world.mu);
          world.wait_locked(
              lock, world_rank_, "send_recv", [&] { return g_->mailbox.count(key) > 0; },
              [&](bool timed_out) -> std::string {
                bool gone = world.returned[static_cast<size_t>(g_->members[static_cast<size_t>(r.peer)])];
                if (timed_out)
                  return fmt::format("send_recv timed out after {} ms on {}: message #{} from {} never came{}",
                                     world.timeout.count(), g_->who(rank_), r.seq + 1, g_->who(r.peer),
                                     gone ? " (its function has returned)" : "");
                if (gone)
                  return fmt::format("send_recv can never complete on {}: {} returned from its function without "
                                     "sending it message #{}",
                                     g_->who(rank_), g_->who(r.peer), r.seq + 1);
                return {};
              });
          auto it = g_->mailbox.find(key);
          msg = std::move(it->second);
          g_->mailbox.erase(it);
        }
        SEQPAR_CHECK(msg.dtype() == r.buf.dtype() && msg.numel() == r.buf.numel(),
                     "send_recv: {} receives into {} ({} elements of {}) but the matching send from {} (message #{}) "
                     "is {} elements of {}",
                     g_->who(rank_), r.buf.str(), r.buf.numel(), dtype_name(r.buf.dtype()), g_->who(r.peer),
                     r.seq + 1, msg.numel(), dtype_name(msg.dtype()));
        r.buf.copy_from(msg);
      }
    });
  }

 private:
  template <typename F>
  void comm_guard(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      g_->world->fail(world_rank_, e.what(), dynamic_cast<const InputError*>(&e) != nullptr);
      throw;
    }
  }

  std::shared_ptr<Group> g_;
  int world_rank_;
  int rank_;
  std::vector<Recv> recvs_;
  size_t next_ = 0;  // receives before this one are complete
};

std::unique_ptr<CommRequest> LocalComm::send_recv_async(const std::vector<P2POp>& sends,
                                                        const std::vector<P2POp>& recvs) {
  return guarded([&]() -> std::unique_ptr<CommRequest> {
    for (const auto* ops : {&sends, &recvs})
      for (const P2POp& op : *ops) {
        SEQPAR_CHECK(op.peer >= 0 && op.peer < size(), "send_recv: peer {} is not a rank of this {}-rank communicator",
                     op.peer, size());
        check_tensor(op.buf, "send_recv", "buf");
      }
    // Copy every send first (outside the lock): the caller may reuse its buffers on return.
    std::vector<Tensor> copies;
    for (const P2POp& op : sends) copies.push_back(op.buf.to(Device::cpu()));
    {
      std::lock_guard<std::mutex> lock(world_.mu);
      world_.throw_if_aborted_locked("send_recv");
      for (size_t i = 0; i < sends.size(); ++i) {
        const int peer = sends[i].peer;
        g_->mailbox.emplace(std::make_tuple(rank_, peer, send_seq_[static_cast<size_t>(peer)]++), std::move(copies[i]));
      }
      world_.cv.notify_all();
    }
    std::vector<LocalRequest::Recv> pending;
    for (const P2POp& op : recvs) pending.push_back({op.peer, recv_seq_[static_cast<size_t>(op.peer)]++, op.buf});
    return std::make_unique<LocalRequest>(*this, std::move(pending));
  });
}

}  // namespace

void all_to_all_equal(Communicator& comm, Tensor& out, const Tensor& in) {
  const int p = comm.size();
  SEQPAR_CHECK(in.numel() % p == 0, "all_to_all_equal: in {} has {} elements, not a multiple of the {} ranks",
               in.str(), in.numel(), p);
  SEQPAR_CHECK(out.numel() == in.numel(), "all_to_all_equal: out {} and in {} must have the same element count",
               out.str(), in.str());
  std::vector<int64_t> counts(static_cast<size_t>(p), in.numel() / p);
  comm.all_to_all(out, in, counts, counts);
}

std::unique_ptr<CommRequest> all_to_all_async(Communicator& comm, Tensor& out, const Tensor& in,
                                              const std::vector<int64_t>& send_counts,
                                              const std::vector<int64_t>& recv_counts) {
  const int p = comm.size(), me = comm.rank();
  SEQPAR_CHECK(static_cast<int>(send_counts.size()) == p && static_cast<int>(recv_counts.size()) == p,
               "all_to_all_async: {} send and {} receive counts for {} ranks", send_counts.size(), recv_counts.size(), p);
  Tensor in_flat = in.view({in.numel()}), out_flat = out.view({out.numel()});
  std::vector<P2POp> sends, recvs;
  int64_t send_at = 0, recv_at = 0;
  for (int j = 0; j < p; ++j) {
    const int64_t s = send_counts[static_cast<size_t>(j)], r = recv_counts[static_cast<size_t>(j)];
    if (j == me) {
      SEQPAR_CHECK_EQ(s, r, "all_to_all_async: a rank's chunk to itself");
      out_flat.rows(recv_at, recv_at + r).copy_from(in_flat.rows(send_at, send_at + s));
    } else {
      if (s > 0) sends.push_back({j, in_flat.rows(send_at, send_at + s)});
      if (r > 0) recvs.push_back({j, out_flat.rows(recv_at, recv_at + r)});
    }
    send_at += s;
    recv_at += r;
  }
  SEQPAR_CHECK(send_at == in.numel() && recv_at == out.numel(),
               "all_to_all_async: counts sum to {} sent / {} received, tensors hold {} / {}", send_at, recv_at,
               in.numel(), out.numel());
  return comm.send_recv_async(sends, recvs);
}

void run_local_ranks(int world, const std::function<void(Communicator&)>& fn, const LocalOptions& options) {
  SEQPAR_CHECK(world >= 1, "run_local_ranks: world={} must be >= 1", world);
  SEQPAR_CHECK(options.timeout.count() > 0, "run_local_ranks: timeout={} ms must be > 0", options.timeout.count());
  auto state = std::make_shared<World>(world, options.timeout);
  std::vector<int> members(static_cast<size_t>(world));
  std::iota(members.begin(), members.end(), 0);
  auto group = std::make_shared<Group>(state, members);

  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::string error;
      bool failed = false, input = false;
      try {
        LocalComm comm(group, r);
        fn(comm);
      } catch (const std::exception& e) {
        failed = true;
        input = dynamic_cast<const InputError*>(&e) != nullptr;
        error = e.what();
      } catch (...) {
        failed = true;
        error = "unknown exception (not a std::exception)";
      }
      std::lock_guard<std::mutex> lock(state->mu);
      if (failed) state->fail_locked(r, error, input);
      state->returned[static_cast<size_t>(r)] = true;
      state->cv.notify_all();
    });
  }
  for (auto& t : threads) t.join();
  if (state->aborted) {
    std::string message = fmt::format("rank {}: {}", state->failed_rank, state->failed_message);
    if (state->failed_input) throw InputError(message);
    throw Error(message);
  }
}

}  // namespace seqpar
