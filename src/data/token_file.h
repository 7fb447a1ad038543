// Token files ("SPTOK1"): tokenized pretraining / SFT data, and the dataset that packs them into
// training sequences. Byte layout in docs/data-format.md; in short (little-endian):
//
//   header (32 bytes): magic "SPTOK1" | u16 version (1) | u32 token dtype (1 = u32) |
//                      u32 flags (bit 0: has_loss_mask) | u64 num_tokens N | u64 num_docs D
//   tokens:            u32 [N]
//   zero padding to a multiple of 8 bytes
//   doc offsets:       u64 [D + 1], offsets[0] = 0, strictly increasing, offsets[D] = N
//   loss mask:         u8 [N] (only with has_loss_mask): 1 = the token is a target, 0 = label -100
//
// The reader maps the file and validates all of the structure when it opens it; token values
// (< 2^31, < vocab_size when given) and mask values (0 or 1) are checked as they are read, so
// opening a file of billions of tokens does not read them all.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/sp_batch.h"

namespace seqpar {

inline constexpr char kTokenFileMagic[6] = {'S', 'P', 'T', 'O', 'K', '1'};
inline constexpr uint16_t kTokenFileVersion = 1;
inline constexpr uint32_t kTokenDTypeU32 = 1;
inline constexpr uint32_t kTokenFileHasLossMask = 1u << 0;
inline constexpr int64_t kTokenFileHeaderBytes = 32;

// Writes a token file document by document, atomically: everything goes to a temporary file in
// the same directory, which finish() completes, fsyncs and renames onto `path`. A writer
// destroyed before finish() (an exception, a crash) leaves any previous file at `path` intact and
// removes its temporary file.
class TokenFileWriter {
 public:
  TokenFileWriter(std::string path, bool has_loss_mask);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // tokens: ids >= 0, at least one. loss_mask: one 0/1 per token when the file has a loss mask,
  // empty otherwise.
  void add_document(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& loss_mask = {});
  void finish();

  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_docs() const { return static_cast<int64_t>(offsets_.size()) - 1; }

 private:
  void write_bytes(const void* data, size_t n);

  std::string path_;
  std::string temp_path_;
  bool has_loss_mask_;
  int fd_ = -1;
  bool finished_ = false;
  int64_t num_tokens_ = 0;
  std::vector<uint64_t> offsets_{0};  // [D + 1]
  std::vector<uint8_t> loss_mask_;    // [N], written after the offsets
};

// One call: documents (and their loss masks, one per document, or none) to `path`.
void write_token_file(const std::string& path, const std::vector<std::vector<int32_t>>& docs,
                      const std::vector<std::vector<uint8_t>>& loss_masks = {});

// A validated, memory-mapped token file. Every problem is an InputError "token file '<path>': ...".
class TokenFile {
 public:
  explicit TokenFile(std::string path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_docs() const { return num_docs_; }
  bool has_loss_mask() const { return has_loss_mask_; }
  // Document d covers tokens [doc_begin(d), doc_end(d)).
  int64_t doc_begin(int64_t d) const;
  int64_t doc_end(int64_t d) const { return doc_begin(d + 1); }

  // out [end - begin] (=): tokens [begin, end) as i32. InputError for a value >= 2^31, or
  // >= vocab_size when vocab_size > 0.
  void read_tokens(int64_t begin, int64_t end, int32_t* out, int64_t vocab_size = 0) const;
  // out [end - begin] (=): the loss mask of tokens [begin, end), all 1 without a mask.
  // InputError for a value other than 0 or 1.
  void read_loss_mask(int64_t begin, int64_t end, uint8_t* out) const;
  // Convenience for tests and tools: document d's tokens.
  std::vector<int32_t> doc_tokens(int64_t d) const;

 private:
  std::string path_;
  const unsigned char* map_ = nullptr;  // the whole file, read-only
  size_t map_bytes_ = 0;
  int64_t num_tokens_ = 0;
  int64_t num_docs_ = 0;
  bool has_loss_mask_ = false;
  int64_t offsets_at_ = 0;  // byte offset of the doc offsets
  int64_t mask_at_ = 0;     // byte offset of the loss mask
};

// Training sequences of exactly seq_len tokens from a token file. Per epoch:
//   1. the documents are put in a random order (from seed and epoch; file order without shuffle)
//      and concatenated into one stream;
//   2. the stream is cut into num_sequences() = floor(N / seq_len) sequences; the last N mod
//      seq_len tokens of the epoch's stream are left out of that epoch;
//   3. the sequences are visited in a second random order (from seed and epoch).
// A document cut by a sequence boundary continues as a new document in the next sequence: doc_lens
// lists the pieces, so no token attends across a document or a cut. labels = input_ids, or -100
// where the loss mask is 0 (HF convention, unshifted: make_sp_batch shifts).
// Deterministic on every platform (own RNG and shuffle), and random-access, so a run resumes from
// one number: position() = epoch * num_sequences() + index of the next sequence.
class TokenDataset {
 public:
  // vocab_size > 0 checks every token read against it.
  TokenDataset(std::shared_ptr<const TokenFile> file, int64_t seq_len, uint64_t seed, bool shuffle = true,
               int64_t vocab_size = 0);

  int64_t seq_len() const { return seq_len_; }
  int64_t num_sequences() const { return num_sequences_; }
  const TokenFile& file() const { return *file_; }

  // The index-th sequence (0 <= index < num_sequences()) of an epoch (>= 0).
  Sequence get(int64_t epoch, int64_t index) const;

  // Sequential reading across epochs, resumable.
  Sequence next();
  std::vector<Sequence> next_batch(int64_t batch_size);
  int64_t position() const { return position_; }
  void set_position(int64_t position);
  int64_t epoch() const { return position_ / num_sequences_; }

 private:
  // One epoch's document order and sequence order.
  struct EpochPlan {
    int64_t epoch = -1;
    std::vector<int64_t> doc_order;  // [D] file document ids in stream order
    std::vector<int64_t> doc_start;  // [D + 1] stream offset of each document in that order
    std::vector<int64_t> seq_order;  // [num_sequences] sequence ids in visiting order
  };
  std::shared_ptr<const EpochPlan> plan(int64_t epoch) const;

  std::shared_ptr<const TokenFile> file_;
  int64_t seq_len_;
  uint64_t seed_;
  bool shuffle_;
  int64_t vocab_size_;
  int64_t num_sequences_ = 0;
  int64_t position_ = 0;
  mutable std::mutex mutex_;
  mutable std::shared_ptr<const EpochPlan> plan_;  // the last epoch used
};

}  // namespace seqpar
