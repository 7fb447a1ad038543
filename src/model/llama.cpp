#include "model/llama.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "kernels/ops.h"

namespace seqpar {

namespace {

GeluKind gelu_kind(GeluForm form) { return form == GeluForm::kErf ? GeluKind::kErf : GeluKind::kTanh; }

// The bias of a layer whose bias the config may leave out: null where it does.
const Tensor* maybe(bool has, const Tensor& bias) { return has ? &bias : nullptr; }

// dx [T, K] (= or += by beta) = dy [T, N] @ W [N, K];  dW [N, K] += dy^T @ x.
void linear_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, float dx_beta) {
  matmul(dx, dy, w, false, false, 1.f, dx_beta);
  matmul(dw, dy, x, true, false, 1.f, 1.f);
}

}  // namespace

std::vector<std::pair<std::string, Shape>> LlamaParams::shapes(const LlamaConfig& c) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t HD = c.num_heads * c.head_dim, KD = c.num_kv_heads * c.head_dim;
  std::vector<std::pair<std::string, Shape>> out;
  out.emplace_back("model.embed_tokens.weight", Shape{V, C});
  if (c.positions == PositionKind::kLearned)
    out.emplace_back("model.embed_positions.weight", Shape{c.max_position_embeddings, C});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    std::string p = fmt::format("model.layers.{}.", l);
    out.emplace_back(p + "self_attn.q_proj.weight", Shape{HD, C});
    if (c.qkv_bias) out.emplace_back(p + "self_attn.q_proj.bias", Shape{HD});
    out.emplace_back(p + "self_attn.k_proj.weight", Shape{KD, C});
    if (c.qkv_bias) out.emplace_back(p + "self_attn.k_proj.bias", Shape{KD});
    out.emplace_back(p + "self_attn.v_proj.weight", Shape{KD, C});
    if (c.qkv_bias) out.emplace_back(p + "self_attn.v_proj.bias", Shape{KD});
    out.emplace_back(p + "self_attn.o_proj.weight", Shape{C, HD});
    if (c.o_bias) out.emplace_back(p + "self_attn.o_proj.bias", Shape{C});
    if (c.qk_norm) {
      out.emplace_back(p + "self_attn.q_norm.weight", Shape{c.head_dim});
      out.emplace_back(p + "self_attn.k_norm.weight", Shape{c.head_dim});
    }
    if (c.mlp == MlpKind::kSwiGlu) out.emplace_back(p + "mlp.gate_proj.weight", Shape{F, C});
    out.emplace_back(p + "mlp.up_proj.weight", Shape{F, C});
    if (c.mlp_bias) out.emplace_back(p + "mlp.up_proj.bias", Shape{F});
    out.emplace_back(p + "mlp.down_proj.weight", Shape{C, F});
    if (c.mlp_bias) out.emplace_back(p + "mlp.down_proj.bias", Shape{C});
    out.emplace_back(p + "input_layernorm.weight", Shape{C});
    if (c.norm_bias) out.emplace_back(p + "input_layernorm.bias", Shape{C});
    out.emplace_back(p + "post_attention_layernorm.weight", Shape{C});
    if (c.norm_bias) out.emplace_back(p + "post_attention_layernorm.bias", Shape{C});
  }
  out.emplace_back("model.norm.weight", Shape{C});
  if (c.norm_bias) out.emplace_back("model.norm.bias", Shape{C});
  if (!c.tie_word_embeddings) out.emplace_back("lm_head.weight", Shape{V, C});
  return out;
}

std::vector<std::pair<std::string, Tensor*>> LlamaParams::named() {
  std::vector<std::pair<std::string, Tensor*>> out;
  std::string p;
  // The optional tensors are named when defined: zeros() and skeleton() define exactly those
  // shapes() lists.
  auto optional = [&](const char* name, Tensor& t) {
    if (t.defined()) out.emplace_back(p + name, &t);
  };
  out.emplace_back("model.embed_tokens.weight", &embed_tokens);
  optional("model.embed_positions.weight", embed_positions);
  for (size_t l = 0; l < layers.size(); ++l) {
    p = fmt::format("model.layers.{}.", l);
    LlamaLayerParams& L = layers[l];
    out.emplace_back(p + "self_attn.q_proj.weight", &L.q_proj);
    optional("self_attn.q_proj.bias", L.q_bias);
    out.emplace_back(p + "self_attn.k_proj.weight", &L.k_proj);
    optional("self_attn.k_proj.bias", L.k_bias);
    out.emplace_back(p + "self_attn.v_proj.weight", &L.v_proj);
    optional("self_attn.v_proj.bias", L.v_bias);
    out.emplace_back(p + "self_attn.o_proj.weight", &L.o_proj);
    optional("self_attn.o_proj.bias", L.o_bias);
    optional("self_attn.q_norm.weight", L.q_norm);
    optional("self_attn.k_norm.weight", L.k_norm);
    optional("mlp.gate_proj.weight", L.gate_proj);
    out.emplace_back(p + "mlp.up_proj.weight", &L.up_proj);
    optional("mlp.up_proj.bias", L.up_bias);
    out.emplace_back(p + "mlp.down_proj.weight", &L.down_proj);
    optional("mlp.down_proj.bias", L.down_bias);
    out.emplace_back(p + "input_layernorm.weight", &L.input_norm);
    optional("input_layernorm.bias", L.input_norm_bias);
    out.emplace_back(p + "post_attention_layernorm.weight", &L.post_norm);
    optional("post_attention_layernorm.bias", L.post_norm_bias);
  }
  p.clear();
  out.emplace_back("model.norm.weight", &final_norm);
  optional("model.norm.bias", final_norm_bias);
  optional("lm_head.weight", lm_head);
  return out;
}

std::vector<std::pair<std::string, const Tensor*>> LlamaParams::named() const {
  std::vector<std::pair<std::string, const Tensor*>> out;
  for (auto& [name, t] : const_cast<LlamaParams*>(this)->named()) out.emplace_back(name, t);
  return out;
}

LlamaParams::FlatLayout LlamaParams::flat_layout(const LlamaConfig& c) {
  FlatLayout f;
  const auto shapes = LlamaParams::shapes(c);
  for (const auto& [name, shape] : shapes)  // model.layers.0.*
    if (name.rfind("model.layers.0.", 0) == 0) f.layer_elems += padded(shape_numel(shape));
  f.layers = padded(c.vocab_size * c.hidden_size);
  if (c.positions == PositionKind::kLearned) f.layers += padded(c.max_position_embeddings * c.hidden_size);
  f.final_norm = f.layers + c.num_layers * f.layer_elems;
  f.lm_head = f.final_norm + padded(c.hidden_size) + (c.norm_bias ? padded(c.hidden_size) : 0);
  f.total = f.lm_head + (c.tie_word_embeddings ? 0 : padded(c.vocab_size * c.hidden_size));
  return f;
}

LlamaParams LlamaParams::skeleton(const LlamaConfig& c) {
  LlamaParams p;
  p.layers.resize(static_cast<size_t>(c.num_layers));
  const Tensor mark = Tensor::empty({1}, DType::kF32, Device::cpu());
  if (c.positions == PositionKind::kLearned) p.embed_positions = mark;
  if (c.norm_bias) p.final_norm_bias = mark;
  if (!c.tie_word_embeddings) p.lm_head = mark;
  for (LlamaLayerParams& L : p.layers) {
    if (c.qkv_bias) L.q_bias = L.k_bias = L.v_bias = mark;
    if (c.o_bias) L.o_bias = mark;
    if (c.qk_norm) L.q_norm = L.k_norm = mark;
    if (c.mlp == MlpKind::kSwiGlu) L.gate_proj = mark;
    if (c.mlp_bias) L.up_bias = L.down_bias = mark;
    if (c.norm_bias) L.input_norm_bias = L.post_norm_bias = mark;
  }
  return p;
}

LlamaParams LlamaParams::zeros(const LlamaConfig& c, DType dtype, Device device, bool one_buffer) {
  LlamaParams p = skeleton(c);
  auto shapes = LlamaParams::shapes(c);
  if (one_buffer) p.flat = Tensor::zeros({flat_layout(c).total}, dtype, device);
  size_t i = 0;
  int64_t at = 0;
  auto named = p.named();
  SEQPAR_CHECK_EQ(named.size(), shapes.size(), "LlamaParams::zeros: names and shapes");
  for (auto& [name, t] : named) {
    SEQPAR_CHECK_EQ(name, shapes[i].first);
    const Shape& shape = shapes[i].second;
    if (one_buffer) {
      *t = p.flat.rows(at, at + shape_numel(shape)).view(shape);
      at += padded(shape_numel(shape));
    } else {
      *t = Tensor::zeros(shape, dtype, device);
    }
    ++i;
  }
  return p;
}

bool LlamaParams::all_in_flat() const {
  if (!flat.defined()) return false;
  const auto* begin = static_cast<const char*>(flat.raw());
  const char* end = begin + flat.nbytes();
  for (const auto& [name, t] : named()) {
    const auto* p = static_cast<const char*>(t->raw());
    if (t->device() != flat.device() || t->dtype() != flat.dtype() || p < begin || p + t->nbytes() > end) return false;
  }
  return true;
}

// What one layer keeps from forward for backward (the `keep` activation policy).
struct LlamaModel::LayerActs {
  Tensor x_in;      // [T, C]  residual stream entering the layer
  std::shared_ptr<HostOffload::Handle> x_in_host;  // x_in while it waits in host memory (offload)
  Tensor rstd1;     // [T]     f32
  Tensor mean1;     // [T]     f32 (LayerNorm)
  Tensor xn1;       // [T, C]  input_layernorm output
  Tensor q_raw, k_raw;    // [T, H, D], [T, Hkv, D]  q/k before their norms (qk_norm)
  Tensor rstd_q, rstd_k;  // [T*H], [T*Hkv] f32      the q/k norms' rstd (qk_norm)
  Tensor attn_out;  // [T, H, D]
  std::unique_ptr<AttentionContext> attn_ctx;
  bool attn_inputs_released = false;  // attn_ctx's q, k, v dropped (Attention::release_inputs)
  Tensor x_mid;  // [T, C]  residual after attention
  Tensor rstd2;  // [T]
  Tensor mean2;  // [T]     (LayerNorm)
  Tensor xn2;    // [T, C]
  Tensor gate;   // [T, F]  (SwiGLU)
  Tensor up;     // [T, F]  (GELU MLP: the pre-activation, with its bias)
  Tensor h;      // [T, F]  gelu(up) (GELU; SwiGLU's silu(gate) * up lives only through its down projection)
};

struct LlamaModel::Acts {
  LlamaBatch batch;
  Tensor inv_freq;  // f32 [D/2]: this batch's RoPE frequencies (rope_table(batch.rope_len))
  Attention* attention = nullptr;
  std::vector<LayerActs> layers;
  Tensor x_final;  // [T, C]
  Tensor rstd_f;   // [T]
  Tensor mean_f;   // [T] (LayerNorm)
  Tensor xn_f;     // [T, C]
  Tensor logits;   // [T, V] (untiled loss)
  bool logits_lent = false;  // logits handed to forward's caller: the loss backward may not overwrite them
  Tensor lse;      // [T] f32: each loss row's logsumexp (cross_entropy_forward), the loss backward's softmax
  Tensor dxn_f;    // [T, C]: the final norm's output gradient, when forward ran the loss backward
  float fused_dloss = 0.f;  // the dloss it ran it with
  bool edge_grads_zeroed = false;  // partitioned gradients: this pass's edge gradients zeroed already
};

LlamaModel::LlamaModel(const LlamaConfig& config, Device device, DType dtype)
    : config_(config), device_(device), dtype_(dtype) {
  config_.validate();
  SEQPAR_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
               "model dtype {} (f32, bf16 or f16)", dtype_name(dtype));
  params_ = LlamaParams::zeros(config_, dtype_, device_, /*one_buffer=*/true);  // ZeRO shards slice it
  // f32 whatever the compute dtype, in one buffer: one all-reduce sums them over the ranks.
  grads_ = LlamaParams::zeros(config_, DType::kF32, device_, /*one_buffer=*/true);
  if (config_.positions == PositionKind::kRope) {
    std::vector<float> inv = rope_inv_freq(config_);
    inv_freq_ = Tensor::from_vector<float>({static_cast<int64_t>(inv.size())}, inv).to(device_);
    rope_scale_ = static_cast<float>(rope_attention_factor(config_));
  }
}

Tensor LlamaModel::rope_table(int64_t rope_len) {
  if (config_.positions != PositionKind::kRope) return {};
  if (!rope_depends_on_length(config_.rope)) return inv_freq_;
  std::vector<float> inv = rope_inv_freq(config_, rope_len);
  if (!inv_freq_len_.defined() || inv != inv_freq_len_values_) {
    // A new tensor, not a copy into the old one: a batch still in flight keeps its own.
    inv_freq_len_ = Tensor::from_vector<float>({static_cast<int64_t>(inv.size())}, inv).to(device_);
    inv_freq_len_values_ = std::move(inv);
  }
  return inv_freq_len_;
}

LlamaModel::ActivationPolicy LlamaModel::policy_for(bool checkpointing, bool keep_attention) {
  SEQPAR_INPUT_CHECK(checkpointing || !keep_attention,
                     "checkpoint_keep_attention=true needs activation_checkpointing=true (--activation-checkpointing): "
                     "it says what a checkpointed layer keeps besides its input");
  if (!checkpointing) return ActivationPolicy::kKeep;
  return keep_attention ? ActivationPolicy::kCheckpointKeepAttention : ActivationPolicy::kCheckpoint;
}

void LlamaModel::set_checkpoint_offload(bool on) {
  set_input_placement(on ? std::vector<InputPlace>(config_.num_layers, InputPlace::kHost) : std::vector<InputPlace>{});
}

void LlamaModel::set_input_placement(std::vector<InputPlace> placement) {
  SEQPAR_CHECK(acts_ == nullptr, "LlamaModel::set_input_placement: not between a forward and its backward");
  SEQPAR_CHECK(placement.empty() || static_cast<int64_t>(placement.size()) == config_.num_layers,
               "LlamaModel::set_input_placement: {} entries for {} layers", placement.size(), config_.num_layers);
  const bool host = std::count(placement.begin(), placement.end(), InputPlace::kHost) > 0;
  placement_ = std::move(placement);
  if (!host) {
    offload_.reset();
  } else if (!offload_) {
    offload_ = std::make_unique<HostOffload>(device_);
  }
}

void LlamaModel::set_grad_sink(GradSink sink) {
  SEQPAR_CHECK(sink != nullptr, "LlamaModel::set_grad_sink: a sink is required");
  SEQPAR_CHECK(acts_ == nullptr, "LlamaModel::set_grad_sink: not between a forward and its backward");
  grad_sink_ = std::move(sink);
  // The edge tensors on their own; every layer's views into one block, at the in-layer offsets of
  // the whole buffer's layout.
  LlamaParams g = LlamaParams::skeleton(config_);
  grad_block_ = Tensor::zeros({LlamaParams::flat_layout(config_).layer_elems}, DType::kF32, device_);
  const auto shapes = LlamaParams::shapes(config_);
  size_t i = 0;
  int64_t at = 0;
  for (auto& [name, t] : g.named()) {
    const Shape& shape = shapes[i++].second;
    if (name.rfind("model.layers.", 0) != 0) {
      *t = Tensor::zeros(shape, DType::kF32, device_);
      continue;
    }
    if (name.find(".self_attn.q_proj.weight") != std::string::npos) at = 0;  // a layer's first tensor
    *t = grad_block_.rows(at, at + shape_numel(shape)).view(shape);
    at += LlamaParams::padded(shape_numel(shape));
  }
  grads_ = std::move(g);
}

void LlamaModel::set_layer_weights(LayerWeights* weights) {
  SEQPAR_CHECK(acts_ == nullptr, "LlamaModel::set_layer_weights: not between a forward and its backward");
  SEQPAR_CHECK(weights != nullptr || layer_weights_ == nullptr,
               "LlamaModel::set_layer_weights: the resident layer weights were freed when a provider was set");
  if (weights == nullptr || layer_weights_ != nullptr) {
    layer_weights_ = weights;
    return;
  }
  layer_weights_ = weights;
  // Only the edges stay, each in a tensor of its own; the one buffer (and the layers in it) goes.
  LlamaParams edges;
  edges.layers.resize(config_.num_layers);
  edges.embed_tokens = params_.embed_tokens.clone();
  if (params_.embed_positions.defined()) edges.embed_positions = params_.embed_positions.clone();
  edges.final_norm = params_.final_norm.clone();
  if (params_.final_norm_bias.defined()) edges.final_norm_bias = params_.final_norm_bias.clone();
  if (params_.lm_head.defined()) edges.lm_head = params_.lm_head.clone();
  params_ = std::move(edges);
}

void LlamaModel::acquire_layer(int64_t l, int64_t next) {
  SEQPAR_CHECK(held_ == nullptr, "LlamaModel: layer {} acquired while layer {} is held", l, held_layer_);
  gate(l);
  held_ = layer_weights_ ? &layer_weights_->acquire(l, next) : &params_.layers[l];
  held_layer_ = l;
}

void LlamaModel::release_layer(int64_t l) {
  SEQPAR_CHECK(held_layer_ == l, "LlamaModel: release of layer {} while layer {} is held", l, held_layer_);
  if (layer_weights_) layer_weights_->release(l);
  held_ = nullptr;
  held_layer_ = -1;
}

const LlamaLayerParams& LlamaModel::layer_params(int64_t l) const {
  SEQPAR_CHECK(held_ != nullptr && held_layer_ == l, "LlamaModel: layer {}'s weights read without acquiring them", l);
  return *held_;
}

void LlamaModel::zero_grads() {
  if (grads_.all_in_flat()) {
    grads_.flat.zero();
    return;
  }
  for (auto& [name, g] : grads_.named()) g->zero();
}

// One decoder layer's forward from its input x [T, C], keeping everything its backward reads in s;
// returns the layer's output. forward() runs it; backward() recomputes a checkpointed layer with
// recompute_layer().
Tensor LlamaModel::layer_forward(int64_t l, const Tensor& x, LayerActs& s) {
  s.x_in = x;
  attention_half(l, s);
  return mlp_half(l, s, /*want_output=*/true);
}

// rstd1, xn1 = input_layernorm(x_in); then q/k/v projections, RoPE and attention into attn_out and
// attn_ctx.
void LlamaModel::attention_half(int64_t l, LayerActs& s) {
  input_norm(l, s);
  Tensor q, k, v;
  project_qkv(l, s, q, k, v);
  const float scale = 1.f / std::sqrt(static_cast<float>(config_.head_dim));
  s.attn_out = Tensor::empty(q.shape(), dtype_, device_);
  s.attn_ctx = acts_->attention->forward(q, k, v, s.attn_out, scale, config_.layer_window(l));
}

void LlamaModel::input_norm(int64_t l, LayerActs& s) {
  const LlamaLayerParams& P = layer_params(l);
  s.xn1 = Tensor::empty({s.x_in.dim(0), config_.hidden_size}, dtype_, device_);
  norm_forward(s.xn1, s.rstd1, s.mean1, s.x_in, P.input_norm, P.input_norm_bias);
}

// q [T, H, D], k, v [T, Hkv, D] from xn1: the projections (and their biases), Qwen3's head norms
// (their inputs and rstd kept in s) and RoPE.
void LlamaModel::project_qkv(int64_t l, LayerActs& s, Tensor& q, Tensor& k, Tensor& v) {
  const LlamaConfig& c = config_;
  const int64_t T = s.x_in.dim(0);
  const int64_t H = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
  const DType act = dtype_;
  const LlamaLayerParams& P = layer_params(l);
  q = Tensor::empty({T, H * D}, act, device_);
  k = Tensor::empty({T, Hkv * D}, act, device_);
  v = Tensor::empty({T, Hkv * D}, act, device_);
  linear_forward(q, s.xn1, P.q_proj, maybe(c.qkv_bias, P.q_bias));
  linear_forward(k, s.xn1, P.k_proj, maybe(c.qkv_bias, P.k_bias));
  linear_forward(v, s.xn1, P.v_proj, maybe(c.qkv_bias, P.v_bias));
  q = q.view({T, H, D});
  k = k.view({T, Hkv, D});
  v = v.view({T, Hkv, D});
  if (c.qk_norm) {  // Qwen3: RMSNorm over each head's D, then RoPE, one op
    s.q_raw = q;
    s.k_raw = k;
    q = head_norm_forward(s.q_raw, P.q_norm, s.rstd_q);
    k = head_norm_forward(s.k_raw, P.k_norm, s.rstd_k);
  } else if (c.positions == PositionKind::kRope) {
    rope_forward(q, acts_->batch.position_ids, acts_->inv_freq, rope_scale_);
    rope_forward(k, acts_->batch.position_ids, acts_->inv_freq, rope_scale_);
  }
}

// From attn_out: x_mid = x_in + attn_out @ Wo^T, rstd2, xn2 = post_attention_layernorm(x_mid), and
// the MLP. With want_output, returns the layer's output x_mid + MLP(xn2); without (a recompute for
// backward, which needs neither the output nor, when the MLP is tiled, any MLP tensor), the MLP
// stops at what its backward reads (untiled) or is skipped (tiled: backward recomputes each tile).
// SwiGLU's backward reads gate and up only: it computes h = silu(gate) * up again (swiglu_backward's out),
// so h lives only as long as the down projection's forward, not from the forward to the backward.
Tensor LlamaModel::mlp_half(int64_t l, LayerActs& s, bool want_output) {
  const LlamaConfig& c = config_;
  const int64_t T = s.x_in.dim(0), C = c.hidden_size;
  const int64_t H = c.num_heads, D = c.head_dim;
  const DType act = dtype_;
  const LlamaLayerParams& P = layer_params(l);
  s.x_mid = Tensor::empty({T, C}, act, device_);
  // x_in + attn Wo^T (+ bias)
  linear_forward(s.x_mid, s.attn_out.view({T, H * D}), P.o_proj, maybe(c.o_bias, P.o_bias), &s.x_in);
  s.xn2 = Tensor::empty({T, C}, act, device_);
  norm_forward(s.xn2, s.rstd2, s.mean2, s.x_mid, P.post_norm, P.post_norm_bias);
  const bool tiled = mlp_tile_ > 0 && mlp_tile_ < T;
  if (!want_output) {
    if (!tiled) mlp_tile_forward(l, s.xn2, s.gate, s.up, s.h, /*want_h=*/false);
    return Tensor();
  }
  // The layer's output, x_mid + h Wdown^T (+ bias): the GEMM reads the residual (x_mid stays for backward).
  Tensor out = Tensor::empty({T, C}, act, device_);
  const Tensor* down_bias = maybe(c.mlp_bias, P.down_bias);
  if (tiled) {
    // Tiled MLP: the [tokens, F] tensors exist one tile at a time; backward recomputes them.
    for (int64_t t0 = 0; t0 < T; t0 += mlp_tile_) {
      const int64_t t1 = std::min(T, t0 + mlp_tile_);
      Tensor gate, up, h;
      mlp_tile_forward(l, s.xn2.rows(t0, t1), gate, up, h, /*want_h=*/true);
      Tensor o = out.rows(t0, t1);
      const Tensor residual = s.x_mid.rows(t0, t1);
      linear_forward(o, h, P.down_proj, down_bias, &residual);
    }
  } else {
    mlp_tile_forward(l, s.xn2, s.gate, s.up, s.h, /*want_h=*/true);
    linear_forward(out, s.h, P.down_proj, down_bias, &s.x_mid);
    if (c.mlp == MlpKind::kSwiGlu) s.h = Tensor();
  }
  return out;
}

// What forward dropped of a checkpointed layer, for its backward: everything from x_in (attention
// and its communication included), or, when forward kept the attention (attn_out and attn_ctx),
// only the norms, the output projection's residual and the MLP, and the q/k/v projections when
// the context released them (they go back into it, the same values as forward's). The layer's
// output is not recomputed (backward does not read it).
void LlamaModel::recompute_layer(int64_t l, LayerActs& s) {
  if (s.attn_ctx == nullptr) {
    attention_half(l, s);
  } else {
    input_norm(l, s);
    if (s.attn_inputs_released) {
      Tensor q, k, v;
      project_qkv(l, s, q, k, v);
      acts_->attention->restore_inputs(*s.attn_ctx, q, k, v);
      s.attn_inputs_released = false;
    }
  }
  mlp_half(l, s, /*want_output=*/false);
}

// The loss backward of tokens [t0, t1) whose logits (computed from xn_f) are given: their gradient
// written over them (from the forward's logsumexp), then dxn's rows (=) and the LM head's gradient (+=).
void LlamaModel::loss_tile_backward(int64_t t0, int64_t t1, Tensor& logits, float dloss, Tensor& dxn) {
  const LlamaConfig& c = config_;
  Acts& a = *acts_;
  const Tensor& head = c.tie_word_embeddings ? params_.embed_tokens : params_.lm_head;
  Tensor& dhead = c.tie_word_embeddings ? grads_.embed_tokens : grads_.lm_head;
  const Tensor lse = a.lse.rows(t0, t1);
  cross_entropy_backward(logits, logits, a.batch.targets.rows(t0, t1), dloss, &lse);
  Tensor dxn_t = dxn.rows(t0, t1);
  linear_backward(dxn_t, dhead, logits, a.xn_f.rows(t0, t1), head, 0.f);
}

// RMSNorm of every head of x [T, Hx, D] over its D (weight [D]), then RoPE where the model has it (one op); returns
// the heads and sets rstd f32 [T*Hx] for the backward.
Tensor LlamaModel::head_norm_forward(const Tensor& x, const Tensor& weight, Tensor& rstd) {
  const int64_t rows = x.dim(0) * x.dim(1), D = x.dim(2);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  Tensor out = Tensor::empty(x.shape(), dtype_, device_);
  rstd = Tensor::empty({rows}, DType::kF32, device_);
  if (config_.positions == PositionKind::kRope) {
    head_norm_rope_forward(out, rstd, x, weight, eps, acts_->batch.position_ids, acts_->inv_freq, rope_scale_);
  } else {
    Tensor out2 = out.view({rows, D});
    rmsnorm_forward(out2, rstd, x.view({rows, D}), weight, eps);
  }
  return out;
}

// The backward of head_norm_forward, in place: d [T, Hx, D], the gradient of its output, becomes x's (=);
// dweight [D] +=.
void LlamaModel::head_norm_backward(Tensor& d, const Tensor& x, const Tensor& weight, Tensor& dweight,
                                    const Tensor& rstd) {
  if (config_.positions == PositionKind::kRope) {
    head_norm_rope_backward(d, dweight, d, x, weight, rstd, acts_->batch.position_ids, acts_->inv_freq, rope_scale_);
    return;
  }
  const int64_t rows = x.dim(0) * x.dim(1), D = x.dim(2);
  Tensor d2 = d.view({rows, D});
  rmsnorm_backward(d2, dweight, d2, x.view({rows, D}), weight, rstd);
}

// gate, up, h [n, F] of n tokens' post-attention-norm outputs xn [n, C] (SwiGLU without want_h: gate and up, what
// its backward reads); the GELU MLP: up (with its bias) and h = gelu(up), no gate, want_h or not (its backward
// reads both).
void LlamaModel::mlp_tile_forward(int64_t l, const Tensor& xn, Tensor& gate, Tensor& up, Tensor& h, bool want_h) {
  const LlamaLayerParams& P = layer_params(l);
  const int64_t n = xn.dim(0), F = config_.intermediate_size;
  if (config_.mlp == MlpKind::kGelu) {
    up = Tensor::empty({n, F}, dtype_, device_);
    h = Tensor::empty({n, F}, dtype_, device_);
    linear_gelu_forward(h, up, xn, P.up_proj, maybe(config_.mlp_bias, P.up_bias), gelu_kind(config_.gelu));
    return;
  }
  gate = Tensor::empty({n, F}, dtype_, device_);
  up = Tensor::empty({n, F}, dtype_, device_);
  linear_forward(gate, xn, P.gate_proj, nullptr);
  linear_forward(up, xn, P.up_proj, nullptr);
  if (!want_h) return;
  h = Tensor::empty({n, F}, dtype_, device_);
  swiglu_forward(h, gate, up);
}

// The MLP's backward over n tokens: dx_out [n, C] (the gradient of the layer's output) -> dxn
// [n, C] (=, the gradient of the post-attention norm's output); weight gradients +=. GELU reads up and h; SwiGLU
// reads gate and up and consumes them: their gradients are written over them, and h is computed again over dh.
void LlamaModel::mlp_tile_backward(int64_t l, const Tensor& dx_out, const Tensor& xn, Tensor& gate, Tensor& up,
                                   const Tensor& h, Tensor& dxn) {
  const LlamaLayerParams& P = layer_params(l);
  LlamaLayerParams& G = grads_.layers[l];
  const int64_t n = xn.dim(0), F = config_.intermediate_size;
  Tensor dh = Tensor::empty({n, F}, dtype_, device_);
  if (config_.mlp == MlpKind::kGelu) {  // (the down bias's gradient is the caller's: once, over all tiles)
    linear_backward_gelu(dh, dx_out, P.down_proj, up, gelu_kind(config_.gelu));  // d(up), through the GELU
    matmul(G.down_proj, dx_out, h, true, false, 1.f, 1.f);
    if (config_.mlp_bias) bias_backward(G.up_bias, dh);
    linear_backward(dxn, G.up_proj, dh, xn, P.up_proj, 0.f);
    return;
  }
  matmul(dh, dx_out, P.down_proj, false, false);
  // One pass over gate, up and dh writes d(gate) and d(up) over gate and up and h over dh (the kernel reads an
  // element's inputs before writing it; backward reads none of them again), so the MLP's backward holds one [n, F]
  // tensor besides gate and up, not four.
  Tensor& h_again = dh;
  swiglu_backward(gate, up, dh, gate, up, &h_again);
  matmul(G.down_proj, dx_out, h_again, true, false, 1.f, 1.f);
  h_again = Tensor();
  linear_backward(dxn, G.gate_proj, gate, xn, P.gate_proj, 0.f);  // gate, up: now d(gate), d(up)
  linear_backward(dxn, G.up_proj, up, xn, P.up_proj, 1.f);
}

void LlamaModel::norm_forward(Tensor& out, Tensor& rstd, Tensor& mean, const Tensor& x, const Tensor& weight,
                              const Tensor& bias) const {
  const int64_t T = x.dim(0);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  rstd = Tensor::empty({T}, DType::kF32, device_);
  if (config_.norm == NormKind::kRmsNorm) {
    rmsnorm_forward(out, rstd, x, weight, eps);
    return;
  }
  mean = Tensor::empty({T}, DType::kF32, device_);
  layernorm_forward(out, mean, rstd, x, weight, bias, eps);
}

void LlamaModel::norm_backward(Tensor& dx, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& x,
                               const Tensor& weight, const Tensor& mean, const Tensor& rstd, bool accumulate) const {
  if (config_.norm == NormKind::kRmsNorm) {
    rmsnorm_backward(dx, dweight, dout, x, weight, rstd, accumulate);
    return;
  }
  layernorm_backward(dx, dweight, dbias, dout, x, weight, mean, rstd, accumulate);
}

// The residual stream entering layer 0: the token embeddings (plus wpe[position_ids], learned
// positions).
Tensor LlamaModel::embed(const LlamaBatch& batch) {
  const int64_t T = batch.input_ids.numel(), C = config_.hidden_size;
  Tensor x = Tensor::empty({T, C}, dtype_, device_);
  embedding_forward(x, batch.input_ids, params_.embed_tokens);
  if (config_.positions == PositionKind::kLearned) {  // x += wpe[position_ids]
    Tensor pos = Tensor::empty({T, C}, dtype_, device_);
    embedding_forward(pos, batch.position_ids, params_.embed_positions);
    add_inplace(x, pos);
  }
  return x;
}

// Layer l's input was not kept (kRecompute): from the nearest kept input below it (taken back from
// the host if it waits there), or from the embedding, the layers in between run forward again and
// each one's input is kept for its own backward (which follows this one's), l's among them.
void LlamaModel::recompute_inputs(int64_t l) {
  Acts& a = *acts_;
  int64_t j = l - 1;
  while (j >= 0 && !a.layers[j].x_in.defined() && !a.layers[j].x_in_host) --j;
  Tensor x;
  if (j < 0) {
    j = 0;
    x = a.layers[0].x_in = embed(a.batch);
  } else {
    LayerActs& base = a.layers[j];
    if (base.x_in_host) {
      base.x_in = offload_->take(*base.x_in_host);
      base.x_in_host.reset();
    }
    x = base.x_in;
  }
  for (; j < l; ++j) {
    LayerActs scratch;  // this forward's activations: dropped, the layer's backward recomputes its own
    acquire_layer(j, j + 1);
    x = layer_forward(j, x, scratch);
    release_layer(j);
    a.layers[j + 1].x_in = x;
  }
}

LossStats PendingLoss::get() {
  const Tensor& losses = losses_.get();
  const Tensor& targets = targets_.get();
  const float* lv = losses.data<float>();
  const int32_t* tv = targets.data<int32_t>();
  LossStats stats;
  for (int64_t t = 0; t < losses.numel(); ++t) {
    if (tv[t] == kIgnoreIndex) continue;
    stats.loss_sum += lv[t];
    stats.good_tokens += 1;
  }
  return stats;
}

LossStats LlamaModel::forward(const LlamaBatch& batch, Attention& attention, Tensor* logits_out,
                              const LossBackward* loss_backward) {
  return forward_pending(batch, attention, logits_out, loss_backward).get();
}

// Partitioned gradients: the embedding's, final norm's and LM head's are this pass's only (the sink
// accumulates them), zeroed before the pass first writes one (the fused loss backward in forward,
// or backward).
void LlamaModel::zero_edge_grads() {
  Acts& a = *acts_;
  if (!grad_sink_ || a.edge_grads_zeroed) return;
  for (auto& [name, g] : grads_.named())
    if (name.rfind("model.layers.", 0) != 0) g->zero();
  a.edge_grads_zeroed = true;
}

PendingLoss LlamaModel::forward_pending(const LlamaBatch& batch, Attention& attention, Tensor* logits_out,
                                        const LossBackward* loss_backward) {
  const LlamaConfig& c = config_;
  const int64_t T = batch.input_ids.numel(), C = c.hidden_size, V = c.vocab_size;
  check_shape(batch.position_ids, {T}, "position_ids");
  check_shape(batch.targets, {T}, "targets");
  const DType act = dtype_;

  acts_ = std::make_shared<Acts>();
  held_ = nullptr;  // (a step that threw may have left a layer acquired)
  held_layer_ = -1;
  Acts& a = *acts_;
  a.batch = batch;
  a.inv_freq = rope_table(batch.rope_len);
  a.attention = &attention;
  a.layers.resize(c.num_layers);

  SEQPAR_CHECK(policy_ == ActivationPolicy::kCheckpoint ||
                   std::count(placement_.begin(), placement_.end(), InputPlace::kRecompute) == 0,
               "LlamaModel: recomputed layer inputs need the kCheckpoint activation policy");
  gate(-1);
  Tensor x = embed(batch);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    LayerActs& s = a.layers[l];
    acquire_layer(l, l + 1 < c.num_layers ? l + 1 : -1);
    x = layer_forward(l, x, s);
    release_layer(l);
    if (policy_ != ActivationPolicy::kKeep && place(l) != InputPlace::kFull) {
      // Keep the block input (and, with kCheckpointKeepAttention, the attention's output and
      // context); backward recomputes the rest.
      LayerActs kept;
      kept.x_in = std::move(s.x_in);
      if (policy_ == ActivationPolicy::kCheckpointKeepAttention) {
        kept.attn_out = std::move(s.attn_out);
        kept.attn_ctx = std::move(s.attn_ctx);
        // Where the attention lets go of q, k, v (one rank's), backward projects them again: the
        // layer keeps its attention's output and LSE only. Else the q/k norms' inputs stay too.
        kept.attn_inputs_released = a.attention->release_inputs(*kept.attn_ctx);
        if (!kept.attn_inputs_released) {
          kept.q_raw = std::move(s.q_raw);
          kept.k_raw = std::move(s.k_raw);
          kept.rstd_q = std::move(s.rstd_q);
          kept.rstd_k = std::move(s.rstd_k);
        }
      }
      s = std::move(kept);
      if (place(l) == InputPlace::kHost) s.x_in_host = offload_->put(std::exchange(s.x_in, Tensor()));
      if (place(l) == InputPlace::kRecompute) s.x_in = Tensor();
      if (offload_) offload_->collect();  // the finished copies of the layers below give their buffers back
    }
  }
  a.x_final = x;
  a.xn_f = Tensor::empty({T, C}, act, device_);
  gate(c.num_layers);
  norm_forward(a.xn_f, a.rstd_f, a.mean_f, x, params_.final_norm, params_.final_norm_bias);
  const Tensor& head = c.tie_word_embeddings ? params_.embed_tokens : params_.lm_head;
  Tensor losses = Tensor::empty({T}, DType::kF32, device_);
  a.lse = Tensor::empty({T}, DType::kF32, device_);
  if (tiled_loss(T) && logits_out == nullptr) {
    // Tiled LM head + loss: no [T, V] logits. Either backward recomputes each tile's, or (a training
    // forward given loss_backward) each tile's logits turn into their gradient here and give dxn and
    // the head's gradient, and backward starts at the final norm.
    const bool fused = loss_backward != nullptr;
    if (fused) {
      if (loss_backward->before_write) loss_backward->before_write();
      zero_edge_grads();
      a.dxn_f = Tensor::empty({T, C}, act, device_);
      a.fused_dloss = loss_backward->dloss;
    }
    for (int64_t t0 = 0; t0 < T; t0 += loss_tile_) {
      const int64_t t1 = std::min(T, t0 + loss_tile_);
      const Tensor xn = a.xn_f.rows(t0, t1), targets = batch.targets.rows(t0, t1);
      Tensor logits = Tensor::empty({t1 - t0, V}, act, device_);
      linear_forward(logits, xn, head, nullptr);
      Tensor l = losses.rows(t0, t1), lse = a.lse.rows(t0, t1);
      cross_entropy_forward(l, logits, targets, &lse);
      if (fused) loss_tile_backward(t0, t1, logits, a.fused_dloss, a.dxn_f);
    }
    if (fused) a.xn_f = a.lse = Tensor();  // only the loss backward read them
  } else {
    a.logits = Tensor::empty({T, V}, act, device_);
    linear_forward(a.logits, a.xn_f, head, nullptr);
    cross_entropy_forward(losses, a.logits, batch.targets, &a.lse);
  }
  if (logits_out) *logits_out = a.logits;
  a.logits_lent = logits_out != nullptr;
  return PendingLoss(losses, batch.targets);
}

void LlamaModel::backward(float dloss) {
  SEQPAR_CHECK(acts_ != nullptr, "LlamaModel::backward called without a forward");
  const LlamaConfig& c = config_;
  Acts& a = *acts_;
  const int64_t T = a.batch.input_ids.numel(), C = c.hidden_size, V = c.vocab_size;
  const int64_t H = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
  const DType act = dtype_;

  zero_edge_grads();
  // LM head and final norm (per tile when forward tiled the loss), unless forward ran the loss
  // backward.
  const Tensor& head = c.tie_word_embeddings ? params_.embed_tokens : params_.lm_head;
  Tensor& dhead = c.tie_word_embeddings ? grads_.embed_tokens : grads_.lm_head;
  const bool fused = a.dxn_f.defined();
  SEQPAR_CHECK(!fused || dloss == a.fused_dloss,
               "LlamaModel::backward: dloss {} but forward ran the loss backward with {}", dloss, a.fused_dloss);
  Tensor dxn = fused ? std::move(a.dxn_f) : Tensor::empty({T, C}, act, device_);
  if (a.logits.defined()) {
    // The logits' gradient is written over them (one pass with the forward's logsumexp), unless the
    // caller holds them.
    Tensor dlogits = a.logits_lent ? Tensor::empty({T, V}, act, device_) : a.logits;
    cross_entropy_backward(dlogits, a.logits, a.batch.targets, dloss, &a.lse);
    a.logits = Tensor();
    linear_backward(dxn, dhead, dlogits, a.xn_f, head, 0.f);
  } else if (!fused) {
    for (int64_t t0 = 0; t0 < T; t0 += loss_tile_) {
      const int64_t t1 = std::min(T, t0 + loss_tile_);
      Tensor logits = Tensor::empty({t1 - t0, V}, act, device_);
      linear_forward(logits, a.xn_f.rows(t0, t1), head, nullptr);
      loss_tile_backward(t0, t1, logits, dloss, dxn);
    }
  }
  a.lse = Tensor();
  Tensor dx = Tensor::empty({T, C}, act, device_);  // gradient of the residual stream
  norm_backward(dx, grads_.final_norm, grads_.final_norm_bias, dxn, a.x_final, params_.final_norm, a.mean_f, a.rstd_f);
  // The final norm's activations are done with: free them before the layers' backward (the peak).
  a.x_final = a.xn_f = a.rstd_f = a.mean_f = Tensor();
  dxn = Tensor();

  // Each layer's backward holds dx throughout (the norms add their input gradients into it) and dxn
  // (a norm's output gradient) only while it is used; the MLP half's activations
  // are freed before attention's backward, the layer's peak (train/memory_plan.cpp counts each phase).
  for (int64_t l = c.num_layers - 1; l >= 0; --l) {
    // A recomputed input (the top of a run of them): the layers below run forward again first.
    if (policy_ != ActivationPolicy::kKeep && !a.layers[l].x_in.defined() && !a.layers[l].x_in_host)
      recompute_inputs(l);
    acquire_layer(l, l - 1);
    const LlamaLayerParams& P = layer_params(l);
    LlamaLayerParams& G = grads_.layers[l];
    LayerActs& s = a.layers[l];
    // The forward's last copies to the host (finished by now) and the layer above's copy back hold
    // device buffers until collected: not through this layer's backward.
    if (offload_) offload_->collect();
    if (s.x_in_host) {  // offloaded: back now, and the layer below's on its way during this backward
      s.x_in = offload_->take(*s.x_in_host);
      s.x_in_host.reset();
    }
    if (l > 0 && a.layers[l - 1].x_in_host) offload_->prefetch(*a.layers[l - 1].x_in_host);
    if (!s.xn1.defined()) recompute_layer(l, s);  // a checkpointed layer
    if (grad_sink_) grad_block_.zero();
    // MLP: x_out = x_mid + h @ Wdown^T; tiled when forward was (no [T, F] tensors kept).
    dxn = Tensor::empty({T, C}, act, device_);
    if (s.up.defined()) {
      mlp_tile_backward(l, dx, s.xn2, s.gate, s.up, s.h, dxn);
    } else {
      for (int64_t t0 = 0; t0 < T; t0 += mlp_tile_) {
        const int64_t t1 = std::min(T, t0 + mlp_tile_);
        Tensor gate, up, h, dxn_t = dxn.rows(t0, t1);
        const Tensor xn = s.xn2.rows(t0, t1);
        mlp_tile_forward(l, xn, gate, up, h, /*want_h=*/false);  // (what the backward reads)
        mlp_tile_backward(l, dx.rows(t0, t1), xn, gate, up, h, dxn_t);
      }
    }
    if (c.mlp_bias) bias_backward(G.down_bias, dx);
    // dx += the post norm's input gradient: dx is now d(x_mid).
    norm_backward(dx, G.post_norm, G.post_norm_bias, dxn, s.x_mid, P.post_norm, s.mean2, s.rstd2, /*accumulate=*/true);
    // The MLP half is done with: its activations and dxn are not held through attention's backward.
    dxn = Tensor();
    s.x_mid = s.xn2 = s.rstd2 = s.mean2 = s.gate = s.up = s.h = Tensor();
    if (c.o_bias) bias_backward(G.o_bias, dx);
    // Attention: x_mid = x_in + attn_out @ Wo^T.
    Tensor dattn = Tensor::empty({T, H * D}, act, device_);
    linear_backward(dattn, G.o_proj, dx, s.attn_out.view({T, H * D}), P.o_proj, 0.f);
    Tensor dq = Tensor::empty({T, H, D}, act, device_);
    Tensor dk = Tensor::empty({T, Hkv, D}, act, device_);
    Tensor dv = Tensor::empty({T, Hkv, D}, act, device_);
    a.attention->backward(*s.attn_ctx, dattn.view({T, H, D}), dq, dk, dv);
    s.attn_ctx.reset();
    dattn = Tensor();
    // dq, dk become the gradients of the projections' outputs.
    if (c.qk_norm) {
      head_norm_backward(dq, s.q_raw, P.q_norm, G.q_norm, s.rstd_q);
      head_norm_backward(dk, s.k_raw, P.k_norm, G.k_norm, s.rstd_k);
    } else if (c.positions == PositionKind::kRope) {
      rope_backward(dq, a.batch.position_ids, a.inv_freq, rope_scale_);
      rope_backward(dk, a.batch.position_ids, a.inv_freq, rope_scale_);
    }
    if (c.qkv_bias) {
      bias_backward(G.q_bias, dq.view({T, H * D}));
      bias_backward(G.k_bias, dk.view({T, Hkv * D}));
      bias_backward(G.v_bias, dv.view({T, Hkv * D}));
    }
    dxn = Tensor::empty({T, C}, act, device_);
    linear_backward(dxn, G.q_proj, dq.view({T, H * D}), s.xn1, P.q_proj, 0.f);
    linear_backward(dxn, G.k_proj, dk.view({T, Hkv * D}), s.xn1, P.k_proj, 1.f);
    linear_backward(dxn, G.v_proj, dv.view({T, Hkv * D}), s.xn1, P.v_proj, 1.f);
    dq = dk = dv = Tensor();
    // dx += the input norm's input gradient: dx is now d(x_in).
    norm_backward(dx, G.input_norm, G.input_norm_bias, dxn, s.x_in, P.input_norm, s.mean1, s.rstd1, /*accumulate=*/true);
    dxn = Tensor();
    s = LayerActs();
    release_layer(l);
    if (grad_sink_) grad_sink_(l, grad_block_);
  }
  if (offload_) offload_->collect();
  embedding_backward(grads_.embed_tokens, dx, a.batch.input_ids);
  if (c.positions == PositionKind::kLearned) embedding_backward(grads_.embed_positions, dx, a.batch.position_ids);
  acts_.reset();
  if (grad_sink_) grad_sink_(-1, Tensor());
}

}  // namespace seqpar
