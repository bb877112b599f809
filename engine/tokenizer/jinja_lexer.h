// Lexer of the chat-template interpreter: template text → tokens, with Jinja2's whitespace
// control ({%- -%} {{- -}} {%+ +%}) and the options transformers sets (trim_blocks,
// lstrip_blocks; keep_trailing_newline off).
#ifndef MLASERVE_ENGINE_TOKENIZER_JINJA_LEXER_H_
#define MLASERVE_ENGINE_TOKENIZER_JINJA_LEXER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mlaserve::jinja {

enum class TokenKind {
  kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof
};

struct Token {
  TokenKind kind;
  std::string text;  // text, name, decoded string literal, number spelling or operator
  int line;
};

absl::StatusOr<std::vector<Token>> Lex(std::string_view source);

}  // namespace mlaserve::jinja

#endif  // MLASERVE_ENGINE_TOKENIZER_JINJA_LEXER_H_
