#include "engine/tokenizer/jinja_eval.h"

#include <cstdint>
#include <limits>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/jinja_builtins.h"

namespace mlaserve::jinja {
namespace {

#define JINJA_ASSIGN(lhs, expr)                   \
  auto lhs##_or = (expr);                         \
  if (!lhs##_or.ok()) return lhs##_or.status();   \
  auto lhs = std::move(*lhs##_or)

enum class Flow { kNormal, kBreak, kContinue };

constexpr int kMaxDepth = 200;
constexpr size_t kMaxOutputBytes = 64 << 20;

class Evaluator {
 public:
  explicit Evaluator(const Value& globals) { scopes_.push_back(globals.dict ? *globals.dict : ValueDict{}); }

  absl::Status Exec(const Body& body, std::string* out, Flow* flow) {
    for (const auto& s : body) {
      if (auto st = ExecOne(*s, out, flow); !st.ok()) return st;
      if (*flow != Flow::kNormal) return absl::OkStatus();
      if (out->size() > kMaxOutputBytes) return absl::ResourceExhaustedError("chat template output too large");
    }
    return absl::OkStatus();
  }

 private:
  absl::Status At(int line, const absl::Status& s) {
    if (s.ok() || s.message().rfind("chat template", 0) == 0 || raised_) return s;
    return absl::Status(s.code(), absl::StrCat("chat template line ", line, ": ", s.message()));
  }

  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      for (auto& [k, v] : *it) if (k == name) return v;
    }
    return Value::Undefined(name);
  }
  void Assign(const std::string& name, Value v) {
    for (auto& [k, old] : scopes_.back()) {
      if (k == name) { old = std::move(v); return; }
    }
    scopes_.back().emplace_back(name, std::move(v));
  }

  absl::Status ExecOne(const Stmt& s, std::string* out, Flow* flow) {
    switch (s.kind) {
      case StmtKind::kText: *out += s.text; return absl::OkStatus();
      case StmtKind::kOutput: {
        auto v = Eval(*s.expr);
        if (!v.ok()) return At(s.line, v.status());
        *out += ToStr(*v);
        return absl::OkStatus();
      }
      case StmtKind::kIf:
        for (size_t k = 0; k < s.conditions.size(); ++k) {
          auto c = Eval(*s.conditions[k]);
          if (!c.ok()) return At(s.line, c.status());
          if (Truthy(*c)) return Exec(s.bodies[k], out, flow);
        }
        if (s.has_else) return Exec(s.bodies.back(), out, flow);
        return absl::OkStatus();
      case StmtKind::kFor: return At(s.line, ExecFor(s, out));
      case StmtKind::kSet: {
        auto v = Eval(*s.expr);
        if (!v.ok()) return At(s.line, v.status());
        return At(s.line, SetTarget(s, std::move(*v)));
      }
      case StmtKind::kSetBlock: {
        std::string text;
        Flow f = Flow::kNormal;
        if (auto st = Exec(s.bodies[0], &text, &f); !st.ok()) return st;
        return SetTarget(s, Value::Str(text));
      }
      case StmtKind::kMacro: Assign(s.targets[0], MakeMacro(s)); return absl::OkStatus();
      case StmtKind::kBreak: *flow = Flow::kBreak; return absl::OkStatus();
      case StmtKind::kContinue: *flow = Flow::kContinue; return absl::OkStatus();
      case StmtKind::kBody: return Exec(s.bodies[0], out, flow);
    }
    return absl::OkStatus();
  }

  absl::Status SetTarget(const Stmt& s, Value v) {
    if (!s.attribute) { Assign(s.targets[0], std::move(v)); return absl::OkStatus(); }
    Value ns = Lookup(s.targets[0]);
    if (ns.kind != Kind::kDict || !ns.is_namespace) {
      return absl::InvalidArgumentError("cannot assign attribute on non-namespace object");
    }
    ns.Set(s.targets[1], std::move(v));
    return absl::OkStatus();
  }

  absl::Status ExecFor(const Stmt& s, std::string* out) {
    JINJA_ASSIGN(iterable, Eval(*s.expr));
    JINJA_ASSIGN(all, Iterate(iterable));
    ValueList items;
    scopes_.emplace_back();
    for (auto& item : all) {
      if (!s.conditions.empty()) {
        if (auto st = Bind(s.targets, item); !st.ok()) { scopes_.pop_back(); return st; }
        auto c = Eval(*s.conditions[0]);
        if (!c.ok()) { scopes_.pop_back(); return c.status(); }
        if (!Truthy(*c)) continue;
      }
      items.push_back(std::move(item));
    }
    scopes_.pop_back();
    if (items.empty()) {
      if (!s.has_else) return absl::OkStatus();
      Flow f = Flow::kNormal;
      return Exec(s.bodies[1], out, &f);
    }
    int64_t n = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < n; ++k) {
      scopes_.emplace_back();
      ValueDict loop = {{"index", Value::Int(k + 1)},        {"index0", Value::Int(k)},
                        {"revindex", Value::Int(n - k)},     {"revindex0", Value::Int(n - k - 1)},
                        {"first", Value::Bool(k == 0)},      {"last", Value::Bool(k == n - 1)},
                        {"length", Value::Int(n)},
                        {"previtem", k > 0 ? items[k - 1] : Value::Undefined("previtem")},
                        {"nextitem", k + 1 < n ? items[k + 1] : Value::Undefined("nextitem")}};
      Assign("loop", Value::Dict(std::move(loop)));
      absl::Status st = Bind(s.targets, items[k]);
      Flow f = Flow::kNormal;
      if (st.ok()) st = Exec(s.bodies[0], out, &f);
      scopes_.pop_back();
      if (!st.ok()) return st;
      if (f == Flow::kBreak) break;
    }
    return absl::OkStatus();
  }

  absl::Status Bind(const std::vector<std::string>& targets, const Value& item) {
    if (targets.size() == 1) { Assign(targets[0], item); return absl::OkStatus(); }
    JINJA_ASSIGN(parts, Iterate(item));
    if (parts.size() != targets.size()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot unpack ", parts.size(), " values into ",
                                                     targets.size(), " loop variables"));
    }
    for (size_t k = 0; k < targets.size(); ++k) Assign(targets[k], parts[k]);
    return absl::OkStatus();
  }

  Value MakeMacro(const Stmt& s) {
    const Stmt* def = &s;
    return Value::Function([this, def](ValueList args, KwArgs kwargs) -> absl::StatusOr<Value> {
      if (++depth_ > kMaxDepth) { --depth_; return absl::InvalidArgumentError("macro recursion too deep"); }
      // A macro sees the template's top level and its own parameters, not the caller's locals.
      std::vector<ValueDict> saved(scopes_.begin() + std::min<size_t>(1, scopes_.size()), scopes_.end());
      scopes_.resize(std::min<size_t>(1, scopes_.size()));
      scopes_.emplace_back();
      absl::Status st;
      for (size_t k = 0; k < def->params.size() && st.ok(); ++k) {
        const auto& [name, default_expr] = def->params[k];
        Value v = Value::Undefined(name);
        bool given = false;
        if (k < args.size()) { v = args[k]; given = true; }
        for (const auto& [kn, kv] : kwargs) if (kn == name) { v = kv; given = true; }
        if (!given && default_expr) {
          auto d = Eval(*default_expr);
          if (!d.ok()) st = d.status(); else v = *d;
        }
        Assign(name, v);
      }
      std::string out;
      Flow f = Flow::kNormal;
      if (st.ok()) st = Exec(def->bodies[0], &out, &f);
      scopes_.pop_back();
      scopes_.insert(scopes_.end(), saved.begin(), saved.end());
      --depth_;
      if (!st.ok()) return st;
      return Value::Str(out);
    });
  }

  absl::StatusOr<Value> Eval(const Expr& e) {
    if (++depth_ > kMaxDepth) { --depth_; return absl::InvalidArgumentError("expression nesting too deep"); }
    auto r = EvalInner(e);
    --depth_;
    return r;
  }

  absl::Status EvalArgs(const Expr& e, size_t first, ValueList* args, KwArgs* kwargs) {
    for (size_t k = first; k < e.args.size(); ++k) {
      JINJA_ASSIGN(v, Eval(*e.args[k]));
      args->push_back(std::move(v));
    }
    for (const auto& [name, x] : e.kwargs) {
      JINJA_ASSIGN(v, Eval(*x));
      kwargs->emplace_back(name, std::move(v));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Value> EvalInner(const Expr& e);
  absl::StatusOr<Value> CallGlobal(const std::string& name, ValueList args, KwArgs kwargs);
  absl::StatusOr<Value> HigherOrderFilter(const Expr& e, const Value& v, ValueList args, KwArgs kwargs);

  std::vector<ValueDict> scopes_;
  int depth_ = 0;
  bool raised_ = false;

};

absl::StatusOr<Value> Evaluator::EvalInner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.value;
    case ExprKind::kName: return Lookup(e.name);
    case ExprKind::kList: case ExprKind::kTuple: {
      ValueList out;
      for (const auto& x : e.args) {
        JINJA_ASSIGN(v, Eval(*x));
        out.push_back(std::move(v));
      }
      return Value::List(std::move(out));
    }
    case ExprKind::kDict: {
      Value d = Value::Dict();
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        JINJA_ASSIGN(key, Eval(*e.args[k]));
        JINJA_ASSIGN(v, Eval(*e.args[k + 1]));
        if (key.kind != Kind::kString) return absl::InvalidArgumentError("only string dict keys are supported");
        d.Set(key.s, std::move(v));
      }
      return d;
    }
    case ExprKind::kAttr: {
      JINJA_ASSIGN(obj, Eval(*e.args[0]));
      return GetAttr(obj, e.name);
    }
    case ExprKind::kItem: {
      JINJA_ASSIGN(obj, Eval(*e.args[0]));
      JINJA_ASSIGN(key, Eval(*e.args[1]));
      return GetItem(obj, key);
    }
    case ExprKind::kSlice: {
      JINJA_ASSIGN(obj, Eval(*e.args[0]));
      Value parts[3];
      for (int k = 0; k < 3; ++k) {
        if (!e.args[k + 1]) continue;
        JINJA_ASSIGN(v, Eval(*e.args[k + 1]));
        parts[k] = std::move(v);
      }
      return Slice(obj, parts[0], parts[1], parts[2]);
    }
    case ExprKind::kCall: {
      ValueList args;
      KwArgs kwargs;
      if (auto st = EvalArgs(e, 1, &args, &kwargs); !st.ok()) return st;
      Value callee = Lookup(e.args[0]->name);
      if (callee.kind == Kind::kCallable) return (*callee.fn)(std::move(args), std::move(kwargs));
      if (callee.defined()) return absl::InvalidArgumentError(absl::StrCat("'", TypeName(callee), "' object is not callable"));
      return CallGlobal(e.args[0]->name, std::move(args), std::move(kwargs));
    }
    case ExprKind::kMethod: {
      JINJA_ASSIGN(obj, Eval(*e.args[0]));
      ValueList args;
      KwArgs kwargs;
      if (auto st = EvalArgs(e, 1, &args, &kwargs); !st.ok()) return st;
      return CallMethod(obj, e.name, args, kwargs);
    }
    case ExprKind::kFilter: {
      JINJA_ASSIGN(v, Eval(*e.args[0]));
      ValueList args;
      KwArgs kwargs;
      if (auto st = EvalArgs(e, 1, &args, &kwargs); !st.ok()) return st;
      if (e.name == "map" || e.name == "select" || e.name == "reject" || e.name == "selectattr" ||
          e.name == "rejectattr") {
        return HigherOrderFilter(e, v, std::move(args), std::move(kwargs));
      }
      return ApplyFilter(e.name, v, args, kwargs);
    }
    case ExprKind::kTest: {
      JINJA_ASSIGN(v, Eval(*e.args[0]));
      ValueList args;
      KwArgs kwargs;
      if (auto st = EvalArgs(e, 1, &args, &kwargs); !st.ok()) return st;
      JINJA_ASSIGN(r, ApplyTest(e.name, v, args));
      return Value::Bool(r != e.negate);
    }
    case ExprKind::kUnary: {
      JINJA_ASSIGN(v, Eval(*e.args[0]));
      if (e.name == "not") return Value::Bool(!Truthy(v));
      if (v.kind == Kind::kInt) {
        if (e.name != "-") return v;
        if (v.i == std::numeric_limits<int64_t>::min()) return IntegerOverflow("-");
        return Value::Int(-v.i);
      }
      if (v.kind == Kind::kFloat) return Value::Float(e.name == "-" ? -v.f : v.f);
      if (v.kind == Kind::kBool) return Value::Int(e.name == "-" ? -int64_t{v.b} : int64_t{v.b});
      return absl::InvalidArgumentError(absl::StrCat("bad operand type for unary ", e.name, ": '", TypeName(v), "'"));
    }
    case ExprKind::kBinary: {
      JINJA_ASSIGN(a, Eval(*e.args[0]));
      JINJA_ASSIGN(b, Eval(*e.args[1]));
      if (e.name != "~" && e.name != "==" && e.name != "!=" && e.name != "in" && e.name != "not in" &&
          (!a.defined() || !b.defined())) {
        const Value& u = a.defined() ? b : a;
        return absl::InvalidArgumentError(absl::StrCat("'", u.s.empty() ? "value" : u.s, "' is undefined"));
      }
      return BinaryOp(e.name, a, b);
    }
    case ExprKind::kAnd: case ExprKind::kOr: {
      JINJA_ASSIGN(a, Eval(*e.args[0]));
      if (Truthy(a) == (e.kind == ExprKind::kOr)) return a;
      return Eval(*e.args[1]);
    }
    case ExprKind::kCond: {
      JINJA_ASSIGN(c, Eval(*e.args[0]));
      if (Truthy(c)) return Eval(*e.args[1]);
      if (e.args[2]) return Eval(*e.args[2]);
      return Value::Undefined();
    }
  }
  return absl::InternalError("bad expression");
}

absl::StatusOr<Value> Evaluator::HigherOrderFilter(const Expr& e, const Value& v, ValueList args,
                                                   KwArgs kwargs) {
  JINJA_ASSIGN(items, Iterate(v));
  ValueList out;
  if (e.name == "map") {
    std::string attr;
    Value def = Value::Undefined();
    bool has_default = false;
    for (const auto& [k, x] : kwargs) {
      if (k == "attribute") attr = ToStr(x);
      if (k == "default") { def = x; has_default = true; }
    }
    for (const auto& item : items) {
      if (!attr.empty()) {
        JINJA_ASSIGN(x, GetAttr(item, attr));
        out.push_back(!x.defined() && has_default ? def : x);
      } else {
        if (args.empty() || args[0].kind != Kind::kString) return absl::InvalidArgumentError("map needs a filter name or attribute=");
        if (!IsKnownFilter(args[0].s)) return absl::InvalidArgumentError(absl::StrCat("unsupported filter '", args[0].s, "'"));
        ValueList rest(args.begin() + 1, args.end());
        JINJA_ASSIGN(x, ApplyFilter(args[0].s, item, rest, {}));
        out.push_back(std::move(x));
      }
    }
    return Value::List(std::move(out));
  }
  bool by_attr = e.name == "selectattr" || e.name == "rejectattr";
  bool keep_when = e.name == "select" || e.name == "selectattr";
  size_t test_at = by_attr ? 1 : 0;
  std::string test = args.size() > test_at ? ToStr(args[test_at]) : "";
  if (!test.empty() && !IsKnownTest(test)) return absl::InvalidArgumentError(absl::StrCat("unsupported test '", test, "'"));
  ValueList test_args(args.begin() + std::min(args.size(), test_at + 1), args.end());
  for (const auto& item : items) {
    Value subject = item;
    if (by_attr) {
      if (args.empty()) return absl::InvalidArgumentError(absl::StrCat(e.name, " needs an attribute"));
      JINJA_ASSIGN(x, GetAttr(item, ToStr(args[0])));
      subject = std::move(x);
    }
    bool pass;
    if (test.empty()) {
      pass = Truthy(subject);
    } else {
      JINJA_ASSIGN(r, ApplyTest(test, subject, test_args));
      pass = r;
    }
    if (pass == keep_when) out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Evaluator::CallGlobal(const std::string& name, ValueList args, KwArgs kwargs) {
  if (name == "raise_exception") {
    raised_ = true;
    return absl::InvalidArgumentError(args.empty() ? "" : ToStr(args[0]));
  }
  if (name == "namespace" || name == "dict") {
    Value ns = Value::Dict();
    ns.is_namespace = name == "namespace";
    for (const auto& a : args) {
      if (a.kind != Kind::kDict) return absl::InvalidArgumentError(absl::StrCat(name, "() takes a mapping"));
      for (const auto& [k, v] : *a.dict) ns.Set(k, v);
    }
    for (auto& [k, v] : kwargs) ns.Set(k, std::move(v));
    return ns;
  }
  if (name == "range") {
    int64_t start = 0, stop = 0, step = 1;
    for (const auto& a : args) if (a.kind != Kind::kInt) return absl::InvalidArgumentError("range() needs integers");
    if (args.size() == 1) stop = args[0].i;
    else if (args.size() >= 2) { start = args[0].i; stop = args[1].i; if (args.size() > 2) step = args[2].i; }
    if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
    ValueList out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop;) {
      if (out.size() >= 100000) return absl::InvalidArgumentError("range too large");
      out.push_back(Value::Int(k));
      if (__builtin_add_overflow(k, step, &k)) break;  // past int64 is past stop
    }
    return Value::List(std::move(out));
  }
  return absl::InvalidArgumentError(absl::StrCat("'", name, "' is undefined"));
}

}  // namespace

absl::StatusOr<std::string> Render(const Body& body, const Value& globals) {
  Evaluator ev(globals);
  std::string out;
  Flow flow = Flow::kNormal;
  if (auto st = ev.Exec(body, &out, &flow); !st.ok()) return st;
  return out;
}

}  // namespace mlaserve::jinja
