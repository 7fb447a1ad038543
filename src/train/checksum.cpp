#include "train/checksum.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace seqpar {

namespace {

constexpr uint64_t kP1 = 11400714785074694791ull, kP2 = 14029467366897019727ull, kP3 = 1609587929392839161ull,
                   kP4 = 9650029242287828579ull, kP5 = 2870177450012600261ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // little-endian hosts (x86-64, aarch64): the algorithm's byte order
  return v;
}
uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t round64(uint64_t acc, uint64_t lane) { return rotl(acc + lane * kP2, 31) * kP1; }
uint64_t merge(uint64_t h, uint64_t v) { return (h ^ round64(0, v)) * kP1 + kP4; }

// The hash state over 32-byte stripes; the tail (< 32 bytes) is given to finish().
struct Xxh64 {
  uint64_t v[4];
  uint64_t seed, total = 0;
  explicit Xxh64(uint64_t s) : v{s + kP1 + kP2, s + kP2, s, s - kP1}, seed(s) {}
  // n: a multiple of 32.
  void stripes(const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; i += 32)
      for (int k = 0; k < 4; ++k) v[k] = round64(v[k], read64(p + i + 8 * k));
    total += n;
  }
  uint64_t finish(const unsigned char* p, size_t n) {
    uint64_t h;
    if (total > 0) {
      h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
      for (int k = 0; k < 4; ++k) h = merge(h, v[k]);
    } else {
      h = seed + kP5;
    }
    h += total + n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) h = rotl(h ^ round64(0, read64(p + i)), 27) * kP1 + kP4;
    if (i + 4 <= n) {
      h = rotl(h ^ (static_cast<uint64_t>(read32(p + i)) * kP1), 23) * kP2 + kP3;
      i += 4;
    }
    for (; i < n; ++i) h = rotl(h ^ (p[i] * kP5), 11) * kP1;
    h ^= h >> 33;
    h *= kP2;
    h ^= h >> 29;
    h *= kP3;
    h ^= h >> 32;
    return h;
  }
};

}  // namespace

uint64_t xxh64(const void* data, size_t n, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  Xxh64 s(seed);
  const size_t whole = n / 32 * 32;
  s.stripes(p, whole);
  return s.finish(p + whole, n - whole);
}

uint64_t file_xxh64(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SEQPAR_INPUT_CHECK(fd >= 0, "{}: cannot open to verify its checksum: {}", path, std::strerror(errno));
  constexpr size_t kChunk = size_t{1} << 20;  // a multiple of the 32-byte stripe
  std::vector<unsigned char> buf(kChunk);
  Xxh64 s(0);
  for (;;) {
    size_t filled = 0;  // a whole chunk unless the file ends: only the last one has a tail
    while (filled < kChunk) {
      const ssize_t r = ::read(fd, buf.data() + filled, kChunk - filled);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        const int err = errno;
        ::close(fd);
        throw InputError(fmt::format("{}: read failed while verifying its checksum: {}", path, std::strerror(err)));
      }
      if (r == 0) break;
      filled += static_cast<size_t>(r);
    }
    if (filled < kChunk) {
      ::close(fd);
      const size_t whole = filled / 32 * 32;
      s.stripes(buf.data(), whole);
      return s.finish(buf.data() + whole, filled - whole);
    }
    s.stripes(buf.data(), kChunk);
  }
}

std::string checksum_text(uint64_t h) { return fmt::format("xxh64:{:016x}", h); }

}  // namespace seqpar
