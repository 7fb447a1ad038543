// Llama forward and hand-written backward over this rank's tokens [T, C] (batches folded into
// tokens; documents separated by the attention's mask metadata). The model knows nothing of
// sequence parallelism: attention goes through the Attention interface it is handed.
// One implementation for every family (arch/llama_config.h): the GPT family (gpt2) is the same
// decoder with LayerNorm (bias) for RMSNorm, learned position embeddings added to the token
// embeddings for RoPE, and a GELU MLP (up, down, biases) for SwiGLU. Its tensors keep the
// llama-style names inside seqpar; train/hf_model.h maps them to GPT-2's (transformer.h.{l}...,
// fused c_attn, Conv1D [in, out] layout) at the checkpoint boundary.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "arch/llama_config.h"
#include "attention/attention.h"
#include "core/offload.h"
#include "core/tensor.h"

namespace seqpar {

struct LlamaLayerParams {
  Tensor input_norm;  // [C]         input_layernorm.weight
  Tensor q_proj;      // [H*D, C]    self_attn.q_proj.weight
  Tensor k_proj;      // [Hkv*D, C]  self_attn.k_proj.weight
  Tensor v_proj;      // [Hkv*D, C]  self_attn.v_proj.weight
  Tensor o_proj;      // [C, H*D]    self_attn.o_proj.weight
  Tensor post_norm;   // [C]         post_attention_layernorm.weight
  Tensor gate_proj;   // [F, C]      mlp.gate_proj.weight (SwiGLU only; undefined for the GELU MLP)
  Tensor up_proj;     // [F, C]      mlp.up_proj.weight   (gpt2: mlp.c_fc)
  Tensor down_proj;   // [C, F]      mlp.down_proj.weight (gpt2: mlp.c_proj)
  // The families' options (arch/llama_config.h), undefined when the config has none:
  Tensor q_bias;  // [H*D]    self_attn.q_proj.bias   (qkv_bias)
  Tensor k_bias;  // [Hkv*D]  self_attn.k_proj.bias
  Tensor v_bias;  // [Hkv*D]  self_attn.v_proj.bias
  Tensor o_bias;  // [C]      self_attn.o_proj.bias   (o_bias)
  Tensor q_norm;  // [D]      self_attn.q_norm.weight (qk_norm: RMSNorm over each q head)
  Tensor k_norm;  // [D]      self_attn.k_norm.weight
  Tensor up_bias;          // [F]  mlp.up_proj.bias                (mlp_bias)
  Tensor down_bias;        // [C]  mlp.down_proj.bias
  Tensor input_norm_bias;  // [C]  input_layernorm.bias            (norm_bias: LayerNorm)
  Tensor post_norm_bias;   // [C]  post_attention_layernorm.bias
};

// Parameters (or their gradients) under Hugging Face's names. With tied embeddings lm_head is
// undefined and the LM head reads embed_tokens.
struct LlamaParams {
  Tensor embed_tokens;  // [V, C]  model.embed_tokens.weight
  Tensor embed_positions;  // [P, C]  model.embed_positions.weight (learned positions; P = n_positions)
  std::vector<LlamaLayerParams> layers;
  Tensor final_norm;  // [C]     model.norm.weight
  Tensor final_norm_bias;  // [C]  model.norm.bias (norm_bias)
  Tensor lm_head;     // [V, C]  lm_head.weight (undefined when tied)

  // Every tensor with its name, in HF's named_parameters() order (for Llama-style families HF's own
  // names; the optional tensors are listed when defined, so a container to fill must come from
  // skeleton(), zeros() or a copy of one).
  std::vector<std::pair<std::string, Tensor*>> named();
  std::vector<std::pair<std::string, const Tensor*>> named() const;
  // The HF shape of every parameter of this config, in the same order.
  static std::vector<std::pair<std::string, Shape>> shapes(const LlamaConfig& config);
  // Zero-filled parameters of this config. With one_buffer, every tensor is a view into `flat`
  // (each starting at a multiple of kFlatAlign elements, the gaps zero), so that one collective
  // can reduce them all.
  static LlamaParams zeros(const LlamaConfig& config, DType dtype, Device device, bool one_buffer = false);
  // An empty container of this config's tensors: the layers sized and every tensor the config has
  // beyond the always-present ones defined as a one-element placeholder, so that named() lists
  // exactly shapes() (the caller then assigns every tensor).
  static LlamaParams skeleton(const LlamaConfig& config);

  static constexpr int64_t kFlatAlign = 64;
  // n rounded up to a multiple of kFlatAlign: a tensor's extent in the one buffer.
  static int64_t padded(int64_t n) { return (n + kFlatAlign - 1) / kFlatAlign * kFlatAlign; }
  // Where the parts sit in the one buffer (element offsets): the embedding at 0 (and the position
  // embedding after it: learned positions), decoder layer l at layers + l × layer_elems (its
  // tensors, padded, in named() order), the final norm (and its bias), then the LM head (untied
  // models); total elements.
  struct FlatLayout {
    int64_t layers = 0, layer_elems = 0, final_norm = 0, lm_head = 0, total = 0;
    // Where the forward's part ends in the buffer: part -1 what precedes the layers (the embedding),
    // part l < num_layers decoder layer l, any later part the rest (the whole buffer).
    int64_t part_end(int64_t part, int64_t num_layers) const {
      return part < 0 ? layers : part < num_layers ? layers + (part + 1) * layer_elems : total;
    }
  };
  static FlatLayout flat_layout(const LlamaConfig& config);
  Tensor flat;  // defined when allocated as one buffer

  // Whether `flat` is defined and every named tensor still lies inside it (an assignment that
  // replaced a tensor breaks this; callers then fall back to per-tensor work).
  bool all_in_flat() const;
};

// One rank's tokens. All i32 [T] on the model's device (or host for the CPU).
struct LlamaBatch {
  Tensor input_ids;
  Tensor position_ids;  // RoPE positions / rows of the learned position embedding (restarting per document)
  Tensor targets;       // labels already shifted; -100 = no loss
  // 1 + the largest position id of the real tokens of the whole batch (every rank's shard: the same
  // on every rank; SpBatch::rope_len), known on the host. dynamic / longrope RoPE choose their
  // frequencies by it (rope_inv_freq); 0 = the config's own (transformers' at init).
  int64_t rope_len = 0;
};

struct LossStats {
  double loss_sum = 0;      // Σ cross-entropy over this rank's good tokens
  int64_t good_tokens = 0;  // tokens with target != -100
};

// forward's per-token losses and the targets on their way to the host (core/offload.h HostCopy):
// get() sums them, waiting for the device (on CUDA) the first time. A step reads its losses once
// its backward is queued, so the device never waits for the host inside it.
class PendingLoss {
 public:
  PendingLoss(const Tensor& losses, const Tensor& targets) : losses_(losses), targets_(targets) {}
  LossStats get();

 private:
  HostCopy losses_, targets_;
};

// Where a decoder layer's weights come from (DESIGN: the trainer provides a layer's weights). The
// model asks for layer l's before its forward and before its backward (a checkpointed layer's
// recompute included) and says when it is done with them; it never learns where they live. The
// trainer's implementations (train/layer_weights.h) gather them over ZeRO-3's ranks or copy them
// from host memory, prefetching `next`.
class LayerWeights {
 public:
  virtual ~LayerWeights() = default;
  // Layer l's weights on the model's device, valid until release(l). next: the layer the model will
  // ask for after this one (-1: none), for a prefetch.
  virtual const LlamaLayerParams& acquire(int64_t l, int64_t next) = 0;
  // The model's kernels that read layer l's weights are queued; their memory may be reused once
  // that work is done (stream order).
  virtual void release(int64_t l) = 0;
};

// Where a checkpointed layer's input waits between the layer's forward and its backward, or that
// the layer is not checkpointed.
enum class InputPlace : uint8_t {
  kDevice,     // on the model's device (what checkpointing keeps by default)
  kHost,       // in host memory (pinned on CUDA): checkpoint offload
  kRecompute,  // nowhere: backward runs the layers below it forward again from the nearest input
               // that was kept (or from the embedding), keeping their outputs for their own backward
  kFull,       // not checkpointed: the layer keeps all its activations (as without checkpointing) and
               // its backward recomputes nothing (Megatron's --recompute-num-layers: only some layers
               // recompute)
};

class LlamaModel {
 public:
  // dtype: of the compute weights and activations (f32 on the CPU; bf16 or f16 on CUDA). Gradients are
  // always f32 (accumulated across micro-batches and ranks); f32 master weights live in the
  // optimizer.
  LlamaModel(const LlamaConfig& config, Device device = Device::cpu(), DType dtype = DType::kF32);

  const LlamaConfig& config() const { return config_; }
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }
  LlamaParams& params() { return params_; }
  LlamaParams& grads() { return grads_; }
  void zero_grads();

  // What forward keeps of each decoder layer for backward: everything (kKeep); only the layer's
  // input (kCheckpoint: backward recomputes the layer's forward, attention and its communication
  // included, then runs its backward); or the input and the attention's output and context
  // (kCheckpointKeepAttention: the attention's output and LSE stay, O(tokens) like the input, and
  // with sequence parallelism its context whole; backward recomputes the norms, the q/k/v
  // projections and RoPE of one rank's attention, the output projection's residual and the MLP, not
  // attention or its communication). The same gradients each way; less memory, more time.
  enum class ActivationPolicy { kKeep, kCheckpoint, kCheckpointKeepAttention };
  // The policy of the training options --activation-checkpointing and --checkpoint-keep-attention;
  // keep_attention without checkpointing is an InputError.
  static ActivationPolicy policy_for(bool checkpointing, bool keep_attention);
  void set_activation_policy(ActivationPolicy policy) { policy_ = policy; }
  ActivationPolicy activation_policy() const { return policy_; }
  // Checkpoint offload (ALST's activation checkpoint offload): with a checkpointing policy, each
  // layer's kept input waits in host memory (pinned, on CUDA) between the layer's forward and its
  // backward: its copy out overlaps with the next layers' forward, the copy back with the backward
  // of the layer above (core/offload.h). The same results; the device keeps about two layers'
  // inputs instead of all of them. Without checkpointing it changes nothing.
  void set_checkpoint_offload(bool on);
  bool checkpoint_offload() const { return offload_ != nullptr; }
  // Per-layer placement of the kept inputs (with a checkpointing policy; `placement` has one entry
  // per decoder layer, empty = every input on the device): kDevice, kHost (offloaded as above),
  // kRecompute (not kept: at the backward of the top layer of a run of kRecompute layers, the layers
  // from the nearest kept input below it, or from the embedding, run forward again and their inputs
  // stay until their own backward; each run of n such layers costs n more layer forwards and holds
  // n inputs while its backward runs), kFull (the layer not checkpointed: everything it computes stays
  // until its backward, which recomputes nothing). The same results every way. kRecompute needs
  // kCheckpoint (a layer keeping its attention has no recompute of the layer below to share).
  // set_checkpoint_offload(true) is every layer kHost.
  void set_input_placement(std::vector<InputPlace> placement);
  const std::vector<InputPlace>& input_placement() const { return placement_; }
  // Tiled MLP (ALST's TiledMLP): with tokens > 0 and fewer than the sequence, each layer's MLP runs
  // over tiles of this many tokens, so its [tokens, intermediate] tensors (gate, up, h and their
  // gradients) exist one tile at a time; backward recomputes them per tile. 0: one tile.
  void set_mlp_tile_tokens(int64_t tokens) { mlp_tile_ = tokens; }
  // Tiled loss: with tokens > 0 and fewer than the sequence, the LM head and the cross-entropy run
  // over tiles of this many tokens and no [tokens, vocab] logits tensor is kept (backward
  // recomputes each tile's logits, unless the forward ran the loss backward: LossBackward). A
  // forward asked for its logits computes them whole.
  void set_loss_tile_tokens(int64_t tokens) { loss_tile_ = tokens; }

  // Partitioned gradients (ZeRO stage 2): the decoder layers' gradients no longer live in one
  // whole buffer. Each layer's backward writes them into one reused f32 block with the layout of a
  // layer's region in the gradient buffer (LlamaParams::flat_layout), zeroed first, and then `sink(l, block)` is called; the embedding, final norm
  // and LM head gradients have their own tensors, zeroed at the start of every backward, and
  // `sink(-1, {})` is called once the backward has written them. Gradients then no longer
  // accumulate over micro-batches inside the model: the sink does. grads() keeps its names, the
  // layers' views all pointing into the block.
  using GradSink = std::function<void(int64_t layer, const Tensor& block)>;
  void set_grad_sink(GradSink sink);
  bool partitioned_grads() const { return static_cast<bool>(grad_sink_); }

  // The decoder layers' weights from `weights` (it must outlive the model's use of it) instead of
  // params(): the model's own copies of them are freed, and params() keeps the embedding, the final
  // norm and the LM head only (its layers' tensors undefined). nullptr: not allowed once set (the
  // resident weights are gone).
  void set_layer_weights(LayerWeights* weights);
  bool resident_layers() const { return layer_weights_ == nullptr; }

  // Called before the model reads a part's weights: -1 the embedding (and a tied LM head), 0..L-1
  // decoder layer l (each forward, recompute and backward use), L the final norm and the LM head.
  // A trainer whose optimizer is still writing the weights (an update overlapped with the next
  // forward, train/optimizer.h) blocks there until that part is written. Unset: nothing is called.
  using WeightsGate = std::function<void(int64_t part)>;
  void set_weights_gate(WeightsGate gate) { weights_gate_ = std::move(gate); }

  // A training forward's loss backward, run by the forward itself where the loss is tiled (and no
  // logits are asked for): each tile's logits, made for its loss, become their gradient at once and
  // give the LM head's weight gradient and the final norm's output gradient, so backward does not
  // compute the logits again (Liger's fused linear cross-entropy does the same). dloss: backward's.
  // before_write (may be empty) is called once, before the forward writes its first gradient: a
  // trainer zeroes the gradients there (or finishes an update still reading them).
  struct LossBackward {
    float dloss = 0.f;
    std::function<void()> before_write;
  };
  // Forward over this rank's tokens; keeps what backward needs (per the activation policy). If
  // logits is given it receives [T, V] in the model's dtype.
  LossStats forward(const LlamaBatch& batch, Attention& attention, Tensor* logits = nullptr,
                    const LossBackward* loss_backward = nullptr);
  // The same, with the loss left on its way to the host (read it with get()). With loss_backward,
  // the LM head's gradients of a tiled loss are written during the forward (see LossBackward), and
  // the backward that follows must be given the same dloss.
  PendingLoss forward_pending(const LlamaBatch& batch, Attention& attention, Tensor* logits = nullptr,
                              const LossBackward* loss_backward = nullptr);
  // Whether a forward over T tokens with loss_backward (and no logits asked for) runs the loss
  // backward itself: the loss is tiled at T.
  bool fuses_loss_backward(int64_t T) const { return tiled_loss(T); }
  // Backward of loss = dloss * Σ_t losses[t] (dloss = 1 / global good tokens): parameter
  // gradients accumulate (+=) into grads(). Must follow forward(); attention is the same object.
  void backward(float dloss);

 private:
  struct LayerActs;
  struct Acts;
  Tensor layer_forward(int64_t l, const Tensor& x, LayerActs& s);
  void attention_half(int64_t l, LayerActs& s);
  void input_norm(int64_t l, LayerActs& s);
  void project_qkv(int64_t l, LayerActs& s, Tensor& q, Tensor& k, Tensor& v);
  Tensor mlp_half(int64_t l, LayerActs& s, bool want_output);
  void recompute_layer(int64_t l, LayerActs& s);
  Tensor embed(const LlamaBatch& batch);
  InputPlace place(int64_t l) const { return placement_.empty() ? InputPlace::kDevice : placement_[l]; }
  void recompute_inputs(int64_t l);
  void zero_edge_grads();
  void loss_tile_backward(int64_t t0, int64_t t1, Tensor& logits, float dloss, Tensor& dxn);
  Tensor head_norm_forward(const Tensor& x, const Tensor& weight, Tensor& rstd);
  void head_norm_backward(Tensor& d, const Tensor& x, const Tensor& weight, Tensor& dweight, const Tensor& rstd);
  void mlp_tile_forward(int64_t l, const Tensor& xn, Tensor& gate, Tensor& up, Tensor& h, bool want_h);
  // The config's norm (RMSNorm, or LayerNorm with its bias) of x into out; rstd (and mean, LayerNorm)
  // f32 [T] allocated here for the backward.
  void norm_forward(Tensor& out, Tensor& rstd, Tensor& mean, const Tensor& x, const Tensor& weight,
                    const Tensor& bias) const;
  // dx (=, or += with accumulate: the residual stream's gradient) from dout; dweight, dbias (LayerNorm) +=.
  void norm_backward(Tensor& dx, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& x,
                     const Tensor& weight, const Tensor& mean, const Tensor& rstd, bool accumulate = false) const;
  // Layer l's weights while acquired (acquire_layer .. release_layer).
  const LlamaLayerParams& layer_params(int64_t l) const;
  void acquire_layer(int64_t l, int64_t next);
  void release_layer(int64_t l);
  void mlp_tile_backward(int64_t l, const Tensor& dx_out, const Tensor& xn, Tensor& gate, Tensor& up,
                         const Tensor& h, Tensor& dxn);

  LlamaConfig config_;
  Device device_;
  DType dtype_;
  LlamaParams params_;
  LlamaParams grads_;
  // This batch's RoPE frequencies (rope_len): the config's, or for dynamic / longrope the last
  // length-dependent set, uploaded when it changes (a host computation; no wait on the device).
  Tensor rope_table(int64_t rope_len);

  Tensor inv_freq_;                         // f32 [D/2], rope_inv_freq(config) (rope_len 0)
  Tensor inv_freq_len_;                     // f32 [D/2], the last rope_table of a length-dependent type
  std::vector<float> inv_freq_len_values_;  // its values (host)
  float rope_scale_ = 1.0f;                 // rope_attention_factor: cos and sin times this
  std::shared_ptr<Acts> acts_;
  ActivationPolicy policy_ = ActivationPolicy::kKeep;
  int64_t mlp_tile_ = 0;
  std::unique_ptr<HostOffload> offload_;  // set: some layer's input is kHost
  std::vector<InputPlace> placement_;     // per layer; empty: all kDevice
  GradSink grad_sink_;
  Tensor grad_block_;  // partitioned gradients: one layer's, reused
  int64_t loss_tile_ = 0;
  LayerWeights* layer_weights_ = nullptr;  // set: the layers' weights come from it
  WeightsGate weights_gate_;
  void gate(int64_t part) const {
    if (weights_gate_) weights_gate_(part);
  }
  const LlamaLayerParams* held_ = nullptr;  // the acquired layer's weights
  int64_t held_layer_ = -1;
  bool tiled_loss(int64_t T) const { return loss_tile_ > 0 && loss_tile_ < T; }
};

}  // namespace seqpar
