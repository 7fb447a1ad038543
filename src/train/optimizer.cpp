#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

namespace seqpar {

AdamW::AdamW(const LlamaConfig& model_config, const OptimizerConfig& config, const LlamaParams& params,
             Device device, ZeroShard shard)
    : config_(config), shard_(shard) {
  SEQPAR_CHECK(shard.size >= 1 && shard.rank >= 0 && shard.rank < shard.size, "AdamW: shard {} of {}", shard.rank,
               shard.size);
  const auto named = params.named();
  has_master_ = !named.empty() && named.front().second->dtype() != DType::kF32;
  if (sharded()) {
    SEQPAR_CHECK(params.all_in_flat(), "AdamW: ZeRO sharding needs the weights in one buffer");
    total_ = params.flat.numel();
    shard_len_ = shard_len_for(total_, shard.size);
    begin_ = std::min(total_, shard.rank * shard_len_);
    end_ = std::min(total_, begin_ + shard_len_);
    m_shard_ = Tensor::zeros({shard_len_}, DType::kF32, device);
    v_shard_ = Tensor::zeros({shard_len_}, DType::kF32, device);
    if (has_master_) {
      master_shard_ = Tensor::zeros({shard_len_}, DType::kF32, device);
      if (end_ > begin_) {
        Tensor dst = master_shard_.rows(0, end_ - begin_);
        cast(dst, params.flat.rows(begin_, end_));
      }
    }
    return;
  }
  m_ = LlamaParams::zeros(model_config, DType::kF32, device);
  v_ = LlamaParams::zeros(model_config, DType::kF32, device);
  if (!has_master_) return;
  master_ = LlamaParams::zeros(model_config, DType::kF32, device);
  auto dst = master_.named();
  for (size_t i = 0; i < dst.size(); ++i) cast(*dst[i].second, *named[i].second);
}

LlamaParams& AdamW::weights(LlamaParams& params) {
  SEQPAR_CHECK(!sharded(), "AdamW::weights: the optimizer is sharded (use full_state)");
  return has_master_ ? master_ : params;
}
LlamaParams& AdamW::exp_avg() {
  SEQPAR_CHECK(!sharded(), "AdamW::exp_avg: the optimizer is sharded (use full_state)");
  return m_;
}
LlamaParams& AdamW::exp_avg_sq() {
  SEQPAR_CHECK(!sharded(), "AdamW::exp_avg_sq: the optimizer is sharded (use full_state)");
  return v_;
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

float AdamW::step_shard(LlamaParams& params, const Tensor& grad_shard, double total_norm) {
  SEQPAR_CHECK(sharded(), "AdamW::step_shard: the optimizer is not sharded");
  SEQPAR_CHECK(params.all_in_flat() && params.flat.numel() == total_ && grad_shard.numel() >= end_ - begin_ &&
                   grad_shard.dtype() == DType::kF32,
               "AdamW::step_shard: the weights in one buffer of {} elements and an f32 gradient shard of >= {}",
               total_, end_ - begin_);
  ++step_;
  const float coef = clip_coefficient(total_norm, config_.clip);
  const int64_t n = end_ - begin_;
  if (n == 0) return coef;
  Tensor m = m_shard_.rows(0, n), v = v_shard_.rows(0, n), p = params.flat.rows(begin_, end_);
  const Tensor g = grad_shard.rows(0, n);
  if (has_master_) {
    Tensor w = master_shard_.rows(0, n);
    adamw_step(w, m, v, g, config_.adamw, step_, coef);
    cast(p, w);
  } else {
    adamw_step(p, m, v, g, config_.adamw, step_, coef);
  }
  return coef;
}

float AdamW::step(LlamaParams& params, LlamaParams& grads, double total_norm) {
  if (sharded()) {
    SEQPAR_CHECK(grads.all_in_flat() && grads.flat.numel() == total_ && params.all_in_flat(),
                 "AdamW: sharded steps need the weights and gradients in buffers of the same layout");
    return step_shard(params, grads.flat.rows(begin_, end_), total_norm);
  }
  ++step_;
  float coef = clip_coefficient(total_norm, config_.clip);
  auto p = params.named();
  auto g = grads.named();
  auto m = m_.named();
  auto v = v_.named();
  auto w = weights(params).named();
  for (size_t i = 0; i < p.size(); ++i) {
    adamw_step(*w[i].second, *m[i].second, *v[i].second, *g[i].second, config_.adamw, step_, coef);
    if (has_master_) cast(*p[i].second, *w[i].second);
  }
  return coef;
}

void AdamW::gather_params(Communicator& comm, LlamaParams& params) {
  if (!sharded()) return;
  SEQPAR_CHECK_EQ(comm.size(), shard_.size, "AdamW::gather_params: the communicator must hold the shard's ranks");
  SEQPAR_CHECK_EQ(comm.rank(), shard_.rank, "AdamW::gather_params: rank in the communicator");
  Tensor mine = Tensor::zeros({shard_len_}, params.flat.dtype(), params.flat.device());
  if (end_ > begin_) mine.rows(0, end_ - begin_).copy_from(params.flat.rows(begin_, end_));
  Tensor all = Tensor::empty({shard_len_ * shard_.size}, params.flat.dtype(), params.flat.device());
  comm.all_gather(all, mine);
  params.flat.copy_from(all.rows(0, total_));
}

AdamW::FullState AdamW::full_state(Communicator& comm, const LlamaConfig& model_config) {
  SEQPAR_CHECK(sharded(), "AdamW::full_state: the optimizer is not sharded (its state is exp_avg() etc.)");
  SEQPAR_CHECK_EQ(comm.size(), shard_.size, "AdamW::full_state: the communicator must hold the shard's ranks");
  const Device dev = m_shard_.device();
  FullState st;
  auto gather = [&](LlamaParams& dst, const Tensor& shard) {
    dst = LlamaParams::zeros(model_config, DType::kF32, dev, /*one_buffer=*/true);
    SEQPAR_CHECK_EQ(dst.flat.numel(), total_, "AdamW::full_state: buffer layout");
    Tensor all = Tensor::empty({shard_len_ * shard_.size}, DType::kF32, dev);
    comm.all_gather(all, shard);
    dst.flat.copy_from(all.rows(0, total_));
  };
  gather(st.exp_avg, m_shard_);
  gather(st.exp_avg_sq, v_shard_);
  if (has_master_) gather(st.master, master_shard_);
  return st;
}

void AdamW::load_full_state(const LlamaParams& exp_avg, const LlamaParams& exp_avg_sq, const LlamaParams* master) {
  SEQPAR_CHECK(sharded(), "AdamW::load_full_state: the optimizer is not sharded");
  SEQPAR_CHECK(!has_master_ || master != nullptr, "AdamW::load_full_state: the master weights are missing");
  auto take = [&](Tensor& shard, const LlamaParams& full) {
    SEQPAR_CHECK(full.all_in_flat() && full.flat.numel() == total_, "AdamW::load_full_state: buffer layout");
    if (end_ > begin_) shard.rows(0, end_ - begin_).copy_from(full.flat.rows(begin_, end_));
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

}  // namespace seqpar
