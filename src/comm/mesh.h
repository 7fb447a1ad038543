// DeviceMesh: the named axes of the world, dp_replicate × dp_shard × sp, with sp = ring ×
// ulysses for the hybrid. Rank order (innermost first): ulysses, ring, dp_shard, dp_replicate;
// so a Ulysses group is consecutive ranks (one NVLink island) and the ring spans them.
//   world_rank = ((dp_rep * dp_shard_size + dp_sh) * ring_size + ring_idx) * ulysses_size + uly_idx
//   sp_rank    = ring_idx * ulysses_size + uly_idx
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace seqpar {

struct MeshShape {
  int dp_replicate = 1;
  int dp_shard = 1;
  int ulysses = 1;
  int ring = 1;

  int sp() const { return ulysses * ring; }
  int dp() const { return dp_replicate * dp_shard; }
  int world() const { return dp() * sp(); }
  // Throws InputError when an axis is < 1 or the product differs from world, with the numbers:
  // "dp_replicate=1 x dp_shard=2 x sp=4 (ulysses=2 x ring=2) = 8 != world size 6".
  void validate(int world_size) const;
  std::string str() const;
};

class DeviceMesh {
 public:
  // Collective over `world` (every rank calls it): splits the sub-communicators.
  DeviceMesh(Communicator& world, const MeshShape& shape);

  const MeshShape& shape() const { return shape_; }
  Communicator& world() { return *world_; }
  Communicator& sp() { return *sp_; }            // ulysses × ring: one sequence's ranks
  Communicator& ulysses() { return *ulysses_; }  // inside an sp group
  Communicator& ring() { return *ring_; }        // across ulysses groups, same ulysses index
  Communicator& dp() { return *dp_; }            // same sp rank, across data-parallel replicas

  int dp_rank() const { return dp_rank_; }
  int sp_rank() const { return sp_rank_; }

 private:
  MeshShape shape_;
  Communicator* world_;
  std::unique_ptr<Communicator> sp_, ulysses_, ring_, dp_;
  int dp_rank_ = 0;
  int sp_rank_ = 0;
};

}  // namespace seqpar
