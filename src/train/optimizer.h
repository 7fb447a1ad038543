// AdamW over a model's parameters (torch semantics), with global grad-norm clipping as
// torch.nn.utils.clip_grad_norm_ does it. State (moments) is f32, as are master weights.
//
// Two forms:
//   per tensor  stage 0 on the device: moments (and master weights) per named tensor;
//   flat        the state of this rank's pieces of the weights' one buffer (train/zero_shard.h):
//               ZeRO-1/2 (a contiguous 1/world), ZeRO-3 (1/world of every layer), and optimizer
//               offload (the state in host memory, any layout). The caller hands gradients and
//               receives the updated compute weights through FlatRefs (the whole buffer or a
//               shard buffer), so the same step serves every stage.
// Optimizer offload (DeepSpeed's offload_optimizer.device=cpu): master weights and moments live
// in host memory; a step streams the pieces in chunks of kStreamChunk elements: the chunk's f32
// gradients copied to a pinned staging buffer on a copy stream, AdamW on the CPU (threads over
// sub-chunks), the new weights rounded into a second staging buffer and copied back, two chunks in
// flight (the next chunk's gradients arrive while this one updates). On the CPU backend the same
// path runs with plain copies.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "comm/communicator.h"
#include "core/host_threads.h"
#include "core/offload.h"
#include "kernels/ops.h"
#include "model/llama.h"
#include "train/zero_shard.h"

namespace seqpar {

struct OptimizerConfig {
  AdamWConfig adamw;
  double clip = 0;  // max global grad norm; <= 0: no clipping
};

// Where a flat optimizer keeps its state and which part.
struct OptimizerPlacement {
  ShardLayout layout;
  bool host = false;  // optimizer offload: the state in host memory, the step streamed (see above)
  int threads = 1;    // host: CPU threads of a step
  // host: elements per staged chunk (at most kStreamChunk; the trainer takes one decoder layer's, so
  // the step streams layer by layer).
  int64_t chunk = int64_t{1} << 24;
  // Master weights even for f32 compute weights (the flat state is then the weights' only whole
  // source: ZeRO-3, offload).
  bool force_master = false;
};

class AdamW {
 public:
  static constexpr int64_t kStreamChunk = int64_t{1} << 24;  // the largest staged chunk (64 MiB of f32)
  // The chunk a trainer's offloaded step stages: one decoder layer's elements, at most kStreamChunk.
  static int64_t stream_chunk_for(const LlamaConfig& model_config);

  // Per tensor (stage 0 on the device). params: the model's weights; when they are not f32 (bf16
  // compute weights) the optimizer keeps an f32 master copy, updates it, and writes the rounded
  // result back into params.
  AdamW(const LlamaConfig& model_config, const OptimizerConfig& config, const LlamaParams& params, Device device);
  // Flat. initial: the weights (any device and dtype; tensors may live apart); compute: the dtype
  // of the compute weights (master weights are the f32 of their rounding, as the model computes
  // with); device: the model's (gradients arrive there). Master weights are kept unless compute is
  // f32 and neither placement.force_master nor host (the weights are then the caller's compute
  // weights, updated in place through `out`).
  AdamW(const LlamaConfig& model_config, const OptimizerConfig& config, const LlamaParams& initial, DType compute,
        Device device, OptimizerPlacement placement);
  ~AdamW();

  // Global L2 norm of all gradients (before clipping).
  static double grad_norm(LlamaParams& grads);
  // Per tensor: one step clipped by the given total norm; updates params in place. Returns the clip
  // coefficient used. grad_unscale: the gradients are those of a scaled loss (fp16's loss scaler):
  // they are multiplied by it (1 / the scale) with the clip coefficient, in f32, as they enter
  // AdamW (one multiply: for a power-of-two scale bit-identical to unscaling first); total_norm is
  // the unscaled gradients' norm.
  float step(LlamaParams& params, LlamaParams& grads, double total_norm, float grad_unscale = 1.f);
  // Flat: one step from `grads` (f32, this rank's pieces, on the device) clipped by the total norm;
  // the updated compute weights go to `out` (this rank's pieces; on the device or in host memory).
  float step_flat(const FlatRef& grads, const FlatRef& out, double total_norm, float grad_unscale = 1.f);
  // Flat, offloaded, one whole layout (no ZeRO sharding), `out` on the model's device: step_flat's
  // work on a thread of its own, so that the next step's forward runs meanwhile (DeepSpeed's
  // offloaded step blocks instead). Returns the clip coefficient at once. The gradients must stay
  // unchanged and `out` unread until the parts are written: wait_weights(end) blocks until the
  // weights' buffer [0, end) holds the new weights (on the device, in flat_layout order, which is
  // the forward's), finish() until the whole step is done. Every other call (a step, the state's
  // reads and writes, the destructor) finishes it first. The same results bit for bit as step_flat.
  float step_flat_overlapped(const FlatRef& grads, const FlatRef& out, double total_norm, float grad_unscale = 1.f);
  bool overlappable(const FlatRef& out) const;
  void wait_weights(int64_t flat_end);
  void finish();
  // Flat, with master weights: writes the rounded master weights into `out` (after a load).
  void write_weights(const FlatRef& out);

  // Elements per rank of a buffer of `total` sharded over `world` (shards start on
  // LlamaParams::kFlatAlign boundaries; the last may be shorter).
  static int64_t shard_len_for(int64_t total, int world);
  bool flat() const { return flat_; }
  bool sharded() const { return flat_ && place_.layout.world > 1; }
  bool offloaded() const { return flat_ && place_.host; }
  const ShardLayout& layout() const { return place_.layout; }
  // Host bytes the flat state holds (offload), and the pinned staging's.
  int64_t host_state_bytes() const;

  // Flat: the whole optimizer state for a checkpoint, a collective over `comm` (the layout's ranks)
  // that assembles every rank's pieces (temporary buffers on `via`, the whole state where the state
  // lives; one rank: views of the state itself); master is filled only with has_master().
  struct FullState {
    LlamaParams exp_avg, exp_avg_sq, master;
  };
  FullState full_state(Communicator& comm, const LlamaConfig& model_config);
  // Flat: loads a whole optimizer state (any device), keeping this rank's pieces. master: the f32
  // weights when has_master() (ignored otherwise).
  void load_full_state(const LlamaParams& exp_avg, const LlamaParams& exp_avg_sq, const LlamaParams* master);

  int64_t step_count() const { return step_; }
  void set_lr(float lr) { config_.adamw.lr = lr; }
  const OptimizerConfig& config() const { return config_; }
  // The f32 weights: the master copy when there is one, else params itself. Per tensor only.
  LlamaParams& weights(LlamaParams& params);
  bool has_master() const { return has_master_; }
  // Per tensor only (flat: full_state / load_full_state).
  LlamaParams& exp_avg();
  LlamaParams& exp_avg_sq();
  void set_step_count(int64_t s) { step_ = s; }

 private:
  struct Stream;
  void step_pieces_on_device(const FlatRef& grads, const FlatRef& out, float coef);
  // published(end): the weights [0, end) of a whole layout are in `out` (an overlapped step's
  // progress); after_current: the copies wait for the caller's current stream (CopyStream::copy).
  void step_pieces_on_host(const FlatRef& grads, const FlatRef& out, float coef, const AdamWConfig& adamw,
                           int64_t step, const std::function<void(int64_t)>& published = {},
                           bool after_current = true);

  OptimizerConfig config_;
  LlamaConfig model_config_;
  Device device_;
  bool flat_ = false;
  LlamaParams m_, v_;
  bool has_master_ = false;
  LlamaParams master_;
  int64_t step_ = 0;
  // Flat: the state of this rank's pieces in shard buffers of layout.shard_len f32 elements, on the
  // device or in host memory.
  OptimizerPlacement place_;
  Tensor m_shard_, v_shard_, master_shard_;
  std::unique_ptr<Stream> stream_;  // offload: the copy stream and staging buffers
  // An overlapped step in flight: its thread, the weights written so far ([0, written_)), its error.
  struct Overlap;
  std::unique_ptr<Overlap> overlap_;
};

// offload_gradients: this rank's f32 gradient pieces in pinned host memory (n elements), zeroed by
// `threads` threads; an InputError naming the setting when the allocation fails.
Tensor host_gradient_buffer(int64_t n, Device device, int threads);
// The offloaded step's CPU work on one staged chunk (what `seqpar bench host-adamw` times): AdamW
// on the f32 master weights w, moments m, v and gradients g (host tensors of one length), the
// updated weights rounded into `rounded`, cut over the threads in kFlatAlign-aligned ranges.
void host_adamw_chunk(HostThreads& threads, const Tensor& w, const Tensor& m, const Tensor& v, const Tensor& g,
                      const Tensor& rounded, const AdamWConfig& adamw, int64_t step, float coef);
// Σ x² of a flat f32 host tensor over `threads` ranges (double partial sums added in range order:
// the same result for the same thread count).
double host_sum_squares(const Tensor& x, int threads);

// Sums every rank's gradients over `comm` in place: one all-reduce of the grads' single buffer
// when they live in one (LlamaParams::all_in_flat, as LlamaModel allocates them), else one per
// tensor. The same sums either way (a reduction is element-wise).
void all_reduce_grads(Communicator& comm, LlamaParams& grads);

// All ranks of the layout: dst [region k's len] (on any device) <- every rank's piece of region
// k, this rank's read from `src` (whole buffer or shard buffer; any device). The collective's
// buffers live on `via` (the communicator's device).
void all_gather_region(Communicator& comm, const ShardLayout& layout, size_t k, const FlatRef& src, Tensor dst,
                       Device via);

// Views of a LlamaParams over one buffer laid out as LlamaParams::flat_layout (flat = the buffer).
LlamaParams params_over(const LlamaConfig& config, const Tensor& flat);

}  // namespace seqpar
