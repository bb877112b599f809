// `mlaserve tokenize` (docs/cli.md): tokenizes stdin line by line with a model's tokenizer,
// printing each line's token ids space-separated, one output line per input line; with
// --decode it turns lines of ids back into text lines.
#ifndef MLASERVE_SERVER_CLI_TOKENIZE_COMMAND_H_
#define MLASERVE_SERVER_CLI_TOKENIZE_COMMAND_H_

#include <istream>
#include <ostream>

#include "engine/tokenizer/tokenizer.h"

namespace mlaserve {

// Runs with the already-parsed flags (--tokenizer, --decode, --add_special_tokens) on stdin and
// stdout; returns the process exit code (1 for a load error or a malformed id line).
int RunTokenizeCommand();

// The command's loop on any streams. Encoding strips only the '\n' of each line. Decoding
// reads whitespace-separated ids and decodes them with special tokens kept; a token that is not
// an id below tokenizer.vocab_size() stops the run with a message on `err` naming the line.
int TokenizeLines(const Tokenizer& tokenizer, bool decode, bool add_special_tokens,
                  std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_CLI_TOKENIZE_COMMAND_H_
