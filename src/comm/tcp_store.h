// TCP store: the rendezvous of a multi-process job (the idea of torch's TCPStore). One process
// (rank 0) runs the server on MASTER_ADDR:MASTER_PORT; every rank, rank 0 included, is a client.
// Keys hold bytes; get() and wait() block until the keys exist; add() is an atomic counter. It
// carries the NCCL unique id from rank 0 to the others, barriers, and the config hash check.
//
// Plain POSIX sockets and one server thread; no dependencies. Not fast and not meant to be: a
// handful of small messages per job start, and one failure check per second per rank.
//
// Failure modes, each an Error naming what was awaited:
// - nothing listens at host:port: the client retries until connect_timeout, then names host:port;
// - a key that never comes: get/wait time out after `timeout`, naming the keys still missing;
// - a barrier that never completes: names the ranks that did not check in;
// - the server goes away mid-call: names the call and host:port.
// A client that timed out drops its connection (the server forgets its pending wait) and
// reconnects on its next call.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace seqpar {

struct TcpStoreOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};          // get, wait, barrier
  std::chrono::milliseconds connect_timeout{std::chrono::minutes(1)};  // retrying a refused connect
  int rank = -1;  // this client's rank, for messages only (-1: none)
  // The hosting process, when its store is destroyed, keeps serving the other clients until they
  // have all disconnected or this has passed: rank 0 leaving a barrier first must not take the
  // server away from ranks still reading the barrier's answer.
  std::chrono::milliseconds linger{std::chrono::seconds(30)};
};

// The server: a thread that owns the key-value map and answers every client. Binds every
// interface (IPv6 dual-stack, else IPv4) so other hosts reach it through MASTER_ADDR.
class TcpStoreServer {
 public:
  // port 0 picks a free port (tests); port() says which. Throws when the port cannot be bound,
  // naming it (e.g. in use by another job).
  explicit TcpStoreServer(int port, std::chrono::milliseconds linger = std::chrono::milliseconds(0));
  // Stops accepting, serves the connected clients until they leave or `linger` has passed, then
  // closes every connection.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// A client connection. Thread-safe: calls from several threads are serialised.
class TcpStore {
 public:
  // Connects to host:port, retrying until options.connect_timeout. With host_server, this process
  // first starts the server on `port` (rank 0) and connects to it over the loopback.
  TcpStore(const std::string& host, int port, bool host_server, const TcpStoreOptions& options = {});
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value);
  // Blocks until `key` exists (or options.timeout), returns its bytes.
  std::string get(const std::string& key);
  // Blocks until every key exists and returns their values in order; nullopt when options.timeout
  // passes first (no throw: the caller knows what the keys mean and says so).
  std::optional<std::vector<std::string>> try_get(const std::vector<std::string>& keys, bool want_values = true);
  // Atomically adds n to the counter at `key` (0 if absent) and returns the new value. A counter
  // reads back through get() as its decimal text.
  int64_t add(const std::string& key, int64_t n);
  // Blocks until every key exists (or options.timeout; the error names the missing ones).
  void wait(const std::vector<std::string>& keys);
  // Non-blocking: which of the keys exist now.
  std::vector<bool> check(const std::vector<std::string>& keys);
  // Returns when all `world` ranks have called barrier(name) as often as this one. A timeout names
  // the ranks that have not checked in. rank in [0, world).
  void barrier(const std::string& name, int rank, int world);

  // How many times this client asked for `name` before (0, 1, 2, ...). Ranks that make the same
  // calls in the same order get the same numbers: barrier and verify_same_config use it to give
  // each round of a repeated operation its own keys.
  int64_t next_round(const std::string& name);

  const std::string& host() const { return host_; }
  int port() const { return port_; }   // the server's port (the chosen one when 0 was asked)
  const TcpStoreOptions& options() const { return options_; }
  std::string where() const;           // "host:port"

 private:
  // One request-reply exchange; nullopt when no reply came within options.timeout (the connection
  // is then dropped, so a late reply cannot be taken for the next call's).
  std::optional<std::string> call(const std::string& request, const char* what);
  void connect_locked();
  void close_locked();

  std::string host_;
  int port_;
  TcpStoreOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
  std::mutex mu_;
  int fd_ = -1;
  std::map<std::string, int64_t> rounds_;
};

// Every rank publishes a hash of its validated config text; each rank then compares all of them.
// A mismatch throws an InputError on every rank naming which ranks hold which config (grouped by
// hash) and the first line where the first differing rank's text departs from rank 0's.
void verify_same_config(TcpStore& store, int rank, int world, const std::string& config_text);

// "rank 3" / "ranks 0-2, 5": for messages about which ranks did (not) do something.
std::string rank_list(std::vector<int> ranks);

// 64-bit FNV-1a: stable across builds and hosts (std::hash is not), for config hashes.
uint64_t fnv1a64(const std::string& bytes);

}  // namespace seqpar
