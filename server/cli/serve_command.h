// `mlaserve serve` (the default subcommand): loads the model, serves it over gRPC until
// SIGTERM or SIGINT, then drains gracefully (docs/cli.md).
#ifndef MLASERVE_SERVER_CLI_SERVE_COMMAND_H_
#define MLASERVE_SERVER_CLI_SERVE_COMMAND_H_

namespace mlaserve {

// Runs with the already-parsed flags; returns the process exit code (0 after a drain).
// Must be called before the process starts any thread: it blocks SIGTERM and SIGINT in every
// thread and waits for them on one of its own.
int RunServeCommand();

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_CLI_SERVE_COMMAND_H_
