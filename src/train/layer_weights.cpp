#include "train/layer_weights.h"

#include <fmt/format.h>

#include <map>
#include <string>

#include "train/optimizer.h"

namespace seqpar {

ShardedLayerWeights::ShardedLayerWeights(Communicator& world, const LlamaConfig& config, const ShardLayout& layout,
                                         DType dtype, Device device, bool host, bool pinned)
    : world_(world), config_(config), layout_(layout), device_(device), host_(host) {
  SEQPAR_CHECK_EQ(layout.regions.size(), static_cast<size_t>(config.num_layers + 2),
                  "ShardedLayerWeights: a per_layer layout");
  const int64_t n = layout.shard_len;
  try {
    store_ = host ? Tensor::empty({n}, dtype, host_allocator_for(device, pinned)) : Tensor::empty({n}, dtype, device);
  } catch (const Error& e) {
    throw InputError(fmt::format("offload_param={}: allocating the weights' store ({:.2f} GiB of {} memory) failed: {}",
                                 host ? "cpu" : "none", static_cast<double>(n) * dtype_size(dtype) / (1ll << 30),
                                 host ? (pinned ? "pinned host" : "host") : "device", e.what()));
  }
  store_.zero();
  if (layout.world == 1 && !host) {
    for (int64_t l = 0; l < config.num_layers; ++l) {
      const ShardLayout::Region& g = layout.regions[layout.layer_region(l)];
      store_views_.push_back(views(l, store_.rows(g.shard_begin, g.shard_begin + g.len)));
    }
    return;
  }
  if (layout.world == 1) copies_ = std::make_unique<CopyStream>(device);
  const int64_t len = layout.regions[layout.layer_region(0)].len;
  for (Slot& s : slots_) s.buffer = Tensor::empty({len}, dtype, device);
}

int64_t ShardedLayerWeights::buffer_bytes() const {
  int64_t b = 0;
  for (const Slot& s : slots_) b += s.buffer.defined() ? static_cast<int64_t>(s.buffer.nbytes()) : 0;
  return b;
}

void ShardedLayerWeights::invalidate() {
  for (Slot& s : slots_) {
    SEQPAR_CHECK(!s.held, "ShardedLayerWeights::invalidate: layer {} is held", s.layer);
    s.layer = -1;
  }
}

// Layer l's tensors as views into its region (in the buffer's order, LlamaParams::shapes), by name:
// generic over the tensors a layer has.
LlamaLayerParams ShardedLayerWeights::views(int64_t l, const Tensor& region) const {
  LlamaParams p = LlamaParams::skeleton(config_);  // (every optional tensor the config has, named)
  std::map<std::string, Tensor*> by_name;
  for (auto& [name, t] : p.named()) by_name[name] = t;
  const std::string prefix = fmt::format("model.layers.{}.", l);
  const int64_t begin = layout_.regions[layout_.layer_region(l)].flat_begin;
  const auto shapes = LlamaParams::shapes(config_);
  const auto offsets = flat_offsets(config_);
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (shapes[i].first.rfind(prefix, 0) != 0) continue;
    auto it = by_name.find(shapes[i].first);
    SEQPAR_CHECK(it != by_name.end(), "ShardedLayerWeights: no parameter named {}", shapes[i].first);
    const int64_t at = offsets[i].second - begin;
    *it->second = region.rows(at, at + shape_numel(shapes[i].second)).view(shapes[i].second);
  }
  return p.layers[l];
}

int ShardedLayerWeights::slot_of(int64_t l) const {
  for (int i = 0; i < 2; ++i)
    if (slots_[i].layer == l) return i;
  return -1;
}

void ShardedLayerWeights::fetch(int64_t l, int slot) {
  Slot& s = slots_[slot];
  SEQPAR_CHECK(!s.held, "ShardedLayerWeights: fetching layer {} into a held buffer (layer {})", l, s.layer);
  const size_t k = layout_.layer_region(l);
  if (copies_) {
    // The copy waits for the work queued so far (the kernels of the layer this buffer held).
    const auto [lo, hi] = layout_.piece(k);
    s.ticket = copies_->copy(s.buffer, FlatRef{store_, false}.range(layout_, k, lo, hi));
  } else {
    all_gather_region(world_, layout_, k, FlatRef{store_, false}, s.buffer, device_);
    s.ticket = -1;
  }
  s.layer = l;
  s.params = views(l, s.buffer);
}

const LlamaLayerParams& ShardedLayerWeights::acquire(int64_t l, int64_t next) {
  if (!store_views_.empty()) return store_views_.at(l);
  int slot = slot_of(l);
  if (slot < 0) {
    slot = slots_[0].held ? 1 : slots_[1].held ? 0 : (slots_[0].layer == next ? 1 : 0);
    fetch(l, slot);
  }
  Slot& s = slots_[slot];
  s.held = true;
  if (copies_ && s.ticket >= 0) copies_->stream_wait(s.ticket);
  // Prefetch on the side stream (one rank, host weights), into the other buffer.
  if (copies_ && next >= 0 && slot_of(next) < 0 && !slots_[1 - slot].held) fetch(next, 1 - slot);
  return s.params;
}

void ShardedLayerWeights::release(int64_t l) {
  if (!store_views_.empty()) return;
  const int slot = slot_of(l);
  SEQPAR_CHECK(slot >= 0 && slots_[slot].held, "ShardedLayerWeights::release: layer {} is not held", l);
  slots_[slot].held = false;
}

}  // namespace seqpar
