// HostThreads (core/host_threads.h): every part runs once per job on its own thread, jobs run one
// after another on the same threads, ranges cover [0, n) in aligned pieces, errors come back.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/host_threads.h"

namespace seqpar {
namespace {

TEST(HostThreads, EveryPartRunsOncePerJobOnItsOwnThread) {
  HostThreads pool(4);
  ASSERT_EQ(pool.size(), 4);
  std::set<std::thread::id> first_ids;
  for (int job = 0; job < 200; ++job) {
    std::vector<int> runs(4, 0);
    std::vector<std::thread::id> ids(4);
    pool.run([&](int part) {
      ++runs[static_cast<size_t>(part)];
      ids[static_cast<size_t>(part)] = std::this_thread::get_id();
    });
    EXPECT_EQ(runs, std::vector<int>(4, 1)) << "job " << job;
    EXPECT_EQ(ids[0], std::this_thread::get_id());  // part 0 on the caller
    const std::set<std::thread::id> distinct(ids.begin(), ids.end());
    EXPECT_EQ(distinct.size(), 4u);
    if (job == 0) first_ids = distinct;
    EXPECT_EQ(distinct, first_ids) << "the same threads every job, none started anew";
  }
}

TEST(HostThreads, RangesCoverTheWholeLengthInAlignedPieces) {
  HostThreads pool(3);
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{63}, int64_t{64}, int64_t{1000}, int64_t{12345}}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> pieces;
    pool.ranges(n, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) ++seen[static_cast<size_t>(i)];
      std::lock_guard<std::mutex> lock(mu);
      pieces.emplace_back(lo, hi);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
    for (const auto& [lo, hi] : pieces) {
      EXPECT_EQ(lo % 64, 0) << "n=" << n;
      EXPECT_TRUE(hi == n || hi % 64 == 0) << "n=" << n << " hi=" << hi;
    }
  }
}

TEST(HostThreads, APartsErrorReachesTheCallerAndThePoolGoesOn) {
  HostThreads pool(4);
  EXPECT_THROW(pool.run([](int part) {
    if (part == 2) throw std::runtime_error("part 2 failed");
  }),
               std::runtime_error);
  EXPECT_THROW(pool.run([](int part) {
    if (part == 0) throw std::logic_error("the caller's part failed");
  }),
               std::logic_error);
  std::atomic<int> ran{0};
  pool.run([&](int) { ++ran; });
  EXPECT_EQ(ran.load(), 4);
  HostThreads one(1);  // no workers: the caller runs the only part
  one.run([&](int part) { EXPECT_EQ(part, 0); });
  EXPECT_THROW(HostThreads(0), Error);
}

}  // namespace
}  // namespace seqpar
