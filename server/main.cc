// mlaserve: the daemon and its subcommands (see docs/cli.md).
#include <cstdio>
#include <string_view>

int main(int argc, char** argv) {
  std::string_view cmd = argc > 1 ? argv[1] : "serve";
  std::fprintf(stderr, "mlaserve: subcommand '%.*s' is not available in this build\n",
               static_cast<int>(cmd.size()), cmd.data());
  return 2;
}
