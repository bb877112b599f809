// The value type of the chat-template interpreter: the subset of Python objects that Jinja2
// templates see when Hugging Face applies a chat template (JSON data, undefined, macros).
#ifndef MLASERVE_ENGINE_TOKENIZER_JINJA_VALUE_H_
#define MLASERVE_ENGINE_TOKENIZER_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace mlaserve::jinja {

struct Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;  // insertion order, like Python
using KwArgs = std::vector<std::pair<std::string, Value>>;
using Callable = std::function<absl::StatusOr<Value>(ValueList args, KwArgs kwargs)>;

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

struct Value {
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // string value; for kUndefined the missing name (for messages)
  std::shared_ptr<ValueList> list;
  std::shared_ptr<ValueDict> dict;  // shared: a namespace() is mutated through any copy
  bool is_namespace = false;
  std::shared_ptr<Callable> fn;

  static Value Undefined(std::string name = "") { Value v; v.s = std::move(name); return v; }
  static Value None() { Value v; v.kind = Kind::kNone; return v; }
  static Value Bool(bool x) { Value v; v.kind = Kind::kBool; v.b = x; return v; }
  static Value Int(int64_t x) { Value v; v.kind = Kind::kInt; v.i = x; return v; }
  static Value Float(double x) { Value v; v.kind = Kind::kFloat; v.f = x; return v; }
  static Value Str(std::string x) { Value v; v.kind = Kind::kString; v.s = std::move(x); return v; }
  static Value List(ValueList x = {}) {
    Value v; v.kind = Kind::kList; v.list = std::make_shared<ValueList>(std::move(x)); return v;
  }
  static Value Dict(ValueDict x = {}) {
    Value v; v.kind = Kind::kDict; v.dict = std::make_shared<ValueDict>(std::move(x)); return v;
  }
  static Value Function(Callable c) {
    Value v; v.kind = Kind::kCallable; v.fn = std::make_shared<Callable>(std::move(c)); return v;
  }

  bool defined() const { return kind != Kind::kUndefined; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  double number() const { return kind == Kind::kFloat ? f : static_cast<double>(i); }
  // Dict lookup; nullptr when absent (or not a dict).
  const Value* Find(std::string_view key) const;
  void Set(const std::string& key, Value v);
};

// Python truthiness.
bool Truthy(const Value& v);
// Python str() (what {{ }} prints); undefined prints "".
std::string ToStr(const Value& v);
// Python repr().
std::string Repr(const Value& v);
// Python repr of a float ("1.0", "1e+16", "inf").
std::string FloatRepr(double d);
// Python ==.
bool Equal(const Value& a, const Value& b);
// Python <: numbers with numbers, strings with strings, lists lexicographically; else an error.
absl::StatusOr<bool> Less(const Value& a, const Value& b);
const char* TypeName(const Value& v);

Value FromJson(const nlohmann::json& j);
struct DumpOptions {
  int indent = -1;  // -1: None
  bool sort_keys = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool ensure_ascii = false;
};
// json.dumps with the given options; an undefined or callable inside is a TypeError.
absl::StatusOr<std::string> Dump(const Value& v, const DumpOptions& options);

// UTF-8 helpers: Python strings index code points.
std::vector<size_t> CodePointOffsets(std::string_view s);  // byte offset of each code point + end
size_t CodePointCount(std::string_view s);

}  // namespace mlaserve::jinja

#endif  // MLASERVE_ENGINE_TOKENIZER_JINJA_VALUE_H_
