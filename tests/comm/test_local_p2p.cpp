// The local backend's point-to-point (send_recv, send_recv_async) and split.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "comm/communicator.h"
#include "comm_test_util.h"

namespace seqpar {
namespace {

using testing::local_run_error;

Tensor block_of(int owner, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(1000 * owner + i);
  return Tensor::from_vector<float>({n}, v);
}

// The ring attention pattern: post the next hop, compute on the current block, then wait.
TEST(LocalP2P, RingExchangeOverlappedWithComputeForSeveralLaps) {
  for (int P : {1, 2, 3, 4, 8}) {
    SCOPED_TRACE(fmt::format("P={}", P));
    const int64_t n = 64;
    const int hops = 2 * P + 1;  // more than one lap: messages between the same pair keep coming
    std::vector<std::vector<int>> seen(static_cast<size_t>(P));
    run_local_ranks(P, [&](Communicator& c) {
      const int me = c.rank(), next = (me + 1) % P, prev = (me + P - 1) % P;
      Tensor cur = block_of(me, n);
      Tensor acc = Tensor::zeros({n}, DType::kF32);
      for (int hop = 0; hop < hops; ++hop) {
        Tensor incoming = Tensor::empty({n}, DType::kF32);
        auto req = c.send_recv_async({{next, cur}}, {{prev, incoming}});
        // "Compute" on the current block while the next one is in flight...
        for (int64_t i = 0; i < n; ++i) acc.data<float>()[i] += cur.data<float>()[i];
        // ...then scribble over the send buffer: sends are copied when posted.
        cur.zero();
        req->wait();
        const float first = incoming.data<float>()[0];
        seen[static_cast<size_t>(me)].push_back(static_cast<int>(first) / 1000);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(incoming.data<float>()[i], first + static_cast<float>(i));
        cur = incoming;
      }
      // acc summed the blocks of ranks me, me-1, ..., hops of them.
      for (int64_t i = 0; i < n; ++i) {
        float expected = 0;
        for (int hop = 0; hop < hops; ++hop) expected += static_cast<float>(1000 * ((me - hop % P + P) % P) + i);
        ASSERT_EQ(acc.data<float>()[i], expected);
      }
    });
    for (int r = 0; r < P; ++r)
      for (int hop = 0; hop < hops; ++hop)
        EXPECT_EQ(seen[static_cast<size_t>(r)][static_cast<size_t>(hop)], ((r - hop - 1) % P + P) % P)
            << "rank " << r << " hop " << hop;
  }
}

TEST(LocalP2P, SeveralSendsBetweenOnePairStayOrdered) {
  run_local_ranks(2, [&](Communicator& c) {
    if (c.rank() == 0) {
      // Three requests and, inside one call, two sends to the same peer.
      for (int k = 0; k < 3; ++k) c.send_recv_async({{1, block_of(k, 4)}}, {})->wait();
      c.send_recv({{1, block_of(3, 4)}, {1, block_of(4, 5)}}, {});
    } else {
      std::vector<Tensor> bufs;
      std::vector<std::unique_ptr<CommRequest>> reqs;
      for (int k = 0; k < 3; ++k) {
        bufs.push_back(Tensor::empty({4}, DType::kF32));
        reqs.push_back(c.send_recv_async({}, {{0, bufs.back()}}));
      }
      // Waited in reverse order: each request still gets the message it was posted for.
      for (int k = 2; k >= 0; --k) reqs[static_cast<size_t>(k)]->wait();
      for (int k = 0; k < 3; ++k) EXPECT_EQ(bufs[static_cast<size_t>(k)].data<float>()[0], 1000.f * k);
      Tensor a = Tensor::empty({4}, DType::kF32), b = Tensor::empty({5}, DType::kF32);
      c.send_recv({}, {{0, a}, {0, b}});
      EXPECT_EQ(a.data<float>()[0], 3000.f);
      EXPECT_EQ(b.data<float>()[4], 4004.f);
    }
  });
}

TEST(LocalP2P, SendToSelfAndToManyPeers) {
  const int P = 4;
  run_local_ranks(P, [&](Communicator& c) {
    const int me = c.rank();
    std::vector<P2POp> sends, recvs;
    std::vector<Tensor> bufs;
    for (int q = 0; q < P; ++q) {
      sends.push_back({q, Tensor::from_vector<int32_t>({2}, {me, q})});
      bufs.push_back(Tensor::empty({2}, DType::kI32));
      recvs.push_back({q, bufs.back()});
    }
    c.send_recv(sends, recvs);
    for (int q = 0; q < P; ++q) {
      EXPECT_EQ(bufs[static_cast<size_t>(q)].data<int32_t>()[0], q);
      EXPECT_EQ(bufs[static_cast<size_t>(q)].data<int32_t>()[1], me);
    }
  });
}

TEST(LocalP2P, ReceiveSizeDifferentFromSendIsAnErrorNamingBoth) {
  std::string msg = local_run_error(2, [](Communicator& c) {
    if (c.rank() == 0) {
      c.send_recv({{1, Tensor::zeros({16}, DType::kF32)}}, {});
    } else {
      Tensor small = Tensor::empty({12}, DType::kF32);
      c.send_recv({}, {{0, small}});
    }
  });
  EXPECT_NE(msg.find("rank 1: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("12 elements of f32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("16 elements of f32"), std::string::npos) << msg;
}

TEST(LocalP2P, PeerOutOfRangeIsAnError) {
  std::string msg = local_run_error(2, [](Communicator& c) { c.send_recv({{2, Tensor::zeros({1}, DType::kF32)}}, {}); });
  EXPECT_NE(msg.find("peer 2 is not a rank of this 2-rank communicator"), std::string::npos) << msg;
}

TEST(LocalSplit, SubGroupsOrderedByKeyRunTheirOwnCollectives) {
  const int P = 8;
  std::vector<int> sub_rank(P), sub_size(P);
  std::vector<std::vector<int64_t>> members(P), inner_members(P);
  run_local_ranks(P, [&](Communicator& c) {
    const int me = c.rank();
    // Colors 0, 1, 2 by rank % 3; key -rank: each group in reverse world order.
    auto sub = c.split(me % 3, -me);
    sub_rank[static_cast<size_t>(me)] = sub->rank();
    sub_size[static_cast<size_t>(me)] = sub->size();
    Tensor g = Tensor::empty({sub->size()}, DType::kI64);
    sub->all_gather(g, Tensor::from_vector<int64_t>({1}, {int64_t{me}}));
    members[static_cast<size_t>(me)].assign(g.data<int64_t>(), g.data<int64_t>() + sub->size());
    Tensor t = Tensor::from_vector<int64_t>({1}, {int64_t{me}});
    sub->all_reduce(t, ReduceOp::kSum);
    int64_t sum = 0;
    for (int64_t m : members[static_cast<size_t>(me)]) sum += m;
    EXPECT_EQ(t.data<int64_t>()[0], sum);
    // Collectives on the parent still work between the children's, and children split again:
    // equal keys order by parent rank.
    c.barrier();
    auto inner = sub->split(sub->rank() / 2, 0);
    Tensor h = Tensor::empty({inner->size()}, DType::kI64);
    inner->all_gather(h, Tensor::from_vector<int64_t>({1}, {int64_t{me}}));
    inner_members[static_cast<size_t>(me)].assign(h.data<int64_t>(), h.data<int64_t>() + inner->size());
    // Point-to-point inside a sub-group uses its own ranks.
    if (sub->size() > 1) {
      Tensor got = Tensor::empty({1}, DType::kI64);
      sub->send_recv({{(sub->rank() + 1) % sub->size(), Tensor::from_vector<int64_t>({1}, {int64_t{me}})}},
                     {{(sub->rank() + sub->size() - 1) % sub->size(), got}});
      EXPECT_EQ(got.data<int64_t>()[0],
                members[static_cast<size_t>(me)][static_cast<size_t>((sub->rank() + sub->size() - 1) % sub->size())]);
    }
  });
  const std::vector<std::vector<int64_t>> expected = {{6, 3, 0}, {7, 4, 1}, {5, 2}};
  for (int r = 0; r < P; ++r) {
    const auto& group = expected[static_cast<size_t>(r % 3)];
    EXPECT_EQ(members[static_cast<size_t>(r)], group) << "rank " << r;
    EXPECT_EQ(sub_size[static_cast<size_t>(r)], static_cast<int>(group.size()));
    EXPECT_EQ(group[static_cast<size_t>(sub_rank[static_cast<size_t>(r)])], r);
    // The inner split pairs sub-ranks {0, 1} and {2}.
    const int sr = sub_rank[static_cast<size_t>(r)];
    std::vector<int64_t> inner(group.begin() + (sr / 2) * 2, group.begin() + std::min<size_t>(group.size(), (sr / 2) * 2 + 2));
    EXPECT_EQ(inner_members[static_cast<size_t>(r)], inner) << "rank " << r;
  }
}

TEST(LocalSplit, NegativeColorIsAnError) {
  std::string msg = local_run_error(2, [](Communicator& c) { c.split(-1, 0); });
  EXPECT_NE(msg.find("split: color=-1 must be >= 0"), std::string::npos) << msg;
}

}  // namespace
}  // namespace seqpar
