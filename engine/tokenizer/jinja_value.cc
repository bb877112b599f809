#include "engine/tokenizer/jinja_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace mlaserve::jinja {

const Value* Value::Find(std::string_view key) const {
  if (kind != Kind::kDict) return nullptr;
  for (const auto& [k, v] : *dict) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::Set(const std::string& key, Value v) {
  for (auto& [k, old] : *dict) {
    if (k == key) { old = std::move(v); return; }
  }
  dict->emplace_back(key, std::move(v));
}

bool Truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: return v.b;
    case Kind::kInt: return v.i != 0;
    case Kind::kFloat: return v.f != 0;
    case Kind::kString: return !v.s.empty();
    case Kind::kList: return !v.list->empty();
    case Kind::kDict: return v.is_namespace || !v.dict->empty();
    case Kind::kCallable: return true;
  }
  return false;
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: scientific when exp < -4 or exp >= 16.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  bool neg = mant[0] == '-';
  if (neg) mant = mant.substr(1);
  std::string digits;
  for (char c : mant) if (c != '.') digits += c;
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(-exp - 1, '0') + digits;
  } else {
    if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
  }
  return neg ? "-" + out : out;
}

static std::string ReprString(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == q || c == '\\') { out += '\\'; out += static_cast<char>(c); }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) { char b[8]; std::snprintf(b, sizeof(b), "\\x%02x", c); out += b; }
    else out += static_cast<char>(c);
  }
  out += q;
  return out;
}

std::string Repr(const Value& v) {
  switch (v.kind) {
    case Kind::kString: return ReprString(v.s);
    case Kind::kList: {
      std::string out = "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        out += Repr((*v.list)[k]);
      }
      return out + "]";
    }
    case Kind::kDict: {
      if (v.is_namespace) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : *v.dict) {
        if (!first) out += ", ";
        first = false;
        out += ReprString(k) + ": " + Repr(x);
      }
      return out + "}";
    }
    default: return ToStr(v);
  }
}

std::string ToStr(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.b ? "True" : "False";
    case Kind::kInt: return std::to_string(v.i);
    case Kind::kFloat: return FloatRepr(v.f);
    case Kind::kString: return v.s;
    case Kind::kCallable: return "<function>";
    default: return Repr(v);
  }
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.number() == b.number();
  if ((a.kind == Kind::kBool) != (b.kind == Kind::kBool)) {
    // Python: True == 1.
    if (a.kind == Kind::kBool && b.is_number()) return (a.b ? 1.0 : 0.0) == b.number();
    if (b.kind == Kind::kBool && a.is_number()) return (b.b ? 1.0 : 0.0) == a.number();
    return false;
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined: case Kind::kNone: return true;
    case Kind::kBool: return a.b == b.b;
    case Kind::kString: return a.s == b.s;
    case Kind::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!Equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case Kind::kDict:
      if (a.dict == b.dict) return true;
      if (a.is_namespace || b.is_namespace || a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, x] : *a.dict) {
        const Value* y = b.Find(k);
        if (y == nullptr || !Equal(x, *y)) return false;
      }
      return true;
    case Kind::kCallable: return a.fn == b.fn;
    default: return false;
  }
}

const char* TypeName(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kDict: return v.is_namespace ? "Namespace" : "dict";
    case Kind::kCallable: return "function";
  }
  return "?";
}

absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  auto num = [](const Value& v) { return v.kind == Kind::kBool ? (v.b ? 1.0 : 0.0) : v.number(); };
  bool an = a.is_number() || a.kind == Kind::kBool, bn = b.is_number() || b.kind == Kind::kBool;
  if (an && bn) return num(a) < num(b);
  if (a.kind == Kind::kString && b.kind == Kind::kString) return a.s < b.s;
  if (a.kind == Kind::kList && b.kind == Kind::kList) {
    for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k) {
      if (Equal((*a.list)[k], (*b.list)[k])) continue;
      return Less((*a.list)[k], (*b.list)[k]);
    }
    return a.list->size() < b.list->size();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 TypeName(a), "' and '", TypeName(b), "'"));
}

Value FromJson(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::None();
    case nlohmann::json::value_t::boolean: return Value::Bool(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::Int(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value::Int(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::json::value_t::number_float: return Value::Float(j.get<double>());
    case nlohmann::json::value_t::string: return Value::Str(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList out;
      for (const auto& x : j) out.push_back(FromJson(x));
      return Value::List(std::move(out));
    }
    case nlohmann::json::value_t::object: {
      ValueDict out;
      for (auto it = j.begin(); it != j.end(); ++it) out.emplace_back(it.key(), FromJson(*it));
      return Value::Dict(std::move(out));
    }
    default: return Value::None();
  }
}

static void DumpString(const std::string& s, bool ensure_ascii, std::string* out) {
  *out += '"';
  std::vector<size_t> offs = ensure_ascii ? CodePointOffsets(s) : std::vector<size_t>{};
  for (size_t k = 0; k < s.size(); ++k) {
    unsigned char c = s[k];
    switch (c) {
      case '"': *out += "\\\""; continue;
      case '\\': *out += "\\\\"; continue;
      case '\n': *out += "\\n"; continue;
      case '\r': *out += "\\r"; continue;
      case '\t': *out += "\\t"; continue;
      case '\b': *out += "\\b"; continue;
      case '\f': *out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
      char b[8]; std::snprintf(b, sizeof(b), "\\u%04x", c); *out += b;
    } else if (c >= 0x80 && ensure_ascii) {
      // Decode one code point, emit \uXXXX (surrogate pairs above the BMP).
      uint32_t cp = 0; int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
      cp = c & (0x3F >> n);
      for (int m = 0; m < n && k + 1 < s.size(); ++m) cp = (cp << 6) | (s[++k] & 0x3F);
      char b[16];
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(b, sizeof(b), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(b, sizeof(b), "\\u%04x", cp);
      }
      *out += b;
    } else {
      *out += static_cast<char>(c);
    }
  }
  *out += '"';
}

static absl::Status DumpTo(const Value& v, const DumpOptions& o, int depth, std::string* out) {
  auto newline = [&](int d) {
    if (o.indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(o.indent) * d, ' ');
  };
  switch (v.kind) {
    case Kind::kNone: *out += "null"; return absl::OkStatus();
    case Kind::kBool: *out += v.b ? "true" : "false"; return absl::OkStatus();
    case Kind::kInt: *out += std::to_string(v.i); return absl::OkStatus();
    case Kind::kFloat:
      *out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity")
                                                          : FloatRepr(v.f);
      return absl::OkStatus();
    case Kind::kString: DumpString(v.s, o.ensure_ascii, out); return absl::OkStatus();
    case Kind::kList: {
      if (v.list->empty()) { *out += "[]"; return absl::OkStatus(); }
      *out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) *out += o.item_separator;
        newline(depth + 1);
        if (auto s = DumpTo((*v.list)[k], o, depth + 1, out); !s.ok()) return s;
      }
      newline(depth);
      *out += ']';
      return absl::OkStatus();
    }
    case Kind::kDict: {
      if (v.is_namespace) break;
      if (v.dict->empty()) { *out += "{}"; return absl::OkStatus(); }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : *v.dict) items.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      *out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) *out += o.item_separator;
        newline(depth + 1);
        DumpString(items[k]->first, o.ensure_ascii, out);
        *out += o.key_separator;
        if (auto s = DumpTo(items[k]->second, o, depth + 1, out); !s.ok()) return s;
      }
      newline(depth);
      *out += '}';
      return absl::OkStatus();
    }
    default: break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
}

absl::StatusOr<std::string> Dump(const Value& v, const DumpOptions& options) {
  std::string out;
  if (auto s = DumpTo(v, options, 0, &out); !s.ok()) return s;
  return out;
}

std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> offs;
  for (size_t k = 0; k < s.size(); ++k) {
    if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80) offs.push_back(k);
  }
  offs.push_back(s.size());
  return offs;
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace mlaserve::jinja
