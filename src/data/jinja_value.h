// The values of seqpar's Jinja interpreter (data/jinja.h), with Python's semantics where chat
// templates see them: jinja2 renders Python objects, so `str()`, `repr()`, `==`, `<`, truthiness,
// `+`, indexing and slicing (by code point), and transformers' `tojson` (json.dumps with
// ensure_ascii=False) are Python's here.
//
// Lists, tuples and dicts are immutable once made (transformers renders in jinja2's
// ImmutableSandboxedEnvironment, which refuses append, pop, update, ...), so values share them.
// A namespace() is the one mutable object ({% set ns.x = ... %}).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace seqpar::jinja {

class Value;
using List = std::vector<Value>;

// Insertion-ordered, as Python dicts (and the JSON objects of a chat record) are.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;  // Python's key equality (1 == 1.0 == True)
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);  // replaces an equal key's value, else appends
};

// jinja2's namespace(): attributes set with {% set ns.name = ... %}.
struct Namespace {
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);
};

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

// A function the template can call: a global (range, namespace, raise_exception, ...), a bound
// method ("abc".upper), loop.cycle, or a macro. `fn` raises InputError for bad arguments.
struct Callable {
  std::string name;  // for messages: "range", "str.split", "macro 'render_tool'"
  std::function<Value(const CallArgs&)> fn;
};

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() = default;                              // undefined
  static Value undefined(std::string hint = "");  // hint: why, for the error when it is used
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  static Value list(List items, bool tuple = false);
  static Value dict(Dict d);
  static Value ns(std::shared_ptr<Namespace> n);
  static Value callable(std::string name, std::function<Value(const CallArgs&)> fn);
  // JSON (a chat record) -> values: objects keep their key order (parse with ordered_json).
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }  // not bool (jinja's `integer` test)
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }  // list or tuple
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }  // bool or int
  double as_float() const;                                                     // any number
  const std::string& str() const { return *s_; }                               // a string's bytes
  const List& items() const { return *l_; }
  const Dict& dict() const { return *d_; }
  Namespace& nspace() const { return *ns_; }
  const Callable& fn() const { return *fn_; }
  const std::string& undefined_hint() const;

  bool truthy() const;  // Python's bool(): empty and zero are false, undefined is false
  // Python's type name, for messages: "str", "int", "list", "dict", "NoneType", "Undefined", ...
  const char* type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false, tuple_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;  // string, or the hint of an undefined
  std::shared_ptr<const List> l_;
  std::shared_ptr<const Dict> d_;
  std::shared_ptr<Namespace> ns_;
  std::shared_ptr<const Callable> fn_;
};

// ---- Python's semantics ------------------------------------------------------------------

// Python str(x) as jinja2 prints {{ x }}: None -> "None", True -> "True", 1.0 -> "1.0", lists and
// dicts as their repr; undefined -> "".
std::string to_str(const Value& v);
// Python repr(x) (strings quoted as Python quotes them).
std::string to_repr(const Value& v);
// Python float repr: the shortest digits that round-trip, "1e-05", "1e+16", "5.0", "inf", "nan".
std::string float_repr(double f);

// Python ==, <: numbers compare by value (bool is an int), strings by code point, lists and
// tuples element-wise (a list never equals a tuple), dicts by content; undefined == undefined.
bool py_eq(const Value& a, const Value& b);
// a < b; InputError "'<' not supported between instances of 'str' and 'int'" for other types.
bool py_lt(const Value& a, const Value& b);

// transformers' tojson: json.dumps(x, ensure_ascii, indent, separators, sort_keys). indent < 0:
// none (one line, separators ", " and ": "); with an indent, "," and ": ", one item per line.
struct JsonStyle {
  bool ensure_ascii = false;
  int indent = -1;
  std::string indent_str;         // when the indent is given as a string
  std::string item_sep, key_sep;  // empty: json.dumps' defaults for the indent
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonStyle& style = {});

// ---- strings by code point (Python's str) ------------------------------------------------

// The UTF-8 text as code points; InputError for invalid UTF-8.
std::u32string to_code_points(std::string_view s);
std::string to_utf8(std::u32string_view cps);
size_t code_point_count(std::string_view s);
// Python's str.isspace() for one code point (Unicode White_Space and U+001C..U+001F).
bool py_isspace(char32_t c);
// str.strip / lstrip / rstrip: whitespace, or the code points of `chars` when given.
std::string py_strip(std::string_view s, bool left, bool right, const std::u32string* chars = nullptr);

}  // namespace seqpar::jinja
