#include "data/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "io/tokenizer.h"

namespace seqpar::jinja {

// ---- containers --------------------------------------------------------------------------

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (py_eq(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items)
    if (py_eq(k, key)) {
      v = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* Namespace::find(std::string_view name) const {
  for (const auto& [k, v] : attrs)
    if (k == name) return &v;
  return nullptr;
}

void Namespace::set(const std::string& name, Value value) {
  for (auto& [k, v] : attrs)
    if (k == name) {
      v = std::move(value);
      return;
    }
  attrs.emplace_back(name, std::move(value));
}

// ---- construction ------------------------------------------------------------------------

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::list(List items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.tuple_ = tuple;
  v.l_ = std::make_shared<const List>(std::move(items));
  return v;
}
Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.d_ = std::make_shared<const Dict>(std::move(d));
  return v;
}
Value Value::ns(std::shared_ptr<Namespace> n) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.ns_ = std::move(n);
  return v;
}
Value Value::callable(std::string name, std::function<Value(const CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return none();
    case nlohmann::ordered_json::value_t::boolean:
      return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      SEQPAR_INPUT_CHECK(u <= static_cast<uint64_t>(INT64_MAX),
                         "the integer {} is too large (seqpar's chat "
                         "templates hold 64-bit integers)",
                         u);
      return integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e));
      return list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.items.reserve(j.size());
      for (const auto& [k, e] : j.items()) d.items.emplace_back(string(k), from_json(e));
      return dict(std::move(d));
    }
    default:
      throw InputError("binary JSON values cannot be passed to a chat template");
  }
}

double Value::as_float() const {
  if (kind_ == Kind::kFloat) return f_;
  return static_cast<double>(as_int());
}

const std::string& Value::undefined_hint() const {
  static const std::string kEmpty;
  return s_ ? *s_ : kEmpty;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
      return !l_->empty();
    case Kind::kDict:
      return !d_->items.empty();
    default:
      return true;
  }
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

// ---- strings -----------------------------------------------------------------------------

std::u32string to_code_points(std::string_view s) {
  std::vector<char32_t> cps;
  std::vector<size_t> offs;
  tokenizer_detail::decode_utf8(s, cps, offs);
  return std::u32string(cps.begin(), cps.end());
}

std::string to_utf8(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) tokenizer_detail::append_utf8(out, c);
  return out;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool py_isspace(char32_t c) {
  return tokenizer_detail::char_class(c) == tokenizer_detail::CharClass::kSpace || (c >= 0x1C && c <= 0x1F);
}

std::string py_strip(std::string_view s, bool left, bool right, const std::u32string* chars) {
  const std::u32string cps = to_code_points(s);
  auto strip = [&](char32_t c) { return chars ? chars->find(c) != std::u32string::npos : py_isspace(c); };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip(cps[b])) ++b;
  if (right)
    while (e > b && strip(cps[e - 1])) --e;
  return to_utf8(std::u32string_view(cps).substr(b, e - b));
}

namespace {

void append_hex(std::string& out, const char* prefix, uint32_t v, int digits) {
  static const char* kHex = "0123456789abcdef";
  out += prefix;
  for (int i = digits - 1; i >= 0; --i) out += kHex[(v >> (4 * i)) & 0xF];
}

// Python's repr of a str. Printable is approximated by: not a C0/C1 control, not DEL, not a
// line/paragraph separator or a BOM; Python also escapes other unassigned and format code points
// (a known difference, which only shows when a template prints a list or dict of such strings).
std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : to_code_points(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && c < 0xA0) || c == 0xAD) {
      append_hex(out, "\\x", c, 2);
    } else if (c == 0x2028 || c == 0x2029 || c == 0xFEFF || (c >= 0x200B && c <= 0x200F)) {
      append_hex(out, "\\u", c, 4);
    } else {
      out += to_utf8(std::u32string(1, c));
    }
  }
  out += q;
  return out;
}

std::string json_string(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  for (char32_t c : to_code_points(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          append_hex(out, "\\u", c, 4);
        } else if (ensure_ascii && c > 0x7E) {
          if (c >= 0x10000) {  // a surrogate pair, as json.dumps writes it
            const char32_t v = c - 0x10000;
            append_hex(out, "\\u", 0xD800 + (v >> 10), 4);
            append_hex(out, "\\u", 0xDC00 + (v & 0x3FF), 4);
          } else {
            append_hex(out, "\\u", c, 4);
          }
        } else {
          out += to_utf8(std::u32string(1, c));
        }
    }
  }
  out += '"';
  return out;
}

std::string int_str(int64_t i) { return std::to_string(i); }

std::string key_json(const Value& k, const JsonStyle& st) {
  // json.dumps turns the keys that are not strings into strings (True -> "true", 1 -> "1").
  if (k.is_string()) return json_string(k.str(), st.ensure_ascii);
  if (k.is_bool()) return k.as_bool() ? "\"true\"" : "\"false\"";
  if (k.is_none()) return "\"null\"";
  if (k.is_int()) return "\"" + int_str(k.as_int()) + "\"";
  if (k.is_float()) return "\"" + float_repr(k.as_float()) + "\"";
  throw InputError(fmt::format("tojson: keys must be str, int, float, bool or None, not {}", k.type_name()));
}

void json_rec(const Value& v, const JsonStyle& st, int level, std::string& out) {
  const bool pretty = st.indent >= 0 || !st.indent_str.empty();
  const std::string ind = !st.indent_str.empty() ? st.indent_str : std::string(std::max(st.indent, 0), ' ');
  const std::string item_sep = !st.item_sep.empty() ? st.item_sep : (pretty ? "," : ", ");
  const std::string key_sep = !st.key_sep.empty() ? st.key_sep : ": ";
  auto newline = [&](int lv) {
    out += '\n';
    for (int i = 0; i < lv; ++i) out += ind;
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += int_str(v.as_int());
      return;
    case Value::Kind::kFloat: {
      const double f = v.as_float();
      out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity") : float_repr(f);
      return;
    }
    case Value::Kind::kString:
      out += json_string(v.str(), st.ensure_ascii);
      return;
    case Value::Kind::kList: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += item_sep;
        if (pretty) newline(level + 1);
        json_rec(v.items()[i], st, level + 1, out);
      }
      if (pretty) newline(level);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.dict().items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> kv;
      for (const auto& p : v.dict().items) kv.push_back(&p);
      if (st.sort_keys)
        std::stable_sort(kv.begin(), kv.end(), [](auto* a, auto* b) { return py_lt(a->first, b->first); });
      out += '{';
      for (size_t i = 0; i < kv.size(); ++i) {
        if (i) out += item_sep;
        if (pretty) newline(level + 1);
        out += key_json(kv[i]->first, st);
        out += key_sep;
        json_rec(kv[i]->second, st, level + 1, out);
      }
      if (pretty) newline(level);
      out += '}';
      return;
    }
    default:
      throw InputError(fmt::format("tojson: Object of type {} is not JSON serializable", v.type_name()));
  }
}

int compare_strings(const std::string& a, const std::string& b) {
  // UTF-8 byte order is code point order.
  return a.compare(b) < 0 ? -1 : a == b ? 0 : 1;
}

}  // namespace

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+17"
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::stoi(sci.substr(e + 1));
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  std::string out;
  if (decpt <= -4 || decpt > 16) {  // Python's repr switches to exponent notation here
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int x = decpt - 1;
    out += x < 0 ? "e-" : "e+";
    const std::string xs = std::to_string(std::abs(x));
    out += (xs.size() < 2 ? "0" : "") + xs;
  } else if (decpt <= 0) {
    out = "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out = digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  }
  return sign + out;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return v.str();
    default:
      return to_repr(v);
  }
}

std::string to_repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return int_str(v.as_int());
    case Value::Kind::kFloat:
      return float_repr(v.as_float());
    case Value::Kind::kString:
      return repr_string(v.str());
    case Value::Kind::kList: {
      std::string out = v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < v.items().size(); ++i) out += (i ? ", " : "") + to_repr(v.items()[i]);
      if (v.is_tuple() && v.items().size() == 1) out += ",";
      return out + (v.is_tuple() ? ")" : "]");
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, e] : v.dict().items) {
        out += (first ? "" : ", ") + to_repr(k) + ": " + to_repr(e);
        first = false;
      }
      return out + "}";
    }
    case Value::Kind::kNamespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, e] : v.nspace().attrs) {
        out += (first ? "" : ", ") + repr_string(k) + ": " + to_repr(e);
        first = false;
      }
      return out + "}>";
    }
    case Value::Kind::kCallable:
      return "<function " + v.fn().name + ">";
  }
  return "";
}

bool py_eq(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!py_eq(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : a.dict().items) {
        const Value* o = b.dict().find(k);
        if (!o || !py_eq(v, *o)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.nspace() == &b.nspace();
    case Value::Kind::kCallable:
      return &a.fn() == &b.fn();
    default:
      return false;
  }
}

bool py_lt(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return compare_strings(a.str(), b.str()) < 0;
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const List &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (py_eq(x[i], y[i])) continue;
      return py_lt(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw InputError(fmt::format("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()));
}

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_rec(v, style, 0, out);
  return out;
}

}  // namespace seqpar::jinja
