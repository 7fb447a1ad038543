// The filters, tests and methods of data/jinja.h: jinja2 3.1's built-ins (filters.py, tests.py)
// and Python's str / dict / list methods, as far as chat templates use them; transformers' own
// tojson. Case mapping (upper, lower, title, capitalize, islower, isupper) covers ASCII; a string
// with other characters is refused by name rather than mapped differently from Python.
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <set>

#include "core/error.h"
#include "data/jinja_ast.h"
#include "io/tokenizer.h"

namespace seqpar::jinja {

namespace {

using Fn = Value (*)(const Value&, const CallArgs&);

// ---- argument helpers --------------------------------------------------------------------

// Positional `idx` or keyword `name`, else `def`; InputError for an argument given twice.
Value arg(const CallArgs& a, size_t idx, const char* name, Value def = Value()) {
  const Value* kw = nullptr;
  for (const auto& [k, v] : a.kw)
    if (k == name) kw = &v;
  if (idx < a.pos.size()) {
    if (kw) throw InputError(fmt::format("got multiple values for the argument '{}'", name));
    return a.pos[idx];
  }
  return kw ? *kw : def;
}

void check_args(const CallArgs& a, const char* what, size_t max_pos, std::initializer_list<const char*> names) {
  if (a.pos.size() > max_pos)
    throw InputError(fmt::format("{} takes at most {} positional argument(s), {} given", what, max_pos, a.pos.size()));
  for (const auto& kv : a.kw) {
    const auto& k = kv.first;  // (a structured binding is not capturable by clang 14's lambdas)
    if (std::find_if(names.begin(), names.end(), [&](const char* n) { return k == n; }) == names.end())
      throw InputError(fmt::format("{} got an unexpected keyword argument '{}'", what, k));
  }
}

const std::string& need_str(const Value& v, const char* what) {
  if (!v.is_string()) {
    if (v.is_undefined()) undefined_error(v);
    throw InputError(fmt::format("{} expects a string, got {}", what, v.type_name()));
  }
  return v.str();
}

int64_t need_int(const Value& v, const char* what) {
  if (!v.is_int() && !v.is_bool()) throw InputError(fmt::format("{} expects an integer, got {}", what, v.type_name()));
  return v.as_int();
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

void need_ascii(std::string_view s, const char* what) {
  if (!is_ascii(s))
    throw InputError(
        fmt::format("{} of a string with non-ASCII characters is not supported (seqpar maps case for "
                    "ASCII only, Python for all of Unicode)",
                    what));
}

std::string ascii_map(std::string s, int (*f)(int)) {
  for (char& c : s) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}

// Python's str.capitalize (ASCII).
std::string capitalize(const std::string& s) {
  std::string out = ascii_map(s, tolower);
  if (!out.empty()) out[0] = static_cast<char>(toupper(static_cast<unsigned char>(out[0])));
  return out;
}

std::vector<std::string> code_point_strings(const std::string& s) {
  std::vector<std::string> out;
  for (char32_t c : to_code_points(s)) out.push_back(to_utf8(std::u32string(1, c)));
  return out;
}

size_t len_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return code_point_count(v.str());
    case Value::Kind::kList:
      return v.items().size();
    case Value::Kind::kDict:
      return v.dict().items.size();
    default:
      throw InputError(fmt::format("object of type '{}' has no len()", v.type_name()));
  }
}

// Python's str.split / rsplit.
std::vector<std::string> split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep.is_none() || sep.is_undefined()) {
    const std::u32string cps = to_code_points(s);
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t i = 0; i < cps.size();) {
      while (i < cps.size() && py_isspace(cps[i])) ++i;
      if (i == cps.size()) break;
      size_t e = i;
      while (e < cps.size() && !py_isspace(cps[e])) ++e;
      words.emplace_back(i, e);
      i = e;
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      for (auto [b, e] : words) out.push_back(to_utf8(std::u32string_view(cps).substr(b, e - b)));
      return out;
    }
    const size_t m = static_cast<size_t>(maxsplit);
    // Python: the remainder keeps its whitespace on the far side (trailing for split, leading for rsplit).
    if (!from_right) {
      for (size_t k = 0; k < m; ++k)
        out.push_back(to_utf8(std::u32string_view(cps).substr(words[k].first, words[k].second - words[k].first)));
      out.push_back(to_utf8(std::u32string_view(cps).substr(words[m].first)));
    } else {
      const size_t first = words.size() - m;
      out.push_back(to_utf8(std::u32string_view(cps).substr(0, words[first - 1].second)));
      for (size_t k = first; k < words.size(); ++k)
        out.push_back(to_utf8(std::u32string_view(cps).substr(words[k].first, words[k].second - words[k].first)));
    }
    return out;
  }
  const std::string& d = need_str(sep, "split's separator");
  if (d.empty()) throw InputError("split: empty separator");
  if (!from_right) {
    size_t pos = 0;
    int64_t n = 0;
    while (maxsplit < 0 || n < maxsplit) {
      const size_t f = s.find(d, pos);
      if (f == std::string::npos) break;
      out.push_back(s.substr(pos, f - pos));
      pos = f + d.size();
      ++n;
    }
    out.push_back(s.substr(pos));
    return out;
  }
  size_t end = s.size();
  int64_t n = 0;
  std::vector<std::string> rev;
  while (maxsplit < 0 || n < maxsplit) {
    if (end < d.size()) break;
    const size_t f = s.rfind(d, end - d.size());
    if (f == std::string::npos) break;
    rev.push_back(s.substr(f + d.size(), end - f - d.size()));
    end = f;
    ++n;
  }
  rev.push_back(s.substr(0, end));
  return std::vector<std::string>(rev.rbegin(), rev.rend());
}

std::string replace(const std::string& s, const std::string& old, const std::string& with, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `with` before every code point and at the end
    int64_t n = 0;
    for (const std::string& c : code_point_strings(s)) {
      if (count < 0 || n < count) {
        out += with;
        ++n;
      }
      out += c;
    }
    if (count < 0 || n < count) out += with;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out += s.substr(pos, f - pos) + with;
    pos = f + old.size();
    ++n;
  }
  return out + s.substr(pos);
}

std::vector<std::string> splitlines(const std::string& s, bool keepends) {
  std::vector<std::string> out;
  const std::u32string cps = to_code_points(s);
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                     c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    size_t end = i + 1;
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') end = i + 2;
    out.push_back(to_utf8(std::u32string_view(cps).substr(start, (keepends ? end : i) - start)));
    start = end;
    i = end - 1;
  }
  if (start < cps.size()) out.push_back(to_utf8(std::u32string_view(cps).substr(start)));
  return out;
}

Value str_list(const std::vector<std::string>& parts) {
  List l;
  for (const auto& p : parts) l.push_back(Value::string(p));
  return Value::list(std::move(l));
}

bool prefix_test(const std::string& s, const Value& p, bool suffix) {
  auto one = [&](const std::string& x) {
    if (x.size() > s.size()) return false;
    return suffix ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0;
  };
  if (p.is_tuple()) {
    for (const Value& e : p.items())
      if (one(need_str(e, suffix ? "endswith" : "startswith"))) return true;
    return false;
  }
  return one(need_str(p, suffix ? "endswith" : "startswith"));
}

// Python str.find / rfind, in code points.
int64_t find(const std::string& s, const std::string& sub, bool from_right) {
  const size_t f = from_right ? s.rfind(sub) : s.find(sub);
  if (f == std::string::npos) return -1;
  return static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, f)));
}

int64_t count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(code_point_count(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

std::u32string strip_chars(const Value& chars) { return to_code_points(need_str(chars, "strip's characters")); }

Value str_method(const std::string& s, const std::string& m, const CallArgs& a) {
  const std::string what = "str." + m + "()";
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    check_args(a, what.c_str(), 1, {"chars"});
    const Value chars = arg(a, 0, "chars", Value::none());
    const bool left = m != "rstrip", right = m != "lstrip";
    if (chars.is_none()) return Value::string(py_strip(s, left, right));
    const std::u32string cs = strip_chars(chars);
    return Value::string(py_strip(s, left, right, &cs));
  }
  if (m == "split" || m == "rsplit") {
    check_args(a, what.c_str(), 2, {"sep", "maxsplit"});
    return str_list(split(s, arg(a, 0, "sep", Value::none()),
                          need_int(arg(a, 1, "maxsplit", Value::integer(-1)), "maxsplit"), m == "rsplit"));
  }
  if (m == "startswith" || m == "endswith") {
    check_args(a, what.c_str(), 1, {});
    if (a.pos.empty()) throw InputError(what + " takes a prefix");
    return Value::boolean(prefix_test(s, a.pos[0], m == "endswith"));
  }
  if (m == "replace") {
    check_args(a, what.c_str(), 3, {"count"});
    if (a.pos.size() < 2) throw InputError("str.replace() takes the old and the new string");
    return Value::string(replace(s, need_str(a.pos[0], "replace"), need_str(a.pos[1], "replace"),
                                 need_int(arg(a, 2, "count", Value::integer(-1)), "count")));
  }
  if (m == "upper" || m == "lower" || m == "title" || m == "capitalize") {
    check_args(a, what.c_str(), 0, {});
    need_ascii(s, what.c_str());
    if (m == "upper") return Value::string(ascii_map(s, toupper));
    if (m == "lower") return Value::string(ascii_map(s, tolower));
    if (m == "capitalize") return Value::string(capitalize(s));
    std::string out = s;  // str.title: a letter after a non-letter is upper, others lower
    bool prev_cased = false;
    for (char& c : out) {
      const bool alpha = isalpha(static_cast<unsigned char>(c)) != 0;
      c = static_cast<char>(alpha ? (prev_cased ? tolower(c) : toupper(c)) : c);
      prev_cased = alpha;
    }
    return Value::string(out);
  }
  if (m == "find" || m == "rfind" || m == "count") {
    check_args(a, what.c_str(), 1, {});
    if (a.pos.empty()) throw InputError(what + " takes a substring");
    const std::string& sub = need_str(a.pos[0], what.c_str());
    return Value::integer(m == "count" ? count(s, sub) : find(s, sub, m == "rfind"));
  }
  if (m == "join") {
    check_args(a, what.c_str(), 1, {});
    if (a.pos.empty()) throw InputError("str.join() takes an iterable");
    std::string out;
    const List items = iterate(a.pos[0], "str.join()");
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string())
        throw InputError(fmt::format("sequence item {}: expected str instance, {} found", i, items[i].type_name()));
      out += (i ? s : "") + items[i].str();
    }
    return Value::string(out);
  }
  if (m == "splitlines") {
    check_args(a, what.c_str(), 1, {"keepends"});
    return str_list(splitlines(s, arg(a, 0, "keepends", Value::boolean(false)).truthy()));
  }
  if (m == "isspace" || m == "isalpha" || m == "isdigit" || m == "isalnum" || m == "islower" || m == "isupper") {
    check_args(a, what.c_str(), 0, {});
    const std::u32string cps = to_code_points(s);
    if (m == "isspace") return Value::boolean(!cps.empty() && std::all_of(cps.begin(), cps.end(), py_isspace));
    if (m == "isalpha")
      return Value::boolean(!cps.empty() && std::all_of(cps.begin(), cps.end(), [](char32_t c) {
        return tokenizer_detail::char_class(c) == tokenizer_detail::CharClass::kLetter;
      }));
    need_ascii(s, what.c_str());
    if (m == "isdigit") return Value::boolean(!s.empty() && std::all_of(s.begin(), s.end(), ::isdigit));
    if (m == "isalnum") return Value::boolean(!s.empty() && std::all_of(s.begin(), s.end(), ::isalnum));
    const bool lower = m == "islower";
    bool cased = false;
    for (char c : s) {
      if (isalpha(static_cast<unsigned char>(c))) {
        cased = true;
        if ((islower(static_cast<unsigned char>(c)) != 0) != lower) return Value::boolean(false);
      }
    }
    return Value::boolean(cased);
  }
  throw InputError(fmt::format("'str' object has no method '{}'", m));
}

Value dict_method(const Value& d, const std::string& m, const CallArgs& a) {
  const std::string what = "dict." + m + "()";
  if (m == "items" || m == "keys" || m == "values") {
    check_args(a, what.c_str(), 0, {});
    List out;
    for (const auto& [k, v] : d.dict().items) {
      if (m == "items") out.push_back(Value::list({k, v}, true));
      if (m == "keys") out.push_back(k);
      if (m == "values") out.push_back(v);
    }
    return Value::list(std::move(out));
  }
  if (m == "get") {
    check_args(a, what.c_str(), 2, {});
    if (a.pos.empty()) throw InputError("dict.get() takes a key");
    const Value* v = d.dict().find(a.pos[0]);
    return v ? *v : (a.pos.size() > 1 ? a.pos[1] : Value::none());
  }
  throw InputError(fmt::format("'dict' object has no method '{}'", m));
}

Value list_method(const Value& l, const std::string& m, const CallArgs& a) {
  const std::string what = "list." + m + "()";
  check_args(a, what.c_str(), 1, {});
  if (a.pos.empty()) throw InputError(what + " takes a value");
  const List& items = l.items();
  if (m == "count")
    return Value::integer(
        std::count_if(items.begin(), items.end(), [&](const Value& v) { return py_eq(v, a.pos[0]); }));
  if (m == "index") {
    for (size_t i = 0; i < items.size(); ++i)
      if (py_eq(items[i], a.pos[0])) return Value::integer(static_cast<int64_t>(i));
    throw InputError(fmt::format("{} is not in list", to_repr(a.pos[0])));
  }
  throw InputError(fmt::format("'{}' object has no method '{}'", l.type_name(), m));
}

const std::set<std::string, std::less<>> kStrMethods = {
    "strip",      "lstrip",  "rstrip",  "split",      "rsplit",  "startswith", "endswith", "replace",
    "upper",      "lower",   "title",   "capitalize", "find",    "rfind",      "count",    "join",
    "splitlines", "isspace", "isalpha", "isdigit",    "isalnum", "islower",    "isupper"};
const std::set<std::string, std::less<>> kDictMethods = {"items", "keys", "values", "get"};
// The names Python's dict has, which jinja2's getattr finds before a key of that name.
const std::set<std::string, std::less<>> kDictAttrs = {"items", "keys", "values", "get",        "pop",     "popitem",
                                                       "clear", "copy", "update", "setdefault", "fromkeys"};
const std::set<std::string, std::less<>> kListMethods = {"index", "count"};
const std::set<std::string, std::less<>> kListAttrs = {"index",  "count", "append", "extend", "insert", "pop",
                                                       "remove", "clear", "copy",   "sort",   "reverse"};

Value bound(const Value& obj, const std::string& name) {
  if (obj.is_string())
    return Value::callable("str." + name, [obj, name](const CallArgs& a) { return str_method(obj.str(), name, a); });
  if (obj.is_dict())
    return Value::callable("dict." + name, [obj, name](const CallArgs& a) { return dict_method(obj, name, a); });
  return Value::callable("list." + name, [obj, name](const CallArgs& a) { return list_method(obj, name, a); });
}

std::string object_name(const Value& v) { return fmt::format("'{} object'", v.type_name()); }

// ---- filters -----------------------------------------------------------------------------

CallArgs rest_args(const CallArgs& a, size_t from) {
  CallArgs r;
  if (from < a.pos.size()) r.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(from), a.pos.end());
  r.kw = a.kw;
  return r;
}

// select / reject / selectattr / rejectattr: keep the items whose (attribute's) test is `keep`.
Value select(const Value& v, const CallArgs& a, bool keep, bool by_attr) {
  const List items = iterate(v, "select");
  std::string attr;
  size_t i = 0;
  if (by_attr) {
    if (a.pos.empty()) throw InputError("selectattr / rejectattr take an attribute name");
    attr = need_str(a.pos[0], "selectattr's attribute");
    i = 1;
  }
  const bool has_test = i < a.pos.size();
  const std::string test = has_test ? need_str(a.pos[i], "the test's name") : "";
  if (has_test && !known_test(test)) throw InputError(fmt::format("no test named '{}'", test));
  const CallArgs targs = has_test ? rest_args(a, i + 1) : CallArgs{};
  List out;
  for (const Value& item : items) {
    Value x = item;
    if (by_attr)
      for (size_t b = 0, e; b <= attr.size(); b = e + 1) {  // dotted attributes: a.b
        e = attr.find('.', b);
        if (e == std::string::npos) e = attr.size();
        x = get_attr(x, attr.substr(b, e - b));
        if (x.is_undefined() && e < attr.size()) break;
      }
    const bool pass = has_test ? apply_test(test, x, targs) : x.truthy();
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value attribute_of(const Value& item, const std::string& attr) {
  Value x = item;
  for (size_t b = 0, e; b <= attr.size(); b = e + 1) {
    e = attr.find('.', b);
    if (e == std::string::npos) e = attr.size();
    const std::string part = attr.substr(b, e - b);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    x = digits ? get_item(x, Value::integer(std::stoll(part))) : get_item(x, Value::string(part));
    if (x.is_undefined()) break;
  }
  return x;
}

// sort / unique / min / max keys: strings compare case-insensitively unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) {
    if (!is_ascii(v.str())) need_ascii(v.str(), "case-insensitive comparison");
    return Value::string(ascii_map(v.str(), tolower));
  }
  return v;
}

Value f_tojson(const Value& v, const CallArgs& a) {
  check_args(a, "tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle st;
  st.ensure_ascii = arg(a, 0, "ensure_ascii", Value::boolean(false)).truthy();
  const Value indent = arg(a, 1, "indent", Value::none());
  if (indent.is_string()) {
    st.indent_str = indent.str();
    if (st.indent_str.empty()) st.indent = 0;
  } else if (!indent.is_none()) {
    st.indent = static_cast<int>(std::max<int64_t>(0, need_int(indent, "tojson's indent")));
  }
  const Value seps = arg(a, 2, "separators", Value::none());
  if (!seps.is_none()) {
    if (!seps.is_list() || seps.items().size() != 2) throw InputError("tojson's separators must be a pair of strings");
    st.item_sep = need_str(seps.items()[0], "tojson's separators");
    st.key_sep = need_str(seps.items()[1], "tojson's separators");
  }
  st.sort_keys = arg(a, 3, "sort_keys", Value::boolean(false)).truthy();
  return Value::string(to_json(v, st));
}

Value f_map(const Value& v, const CallArgs& a) {
  const List items = iterate(v, "map");
  List out;
  const Value attribute = arg(a, 99, "attribute");
  if (!attribute.is_undefined()) {
    const std::string attr = need_str(attribute, "map's attribute");
    const Value def = arg(a, 99, "default");
    for (const Value& item : items) {
      Value x = attribute_of(item, attr);
      out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
    }
    return Value::list(std::move(out));
  }
  if (a.pos.empty()) throw InputError("map takes a filter name or attribute=");
  const std::string filter = need_str(a.pos[0], "map's filter name");
  if (!known_filter(filter)) throw InputError(fmt::format("no filter named '{}'", filter));
  const CallArgs fargs = rest_args(a, 1);
  for (const Value& item : items) out.push_back(apply_filter(filter, item, fargs));
  return Value::list(std::move(out));
}

Value f_sort(const Value& v, const CallArgs& a) {
  check_args(a, "sort", 3, {"reverse", "case_sensitive", "attribute"});
  const bool rev = arg(a, 0, "reverse", Value::boolean(false)).truthy();
  const bool cs = arg(a, 1, "case_sensitive", Value::boolean(false)).truthy();
  const Value attr = arg(a, 2, "attribute");
  List items = iterate(v, "sort");
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& x : items)
    keyed.emplace_back(sort_key(attr.is_undefined() ? x : attribute_of(x, need_str(attr, "sort's attribute")), cs), x);
  std::stable_sort(keyed.begin(), keyed.end(), [rev](const auto& p, const auto& q) {
    return rev ? py_lt(q.first, p.first) : py_lt(p.first, q.first);
  });
  List out;
  for (auto& [k, x] : keyed) out.push_back(x);
  return Value::list(std::move(out));
}

Value f_minmax(const Value& v, const CallArgs& a, bool max) {
  check_args(a, max ? "max" : "min", 2, {"case_sensitive", "attribute"});
  const bool cs = arg(a, 0, "case_sensitive", Value::boolean(false)).truthy();
  const Value attr = arg(a, 1, "attribute");
  const List items = iterate(v, max ? "max" : "min");
  if (items.empty()) return Value::undefined("no min / max of an empty sequence");
  size_t best = 0;
  auto key = [&](size_t i) {
    return sort_key(attr.is_undefined() ? items[i] : attribute_of(items[i], need_str(attr, "attribute")), cs);
  };
  for (size_t i = 1; i < items.size(); ++i)
    if (max ? py_lt(key(best), key(i)) : py_lt(key(i), key(best))) best = i;
  return items[best];
}

Value f_round(const Value& v, const CallArgs& a) {
  check_args(a, "round", 2, {"precision", "method"});
  const int64_t precision = need_int(arg(a, 0, "precision", Value::integer(0)), "round's precision");
  const std::string method = need_str(arg(a, 1, "method", Value::string("common")), "round's method");
  if (!v.is_number()) throw InputError(fmt::format("round expects a number, got {}", v.type_name()));
  if (precision != 0) throw InputError("round with a precision other than 0 is not supported");
  const double x = v.as_float();
  double r;
  if (method == "common") {
    const int old = std::fegetround();
    std::fesetround(FE_TONEAREST);  // Python's round(): half to even
    r = std::nearbyint(x);
    std::fesetround(old);
  } else if (method == "floor") {
    r = std::floor(x);
  } else if (method == "ceil") {
    r = std::ceil(x);
  } else {
    throw InputError(fmt::format("round's method must be common, floor or ceil, got '{}'", method));
  }
  return Value::number(r);
}

// Jinja's title filter: the first character of each word (after whitespace or -([{<) upper, the
// rest lower.
std::string jinja_title(const std::string& s) {
  need_ascii(s, "title");
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const bool sep = isspace(static_cast<unsigned char>(c)) || strchr("-({[<", c) != nullptr;
    if (sep) {
      start = true;
      continue;
    }
    c = static_cast<char>(start ? toupper(static_cast<unsigned char>(c)) : tolower(static_cast<unsigned char>(c)));
    start = false;
  }
  return out;
}

Value to_int(const Value& v, const Value& def) {
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float())) return def;
    return Value::integer(static_cast<int64_t>(std::trunc(v.as_float())));
  }
  if (v.is_string()) {
    const std::string t = py_strip(v.str(), true, true);
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(t.c_str(), &end, 10);
    if (!t.empty() && end == t.c_str() + t.size() && errno == 0) return Value::integer(i);
    const double f = std::strtod(t.c_str(), &end);
    if (!t.empty() && end == t.c_str() + t.size() && std::isfinite(f)) return Value::integer(static_cast<int64_t>(f));
  }
  return def;
}

Value to_float(const Value& v, const Value& def) {
  if (v.is_number()) return Value::number(v.as_float());
  if (v.is_string()) {
    const std::string t = py_strip(v.str(), true, true);
    char* end = nullptr;
    const double f = std::strtod(t.c_str(), &end);
    if (!t.empty() && end == t.c_str() + t.size()) return Value::number(f);
  }
  return def;
}

Value filter(const std::string& n, const Value& v, const CallArgs& a) {
  if (n == "tojson") return f_tojson(v, a);
  if (n == "trim") {
    check_args(a, "trim", 1, {"chars"});
    const Value chars = arg(a, 0, "chars", Value::none());
    const std::string s = to_str(v);
    if (chars.is_none()) return Value::string(py_strip(s, true, true));
    const std::u32string cs = strip_chars(chars);
    return Value::string(py_strip(s, true, true, &cs));
  }
  if (n == "length" || n == "count") return Value::integer(static_cast<int64_t>(len_of(v)));
  if (n == "string") return Value::string(to_str(v));
  if (n == "safe") return Value::string(to_str(v));
  if (n == "upper" || n == "lower" || n == "capitalize" || n == "title") {
    const std::string s = to_str(v);
    if (n == "title") return Value::string(jinja_title(s));
    need_ascii(s, n.c_str());
    if (n == "upper") return Value::string(ascii_map(s, toupper));
    if (n == "lower") return Value::string(ascii_map(s, tolower));
    return Value::string(capitalize(s));
  }
  if (n == "default" || n == "d") {
    check_args(a, "default", 2, {"default_value", "boolean"});
    const Value def = arg(a, 0, "default_value", Value::string(""));
    const bool boolean = arg(a, 1, "boolean", Value::boolean(false)).truthy();
    return (v.is_undefined() || (boolean && !v.truthy())) ? def : v;
  }
  if (n == "items") {
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) throw InputError("items: can only get item pairs from a mapping");
    return dict_method(v, "items", {});
  }
  if (n == "list") return Value::list(iterate(v, "list"));
  if (n == "first" || n == "last") {
    List items = iterate(v, n.c_str());
    if (items.empty()) return Value::undefined(fmt::format("'{}' of an empty sequence", n));
    return n == "first" ? items.front() : items.back();
  }
  if (n == "join") {
    check_args(a, "join", 2, {"d", "attribute"});
    const std::string d = to_str(arg(a, 0, "d", Value::string("")));
    const Value attr = arg(a, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& x : iterate(v, "join")) {
      out += (first ? "" : d) + to_str(attr.is_undefined() ? x : attribute_of(x, need_str(attr, "join's attribute")));
      first = false;
    }
    return Value::string(out);
  }
  if (n == "replace") {
    check_args(a, "replace", 3, {"count"});
    if (a.pos.size() < 2) throw InputError("replace takes the old and the new string");
    const Value cnt = arg(a, 2, "count", Value::none());
    return Value::string(
        replace(to_str(v), to_str(a.pos[0]), to_str(a.pos[1]), cnt.is_none() ? -1 : need_int(cnt, "replace's count")));
  }
  if (n == "select") return select(v, a, true, false);
  if (n == "reject") return select(v, a, false, false);
  if (n == "selectattr") return select(v, a, true, true);
  if (n == "rejectattr") return select(v, a, false, true);
  if (n == "map") return f_map(v, a);
  if (n == "reverse") {
    if (v.is_string()) {
      std::u32string cps = to_code_points(v.str());
      std::reverse(cps.begin(), cps.end());
      return Value::string(to_utf8(cps));
    }
    List items = iterate(v, "reverse");
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (n == "sort") return f_sort(v, a);
  if (n == "unique") {
    check_args(a, "unique", 2, {"case_sensitive", "attribute"});
    const bool cs = arg(a, 0, "case_sensitive", Value::boolean(false)).truthy();
    const Value attr = arg(a, 1, "attribute");
    List out, seen;
    for (const Value& x : iterate(v, "unique")) {
      const Value key = sort_key(attr.is_undefined() ? x : attribute_of(x, need_str(attr, "attribute")), cs);
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_eq(s, key); })) continue;
      seen.push_back(key);
      out.push_back(x);
    }
    return Value::list(std::move(out));
  }
  if (n == "min") return f_minmax(v, a, false);
  if (n == "max") return f_minmax(v, a, true);
  if (n == "sum") {
    check_args(a, "sum", 2, {"attribute", "start"});
    const Value attr = arg(a, 0, "attribute");
    Value total = arg(a, 1, "start", Value::integer(0));
    for (const Value& x : iterate(v, "sum")) {
      const Value y = attr.is_undefined() ? x : attribute_of(x, need_str(attr, "attribute"));
      if (!total.is_number() || !y.is_number()) throw InputError("sum adds numbers only");
      total = (total.is_float() || y.is_float()) ? Value::number(total.as_float() + y.as_float())
                                                 : Value::integer(total.as_int() + y.as_int());
    }
    return total;
  }
  if (n == "abs") {
    if (v.is_float()) return Value::number(std::fabs(v.as_float()));
    if (v.is_int() || v.is_bool()) return Value::integer(std::llabs(v.as_int()));
    throw InputError(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
  }
  if (n == "int") {
    check_args(a, "int", 1, {"default"});
    return to_int(v, arg(a, 0, "default", Value::integer(0)));
  }
  if (n == "float") {
    check_args(a, "float", 1, {"default"});
    return to_float(v, arg(a, 0, "default", Value::number(0)));
  }
  if (n == "round") return f_round(v, a);
  if (n == "wordcount") return Value::integer(static_cast<int64_t>(split(to_str(v), Value::none(), -1, false).size()));
  throw InputError(fmt::format("no filter named '{}'", n));
}

const std::set<std::string, std::less<>> kFilters = {
    "tojson", "trim",    "length",     "count",      "string", "safe",    "upper",    "lower",  "capitalize",
    "title",  "default", "d",          "items",      "list",   "first",   "last",     "join",   "replace",
    "select", "reject",  "selectattr", "rejectattr", "map",    "reverse", "sort",     "unique", "min",
    "max",    "sum",     "abs",        "int",        "float",  "round",   "wordcount"};

const std::set<std::string, std::less<>> kTests = {
    "defined", "undefined", "none",     "boolean",  "true",        "false",  "integer", "float", "number",
    "string",  "mapping",   "iterable", "sequence", "callable",    "sameas", "equalto", "eq",    "==",
    "ne",      "!=",        "lt",       "<",        "le",          "<=",     "gt",      ">",     "ge",
    ">=",      "in",        "odd",      "even",     "divisibleby", "lower",  "upper"};

}  // namespace

bool known_filter(std::string_view name) { return kFilters.count(name) > 0; }
bool known_test(std::string_view name) { return kTests.count(name) > 0; }
bool known_method(std::string_view name) {
  return kStrMethods.count(name) || kDictMethods.count(name) || kListMethods.count(name) || name == "cycle";
}
bool mutating_method(std::string_view name) {
  static const std::set<std::string, std::less<>> kMutating = {"append",  "extend", "insert",     "pop",     "remove",
                                                               "clear",   "update", "setdefault", "popitem", "sort",
                                                               "reverse", "add",    "discard"};
  return kMutating.count(name) > 0;
}

Value apply_filter(const std::string& name, const Value& v, const CallArgs& args) { return filter(name, v, args); }

bool apply_test(const std::string& n, const Value& v, const CallArgs& a) {
  auto other = [&]() {
    if (a.pos.empty()) throw InputError(fmt::format("the test '{}' takes a value to compare with", n));
    return a.pos[0];
  };
  if (n == "defined") return !v.is_undefined();
  if (n == "undefined") return v.is_undefined();
  if (n == "none") return v.is_none();
  if (n == "boolean") return v.is_bool();
  if (n == "true") return v.is_bool() && v.as_bool();
  if (n == "false") return v.is_bool() && !v.as_bool();
  if (n == "integer") return v.is_int();
  if (n == "float") return v.is_float();
  if (n == "number") return v.is_number();
  if (n == "string") return v.is_string();
  if (n == "mapping") return v.is_dict();
  if (n == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (n == "sequence") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (n == "callable") return v.is_callable();
  if (n == "sameas") {
    const Value o = other();
    // Python's `is`: None, True, False and (cached) small integers are one object each.
    if (v.is_none() || o.is_none() || v.is_bool() || o.is_bool() || v.is_int())
      return v.kind() == o.kind() && py_eq(v, o);
    return false;
  }
  if (n == "equalto" || n == "eq" || n == "==") return py_eq(v, other());
  if (n == "ne" || n == "!=") return !py_eq(v, other());
  if (n == "lt" || n == "<") return py_lt(v, other());
  if (n == "le" || n == "<=") return py_lt(v, other()) || py_eq(v, other());
  if (n == "gt" || n == ">") return py_lt(other(), v);
  if (n == "ge" || n == ">=") return py_lt(other(), v) || py_eq(v, other());
  if (n == "in") {
    const Value c = other();
    if (c.is_string()) return need_str(v, "'in <string>'").empty() || c.str().find(v.str()) != std::string::npos;
    if (c.is_dict()) return c.dict().find(v) != nullptr;
    const List items = iterate(c, "in");
    return std::any_of(items.begin(), items.end(), [&](const Value& x) { return py_eq(x, v); });
  }
  if (n == "odd" || n == "even") return (need_int(v, n.c_str()) % 2 != 0) == (n == "odd");
  if (n == "divisibleby") {
    const int64_t d = need_int(other(), "divisibleby");
    if (d == 0) throw InputError("divisibleby 0");
    return need_int(v, "divisibleby") % d == 0;
  }
  if (n == "lower" || n == "upper") {
    const std::string s = to_str(v);
    return str_method(s, n == "lower" ? "islower" : "isupper", {}).truthy();
  }
  throw InputError(fmt::format("no test named '{}'", n));
}

[[noreturn]] void undefined_error(const Value& v) {
  throw InputError(v.undefined_hint().empty() ? "an undefined value was used" : v.undefined_hint());
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      undefined_error(obj);
    case Value::Kind::kString:
      if (kStrMethods.count(name)) return bound(obj, name);
      break;
    case Value::Kind::kDict:
      if (kDictAttrs.count(name)) {
        if (kDictMethods.count(name)) return bound(obj, name);
        return Value::undefined(fmt::format("dict.{} is not supported", name));
      }
      if (const Value* v = obj.dict().find(name)) return *v;
      break;
    case Value::Kind::kList:
      if (kListAttrs.count(name)) {
        if (kListMethods.count(name)) return bound(obj, name);
        return Value::undefined(fmt::format("list.{} is not supported", name));
      }
      break;
    case Value::Kind::kNamespace:
      if (const Value* v = obj.nspace().find(name)) return *v;
      break;
    default:
      break;
  }
  return Value::undefined(fmt::format("{} has no attribute '{}'", object_name(obj), name));
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      undefined_error(obj);
    case Value::Kind::kDict:
      if (const Value* v = obj.dict().find(key)) return *v;
      break;
    case Value::Kind::kList:
    case Value::Kind::kString:
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        if (obj.is_list()) {
          const int64_t n = static_cast<int64_t>(obj.items().size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
          return Value::undefined(fmt::format("{} has no element {}", object_name(obj), key.as_int()));
        }
        const std::u32string cps = to_code_points(obj.str());
        const int64_t n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value::string(to_utf8(std::u32string(1, cps[static_cast<size_t>(i)])));
        return Value::undefined(fmt::format("{} has no element {}", object_name(obj), key.as_int()));
      }
      break;
    default:
      break;
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined(fmt::format("{} has no element {}", object_name(obj), to_repr(key)));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) undefined_error(obj);
  if (!obj.is_list() && !obj.is_string())
    throw InputError(fmt::format("'{}' object is not subscriptable", obj.type_name()));
  auto idx = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    return need_int(v, what);
  };
  const int64_t st = idx(step, "a slice step").value_or(1);
  if (st == 0) throw InputError("slice step cannot be zero");
  std::u32string cps;
  const int64_t n = obj.is_list() ? static_cast<int64_t>(obj.items().size())
                                  : static_cast<int64_t>((cps = to_code_points(obj.str())).size());
  // Python's slice.indices()
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x += n;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t b = clamp(idx(start, "a slice start"), st > 0 ? 0 : n - 1);
  const int64_t e = clamp(idx(stop, "a slice stop"), st > 0 ? n : -1);
  List out;
  std::u32string s;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (obj.is_list()) {
      out.push_back(obj.items()[static_cast<size_t>(i)]);
    } else {
      s += cps[static_cast<size_t>(i)];
    }
  }
  if (obj.is_string()) return Value::string(to_utf8(s));
  return Value::list(std::move(out), obj.is_tuple());
}

List iterate(const Value& v, const char* what) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.items();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, e] : v.dict().items) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (const std::string& c : code_point_strings(v.str())) chars.push_back(Value::string(c));
      return chars;
    }
    default:
      throw InputError(fmt::format("{}: '{}' object is not iterable", what, v.type_name()));
  }
}

}  // namespace seqpar::jinja
