// SentencePiece tokenizer.model (Llama-2, Mistral, ...) through libsentencepiece (Debian
// libsentencepiece-dev), when seqpar is built with it (SEQPAR_WITH_SENTENCEPIECE); otherwise
// loading one is an InputError that says so.
//
// Semantics are HF's LlamaTokenizer with its defaults: encode = sentencepiece's encode, with BOS
// in front when add_special_tokens (and the model has a BOS); text that spells a control token
// ("<s>") is encoded as text, as sentencepiece does.
#include "core/error.h"
#include "io/input_file.h"
#include "io/tokenizer.h"

#ifdef SEQPAR_WITH_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace seqpar::tokenizer_detail {

#ifdef SEQPAR_WITH_SENTENCEPIECE

namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::string path) : Tokenizer(std::move(path)) {
    // Read through io's reader (a regular file of bounded size), parsed from memory.
    const auto status = sp_.LoadFromSerializedProto(read_input_file(this->path(), kTokenizerInput));
    SEQPAR_INPUT_CHECK(status.ok(), "tokenizer '{}': not a SentencePiece model: {}", this->path(), status.ToString());
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens,
                              std::vector<int64_t>* starts) const override {
    validate_utf8(text);  // the same rule (and message) as every tokenizer
    std::vector<int32_t> ids;
    if (starts) starts->clear();
    if (add_special_tokens && sp_.bos_id() >= 0) {
      ids.push_back(sp_.bos_id());
      if (starts) starts->push_back(0);
    }
    const auto spt = sp_.EncodeAsImmutableProto(std::string(text));
    for (const auto& piece : spt.pieces()) {
      ids.push_back(static_cast<int32_t>(piece.id()));
      // begin() is the byte offset in the input; pieces that share a character (byte fallback)
      // share its offset.
      if (starts) starts->push_back(static_cast<int64_t>(piece.begin()));
    }
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::vector<int> v;
    for (int32_t id : ids) {
      SEQPAR_INPUT_CHECK(id >= 0 && id < sp_.GetPieceSize(), "tokenizer '{}': cannot decode token id {}: not in the "
                         "vocabulary (size {})", path(), id, sp_.GetPieceSize());
      if (skip_special_tokens && sp_.IsControl(id)) continue;
      v.push_back(id);
    }
    return sp_.DecodeIds(v);
  }

  int64_t vocab_size() const override { return sp_.GetPieceSize(); }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    const int id = sp_.PieceToId(std::string(token));
    if (id < 0 || sp_.IdToPiece(id) != token) return std::nullopt;  // PieceToId answers unk for any unknown piece
    return id;
  }

  std::optional<std::string> own_eos_token() const override {
    if (sp_.eos_id() < 0) return std::nullopt;
    return sp_.IdToPiece(sp_.eos_id());
  }

  std::string summary() const override {
    return fmt::format("SentencePiece '{}': {} ids, BOS {}", path(), sp_.GetPieceSize(),
                       sp_.bos_id() >= 0 ? sp_.IdToPiece(sp_.bos_id()) : "none");
  }

 private:
  sentencepiece::SentencePieceProcessor sp_;  // const methods are safe to call from many threads
};

}  // namespace

bool sentencepiece_available() { return true; }

std::shared_ptr<const Tokenizer> load_sentencepiece_tokenizer(const std::string& path) {
  return std::make_shared<SentencePieceTokenizer>(path);
}

#else

bool sentencepiece_available() { return false; }

std::shared_ptr<const Tokenizer> load_sentencepiece_tokenizer(const std::string& path) {
  throw InputError(fmt::format(
      "tokenizer '{}': SentencePiece models are not supported by this build of seqpar (it was built without "
      "libsentencepiece: install libsentencepiece-dev, e.g. with tools/setup.sh, and rebuild), or use the model's "
      "tokenizer.json",
      path));
}

#endif

}  // namespace seqpar::tokenizer_detail
