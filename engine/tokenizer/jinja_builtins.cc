#include "engine/tokenizer/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mlaserve::jinja {
namespace {

absl::Status TypeError(std::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

bool IsPySpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

std::string StripImpl(const std::string& s, const Value* chars, bool left, bool right) {
  auto drop = [&](char c) {
    if (chars && chars->kind == Kind::kString) return chars->s.find(c) != std::string::npos;
    return IsPySpace(c);
  };
  size_t b = 0, e = s.size();
  if (left) while (b < e && drop(s[b])) ++b;
  if (right) while (e > b && drop(s[e - 1])) --e;
  return s.substr(b, e - b);
}

static std::string Lower(std::string s) { for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c))); return s; }
std::string TitleImpl(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char c : s) {
    bool alpha = std::isalpha(static_cast<unsigned char>(c));
    out += static_cast<char>(alpha ? (prev_cased ? std::tolower(c) : std::toupper(c)) : c);
    prev_cased = alpha;
  }
  return out;
}
std::string CapitalizeImpl(const std::string& s) {
  std::string out = Lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}
std::string ReplaceImpl(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) {
    std::string out;
    auto offs = CodePointOffsets(s);
    int64_t n = 0;
    for (size_t k = 0; k + 1 < offs.size(); ++k) {
      if (count < 0 || n++ < count) out += to;
      out += s.substr(offs[k], offs[k + 1] - offs[k]);
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  std::string out;
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out += s.substr(pos, f - pos) + to;
    pos = f + from.size();
    ++n;
  }
  return out + s.substr(pos);
}
Value SplitImpl(const std::string& s, const Value* sep, int64_t maxsplit) {
  ValueList out;
  if (sep == nullptr || sep->kind == Kind::kNone) {
    size_t k = 0;
    while (true) {
      while (k < s.size() && IsPySpace(s[k])) ++k;
      if (k >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = s.size();
        while (e > k && IsPySpace(s[e - 1])) --e;
        out.push_back(Value::Str(s.substr(k, e - k)));
        break;
      }
      size_t b = k;
      while (k < s.size() && !IsPySpace(s[k])) ++k;
      out.push_back(Value::Str(s.substr(b, k - b)));
    }
    return Value::List(std::move(out));
  }
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t f = sep->s.empty() ? std::string::npos : s.find(sep->s, pos);
    if (f == std::string::npos) break;
    out.push_back(Value::Str(s.substr(pos, f - pos)));
    pos = f + sep->s.size();
  }
  out.push_back(Value::Str(s.substr(pos)));
  return Value::List(std::move(out));
}

namespace {

const Value* Arg(const ValueList& args, const KwArgs& kwargs, size_t index, std::string_view name) {
  if (index < args.size()) return &args[index];
  for (const auto& [k, v] : kwargs) if (k == name) return &v;
  return nullptr;
}

}  // namespace

absl::StatusOr<Value> ToJsonImpl(const Value& v, const ValueList& args, const KwArgs& kwargs) {
  // transformers: json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
  // sort_keys=sort_keys).
  DumpOptions o;
  if (const Value* ind = Arg(args, kwargs, 0, "indent"); ind && ind->kind == Kind::kInt) {
    o.indent = static_cast<int>(ind->i);
    o.item_separator = ",";
  }
  if (const Value* sep = Arg(args, kwargs, 1, "separators"); sep && sep->kind == Kind::kList &&
                                                             sep->list->size() == 2) {
    o.item_separator = ToStr((*sep->list)[0]);
    o.key_separator = ToStr((*sep->list)[1]);
  }
  if (const Value* sk = Arg(args, kwargs, 2, "sort_keys")) o.sort_keys = Truthy(*sk);
  if (const Value* ea = Arg({}, kwargs, 99, "ensure_ascii")) o.ensure_ascii = Truthy(*ea);
  auto s = Dump(v, o);
  if (!s.ok()) return s.status();
  return Value::Str(*s);
}

bool IsKnownFilter(std::string_view n) {
  static const std::set<std::string_view> k = {
      "trim", "tojson", "length", "count", "items", "default", "d", "upper", "lower", "capitalize",
      "title", "replace", "join", "first", "last", "list", "string", "int", "float", "round",
      "abs", "selectattr", "rejectattr", "select", "reject", "map", "safe", "indent", "unique",
      "reverse", "e", "escape", "sum", "min", "max", "dictsort", "wordcount", "sort", "batch"};
  return k.count(n) && n != "batch";
}
bool IsKnownTest(std::string_view n) {
  static const std::set<std::string_view> k = {
      "defined", "undefined", "none", "string", "mapping", "iterable", "number", "sequence",
      "boolean", "true", "false", "integer", "float", "callable", "equalto", "eq", "==", "ne",
      "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in", "odd", "even", "divisibleby",
      "lower", "upper", "sameas"};
  return k.count(n) > 0;
}
bool IsKnownMethod(std::string_view n) {
  static const std::set<std::string_view> k = {
      "strip", "lstrip", "rstrip", "split", "startswith", "endswith", "upper", "lower", "replace",
      "title", "capitalize", "find", "count", "get", "items", "keys", "values", "join", "rsplit"};
  return k.count(n) && n != "rsplit";
}
bool IsKnownGlobal(std::string_view n) {
  return n == "raise_exception" || n == "strftime_now" || n == "range" || n == "namespace" ||
         n == "dict";
}

absl::StatusOr<ValueList> Iterate(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return ValueList{};
    case Kind::kList: return *v.list;
    case Kind::kDict: {
      if (v.is_namespace) break;
      ValueList out;
      for (const auto& kv : *v.dict) out.push_back(Value::Str(kv.first));
      return out;
    }
    case Kind::kString: {
      ValueList out;
      auto offs = CodePointOffsets(v.s);
      for (size_t k = 0; k + 1 < offs.size(); ++k) out.push_back(Value::Str(v.s.substr(offs[k], offs[k + 1] - offs[k])));
      return out;
    }
    default: break;
  }
  return TypeError(absl::StrCat("'", TypeName(v), "' object is not iterable"));
}

absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name) {
  if (obj.kind == Kind::kUndefined) {
    return TypeError(absl::StrCat("'", obj.s.empty() ? "value" : obj.s, "' is undefined"));
  }
  if (obj.kind == Kind::kDict) {
    if (const Value* v = obj.Find(name)) return *v;
    return Value::Undefined(name);
  }
  if (obj.kind == Kind::kList && !name.empty() && std::isdigit(static_cast<unsigned char>(name[0]))) {
    return GetItem(obj, Value::Int(std::stoll(name)));
  }
  return Value::Undefined(name);
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.kind == Kind::kUndefined) {
    return TypeError(absl::StrCat("'", obj.s.empty() ? "value" : obj.s, "' is undefined"));
  }
  if (obj.kind == Kind::kDict && key.kind == Kind::kString) return GetAttr(obj, key.s);
  if ((obj.kind == Kind::kList || obj.kind == Kind::kString) && key.kind == Kind::kInt) {
    if (obj.kind == Kind::kList) {
      int64_t n = static_cast<int64_t>(obj.list->size()), i = key.i < 0 ? key.i + n : key.i;
      if (i < 0 || i >= n) return Value::Undefined();
      return (*obj.list)[i];
    }
    auto offs = CodePointOffsets(obj.s);
    int64_t n = static_cast<int64_t>(offs.size()) - 1, i = key.i < 0 ? key.i + n : key.i;
    if (i < 0 || i >= n) return Value::Undefined();
    return Value::Str(obj.s.substr(offs[i], offs[i + 1] - offs[i]));
  }
  return Value::Undefined();
}

absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  int64_t st = step.kind == Kind::kInt ? step.i : 1;
  if (st == 0) return TypeError("slice step cannot be zero");
  ValueList items;
  if (obj.kind == Kind::kString || obj.kind == Kind::kList) {
    auto it = Iterate(obj);
    if (!it.ok()) return it.status();
    items = std::move(*it);
  } else if (obj.kind != Kind::kUndefined) {
    return TypeError(absl::StrCat("'", TypeName(obj), "' object is not subscriptable"));
  }
  int64_t n = static_cast<int64_t>(items.size());
  auto clamp = [&](const Value& v, int64_t def) {
    if (v.kind != Kind::kInt) return def;
    int64_t i = v.i < 0 ? v.i + n : v.i;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t b = clamp(start, st > 0 ? 0 : n - 1), e = clamp(stop, st > 0 ? n : -1);
  ValueList out;
  for (int64_t i = b; st > 0 ? i < e : i > e;) {
    out.push_back(items[i]);
    if (__builtin_add_overflow(i, st, &i)) break;  // past int64 is past the end
  }
  if (obj.kind == Kind::kString) {
    std::string s;
    for (const auto& v : out) s += v.s;
    return Value::Str(s);
  }
  return Value::List(std::move(out));
}

}  // namespace mlaserve::jinja
