#include "server/cli/tokenize_command.h"

#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(std::string, tokenizer, "",
          "tokenize: tokenizer.json, or a model directory holding one (tokenizer_config.json "
          "beside it is read too)");
ABSL_FLAG(bool, decode, false, "tokenize: turn lines of token ids back into text");
ABSL_FLAG(bool, add_special_tokens, false,
          "tokenize: add the special tokens of the tokenizer's template (bos and the like)");

namespace mlaserve {

int TokenizeLines(const Tokenizer& tokenizer, bool decode, bool add_special_tokens,
                  std::istream& in, std::ostream& out, std::ostream& err) {
  std::string line;
  std::vector<int32_t> ids;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!decode) {
      out << absl::StrJoin(tokenizer.Encode(line, add_special_tokens), " ") << '\n';
      continue;
    }
    ids.clear();
    for (const absl::string_view field :
         absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty())) {
      int32_t id;
      if (!absl::SimpleAtoi(field, &id) || id < 0 || id >= tokenizer.vocab_size()) {
        err << "mlaserve tokenize: line " << number << ": \"" << field
            << "\" is not a token id (0.." << tokenizer.vocab_size() - 1 << ")\n";
        return 1;
      }
      ids.push_back(id);
    }
    out << tokenizer.Decode(ids, /*skip_special_tokens=*/false) << '\n';
  }
  out.flush();
  return 0;
}

int RunTokenizeCommand() {
  const std::string path = absl::GetFlag(FLAGS_tokenizer);
  if (path.empty()) {
    std::cerr << "mlaserve tokenize: --tokenizer=PATH (tokenizer.json or model directory) is "
                 "required\n";
    return 1;
  }
  auto tokenizer = Tokenizer::Load(path);
  if (!tokenizer.ok()) {
    std::cerr << "mlaserve tokenize: " << tokenizer.status().message() << '\n';
    return 1;
  }
  std::ios::sync_with_stdio(false);
  return TokenizeLines(**tokenizer, absl::GetFlag(FLAGS_decode),
                       absl::GetFlag(FLAGS_add_special_tokens), std::cin, std::cout, std::cerr);
}

}  // namespace mlaserve
