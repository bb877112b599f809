// mlaserve: the daemon and its offline subcommands (docs/cli.md).
//   mlaserve [serve] [--flags]    mlaserve generate ...    mlaserve tokenize ...
//   mlaserve chat-template ...
#include <cstdio>
#include <cstring>
#include <string_view>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "server/cli/chat_template_command.h"
#include "server/cli/generate_command.h"
#include "server/cli/serve_command.h"
#include "server/cli/tokenize_command.h"

namespace {

constexpr std::string_view kUsage =
    "mlaserve [serve] [--flags]: serve a DeepSeek model over gRPC\n"
    "mlaserve generate --prompt_ids=1,2,3 [--flags]: offline generation\n"
    "mlaserve tokenize --tokenizer=PATH [--decode]: stdin lines to ids (or back)\n"
    "mlaserve chat-template --messages=FILE.json [--model=DIR] [--tools=FILE.json]: print the prompt\n"
    "Run with --help for every flag.";

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(absl::string_view(kUsage.data(), kUsage.size()));
  // The subcommand is the first argument unless that is a flag (then it is `serve`).
  std::string_view command = "serve";
  std::vector<char*> args(argv, argv + argc);
  if (argc > 1 && argv[1][0] != '-') {
    command = argv[1];
    args.erase(args.begin() + 1);
  }
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  if (command == "serve") return mlaserve::RunServeCommand();
  if (command == "generate") return mlaserve::RunGenerateCommand();
  if (command == "tokenize") return mlaserve::RunTokenizeCommand();
  if (command == "chat-template") return mlaserve::RunChatTemplateCommand();
  std::fprintf(stderr, "mlaserve: unknown subcommand \"%.*s\"\n%.*s\n",
               static_cast<int>(command.size()), command.data(), static_cast<int>(kUsage.size()),
               kUsage.data());
  return 2;
}
