// Operators of the chat-template interpreter (Python semantics). Integers are 64-bit where
// Python's are unbounded: a result out of range is an error naming the operator, never a
// wrapped value.
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/jinja_builtins.h"

namespace mlaserve::jinja {

absl::Status IntegerOverflow(std::string_view op) {
  return absl::InvalidArgumentError(
      absl::StrCat("integer overflow in '", std::string(op), "' (integers are 64-bit here)"));
}

absl::StatusOr<bool> Contains(const Value& c, const Value& item) {
  if (c.kind == Kind::kString) {
    if (item.kind != Kind::kString) return absl::InvalidArgumentError("'in <string>' requires string as left operand");
    return c.s.find(item.s) != std::string::npos;
  }
  if (c.kind == Kind::kDict && !c.is_namespace) return item.kind == Kind::kString && c.Find(item.s) != nullptr;
  auto items = Iterate(c);
  if (!items.ok()) return items.status();
  for (const auto& v : *items) if (Equal(v, item)) return true;
  return false;
}

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return Value::Bool(Equal(a, b));
  if (op == "!=") return Value::Bool(!Equal(a, b));
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    bool swap = op == ">" || op == "<=";
    auto lt = swap ? Less(b, a) : Less(a, b);
    if (!lt.ok()) return lt.status();
    return Value::Bool((op == "<" || op == ">") ? *lt : !*lt);
  }
  if (op == "in" || op == "not in") {
    auto r = Contains(b, a);
    if (!r.ok()) return r.status();
    return Value::Bool(op == "in" ? *r : !*r);
  }
  if (op == "~") return Value::Str(ToStr(a) + ToStr(b));
  auto unsupported = [&]() {
    return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", std::string(op), ": '",
                                                   TypeName(a), "' and '", TypeName(b), "'"));
  };
  auto num_like = [](const Value& v) { return v.is_number() || v.kind == Kind::kBool; };
  if (op == "+") {
    if (a.kind == Kind::kString && b.kind == Kind::kString) return Value::Str(a.s + b.s);
    if (a.kind == Kind::kList && b.kind == Kind::kList) {
      ValueList out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::List(std::move(out));
    }
  }
  if (op == "*") {
    const Value* seq = a.kind == Kind::kString || a.kind == Kind::kList ? &a : &b;
    const Value* n = seq == &a ? &b : &a;
    if ((seq->kind == Kind::kString || seq->kind == Kind::kList) && (n->kind == Kind::kInt || n->kind == Kind::kBool)) {
      int64_t times = n->kind == Kind::kBool ? n->b : n->i;
      if (times > 1000000) return absl::InvalidArgumentError("repetition too large");
      if (seq->kind == Kind::kString) {
        std::string out;
        for (int64_t k = 0; k < times; ++k) out += seq->s;
        return Value::Str(out);
      }
      ValueList out;
      for (int64_t k = 0; k < times; ++k) out.insert(out.end(), seq->list->begin(), seq->list->end());
      return Value::List(std::move(out));
    }
  }
  if (!num_like(a) || !num_like(b)) return unsupported();
  auto as_int = [](const Value& v) { return v.kind == Kind::kBool ? int64_t{v.b} : v.i; };
  auto as_f = [](const Value& v) { return v.kind == Kind::kBool ? double{v.b ? 1.0 : 0.0} : v.number(); };
  bool ints = a.kind != Kind::kFloat && b.kind != Kind::kFloat;
  double x = as_f(a), y = as_f(b);
  if (op == "/") {
    if (y == 0) return absl::InvalidArgumentError("division by zero");
    return Value::Float(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) return absl::InvalidArgumentError(op == "%" ? "modulo by zero" : "integer division or modulo by zero");
    if (ints) {
      int64_t p = as_int(a), q = as_int(b);
      if (q == -1) {  // p / -1 overflows for the most negative p
        if (op == "%") return Value::Int(0);
        if (p == std::numeric_limits<int64_t>::min()) return IntegerOverflow(op);
        return Value::Int(-p);
      }
      int64_t d = p / q, m = p % q;
      if (m != 0 && ((m < 0) != (q < 0))) { --d; m += q; }
      return Value::Int(op == "//" ? d : m);
    }
    double d = std::floor(x / y), m = x - d * y;
    return Value::Float(op == "//" ? d : m);
  }
  if (op == "**") {
    if (ints && as_int(b) >= 0) {  // by squaring, each product checked
      int64_t r = 1, base = as_int(a);
      for (int64_t e = as_int(b); e > 0; e >>= 1) {
        if ((e & 1) != 0 && __builtin_mul_overflow(r, base, &r)) return IntegerOverflow(op);
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) return IntegerOverflow(op);
      }
      return Value::Int(r);
    }
    return Value::Float(std::pow(x, y));
  }
  if (ints && (op == "+" || op == "-" || op == "*")) {
    const int64_t p = as_int(a), q = as_int(b);
    int64_t r = 0;
    const bool overflow = op == "+"   ? __builtin_add_overflow(p, q, &r)
                          : op == "-" ? __builtin_sub_overflow(p, q, &r)
                                      : __builtin_mul_overflow(p, q, &r);
    if (overflow) return IntegerOverflow(op);
    return Value::Int(r);
  }
  if (!ints) {
    if (op == "+") return Value::Float(x + y);
    if (op == "-") return Value::Float(x - y);
    if (op == "*") return Value::Float(x * y);
  }
  return unsupported();
}

}  // namespace mlaserve::jinja
