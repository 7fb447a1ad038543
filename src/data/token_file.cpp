#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "io/input_file.h"

namespace seqpar {

static_assert(std::endian::native == std::endian::little, "token files are little-endian; this reader assumes a little-endian host");

namespace {

// Token files are as large as their corpus; the cap only says what a sane one can be (16 TiB).
constexpr InputKind kTokenFileInput{"token file", uint64_t{1} << 44};

constexpr int64_t round_up8(int64_t n) { return (n + 7) / 8 * 8; }

// The 32-byte header, field by field (no struct: the layout is the format, not the compiler's).
void encode_header(unsigned char* h, uint32_t flags, uint64_t num_tokens, uint64_t num_docs) {
  std::memcpy(h + 0, kTokenFileMagic, 6);
  std::memcpy(h + 6, &kTokenFileVersion, 2);
  std::memcpy(h + 8, &kTokenDTypeU32, 4);
  std::memcpy(h + 12, &flags, 4);
  std::memcpy(h + 16, &num_tokens, 8);
  std::memcpy(h + 24, &num_docs, 8);
}

std::string errno_text() { return std::strerror(errno); }

// ---- deterministic randomness: splitmix64 and an unbiased Fisher-Yates shuffle, so the data
// order is the same with every standard library (std::shuffle's algorithm is unspecified).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [0, n) by Lemire's multiply-and-reject (no modulo bias).
uint64_t uniform_below(uint64_t& state, uint64_t n) {
  uint64_t x = splitmix64(state);
  unsigned __int128 m = static_cast<unsigned __int128>(x) * n;
  auto low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      x = splitmix64(state);
      m = static_cast<unsigned __int128>(x) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

// [0, n) in identity order, or shuffled from (seed, epoch, stream).
std::vector<int64_t> permutation(int64_t n, bool shuffle, uint64_t seed, int64_t epoch, uint64_t stream) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  if (!shuffle) return p;
  uint64_t state = seed;
  state = splitmix64(state) ^ static_cast<uint64_t>(epoch);
  state = splitmix64(state) ^ stream;
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(state, static_cast<uint64_t>(i + 1)));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

}  // namespace

// ---- writer ----------------------------------------------------------------------------

TokenFileWriter::TokenFileWriter(std::string path, bool has_loss_mask)
    : path_(std::move(path)), has_loss_mask_(has_loss_mask) {
  static std::atomic<int> counter{0};
  temp_path_ = fmt::format("{}.tmp.{}.{}", path_, ::getpid(), counter++);
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  SEQPAR_INPUT_CHECK(fd_ >= 0, "token file '{}': cannot create temporary file '{}': {}", path_, temp_path_, errno_text());
  unsigned char header[kTokenFileHeaderBytes] = {};  // rewritten with the counts by finish()
  try {
    write_bytes(header, sizeof header);
  } catch (...) {  // the destructor does not run for a half-built object
    ::close(fd_);
    ::unlink(temp_path_.c_str());
    throw;
  }
}

TokenFileWriter::~TokenFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink(temp_path_.c_str());
}

void TokenFileWriter::write_bytes(const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    SEQPAR_INPUT_CHECK(w > 0, "token file '{}': write to '{}' failed: {}", path_, temp_path_, errno_text());
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void TokenFileWriter::add_document(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& loss_mask) {
  SEQPAR_CHECK(!finished_, "token file '{}': add_document after finish", path_);
  const int64_t d = num_docs();
  SEQPAR_INPUT_CHECK(!tokens.empty(), "token file '{}': document {} has 0 tokens: documents must not be empty", path_, d);
  if (has_loss_mask_) {
    SEQPAR_INPUT_CHECK(loss_mask.size() == tokens.size(),
                       "token file '{}': document {} has {} tokens but {} loss mask values: they must match", path_, d,
                       tokens.size(), loss_mask.size());
  } else {
    SEQPAR_INPUT_CHECK(loss_mask.empty(), "token file '{}': document {} has a loss mask but the file was opened without one",
                       path_, d);
  }
  std::vector<uint32_t> u(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    SEQPAR_INPUT_CHECK(tokens[i] >= 0, "token file '{}': document {} token {} is {}: token ids must be >= 0", path_, d, i,
                       tokens[i]);
    u[i] = static_cast<uint32_t>(tokens[i]);
  }
  for (size_t i = 0; i < loss_mask.size(); ++i)
    SEQPAR_INPUT_CHECK(loss_mask[i] <= 1, "token file '{}': document {} loss mask {} is {}: it must be 0 or 1", path_, d, i,
                       loss_mask[i]);
  write_bytes(u.data(), u.size() * sizeof(uint32_t));
  loss_mask_.insert(loss_mask_.end(), loss_mask.begin(), loss_mask.end());
  num_tokens_ += static_cast<int64_t>(tokens.size());
  offsets_.push_back(static_cast<uint64_t>(num_tokens_));
}

void TokenFileWriter::finish() {
  SEQPAR_CHECK(!finished_, "token file '{}': finish called twice", path_);
  const int64_t tokens_end = kTokenFileHeaderBytes + 4 * num_tokens_;
  const unsigned char zeros[8] = {};
  write_bytes(zeros, static_cast<size_t>(round_up8(tokens_end) - tokens_end));
  write_bytes(offsets_.data(), offsets_.size() * sizeof(uint64_t));
  if (has_loss_mask_) write_bytes(loss_mask_.data(), loss_mask_.size());

  unsigned char header[kTokenFileHeaderBytes];
  encode_header(header, has_loss_mask_ ? kTokenFileHasLossMask : 0u, static_cast<uint64_t>(num_tokens_),
                static_cast<uint64_t>(num_docs()));
  SEQPAR_INPUT_CHECK(::pwrite(fd_, header, sizeof header, 0) == static_cast<ssize_t>(sizeof header),
                     "token file '{}': writing the header of '{}' failed: {}", path_, temp_path_, errno_text());
  SEQPAR_INPUT_CHECK(::fsync(fd_) == 0, "token file '{}': fsync of '{}' failed: {}", path_, temp_path_, errno_text());
  ::close(fd_);
  fd_ = -1;
  SEQPAR_INPUT_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0, "token file '{}': rename from '{}' failed: {}",
                     path_, temp_path_, errno_text());
  finished_ = true;
  // Make the rename itself durable.
  std::string dir = std::filesystem::path(path_).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_token_file(const std::string& path, const std::vector<std::vector<int32_t>>& docs,
                      const std::vector<std::vector<uint8_t>>& loss_masks) {
  SEQPAR_INPUT_CHECK(loss_masks.empty() || loss_masks.size() == docs.size(),
                     "token file '{}': {} documents but {} loss masks: give one per document or none", path, docs.size(),
                     loss_masks.size());
  TokenFileWriter w(path, !loss_masks.empty());
  for (size_t d = 0; d < docs.size(); ++d) w.add_document(docs[d], loss_masks.empty() ? std::vector<uint8_t>{} : loss_masks[d]);
  w.finish();
}

// ---- reader ----------------------------------------------------------------------------

TokenFile::TokenFile(std::string path) : path_(std::move(path)) {
  // A regular file only (a FIFO or a device would block or map nothing), through io's reader.
  uint64_t size = 0;
  const int fd = open_input_file(path_, kTokenFileInput, &size);
  const auto file_bytes = static_cast<int64_t>(size);
  if (file_bytes < kTokenFileHeaderBytes) {
    ::close(fd);
    throw InputError(fmt::format("token file '{}': is {} bytes, shorter than the {}-byte header (truncated?)", path_,
                                 file_bytes, kTokenFileHeaderBytes));
  }
  void* m = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string map_err = errno_text();
  ::close(fd);  // the mapping keeps the file
  SEQPAR_INPUT_CHECK(m != MAP_FAILED, "token file '{}': mmap failed: {}", path_, map_err);
  map_ = static_cast<const unsigned char*>(m);
  map_bytes_ = static_cast<size_t>(file_bytes);

  // From here a throw must unmap: the destructor does not run for a half-built object.
  try {
    const unsigned char* h = map_;
    if (std::memcmp(h, kTokenFileMagic, 6) != 0) {
      std::string got;
      for (int i = 0; i < 6; ++i) got += (h[i] >= 32 && h[i] < 127) ? static_cast<char>(h[i]) : '?';
      throw InputError(fmt::format("token file '{}': bad magic '{}' (expected 'SPTOK1'): not a seqpar token file", path_, got));
    }
    uint16_t version;
    uint32_t dtype, flags;
    uint64_t n, d;
    std::memcpy(&version, h + 6, 2);
    std::memcpy(&dtype, h + 8, 4);
    std::memcpy(&flags, h + 12, 4);
    std::memcpy(&n, h + 16, 8);
    std::memcpy(&d, h + 24, 8);
    SEQPAR_INPUT_CHECK(version == kTokenFileVersion, "token file '{}': version {} is not supported (this build reads version {})",
                       path_, version, kTokenFileVersion);
    SEQPAR_INPUT_CHECK(dtype == kTokenDTypeU32, "token file '{}': token dtype code {} is not supported (1 = u32)", path_,
                       dtype);
    SEQPAR_INPUT_CHECK((flags & ~kTokenFileHasLossMask) == 0,
                       "token file '{}': flags 0x{:x} has unknown bits (known: 0x1 has_loss_mask)", path_, flags);
    has_loss_mask_ = (flags & kTokenFileHasLossMask) != 0;
    // Every section is at least one byte per element, so bounding the counts by the file size
    // first keeps the size arithmetic below free of overflow.
    const auto fb = static_cast<uint64_t>(file_bytes);
    SEQPAR_INPUT_CHECK(n <= fb && d <= fb,
                       "token file '{}': header says {} tokens and {} documents, impossible in a file of {} bytes", path_, n,
                       d, file_bytes);
    num_tokens_ = static_cast<int64_t>(n);
    num_docs_ = static_cast<int64_t>(d);
    offsets_at_ = round_up8(kTokenFileHeaderBytes + 4 * num_tokens_);
    mask_at_ = offsets_at_ + 8 * (num_docs_ + 1);
    const int64_t expected = mask_at_ + (has_loss_mask_ ? num_tokens_ : 0);
    SEQPAR_INPUT_CHECK(file_bytes == expected,
                       "token file '{}': is {} bytes but its header ({} tokens, {} documents, loss mask: {}) needs {} bytes ({})",
                       path_, file_bytes, num_tokens_, num_docs_, has_loss_mask_ ? "yes" : "no", expected,
                       file_bytes < expected ? "truncated" : "trailing bytes");
    for (int64_t i = kTokenFileHeaderBytes + 4 * num_tokens_; i < offsets_at_; ++i)
      SEQPAR_INPUT_CHECK(map_[i] == 0, "token file '{}': padding byte at {} is {}, must be 0", path_, i, map_[i]);
    int64_t prev = 0;
    for (int64_t k = 0; k <= num_docs_; ++k) {
      uint64_t off;
      std::memcpy(&off, map_ + offsets_at_ + 8 * k, 8);
      SEQPAR_INPUT_CHECK(off <= n, "token file '{}': doc offsets[{}]={} is beyond num_tokens={}", path_, k, off, n);
      const auto o = static_cast<int64_t>(off);
      if (k == 0) {
        SEQPAR_INPUT_CHECK(o == 0, "token file '{}': doc offsets[0]={} must be 0", path_, o);
      } else {
        SEQPAR_INPUT_CHECK(o > prev,
                           "token file '{}': doc offsets[{}]={} <= offsets[{}]={}: offsets must strictly increase (no empty "
                           "document)",
                           path_, k, o, k - 1, prev);
      }
      prev = o;
    }
    SEQPAR_INPUT_CHECK(prev == num_tokens_, "token file '{}': doc offsets[{}]={} must equal num_tokens={}", path_, num_docs_,
                       prev, num_tokens_);
  } catch (...) {
    ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
    throw;
  }
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
}

int64_t TokenFile::doc_begin(int64_t d) const {
  SEQPAR_CHECK(d >= 0 && d <= num_docs_, "token file '{}': document {} out of [0, {}]", path_, d, num_docs_);
  uint64_t off;
  std::memcpy(&off, map_ + offsets_at_ + 8 * d, 8);
  return static_cast<int64_t>(off);
}

void TokenFile::read_tokens(int64_t begin, int64_t end, int32_t* out, int64_t vocab_size) const {
  SEQPAR_CHECK(0 <= begin && begin <= end && end <= num_tokens_, "token file '{}': tokens [{}, {}) out of [0, {})", path_,
               begin, end, num_tokens_);
  const uint64_t limit = vocab_size > 0 ? static_cast<uint64_t>(vocab_size) : uint64_t{1} << 31;
  for (int64_t i = begin; i < end; ++i) {
    uint32_t u;
    std::memcpy(&u, map_ + kTokenFileHeaderBytes + 4 * i, 4);
    if (u >= limit) [[unlikely]] {
      if (vocab_size > 0)
        throw InputError(fmt::format("token file '{}': token {} at index {} is >= vocab_size={}", path_, u, i, vocab_size));
      throw InputError(fmt::format("token file '{}': token {} at index {} is >= 2^31", path_, u, i));
    }
    out[i - begin] = static_cast<int32_t>(u);
  }
}

void TokenFile::read_loss_mask(int64_t begin, int64_t end, uint8_t* out) const {
  SEQPAR_CHECK(0 <= begin && begin <= end && end <= num_tokens_, "token file '{}': tokens [{}, {}) out of [0, {})", path_,
               begin, end, num_tokens_);
  for (int64_t i = begin; i < end; ++i) {
    const uint8_t m = has_loss_mask_ ? map_[mask_at_ + i] : 1;
    SEQPAR_INPUT_CHECK(m <= 1, "token file '{}': loss mask at index {} is {}: it must be 0 or 1", path_, i, m);
    out[i - begin] = m;
  }
}

std::vector<int32_t> TokenFile::doc_tokens(int64_t d) const {
  SEQPAR_CHECK(d >= 0 && d < num_docs_, "token file '{}': document {} out of [0, {})", path_, d, num_docs_);
  std::vector<int32_t> out(static_cast<size_t>(doc_end(d) - doc_begin(d)));
  read_tokens(doc_begin(d), doc_end(d), out.data());
  return out;
}

// ---- dataset ---------------------------------------------------------------------------

TokenDataset::TokenDataset(std::shared_ptr<const TokenFile> file, int64_t seq_len, uint64_t seed, bool shuffle,
                           int64_t vocab_size)
    : file_(std::move(file)), seq_len_(seq_len), seed_(seed), shuffle_(shuffle), vocab_size_(vocab_size) {
  SEQPAR_CHECK(file_ != nullptr, "TokenDataset: no token file");
  SEQPAR_INPUT_CHECK(seq_len_ >= 1, "seq_len={} must be >= 1", seq_len_);
  SEQPAR_INPUT_CHECK(seq_len_ <= std::numeric_limits<int32_t>::max(), "seq_len={} must be < 2^31", seq_len_);
  SEQPAR_INPUT_CHECK(vocab_size_ >= 0, "vocab_size={} must be >= 0", vocab_size_);
  num_sequences_ = file_->num_tokens() / seq_len_;
  SEQPAR_INPUT_CHECK(num_sequences_ >= 1, "token file '{}': holds {} tokens, fewer than seq_len={}: no sequence can be made",
                     file_->path(), file_->num_tokens(), seq_len_);
}

std::shared_ptr<const TokenDataset::EpochPlan> TokenDataset::plan(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (plan_ && plan_->epoch == epoch) return plan_;
  auto p = std::make_shared<EpochPlan>();
  p->epoch = epoch;
  const int64_t D = file_->num_docs();
  p->doc_order = permutation(D, shuffle_, seed_, epoch, 1);
  p->doc_start.resize(static_cast<size_t>(D + 1));
  p->doc_start[0] = 0;
  for (int64_t k = 0; k < D; ++k) {
    const int64_t d = p->doc_order[static_cast<size_t>(k)];
    p->doc_start[static_cast<size_t>(k + 1)] = p->doc_start[static_cast<size_t>(k)] + file_->doc_end(d) - file_->doc_begin(d);
  }
  p->seq_order = permutation(num_sequences_, shuffle_, seed_, epoch, 2);
  plan_ = p;
  return plan_;
}

Sequence TokenDataset::get(int64_t epoch, int64_t index) const {
  SEQPAR_CHECK(epoch >= 0, "epoch={} must be >= 0", epoch);
  SEQPAR_CHECK(index >= 0 && index < num_sequences_, "sequence index={} out of [0, {})", index, num_sequences_);
  auto p = plan(epoch);
  const int64_t begin = p->seq_order[static_cast<size_t>(index)] * seq_len_;  // in the epoch's stream
  const int64_t end = begin + seq_len_;
  // The document (in stream order) that holds stream offset `begin`.
  auto k = static_cast<int64_t>(std::upper_bound(p->doc_start.begin(), p->doc_start.end(), begin) - p->doc_start.begin()) - 1;

  Sequence seq;
  seq.input_ids.resize(static_cast<size_t>(seq_len_));
  seq.labels.resize(static_cast<size_t>(seq_len_));
  std::vector<uint8_t> mask(static_cast<size_t>(seq_len_));
  int64_t at = begin;
  while (at < end) {
    const int64_t d = p->doc_order[static_cast<size_t>(k)];
    const int64_t piece_end = std::min(end, p->doc_start[static_cast<size_t>(k + 1)]);
    const int64_t file_at = file_->doc_begin(d) + (at - p->doc_start[static_cast<size_t>(k)]);
    const int64_t len = piece_end - at;
    file_->read_tokens(file_at, file_at + len, seq.input_ids.data() + (at - begin), vocab_size_);
    file_->read_loss_mask(file_at, file_at + len, mask.data() + (at - begin));
    seq.doc_lens.push_back(static_cast<int32_t>(len));
    at = piece_end;
    ++k;
  }
  for (size_t i = 0; i < mask.size(); ++i) seq.labels[i] = mask[i] ? seq.input_ids[i] : kIgnoreIndex;
  return seq;
}

Sequence TokenDataset::next() {
  Sequence s = get(position_ / num_sequences_, position_ % num_sequences_);
  ++position_;
  return s;
}

std::vector<Sequence> TokenDataset::next_batch(int64_t batch_size) {
  SEQPAR_INPUT_CHECK(batch_size >= 1, "batch_size={} must be >= 1", batch_size);
  std::vector<Sequence> out;
  out.reserve(static_cast<size_t>(batch_size));
  for (int64_t i = 0; i < batch_size; ++i) out.push_back(next());
  return out;
}

void TokenDataset::set_position(int64_t position) {
  SEQPAR_INPUT_CHECK(position >= 0, "data position={} must be >= 0", position);
  position_ = position;
}

}  // namespace seqpar
