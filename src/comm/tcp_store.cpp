// TCP store: wire protocol, server thread, client.
//
// Wire format (integers little-endian, strings as u32 length + bytes):
//   request  = u32 body_len, body = u8 op, fields
//     kSet   key, value                   -> reply: empty
//     kGet   u8 want_values, u32 n, keys  -> reply (once every key exists): n values, or empty
//     kAdd   key, i64 n                   -> reply: i64 new value
//     kCheck u32 n, keys                  -> reply: n bytes, 1 where the key exists
//   reply    = u32 body_len, body = u8 status (0 ok, 1 error), payload (error: the message)
// A client has at most one request in flight; the server parks a kGet whose keys are missing and
// answers it when a set/add brings the last one. The server never blocks: non-blocking sockets,
// one poll() over the listener, a wake-up pipe (shutdown) and every client.
#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace seqpar {

namespace {

using Clock = std::chrono::steady_clock;

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4 };
constexpr uint32_t kMaxMessage = 256u << 20;  // a store value is a few KB; this bounds garbage

// ---- encoding -------------------------------------------------------------------------------
void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_i64(std::string& s, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}
void put_str(std::string& s, const std::string& v) {
  put_u32(s, static_cast<uint32_t>(v.size()));
  s += v;
}
std::string framed(const std::string& body) {
  std::string s;
  put_u32(s, static_cast<uint32_t>(body.size()));
  return s + body;
}

// Reads fields from a message body; any overrun is a protocol error (a peer that is not a store).
class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  uint8_t u8() { return static_cast<uint8_t>(take(1)[0]); }
  uint32_t u32() {
    auto p = take(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
    return v;
  }
  int64_t i64() {
    auto p = take(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
    return static_cast<int64_t>(v);
  }
  std::string str() { return std::string(take(u32())); }
  std::vector<std::string> strs() {
    const uint32_t n = u32();
    SEQPAR_CHECK(n <= b_.size(), "TCP store: malformed message (a list of {} keys in {} bytes)", n, b_.size());
    std::vector<std::string> v;
    for (uint32_t i = 0; i < n; ++i) v.push_back(str());
    return v;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  std::string_view take(size_t n) {
    SEQPAR_CHECK(n <= b_.size() - pos_, "TCP store: malformed message ({} bytes wanted at offset {} of {})", n,
                 pos_, b_.size());
    auto v = b_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  std::string_view b_;
  size_t pos_ = 0;
};

// If `buf` starts with a complete frame, moves its body into *body and returns true.
bool pop_frame(std::string& buf, std::string* body) {
  if (buf.size() < 4) return false;
  const uint32_t n = Reader(std::string_view(buf).substr(0, 4)).u32();
  SEQPAR_CHECK(n <= kMaxMessage, "TCP store: message of {} bytes exceeds the {} byte limit (not a seqpar store peer?)",
               n, kMaxMessage);
  if (buf.size() < 4 + size_t{n}) return false;
  *body = buf.substr(4, n);
  buf.erase(0, 4 + size_t{n});
  return true;
}

std::string errno_text(int e) { return std::strerror(e); }

void set_nonblocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

std::string quoted_keys(const std::vector<std::string>& keys) {
  std::vector<std::string> q;
  for (const auto& k : keys) q.push_back("'" + k + "'");
  return fmt::format("{}", fmt::join(q, ", "));
}

}  // namespace

// "rank 3" / "ranks 0-2, 5": ranks sorted ascending, runs compressed (messages about big worlds).
std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    parts.push_back(j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]));
    i = j + 1;
  }
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(parts, ", "));
}

uint64_t fnv1a64(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// ---- server ---------------------------------------------------------------------------------
struct TcpStoreServer::Impl {
  struct Client {
    std::string in, out;
    bool parked = false;  // a kGet waiting for keys
    bool want_values = false;
    bool broken = false;  // gone or not speaking the protocol: dropped at the end of the round
    std::vector<std::string> keys;
  };

  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::chrono::milliseconds linger{0};
  std::thread thread;
  std::map<std::string, std::string> data;
  std::map<int, Client> clients;  // by fd; entries are erased only at the end of a round

  ~Impl() {
    if (thread.joinable()) {
      char c = 'x';
      (void)!::write(wake[1], &c, 1);
      thread.join();
    }
    for (auto& [fd, c] : clients) ::close(fd);
    for (int fd : {listen_fd, wake[0], wake[1]})
      if (fd >= 0) ::close(fd);
  }

  // One round: poll, accept, read and serve, answer parked gets, write, drop the broken.
  void run() {
    std::optional<Clock::time_point> stop_at;  // set once shutdown began: linger until then
    for (;;) {
      if (stop_at && (clients.empty() || Clock::now() >= *stop_at)) return;
      // While lingering the listener and the wake-up pipe are left out (fd -1 is ignored).
      std::vector<pollfd> fds = {{stop_at ? -1 : listen_fd, POLLIN, 0}, {stop_at ? -1 : wake[0], POLLIN, 0}};
      for (auto& [fd, c] : clients)
        fds.push_back({fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      int wait_ms = -1;
      if (stop_at)
        wait_ms = static_cast<int>(std::max<int64_t>(
            1, std::chrono::duration_cast<std::chrono::milliseconds>(*stop_at - Clock::now()).count()));
      if (::poll(fds.data(), fds.size(), wait_ms) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents) {
        // Connections already in the backlog count as clients; later ones are refused (and
        // retried by their clients), so that no one connects to a server on its way out, e.g. a
        // rank starting its next job on the same port while this one lingers.
        accept_clients();
        ::close(listen_fd);
        listen_fd = -1;
        stop_at = Clock::now() + linger;
        continue;
      }
      if (fds[0].revents & POLLIN) accept_clients();
      for (size_t i = 2; i < fds.size(); ++i) {
        auto it = clients.find(fds[i].fd);
        if (!fds[i].revents || it == clients.end()) continue;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_client(fds[i].fd, it->second);
      }
      // Requests queued behind a parked get that has been answered (seqpar's client waits for
      // each reply, so this is for other clients), then everything that has output.
      for (bool again = true; again;) {
        again = false;
        for (auto& [fd, c] : clients)
          if (!c.broken && !c.parked && !c.in.empty() && serve(c)) again = true;
      }
      for (auto it = clients.begin(); it != clients.end();) {
        if (!it->second.broken && !it->second.out.empty()) flush(it->first, it->second);
        if (it->second.broken) {
          ::close(it->first);
          it = clients.erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  void accept_clients() {
    for (;;) {
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN: no more; anything else: try again on the next poll
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      clients[fd] = Client{};
    }
  }

  void read_client(int fd, Client& c) {
    char buf[65536];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      c.broken = true;
      return;
    }
    if (n < 0) return;
    c.in.append(buf, static_cast<size_t>(n));
    serve(c);
  }

  // Serves the complete requests in c.in until one parks. True when any was served. A malformed
  // request marks the client broken (it is not a store client).
  bool serve(Client& c) {
    bool served = false;
    try {
      std::string body;
      while (!c.parked && pop_frame(c.in, &body)) {
        served = true;
        handle(c, body);
      }
    } catch (const std::exception&) {
      c.broken = true;
    }
    return served;
  }

  void handle(Client& c, const std::string& body) {
    Reader r(body);
    const uint8_t op = r.u8();
    std::string reply(1, '\0');
    switch (op) {
      case kSet: {
        std::string key = r.str();
        data[key] = r.str();
        c.out += framed(reply);
        answer_parked();
        return;
      }
      case kGet:
        c.want_values = r.u8() != 0;
        c.keys = r.strs();
        c.parked = true;
        try_answer(c);
        return;
      case kAdd: {
        std::string key = r.str();
        const int64_t n = r.i64();
        int64_t v = 0;
        if (auto it = data.find(key); it != data.end()) {
          char* end = nullptr;
          errno = 0;
          const long long parsed = std::strtoll(it->second.c_str(), &end, 10);
          if (it->second.empty() || *end != '\0' || errno != 0) {
            c.out += framed("\x01" + fmt::format("add('{}'): the key holds {} bytes that are not a decimal counter",
                                                  key, it->second.size()));
            return;
          }
          v = parsed;
        }
        v += n;
        data[key] = std::to_string(v);
        put_i64(reply, v);
        c.out += framed(reply);
        answer_parked();
        return;
      }
      case kCheck:
        for (const auto& k : r.strs()) reply.push_back(data.count(k) ? '\1' : '\0');
        c.out += framed(reply);
        return;
      default:
        SEQPAR_CHECK(false, "TCP store: unknown op {}", op);
    }
  }

  // Answers a parked kGet if every key exists now.
  void try_answer(Client& c) {
    for (const auto& k : c.keys)
      if (!data.count(k)) return;
    std::string reply(1, '\0');
    if (c.want_values) {
      put_u32(reply, static_cast<uint32_t>(c.keys.size()));
      for (const auto& k : c.keys) put_str(reply, data[k]);
    }
    c.parked = false;
    c.keys.clear();
    c.out += framed(reply);
  }

  void answer_parked() {
    for (auto& [fd, c] : clients)
      if (c.parked && !c.broken) try_answer(c);
  }

  // Sends what fits without blocking; the rest goes when poll says writable.
  void flush(int fd, Client& c) {
    while (!c.out.empty()) {
      ssize_t n = ::send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c.broken = true;
        return;
      }
      c.out.erase(0, static_cast<size_t>(n));
    }
  }
};

TcpStoreServer::TcpStoreServer(int port, std::chrono::milliseconds linger) : impl_(std::make_unique<Impl>()) {
  impl_->linger = linger;
  SEQPAR_INPUT_CHECK(port >= 0 && port <= 65535, "TCP store: port={} must be in [0, 65535]", port);
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  SEQPAR_CHECK(fd >= 0, "TCP store: socket() failed: {}", errno_text(errno));
  impl_->listen_fd = fd;
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc;
  if (v6) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // also accept IPv4 clients
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    if (rc != 0 && errno != EADDRINUSE) {  // IPv6 present but unusable (disabled): IPv4 alone
      ::close(fd);
      fd = impl_->listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      SEQPAR_CHECK(fd >= 0, "TCP store: socket() failed: {}", errno_text(errno));
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      v6 = false;
    }
  }
  if (!v6) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  if (rc != 0) {
    const int e = errno;
    throw Error(fmt::format("TCP store: cannot listen on port {}: {}{}", port, errno_text(e),
                            e == EADDRINUSE ? " (another job or a previous run still holds it: pick another "
                                              "MASTER_PORT / --master-port)"
                                            : ""));
  }
  SEQPAR_CHECK(::listen(fd, SOMAXCONN) == 0, "TCP store: listen() on port {} failed: {}", port, errno_text(errno));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  set_nonblocking(fd, true);
  SEQPAR_CHECK(::pipe2(impl_->wake, O_CLOEXEC) == 0, "TCP store: pipe() failed: {}", errno_text(errno));
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

TcpStoreServer::~TcpStoreServer() = default;

// ---- client ---------------------------------------------------------------------------------
TcpStore::TcpStore(const std::string& host, int port, bool host_server, const TcpStoreOptions& options)
    : host_(host), port_(port), options_(options) {
  SEQPAR_INPUT_CHECK(!host.empty(), "TCP store: the host (MASTER_ADDR) is empty");
  SEQPAR_INPUT_CHECK(port >= (host_server ? 0 : 1) && port <= 65535,
                     "TCP store: port={} (MASTER_PORT) must be in [1, 65535]", port);
  SEQPAR_CHECK(options.timeout.count() > 0 && options.connect_timeout.count() > 0,
               "TCP store: timeout={} ms and connect_timeout={} ms must be > 0", options.timeout.count(),
               options.connect_timeout.count());
  if (host_server) {
    server_ = std::make_unique<TcpStoreServer>(port, options.linger);
    port_ = server_->port();
  }
  std::lock_guard<std::mutex> lock(mu_);
  connect_locked();
}

TcpStore::~TcpStore() {
  std::lock_guard<std::mutex> lock(mu_);
  close_locked();  // first, so a hosting store's server does not linger for this client
}

std::string TcpStore::where() const { return fmt::format("{}:{}", host_, port_); }

void TcpStore::close_locked() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

// Tries every address of host:port until one accepts, retrying refusals (the server may not be
// up yet) with a growing pause, until connect_timeout. The hosting process connects over the
// loopback: the server listens on every interface, and MASTER_ADDR may name an interface that
// routes elsewhere from inside this host.
void TcpStore::connect_locked() {
  const std::string target = server_ ? "127.0.0.1" : host_;
  const auto deadline = Clock::now() + options_.connect_timeout;
  auto pause = std::chrono::milliseconds(10);
  std::string last_error = "no attempt";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int gai = ::getaddrinfo(target.c_str(), std::to_string(port_).c_str(), &hints, &res);
    if (gai != 0) {
      last_error = fmt::format("cannot resolve host '{}': {}", target, gai_strerror(gai));
    } else {
      for (addrinfo* a = res; a; a = a->ai_next) {
        int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        // Non-blocking connect bounded by the deadline: an unroutable address would otherwise
        // hang for the kernel's SYN timeout (minutes).
        set_nonblocking(fd, true);
        int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
        int err = rc == 0 ? 0 : errno;
        if (err == EINPROGRESS) {
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
          pollfd p{fd, POLLOUT, 0};
          if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 1))) == 1) {
            socklen_t len = sizeof(err);
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          } else {
            err = ETIMEDOUT;
          }
        }
        if (err == 0) {
          set_nonblocking(fd, false);
          int one = 1;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          ::freeaddrinfo(res);
          fd_ = fd;
          return;
        }
        last_error = errno_text(err);
        ::close(fd);
      }
      ::freeaddrinfo(res);
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  throw Error(fmt::format(
      "could not connect to the TCP store at {}:{} within {} ms (last error: {}): is rank 0 running, and do all "
      "ranks have the same MASTER_ADDR and MASTER_PORT?",
      host_, port_, options_.connect_timeout.count(), last_error));
}

// Sends one request and waits for its reply until the timeout. Returns the reply payload, or
// nullopt on timeout (after dropping the connection, so a late reply cannot be taken for the next
// call's). Throws when the server is gone or reports an error.
namespace {
std::optional<std::string> exchange(int& fd, const std::string& request, std::chrono::milliseconds timeout,
                                           const std::string& what, const std::string& where) {
  const std::string frame = framed(request);
  for (size_t sent = 0; sent < frame.size();) {
    ssize_t n = ::send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      fd = -1;
      throw Error(fmt::format("TCP store at {}: {} failed to send: {} (has the store's host, rank 0, exited?)",
                              where, what, errno_text(e)));
    }
    sent += static_cast<size_t>(n);
  }
  const auto deadline = Clock::now() + timeout;
  std::string buf, body;
  for (;;) {
    if (pop_frame(buf, &body)) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      ::close(fd);
      fd = -1;
      return std::nullopt;
    }
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), std::numeric_limits<int>::max())));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char tmp[65536];
    ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n == 0 ? 0 : errno;
      ::close(fd);
      fd = -1;
      throw Error(fmt::format("TCP store at {} closed the connection during {}{} (has the store's host, rank 0, "
                              "exited?)",
                              where, what, e ? ": " + errno_text(e) : ""));
    }
    buf.append(tmp, static_cast<size_t>(n));
  }
  SEQPAR_CHECK(!body.empty(), "TCP store at {}: empty reply to {}", where, what);
  if (body[0] != 0) throw Error(fmt::format("TCP store at {}: {}", where, body.substr(1)));
  return body.substr(1);
}
}  // namespace

std::optional<std::string> TcpStore::call(const std::string& request, const char* what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) connect_locked();
  return exchange(fd_, request, options_.timeout, what, where());
}

namespace {
std::string on_rank(const TcpStoreOptions& o) { return o.rank >= 0 ? fmt::format(" on rank {}", o.rank) : ""; }
}  // namespace

void TcpStore::set(const std::string& key, const std::string& value) {
  std::string req(1, static_cast<char>(kSet));
  put_str(req, key);
  put_str(req, value);
  if (!call(req, "set"))
    throw Error(fmt::format("TCP store at {}: set('{}') got no reply within {} ms{}", where(), key,
                            options_.timeout.count(), on_rank(options_)));
}

std::optional<std::vector<std::string>> TcpStore::try_get(const std::vector<std::string>& keys, bool want_values) {
  std::string req(1, static_cast<char>(kGet));
  req.push_back(want_values ? '\1' : '\0');
  put_u32(req, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) put_str(req, k);
  auto reply = call(req, "get");
  if (!reply) return std::nullopt;
  std::vector<std::string> values;
  if (!want_values) return values;
  Reader r(*reply);
  SEQPAR_CHECK(r.u32() == keys.size(), "TCP store at {}: malformed reply to get", where());
  for (size_t i = 0; i < keys.size(); ++i) values.push_back(r.str());
  return values;
}

std::string TcpStore::get(const std::string& key) {
  auto v = try_get({key});
  if (!v)
    throw Error(fmt::format("TCP store at {}: get('{}') timed out after {} ms{}: the key was never set", where(), key,
                            options_.timeout.count(), on_rank(options_)));
  return (*v)[0];
}

int64_t TcpStore::add(const std::string& key, int64_t n) {
  std::string req(1, static_cast<char>(kAdd));
  put_str(req, key);
  put_i64(req, n);
  auto reply = call(req, "add");
  if (!reply)
    throw Error(fmt::format("TCP store at {}: add('{}') got no reply within {} ms{}", where(), key,
                            options_.timeout.count(), on_rank(options_)));
  return Reader(*reply).i64();
}

std::vector<bool> TcpStore::check(const std::vector<std::string>& keys) {
  std::string req(1, static_cast<char>(kCheck));
  put_u32(req, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) put_str(req, k);
  auto reply = call(req, "check");
  if (!reply)
    throw Error(fmt::format("TCP store at {}: check({}) got no reply within {} ms{}", where(), quoted_keys(keys),
                            options_.timeout.count(), on_rank(options_)));
  SEQPAR_CHECK(reply->size() == keys.size(), "TCP store at {}: malformed reply to check", where());
  std::vector<bool> present;
  for (char c : *reply) present.push_back(c != 0);
  return present;
}

void TcpStore::wait(const std::vector<std::string>& keys) {
  if (try_get(keys, /*want_values=*/false)) return;
  // Timed out: say which keys are still missing (over a fresh connection).
  std::vector<std::string> missing;
  auto present = check(keys);
  for (size_t i = 0; i < keys.size(); ++i)
    if (!present[i]) missing.push_back(keys[i]);
  throw Error(fmt::format("TCP store at {}: wait timed out after {} ms{}: {} never set{}", where(),
                          options_.timeout.count(), on_rank(options_), quoted_keys(missing),
                          missing.empty() ? " (they arrived just after the deadline)" : ""));
}

int64_t TcpStore::next_round(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return rounds_[name]++;
}

namespace {

// Blocks until keys prefix + r exist for every rank r < world; a timeout names the ranks missing.
// Returns their values when want_values.
std::vector<std::string> wait_ranks(TcpStore& store, const std::string& prefix, int world, bool want_values,
                                    const std::string& what, int rank) {
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(prefix + std::to_string(r));
  if (auto values = store.try_get(keys, want_values)) return *values;
  std::vector<int> missing;
  auto present = store.check(keys);
  for (int r = 0; r < world; ++r)
    if (!present[static_cast<size_t>(r)]) missing.push_back(r);
  throw Error(fmt::format("{} timed out after {} ms on rank {} (TCP store {}): {} of {} did not arrive", what,
                          store.options().timeout.count(), rank, store.where(),
                          missing.empty() ? "no rank (all came just after the deadline)" : rank_list(missing), world));
}

}  // namespace

void TcpStore::barrier(const std::string& name, int rank, int world) {
  SEQPAR_CHECK(world >= 1 && rank >= 0 && rank < world, "barrier('{}'): rank={} must be in [0, world={})", name, rank,
               world);
  const std::string prefix = fmt::format("barrier/{}/{}/", name, next_round("barrier/" + name));
  set(prefix + std::to_string(rank), "1");
  wait_ranks(*this, prefix, world, false, fmt::format("barrier '{}'", name), rank);
}

void verify_same_config(TcpStore& store, int rank, int world, const std::string& config_text) {
  SEQPAR_CHECK(world >= 1 && rank >= 0 && rank < world, "verify_same_config: rank={} must be in [0, world={})", rank,
               world);
  const std::string prefix = fmt::format("config/{}/", store.next_round("config"));
  store.set(prefix + "text/" + std::to_string(rank), config_text);
  store.set(prefix + "hash/" + std::to_string(rank), fmt::format("{:016x}", fnv1a64(config_text)));
  auto hashes = wait_ranks(store, prefix + "hash/", world, true, "config check", rank);

  std::map<std::string, std::vector<int>> by_hash;  // hash -> ranks
  for (int r = 0; r < world; ++r) by_hash[hashes[static_cast<size_t>(r)]].push_back(r);
  if (by_hash.size() == 1) return;

  std::vector<std::string> groups;
  int other = -1;  // the lowest rank whose config differs from rank 0's
  for (int r = 0; r < world && other < 0; ++r)
    if (hashes[static_cast<size_t>(r)] != hashes[0]) other = r;
  for (auto& [h, ranks] : by_hash) groups.push_back(fmt::format("{} {} config {}", rank_list(ranks), ranks.size() == 1 ? "has" : "have", h));
  // The first line where `other`'s text departs from rank 0's.
  std::istringstream a(store.get(prefix + "text/0")), b(store.get(prefix + "text/" + std::to_string(other)));
  std::string la, lb;
  int line = 0;
  for (;;) {
    ++line;
    bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
    if (!ga) la = "<end of config>";
    if (!gb) lb = "<end of config>";
    if (la != lb || (!ga && !gb)) break;
  }
  throw InputError(fmt::format(
      "the validated config differs across ranks ({}); first difference at line {}: rank 0 has `{}` but rank {} has "
      "`{}`. Every rank must run with the same config.",
      fmt::join(groups, "; "), line, la, other, lb));
}

}  // namespace seqpar
