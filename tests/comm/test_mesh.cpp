// DeviceMesh: every sub-communicator has the members mesh.h's rank formula says, in order.
#include <gtest/gtest.h>

#include <mutex>

#include "comm/mesh.h"
#include "comm_test_util.h"

namespace seqpar {
namespace {

struct Coord {
  int dp_rep, dp_sh, ring_idx, uly_idx;
};

// The formula of mesh.h, written out on its own so the test does not reuse mesh.cpp's code.
int world_rank_of(const MeshShape& s, const Coord& c) {
  return ((c.dp_rep * s.dp_shard + c.dp_sh) * s.ring + c.ring_idx) * s.ulysses + c.uly_idx;
}

std::vector<Coord> all_coords(const MeshShape& s) {
  std::vector<Coord> v;
  for (int a = 0; a < s.dp_replicate; ++a)
    for (int b = 0; b < s.dp_shard; ++b)
      for (int c = 0; c < s.ring; ++c)
        for (int d = 0; d < s.ulysses; ++d) v.push_back({a, b, c, d});
  return v;
}

// World ranks of `me`'s group on one axis, ordered by their rank in that group. `same` says
// whether a coordinate is in me's group, `order` gives its rank inside it.
template <typename Same, typename Order>
std::vector<int64_t> expected_group(const MeshShape& s, const Coord& me, Same same, Order order) {
  std::vector<std::pair<int, int64_t>> found;
  for (const Coord& c : all_coords(s))
    if (same(me, c)) found.push_back({order(c), world_rank_of(s, c)});
  std::sort(found.begin(), found.end());
  std::vector<int64_t> out;
  for (auto& [o, r] : found) out.push_back(r);
  return out;
}

// World ranks of a communicator's members, by their rank in it (via all_gather).
std::vector<int64_t> members_of(Communicator& comm, int world_rank) {
  Tensor out = Tensor::empty({comm.size()}, DType::kI64);
  comm.all_gather(out, Tensor::from_vector<int64_t>({1}, {int64_t{world_rank}}));
  return std::vector<int64_t>(out.data<int64_t>(), out.data<int64_t>() + comm.size());
}

void check_mesh(const MeshShape& shape) {
  SCOPED_TRACE(shape.str());
  const int world = shape.world();
  std::mutex mu;
  int checked = 0;
  run_local_ranks(world, [&](Communicator& c) {
    DeviceMesh mesh(c, shape);
    Coord me{};
    for (const Coord& k : all_coords(shape))
      if (world_rank_of(shape, k) == c.rank()) me = k;
    const int U = shape.ulysses, R = shape.ring;
    auto sp_rank = [&](const Coord& k) { return k.ring_idx * U + k.uly_idx; };
    auto dp_rank = [&](const Coord& k) { return k.dp_rep * shape.dp_shard + k.dp_sh; };
    auto same_dp = [&](const Coord& a, const Coord& b) { return dp_rank(a) == dp_rank(b); };

    EXPECT_EQ(&mesh.world(), &c);
    EXPECT_EQ(mesh.sp_rank(), sp_rank(me));
    EXPECT_EQ(mesh.dp_rank(), dp_rank(me));
    EXPECT_EQ(mesh.sp().rank(), sp_rank(me));
    EXPECT_EQ(mesh.dp().rank(), dp_rank(me));
    EXPECT_EQ(mesh.ulysses().rank(), me.uly_idx);
    EXPECT_EQ(mesh.ring().rank(), me.ring_idx);
    EXPECT_EQ(mesh.sp().size(), U * R);
    EXPECT_EQ(mesh.ulysses().size(), U);
    EXPECT_EQ(mesh.ring().size(), R);
    EXPECT_EQ(mesh.dp().size(), shape.dp());

    EXPECT_EQ(members_of(mesh.sp(), c.rank()), expected_group(shape, me, same_dp, sp_rank));
    EXPECT_EQ(members_of(mesh.ulysses(), c.rank()),
              expected_group(
                  shape, me, [&](const Coord& a, const Coord& b) { return same_dp(a, b) && a.ring_idx == b.ring_idx; },
                  [](const Coord& k) { return k.uly_idx; }));
    EXPECT_EQ(members_of(mesh.ring(), c.rank()),
              expected_group(
                  shape, me, [&](const Coord& a, const Coord& b) { return same_dp(a, b) && a.uly_idx == b.uly_idx; },
                  [](const Coord& k) { return k.ring_idx; }));
    EXPECT_EQ(members_of(mesh.dp(), c.rank()),
              expected_group(
                  shape, me, [&](const Coord& a, const Coord& b) { return sp_rank(a) == sp_rank(b); }, dp_rank));
    // A Ulysses group is consecutive world ranks (one NVLink island).
    auto uly = members_of(mesh.ulysses(), c.rank());
    for (size_t i = 1; i < uly.size(); ++i) EXPECT_EQ(uly[i], uly[i - 1] + 1);
    std::lock_guard<std::mutex> lock(mu);
    ++checked;
  });
  EXPECT_EQ(checked, world);
}

TEST(DeviceMesh, SubCommunicatorsHaveTheFormulaMembers) {
  check_mesh({.dp_replicate = 2, .dp_shard = 1, .ulysses = 2, .ring = 2});
  check_mesh({.dp_replicate = 1, .dp_shard = 2, .ulysses = 1, .ring = 3});
  check_mesh({.dp_replicate = 1, .dp_shard = 1, .ulysses = 4, .ring = 1});
  check_mesh({.dp_replicate = 1, .dp_shard = 1, .ulysses = 1, .ring = 1});
  check_mesh({.dp_replicate = 2, .dp_shard = 2, .ulysses = 1, .ring = 2});
}

TEST(DeviceMesh, CollectivesOverTheAxesCompose) {
  // Summing over sp then dp equals summing over the world.
  const MeshShape shape{.dp_replicate = 1, .dp_shard = 2, .ulysses = 2, .ring = 2};
  run_local_ranks(shape.world(), [&](Communicator& c) {
    DeviceMesh mesh(c, shape);
    Tensor t = Tensor::from_vector<int64_t>({1}, {int64_t{1} << c.rank()});
    mesh.ulysses().all_reduce(t, ReduceOp::kSum);
    mesh.ring().all_reduce(t, ReduceOp::kSum);
    mesh.dp().all_reduce(t, ReduceOp::kSum);
    EXPECT_EQ(t.data<int64_t>()[0], (int64_t{1} << shape.world()) - 1);
  });
}

std::string validate_message(const MeshShape& s, int world) {
  try {
    s.validate(world);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MeshShape, ValidateMessagesGiveTheNumbers) {
  MeshShape s{.dp_replicate = 1, .dp_shard = 2, .ulysses = 2, .ring = 2};
  EXPECT_EQ(s.sp(), 4);
  EXPECT_EQ(s.dp(), 2);
  EXPECT_EQ(s.world(), 8);
  EXPECT_EQ(s.str(), "dp_replicate=1 x dp_shard=2 x sp=4 (ulysses=2 x ring=2)");
  EXPECT_NO_THROW(s.validate(8));
  EXPECT_EQ(validate_message(s, 6), "dp_replicate=1 x dp_shard=2 x sp=4 (ulysses=2 x ring=2) = 8 != world size 6");
  EXPECT_EQ(validate_message({.dp_replicate = 1, .dp_shard = 1, .ulysses = 0, .ring = 2}, 4),
            "mesh axis ulysses=0 must be >= 1 (dp_replicate=1 x dp_shard=1 x sp=0 (ulysses=0 x ring=2))");
  EXPECT_EQ(validate_message({.dp_replicate = -1, .dp_shard = 1, .ulysses = 1, .ring = 1}, 1),
            "mesh axis dp_replicate=-1 must be >= 1 (dp_replicate=-1 x dp_shard=1 x sp=1 (ulysses=1 x ring=1))");
}

TEST(DeviceMesh, WrongWorldSizeFailsOnEveryRank) {
  std::string msg = testing::local_run_error(4, [](Communicator& c) {
    DeviceMesh mesh(c, {.dp_replicate = 1, .dp_shard = 1, .ulysses = 2, .ring = 4});
  });
  EXPECT_NE(msg.find("dp_replicate=1 x dp_shard=1 x sp=8 (ulysses=2 x ring=4) = 8 != world size 4"), std::string::npos)
      << msg;
  EXPECT_THROW(run_local_ranks(4, [](Communicator& c) { DeviceMesh mesh(c, {.ulysses = 3}); }), InputError);
}

}  // namespace
}  // namespace seqpar
