// Filters, tests and methods of the chat-template interpreter.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/jinja_builtins.h"

namespace mlaserve::jinja {
namespace {

std::string Lower(std::string s) { for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c))); return s; }
std::string Upper(std::string s) { for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c))); return s; }

const Value* Arg(const ValueList& args, const KwArgs& kwargs, size_t index, std::string_view name) {
  if (index < args.size()) return &args[index];
  for (const auto& [k, v] : kwargs) if (k == name) return &v;
  return nullptr;
}

absl::Status Bad(std::string_view what, const Value& v) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(what), " (got '", TypeName(v), "')"));
}

}  // namespace

// Defined in jinja_builtins.cc.
std::string StripImpl(const std::string& s, const Value* chars, bool left, bool right);
std::string TitleImpl(const std::string& s);
std::string CapitalizeImpl(const std::string& s);
std::string ReplaceImpl(const std::string& s, const std::string& from, const std::string& to, int64_t count);
Value SplitImpl(const std::string& s, const Value* sep, int64_t maxsplit);
absl::StatusOr<Value> ToJsonImpl(const Value& v, const ValueList& args, const KwArgs& kwargs);

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& v, const ValueList& args,
                                  const KwArgs& kwargs) {
  const Value* a0 = Arg(args, kwargs, 0, "");
  if (name == "tojson") return ToJsonImpl(v, args, kwargs);
  if (name == "safe" || name == "e" || name == "escape") return v.kind == Kind::kString ? v : Value::Str(ToStr(v));
  if (name == "string") return Value::Str(ToStr(v));
  if (name == "default" || name == "d") {
    const Value* boolean = Arg(args, kwargs, 1, "boolean");
    bool use_default = !v.defined() || (boolean && Truthy(*boolean) && !Truthy(v));
    if (use_default) return a0 ? *a0 : Value::Str("");
    return v;
  }
  if (name == "length" || name == "count") {
    if (v.kind == Kind::kString) return Value::Int(static_cast<int64_t>(CodePointCount(v.s)));
    if (v.kind == Kind::kList) return Value::Int(static_cast<int64_t>(v.list->size()));
    if (v.kind == Kind::kDict && !v.is_namespace) return Value::Int(static_cast<int64_t>(v.dict->size()));
    if (v.kind == Kind::kUndefined) return Value::Int(0);
    return Bad("object has no len()", v);
  }
  if (name == "items") {
    if (v.kind == Kind::kUndefined) return Value::List();
    if (v.kind != Kind::kDict || v.is_namespace) return Bad("items filter needs a mapping", v);
    ValueList out;
    for (const auto& [k, x] : *v.dict) out.push_back(Value::List({Value::Str(k), x}));
    return Value::List(std::move(out));
  }
  if (name == "abs") {
    if (v.kind == Kind::kInt) {
      if (v.i == std::numeric_limits<int64_t>::min()) return IntegerOverflow("abs");
      return Value::Int(v.i < 0 ? -v.i : v.i);
    }
    if (v.kind == Kind::kFloat) return Value::Float(std::fabs(v.f));
    return Bad("bad operand type for abs()", v);
  }
  if (name == "int") {
    int64_t def = a0 && a0->kind == Kind::kInt ? a0->i : 0;
    if (v.kind == Kind::kInt) return v;
    if (v.kind == Kind::kFloat) return Value::Int(static_cast<int64_t>(v.f));
    if (v.kind == Kind::kBool) return Value::Int(v.b);
    if (v.kind == Kind::kString) {
      char* end = nullptr;
      std::string s = StripImpl(v.s, nullptr, true, true);
      long long x = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && *end == 0) return Value::Int(x);
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == 0) return Value::Int(static_cast<int64_t>(d));
    }
    return Value::Int(def);
  }
  if (name == "float") {
    double def = a0 && a0->is_number() ? a0->number() : 0.0;
    if (v.is_number()) return Value::Float(v.number());
    if (v.kind == Kind::kBool) return Value::Float(v.b);
    if (v.kind == Kind::kString) {
      char* end = nullptr;
      std::string s = StripImpl(v.s, nullptr, true, true);
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == 0) return Value::Float(d);
    }
    return Value::Float(def);
  }
  if (name == "round") {
    if (!v.is_number()) return Bad("round needs a number", v);
    int64_t precision = a0 && a0->kind == Kind::kInt ? a0->i : 0;
    const Value* method = Arg(args, kwargs, 1, "method");
    std::string m = method && method->kind == Kind::kString ? method->s : "common";
    double scale = std::pow(10.0, static_cast<double>(precision)), x = v.number() * scale;
    double r = m == "ceil" ? std::ceil(x) : m == "floor" ? std::floor(x) : std::round(x);
    return Value::Float(r / scale);
  }
  if (v.kind == Kind::kUndefined && (name == "upper" || name == "lower" || name == "trim" ||
                                     name == "capitalize" || name == "title")) {
    return Value::Str("");
  }
  if (name == "upper") return Value::Str(Upper(ToStr(v)));
  if (name == "lower") return Value::Str(Lower(ToStr(v)));
  if (name == "trim") return Value::Str(StripImpl(ToStr(v), a0, true, true));
  if (name == "capitalize") return Value::Str(CapitalizeImpl(ToStr(v)));
  if (name == "title") return Value::Str(TitleImpl(ToStr(v)));
  if (name == "replace") {
    if (args.size() < 2) return absl::InvalidArgumentError("replace filter needs two arguments");
    const Value* count = Arg(args, kwargs, 2, "count");
    return Value::Str(ReplaceImpl(ToStr(v), ToStr(args[0]), ToStr(args[1]),
                                  count && count->kind == Kind::kInt ? count->i : -1));
  }
  if (name == "indent") {
    const Value* width = Arg(args, kwargs, 0, "width");
    const Value* first = Arg(args, kwargs, 1, "first");
    const Value* blank = Arg(args, kwargs, 2, "blank");
    std::string pad = width == nullptr ? "    " : width->kind == Kind::kString ? width->s
                                             : std::string(std::max<int64_t>(0, width->i), ' ');
    std::string s = ToStr(v), out;
    size_t pos = 0;
    bool first_line = true;
    while (true) {
      size_t nl = s.find('\n', pos);
      std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      bool indent_it = first_line ? (first && Truthy(*first)) : (!line.empty() || (blank && Truthy(*blank)));
      if (indent_it) out += pad;
      out += line;
      if (nl == std::string::npos) break;
      out += '\n';
      pos = nl + 1;
      first_line = false;
    }
    return Value::Str(out);
  }
  if (name == "wordcount") return Value::Int(static_cast<int64_t>(SplitImpl(ToStr(v), nullptr, -1).list->size()));
  // Filters over sequences.
  auto items_or = Iterate(v);
  if (!items_or.ok()) return items_or.status();
  ValueList items = std::move(*items_or);
  if (name == "list") return Value::List(std::move(items));
  if (name == "join") {
    const Value* attr = Arg(args, kwargs, 1, "attribute");
    std::string sep = a0 ? ToStr(*a0) : "", out;
    for (size_t k = 0; k < items.size(); ++k) {
      if (k) out += sep;
      if (attr) {
        auto x = GetAttr(items[k], ToStr(*attr));
        if (!x.ok()) return x.status();
        out += ToStr(*x);
      } else {
        out += ToStr(items[k]);
      }
    }
    return Value::Str(out);
  }
  if (name == "first") return items.empty() ? Value::Undefined() : items.front();
  if (name == "last") return items.empty() ? Value::Undefined() : items.back();
  if (name == "reverse") {
    std::reverse(items.begin(), items.end());
    if (v.kind == Kind::kString) {
      std::string s;
      for (const auto& x : items) s += x.s;
      return Value::Str(s);
    }
    return Value::List(std::move(items));
  }
  if (name == "unique") {
    ValueList out;
    for (const auto& x : items) {
      bool seen = false;
      for (const auto& y : out) seen |= Equal(x, y);
      if (!seen) out.push_back(x);
    }
    return Value::List(std::move(out));
  }
  if (name == "sum") {
    Value total = Value::Int(0);
    for (const auto& x : items) {
      auto t = BinaryOp("+", total, x);
      if (!t.ok()) return t.status();
      total = *t;
    }
    return total;
  }
  if (name == "min" || name == "max" || name == "sort" || name == "dictsort") {
    if (name == "dictsort") {
      if (v.kind != Kind::kDict) return Bad("dictsort needs a mapping", v);
      items.clear();
      for (const auto& [k, x] : *v.dict) items.push_back(Value::List({Value::Str(k), x}));
    }
    absl::Status error;
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      auto lt = Less(x, y);
      if (!lt.ok()) { error = lt.status(); return false; }
      return *lt;
    });
    if (!error.ok()) return error;
    const Value* rev = Arg(args, kwargs, 0, "reverse");
    if (name == "sort" && rev && Truthy(*rev)) std::reverse(items.begin(), items.end());
    if (name == "min") return items.empty() ? Value::Undefined() : items.front();
    if (name == "max") return items.empty() ? Value::Undefined() : items.back();
    return Value::List(std::move(items));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported filter '", std::string(name), "'"));
}

absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& v, const ValueList& args) {
  const Value* a0 = args.empty() ? nullptr : &args[0];
  if (name == "defined") return v.defined();
  if (name == "undefined") return !v.defined();
  if (name == "none") return v.kind == Kind::kNone;
  if (name == "string") return v.kind == Kind::kString;
  if (name == "mapping") return v.kind == Kind::kDict && !v.is_namespace;
  if (name == "iterable") return v.kind == Kind::kString || v.kind == Kind::kList || v.kind == Kind::kUndefined ||
                                 (v.kind == Kind::kDict && !v.is_namespace);
  if (name == "sequence") return v.kind == Kind::kString || v.kind == Kind::kList ||
                                 (v.kind == Kind::kDict && !v.is_namespace);
  if (name == "number") return v.is_number() || v.kind == Kind::kBool;
  if (name == "integer") return v.kind == Kind::kInt;
  if (name == "float") return v.kind == Kind::kFloat;
  if (name == "boolean") return v.kind == Kind::kBool;
  if (name == "true") return v.kind == Kind::kBool && v.b;
  if (name == "false") return v.kind == Kind::kBool && !v.b;
  if (name == "callable") return v.kind == Kind::kCallable;
  if (name == "lower") return v.kind == Kind::kString && Lower(v.s) == v.s;
  if (name == "upper") return v.kind == Kind::kString && Upper(v.s) == v.s;
  if (name == "odd" || name == "even") {
    if (v.kind != Kind::kInt) return Bad("odd/even need an integer", v);
    return (((v.i % 2) + 2) % 2 == 1) == (name == "odd");
  }
  if (a0 == nullptr) return absl::InvalidArgumentError(absl::StrCat("test '", std::string(name), "' needs an argument"));
  if (name == "divisibleby") {
    if (v.kind != Kind::kInt || a0->kind != Kind::kInt || a0->i == 0) return Bad("divisibleby needs integers", v);
    return v.i % a0->i == 0;
  }
  if (name == "sameas") {
    if (v.kind != a0->kind) return false;
    if (v.kind == Kind::kList) return v.list == a0->list;
    if (v.kind == Kind::kDict) return v.dict == a0->dict;
    return Equal(v, *a0);
  }
  if (name == "in") return Contains(*a0, v);
  std::string op = name == "equalto" || name == "eq" ? "==" : name == "ne" ? "!=" : name == "lt" ? "<"
                 : name == "le" ? "<=" : name == "gt" ? ">" : name == "ge" ? ">=" : std::string(name);
  auto r = BinaryOp(op, v, *a0);
  if (!r.ok()) return r.status();
  return r->b;
}

absl::StatusOr<Value> CallMethod(const Value& obj, std::string_view name, const ValueList& args,
                                 const KwArgs& kwargs) {
  const Value* a0 = Arg(args, kwargs, 0, "");
  if (obj.kind == Kind::kString) {
    const std::string& s = obj.s;
    if (name == "strip") return Value::Str(StripImpl(s, a0, true, true));
    if (name == "lstrip") return Value::Str(StripImpl(s, a0, true, false));
    if (name == "rstrip") return Value::Str(StripImpl(s, a0, false, true));
    if (name == "upper") return Value::Str(Upper(s));
    if (name == "lower") return Value::Str(Lower(s));
    if (name == "title") return Value::Str(TitleImpl(s));
    if (name == "capitalize") return Value::Str(CapitalizeImpl(s));
    if (name == "split") {
      const Value* max = Arg(args, kwargs, 1, "maxsplit");
      return SplitImpl(s, Arg(args, kwargs, 0, "sep"), max && max->kind == Kind::kInt ? max->i : -1);
    }
    if (name == "startswith" || name == "endswith") {
      if (!a0) return absl::InvalidArgumentError(absl::StrCat(std::string(name), "() takes an argument"));
      ValueList options = a0->kind == Kind::kList ? *a0->list : ValueList{*a0};
      for (const auto& o : options) {
        if (o.kind != Kind::kString) return Bad(absl::StrCat(std::string(name), "() needs a string"), o);
        bool hit = name == "startswith" ? s.compare(0, o.s.size(), o.s) == 0
                                        : (s.size() >= o.s.size() && s.compare(s.size() - o.s.size(), o.s.size(), o.s) == 0);
        if (hit) return Value::Bool(true);
      }
      return Value::Bool(false);
    }
    if (name == "replace") {
      if (args.size() < 2) return absl::InvalidArgumentError("replace() takes two arguments");
      const Value* count = Arg(args, kwargs, 2, "count");
      return Value::Str(ReplaceImpl(s, ToStr(args[0]), ToStr(args[1]), count && count->kind == Kind::kInt ? count->i : -1));
    }
    if (name == "find" || name == "count") {
      if (!a0 || a0->kind != Kind::kString) return absl::InvalidArgumentError(absl::StrCat(std::string(name), "() needs a string"));
      if (name == "find") {
        size_t f = s.find(a0->s);
        return Value::Int(f == std::string::npos ? -1 : static_cast<int64_t>(CodePointCount(s.substr(0, f))));
      }
      if (a0->s.empty()) return Value::Int(static_cast<int64_t>(CodePointCount(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(a0->s); p != std::string::npos; p = s.find(a0->s, p + a0->s.size())) ++n;
      return Value::Int(n);
    }
    if (name == "join") {
      auto items = a0 ? Iterate(*a0) : absl::StatusOr<ValueList>(ValueList{});
      if (!items.ok()) return items.status();
      std::string out;
      for (size_t k = 0; k < items->size(); ++k) out += (k ? s : "") + ToStr((*items)[k]);
      return Value::Str(out);
    }
  }
  if (obj.kind == Kind::kDict && !obj.is_namespace) {
    if (name == "get") {
      if (!a0) return absl::InvalidArgumentError("get() takes a key");
      const Value* found = a0->kind == Kind::kString ? obj.Find(a0->s) : nullptr;
      if (found) return *found;
      return args.size() > 1 ? args[1] : Value::None();
    }
    ValueList out;
    for (const auto& [k, x] : *obj.dict) {
      if (name == "items") out.push_back(Value::List({Value::Str(k), x}));
      else if (name == "keys") out.push_back(Value::Str(k));
      else if (name == "values") out.push_back(x);
    }
    if (name == "items" || name == "keys" || name == "values") return Value::List(std::move(out));
  }
  if (obj.kind == Kind::kUndefined) {
    return absl::InvalidArgumentError(absl::StrCat("'", obj.s.empty() ? "value" : obj.s, "' is undefined"));
  }
  return absl::InvalidArgumentError(absl::StrCat("'", TypeName(obj), "' object has no attribute '", std::string(name), "'"));
}

}  // namespace mlaserve::jinja
