// The local backend's collectives against serial computations, for world sizes 1, 2, 3, 4, 8.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "comm/communicator.h"
#include "comm_test_util.h"

namespace seqpar {
namespace {

using testing::comm_input;
using testing::same_bits;
using testing::serial_reduce;

constexpr DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kI32, DType::kI64, DType::kF16};

uint64_t seed_of(int world, int rank, int salt) { return 1000003ull * world + 7919ull * rank + salt; }

class LocalCollectives : public ::testing::TestWithParam<int> {};

TEST_P(LocalCollectives, AllReduceMatchesSerialRankOrderBitForBit) {
  const int P = GetParam();
  for (DType dtype : kAllDTypes)
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax})
      for (int64_t n : {0, 1, 37, 1000}) {  // fewer elements than ranks, uneven slices, many
        SCOPED_TRACE(fmt::format("P={} dtype={} op={} n={}", P, dtype_name(dtype), op == ReduceOp::kSum ? "sum" : "max", n));
        std::vector<Tensor> ins, outs(static_cast<size_t>(P));
        for (int r = 0; r < P; ++r) ins.push_back(comm_input(dtype, n, seed_of(P, r, static_cast<int>(n))));
        run_local_ranks(P, [&](Communicator& c) {
          Tensor t = ins[static_cast<size_t>(c.rank())].clone();
          c.all_reduce(t, op);
          outs[static_cast<size_t>(c.rank())] = t;
        });
        Tensor expected = serial_reduce(ins, op, 0, n);
        for (int r = 0; r < P; ++r) EXPECT_TRUE(same_bits(outs[static_cast<size_t>(r)], expected)) << "rank " << r;
      }
}

TEST_P(LocalCollectives, AllGatherConcatenatesInRankOrder) {
  const int P = GetParam();
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<Tensor> ins, outs(static_cast<size_t>(P));
    for (int r = 0; r < P; ++r) ins.push_back(comm_input(dtype, 6, seed_of(P, r, 1)).view({3, 2}));
    run_local_ranks(P, [&](Communicator& c) {
      Tensor out = Tensor::empty({3 * P, 2}, dtype);
      c.all_gather(out, ins[static_cast<size_t>(c.rank())]);
      outs[static_cast<size_t>(c.rank())] = out;
    });
    for (int r = 0; r < P; ++r)
      for (int q = 0; q < P; ++q)
        EXPECT_TRUE(same_bits(outs[static_cast<size_t>(r)].rows(3 * q, 3 * q + 3), ins[static_cast<size_t>(q)]))
            << "rank " << r << " chunk " << q;
  }
}

TEST_P(LocalCollectives, AllGatherInPlaceFromOwnChunk) {
  // `in` may be this rank's own chunk of `out` (the usual in-place form).
  const int P = GetParam();
  std::vector<Tensor> outs(static_cast<size_t>(P));
  run_local_ranks(P, [&](Communicator& c) {
    Tensor out = Tensor::zeros({P * 4}, DType::kF32);
    Tensor mine = out.rows(4 * c.rank(), 4 * c.rank() + 4);
    for (int i = 0; i < 4; ++i) mine.data<float>()[i] = static_cast<float>(10 * c.rank() + i);
    c.all_gather(out, mine);
    outs[static_cast<size_t>(c.rank())] = out;
  });
  for (int r = 0; r < P; ++r)
    for (int q = 0; q < P; ++q)
      for (int i = 0; i < 4; ++i) EXPECT_EQ(outs[static_cast<size_t>(r)].data<float>()[4 * q + i], 10.f * q + i);
}

TEST_P(LocalCollectives, ReduceScatterGivesEachRankItsReducedChunk) {
  const int P = GetParam();
  const int64_t m = 5;
  for (DType dtype : kAllDTypes)
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      SCOPED_TRACE(fmt::format("dtype={} op={}", dtype_name(dtype), op == ReduceOp::kSum ? "sum" : "max"));
      std::vector<Tensor> ins, outs(static_cast<size_t>(P)), in_place(static_cast<size_t>(P));
      for (int r = 0; r < P; ++r) ins.push_back(comm_input(dtype, P * m, seed_of(P, r, 2)));
      run_local_ranks(P, [&](Communicator& c) {
        const Tensor& in = ins[static_cast<size_t>(c.rank())];
        Tensor out = Tensor::empty({m}, dtype);
        c.reduce_scatter(out, in, op);
        outs[static_cast<size_t>(c.rank())] = out;
        // In place: out is this rank's own chunk of in.
        Tensor buf = in.clone();
        Tensor chunk = buf.rows(c.rank() * m, (c.rank() + 1) * m);
        c.reduce_scatter(chunk, buf, op);
        in_place[static_cast<size_t>(c.rank())] = chunk;
      });
      Tensor full = serial_reduce(ins, op, 0, P * m);
      for (int r = 0; r < P; ++r) {
        EXPECT_TRUE(same_bits(outs[static_cast<size_t>(r)], full.rows(r * m, (r + 1) * m))) << "rank " << r;
        EXPECT_TRUE(same_bits(in_place[static_cast<size_t>(r)], full.rows(r * m, (r + 1) * m))) << "rank " << r;
      }
    }
}

TEST_P(LocalCollectives, AllToAllEqualTransposesChunks) {
  const int P = GetParam();
  const int64_t k = 3;  // elements per chunk
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<Tensor> ins, outs(static_cast<size_t>(P));
    for (int r = 0; r < P; ++r) ins.push_back(comm_input(dtype, P * k, seed_of(P, r, 3)));
    run_local_ranks(P, [&](Communicator& c) {
      Tensor out = Tensor::empty({P * k}, dtype);
      all_to_all_equal(c, out, ins[static_cast<size_t>(c.rank())]);
      outs[static_cast<size_t>(c.rank())] = out;
    });
    // Chunk p of rank q's out is chunk q of rank p's in.
    for (int q = 0; q < P; ++q)
      for (int p = 0; p < P; ++p)
        EXPECT_TRUE(same_bits(outs[static_cast<size_t>(q)].rows(p * k, (p + 1) * k),
                              ins[static_cast<size_t>(p)].rows(q * k, (q + 1) * k)))
            << "rank " << q << " chunk " << p;
  }
}

// Rank p sends count(p, q) elements to rank q; zero for some pairs, and every count of a rank
// zero for one rank when P >= 3.
int64_t uneven_count(int P, int p, int q) {
  if (P >= 3 && p == 1) return 0;
  return (p * 7 + q * 3 + P) % 4;
}
int64_t uneven_value(int p, int q, int64_t i) { return 1000000 * p + 1000 * q + i; }

TEST_P(LocalCollectives, UnevenAllToAllWithZeroCounts) {
  const int P = GetParam();
  std::vector<Tensor> outs(static_cast<size_t>(P));
  run_local_ranks(P, [&](Communicator& c) {
    const int me = c.rank();
    std::vector<int64_t> send(static_cast<size_t>(P)), recv(static_cast<size_t>(P));
    std::vector<int64_t> values;
    for (int q = 0; q < P; ++q) {
      send[static_cast<size_t>(q)] = uneven_count(P, me, q);
      recv[static_cast<size_t>(q)] = uneven_count(P, q, me);
      for (int64_t i = 0; i < send[static_cast<size_t>(q)]; ++i) values.push_back(uneven_value(me, q, i));
    }
    Tensor in = Tensor::from_vector<int64_t>({static_cast<int64_t>(values.size())}, values);
    int64_t total = 0;
    for (int64_t n : recv) total += n;
    Tensor out = Tensor::empty({total}, DType::kI64);
    c.all_to_all(out, in, send, recv);
    outs[static_cast<size_t>(me)] = out;
  });
  for (int q = 0; q < P; ++q) {
    std::vector<int64_t> expected;
    for (int p = 0; p < P; ++p)
      for (int64_t i = 0; i < uneven_count(P, p, q); ++i) expected.push_back(uneven_value(p, q, i));
    const Tensor& out = outs[static_cast<size_t>(q)];
    ASSERT_EQ(out.numel(), static_cast<int64_t>(expected.size())) << "rank " << q;
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(out.data<int64_t>()[i], expected[i]) << "rank " << q;
  }
}

TEST_P(LocalCollectives, BarrierHoldsEveryRankUntilAllArrive) {
  const int P = GetParam();
  std::atomic<int> arrived{0};
  std::atomic<int> violations{0};
  run_local_ranks(P, [&](Communicator& c) {
    for (int round = 1; round <= 5; ++round) {
      // The last rank is late: without a real barrier the others would pass before it counts.
      if (c.rank() == P - 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      arrived++;
      c.barrier();
      if (arrived.load() < round * P) violations++;
      c.barrier();  // nobody starts the next round before everyone checked this one
    }
  });
  EXPECT_EQ(violations.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, LocalCollectives, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return fmt::format("P{}", info.param); });

// Values spanning 12 orders of magnitude with both signs: any change of summation order changes
// the f32 result, so equal bits across ranks and runs show a fixed order.
std::vector<float> order_sensitive_values(int rank, int64_t n) {
  std::mt19937_64 rng(424242 + rank);
  std::uniform_real_distribution<float> mant(1.f, 2.f), expo(-4.f, 8.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = (rng() & 1 ? 1.f : -1.f) * mant(rng) * std::pow(10.f, expo(rng));
  return v;
}

TEST(LocalDeterminism, AllReduceSameBitsOnEveryRankAndEveryRun) {
  const int P = 8;
  const int64_t n = 4096;
  std::vector<std::vector<float>> ins;
  for (int r = 0; r < P; ++r) ins.push_back(order_sensitive_values(r, n));

  auto run_once = [&] {
    std::vector<Tensor> outs(P);
    run_local_ranks(P, [&](Communicator& c) {
      Tensor t = Tensor::from_vector<float>({n}, ins[static_cast<size_t>(c.rank())]);
      c.all_reduce(t, ReduceOp::kSum);
      outs[static_cast<size_t>(c.rank())] = t;
    });
    return outs;
  };
  std::vector<Tensor> first = run_once(), second = run_once();
  for (int r = 0; r < P; ++r) {
    EXPECT_TRUE(same_bits(first[static_cast<size_t>(r)], first[0])) << "rank " << r << " differs from rank 0";
    EXPECT_TRUE(same_bits(second[static_cast<size_t>(r)], first[0])) << "second run, rank " << r;
  }
  // The result is the rank-order sum, and the test data do depend on the order.
  int order_matters = 0;
  for (int64_t i = 0; i < n; ++i) {
    float forward = 0.f, backward = 0.f;
    for (int r = 0; r < P; ++r) forward += ins[static_cast<size_t>(r)][static_cast<size_t>(i)];
    for (int r = P - 1; r >= 0; --r) backward += ins[static_cast<size_t>(r)][static_cast<size_t>(i)];
    float got = first[0].data<float>()[i];
    ASSERT_EQ(std::memcmp(&got, &forward, 4), 0) << "element " << i << ": " << got << " vs " << forward;
    order_matters += forward != backward;
  }
  EXPECT_GT(order_matters, n / 10) << "the test values do not exercise the summation order";
}

TEST(LocalDeterminism, ReduceScatterAndBf16AreRepeatable) {
  const int P = 4;
  const int64_t m = 256;
  auto run_once = [&](DType dtype) {
    std::vector<Tensor> outs(P);
    run_local_ranks(P, [&](Communicator& c) {
      Tensor in = Tensor::from_vector<float>({P * m}, order_sensitive_values(c.rank(), P * m)).to_dtype(dtype);
      Tensor out = Tensor::empty({m}, dtype);
      c.reduce_scatter(out, in, ReduceOp::kSum);
      Tensor whole = in.clone();
      c.all_reduce(whole, ReduceOp::kSum);
      // The chunk of the all-reduce and the reduce-scatter agree bit for bit.
      EXPECT_TRUE(same_bits(out, whole.rows(c.rank() * m, (c.rank() + 1) * m)));
      outs[static_cast<size_t>(c.rank())] = out;
    });
    return outs;
  };
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    auto a = run_once(dtype), b = run_once(dtype);
    for (int r = 0; r < P; ++r) EXPECT_TRUE(same_bits(a[static_cast<size_t>(r)], b[static_cast<size_t>(r)]));
  }
}

TEST(LocalCollectives, ConsecutiveCollectivesOfDifferentKindsDoNotMix) {
  // Many back-to-back calls with no barrier between them; a rank that runs ahead must not mix
  // its next call's data into the previous one.
  const int P = 4;
  run_local_ranks(P, [&](Communicator& c) {
    for (int step = 0; step < 50; ++step) {
      Tensor t = Tensor::from_vector<int64_t>({2}, {int64_t{step}, int64_t{c.rank()}});
      c.all_reduce(t, ReduceOp::kSum);
      EXPECT_EQ(t.data<int64_t>()[0], int64_t{step} * P);
      EXPECT_EQ(t.data<int64_t>()[1], int64_t{P * (P - 1) / 2});
      Tensor g = Tensor::empty({P}, DType::kI64);
      c.all_gather(g, Tensor::from_vector<int64_t>({1}, {int64_t{step * 10 + c.rank()}}));
      for (int q = 0; q < P; ++q) EXPECT_EQ(g.data<int64_t>()[q], step * 10 + q);
    }
  });
}

TEST(LocalCollectives, CudaTensorsGoThroughTheSameBackend) {
  if (!cuda_built()) GTEST_SKIP() << "built without CUDA";
  try {
    Tensor::empty({1}, DType::kF32, Device::cuda(0));
  } catch (const Error& e) {
    GTEST_SKIP() << "no usable GPU: " << e.what();
  }
  for (int P : {1, 3}) {  // one rank: device-side copies, no host staging
    SCOPED_TRACE(fmt::format("P={}", P));
    std::vector<Tensor> ins;
    for (int r = 0; r < P; ++r) ins.push_back(comm_input(DType::kBF16, 6 * P, seed_of(P, r, 9)));
    std::vector<Tensor> reduced(P), gathered(P), moved(P), received(P);
    run_local_ranks(P, [&](Communicator& c) {
      const int me = c.rank();
      Tensor in = ins[static_cast<size_t>(me)].to(Device::cuda(0));
      Tensor t = in.clone();
      c.all_reduce(t, ReduceOp::kSum);
      reduced[static_cast<size_t>(me)] = t.to(Device::cpu());
      Tensor g = Tensor::empty({6 * P * P}, DType::kBF16, Device::cuda(0));
      c.all_gather(g, in);
      gathered[static_cast<size_t>(me)] = g.to(Device::cpu());
      Tensor a = Tensor::empty({6 * P}, DType::kBF16, Device::cuda(0));
      all_to_all_equal(c, a, in);
      moved[static_cast<size_t>(me)] = a.to(Device::cpu());
      Tensor r = Tensor::empty({6 * P}, DType::kBF16, Device::cuda(0));
      c.send_recv({{(me + 1) % P, in}}, {{(me + P - 1) % P, r}});
      received[static_cast<size_t>(me)] = r.to(Device::cpu());
    });
    Tensor expected = serial_reduce(ins, ReduceOp::kSum, 0, 6 * P);
    for (int r = 0; r < P; ++r) {
      EXPECT_TRUE(same_bits(reduced[static_cast<size_t>(r)], expected));
      for (int q = 0; q < P; ++q) {
        EXPECT_TRUE(same_bits(gathered[static_cast<size_t>(r)].rows(6 * P * q, 6 * P * (q + 1)), ins[static_cast<size_t>(q)]));
        EXPECT_TRUE(same_bits(moved[static_cast<size_t>(r)].rows(6 * q, 6 * q + 6), ins[static_cast<size_t>(q)].rows(6 * r, 6 * r + 6)));
      }
      EXPECT_TRUE(same_bits(received[static_cast<size_t>(r)], ins[static_cast<size_t>((r + P - 1) % P)]));
    }
  }
}

}  // namespace
}  // namespace seqpar
