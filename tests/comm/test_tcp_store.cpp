// The TCP store: clients in threads of this process against a server on a free port. Every
// timeout is short (a few hundred ms) so the failure paths run in well under a second each.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "comm/tcp_store.h"
#include "core/error.h"

namespace seqpar {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TcpStoreOptions quick(std::chrono::milliseconds timeout = 2000ms, int rank = -1) {
  TcpStoreOptions o;
  o.timeout = timeout;
  o.connect_timeout = 2000ms;
  o.rank = rank;
  return o;
}

// A port nobody listens on right now: bound, read, released.
int unused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(TcpStore, SetGetAcrossClientsKeepsBinaryBytes) {
  TcpStore host("127.0.0.1", 0, /*host_server=*/true, quick());
  ASSERT_GT(host.port(), 0);
  TcpStore client("localhost", host.port(), false, quick());
  const std::string bytes("a\0b\xff\n", 5);
  host.set("id", bytes);
  EXPECT_EQ(client.get("id"), bytes);
  client.set("id", "replaced");
  EXPECT_EQ(host.get("id"), "replaced");
  client.set("empty", "");
  EXPECT_EQ(host.get("empty"), "");
  EXPECT_EQ(client.check({"id", "nope", "empty"}), (std::vector<bool>{true, false, true}));
  const std::string big(3 << 20, 'x');  // larger than one socket read
  client.set("big", big);
  EXPECT_EQ(host.get("big"), big);
}

TEST(TcpStore, AddIsAtomicAcrossClients) {
  TcpStore host("127.0.0.1", 0, true, quick());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      TcpStore c("127.0.0.1", host.port(), false, quick());
      for (int i = 0; i < 100; ++i) c.add("counter", 1);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(host.add("counter", 0), 400);
  EXPECT_EQ(host.add("counter", -10), 390);
  EXPECT_EQ(host.get("counter"), "390");
  host.set("text", "not a number");
  std::string e = error_of([&] { host.add("text", 1); });
  EXPECT_NE(e.find("add('text')"), std::string::npos) << e;
  EXPECT_NE(e.find("not a decimal counter"), std::string::npos) << e;
}

TEST(TcpStore, GetBlocksUntilAnotherClientSets) {
  TcpStore host("127.0.0.1", 0, true, quick());
  std::thread setter([&] {
    TcpStore c("127.0.0.1", host.port(), false, quick());
    std::this_thread::sleep_for(150ms);
    c.set("late", "value");
  });
  const auto t0 = Clock::now();
  EXPECT_EQ(host.get("late"), "value");
  EXPECT_GE(Clock::now() - t0, 140ms);
  setter.join();
  // wait() on several keys returns once the last one comes.
  std::thread setter2([&] {
    TcpStore c("127.0.0.1", host.port(), false, quick());
    c.set("k1", "1");
    std::this_thread::sleep_for(100ms);
    c.set("k2", "2");
  });
  host.wait({"k1", "k2"});
  EXPECT_EQ(host.check({"k1", "k2"}), (std::vector<bool>{true, true}));
  setter2.join();
}

TEST(TcpStore, TimeoutsNameWhatWasAwaitedAndTheClientRecovers) {
  TcpStore host("127.0.0.1", 0, true, quick());
  TcpStore c("127.0.0.1", host.port(), false, quick(200ms, /*rank=*/3));
  const auto t0 = Clock::now();
  std::string e = error_of([&] { c.get("missing"); });
  EXPECT_GE(Clock::now() - t0, 190ms);
  EXPECT_LT(Clock::now() - t0, 2000ms);
  EXPECT_NE(e.find("get('missing') timed out after 200 ms on rank 3"), std::string::npos) << e;
  EXPECT_NE(e.find("never set"), std::string::npos) << e;
  c.set("a", "1");
  e = error_of([&] { c.wait({"a", "b", "c"}); });
  EXPECT_NE(e.find("'b', 'c' never set"), std::string::npos) << e;
  EXPECT_EQ(e.find("'a'"), std::string::npos) << e;
  // The timed-out request was dropped with its connection: later calls work and see fresh data.
  host.set("b", "2");
  EXPECT_EQ(c.get("b"), "2");
}

TEST(TcpStore, NothingListeningIsAClearErrorAfterTheConnectDeadline) {
  const int port = unused_port();
  TcpStoreOptions o = quick();
  o.connect_timeout = 300ms;
  const auto t0 = Clock::now();
  std::string e = error_of([&] { TcpStore c("127.0.0.1", port, false, o); });
  const auto took = Clock::now() - t0;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3000ms);
  EXPECT_NE(e.find("could not connect to the TCP store at 127.0.0.1:" + std::to_string(port) + " within 300 ms"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("refused"), std::string::npos) << e;
  EXPECT_NE(e.find("MASTER_ADDR and MASTER_PORT"), std::string::npos) << e;
}

TEST(TcpStore, ClientRetriesUntilTheServerComesUp) {
  const int port = unused_port();
  std::string got;
  std::thread client([&] {
    TcpStore c("127.0.0.1", port, false, quick());
    got = c.get("hello");
  });
  std::this_thread::sleep_for(200ms);  // the client is retrying refused connects meanwhile
  TcpStore host("127.0.0.1", port, true, quick());
  host.set("hello", "world");
  client.join();
  EXPECT_EQ(got, "world");
}

TEST(TcpStore, PortInUseIsNamed) {
  TcpStore first("127.0.0.1", 0, true, quick());
  std::string e = error_of([&] { TcpStore second("127.0.0.1", first.port(), true, quick()); });
  EXPECT_NE(e.find("cannot listen on port " + std::to_string(first.port())), std::string::npos) << e;
  EXPECT_NE(e.find("in use"), std::string::npos) << e;
}

TEST(TcpStore, ServerGoingAwayFailsAPendingGet) {
  TcpStoreOptions no_linger = quick();
  no_linger.linger = 0ms;
  auto host = std::make_unique<TcpStore>("127.0.0.1", 0, true, no_linger);
  TcpStore c("127.0.0.1", host->port(), false, quick(5000ms));
  std::string e;
  std::thread waiter([&] { e = error_of([&] { c.get("never"); }); });
  std::this_thread::sleep_for(100ms);
  const auto t0 = Clock::now();
  host.reset();
  waiter.join();
  EXPECT_LT(Clock::now() - t0, 2000ms);
  EXPECT_NE(e.find("closed the connection during get"), std::string::npos) << e;
}

TEST(TcpStore, HostLingersUntilTheOtherClientsLeave) {
  auto host = std::make_unique<TcpStore>("127.0.0.1", 0, true, quick());
  auto client = std::make_unique<TcpStore>("127.0.0.1", host->port(), false, quick());
  std::string got;
  std::thread late([&] {
    std::this_thread::sleep_for(200ms);  // the host is being destroyed meanwhile
    client->set("k", "v");
    got = client->get("k");
    client.reset();  // disconnecting releases the host
  });
  const auto t0 = Clock::now();
  host.reset();
  const auto took = Clock::now() - t0;
  late.join();
  EXPECT_EQ(got, "v");
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 5000ms);
  // An idle client holds the host only for `linger`.
  TcpStoreOptions short_linger = quick();
  short_linger.linger = 100ms;
  host = std::make_unique<TcpStore>("127.0.0.1", 0, true, short_linger);
  TcpStore idle("127.0.0.1", host->port(), false, quick());
  const auto t1 = Clock::now();
  host.reset();
  EXPECT_GE(Clock::now() - t1, 90ms);
  EXPECT_LT(Clock::now() - t1, 2000ms);
}

TEST(TcpStore, BarrierHoldsEveryRankUntilAllArriveRepeatedly) {
  TcpStore host("127.0.0.1", 0, true, quick());
  constexpr int kWorld = 4, kRounds = 3;
  std::atomic<int> entered{0};
  std::atomic<int> early{0};  // a rank that left round k before every rank entered it
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      TcpStore c("127.0.0.1", host.port(), false, quick(2000ms, r));
      for (int k = 0; k < kRounds; ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10 * r));  // arrive at different times
        entered++;
        c.barrier("step", r, kWorld);
        if (entered.load() < kWorld * (k + 1)) early++;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(entered.load(), kWorld * kRounds);
  EXPECT_EQ(early.load(), 0);
}

TEST(TcpStore, BarrierTimeoutNamesTheRanksThatDidNotArrive) {
  TcpStore host("127.0.0.1", 0, true, quick());
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int i : {0, 1})
    threads.emplace_back([&, i] {
      const int r = i * 2;  // ranks 0 and 2 of 5 come; 1, 3, 4 do not
      TcpStore c("127.0.0.1", host.port(), false, quick(300ms, r));
      errors[static_cast<size_t>(i)] = error_of([&] { c.barrier("init", r, 5); });
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    EXPECT_NE(e.find("barrier 'init' timed out after 300 ms"), std::string::npos) << e;
    EXPECT_NE(e.find("ranks 1, 3-4 of 5 did not arrive"), std::string::npos) << e;
  }
  std::string e = error_of([&] { host.barrier("x", 5, 5); });
  EXPECT_NE(e.find("rank=5 must be in [0, world=5)"), std::string::npos) << e;
}

void run_config_check(const std::vector<std::string>& texts, std::vector<std::string>* errors) {
  TcpStore host("127.0.0.1", 0, true, quick());
  const int world = static_cast<int>(texts.size());
  errors->assign(texts.size(), "");
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      TcpStore c("127.0.0.1", host.port(), false, quick(2000ms, r));
      try {
        verify_same_config(c, r, world, texts[static_cast<size_t>(r)]);
      } catch (const InputError& e) {
        (*errors)[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
}

TEST(TcpStore, VerifySameConfigPassesWhenEqualAndNamesTheRanksThatDiffer) {
  std::vector<std::string> errors;
  const std::string cfg = "{\n  \"sp_size\": 4,\n  \"lr\": 0.001\n}\n";
  run_config_check({cfg, cfg, cfg}, &errors);
  for (const auto& e : errors) EXPECT_EQ(e, "");

  std::string other = cfg;
  other.replace(other.find("4,"), 2, "2,");
  run_config_check({cfg, cfg, other, cfg}, &errors);
  const std::string h0 = fmt::format("{:016x}", fnv1a64(cfg)), h1 = fmt::format("{:016x}", fnv1a64(other));
  for (const auto& e : errors) {  // every rank fails, with the same story
    EXPECT_NE(e.find("differs across ranks"), std::string::npos) << e;
    EXPECT_NE(e.find("ranks 0-1, 3 have config " + h0), std::string::npos) << e;
    EXPECT_NE(e.find("rank 2 has config " + h1), std::string::npos) << e;
    EXPECT_NE(e.find("first difference at line 2: rank 0 has `  \"sp_size\": 4,` but rank 2 has `  \"sp_size\": 2,`"),
              std::string::npos)
        << e;
  }
  // A config that is a prefix of another: the difference is the end of one of them.
  run_config_check({"a\nb\n", "a\n"}, &errors);
  EXPECT_NE(errors[1].find("line 2: rank 0 has `b` but rank 1 has `<end of config>`"), std::string::npos)
      << errors[1];
}

TEST(TcpStore, RankListAndHash) {
  EXPECT_EQ(rank_list({3}), "rank 3");
  EXPECT_EQ(rank_list({5, 0, 2, 1, 7, 8}), "ranks 0-2, 5, 7-8");
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
}

}  // namespace
}  // namespace seqpar
