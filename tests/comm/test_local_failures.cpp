// Failure propagation in the local backend: a rank that throws, one that never arrives, calls that
// do not match. Nothing may hang; every message names the rank and the cause.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "comm/communicator.h"
#include "comm_test_util.h"

namespace seqpar {
namespace {

using namespace std::chrono_literals;
using testing::local_run_error;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Rank 2 throws while the others wait in `call`; every other rank's error must name rank 2.
void expect_failure_propagates(const std::function<void(Communicator&)>& call) {
  const int P = 4;
  std::mutex mu;
  std::vector<std::string> secondary;
  auto t0 = Clock::now();
  std::string msg = local_run_error(P, [&](Communicator& c) {
    if (c.rank() == 2) {
      std::this_thread::sleep_for(50ms);  // the others are blocked by now
      throw std::runtime_error("boom at step 3");
    }
    try {
      call(c);
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      secondary.push_back(e.what());
      throw;
    }
  });
  EXPECT_LT(seconds_since(t0), 1.0) << "the waiting ranks were not released promptly";
  EXPECT_EQ(msg, "rank 2: boom at step 3");
  EXPECT_EQ(secondary.size(), 3u);
  for (const auto& s : secondary) EXPECT_NE(s.find("because rank 2 failed: boom at step 3"), std::string::npos) << s;
}

TEST(LocalFailures, RankThrowingWhileOthersWaitInAllReduce) {
  expect_failure_propagates([](Communicator& c) {
    Tensor t = Tensor::zeros({8}, DType::kF32);
    c.all_reduce(t, ReduceOp::kSum);
  });
}

TEST(LocalFailures, RankThrowingWhileOthersWaitInSendRecv) {
  // Everyone receives from rank 2, which never sends.
  expect_failure_propagates([](Communicator& c) {
    Tensor t = Tensor::empty({8}, DType::kF32);
    c.send_recv({}, {{2, t}});
  });
}

TEST(LocalFailures, RankThrowingWhileOthersWaitInsideASplitGroup) {
  expect_failure_propagates([](Communicator& c) {
    auto sub = c.split(0, c.rank());  // rank 2 never joins: the split itself waits for it
    sub->barrier();
  });
}

TEST(LocalFailures, LaterCallsThrowPromptlyAfterAFailure) {
  auto t0 = Clock::now();
  std::string later;
  std::string msg = local_run_error(3, [&](Communicator& c) {
    if (c.rank() == 0) throw InputError("seq_len=7 must be a multiple of sp_size=2");
    if (c.rank() == 1) {
      std::this_thread::sleep_for(100ms);  // enters its call well after the failure
      try {
        c.barrier();
      } catch (const Error& e) {
        later = e.what();
        throw;
      }
    }
    // rank 2 returns without any call: that is not an error by itself
  });
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_EQ(msg, "rank 0: seq_len=7 must be a multiple of sp_size=2");
  EXPECT_EQ(later, "barrier aborted because rank 0 failed: seq_len=7 must be a multiple of sp_size=2");
}

TEST(LocalFailures, InputErrorKeepsItsType) {
  EXPECT_THROW(run_local_ranks(2, [](Communicator& c) {
                 if (c.rank() == 1) throw InputError("bad value");
                 c.barrier();
               }),
               InputError);
  // Any other failure is a plain Error.
  try {
    run_local_ranks(2, [](Communicator& c) {
      if (c.rank() == 1) throw std::logic_error("bug");
      c.barrier();
    });
    FAIL() << "no throw";
  } catch (const InputError&) {
    FAIL() << "logic_error became an InputError";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "rank 1: bug");
  }
}

TEST(LocalFailures, RankThatNeverArrivesTimesOutNamingIt) {
  LocalOptions opts;
  opts.timeout = 100ms;
  auto t0 = Clock::now();
  std::string msg = local_run_error(
      4,
      [](Communicator& c) {
        if (c.rank() == 3) std::this_thread::sleep_for(500ms);  // far past the timeout
        c.barrier();
      },
      opts);
  double took = seconds_since(t0);
  EXPECT_GE(took, 0.1);
  EXPECT_LT(took, 2.0);
  EXPECT_NE(msg.find("barrier timed out after 100 ms"), std::string::npos) << msg;
  EXPECT_NE(msg.find(": rank 3 did not arrive"), std::string::npos) << msg;
}

TEST(LocalFailures, TimeoutNamesEveryMissingRankOfASubGroup) {
  LocalOptions opts;
  opts.timeout = 100ms;
  std::string msg = local_run_error(
      6,
      [](Communicator& c) {
        auto sub = c.split(c.rank() % 2, c.rank());  // odd ranks: world 1, 3, 5 = sub ranks 0, 1, 2
        if (c.rank() == 3 || c.rank() == 5) std::this_thread::sleep_for(500ms);
        Tensor t = Tensor::zeros({4}, DType::kF32);
        if (c.rank() % 2 == 1) sub->all_reduce(t, ReduceOp::kMax);
      },
      opts);
  EXPECT_NE(msg.find("all_reduce timed out after 100 ms on rank 0 (world rank 1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1 (world rank 3), rank 2 (world rank 5) did not arrive"), std::string::npos) << msg;
}

TEST(LocalFailures, ReceiveTimesOutNamingTheSender) {
  LocalOptions opts;
  opts.timeout = 100ms;
  std::string msg = local_run_error(
      2,
      [](Communicator& c) {
        if (c.rank() == 1) {
          std::this_thread::sleep_for(500ms);
          return;
        }
        Tensor t = Tensor::empty({3}, DType::kF32);
        c.send_recv({}, {{1, t}});
      },
      opts);
  EXPECT_EQ(msg, "rank 0: send_recv timed out after 100 ms on rank 0: message #1 from rank 1 never came");
}

TEST(LocalFailures, RankThatReturnedWithoutTheCallFailsTheWaitersAtOnce) {
  auto t0 = Clock::now();
  std::string msg = local_run_error(3, [](Communicator& c) {
    if (c.rank() == 1) return;  // forgets the all_reduce
    Tensor t = Tensor::zeros({4}, DType::kF32);
    c.all_reduce(t, ReduceOp::kSum);
  });
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_NE(msg.find("all_reduce can never complete"), std::string::npos) << msg;
  // Rank 2 may or may not have arrived yet when rank 0 notices; rank 1 is named either way.
  EXPECT_NE(msg.find("rank 1 (its function has returned)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did not arrive"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("rank 1: "), std::string::npos) << "the waiter fails, not the rank that returned: " << msg;

  msg = local_run_error(2, [](Communicator& c) {
    if (c.rank() == 1) return;
    Tensor t = Tensor::empty({3}, DType::kF32);
    c.send_recv({}, {{1, t}});
  });
  EXPECT_EQ(msg,
            "rank 0: send_recv can never complete on rank 0: rank 1 returned from its function without sending it "
            "message #1");
}

TEST(LocalFailures, MismatchedCollectivesAreDetected) {
  std::string msg = local_run_error(3, [](Communicator& c) {
    if (c.rank() == 2) {
      c.barrier();
    } else {
      Tensor t = Tensor::zeros({4}, DType::kF32);
      c.all_reduce(t, ReduceOp::kSum);
    }
  });
  EXPECT_NE(msg.find("collective mismatch in call #1 of a 3-rank communicator: rank 0 called all_reduce, rank 2 "
                     "called barrier"),
            std::string::npos)
      << msg;
}

TEST(LocalFailures, MismatchedArgumentsAreDetected) {
  std::string msg = local_run_error(2, [](Communicator& c) {
    Tensor in = Tensor::zeros({c.rank() == 0 ? 3 : 4}, DType::kF32);
    Tensor out = Tensor::empty({2 * in.numel()}, DType::kF32);
    c.all_gather(out, in);
  });
  EXPECT_NE(msg.find("every rank's `in` must have the same dtype and element count, but rank 0 has 3 x f32 and "
                     "rank 1 has 4 x f32"),
            std::string::npos)
      << msg;

  msg = local_run_error(3, [](Communicator& c) {
    std::vector<int64_t> send = {1, 1, 1}, recv = {1, 1, 1};
    if (c.rank() == 1) recv = {2, 0, 1};  // rank 0 sends it 1, not 2
    Tensor in = Tensor::zeros({3}, DType::kF32), out = Tensor::empty({3}, DType::kF32);
    c.all_to_all(out, in, send, recv);
  });
  EXPECT_NE(msg.find("rank 1: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("all_to_all: rank 1 has recv_counts[0]=2 but rank 0 has send_counts[1]=1"), std::string::npos)
      << msg;

  msg = local_run_error(2, [](Communicator& c) {
    Tensor in = Tensor::zeros({4}, DType::kF32), out = Tensor::empty({4}, DType::kF32);
    c.all_to_all(out, in, {1, 2}, {2, 2});
  });
  EXPECT_NE(msg.find("all_to_all: send_counts sum to 3 but `in` f32[4] cpu has 4 elements"), std::string::npos) << msg;

  msg = local_run_error(2, [](Communicator& c) {
    Tensor in = Tensor::zeros({4}, DType::kF32), out = Tensor::empty({4}, DType::kF32);
    c.reduce_scatter(out, in, ReduceOp::kSum);
  });
  EXPECT_NE(msg.find("reduce_scatter: in f32[4] cpu must hold 2 ranks x out f32[4] cpu"), std::string::npos) << msg;

  msg = local_run_error(3, [](Communicator& c) {
    Tensor in = Tensor::zeros({4}, DType::kF32), out = Tensor::empty({4}, DType::kF32);
    all_to_all_equal(c, out, in);
  });
  EXPECT_NE(msg.find("not a multiple of the 3 ranks"), std::string::npos) << msg;
}

TEST(LocalFailures, BadWorldSizeIsRejected) {
  EXPECT_THROW(run_local_ranks(0, [](Communicator&) {}), Error);
}

}  // namespace
}  // namespace seqpar
