// The lexer and parser of data/jinja.h: jinja2 3.1's lexer rules (lexer.py) with transformers'
// settings (trim_blocks, lstrip_blocks, keep_trailing_newline off, newlines "\n"), and its parser
// (parser.py) for the subset, with the same operator precedence.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <set>

#include "core/error.h"
#include "data/jinja.h"
#include "data/jinja_ast.h"
#include "io/tokenizer.h"

namespace seqpar::jinja {

namespace {

// ---- tokens ------------------------------------------------------------------------------

enum class T { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Tok {
  T type;
  std::string text;  // data, name, operator, string value (unescaped)
  Value num;         // integer / float literal
  int line = 0, col = 0;
};

// jinja2 splits the source on \r\n, \r and \n, joins the lines with \n, and (keep_trailing_newline
// off) drops one line break at the very end.
std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Decodes the code point at s[i] (the text was validated as UTF-8); *len = its byte count.
char32_t cp_at(const std::string& s, size_t i, size_t* len) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    *len = 1;
    return c;
  }
  const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  char32_t v = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < n && i + k < s.size(); ++k) v = (v << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *len = n;
  return v;
}

// Python's \s* (Unicode whitespace) from i; returns the end.
size_t skip_ws(const std::string& s, size_t i) {
  while (i < s.size()) {
    size_t len = 0;
    if (!py_isspace(cp_at(s, i, &len))) break;
    i += len;
  }
  return i;
}

bool all_ws(const std::string& s, size_t from) { return from < s.size() && skip_ws(s, from) == s.size(); }

class Lexer {
 public:
  Lexer(std::string src, const std::string& name) : s_(std::move(src)), name_(name) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < s_.size(); ++i)
      if (s_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Tok> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      size_t open = pos;
      while (true) {
        open = s_.find('{', open);
        if (open == std::string::npos || open + 1 >= s_.size()) {
          open = std::string::npos;
          break;
        }
        const char k = s_[open + 1];
        if (k == '{' || k == '%' || k == '#') break;
        ++open;
      }
      if (open == std::string::npos) {
        push(T::kData, s_.substr(pos), pos);
        break;
      }
      std::string text = s_.substr(pos, open - pos);
      const char kind = s_[open + 1];
      size_t j = open + 2;
      char sign = 0;
      if (j < s_.size() && (s_[j] == '-' || s_[j] == '+')) sign = s_[j++];
      if (kind == '%') check_not_raw(j, open);
      // Whitespace control before the tag: '-' strips all whitespace; lstrip_blocks strips the
      // spaces and tabs between a line start and a block or comment tag (not '{{', not '+').
      if (sign == '-') {
        text = py_strip(text, false, true);
      } else if (sign != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && all_ws(text, l_pos)) text.resize(l_pos);
      }
      if (!text.empty()) push(T::kData, text, pos);
      if (kind == '#') {
        pos = comment_end(j, open, &line_starting);
        continue;
      }
      push(kind == '{' ? T::kVarBegin : T::kBlockBegin, "", open);
      pos = tag(kind == '{', j, open, &line_starting);
    }
    push(T::kEof, "", s_.size());
    return std::move(toks_);
  }

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    const auto [line, col] = where(at);
    throw InputError(fmt::format("chat template {}:{}:{}: {}", name_, line, col, what));
  }

 private:
  std::pair<int, int> where(size_t at) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return {static_cast<int>(line), static_cast<int>(at - line_starts_[line - 1] + 1)};
  }

  void push(T type, std::string text, size_t at, Value num = {}) {
    const auto [line, col] = where(at);
    toks_.push_back(Tok{type, std::move(text), std::move(num), line, col});
  }

  void check_not_raw(size_t j, size_t open) const {
    size_t k = skip_ws(s_, j);
    if (s_.compare(k, 3, "raw") == 0 && (k + 3 >= s_.size() || !isalnum(static_cast<unsigned char>(s_[k + 3]))))
      fail(open, "the 'raw' tag is not supported by seqpar's chat template interpreter");
  }

  // After a "{#": the comment's end (+#}, -#} eating the whitespace after it, or #} eating one
  // newline, trim_blocks); returns the position after it.
  size_t comment_end(size_t j, size_t open, bool* line_starting) {
    for (size_t k = j; k + 1 < s_.size(); ++k) {
      if (s_[k] == '+' && s_.compare(k + 1, 2, "#}") == 0) {
        *line_starting = false;
        return k + 3;
      }
      if (s_[k] == '-' && s_.compare(k + 1, 2, "#}") == 0) {
        const size_t e = skip_ws(s_, k + 3);
        *line_starting = e > k + 3 && s_[e - 1] == '\n';
        return e;
      }
      if (s_.compare(k, 2, "#}") == 0) {
        size_t e = k + 2;
        if (e < s_.size() && s_[e] == '\n') ++e;
        *line_starting = s_[e - 1] == '\n';
        return e;
      }
    }
    fail(open, "missing end of comment tag '#}'");
  }

  // The end of a {{ }} or {% %} tag at i (only when brackets are balanced), or npos.
  size_t tag_end_at(bool var, size_t i, bool* line_starting) const {
    const char* close = var ? "}}" : "%}";
    if (!var && s_[i] == '+' && s_.compare(i + 1, 2, close) == 0) {
      *line_starting = false;
      return i + 3;
    }
    if (s_[i] == '-' && s_.compare(i + 1, 2, close) == 0) {
      const size_t e = skip_ws(s_, i + 3);
      *line_starting = e > i + 3 && s_[e - 1] == '\n';
      return e;
    }
    if (s_.compare(i, 2, close) == 0) {
      size_t e = i + 2;
      if (!var && e < s_.size() && s_[e] == '\n') ++e;  // trim_blocks
      *line_starting = s_[e - 1] == '\n';
      return e;
    }
    return std::string::npos;
  }

  size_t tag(bool var, size_t i, size_t open, bool* line_starting) {
    std::vector<char> balance;
    while (true) {
      if (i >= s_.size())
        fail(open, fmt::format("unexpected end of template: the tag is not closed with '{}'", var ? "}}" : "%}"));
      if (balance.empty()) {
        const size_t e = tag_end_at(var, i, line_starting);
        if (e != std::string::npos) {
          push(var ? T::kVarEnd : T::kBlockEnd, "", i);
          return e;
        }
      }
      size_t len = 0;
      const char32_t c = cp_at(s_, i, &len);
      if (py_isspace(c)) {
        i += len;
        continue;
      }
      if (isdigit(static_cast<unsigned char>(s_[i]))) {
        i = number(i);
        continue;
      }
      if (isalpha(static_cast<unsigned char>(s_[i])) || s_[i] == '_') {
        size_t e = i;
        while (e < s_.size() && (isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
        push(T::kName, s_.substr(i, e - i), i);
        i = e;
        continue;
      }
      if (c >= 0x80) fail(i, "a name or operator may not contain non-ASCII characters here");
      if (s_[i] == '\'' || s_[i] == '"') {
        i = string(i);
        continue;
      }
      static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                   "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
      bool matched = false;
      for (const char* op : kOps) {
        const size_t n = std::char_traits<char>::length(op);
        if (s_.compare(i, n, op) != 0) continue;
        const std::string o(op);
        if (o == "{" || o == "(" || o == "[") balance.push_back(o == "{" ? '}' : o == "(" ? ')' : ']');
        if (o == "}" || o == ")" || o == "]") {
          if (balance.empty()) fail(i, fmt::format("unexpected '{}'", o));
          if (balance.back() != o[0]) fail(i, fmt::format("unexpected '{}', expected '{}'", o, balance.back()));
          balance.pop_back();
        }
        push(T::kOp, o, i);
        i += n;
        matched = true;
        break;
      }
      if (!matched) fail(i, fmt::format("unexpected character '{}'", s_[i]));
    }
  }

  // An integer (decimal, 0b, 0o, 0x, with '_' separators) or a float (digits with a fraction
  // and/or an exponent), as jinja2's integer_re and float_re.
  size_t number(size_t i) {
    auto digits = [&](size_t k, auto is_digit) {
      while (k < s_.size() && (is_digit(s_[k]) || (s_[k] == '_' && k + 1 < s_.size() && is_digit(s_[k + 1])))) ++k;
      return k;
    };
    auto dec = [](char c) { return c >= '0' && c <= '9'; };
    if (s_[i] == '0' && i + 1 < s_.size() && strchr("bBoOxX", s_[i + 1]) && s_[i + 1] != 0) {
      const char b = static_cast<char>(tolower(s_[i + 1]));
      const int base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
      auto is_d = [base](char c) {
        return base == 2   ? (c == '0' || c == '1')
               : base == 8 ? (c >= '0' && c <= '7')
                           : isxdigit(static_cast<unsigned char>(c)) != 0;
      };
      size_t k = i + 2;
      if (k < s_.size() && s_[k] == '_') ++k;
      const size_t e = digits(k, is_d);
      std::string d = s_.substr(i + 2, e - i - 2);
      d.erase(std::remove(d.begin(), d.end(), '_'), d.end());
      int64_t v = 0;
      const auto r = std::from_chars(d.data(), d.data() + d.size(), v, base);
      if (d.empty() || r.ec != std::errc()) fail(i, "integer literal out of range or malformed");
      push(T::kInt, "", i, Value::integer(v));
      return e;
    }
    size_t e = digits(i, dec);
    bool is_float = false;
    if (e + 1 < s_.size() && s_[e] == '.' && dec(s_[e + 1])) {
      e = digits(e + 1, dec);
      is_float = true;
    }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t k = e + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && dec(s_[k])) {
        e = digits(k, dec);
        is_float = true;
      }
    }
    std::string d = s_.substr(i, e - i);
    d.erase(std::remove(d.begin(), d.end(), '_'), d.end());
    if (is_float) {
      push(T::kFloat, "", i, Value::number(std::strtod(d.c_str(), nullptr)));
    } else {
      int64_t v = 0;
      const auto r = std::from_chars(d.data(), d.data() + d.size(), v);
      if (r.ec != std::errc()) fail(i, "integer literal out of the 64-bit range");
      push(T::kInt, "", i, Value::integer(v));
    }
    return e;
  }

  // A string literal: its value after Python's escapes (jinja2 decodes it with unicode-escape).
  size_t string(size_t i) {
    const char q = s_[i];
    std::u32string out;
    size_t k = i + 1;
    while (true) {
      if (k >= s_.size()) fail(i, "unterminated string literal");
      size_t len = 0;
      const char32_t c = cp_at(s_, k, &len);
      if (c == static_cast<char32_t>(q)) break;
      if (c != '\\') {
        out += c;
        k += len;
        continue;
      }
      if (k + 1 >= s_.size()) fail(i, "unterminated string literal");
      const char e = s_[k + 1];
      k += 2;
      auto hex = [&](int n) {
        if (k + static_cast<size_t>(n) > s_.size()) fail(i, "truncated \\x, \\u or \\U escape in a string literal");
        uint32_t v = 0;
        const auto r = std::from_chars(s_.data() + k, s_.data() + k + n, v, 16);
        if (r.ptr != s_.data() + k + n) fail(i, "malformed \\x, \\u or \\U escape in a string literal");
        k += static_cast<size_t>(n);
        return static_cast<char32_t>(v);
      };
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
        case '\'':
        case '"':
          out += static_cast<char32_t>(e);
          break;
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
          out += hex(2);
          break;
        case 'u':
          out += hex(4);
          break;
        case 'U':
          out += hex(8);
          break;
        case 'N':
          fail(i, "\\N{...} escapes in string literals are not supported");
        default:
          if (e >= '0' && e <= '7') {  // up to three octal digits
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int n = 0; n < 2 && k < s_.size() && s_[k] >= '0' && s_[k] <= '7'; ++n) v = v * 8 + (s_[k++] - '0');
            out += static_cast<char32_t>(v);
          } else {  // Python keeps an unknown escape as it is
            out += '\\';
            k -= 1;
          }
      }
    }
    push(T::kString, to_utf8(out), i);
    return k + 1;
  }

  std::string s_;
  const std::string& name_;
  std::vector<size_t> line_starts_;
  std::vector<Tok> toks_;
};

// ---- the parser --------------------------------------------------------------------------

const std::set<std::string, std::less<>> kUnsupportedTags = {
    "block", "extends", "include", "import", "from", "with", "autoescape", "filter", "call", "print", "do", "raw"};
const std::set<std::string, std::less<>> kUnsupportedGlobals = {"cycler", "joiner",  "lipsum", "self",
                                                                "caller", "varargs", "kwargs"};

class Parser {
 public:
  Parser(std::vector<Tok> toks, const std::string& name) : t_(std::move(toks)), name_(name) {}

  std::unique_ptr<Root> run() {
    auto root = std::make_unique<Root>();
    std::string end;
    root->body = subparse({}, &end);
    return root;
  }

  bool saw_generation() const { return saw_generation_; }

 private:
  const Tok& cur() const { return t_[i_]; }
  const Tok& peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  const Tok& next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool is_op(const char* op) const { return cur().type == T::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == T::kName && cur().text == n; }

  [[noreturn]] void fail(const Tok& at, const std::string& what) const {
    throw InputError(fmt::format("chat template {}:{}:{}: {}", name_, at.line, at.col, what));
  }
  static std::string describe(const Tok& t) {
    switch (t.type) {
      case T::kName:
        return "'" + t.text + "'";
      case T::kOp:
        return "'" + t.text + "'";
      case T::kString:
        return "a string";
      case T::kInt:
      case T::kFloat:
        return "a number";
      case T::kVarEnd:
        return "the end of the print statement '}}'";
      case T::kBlockEnd:
        return "the end of the statement '%}'";
      case T::kEof:
        return "the end of the template";
      default:
        return "template text";
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(cur(), fmt::format("expected '{}', got {}", op, describe(cur())));
    next();
  }
  void expect_block_end() {
    if (cur().type != T::kBlockEnd)
      fail(cur(), fmt::format("expected the end of the statement '%}}', got {}", describe(cur())));
    next();
  }
  std::string expect_name(const char* what) {
    if (cur().type != T::kName) fail(cur(), fmt::format("expected {}, got {}", what, describe(cur())));
    return next().text;
  }
  template <typename N>
  std::unique_ptr<N> node(const Tok& at) {
    auto n = std::make_unique<N>();
    n->line = at.line;
    n->col = at.col;
    return n;
  }

  // Statements up to a {% name %} in `ends` (the stream is left at that name; *end = it), or
  // the end of the template when `ends` is empty.
  Body subparse(const std::set<std::string, std::less<>>& ends, std::string* end) {
    Body body;
    while (true) {
      const Tok& t = cur();
      if (t.type == T::kEof) {
        if (!ends.empty()) {
          std::string list;
          for (const auto& e : ends) list += (list.empty() ? "'" : " or '") + e + "'";
          fail(t, fmt::format("unexpected end of template: expected {} to close the block", list));
        }
        return body;
      }
      if (t.type == T::kData) {
        auto n = node<TextStmt>(t);
        n->text = t.text;
        body.push_back(std::move(n));
        next();
      } else if (t.type == T::kVarBegin) {
        next();
        auto n = node<PrintStmt>(t);
        n->expr = parse_tuple(true, {});
        if (cur().type != T::kVarEnd) fail(cur(), fmt::format("expected '}}}}', got {}", describe(cur())));
        next();
        body.push_back(std::move(n));
      } else if (t.type == T::kBlockBegin) {
        next();
        if (cur().type == T::kName && ends.count(cur().text)) {
          *end = cur().text;
          return body;
        }
        body.push_back(statement());
      } else {
        fail(t, fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  Body block_body(const std::set<std::string, std::less<>>& ends, std::string* end) {
    Body b = subparse(ends, end);
    next();  // the end tag's name
    return b;
  }

  StmtPtr statement() {
    const Tok& t = cur();
    if (t.type != T::kName) fail(t, fmt::format("expected a statement name after '{{%', got {}", describe(t)));
    const std::string& n = t.text;
    if (n == "for") return parse_for();
    if (n == "if") return parse_if();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "generation") {
      const Tok& at = next();
      if (in_macro_ > 0) fail(at, "a {% generation %} block inside a macro is not supported");
      expect_block_end();
      auto g = node<GenerationStmt>(at);
      std::string end;
      g->body = block_body({"endgeneration"}, &end);
      expect_block_end();
      saw_generation_ = true;
      return g;
    }
    if (n == "break" || n == "continue") {
      const Tok& at = next();
      if (loop_depth_ == 0) fail(at, fmt::format("'{}' outside of a for loop", n));
      auto c = node<LoopControlStmt>(at);
      c->flow = n == "break" ? Flow::kBreak : Flow::kContinue;
      expect_block_end();
      return c;
    }
    if (kUnsupportedTags.count(n))
      fail(t, fmt::format("the '{}' tag is not supported by seqpar's chat template interpreter (supported: for, if, "
                          "set, macro, generation, break, continue)",
                          n));
    fail(t, fmt::format("unknown tag '{}'", n));
  }

  // Names (a, b), or ns.attr when `ns_attr`.
  Target assign_target(bool ns_attr, const char* before) {
    Target tg;
    const bool paren = is_op("(");
    if (paren) next();
    tg.names.push_back(expect_name("a variable name"));
    if (ns_attr && !paren && is_op(".")) {
      next();
      tg.attr = expect_name("an attribute name");
      if (tg.attr[0] == '_') fail(cur(), "attribute names starting with '_' are not allowed (the sandbox)");
      return tg;
    }
    while (is_op(",")) {
      next();
      tg.unpack = true;
      if (paren && is_op(")")) break;
      if (!paren && cur().type == T::kName && cur().text == before) break;
      tg.names.push_back(expect_name("a variable name"));
    }
    if (paren) {
      tg.unpack = true;
      expect_op(")");
    }
    for (const auto& name : tg.names)
      if (name == "true" || name == "false" || name == "none" || name == "True" || name == "False" || name == "None")
        fail(cur(), fmt::format("cannot assign to '{}'", name));
    return tg;
  }

  StmtPtr parse_for() {
    const Tok& at = next();
    auto f = node<ForStmt>(at);
    f->target = assign_target(false, "in");
    if (!is_name("in")) fail(cur(), fmt::format("expected 'in' in the for loop, got {}", describe(cur())));
    next();
    f->iter = parse_tuple(false, {"recursive"});
    if (is_name("if")) {
      next();
      f->filter = parse_expression(true);
    }
    if (is_name("recursive")) fail(cur(), "recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    std::string end;
    f->body = block_body({"endfor", "else"}, &end);
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      f->otherwise = block_body({"endfor"}, &end);
    }
    expect_block_end();
    return f;
  }

  StmtPtr parse_if() {
    const Tok& at = next();
    auto s = node<IfStmt>(at);
    std::string end = "if";
    while (end == "if" || end == "elif") {
      ExprPtr cond = parse_tuple(false, {});
      expect_block_end();
      Body b = block_body({"elif", "else", "endif"}, &end);
      s->branches.emplace_back(std::move(cond), std::move(b));
    }
    if (end == "else") {
      expect_block_end();
      s->otherwise = block_body({"endif"}, &end);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    const Tok& at = next();
    Target tg = assign_target(true, "=");
    if (is_op("=")) {
      next();
      auto s = node<SetStmt>(at);
      s->target = std::move(tg);
      s->value = parse_tuple(true, {});
      expect_block_end();
      return s;
    }
    auto s = node<SetBlockStmt>(at);
    s->target = std::move(tg);
    if (s->target.unpack) fail(at, "a {% set %} block assigns one name");
    while (is_op("|")) s->filters.push_back(parse_filter(nullptr));
    expect_block_end();
    std::string end;
    s->body = block_body({"endset"}, &end);
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro() {
    const Tok& at = next();
    auto m = node<MacroStmt>(at);
    m->name = expect_name("the macro's name");
    expect_op("(");
    while (!is_op(")")) {
      if (!m->params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string p = expect_name("a parameter name");
      ExprPtr def;
      if (is_op("=")) {
        next();
        def = parse_expression(true);
      } else if (!m->params.empty() && m->params.back().second) {
        fail(cur(), fmt::format("the parameter '{}' without a default follows one with a default", p));
      }
      m->params.emplace_back(std::move(p), std::move(def));
    }
    next();
    expect_block_end();
    ++in_macro_;
    const int saved_loop = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    m->body = block_body({"endmacro"}, &end);
    loop_depth_ = saved_loop;
    --in_macro_;
    if (cur().type == T::kName && cur().text == m->name) next();  // {% endmacro name %}
    expect_block_end();
    return m;
  }

  // ---- expressions ---------------------------------------------------------------------

  bool tuple_end(const std::set<std::string, std::less<>>& extra) const {
    const Tok& t = cur();
    if (t.type == T::kVarEnd || t.type == T::kBlockEnd || t.type == T::kEof) return true;
    if (t.type == T::kOp && t.text == ")") return true;
    return t.type == T::kName && extra.count(t.text);
  }

  ExprPtr parse_tuple(bool with_condexpr, const std::set<std::string, std::less<>>& extra,
                      bool explicit_parens = false) {
    const Tok& at = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (tuple_end(extra)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail(cur(), fmt::format("expected an expression, got {}", describe(cur())));
    }
    auto l = node<ListExpr>(at);
    l->items = std::move(items);
    l->tuple = true;
    return l;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    const Tok& at = cur();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      next();
      auto c = node<CondExpr>(at);
      c->then = std::move(e);
      c->cond = parse_or();
      if (is_name("else")) {
        next();
        c->otherwise = parse_condexpr();
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const Tok& at, std::string op, ExprPtr l, ExprPtr r) {
    auto b = node<BinaryExpr>(at);
    b->op = std::move(op);
    b->left = std::move(l);
    b->right = std::move(r);
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      const Tok& at = next();
      l = binary(at, "or", std::move(l), parse_and());
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      const Tok& at = next();
      l = binary(at, "and", std::move(l), parse_not());
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      const Tok& at = next();
      auto u = node<UnaryExpr>(at);
      u->op = 'n';
      u->operand = parse_not();
      return u;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const Tok& at = cur();
    ExprPtr first = parse_math1();
    std::vector<std::pair<std::string, ExprPtr>> rest;
    while (true) {
      std::string op;
      if (cur().type == T::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                   cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == T::kName && peek().text == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      rest.emplace_back(op, parse_math1());
    }
    if (rest.empty()) return first;
    auto c = node<CompareExpr>(at);
    c->first = std::move(first);
    c->rest = std::move(rest);
    return c;
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Tok& at = next();
      l = binary(at, at.text, std::move(l), parse_concat());
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      const Tok& at = next();
      l = binary(at, "~", std::move(l), parse_math2());
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Tok& at = next();
      l = binary(at, at.text, std::move(l), parse_pow());
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      const Tok& at = next();
      l = binary(at, "**", std::move(l), parse_unary(true));
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    const Tok& at = cur();
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      next();
      auto u = node<UnaryExpr>(at);
      u->op = at.text[0];
      u->operand = parse_unary(false);
      e = std::move(u);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Tok& t = cur();
    if (t.type == T::kName) {
      next();
      auto lit = node<Literal>(t);
      if (t.text == "true" || t.text == "True") {
        lit->value = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        lit->value = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        lit->value = Value::none();
      } else {
        if (kUnsupportedGlobals.count(t.text))
          fail(t, fmt::format("'{}' is not supported by seqpar's chat template interpreter", t.text));
        auto n = node<NameExpr>(t);
        n->name = t.text;
        return n;
      }
      return lit;
    }
    if (t.type == T::kString) {
      std::string s;
      while (cur().type == T::kString) s += next().text;  // adjacent literals concatenate
      auto lit = node<Literal>(t);
      lit->value = Value::string(std::move(s));
      return lit;
    }
    if (t.type == T::kInt || t.type == T::kFloat) {
      next();
      auto lit = node<Literal>(t);
      lit->value = t.num;
      return lit;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto l = node<ListExpr>(t);
      while (!is_op("]")) {
        if (!l->items.empty()) expect_op(",");
        if (is_op("]")) break;
        l->items.push_back(parse_expression(true));
      }
      next();
      return l;
    }
    if (is_op("{")) {
      next();
      auto d = node<DictExpr>(t);
      while (!is_op("}")) {
        if (!d->items.empty()) expect_op(",");
        if (is_op("}")) break;
        ExprPtr k = parse_expression(true);
        expect_op(":");
        d->items.emplace_back(std::move(k), parse_expression(true));
      }
      next();
      return d;
    }
    fail(t, fmt::format("unexpected {}", describe(t)));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const Tok& at = next();
    if (at.text == ".") {
      const Tok& t = cur();
      if (t.type == T::kName) {
        next();
        if (t.text[0] == '_') fail(t, "attribute names starting with '_' are not allowed (the sandbox)");
        auto a = node<AttrExpr>(at);
        a->obj = std::move(obj);
        a->name = t.text;
        return a;
      }
      if (t.type == T::kInt) {
        next();
        auto it = node<ItemExpr>(at);
        it->obj = std::move(obj);
        auto lit = node<Literal>(t);
        lit->value = t.num;
        it->index = std::move(lit);
        return it;
      }
      fail(t, fmt::format("expected an attribute name after '.', got {}", describe(t)));
    }
    // '[': an index, a tuple of indexes, or a slice
    std::vector<ExprPtr> parts;
    std::unique_ptr<SliceExpr> slice;
    while (!is_op("]")) {
      if (!parts.empty() || slice) {
        if (slice) fail(cur(), "a slice may not be part of a tuple index");
        expect_op(",");
      }
      ExprPtr start;
      if (!is_op(":")) {
        start = parse_expression(true);
        if (!is_op(":")) {
          parts.push_back(std::move(start));
          continue;
        }
      }
      slice = node<SliceExpr>(at);
      slice->start = std::move(start);
      next();  // ':'
      if (!is_op("]") && !is_op(",") && !is_op(":")) slice->stop = parse_expression(true);
      if (is_op(":")) {
        next();
        if (!is_op("]") && !is_op(",")) slice->step = parse_expression(true);
      }
      if (!parts.empty()) fail(at, "a slice may not be part of a tuple index");
    }
    next();  // ']'
    if (slice) {
      slice->obj = std::move(obj);
      return slice;
    }
    if (parts.empty()) fail(at, "expected an index inside '[ ]'");
    auto it = node<ItemExpr>(at);
    it->obj = std::move(obj);
    if (parts.size() == 1) {
      it->index = std::move(parts[0]);
    } else {
      auto tup = node<ListExpr>(at);
      tup->items = std::move(parts);
      tup->tuple = true;
      it->index = std::move(tup);
    }
    return it;
  }

  std::vector<Arg> call_args() {
    expect_op("(");
    std::vector<Arg> args;
    bool kw = false;
    while (!is_op(")")) {
      if (!args.empty()) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail(cur(), "*args and **kwargs in calls are not supported");
      Arg a;
      if (cur().type == T::kName && peek().type == T::kOp && peek().text == "=") {
        a.name = next().text;
        next();
        kw = true;
      } else if (kw) {
        fail(cur(), "a positional argument follows a keyword argument");
      }
      a.value = parse_expression(true);
      args.push_back(std::move(a));
    }
    next();
    return args;
  }

  ExprPtr parse_call(ExprPtr callee) {
    const Tok& at = cur();
    if (auto* attr = dynamic_cast<AttrExpr*>(callee.get())) {
      if (mutating_method(attr->name))
        fail(at, fmt::format("'{}()' changes its object, which transformers' immutable sandbox refuses", attr->name));
      if (!known_method(attr->name))
        fail(at, fmt::format("the method '{}()' is not supported by seqpar's chat template interpreter", attr->name));
    }
    auto c = node<CallExpr>(at);
    c->callee = std::move(callee);
    c->args = call_args();
    return c;
  }

  std::string dotted_name(const char* what) {
    std::string n = expect_name(what);
    while (is_op(".")) {
      next();
      n += '.';
      n += expect_name(what);
    }
    return n;
  }

  std::unique_ptr<FilterExpr> parse_filter(ExprPtr value) {
    next();  // '|'
    const Tok& at = cur();
    auto f = node<FilterExpr>(at);
    f->value = std::move(value);
    f->name = dotted_name("a filter name");
    if (!known_filter(f->name))
      fail(at, fmt::format("the filter '{}' is not supported by seqpar's chat template interpreter", f->name));
    if (is_op("(")) f->args = call_args();
    return f;
  }

  ExprPtr parse_test(ExprPtr value) {
    next();  // 'is'
    auto t = node<TestExpr>(cur());
    if (is_name("not")) {
      next();
      t->negated = true;
    }
    const Tok& at = cur();
    t->name = dotted_name("a test name");
    if (!known_test(t->name))
      fail(at, fmt::format("the test '{}' is not supported by seqpar's chat template interpreter", t->name));
    t->value = std::move(value);
    if (is_op("(")) {
      t->args = call_args();
    } else if ((cur().type == T::kName || cur().type == T::kString || cur().type == T::kInt ||
                cur().type == T::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail(cur(), "you cannot chain multiple tests with 'is'");
      Arg a;
      a.value = parse_postfix(parse_primary());
      t->args.push_back(std::move(a));
    }
    return t;
  }

  std::vector<Tok> t_;
  size_t i_ = 0;
  const std::string& name_;
  int loop_depth_ = 0, in_macro_ = 0;
  bool saw_generation_ = false;
};

}  // namespace

Template::Template(std::string_view source, std::string name) : name_(std::move(name)) {
  try {
    tokenizer_detail::validate_utf8(source);
  } catch (const InputError& e) {
    throw InputError(fmt::format("chat template {}: {}", name_, e.what()));
  }
  Lexer lexer(normalize_newlines(source), name_);
  Parser parser(lexer.run(), name_);
  root_ = parser.run();
  has_generation_ = parser.saw_generation();
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;

}  // namespace seqpar::jinja
