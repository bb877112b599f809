// `mlaserve generate`: offline one-shot generation on the same model code as `serve`, printing
// text or one JSON line per token (docs/cli.md) so anyone can check the engine against another
// implementation and measure prompt and decode speed.
#ifndef MLASERVE_SERVER_CLI_GENERATE_COMMAND_H_
#define MLASERVE_SERVER_CLI_GENERATE_COMMAND_H_

namespace mlaserve {

// Runs with the already-parsed flags; returns the process exit code.
int RunGenerateCommand();

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_CLI_GENERATE_COMMAND_H_
