// Hugging Face tokenizer.json with a byte-level BPE model: the pipeline of HF `tokenizers`
// (added tokens -> pre-tokenizer -> BPE -> post-processor), for the components listed in
// io/tokenizer.h. Every unsupported component is an InputError naming its type.
#include <nlohmann/json.hpp>

#include <array>
#include <algorithm>
#include <atomic>
#include <fstream>
#include <memory>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "io/input_file.h"
#include "io/json_describe.h"
#include "io/tokenizer.h"
#include "io/tokenizer_steps.h"

namespace seqpar::tokenizer_detail {

namespace {

using nlohmann::json;

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
  std::string pattern;  // what it matches: its content, normalized when it is a normalized token
};

// A part of the input text: an added token (added >= 0, an index into the added tokens) or text
// for the pre-tokenizer (added = -1). Byte range [begin, end) of the input.
struct Segment {
  size_t begin, end;
  int added;
};

std::string utf8_of(char32_t c) {
  std::string s;
  append_utf8(s, c);
  return s;
}

// The code point that ends at byte `end` / starts at byte `begin` of valid UTF-8.
char32_t cp_before(std::string_view t, size_t end, size_t* begin_out = nullptr) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(t[b]) & 0xC0) == 0x80) --b;
  std::vector<char32_t> cps;
  std::vector<size_t> offs;
  decode_utf8(t.substr(b, end - b), cps, offs);
  if (begin_out) *begin_out = b;
  return cps.empty() ? 0 : cps[0];
}
char32_t cp_at(std::string_view t, size_t begin, size_t* end_out = nullptr) {
  size_t e = begin + 1;
  while (e < t.size() && (static_cast<unsigned char>(t[e]) & 0xC0) == 0x80) ++e;
  std::vector<char32_t> cps;
  std::vector<size_t> offs;
  decode_utf8(t.substr(begin, e - begin), cps, offs);
  if (end_out) *end_out = e;
  return cps.empty() ? 0 : cps[0];
}

bool ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct WordCache {
  uint64_t serial = 0;  // the tokenizer the entries belong to
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

std::atomic<uint64_t> next_serial{1};

class HfBpeTokenizer final : public Tokenizer {
 public:
  HfBpeTokenizer(std::string path, const json& root) : Tokenizer(std::move(path)) {
    SEQPAR_INPUT_CHECK(root.is_object(), "{}: must be a JSON object", where());
    SEQPAR_INPUT_CHECK(root.contains("model") && root["model"].is_object(), "{}: no 'model' object", where());
    load_model(root["model"]);
    if (root.contains("added_tokens")) load_added_tokens(root["added_tokens"]);
    if (root.contains("normalizer") && !root["normalizer"].is_null())
      normalizer_ = std::make_unique<Normalizer>(root["normalizer"], where());
    normalizer_keeps_ascii_ = normalizer_ && normalizer_->keeps_ascii();
    build_added_tables();
    load_pre_tokenizer(root.contains("pre_tokenizer") ? root["pre_tokenizer"] : json());
    if (root.contains("post_processor")) load_post_processor(root["post_processor"], "post_processor");
    load_decoder(root.contains("decoder") ? root["decoder"] : json());
    check_id_range();
    build_decode_table();
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens,
                              std::vector<int64_t>* starts) const override {
    validate_utf8(text);  // once; everything below may assume valid UTF-8
    std::vector<int32_t> ids;
    if (starts) starts->clear();
    if (add_special_tokens)
      for (int32_t id : prefix_ids_) {
        ids.push_back(id);
        if (starts) starts->push_back(0);
      }
    // HF's AddedVocabulary: the non-normalized added tokens are found in the raw text; each piece
    // between them is normalized on its own, and the normalized added tokens found in that.
    for (const Segment& s : split_added(text, {{0, text.size(), -1}}, /*normalized=*/false)) {
      if (s.added >= 0) {
        ids.push_back(added_[static_cast<size_t>(s.added)].id);
        if (starts) starts->push_back(static_cast<int64_t>(s.begin));
      } else if (normalizer_ && !(normalizer_keeps_ascii_ && ascii(text.substr(s.begin, s.end - s.begin)))) {
        const AlignedText n = normalizer_->apply(text.substr(s.begin, s.end - s.begin));
        encode_normalized(n.text, n.origin.data(), s.begin, ids, starts);
      } else {
        encode_normalized(text.substr(s.begin, s.end - s.begin), nullptr, s.begin, ids, starts);
      }
    }
    if (add_special_tokens)
      for (int32_t id : suffix_ids_) {
        ids.push_back(id);
        if (starts) starts->push_back(static_cast<int64_t>(text.size()));
      }
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    SEQPAR_INPUT_CHECK(decoder_error_.empty(), "{}", decoder_error_);
    std::string out;
    std::vector<std::string> tokens;
    bool first = true;
    for (int32_t id : ids) {
      SEQPAR_INPUT_CHECK(id >= 0 && id < vocab_size_ && known_[static_cast<size_t>(id)],
                         "{}: cannot decode token id {}: not in the vocabulary (size {})", where(), id, vocab_size_);
      if (skip_special_tokens && special_[static_cast<size_t>(id)]) continue;
      if (decoder_chain_) {
        tokens.push_back(decoded_[static_cast<size_t>(id)]);
        continue;
      }
      // With no decoder HF joins the token spellings with spaces.
      if (!byte_level_decoder_ && !first) out += ' ';
      out += decoded_[static_cast<size_t>(id)];
      first = false;
    }
    return decoder_chain_ ? decoder_chain_->decode(std::move(tokens)) : out;
  }

  int64_t vocab_size() const override { return vocab_size_; }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    const std::string key(token);
    if (auto it = added_by_content_.find(key); it != added_by_content_.end()) return it->second;
    if (auto it = vocab_.find(key); it != vocab_.end()) return it->second;
    return std::nullopt;
  }

  std::string summary() const override {
    size_t specials = 0;
    for (const auto& a : added_) specials += a.special;
    std::string pre;
    if (byte_level_) {
      for (SplitPattern p : splits_) pre += fmt::format("split({}) + ", split_pattern_name(p));
      pre += byte_level_regex_ ? "byte-level(gpt2 regex)" : "byte-level";
      if (add_prefix_space_) pre += " with prefix space";
    } else if (metaspace_) {
      pre = fmt::format("metaspace('{}', prepend {}{})", metaspace_rep_,
                        metaspace_prepend_ == Prepend::kAlways  ? "always"
                        : metaspace_prepend_ == Prepend::kFirst ? "first"
                                                                : "never",
                        metaspace_split_ ? ", split" : "");
    } else {
      pre = "none";
    }
    std::string tmpl;
    for (int32_t id : prefix_ids_) tmpl += decoded_[static_cast<size_t>(id)] + " ";
    tmpl += "$A";
    for (int32_t id : suffix_ids_) tmpl += " " + decoded_[static_cast<size_t>(id)];
    return fmt::format(
        "{} BPE '{}': {} ids ({} model tokens, {} merges, {} added tokens of which {} special), "
        "normalizer {}, pre-tokenizer {}, template '{}'",
        byte_level_      ? "byte-level"
        : byte_fallback_ ? "byte-fallback"
                         : "character-level",
        path(), vocab_size_, vocab_.size(), merges_.size(), added_.size(), specials,
        normalizer_ ? normalizer_->describe() : "none", pre, tmpl);
  }

 private:
  std::string where() const { return fmt::format("tokenizer '{}'", path()); }

  // ---- loading ---------------------------------------------------------------------------

  // Records an id (of the vocabulary or an added token) and where it came from, for the table size.
  void note_id(int64_t id, std::string source) {
    if (id + 1 <= vocab_size_) return;
    vocab_size_ = id + 1;
    largest_id_source_ = std::move(source);
  }

  // The id -> token tables are dense ([vocab_size] entries), so the largest id must stay near the
  // number of ids the file defines: a table at most twice that (plus 1024 for reserved ranges),
  // which keeps the memory proportional to the file instead of to an id of 1e8.
  void check_id_range() const {
    const auto defined = static_cast<int64_t>(vocab_.size() + added_.size());
    const int64_t limit = 2 * defined + 1024;
    SEQPAR_INPUT_CHECK(vocab_size_ <= limit,
                       "{}: {} has id {}, but the file defines only {} ids: ids must be < 2 x (number of ids) + 1024 "
                       "= {} (the id tables are dense)",
                       where(), largest_id_source_, vocab_size_ - 1, defined, limit);
  }

  void load_model(const json& m) {
    const std::string type = m.value("type", m.contains("merges") ? "BPE" : "");
    SEQPAR_INPUT_CHECK(type == "BPE", "{}: model type '{}' is not supported (seqpar reads byte-level BPE models only)",
                       where(), type);
    SEQPAR_INPUT_CHECK(m.contains("vocab") && m["vocab"].is_object(), "{}: model.vocab must be an object", where());
    for (const auto& [tok, id] : m["vocab"].items()) {
      SEQPAR_INPUT_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (int64_t{1} << 31),
                         "{}: model.vocab['{}'] = {} must be an id in [0, 2^31)", where(), tok, short_json(id));
      vocab_[tok] = id.get<int32_t>();
      note_id(id.get<int64_t>(), fmt::format("model.vocab['{}']", tok));
    }
    auto opt_string = [&](const char* field) -> std::string {
      if (!m.contains(field) || m[field].is_null()) return "";
      SEQPAR_INPUT_CHECK(m[field].is_string(), "{}: model.{} must be a string or null", where(), field);
      return m[field].get<std::string>();
    };
    SEQPAR_INPUT_CHECK(opt_string("continuing_subword_prefix").empty() && opt_string("end_of_word_suffix").empty(),
                       "{}: model.continuing_subword_prefix / end_of_word_suffix are not supported (byte-level BPE "
                       "has neither)", where());
    byte_fallback_ = m.value("byte_fallback", false);
    if (m.contains("dropout") && !m["dropout"].is_null())
      SEQPAR_INPUT_CHECK(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0,
                         "{}: model.dropout={} is not supported (BPE dropout is for training a tokenizer)", where(),
                         short_json(m["dropout"]));
    ignore_merges_ = m.value("ignore_merges", false);
    fuse_unk_ = m.value("fuse_unk", false);
    if (const std::string unk = opt_string("unk_token"); !unk.empty()) {
      auto it = vocab_.find(unk);
      SEQPAR_INPUT_CHECK(it != vocab_.end(), "{}: model.unk_token '{}' is not in the vocabulary", where(), unk);
      unk_ = it->second;
    }
    SEQPAR_INPUT_CHECK(m.contains("merges") && m["merges"].is_array(), "{}: model.merges must be an array", where());
    const json& merges = m["merges"];
    merges_.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      const json& e = merges[r];
      std::string a, b;
      if (e.is_string()) {  // "a b"
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        SEQPAR_INPUT_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                           "{}: model.merges[{}] = '{}' must be two tokens separated by one space", where(), r, s);
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        SEQPAR_INPUT_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(),
                           "{}: model.merges[{}] = {} must be \"a b\" or [\"a\", \"b\"]", where(), r, short_json(e));
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      }
      auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
      SEQPAR_INPUT_CHECK(ia != vocab_.end() && ib != vocab_.end() && iab != vocab_.end(),
                         "{}: model.merges[{}] ('{}', '{}'): '{}' is not in the vocabulary", where(), r, a, b,
                         ia == vocab_.end() ? a : ib == vocab_.end() ? b : a + b);
      // The first (lowest-rank) occurrence of a pair wins, as in HF.
      merges_.try_emplace(pair_key(ia->second, ib->second), static_cast<int32_t>(r), iab->second);
    }
    for (int b = 0; b < 256; ++b) {
      auto it = vocab_.find(utf8_of(byte_to_unicode(static_cast<uint8_t>(b))));
      byte_token_[static_cast<size_t>(b)] = it == vocab_.end() ? -1 : it->second;
      auto fb = vocab_.find(fmt::format("<0x{:02X}>", b));  // HF's byte_fallback spelling
      fallback_token_[static_cast<size_t>(b)] = fb == vocab_.end() ? -1 : fb->second;
    }
  }

  void load_added_tokens(const json& list) {
    SEQPAR_INPUT_CHECK(list.is_array(), "{}: added_tokens must be an array", where());
    for (size_t i = 0; i < list.size(); ++i) {
      const json& t = list[i];
      SEQPAR_INPUT_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                             t["content"].is_string() && !t["content"].get<std::string>().empty(),
                         "{}: added_tokens[{}] must have an integer 'id' and a non-empty string 'content'", where(), i);
      AddedToken a;
      a.content = t["content"].get<std::string>();
      // The id as the integer it is (nlohmann would truncate a get<int32_t> of 2^32 to 0 and
      // make 2^31 negative): token ids are int32 in seqpar, as in the token files' readers.
      const json& id = t["id"];
      const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() < (uint64_t{1} << 31)
                                                    : id.get<int64_t>() >= 0 && id.get<int64_t>() < (int64_t{1} << 31);
      SEQPAR_INPUT_CHECK(in_range, "{}: added_tokens[{}] ('{}') has id {}: an id must be in [0, 2^31)", where(), i,
                         a.content, short_json(id));
      a.id = static_cast<int32_t>(id.get<int64_t>());
      a.special = t.value("special", false);
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      a.single_word = t.value("single_word", false);
      a.normalized = t.value("normalized", !a.special);
      note_id(a.id, fmt::format("added_tokens[{}] ('{}')", i, a.content));
      added_by_content_[a.content] = a.id;
      added_.push_back(std::move(a));
    }
  }

  // What each added token matches: a non-normalized one its content in the raw text, a
  // normalized one its content normalized (HF's normalized_cache) in the normalized text. Per
  // pass, the tokens by first byte, longest first: the leftmost-longest match of HF's
  // Aho-Corasick automaton is the longest token that starts at the first position with one.
  void build_added_tables() {
    for (AddedToken& a : added_)
      a.pattern = a.normalized && normalizer_ ? normalizer_->apply(a.content).text : a.content;
    for (int pass = 0; pass < 2; ++pass)
      for (size_t i = 0; i < added_.size(); ++i)
        if (added_[i].normalized == (pass == 1) && !added_[i].pattern.empty())
          by_first_byte_[pass][static_cast<unsigned char>(added_[i].pattern[0])].push_back(i);
    for (auto& table : by_first_byte_)
      for (auto& v : table)
        std::stable_sort(v.begin(), v.end(),
                         [&](size_t x, size_t y) { return added_[x].pattern.size() > added_[y].pattern.size(); });
  }

  // The pre-tokenizer: [Split...] + ByteLevel (a byte-level BPE), Metaspace, or none (a BPE over
  // the characters of each normalized piece, SentencePiece-style with byte_fallback).
  void load_pre_tokenizer(const json& p) {
    if (p.is_null()) return;
    if (p.value("type", "") == "Metaspace") return load_metaspace(p);
    std::vector<json> steps;
    if (p.value("type", "") == "Sequence") {
      SEQPAR_INPUT_CHECK(p.contains("pretokenizers") && p["pretokenizers"].is_array(),
                         "{}: pre_tokenizer Sequence needs a 'pretokenizers' array", where());
      for (const auto& s : p["pretokenizers"]) steps.push_back(s);
    } else {
      steps.push_back(p);
    }
    for (size_t i = 0; i < steps.size(); ++i) {
      const json& s = steps[i];
      const std::string type = s.value("type", "?");
      SEQPAR_INPUT_CHECK(!byte_level_, "{}: pre-tokenizer '{}' after ByteLevel is not supported (ByteLevel must be "
                         "the last step)", where(), type);
      if (type == "ByteLevel") {
        byte_level_ = true;
        add_prefix_space_ = s.value("add_prefix_space", true);
        byte_level_regex_ = s.value("use_regex", true);
      } else if (type == "Split") {
        SEQPAR_INPUT_CHECK(s.value("behavior", "") == "Isolated" && !s.value("invert", false),
                           "{}: pre-tokenizer Split with behavior '{}' invert={} is not supported (only Isolated, "
                           "not inverted)", where(), s.value("behavior", "?"), s.value("invert", false));
        const json& pat = s.contains("pattern") ? s["pattern"] : json();
        SEQPAR_INPUT_CHECK(pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string(),
                           "{}: pre-tokenizer Split pattern {} is not supported (only a Regex)", where(), short_json(pat));
        auto sp = split_pattern_from_regex(pat["Regex"].get<std::string>());
        SEQPAR_INPUT_CHECK(sp.has_value(), "{}: pre-tokenizer Split regex '{}' is not supported: seqpar implements the "
                           "GPT-2, Llama-3 and Qwen2 patterns (docs/prepare-data.md)", where(),
                           pat["Regex"].get<std::string>());
        splits_.push_back(*sp);
      } else {
        throw InputError(
            fmt::format("{}: pre-tokenizer type '{}' is not supported (supported: ByteLevel, Split with "
                        "the GPT-2/Llama-3/Qwen2 regex, Sequence of those; Metaspace alone; none)",
                        where(), type));
      }
    }
    SEQPAR_INPUT_CHECK(byte_level_,
                       "{}: the pre-tokenizer has no ByteLevel step: seqpar supports Split steps only "
                       "before ByteLevel",
                       where());
  }

  // HF Metaspace: spaces become the replacement character, which is prepended to a piece that
  // does not start with it (always, or for the piece at the start of the text: first), and
  // (split) each replacement character starts a new word.
  void load_metaspace(const json& p) {
    SEQPAR_INPUT_CHECK(p.contains("replacement") && p["replacement"].is_string(),
                       "{}: pre_tokenizer Metaspace needs a string 'replacement'", where());
    metaspace_ = true;
    metaspace_rep_ = p["replacement"].get<std::string>();
    std::vector<char32_t> cps;
    std::vector<size_t> offs;
    decode_utf8(metaspace_rep_, cps, offs);
    SEQPAR_INPUT_CHECK(cps.size() == 1, "{}: pre_tokenizer Metaspace replacement '{}' must be one character", where(),
                       metaspace_rep_);
    std::string scheme = p.value("prepend_scheme", "always");
    if (p.contains("add_prefix_space") && p["add_prefix_space"].is_boolean() && !p["add_prefix_space"].get<bool>()) {
      SEQPAR_INPUT_CHECK(!p.contains("prepend_scheme") || scheme == "never",
                         "{}: pre_tokenizer Metaspace add_prefix_space=false contradicts prepend_scheme '{}'", where(),
                         scheme);
      scheme = "never";
    }
    SEQPAR_INPUT_CHECK(scheme == "always" || scheme == "first" || scheme == "never",
                       "{}: pre_tokenizer Metaspace prepend_scheme '{}' must be always, first or never", where(),
                       scheme);
    metaspace_prepend_ = scheme == "always" ? Prepend::kAlways : scheme == "first" ? Prepend::kFirst : Prepend::kNever;
    metaspace_split_ = p.value("split", true);
  }

  void load_post_processor(const json& p, const std::string& at) {
    if (p.is_null()) return;
    const std::string type = p.value("type", "?");
    if (type == "ByteLevel") return;  // offsets only
    if (type == "Sequence") {
      SEQPAR_INPUT_CHECK(p.contains("processors") && p["processors"].is_array(),
                         "{}: {} Sequence needs a 'processors' array", where(), at);
      for (size_t i = 0; i < p["processors"].size(); ++i)
        load_post_processor(p["processors"][i], fmt::format("{}.processors[{}]", at, i));
      return;
    }
    SEQPAR_INPUT_CHECK(type == "TemplateProcessing",
                       "{}: {} type '{}' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)",
                       where(), at, type);
    SEQPAR_INPUT_CHECK(p.contains("single") && p["single"].is_array(), "{}: {}.single must be an array", where(), at);
    const json& specials = p.contains("special_tokens") ? p["special_tokens"] : json::object();
    std::vector<int32_t> before, after;
    int sequences = 0;
    for (const auto& item : p["single"]) {
      if (item.contains("Sequence")) {
        SEQPAR_INPUT_CHECK(item["Sequence"].value("id", "") == "A", "{}: {}.single has sequence {}, expected A",
                           where(), at, short_json(item["Sequence"]));
        ++sequences;
        continue;
      }
      SEQPAR_INPUT_CHECK(item.contains("SpecialToken") && item["SpecialToken"].contains("id"),
                         "{}: {}.single item {} is neither a SpecialToken nor the Sequence", where(), at, short_json(item));
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      SEQPAR_INPUT_CHECK(specials.contains(name) && specials[name].contains("ids") && specials[name]["ids"].is_array(),
                         "{}: {}: special token '{}' is not in special_tokens", where(), at, name);
      for (const auto& id : specials[name]["ids"]) {
        SEQPAR_INPUT_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab_size_,
                           "{}: {}: special token '{}' has id {} outside the vocabulary", where(), at, name, short_json(id));
        (sequences == 0 ? before : after).push_back(id.get<int32_t>());
      }
    }
    SEQPAR_INPUT_CHECK(sequences == 1, "{}: {}.single must hold the sequence $A once", where(), at);
    // A later template wraps the output of an earlier one.
    prefix_ids_.insert(prefix_ids_.begin(), before.begin(), before.end());
    suffix_ids_.insert(suffix_ids_.end(), after.begin(), after.end());
  }

  // An unsupported decoder fails decode(), not the load: encoding does not need it.
  void load_decoder(const json& d) {
    if (d.is_null()) return;
    if (d.value("type", "?") == "ByteLevel") {
      byte_level_decoder_ = true;
      return;
    }
    try {
      decoder_chain_ = std::make_unique<DecoderChain>(d, where());
    } catch (const InputError& e) {
      decoder_error_ = e.what();
    }
  }

  void build_decode_table() {
    std::unordered_map<char32_t, uint8_t> byte_of;
    for (int b = 0; b < 256; ++b) byte_of[byte_to_unicode(static_cast<uint8_t>(b))] = static_cast<uint8_t>(b);
    decoded_.assign(static_cast<size_t>(vocab_size_), "");
    known_.assign(static_cast<size_t>(vocab_size_), 0);
    special_.assign(static_cast<size_t>(vocab_size_), 0);
    auto set = [&](const std::string& tok, int32_t id) {
      std::string bytes = tok;
      if (byte_level_decoder_) {  // HF: every char back to its byte, or the token as it is if one char is not in the map
        std::vector<char32_t> cps;
        std::vector<size_t> offs;
        decode_utf8(tok, cps, offs);
        std::string mapped;
        bool all = true;
        for (char32_t c : cps) {
          auto it = byte_of.find(c);
          if (it == byte_of.end()) {
            all = false;
            break;
          }
          mapped += static_cast<char>(it->second);
        }
        if (all) bytes = mapped;
      }
      decoded_[static_cast<size_t>(id)] = std::move(bytes);
      known_[static_cast<size_t>(id)] = 1;
    };
    for (const auto& [tok, id] : vocab_) set(tok, id);
    for (const auto& a : added_) {
      set(a.pattern, a.id);  // HF decodes a normalized added token from its normalized form
      special_[static_cast<size_t>(a.id)] = a.special;
    }
  }

  // ---- encoding --------------------------------------------------------------------------

  static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  // Splits the text segments of `in` on the added tokens of one pass (HF AddedVocabulary:
  // non-normalized tokens on the raw text first, then normalized ones; with no normalizer both
  // see the same text).
  std::vector<Segment> split_added(std::string_view text, const std::vector<Segment>& in, bool normalized) const {
    const auto& table = by_first_byte_[normalized ? 1 : 0];
    std::vector<Segment> out;
    for (const Segment& seg : in) {
      if (seg.added >= 0 || added_.empty()) {
        out.push_back(seg);
        continue;
      }
      size_t emitted = seg.begin;  // start of the text not yet emitted (HF's start_offset)
      size_t i = seg.begin;
      while (i < seg.end) {
        const auto& cands = table[static_cast<unsigned char>(text[i])];
        int hit = -1;
        for (size_t k : cands) {
          const std::string& c = added_[k].pattern;
          if (c.size() <= seg.end - i && text.compare(i, c.size(), c) == 0) {
            hit = static_cast<int>(k);
            break;
          }
        }
        if (hit < 0) {
          ++i;
          continue;
        }
        const AddedToken& a = added_[static_cast<size_t>(hit)];
        size_t start = i, stop = i + a.pattern.size();
        i = stop;
        if (a.single_word) {
          const bool word_before = start > seg.begin && word_char(cp_before(text, start));
          const bool word_after = stop < seg.end && word_char(cp_at(text, stop));
          if (word_before || word_after) continue;
        }
        if (a.lstrip) {
          size_t b = start;
          while (b > emitted) {
            size_t prev;
            if (char_class(cp_before(text, b, &prev)) != CharClass::kSpace) break;
            b = prev;
          }
          start = b;
        }
        if (a.rstrip) {
          while (stop < seg.end) {
            size_t next;
            if (char_class(cp_at(text, stop, &next)) != CharClass::kSpace) break;
            stop = next;
          }
          i = stop;
        }
        if (emitted < start) out.push_back({emitted, start, -1});
        out.push_back({start, stop, hit});
        emitted = stop;
      }
      if (emitted < seg.end) out.push_back({emitted, seg.end, -1});
    }
    return out;
  }

  // Pre-tokenizes text [begin, end) and appends the BPE ids of every piece.
  // One piece of normalized text between non-normalized added tokens: byte k of `text` came from
  // byte base + origin[k] of the input (origin null: base + k).
  void encode_normalized(std::string_view text, const size_t* origin, size_t base, std::vector<int32_t>& ids,
                         std::vector<int64_t>* starts) const {
    for (const Segment& s : split_added(text, {{0, text.size(), -1}}, /*normalized=*/true)) {
      if (s.added >= 0) {
        ids.push_back(added_[static_cast<size_t>(s.added)].id);
        if (starts) starts->push_back(static_cast<int64_t>(base + (origin ? origin[s.begin] : s.begin)));
      } else if (byte_level_) {
        encode_byte_level(text, s.begin, s.end, origin, base, ids, starts);
      } else {
        encode_chars(text, s.begin, s.end, origin, base, ids, starts);
      }
    }
  }

  // Pre-tokenizes text [begin, end) and appends the BPE ids of every piece: no pre-tokenizer (the
  // whole piece is one word) or Metaspace, then a BPE over characters.
  void encode_chars(std::string_view text, size_t begin, size_t end, const size_t* origin, size_t base,
                    std::vector<int32_t>& ids, std::vector<int64_t>* starts) const {
    AlignedText piece;
    piece.text.assign(text.substr(begin, end - begin));
    piece.origin.resize(end - begin + 1);
    for (size_t k = begin; k <= end; ++k) piece.origin[k - begin] = base + (origin ? origin[k] : k);
    std::vector<std::pair<size_t, size_t>> words{{0, piece.text.size()}};
    if (metaspace_) {
      replace_aligned(piece, " ", metaspace_rep_);
      const bool prepend = metaspace_prepend_ == Prepend::kAlways ||
                           (metaspace_prepend_ == Prepend::kFirst && piece.origin.front() == 0);
      if (prepend && piece.text.compare(0, metaspace_rep_.size(), metaspace_rep_) != 0)
        prepend_aligned(piece, metaspace_rep_);
      words = {{0, piece.text.size()}};
      if (metaspace_split_) {  // MergedWithNext: each replacement starts a word
        words.clear();
        size_t w = 0;
        for (size_t at = piece.text.find(metaspace_rep_, 1); at != std::string::npos;
             at = piece.text.find(metaspace_rep_, at + 1)) {
          words.emplace_back(w, at);
          w = at;
        }
        words.emplace_back(w, piece.text.size());
      }
    }
    std::vector<int32_t> word_ids;
    std::vector<size_t> word_pos;
    for (auto [wb, we] : words) {
      if (wb == we) continue;
      bpe(reinterpret_cast<const unsigned char*>(piece.text.data()) + wb, we - wb, word_ids, word_pos);
      ids.insert(ids.end(), word_ids.begin(), word_ids.end());
      if (starts)
        for (size_t p : word_pos) starts->push_back(static_cast<int64_t>(piece.origin[wb + p]));
    }
  }

  // The byte-level path: the Split steps, then ByteLevel, then the BPE over bytes.
  void encode_byte_level(std::string_view text, size_t begin, size_t end, const size_t* origin, size_t base,
                         std::vector<int32_t>& ids, std::vector<int64_t>* starts) const {
    // Pieces after the Split steps, as byte ranges of `text`.
    std::vector<std::pair<size_t, size_t>> pieces{{begin, end}};
    std::vector<char32_t> cps;
    std::vector<size_t> offs;
    for (SplitPattern p : splits_) {
      std::vector<std::pair<size_t, size_t>> next;
      for (auto [b, e] : pieces) {
        decode_utf8(text.substr(b, e - b), cps, offs);
        for (auto [cb, ce] : split_pretokens(cps, p)) next.emplace_back(b + offs[cb], b + offs[ce]);
      }
      pieces = std::move(next);
    }
    std::string buf;
    std::vector<int32_t> word_ids;
    std::vector<size_t> word_pos;
    for (auto [b, e] : pieces) {
      if (b == e) continue;
      // ByteLevel: the optional prefix space, then (use_regex) the GPT-2 split, then the bytes.
      const bool prefixed = add_prefix_space_ && text[b] != ' ';
      buf.clear();
      if (prefixed) buf.push_back(' ');
      buf.append(text.substr(b, e - b));
      std::vector<std::pair<size_t, size_t>> words{{0, buf.size()}};
      if (byte_level_regex_) {
        decode_utf8(buf, cps, offs);
        words.clear();
        for (auto [cb, ce] : split_pretokens(cps, SplitPattern::kGpt2)) words.emplace_back(offs[cb], offs[ce]);
      }
      for (auto [wb, we] : words) {
        bpe(reinterpret_cast<const unsigned char*>(buf.data()) + wb, we - wb, word_ids, word_pos);
        ids.insert(ids.end(), word_ids.begin(), word_ids.end());
        if (starts)
          for (size_t p : word_pos) {
            const size_t in_buf = wb + p;
            const size_t in_text = b + (prefixed ? (in_buf == 0 ? 0 : in_buf - 1) : in_buf);
            starts->push_back(static_cast<int64_t>(base + (origin ? origin[in_text] : in_text)));
          }
      }
    }
  }

  // BPE over the bytes of one word: ids and the byte offset where each starts. The merge order
  // is HF's: repeatedly the pair of lowest rank, the leftmost first.
  void bpe(const unsigned char* bytes, size_t n, std::vector<int32_t>& ids, std::vector<size_t>& pos) const {
    ids.clear();
    pos.clear();
    if (n == 0) return;
    // Short words repeat (Zipf): a per-thread cache of their result, as HF keeps one. It belongs
    // to one tokenizer (serial_) and is dropped whole when it grows past kCacheEntries.
    constexpr size_t kCacheWordBytes = 48, kCacheEntries = size_t{1} << 16;
    thread_local WordCache cache;
    const std::string_view word(reinterpret_cast<const char*>(bytes), n);
    if (n <= kCacheWordBytes) {
      if (cache.serial != serial_ || cache.map.size() >= kCacheEntries) {
        cache.map.clear();
        cache.serial = serial_;
      }
      if (auto it = cache.map.find(word); it != cache.map.end()) {
        const auto& v = it->second;  // ids, then their positions
        ids.assign(v.begin(), v.begin() + static_cast<long>(v.size() / 2));
        pos.assign(v.begin() + static_cast<long>(v.size() / 2), v.end());
        return;
      }
    }
    bpe_uncached(bytes, n, ids, pos);
    if (n <= kCacheWordBytes) {
      std::vector<int32_t> v(ids);
      for (size_t p : pos) v.push_back(static_cast<int32_t>(p));
      cache.map.emplace(std::string(word), std::move(v));
    }
  }

  void bpe_uncached(const unsigned char* bytes, size_t n, std::vector<int32_t>& ids, std::vector<size_t>& pos) const {
    if (ignore_merges_) {  // a word that is a token as a whole is that token
      std::string word;
      if (byte_level_) {
        for (size_t k = 0; k < n; ++k) word += byte_char_[bytes[k]];
      } else {
        word.assign(reinterpret_cast<const char*>(bytes), n);
      }
      if (auto it = vocab_.find(word); it != vocab_.end()) {
        ids.push_back(it->second);
        pos.push_back(0);
        return;
      }
    }
    // Symbols: a doubly linked list over the bytes; a merged symbol keeps its left index.
    struct Sym {
      int32_t id;
      int prev, next;
      bool alive;
    };
    std::vector<Sym> sym;
    sym.reserve(n);
    auto add_sym = [&](int32_t id, size_t at) {
      sym.push_back({id, static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, true});
      pos.push_back(at);
    };
    if (byte_level_) {
      for (size_t k = 0; k < n; ++k) {
        int32_t id = byte_token_[bytes[k]];
        if (id < 0) {
          SEQPAR_INPUT_CHECK(unk_.has_value(),
                             "{}: byte 0x{:02X} has no token in the vocabulary and the model has no "
                             "unk_token",
                             where(), bytes[k]);
          // A byte-level vocabulary that lacks a byte: the unk token (fused with a previous one).
          if (fuse_unk_ && !sym.empty() && sym.back().id == *unk_) continue;
          id = *unk_;
        }
        add_sym(id, k);
      }
    } else {
      // HF's merge_word: each character its token; else (byte_fallback) its bytes' <0xXX>
      // tokens, all starting where the character does; else the unk token, a run of unknown
      // characters one unk under fuse_unk.
      const std::string_view w(reinterpret_cast<const char*>(bytes), n);
      bool after_unk = false;
      for (size_t k = 0; k < n;) {
        const size_t len = bytes[k] < 0x80 ? 1 : bytes[k] < 0xE0 ? 2 : bytes[k] < 0xF0 ? 3 : 4;
        if (auto it = vocab_.find(std::string(w.substr(k, len))); it != vocab_.end()) {
          add_sym(it->second, k);
          after_unk = false;
        } else if (byte_fallback_ &&
                   std::all_of(bytes + k, bytes + k + len, [&](unsigned char b) { return fallback_token_[b] >= 0; })) {
          for (size_t j = k; j < k + len; ++j) add_sym(fallback_token_[bytes[j]], k);
          after_unk = false;
        } else {
          SEQPAR_INPUT_CHECK(unk_.has_value(),
                             "{}: character '{}' has no token in the vocabulary{} and the model has "
                             "no unk_token (HF would drop it)",
                             where(), w.substr(k, len), byte_fallback_ ? " nor all of its <0xXX> byte tokens" : "");
          if (!(fuse_unk_ && after_unk)) add_sym(*unk_, k);
          after_unk = true;
        }
        k += len;
      }
    }
    sym.back().next = -1;
    struct Merge {
      int32_t rank;
      int at;
      int32_t new_id;
      bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : at > o.at; }
    };
    std::priority_queue<Merge, std::vector<Merge>, std::greater<Merge>> queue;
    auto push = [&](int left) {
      if (left < 0 || sym[static_cast<size_t>(left)].next < 0) return;
      const int right = sym[static_cast<size_t>(left)].next;
      auto it = merges_.find(pair_key(sym[static_cast<size_t>(left)].id, sym[static_cast<size_t>(right)].id));
      if (it != merges_.end()) queue.push({it->second.first, left, it->second.second});
    };
    for (int k = 0; k + 1 < static_cast<int>(sym.size()); ++k) push(k);
    while (!queue.empty()) {
      const Merge m = queue.top();
      queue.pop();
      Sym& left = sym[static_cast<size_t>(m.at)];
      if (!left.alive || left.next < 0) continue;
      Sym& right = sym[static_cast<size_t>(left.next)];
      // A stale entry: the pair at this position changed since it was queued (HF checks the id).
      auto it = merges_.find(pair_key(left.id, right.id));
      if (it == merges_.end() || it->second.second != m.new_id) continue;
      left.id = m.new_id;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) sym[static_cast<size_t>(right.next)].prev = m.at;
      push(left.prev);
      push(m.at);
    }
    size_t w = 0;
    for (size_t k = 0; k < sym.size(); ++k)
      if (sym[k].alive) {
        ids.push_back(sym[k].id);
        pos[w++] = pos[k];
      }
    pos.resize(w);
  }

  const uint64_t serial_ = next_serial++;          // identifies this tokenizer's word cache entries
  std::unordered_map<std::string, int32_t> vocab_;  // model tokens, in their byte-level spelling
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left id, right id) -> (rank, merged id)
  std::array<int32_t, 256> byte_token_{};       // id of each single-byte token, -1 when missing
  std::array<int32_t, 256> fallback_token_{};   // id of each byte's <0xXX> token, -1 when missing
  bool byte_fallback_ = false;
  std::array<std::string, 256> byte_char_ = [] {  // the byte-level spelling of each byte
    std::array<std::string, 256> a;
    for (int b = 0; b < 256; ++b) a[static_cast<size_t>(b)] = utf8_of(byte_to_unicode(static_cast<uint8_t>(b)));
    return a;
  }();
  std::optional<int32_t> unk_;
  bool fuse_unk_ = false, ignore_merges_ = false;

  std::vector<AddedToken> added_;
  std::unordered_map<std::string, int32_t> added_by_content_;
  std::array<std::array<std::vector<size_t>, 256>, 2> by_first_byte_;  // [pass][first byte] -> added_ indices

  std::unique_ptr<Normalizer> normalizer_;  // none: the text as it is
  bool normalizer_keeps_ascii_ = false;     // ASCII text skips it (NFC and the other forms)
  std::vector<SplitPattern> splits_;
  enum class Prepend { kAlways, kFirst, kNever };
  bool metaspace_ = false, metaspace_split_ = true;  // Metaspace pre-tokenizer
  std::string metaspace_rep_;
  Prepend metaspace_prepend_ = Prepend::kAlways;
  bool byte_level_ = false, byte_level_regex_ = false, add_prefix_space_ = false;
  std::vector<int32_t> prefix_ids_, suffix_ids_;

  bool byte_level_decoder_ = false;
  std::unique_ptr<DecoderChain> decoder_chain_;  // any other decoder seqpar supports
  std::string decoder_error_;
  std::vector<std::string> decoded_;  // [vocab_size] bytes of each id
  std::vector<uint8_t> known_, special_;  // [vocab_size]
  int64_t vocab_size_ = 0;
  std::string largest_id_source_;  // the vocabulary entry or added token with the largest id
};

}  // namespace

std::shared_ptr<const Tokenizer> load_hf_tokenizer(const std::string& path) {
  const std::string text = read_input_file(path, kTokenizerInput);
  check_json_depth(text, fmt::format("tokenizer '{}'", path));
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("tokenizer '{}': not valid JSON ({}); a SentencePiece model must be named *.model",
                                 path, e.what()));
  }
  return std::make_shared<HfBpeTokenizer>(path, root);
}

// vocab.json + merges.txt -> the tokenizer.json that HF's GPT2Tokenizer builds from them (BPE with
// no unk, ByteLevel pre-tokenizer: GPT-2 regex, no prefix space; ByteLevel decoder), so both
// spellings of GPT-2 share one BPE.
std::shared_ptr<const Tokenizer> load_gpt2_files(const std::string& vocab_path, const std::string& merges_path) {
  const std::string vocab_text = read_input_file(vocab_path, kTokenizerInput);
  check_json_depth(vocab_text, fmt::format("--vocab-file '{}'", vocab_path));
  json vocab;
  try {
    vocab = json::parse(vocab_text);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("--vocab-file '{}': not valid JSON ({})", vocab_path, e.what()));
  }
  SEQPAR_INPUT_CHECK(vocab.is_object(), "--vocab-file '{}': must be a JSON object {{token: id}} (GPT-2's vocab.json)",
                     vocab_path);
  // merges.txt: "#version: ..." first (tokenizers' BPE skips it), then one merge a line, its rank
  // the line's order; blank lines (the file's last newline) carry nothing.
  const std::string merges_text = read_input_file(merges_path, kTokenizerInput);
  json merges = json::array();
  size_t line_no = 0;
  for (size_t at = 0; at < merges_text.size();) {
    size_t end = merges_text.find('\n', at);
    if (end == std::string::npos) end = merges_text.size();
    std::string line = merges_text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    SEQPAR_INPUT_CHECK(
        sp != std::string::npos && sp > 0 && sp + 1 < line.size() && line.find(' ', sp + 1) == std::string::npos,
        "--merge-file '{}':{}: '{}' must be two tokens separated by one space (GPT-2's merges.txt)", merges_path,
        line_no, line);
    merges.push_back(std::move(line));
  }
  json root = {{"model", {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}}},
               {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
               {"decoder", {{"type", "ByteLevel"}}}};
  constexpr const char* kEndOfText = "<|endoftext|>";  // HF's unk/bos/eos, Megatron's eod
  if (root["model"]["vocab"].contains(kEndOfText))
    root["added_tokens"] = json::array({{{"id", root["model"]["vocab"][kEndOfText]},
                                         {"content", kEndOfText},
                                         {"special", true},
                                         {"normalized", false}}});
  return std::make_shared<HfBpeTokenizer>(vocab_path + " + " + merges_path, root);
}

}  // namespace seqpar::tokenizer_detail
