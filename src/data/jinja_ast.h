// The syntax tree of data/jinja.h's templates (internal to the interpreter): the parser
// (jinja_parse.cpp) builds it, the evaluator (jinja_eval.cpp) runs it, and the built-in filters,
// tests and methods (jinja_builtins.cpp) are the library both use.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/jinja_value.h"

namespace seqpar::jinja {

struct Ctx;  // the evaluator's state (jinja_eval.cpp)
enum class Flow { kNormal, kBreak, kContinue };

struct Node {
  int line = 0, col = 0;  // where the construct starts in the template (1-based)
  virtual ~Node() = default;
};

struct Expr : Node {
  virtual Value eval(Ctx& ctx) const = 0;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Stmt : Node {
  virtual Flow exec(Ctx& ctx) const = 0;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Root : Node {
  Body body;
};

// ---- expressions -------------------------------------------------------------------------

struct Arg {
  std::string name;  // empty: positional
  ExprPtr value;
};

struct Literal : Expr {
  Value value;
  Value eval(Ctx& ctx) const override;
};
struct NameExpr : Expr {
  std::string name;
  Value eval(Ctx& ctx) const override;
};
struct ListExpr : Expr {
  std::vector<ExprPtr> items;
  bool tuple = false;
  Value eval(Ctx& ctx) const override;
};
struct DictExpr : Expr {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
  Value eval(Ctx& ctx) const override;
};
struct AttrExpr : Expr {  // obj.name
  ExprPtr obj;
  std::string name;
  Value eval(Ctx& ctx) const override;
};
struct ItemExpr : Expr {  // obj[index]
  ExprPtr obj, index;
  Value eval(Ctx& ctx) const override;
};
struct SliceExpr : Expr {  // obj[start:stop:step], each part optional
  ExprPtr obj, start, stop, step;
  Value eval(Ctx& ctx) const override;
};
struct CallExpr : Expr {
  ExprPtr callee;
  std::vector<Arg> args;
  Value eval(Ctx& ctx) const override;
};
struct FilterExpr : Expr {  // value | name(args); value is null in a {% set x | filter %} block
  ExprPtr value;
  std::string name;
  std::vector<Arg> args;
  Value eval(Ctx& ctx) const override;
  Value apply(Ctx& ctx, const Value& v) const;
};
struct TestExpr : Expr {  // value is [not] name(args)
  ExprPtr value;
  std::string name;
  std::vector<Arg> args;
  bool negated = false;
  Value eval(Ctx& ctx) const override;
};
struct UnaryExpr : Expr {
  char op = 0;  // 'n' not, '-' negation, '+'
  ExprPtr operand;
  Value eval(Ctx& ctx) const override;
};
struct BinaryExpr : Expr {
  std::string op;  // + - * / // % ** ~ and or
  ExprPtr left, right;
  Value eval(Ctx& ctx) const override;
};
struct CompareExpr : Expr {  // first op1 e1 op2 e2 ... (Python's chained comparison)
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> rest;  // == != < <= > >= in notin
  Value eval(Ctx& ctx) const override;
};
struct CondExpr : Expr {  // then if cond else otherwise (no else: undefined)
  ExprPtr cond, then, otherwise;
  Value eval(Ctx& ctx) const override;
};

// ---- statements --------------------------------------------------------------------------

struct TextStmt : Stmt {
  std::string text;
  Flow exec(Ctx& ctx) const override;
};
struct PrintStmt : Stmt {
  ExprPtr expr;
  Flow exec(Ctx& ctx) const override;
};
struct IfStmt : Stmt {
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif, ...
  Body otherwise;
  Flow exec(Ctx& ctx) const override;
};
// Assignment targets: one name, names to unpack (a, b), or a namespace attribute (ns.attr).
struct Target {
  std::vector<std::string> names;
  bool unpack = false;
  std::string attr;  // non-empty: names[0].attr
};
struct ForStmt : Stmt {
  Target target;
  ExprPtr iter, filter;  // filter: for x in xs if cond
  Body body, otherwise;
  Flow exec(Ctx& ctx) const override;
};
struct SetStmt : Stmt {
  Target target;
  ExprPtr value;
  Flow exec(Ctx& ctx) const override;
};
struct SetBlockStmt : Stmt {  // {% set x | filters %}body{% endset %}
  Target target;
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
  Flow exec(Ctx& ctx) const override;
};
struct MacroStmt : Stmt {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default: null when required
  Body body;
  Flow exec(Ctx& ctx) const override;
};
struct GenerationStmt : Stmt {
  Body body;
  Flow exec(Ctx& ctx) const override;
};
struct LoopControlStmt : Stmt {  // break / continue
  Flow flow = Flow::kBreak;
  Flow exec(Ctx& ctx) const override;
};

// ---- the built-in library (jinja_builtins.cpp) -------------------------------------------

bool known_filter(std::string_view name);
bool known_test(std::string_view name);
// Methods of str, dict and list the templates may call ("x".strip(), d.items(), ...).
bool known_method(std::string_view name);
// Methods refused because the immutable sandbox refuses them (append, pop, update, ...).
bool mutating_method(std::string_view name);

Value apply_filter(const std::string& name, const Value& v, const CallArgs& args);
bool apply_test(const std::string& name, const Value& v, const CallArgs& args);
// jinja2's getattr (obj.name): a method of a str, dict or list, else the item of a dict, the
// attribute of a namespace; undefined (with a hint) when there is none.
Value get_attr(const Value& obj, const std::string& name);
// jinja2's getitem (obj[key]): the item, else (for a str key) the attribute; undefined when none.
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// What iterating a value gives: a list's items, a dict's keys, a string's characters; undefined
// gives nothing. InputError for a value that is not iterable.
List iterate(const Value& v, const char* what);
// InputError "'x' is undefined" style, for an undefined value used where a value is needed.
[[noreturn]] void undefined_error(const Value& v);

}  // namespace seqpar::jinja
