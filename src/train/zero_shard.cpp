#include "train/zero_shard.h"

#include <algorithm>
#include <map>

#include "kernels/ops.h"

namespace seqpar {

namespace {

int64_t cap_for(int64_t len, int world) { return LlamaParams::padded((len + world - 1) / world); }

// The layout's regions with their caps and shard offsets filled in.
ShardLayout finish(ShardLayout s) {
  s.shard_len = 0;
  for (ShardLayout::Region& r : s.regions) {
    r.cap = cap_for(r.len, s.world);
    r.shard_begin = s.shard_len;
    s.shard_len += r.cap;
  }
  return s;
}

}  // namespace

ShardLayout ShardLayout::whole(int64_t total) { return contiguous(total, 0, 1); }

ShardLayout ShardLayout::contiguous(int64_t total, int rank, int world) {
  SEQPAR_CHECK(world >= 1 && rank >= 0 && rank < world, "ShardLayout: rank {} of {}", rank, world);
  ShardLayout s;
  s.rank = rank;
  s.world = world;
  s.total = total;
  s.regions.push_back({0, total, 0, 0});
  return finish(s);
}

ShardLayout ShardLayout::per_layer(const LlamaConfig& config, int rank, int world) {
  SEQPAR_CHECK(world >= 1 && rank >= 0 && rank < world, "ShardLayout: rank {} of {}", rank, world);
  const LlamaParams::FlatLayout f = LlamaParams::flat_layout(config);
  ShardLayout s;
  s.rank = rank;
  s.world = world;
  s.total = f.total;
  s.regions.push_back({0, f.layers, 0, 0});  // the embedding
  for (int64_t l = 0; l < config.num_layers; ++l)
    s.regions.push_back({f.layers + l * f.layer_elems, f.layer_elems, 0, 0});
  s.regions.push_back({f.final_norm, f.total - f.final_norm, 0, 0});  // final norm, LM head
  return finish(s);
}

std::pair<int64_t, int64_t> ShardLayout::piece(size_t k, int r) const {
  const Region& g = regions.at(k);
  return {g.flat_begin + std::min(g.len, r * g.cap), g.flat_begin + std::min(g.len, (r + 1) * g.cap)};
}

Tensor FlatRef::range(const ShardLayout& layout, size_t k, int64_t lo, int64_t hi) const {
  if (whole) return t.rows(lo, hi);
  const int64_t first = layout.piece(k).first, at = layout.regions[k].shard_begin;
  SEQPAR_CHECK(lo >= first && hi <= layout.piece(k).second, "FlatRef: [{}, {}) outside the piece of region {}", lo, hi,
               k);
  return t.rows(at + lo - first, at + hi - first);
}

std::vector<std::pair<std::string, int64_t>> flat_offsets(const LlamaConfig& config) {
  std::vector<std::pair<std::string, int64_t>> out;
  int64_t at = 0;
  for (const auto& [name, shape] : LlamaParams::shapes(config)) {
    out.emplace_back(name, at);
    at += LlamaParams::padded(shape_numel(shape));
  }
  return out;
}

namespace {

// Calls fn(tensor, [a, b) of the tensor's elements, [a, b) shifted into [lo, hi)'s coordinates) for
// every named tensor overlapping [lo, hi).
template <typename Params, typename Fn>
void for_overlaps(Params& p, const LlamaConfig& config, int64_t lo, int64_t hi, Fn fn) {
  const auto offsets = flat_offsets(config);
  const auto shapes = LlamaParams::shapes(config);
  // By name: a container may list fewer tensors than the config has (the model's edges under
  // ZeRO-3 hold no layer's optional tensors); those absent are not held, like undefined ones.
  auto named = p.named();
  std::map<std::string, decltype(named[0].second)> by_name;
  for (auto& [name, t] : named) by_name[name] = t;
  SEQPAR_CHECK(by_name.size() <= offsets.size(), "flat range: {} tensors, the config has {}", by_name.size(),
               offsets.size());
  size_t found = 0;
  for (size_t i = 0; i < offsets.size(); ++i) {
    auto it = by_name.find(offsets[i].first);
    if (it == by_name.end()) continue;
    ++found;
    const int64_t at = offsets[i].second;
    const int64_t n = shape_numel(shapes[i].second);
    const int64_t a = std::max(lo, at), b = std::min(hi, at + n);
    if (a < b) fn(it->second, a - at, b - at, a - lo, b - lo);
  }
  SEQPAR_CHECK_EQ(found, by_name.size(), "flat range: a tensor the config does not have");
}

// t in `dtype`, on t's device (cast on a GPU; the CPU converts in place of a copy).
Tensor converted(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  if (t.device().is_cpu()) return t.to_dtype(dtype);
  Tensor out = Tensor::empty(t.shape(), dtype, t.device());
  cast(out, t);
  return out;
}

}  // namespace

void read_flat_range(Tensor& dst, const LlamaParams& src, const LlamaConfig& config, int64_t lo, int64_t hi) {
  SEQPAR_CHECK_EQ(dst.numel(), hi - lo, "read_flat_range: destination size");
  dst.zero();
  for_overlaps(src, config, lo, hi, [&](const Tensor* t, int64_t a, int64_t b, int64_t da, int64_t db) {
    if (!t->defined()) return;
    dst.rows(da, db).copy_from(converted(t->view({t->numel()}).rows(a, b), dst.dtype()));
  });
}

void write_flat_range(LlamaParams& dst, const Tensor& src, const LlamaConfig& config, int64_t lo, int64_t hi) {
  SEQPAR_CHECK_EQ(src.numel(), hi - lo, "write_flat_range: source size");
  for_overlaps(dst, config, lo, hi, [&](Tensor* t, int64_t a, int64_t b, int64_t sa, int64_t sb) {
    if (!t->defined()) return;
    t->view({t->numel()}).rows(a, b).copy_from(converted(src.rows(sa, sb), t->dtype()));
  });
}

}  // namespace seqpar
