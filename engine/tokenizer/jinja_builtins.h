// Filters, tests, methods and globals of the chat-template interpreter (the ones real Hugging
// Face chat templates use), with Python/Jinja2 semantics.
#ifndef MLASERVE_ENGINE_TOKENIZER_JINJA_BUILTINS_H_
#define MLASERVE_ENGINE_TOKENIZER_JINJA_BUILTINS_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja_value.h"

namespace mlaserve::jinja {

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);
bool IsKnownMethod(std::string_view name);
bool IsKnownGlobal(std::string_view name);

// Applies a filter other than the higher-order ones (map/select...: the evaluator does those).
absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& v, const ValueList& args,
                                  const KwArgs& kwargs);
absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& v, const ValueList& args);
absl::StatusOr<Value> CallMethod(const Value& obj, std::string_view name, const ValueList& args,
                                 const KwArgs& kwargs);
// Python getattr-then-getitem; missing → undefined; attribute of undefined → error.
absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop,
                            const Value& step);
absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b);
// The error of an integer result outside int64 (Python's integers have no bound; these do).
absl::Status IntegerOverflow(std::string_view op);
absl::StatusOr<bool> Contains(const Value& container, const Value& item);
// Iteration as Python does it (dict → keys, string → characters, undefined → nothing).
absl::StatusOr<ValueList> Iterate(const Value& v);

}  // namespace mlaserve::jinja

#endif  // MLASERVE_ENGINE_TOKENIZER_JINJA_BUILTINS_H_
