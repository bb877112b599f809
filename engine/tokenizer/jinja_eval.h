// Evaluator of the chat-template interpreter: renders a parsed template against variables.
#ifndef MLASERVE_ENGINE_TOKENIZER_JINJA_EVAL_H_
#define MLASERVE_ENGINE_TOKENIZER_JINJA_EVAL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja_ast.h"

namespace mlaserve::jinja {

// Renders `body`. `globals` is a dict of the template's variables. Errors: InvalidArgument
// (raise_exception's message verbatim, or a Python-like TypeError/UndefinedError text).
absl::StatusOr<std::string> Render(const Body& body, const Value& globals);

}  // namespace mlaserve::jinja

#endif  // MLASERVE_ENGINE_TOKENIZER_JINJA_EVAL_H_
