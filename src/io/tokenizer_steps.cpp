// tokenizer.json's normalizers and decoders (io/tokenizer_steps.h), after HF `tokenizers`'
// normalizers/ and decoders/.
#include "io/tokenizer_steps.h"

#include "core/error.h"
#include "io/json_describe.h"

namespace seqpar::tokenizer_detail {

using nlohmann::json;

namespace {

std::string string_field(const json& s, const char* field, const std::string& where, const std::string& at) {
  SEQPAR_INPUT_CHECK(s.contains(field) && s[field].is_string(), "{}: {} {} needs a string '{}', got {}", where, at,
                     s.value("type", "?"), field, s.contains(field) ? short_json(s[field]) : "nothing");
  return s[field].get<std::string>();
}

// Replace's pattern: {"String": "..."}; a {"Regex": ...} pattern is not supported.
std::string replace_pattern(const json& s, const std::string& where, const std::string& at) {
  const json& p = s.contains("pattern") ? s["pattern"] : json();
  SEQPAR_INPUT_CHECK(p.is_object() && p.contains("String") && p["String"].is_string(),
                     "{}: {} Replace with pattern {} is not supported (only a String pattern)", where, at,
                     short_json(p));
  const std::string from = p["String"].get<std::string>();
  SEQPAR_INPUT_CHECK(!from.empty(), "{}: {} Replace has an empty pattern", where, at);
  return from;
}

// The one character of a step's field (Strip's content, Metaspace's replacement).
std::string one_char(const json& s, const char* field, const std::string& where, const std::string& at) {
  const std::string v = string_field(s, field, where, at);
  std::vector<char32_t> cps;
  std::vector<size_t> offs;
  decode_utf8(v, cps, offs);
  SEQPAR_INPUT_CHECK(cps.size() == 1, "{}: {}.{} = '{}' must be one character", where, at, field, v);
  return v;
}

}  // namespace

AlignedText identity_aligned(std::string_view text) {
  AlignedText t{std::string(text), std::vector<size_t>(text.size() + 1)};
  for (size_t k = 0; k <= text.size(); ++k) t.origin[k] = k;
  return t;
}

void replace_aligned(AlignedText& t, std::string_view from, std::string_view to) {
  if (t.text.find(from) == std::string::npos) return;
  AlignedText r;
  r.text.reserve(t.text.size());
  r.origin.reserve(t.origin.size());
  for (size_t i = 0; i < t.text.size();) {
    if (t.text.compare(i, from.size(), from) == 0) {
      r.text.append(to);
      r.origin.insert(r.origin.end(), to.size(), t.origin[i]);
      i += from.size();
    } else {
      r.text.push_back(t.text[i]);
      r.origin.push_back(t.origin[i]);
      ++i;
    }
  }
  r.origin.push_back(t.origin.back());
  t = std::move(r);
}

void prepend_aligned(AlignedText& t, std::string_view s) {
  if (t.text.empty()) return;
  t.text.insert(0, s);
  t.origin.insert(t.origin.begin(), s.size(), t.origin.front());
}

// ---- Normalizer ------------------------------------------------------------------------------

Normalizer::Normalizer(const json& spec, const std::string& where) { add(spec, where, "normalizer"); }

void Normalizer::add(const json& s, const std::string& where, const std::string& at) {
  SEQPAR_INPUT_CHECK(s.is_object(), "{}: {} must be an object, got {}", where, at, short_json(s));
  const std::string type = s.value("type", "?");
  if (type == "Sequence") {
    SEQPAR_INPUT_CHECK(s.contains("normalizers") && s["normalizers"].is_array(),
                       "{}: {} Sequence needs a 'normalizers' array", where, at);
    for (size_t i = 0; i < s["normalizers"].size(); ++i)
      add(s["normalizers"][i], where, fmt::format("{}.normalizers[{}]", at, i));
    return;
  }
  Step st{};
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    st.kind = Step::Kind::kUnicode;
    st.form = type == "NFC"    ? NormalForm::kNFC
              : type == "NFD"  ? NormalForm::kNFD
              : type == "NFKC" ? NormalForm::kNFKC
                               : NormalForm::kNFKD;
  } else if (type == "Prepend") {
    st.kind = Step::Kind::kPrepend;
    st.a = string_field(s, "prepend", where, at);
  } else if (type == "Replace") {
    st.kind = Step::Kind::kReplace;
    st.a = replace_pattern(s, where, at);
    st.b = string_field(s, "content", where, at);
  } else {
    throw InputError(
        fmt::format("{}: {} type '{}' is not supported (supported: NFC, NFD, NFKC, NFKD, Prepend, "
                    "Replace with a String pattern, Sequence of those)",
                    where, at, type));
  }
  steps_.push_back(std::move(st));
}

AlignedText Normalizer::apply(std::string_view text) const {
  AlignedText t = identity_aligned(text);
  std::string out;
  std::vector<size_t> origin;
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Step::Kind::kUnicode: {
        normalize_utf8(t.text, s.form, out, origin);
        for (size_t& o : origin) o = t.origin[o];  // through the earlier steps, to the original
        t.text.swap(out);
        t.origin.swap(origin);
        break;
      }
      case Step::Kind::kPrepend:
        prepend_aligned(t, s.a);
        break;
      case Step::Kind::kReplace:
        replace_aligned(t, s.a, s.b);
        break;
    }
  }
  return t;
}

bool Normalizer::keeps_ascii() const {
  for (const Step& s : steps_)
    if (s.kind != Step::Kind::kUnicode) return false;
  return true;
}

std::string Normalizer::describe() const {
  std::vector<std::string> parts;
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Step::Kind::kUnicode:
        parts.push_back(normal_form_name(s.form));
        break;
      case Step::Kind::kPrepend:
        parts.push_back(fmt::format("Prepend('{}')", s.a));
        break;
      case Step::Kind::kReplace:
        parts.push_back(fmt::format("Replace('{}' -> '{}')", s.a, s.b));
        break;
    }
  }
  if (parts.size() == 1) return parts[0];
  return fmt::format("Sequence[{}]", fmt::join(parts, ", "));
}

// ---- DecoderChain ----------------------------------------------------------------------------

DecoderChain::DecoderChain(const json& spec, const std::string& where) { add(spec, where, "decoder"); }

void DecoderChain::add(const json& s, const std::string& where, const std::string& at) {
  SEQPAR_INPUT_CHECK(s.is_object(), "{}: {} must be an object, got {}", where, at, short_json(s));
  const std::string type = s.value("type", "?");
  if (type == "Sequence") {
    SEQPAR_INPUT_CHECK(s.contains("decoders") && s["decoders"].is_array(), "{}: {} Sequence needs a 'decoders' array",
                       where, at);
    for (size_t i = 0; i < s["decoders"].size(); ++i)
      add(s["decoders"][i], where, fmt::format("{}.decoders[{}]", at, i));
    return;
  }
  Step st{};
  if (type == "Replace") {
    st.kind = Step::Kind::kReplace;
    st.a = replace_pattern(s, where, at);
    st.b = string_field(s, "content", where, at);
  } else if (type == "ByteFallback") {
    st.kind = Step::Kind::kByteFallback;
  } else if (type == "Fuse") {
    st.kind = Step::Kind::kFuse;
  } else if (type == "Strip") {
    st.kind = Step::Kind::kStrip;
    st.a = one_char(s, "content", where, at);
    auto count = [&](const char* f) -> size_t {
      SEQPAR_INPUT_CHECK(s.contains(f) && s[f].is_number_unsigned(), "{}: {}.{} must be a count, got {}", where, at, f,
                         s.contains(f) ? short_json(s[f]) : "nothing");
      return s[f].get<size_t>();
    };
    st.start = count("start");
    st.stop = count("stop");
  } else if (type == "Metaspace") {
    st.kind = Step::Kind::kMetaspace;
    st.a = one_char(s, "replacement", where, at);
    // HF: prepend_scheme defaults to "always"; add_prefix_space=false (the old spelling) means "never".
    const std::string scheme = s.contains("prepend_scheme") && s["prepend_scheme"].is_string()
                                   ? s["prepend_scheme"].get<std::string>()
                                   : (s.value("add_prefix_space", true) ? "always" : "never");
    SEQPAR_INPUT_CHECK(scheme == "always" || scheme == "first" || scheme == "never",
                       "{}: {}.prepend_scheme = '{}' must be always, first or never", where, at, scheme);
    st.prepend = scheme != "never";
  } else {
    throw InputError(
        fmt::format("{}: {} type '{}' is not supported (supported: ByteLevel alone; or Replace with a "
                    "String pattern, ByteFallback, Fuse, Strip, Metaspace and Sequence of those)",
                    where, at, type));
  }
  steps_.push_back(std::move(st));
}

namespace {

// "<0xAB>" -> 0xAB, as HF's ByteFallback reads a byte token (six bytes, two hex digits).
int fallback_byte(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  std::string r;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, from.size(), from) == 0) {
      r += to;
      i += from.size();
    } else {
      r += s[i++];
    }
  }
  return r;
}

}  // namespace

std::string DecoderChain::decode(std::vector<std::string> tokens) const {
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Step::Kind::kReplace:
        for (std::string& t : tokens) t = replace_all(t, s.a, s.b);
        break;
      case Step::Kind::kByteFallback: {
        // A run of byte tokens becomes one string of their bytes (raw, see the header).
        std::vector<std::string> out;
        std::string bytes;
        bool in_run = false;
        for (std::string& t : tokens) {
          const int b = fallback_byte(t);
          if (b >= 0) {
            bytes.push_back(static_cast<char>(b));
            in_run = true;
            continue;
          }
          if (in_run) out.push_back(std::move(bytes)), bytes.clear(), in_run = false;
          out.push_back(std::move(t));
        }
        if (in_run) out.push_back(std::move(bytes));
        tokens = std::move(out);
        break;
      }
      case Step::Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens = {std::move(all)};
        break;
      }
      case Step::Kind::kStrip:
        // Up to `start` leading and `stop` trailing copies of the character, per token.
        for (std::string& t : tokens) {
          size_t b = 0, e = t.size();
          for (size_t k = 0; k < s.start && t.compare(b, s.a.size(), s.a) == 0 && b + s.a.size() <= e; ++k)
            b += s.a.size();
          for (size_t k = 0; k < s.stop && e >= b + s.a.size() && t.compare(e - s.a.size(), s.a.size(), s.a) == 0; ++k)
            e -= s.a.size();
          t = t.substr(b, e - b);
        }
        break;
      case Step::Kind::kMetaspace:
        // Every replacement character becomes a space, but in the first token, where it is
        // dropped unless the pre-tokenizer never prepends one.
        for (size_t i = 0; i < tokens.size(); ++i)
          tokens[i] = replace_all(tokens[i], s.a, i == 0 && s.prepend ? "" : " ");
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace seqpar::tokenizer_detail
