#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "core/host_threads.h"

namespace seqpar {

namespace {

// fn(begin, end) over [0, n) cut into `threads` ranges of whole kFlatAlign blocks, the calling
// thread taking the first. Element-wise work, so the result does not depend on the cut.
template <typename Fn>
void parallel_ranges(int64_t n, int threads, Fn fn) {
  const int64_t per = LlamaParams::padded((n + threads - 1) / std::max(threads, 1));
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  for (int t = 1; t < threads && t * per < n; ++t) {
    pool.emplace_back([&, t] {
      try {
        fn(t * per, std::min(n, (t + 1) * per));
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  try {
    fn(0, std::min(n, per));
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

// A host allocation the user asked for, its failure named by the setting. Host memory is zeroed
// by `threads` threads (the first touch of tens of GiB: one thread takes minutes on an 8B model).
Tensor host_state(int64_t n, DType dtype, Allocator& alloc, const char* what, int threads = 1) {
  try {
    Tensor t = Tensor::empty({n}, dtype, alloc);
    if (t.device().is_cpu() && threads > 1)
      parallel_ranges(n, threads, [&](int64_t lo, int64_t hi) { t.rows(lo, hi).zero(); });
    else
      t.zero();
    return t;
  } catch (const Error& e) {
    throw InputError(fmt::format("offload_optimizer=cpu: allocating {} ({:.2f} GiB of host memory) failed: {}", what,
                                 static_cast<double>(n) * dtype_size(dtype) / (1ll << 30), e.what()));
  }
}

}  // namespace

Tensor host_gradient_buffer(int64_t n, Device device, int threads) {
  Tensor t;
  try {
    t = Tensor::empty({n}, DType::kF32, host_allocator_for(device, /*pinned=*/true));
  } catch (const Error& e) {
    throw InputError(fmt::format("offload_gradients=true: allocating the host gradients ({:.2f} GiB of pinned host "
                                 "memory) failed: {}",
                                 static_cast<double>(n) * 4 / (1ll << 30), e.what()));
  }
  parallel_ranges(n, std::max(threads, 1), [&](int64_t lo, int64_t hi) { t.rows(lo, hi).zero(); });
  return t;
}

double host_sum_squares(const Tensor& x, int threads) {
  SEQPAR_CHECK(x.device().is_cpu() && x.shape().size() == 1, "host_sum_squares: a flat host tensor, not {}", x.str());
  threads = std::max(threads, 1);
  std::vector<double> part(static_cast<size_t>(threads), 0.0);
  const int64_t per = LlamaParams::padded((x.numel() + threads - 1) / threads);
  parallel_ranges(x.numel(), threads, [&](int64_t lo, int64_t hi) { part[lo / per] = sum_squares(x.rows(lo, hi)); });
  double sum = 0;
  for (double v : part) sum += v;  // in range order: the same sum for the same threads
  return sum;
}

// The offload's copy stream and its staging: two f32 gradient chunks in, two compute-dtype weight
// chunks out, pinned; and the CPU threads that update each chunk.
struct AdamW::Stream {
  CopyStream copies;
  HostThreads threads;
  Tensor grad_in[2], weight_out[2];
  int64_t in_ticket[2] = {-1, -1}, out_ticket[2] = {-1, -1};
  Stream(Device device, DType compute, int64_t chunk, int threads) : copies(device), threads(threads) {
    Allocator& pinned = host_allocator_for(device, /*pinned=*/true);
    for (int b = 0; b < 2; ++b) {
      grad_in[b] = host_state(chunk, DType::kF32, pinned, "the optimizer's gradient staging");
      weight_out[b] = host_state(chunk, compute, pinned, "the optimizer's weight staging");
    }
  }
};

// An overlapped step (step_flat_overlapped): the thread running it and how far its weights are.
struct AdamW::Overlap {
  std::thread worker;
  std::mutex mu;
  std::condition_variable cv;
  int64_t written = 0;  // the weights [0, written) are in `out`
  bool done = false;
  std::exception_ptr error;
};

AdamW::~AdamW() {
  try {
    finish();
  } catch (...) {  // a destructor does not throw (the step that failed is being abandoned)
  }
}

bool AdamW::overlappable(const FlatRef& out) const {
  return flat_ && place_.host && place_.layout.world == 1 && place_.layout.regions.size() == 1 &&
         !(out.t.device().is_cpu() && device_.is_cuda());
}

float AdamW::step_flat_overlapped(const FlatRef& grads, const FlatRef& out, double total_norm, float grad_unscale) {
  SEQPAR_CHECK(overlappable(out), "AdamW::step_flat_overlapped: an offloaded whole layout with the weights on {}",
               device_.str());
  SEQPAR_CHECK(grads.t.dtype() == DType::kF32, "AdamW::step_flat: f32 gradients, got {}", grads.t.str());
  finish();
  ++step_;
  const float clip = clip_coefficient(total_norm, config_.clip);
  const float coef = clip * grad_unscale;
  overlap_ = std::make_unique<Overlap>();
  Overlap& o = *overlap_;
  // The worker's own copy of what a later set_lr() or step may change.
  o.worker = std::thread([this, &o, grads, out, coef, adamw = config_.adamw, step = step_] {
    try {
      set_current_device(device_);
      auto publish = [&o](int64_t end) {
        {
          std::lock_guard<std::mutex> lock(o.mu);
          o.written = std::max(o.written, end);
        }
        o.cv.notify_all();
      };
      // The gradients are complete (the norm was read from them) and the weights unread until
      // published: the copies need not wait for the compute stream, which is the next forward's.
      step_pieces_on_host(grads, out, coef, adamw, step, publish, /*after_current=*/false);
    } catch (...) {
      std::lock_guard<std::mutex> lock(o.mu);
      o.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(o.mu);
      o.done = true;
    }
    o.cv.notify_all();
  });
  return clip;
}

void AdamW::wait_weights(int64_t flat_end) {
  if (!overlap_) return;
  Overlap& o = *overlap_;
  bool failed = false;
  {
    std::unique_lock<std::mutex> lock(o.mu);
    o.cv.wait(lock, [&] { return o.done || o.written >= flat_end; });
    failed = o.error != nullptr;
  }
  if (failed) finish();  // rethrows the step's error
}

void AdamW::finish() {
  if (!overlap_) return;
  std::unique_ptr<Overlap> o = std::move(overlap_);
  o->worker.join();
  if (o->error) std::rethrow_exception(o->error);
}

AdamW::AdamW(const LlamaConfig& model_config, const OptimizerConfig& config, const LlamaParams& params, Device device)
    : config_(config), model_config_(model_config), device_(device) {
  const auto named = params.named();
  has_master_ = !named.empty() && named.front().second->dtype() != DType::kF32;
  // One buffer each, in the weights' flat layout: a step over whole buffers is one pass (step()).
  m_ = LlamaParams::zeros(model_config, DType::kF32, device, /*one_buffer=*/true);
  v_ = LlamaParams::zeros(model_config, DType::kF32, device, /*one_buffer=*/true);
  if (!has_master_) return;
  master_ = LlamaParams::zeros(model_config, DType::kF32, device, /*one_buffer=*/true);
  auto dst = master_.named();
  for (size_t i = 0; i < dst.size(); ++i) cast(*dst[i].second, *named[i].second);
}

AdamW::AdamW(const LlamaConfig& model_config, const OptimizerConfig& config, const LlamaParams& initial, DType compute,
             Device device, OptimizerPlacement placement)
    : config_(config), model_config_(model_config), device_(device), flat_(true), place_(std::move(placement)) {
  const ShardLayout& L = place_.layout;
  SEQPAR_CHECK_EQ(L.total, LlamaParams::flat_layout(model_config).total, "AdamW: the layout's buffer");
  SEQPAR_CHECK(place_.threads >= 1, "AdamW: threads={}", place_.threads);
  // Offloaded, the master weights are the weights' only copy next to the state.
  has_master_ = compute != DType::kF32 || place_.force_master || place_.host;
  const Device where = place_.host ? Device::cpu() : device;
  // Offloaded: host memory (pageable: only the staging is copied by DMA; on the CPU backend accounted
  // apart from the "device", as the plan counts it).
  Allocator& state_alloc = place_.host ? host_allocator_for(device, /*pinned=*/false) : allocator_for(device);
  const int fill_threads = place_.host ? place_.threads : 1;
  m_shard_ = host_state(L.shard_len, DType::kF32, state_alloc, "the AdamW first moments", fill_threads);
  v_shard_ = host_state(L.shard_len, DType::kF32, state_alloc, "the AdamW second moments", fill_threads);
  SEQPAR_CHECK(place_.chunk >= 1 && place_.chunk <= kStreamChunk, "AdamW: chunk={}", place_.chunk);
  if (place_.host)
    stream_ = std::make_unique<Stream>(device, compute, std::min(place_.chunk, L.shard_len), place_.threads);
  if (!has_master_) return;
  master_shard_ = host_state(L.shard_len, DType::kF32, state_alloc, "the f32 master weights", fill_threads);
  const FlatRef master{master_shard_, false};
  // The f32 of the compute weights' rounding (what the model computes with), kStreamChunk elements at
  // a time (never a whole-model temporary: one region is the whole model without ZeRO), host chunks
  // by the step's threads.
  struct Piece {
    size_t k;
    int64_t lo, hi;
  };
  std::vector<Piece> pieces;
  for (size_t k = 0; k < L.regions.size(); ++k) {
    const auto [lo, hi] = L.piece(k);
    for (int64_t a = lo; a < hi; a += kStreamChunk) pieces.push_back({k, a, std::min(hi, a + kStreamChunk)});
  }
  auto fill = [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const Piece& p = pieces[static_cast<size_t>(i)];
      Tensor rounded = Tensor::empty({p.hi - p.lo}, compute, where);
      read_flat_range(rounded, initial, model_config, p.lo, p.hi);
      Tensor w = master.range(L, p.k, p.lo, p.hi);
      cast(w, rounded);
    }
  };
  const int64_t n = static_cast<int64_t>(pieces.size());
  if (!where.is_cpu() || !stream_) {
    fill(0, n);
    return;
  }
  stream_->threads.ranges(n, 1, fill);
}

LlamaParams& AdamW::weights(LlamaParams& params) {
  SEQPAR_CHECK(!flat_, "AdamW::weights: the optimizer is flat (use full_state)");
  return has_master_ ? master_ : params;
}
LlamaParams& AdamW::exp_avg() {
  SEQPAR_CHECK(!flat_, "AdamW::exp_avg: the optimizer is flat (use full_state)");
  return m_;
}
LlamaParams& AdamW::exp_avg_sq() {
  SEQPAR_CHECK(!flat_, "AdamW::exp_avg_sq: the optimizer is flat (use full_state)");
  return v_;
}

int64_t AdamW::host_state_bytes() const {
  if (!offloaded()) return 0;
  int64_t b = static_cast<int64_t>(m_shard_.nbytes() + v_shard_.nbytes()) +
              (has_master_ ? static_cast<int64_t>(master_shard_.nbytes()) : 0);
  for (int i = 0; i < 2; ++i) b += static_cast<int64_t>(stream_->grad_in[i].nbytes() + stream_->weight_out[i].nbytes());
  return b;
}

int64_t AdamW::stream_chunk_for(const LlamaConfig& model_config) {
  return std::min(kStreamChunk, LlamaParams::flat_layout(model_config).layer_elems);
}

int64_t AdamW::shard_len_for(int64_t total, int world) {
  // Shards start on kFlatAlign-element boundaries, as the tensors do (vector loads).
  return LlamaParams::padded((total + world - 1) / world);
}

double AdamW::grad_norm(LlamaParams& grads) {
  // On CUDA one sum over the one buffer (its gaps are zero): one host wait instead of one per tensor.
  if (grads.all_in_flat() && grads.flat.device().is_cuda()) return std::sqrt(sum_squares(grads.flat));
  double ss = 0;
  for (auto& [name, g] : grads.named()) ss += sum_squares(*g);
  return std::sqrt(ss);
}

float AdamW::step(LlamaParams& params, LlamaParams& grads, double total_norm, float grad_unscale) {
  SEQPAR_CHECK(!flat_, "AdamW::step: the optimizer is flat (step_flat)");
  ++step_;
  const float clip = clip_coefficient(total_norm, config_.clip);
  const float coef = clip * grad_unscale;
  LlamaParams& w = weights(params);
  // Every tensor in one buffer of the same layout (the model's weights and gradients, the state
  // here): one pass over the buffers; their alignment padding is zero everywhere and stays zero.
  const bool whole = params.all_in_flat() && grads.all_in_flat() && m_.all_in_flat() && v_.all_in_flat() &&
                     w.all_in_flat() && grads.flat.dtype() == DType::kF32 &&
                     params.flat.numel() == m_.flat.numel() && grads.flat.numel() == m_.flat.numel();
  if (whole) {
    if (has_master_) {
      adamw_step_rounded(w.flat, m_.flat, v_.flat, grads.flat, params.flat, config_.adamw, step_, coef);
    } else {
      adamw_step(w.flat, m_.flat, v_.flat, grads.flat, config_.adamw, step_, coef);
    }
    return clip;
  }
  auto p = params.named();
  auto g = grads.named();
  auto m = m_.named();
  auto v = v_.named();
  auto wn = w.named();
  for (size_t i = 0; i < p.size(); ++i) {
    adamw_step(*wn[i].second, *m[i].second, *v[i].second, *g[i].second, config_.adamw, step_, coef);
    if (has_master_) cast(*p[i].second, *wn[i].second);
  }
  return clip;
}

float AdamW::step_flat(const FlatRef& grads, const FlatRef& out, double total_norm, float grad_unscale) {
  finish();
  SEQPAR_CHECK(flat_, "AdamW::step_flat: the optimizer is per tensor (step)");
  SEQPAR_CHECK(grads.t.dtype() == DType::kF32, "AdamW::step_flat: f32 gradients, got {}", grads.t.str());
  ++step_;
  const float clip = clip_coefficient(total_norm, config_.clip);
  const float coef = clip * grad_unscale;
  if (place_.host) {
    step_pieces_on_host(grads, out, coef, config_.adamw, step_);
  } else {
    step_pieces_on_device(grads, out, coef);
  }
  return clip;
}

// The state on the device: each piece in one go, the rounded weights cast into `out` (through a
// device buffer when out is in host memory: ZeRO-3's host weights without optimizer offload).
void AdamW::step_pieces_on_device(const FlatRef& grads, const FlatRef& out, float coef) {
  const ShardLayout& L = place_.layout;
  for (size_t k = 0; k < L.regions.size(); ++k) {
    const auto [lo, hi] = L.piece(k);
    if (lo == hi) continue;
    Tensor m = FlatRef{m_shard_, false}.range(L, k, lo, hi), v = FlatRef{v_shard_, false}.range(L, k, lo, hi);
    const Tensor g = grads.range(L, k, lo, hi);
    Tensor o = out.range(L, k, lo, hi);
    if (!has_master_) {
      adamw_step(o, m, v, g, config_.adamw, step_, coef);
      continue;
    }
    Tensor w = FlatRef{master_shard_, false}.range(L, k, lo, hi);
    if (o.device() == device_) {
      adamw_step_rounded(w, m, v, g, o, config_.adamw, step_, coef);
    } else {
      adamw_step(w, m, v, g, config_.adamw, step_, coef);
      Tensor tmp = Tensor::empty({hi - lo}, o.dtype(), device_);
      cast(tmp, w);
      o.copy_from(tmp);
    }
  }
}

// The state in host memory: chunks of the pieces streamed through the staging (see the header).
void AdamW::step_pieces_on_host(const FlatRef& grads, const FlatRef& out, float coef, const AdamWConfig& adamw,
                                int64_t step, const std::function<void(int64_t)>& published, bool after_current) {
  const ShardLayout& L = place_.layout;
  struct Chunk {
    size_t k;
    int64_t lo, hi;
  };
  std::vector<Chunk> chunks;
  for (size_t k = 0; k < L.regions.size(); ++k) {
    const auto [lo, hi] = L.piece(k);
    for (int64_t a = lo; a < hi; a += place_.chunk) chunks.push_back({k, a, std::min(hi, a + place_.chunk)});
  }
  Stream& s = *stream_;
  // Out in host memory while the model lives on a GPU (ZeRO-3's host weights): written directly.
  const bool out_on_host = out.t.device().is_cpu() && device_.is_cuda();
  // Gradients already in host memory (offload_gradients): read where they are, nothing staged.
  const bool grads_on_host = grads.t.device().is_cpu() && device_.is_cuda();
  auto fetch = [&](size_t i) {
    if (grads_on_host) return;
    const Chunk& c = chunks[i];
    const int b = static_cast<int>(i % 2);
    s.in_ticket[b] = s.copies.copy(s.grad_in[b].rows(0, c.hi - c.lo), grads.range(L, c.k, c.lo, c.hi), after_current);
  };
  if (!chunks.empty()) fetch(0);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Chunk& c = chunks[i];
    const int b = static_cast<int>(i % 2);
    const int64_t n = c.hi - c.lo;
    if (i + 1 < chunks.size()) fetch(i + 1);  // its buffer's previous chunk was consumed last iteration
    if (!grads_on_host) s.copies.host_wait(s.in_ticket[b]);
    if (s.out_ticket[b] >= 0) {
      s.copies.host_wait(s.out_ticket[b]);  // chunk i-2's weights have left
      if (published) published(chunks[i - 2].hi);
    }
    const Tensor g = grads_on_host ? grads.range(L, c.k, c.lo, c.hi) : s.grad_in[b].rows(0, n);
    Tensor m = FlatRef{m_shard_, false}.range(L, c.k, c.lo, c.hi),
           v = FlatRef{v_shard_, false}.range(L, c.k, c.lo, c.hi);
    Tensor w = FlatRef{master_shard_, false}.range(L, c.k, c.lo, c.hi);
    Tensor staged = s.weight_out[b].rows(0, n);
    Tensor direct = out_on_host ? out.range(L, c.k, c.lo, c.hi) : Tensor();
    host_adamw_chunk(s.threads, w, m, v, g, out_on_host ? direct : staged, adamw, step, coef);
    if (!out_on_host) s.out_ticket[b] = s.copies.copy(out.range(L, c.k, c.lo, c.hi), staged, after_current);
  }
  for (int b = 0; b < 2; ++b)
    if (s.out_ticket[b] >= 0) s.copies.host_wait(s.out_ticket[b]);
  for (int b = 0; b < 2; ++b) s.out_ticket[b] = s.in_ticket[b] = -1;
  if (published) published(L.total);
}

void host_adamw_chunk(HostThreads& threads, const Tensor& w, const Tensor& m, const Tensor& v, const Tensor& g,
                      const Tensor& rounded, const AdamWConfig& adamw, int64_t step, float coef) {
  threads.ranges(w.numel(), LlamaParams::kFlatAlign, [&](int64_t a, int64_t e) {
    Tensor wi = w.rows(a, e), mi = m.rows(a, e), vi = v.rows(a, e), oi = rounded.rows(a, e);
    adamw_step_rounded(wi, mi, vi, g.rows(a, e), oi, adamw, step, coef);
  });
}

void AdamW::write_weights(const FlatRef& out) {
  finish();
  SEQPAR_CHECK(flat_ && has_master_, "AdamW::write_weights: a flat optimizer with master weights");
  const ShardLayout& L = place_.layout;
  for (size_t k = 0; k < L.regions.size(); ++k) {
    const auto [lo, hi] = L.piece(k);
    if (lo == hi) continue;
    const Tensor w = FlatRef{master_shard_, false}.range(L, k, lo, hi);
    Tensor o = out.range(L, k, lo, hi);
    if (o.device() == w.device()) {
      cast(o, w);
    } else {
      Tensor tmp = Tensor::empty({hi - lo}, o.dtype(), w.device());
      cast(tmp, w);
      o.copy_from(tmp);
    }
  }
}

AdamW::FullState AdamW::full_state(Communicator& comm, const LlamaConfig& model_config) {
  finish();
  SEQPAR_CHECK(flat_, "AdamW::full_state: the optimizer is per tensor (its state is exp_avg() etc.)");
  const ShardLayout& L = place_.layout;
  FullState st;
  // One piece each (whatever the ranks: replicated state, every rank holds all): the shard buffers
  // are laid out as the whole buffer, so views, no copy.
  if (L.world == 1) {
    st.exp_avg = params_over(model_config, m_shard_.rows(0, L.total));
    st.exp_avg_sq = params_over(model_config, v_shard_.rows(0, L.total));
    if (has_master_) st.master = params_over(model_config, master_shard_.rows(0, L.total));
    return st;
  }
  SEQPAR_CHECK_EQ(comm.size(), L.world, "AdamW::full_state: the communicator must hold the layout's ranks");
  const Device where = m_shard_.device();
  auto gather = [&](LlamaParams& dst, const Tensor& shard) {
    dst = LlamaParams::zeros(model_config, DType::kF32, where, /*one_buffer=*/true);
    for (size_t k = 0; k < L.regions.size(); ++k) {
      const ShardLayout::Region& g = L.regions[k];
      all_gather_region(comm, L, k, FlatRef{shard, false}, dst.flat.rows(g.flat_begin, g.flat_begin + g.len), device_);
    }
  };
  gather(st.exp_avg, m_shard_);
  gather(st.exp_avg_sq, v_shard_);
  if (has_master_) gather(st.master, master_shard_);
  return st;
}

void AdamW::load_full_state(const LlamaParams& exp_avg, const LlamaParams& exp_avg_sq, const LlamaParams* master) {
  finish();
  SEQPAR_CHECK(flat_, "AdamW::load_full_state: the optimizer is per tensor");
  SEQPAR_CHECK(!has_master_ || master != nullptr, "AdamW::load_full_state: the master weights are missing");
  const ShardLayout& L = place_.layout;
  auto take = [&](const Tensor& shard, const LlamaParams& full) {
    for (size_t k = 0; k < L.regions.size(); ++k) {
      const auto [lo, hi] = L.piece(k);
      if (lo == hi) continue;
      Tensor dst = FlatRef{shard, false}.range(L, k, lo, hi);
      read_flat_range(dst, full, model_config_, lo, hi);
    }
  };
  take(m_shard_, exp_avg);
  take(v_shard_, exp_avg_sq);
  if (has_master_) take(master_shard_, *master);
}

void all_reduce_grads(Communicator& comm, LlamaParams& grads) {
  if (grads.all_in_flat()) {
    comm.all_reduce(grads.flat, ReduceOp::kSum);
    return;
  }
  for (auto& [name, g] : grads.named()) comm.all_reduce(*g, ReduceOp::kSum);
}

void all_gather_region(Communicator& comm, const ShardLayout& layout, size_t k, const FlatRef& src, Tensor dst,
                       Device via) {
  const ShardLayout::Region& g = layout.regions.at(k);
  SEQPAR_CHECK_EQ(dst.numel(), g.len, "all_gather_region: destination size");
  const auto [lo, hi] = layout.piece(k);
  if (layout.world == 1) {
    if (hi > lo) dst.copy_from(src.range(layout, k, lo, hi));
    return;
  }
  SEQPAR_CHECK_EQ(comm.size(), layout.world, "all_gather_region: the communicator must hold the layout's ranks");
  Tensor mine = Tensor::zeros({g.cap}, src.t.dtype(), via);
  if (hi > lo) mine.rows(0, hi - lo).copy_from(src.range(layout, k, lo, hi));
  Tensor all = Tensor::empty({g.cap * layout.world}, src.t.dtype(), via);
  comm.all_gather(all, mine);
  dst.copy_from(all.rows(0, g.len));
}

LlamaParams params_over(const LlamaConfig& config, const Tensor& flat) {
  SEQPAR_CHECK_EQ(flat.numel(), LlamaParams::flat_layout(config).total, "params_over: buffer size");
  LlamaParams p = LlamaParams::skeleton(config);  // (named() lists the optional tensors once defined)
  const auto shapes = LlamaParams::shapes(config);
  const auto offsets = flat_offsets(config);
  auto named = p.named();
  SEQPAR_CHECK_EQ(named.size(), shapes.size(), "params_over: the parameters' names and the config's shapes");
  for (size_t i = 0; i < named.size(); ++i)
    *named[i].second =
        flat.rows(offsets[i].second, offsets[i].second + shape_numel(shapes[i].second)).view(shapes[i].second);
  p.flat = flat;
  return p;
}

}  // namespace seqpar
