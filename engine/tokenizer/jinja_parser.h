// Parser of the chat-template interpreter: tokens → statements. Unsupported statements,
// filters, tests, methods and unknown callables are errors here, naming the construct and line.
#ifndef MLASERVE_ENGINE_TOKENIZER_JINJA_PARSER_H_
#define MLASERVE_ENGINE_TOKENIZER_JINJA_PARSER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja_ast.h"
#include "engine/tokenizer/jinja_lexer.h"

namespace mlaserve::jinja {

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens);

}  // namespace mlaserve::jinja

#endif  // MLASERVE_ENGINE_TOKENIZER_JINJA_PARSER_H_
