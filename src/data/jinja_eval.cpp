// The evaluator of data/jinja.h: jinja2's scoping (a for loop's body is a fresh scope per
// iteration; if does not open one; a macro sees the scope it was defined in, as it is when the
// macro is called), undefined values that print as "" but fail when used, and Python's operators.
#include <cmath>
#include <limits>

#include "core/error.h"
#include "data/jinja.h"
#include "data/jinja_ast.h"

namespace seqpar::jinja {

namespace {

constexpr size_t kMaxOutputBytes = size_t{256} << 20;  // one render's text
constexpr int kMaxMacroDepth = 100;
constexpr int64_t kMaxRange = 1'000'000;

}  // namespace

struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent)
      for (auto it = s->vars.rbegin(); it != s->vars.rend(); ++it)
        if (it->first == name) return &it->second;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, x] : vars)
      if (k == name) {
        x = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};

struct Ctx {
  std::string* out = nullptr;
  std::vector<std::pair<size_t, size_t>>* generation = nullptr;  // null while output is captured
  Scope* scope = nullptr;
  Scope* top = nullptr;
  const Dict* variables = nullptr;
  const Dict* globals = nullptr;
  int depth = 0;
  int line = 0;

  Value lookup(const std::string& name) const {
    if (const Value* v = scope->find(name)) return *v;
    if (const Value* v = variables->find(name)) return *v;
    if (const Value* v = globals->find(name)) return *v;
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }
  void write(const std::string& s) {
    if (out->size() + s.size() > kMaxOutputBytes)
      throw InputError(fmt::format("the rendered text exceeds {} MiB", kMaxOutputBytes >> 20));
    *out += s;
  }
};

namespace {

Flow exec_body(const Body& body, Ctx& ctx) {
  for (const StmtPtr& s : body) {
    const Flow f = s->exec(ctx);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

// Renders `body` into a string of its own (a macro call, a {% set %} block).
std::string capture(const Body& body, Ctx& ctx) {
  std::string buf;
  std::string* saved_out = ctx.out;
  auto* saved_gen = ctx.generation;
  ctx.out = &buf;
  ctx.generation = nullptr;
  try {
    exec_body(body, ctx);
  } catch (...) {
    ctx.out = saved_out;
    ctx.generation = saved_gen;
    throw;
  }
  ctx.out = saved_out;
  ctx.generation = saved_gen;
  return buf;
}

CallArgs eval_args(const std::vector<Arg>& args, Ctx& ctx) {
  CallArgs a;
  for (const Arg& x : args) {
    if (x.name.empty()) {
      a.pos.push_back(x.value->eval(ctx));
    } else {
      a.kw.emplace_back(x.name, x.value->eval(ctx));
    }
  }
  return a;
}

void assign(const Target& t, Value v, Ctx& ctx) {
  if (!t.attr.empty()) {
    const Value ns = ctx.lookup(t.names[0]);
    if (!ns.is_namespace())
      throw InputError(fmt::format("cannot assign attribute '{}' on '{}', which is not a namespace() but {}", t.attr,
                                   t.names[0], ns.type_name()));
    ns.nspace().set(t.attr, std::move(v));
    return;
  }
  if (!t.unpack) {
    ctx.scope->set(t.names[0], std::move(v));
    return;
  }
  const List items = iterate(v, "unpacking");
  if (items.size() != t.names.size())
    throw InputError(fmt::format("{} values to unpack (expected {}, got {})",
                                 items.size() < t.names.size() ? "not enough" : "too many", t.names.size(),
                                 items.size()));
  for (size_t i = 0; i < items.size(); ++i) ctx.scope->set(t.names[i], items[i]);
}

void need_defined(const Value& v) {
  if (v.is_undefined()) undefined_error(v);
}

void check_overflow(bool overflow, const char* op) {
  if (overflow) throw InputError(fmt::format("integer overflow in '{}' (seqpar's integers are 64-bit)", op));
}

Value arith(const std::string& op, const Value& l, const Value& r) {
  need_defined(l);
  need_defined(r);
  auto unsupported = [&]() -> Value {
    throw InputError(
        fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, l.type_name(), r.type_name()));
  };
  if (op == "+") {
    if (l.is_string() && r.is_string()) return Value::string(l.str() + r.str());
    if (l.is_list() && r.is_list() && l.is_tuple() == r.is_tuple()) {
      List out = l.items();
      out.insert(out.end(), r.items().begin(), r.items().end());
      return Value::list(std::move(out), l.is_tuple());
    }
    if (l.is_string() || r.is_string())
      throw InputError(
          fmt::format("can only concatenate str (not \"{}\") to str", l.is_string() ? r.type_name() : l.type_name()));
  }
  if (op == "*" && ((l.is_string() || l.is_list()) && (r.is_int() || r.is_bool()))) {
    const int64_t n = std::max<int64_t>(0, r.as_int());
    const size_t unit = l.is_string() ? l.str().size() : l.items().size();
    if (unit && static_cast<uint64_t>(n) * unit > kMaxOutputBytes) throw InputError("repetition too large");
    if (l.is_string()) {
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += l.str();
      return Value::string(out);
    }
    List out;
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), l.items().begin(), l.items().end());
    return Value::list(std::move(out), l.is_tuple());
  }
  if (op == "%" && l.is_string()) throw InputError("'%' string formatting is not supported");
  if (!l.is_number() || !r.is_number()) return unsupported();
  const bool ints = !l.is_float() && !r.is_float();
  if (op == "/") {
    if (r.as_float() == 0) throw InputError("division by zero");
    return Value::number(l.as_float() / r.as_float());
  }
  if (ints) {
    const int64_t a = l.as_int(), b = r.as_int();
    int64_t res = 0;
    if (op == "+" || op == "-" || op == "*") {
      check_overflow(op == "+"   ? __builtin_add_overflow(a, b, &res)
                     : op == "-" ? __builtin_sub_overflow(a, b, &res)
                                 : __builtin_mul_overflow(a, b, &res),
                     op.c_str());
      return Value::integer(res);
    }
    if (op == "//" || op == "%") {
      if (b == 0) throw InputError("integer division or modulo by zero");
      int64_t q = a / b, m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) {  // Python floors
        --q;
        m += b;
      }
      return Value::integer(op == "//" ? q : m);
    }
    if (op == "**") {
      if (b >= 0) {
        int64_t acc = 1;
        for (int64_t i = 0; i < b; ++i) check_overflow(__builtin_mul_overflow(acc, a, &acc), "**");
        return Value::integer(acc);
      }
      return Value::number(std::pow(static_cast<double>(a), static_cast<double>(b)));
    }
  }
  const double a = l.as_float(), b = r.as_float();
  if (op == "+") return Value::number(a + b);
  if (op == "-") return Value::number(a - b);
  if (op == "*") return Value::number(a * b);
  if (op == "**") return Value::number(std::pow(a, b));
  if (op == "//" || op == "%") {
    if (b == 0) throw InputError("float division or modulo by zero");
    const double q = std::floor(a / b);
    return Value::number(op == "//" ? q : a - q * b);
  }
  return unsupported();
}

bool contains(const Value& container, const Value& x) {
  if (container.is_string()) {
    if (!x.is_string())
      throw InputError(fmt::format("'in <string>' requires string as left operand, not {}", x.type_name()));
    return container.str().find(x.str()) != std::string::npos;
  }
  if (container.is_dict()) return container.dict().find(x) != nullptr;
  if (container.is_list())
    return std::any_of(container.items().begin(), container.items().end(), [&](const Value& e) { return py_eq(e, x); });
  if (container.is_undefined()) return false;
  throw InputError(fmt::format("argument of type '{}' is not iterable", container.type_name()));
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return py_eq(a, b);
  if (op == "!=") return !py_eq(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  need_defined(a);
  need_defined(b);
  if (op == "<") return py_lt(a, b);
  if (op == ">") return py_lt(b, a);
  if (op == "<=") return py_lt(a, b) || py_eq(a, b);
  if (op == ">=") return py_lt(b, a) || py_eq(a, b);
  throw InputError(fmt::format("unknown comparison '{}'", op));
}

Value loop_object(const List& items, size_t i) {
  const int64_t n = static_cast<int64_t>(items.size()), k = static_cast<int64_t>(i);
  Dict d;
  d.set(Value::string("index"), Value::integer(k + 1));
  d.set(Value::string("index0"), Value::integer(k));
  d.set(Value::string("revindex"), Value::integer(n - k));
  d.set(Value::string("revindex0"), Value::integer(n - k - 1));
  d.set(Value::string("first"), Value::boolean(k == 0));
  d.set(Value::string("last"), Value::boolean(k == n - 1));
  d.set(Value::string("length"), Value::integer(n));
  d.set(Value::string("depth"), Value::integer(1));
  d.set(Value::string("depth0"), Value::integer(0));
  if (i > 0) d.set(Value::string("previtem"), items[i - 1]);
  if (i + 1 < items.size()) d.set(Value::string("nextitem"), items[i + 1]);
  d.set(Value::string("cycle"), Value::callable("loop.cycle", [k](const CallArgs& a) {
          if (a.pos.empty()) throw InputError("loop.cycle() takes at least one value");
          return a.pos[static_cast<size_t>(k) % a.pos.size()];
        }));
  return Value::dict(std::move(d));
}

}  // namespace

// ---- expressions -------------------------------------------------------------------------

Value Literal::eval(Ctx&) const { return value; }

Value NameExpr::eval(Ctx& ctx) const { return ctx.lookup(name); }

Value ListExpr::eval(Ctx& ctx) const {
  List l;
  l.reserve(items.size());
  for (const auto& e : items) l.push_back(e->eval(ctx));
  return Value::list(std::move(l), tuple);
}

Value DictExpr::eval(Ctx& ctx) const {
  Dict d;
  for (const auto& [k, v] : items) {
    Value key = k->eval(ctx);
    if (!(key.is_string() || key.is_number() || key.is_none() || key.is_tuple()))
      throw InputError(fmt::format("unhashable type: '{}'", key.type_name()));
    d.set(std::move(key), v->eval(ctx));
  }
  return Value::dict(std::move(d));
}

Value AttrExpr::eval(Ctx& ctx) const { return get_attr(obj->eval(ctx), name); }

Value ItemExpr::eval(Ctx& ctx) const {
  const Value o = obj->eval(ctx);
  return get_item(o, index->eval(ctx));
}

Value SliceExpr::eval(Ctx& ctx) const {
  const Value o = obj->eval(ctx);
  auto part = [&](const ExprPtr& e) { return e ? e->eval(ctx) : Value::none(); };
  return get_slice(o, part(start), part(stop), part(step));
}

Value CallExpr::eval(Ctx& ctx) const {
  const Value fn = callee->eval(ctx);
  ctx.line = line;
  if (fn.is_undefined()) undefined_error(fn);
  if (!fn.is_callable()) throw InputError(fmt::format("'{}' object is not callable", fn.type_name()));
  const CallArgs args = eval_args(this->args, ctx);
  ctx.line = line;
  return fn.fn().fn(args);
}

Value FilterExpr::apply(Ctx& ctx, const Value& v) const {
  const CallArgs a = eval_args(args, ctx);
  ctx.line = line;
  try {
    return apply_filter(name, v, a);
  } catch (const InputError& e) {
    throw InputError(fmt::format("filter '{}': {}", name, e.what()));
  }
}

Value FilterExpr::eval(Ctx& ctx) const { return apply(ctx, value->eval(ctx)); }

Value TestExpr::eval(Ctx& ctx) const {
  const Value v = value->eval(ctx);
  const CallArgs a = eval_args(args, ctx);
  ctx.line = line;
  return Value::boolean(apply_test(name, v, a) != negated);
}

Value UnaryExpr::eval(Ctx& ctx) const {
  const Value v = operand->eval(ctx);
  if (op == 'n') return Value::boolean(!v.truthy());
  ctx.line = line;
  need_defined(v);
  if (!v.is_number()) throw InputError(fmt::format("bad operand type for unary {}: '{}'", op, v.type_name()));
  if (op == '+') return v.is_float() ? v : Value::integer(v.as_int());
  if (v.is_float()) return Value::number(-v.as_float());
  if (v.as_int() == std::numeric_limits<int64_t>::min()) throw InputError("integer overflow in unary '-'");
  return Value::integer(-v.as_int());
}

Value BinaryExpr::eval(Ctx& ctx) const {
  const Value l = left->eval(ctx);
  if (op == "and") return l.truthy() ? right->eval(ctx) : l;
  if (op == "or") return l.truthy() ? l : right->eval(ctx);
  const Value r = right->eval(ctx);
  ctx.line = line;
  if (op == "~") return Value::string(to_str(l) + to_str(r));
  return arith(op, l, r);
}

Value CompareExpr::eval(Ctx& ctx) const {
  Value a = first->eval(ctx);
  for (const auto& [op, e] : rest) {
    Value b = e->eval(ctx);
    ctx.line = line;
    if (!compare(op, a, b)) return Value::boolean(false);
    a = std::move(b);
  }
  return Value::boolean(true);
}

Value CondExpr::eval(Ctx& ctx) const {
  if (cond->eval(ctx).truthy()) return then->eval(ctx);
  if (otherwise) return otherwise->eval(ctx);
  return Value::undefined("the conditional expression had no else branch");
}

// ---- statements --------------------------------------------------------------------------

Flow TextStmt::exec(Ctx& ctx) const {
  ctx.write(text);
  return Flow::kNormal;
}

Flow PrintStmt::exec(Ctx& ctx) const {
  ctx.line = line;
  const Value v = expr->eval(ctx);
  ctx.write(to_str(v));
  return Flow::kNormal;
}

Flow IfStmt::exec(Ctx& ctx) const {
  for (const auto& [cond, body] : branches) {
    ctx.line = cond->line;
    if (cond->eval(ctx).truthy()) return exec_body(body, ctx);
  }
  return exec_body(otherwise, ctx);
}

Flow ForStmt::exec(Ctx& ctx) const {
  ctx.line = line;
  List items = iterate(iter->eval(ctx), "for loop");
  if (filter) {  // for x in xs if cond: the condition sees the loop variable, not `loop`
    List kept;
    for (const Value& x : items) {
      Scope s{ctx.scope, {}};
      Scope* saved = ctx.scope;
      ctx.scope = &s;
      assign(target, x, ctx);
      const bool keep = filter->eval(ctx).truthy();
      ctx.scope = saved;
      if (keep) kept.push_back(x);
    }
    items = std::move(kept);
  }
  Scope* saved = ctx.scope;
  try {
    for (size_t i = 0; i < items.size(); ++i) {
      Scope s{saved, {}};
      ctx.scope = &s;
      s.set("loop", loop_object(items, i));
      ctx.line = line;
      assign(target, items[i], ctx);
      const Flow f = exec_body(body, ctx);
      ctx.scope = saved;
      if (f == Flow::kBreak) break;
    }
    if (items.empty()) {
      Scope s{saved, {}};
      ctx.scope = &s;
      exec_body(otherwise, ctx);
    }
  } catch (...) {
    ctx.scope = saved;
    throw;
  }
  ctx.scope = saved;
  return Flow::kNormal;
}

Flow SetStmt::exec(Ctx& ctx) const {
  ctx.line = line;
  assign(target, value->eval(ctx), ctx);
  return Flow::kNormal;
}

Flow SetBlockStmt::exec(Ctx& ctx) const {
  ctx.line = line;
  Value v = Value::string(capture(body, ctx));
  for (const auto& f : filters) v = f->apply(ctx, v);
  assign(target, std::move(v), ctx);
  return Flow::kNormal;
}

Flow MacroStmt::exec(Ctx& ctx) const {
  ctx.line = line;
  if (ctx.scope != ctx.top) throw InputError(fmt::format("the macro '{}' must be defined at the top level", name));
  Ctx* c = &ctx;
  Scope* defined_in = ctx.scope;
  const MacroStmt* m = this;
  ctx.scope->set(
      name, Value::callable("macro '" + name + "'", [c, defined_in, m](const CallArgs& a) {
        if (a.pos.size() > m->params.size())
          throw InputError(fmt::format("macro '{}' takes not more than {} argument(s)", m->name, m->params.size()));
        if (c->depth >= kMaxMacroDepth)
          throw InputError(fmt::format("macro calls nest deeper than {}", kMaxMacroDepth));
        Scope s{defined_in, {}};
        Scope* saved = c->scope;
        c->scope = &s;
        ++c->depth;
        std::string text;
        try {
          for (const auto& kv : a.kw) {
            const auto& k = kv.first;  // (not a structured binding: clang 14 cannot capture one)
            if (std::none_of(m->params.begin(), m->params.end(), [&](const auto& p) { return p.first == k; }))
              throw InputError(fmt::format("macro '{}' has no argument '{}'", m->name, k));
          }
          for (size_t i = 0; i < m->params.size(); ++i) {
            const auto& [pname, def] = m->params[i];
            const Value* kw = nullptr;
            for (const auto& [k, v] : a.kw)
              if (k == pname) kw = &v;
            if (i < a.pos.size()) {
              if (kw) throw InputError(fmt::format("macro '{}' got multiple values for '{}'", m->name, pname));
              s.set(pname, a.pos[i]);
            } else if (kw) {
              s.set(pname, *kw);
            } else if (def) {
              s.set(pname, def->eval(*c));
            } else {  // jinja2 leaves a missing argument undefined
              s.set(pname, Value::undefined(fmt::format("the argument '{}' of macro '{}' is missing", pname, m->name)));
            }
          }
          text = capture(m->body, *c);
        } catch (...) {
          c->scope = saved;
          --c->depth;
          throw;
        }
        c->scope = saved;
        --c->depth;
        return Value::string(std::move(text));
      }));
  return Flow::kNormal;
}

Flow GenerationStmt::exec(Ctx& ctx) const {
  ctx.line = line;
  if (!ctx.generation)
    throw InputError(
        "a {% generation %} block inside a {% set %} block is not supported: its text would not land "
        "where the block is");
  const size_t begin = ctx.out->size();
  const Flow f = exec_body(body, ctx);
  ctx.generation->emplace_back(begin, ctx.out->size());
  return f;
}

Flow LoopControlStmt::exec(Ctx&) const { return flow; }

// ---- rendering ---------------------------------------------------------------------------

namespace {

Dict make_globals(const RenderOptions& opt) {
  Dict g;
  g.set(Value::string("raise_exception"), Value::callable("raise_exception", [](const CallArgs& a) -> Value {
          throw InputError(fmt::format("raise_exception: {}", a.pos.empty() ? std::string() : to_str(a.pos[0])));
        }));
  const std::tm now = opt.now;
  g.set(Value::string("strftime_now"), Value::callable("strftime_now", [now](const CallArgs& a) {
          if (a.pos.size() != 1 || !a.pos[0].is_string()) throw InputError("strftime_now() takes one format string");
          char buf[512];
          const size_t n = std::strftime(buf, sizeof buf, a.pos[0].str().c_str(), &now);
          if (n == 0 && !a.pos[0].str().empty()) throw InputError("strftime_now(): the formatted date is too long");
          return Value::string(std::string(buf, n));
        }));
  g.set(Value::string("range"), Value::callable("range", [](const CallArgs& a) {
          if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3) throw InputError("range() takes 1 to 3 integers");
          for (const Value& v : a.pos)
            if (!v.is_int() && !v.is_bool()) throw InputError("range() takes integers");
          int64_t start = 0, stop = 0, step = 1;
          if (a.pos.size() == 1) {
            stop = a.pos[0].as_int();
          } else {
            start = a.pos[0].as_int();
            stop = a.pos[1].as_int();
            if (a.pos.size() == 3) step = a.pos[2].as_int();
          }
          if (step == 0) throw InputError("range() arg 3 must not be zero");
          const double n =
              std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
          if (n > static_cast<double>(kMaxRange))
            throw InputError(fmt::format("range() longer than {} items", kMaxRange));
          List out;
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::integer(i));
          return Value::list(std::move(out));
        }));
  g.set(Value::string("namespace"), Value::callable("namespace", [](const CallArgs& a) {
          auto ns = std::make_shared<Namespace>();
          if (a.pos.size() > 1) throw InputError("namespace() takes at most one mapping");
          if (!a.pos.empty()) {
            if (!a.pos[0].is_dict()) throw InputError("namespace() takes a mapping");
            for (const auto& [k, v] : a.pos[0].dict().items) ns->set(to_str(k), v);
          }
          for (const auto& [k, v] : a.kw) {
            if (!k.empty() && k[0] == '_')
              throw InputError(fmt::format("namespace attributes may not start with '_' (got '{}')", k));
            ns->set(k, v);
          }
          return Value::ns(std::move(ns));
        }));
  g.set(Value::string("dict"), Value::callable("dict", [](const CallArgs& a) {
          Dict d;
          if (a.pos.size() > 1) throw InputError("dict() takes at most one mapping");
          if (!a.pos.empty()) {
            if (a.pos[0].is_dict()) {
              d = a.pos[0].dict();
            } else {
              for (const Value& pair : iterate(a.pos[0], "dict()")) {
                const List kv = iterate(pair, "dict()");
                if (kv.size() != 2) throw InputError("dict() takes pairs");
                d.set(kv[0], kv[1]);
              }
            }
          }
          for (const auto& [k, v] : a.kw) d.set(Value::string(k), v);
          return Value::dict(std::move(d));
        }));
  return g;
}

}  // namespace

RenderResult Template::render(const Dict& variables, const RenderOptions& options) const {
  RenderResult r;
  const Dict globals = make_globals(options);
  Scope top;
  Ctx ctx;
  ctx.out = &r.text;
  ctx.generation = &r.generation;
  ctx.scope = &top;
  ctx.top = &top;
  ctx.variables = &variables;
  ctx.globals = &globals;
  try {
    exec_body(static_cast<const Root&>(*root_).body, ctx);
  } catch (const InputError& e) {
    throw InputError(fmt::format("chat template {}:{}: {}", name_, ctx.line, e.what()));
  }
  return r;
}

}  // namespace seqpar::jinja
