// `mlaserve chat-template` (docs/cli.md): renders a model's chat template over a JSON file of
// messages and prints exactly the prompt on stdout.
#ifndef MLASERVE_SERVER_CLI_CHAT_TEMPLATE_COMMAND_H_
#define MLASERVE_SERVER_CLI_CHAT_TEMPLATE_COMMAND_H_

namespace mlaserve {

// Runs with the already-parsed flags (--model, --messages, --tools, --add_generation_prompt,
// --chat_template); returns the process exit code: 0, or 1 with the reason on stderr (a load
// error, bad JSON, or the template's own raise_exception message).
int RunChatTemplateCommand();

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_CLI_CHAT_TEMPLATE_COMMAND_H_
