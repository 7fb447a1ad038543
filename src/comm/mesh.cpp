// DeviceMesh: coordinates of this rank on the named axes, and one split of the world per
// sub-communicator (see mesh.h for the rank order).
#include "comm/mesh.h"

namespace seqpar {

std::string MeshShape::str() const {
  return fmt::format("dp_replicate={} x dp_shard={} x sp={} (ulysses={} x ring={})", dp_replicate, dp_shard, sp(),
                     ulysses, ring);
}

void MeshShape::validate(int world_size) const {
  const std::pair<const char*, int> axes[] = {
      {"dp_replicate", dp_replicate}, {"dp_shard", dp_shard}, {"ulysses", ulysses}, {"ring", ring}};
  for (const auto& [name, value] : axes)
    SEQPAR_INPUT_CHECK(value >= 1, "mesh axis {}={} must be >= 1 ({})", name, value, str());
  // In 64 bits: four ints can overflow an int product.
  const int64_t product = int64_t{dp_replicate} * dp_shard * ulysses * ring;
  SEQPAR_INPUT_CHECK(product == world_size, "{} = {} != world size {}", str(), product, world_size);
}

DeviceMesh::DeviceMesh(Communicator& world, const MeshShape& shape) : shape_(shape), world_(&world) {
  shape_.validate(world.size());
  // world_rank = ((dp_rep * dp_shard + dp_sh) * ring + ring_idx) * ulysses + uly_idx
  const int r = world.rank();
  const int uly_idx = r % shape_.ulysses;
  const int ring_idx = (r / shape_.ulysses) % shape_.ring;
  const int dp_index = r / shape_.sp();  // dp_rep * dp_shard + dp_sh
  sp_rank_ = ring_idx * shape_.ulysses + uly_idx;
  dp_rank_ = dp_index;
  // Every rank makes the same four splits in the same order (split is collective). A color names
  // the group, a key orders the ranks inside it.
  sp_ = world.split(/*color=*/dp_index, /*key=*/sp_rank_);
  ulysses_ = world.split(/*color=*/dp_index * shape_.ring + ring_idx, /*key=*/uly_idx);
  ring_ = world.split(/*color=*/dp_index * shape_.ulysses + uly_idx, /*key=*/ring_idx);
  dp_ = world.split(/*color=*/sp_rank_, /*key=*/dp_index);
}

}  // namespace seqpar
