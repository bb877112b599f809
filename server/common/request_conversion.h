// The only validator of client input: turns v1 protos into engine requests, checking every
// rule of api.md. Each error is INVALID_ARGUMENT (FAILED_PRECONDITION where the server lacks
// a tokenizer for a text request) and names the offending proto field, so a client can fix
// its request from the message alone. Unset proto3 optional fields take the documented
// defaults (engine/request.h), never 0.
//
// Thread-safety: pure functions; the Tokenizer is only read.
#ifndef MLASERVE_SERVER_COMMON_REQUEST_CONVERSION_H_
#define MLASERVE_SERVER_COMMON_REQUEST_CONVERSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/request.h"
#include "engine/tokenizer/tokenizer.h"
#include "mlaserve/v1/inference.pb.h"

namespace mlaserve {

struct ModelLimits {
  int64_t vocab_size = 0;          // token ids must be below it
  int32_t max_context_tokens = 0;  // prompt + output tokens of one sequence
  // Text prompts longer than this are refused before they are tokenized, so that the cost of
  // tokenization stays bounded.
  int64_t max_prompt_bytes = int64_t{1} << 20;
};

// Validates `proto` and builds the engine Request (id, prompt, sampling, stopping, priority,
// logprobs). `tokenizer` encodes a text prompt with its special tokens; it may be null, and
// then only token_ids prompts are accepted. Arrival time and deadline are left to the caller.
absl::StatusOr<Request> ToEngineRequest(const v1::GenerateRequest& proto, const ModelLimits& limits,
                                        const Tokenizer* tokenizer);

// The ids of a Detokenize request, each checked to be below `vocab_size`.
absl::StatusOr<std::vector<int32_t>> DetokenizeIds(const v1::DetokenizeRequest& proto,
                                                   int64_t vocab_size);

// INVALID_ARGUMENT naming `field` when `text` is longer than `max_bytes`.
absl::Status CheckTextSize(const std::string& text, int64_t max_bytes, const char* field);

// The error of Tokenize, Detokenize and text prompts when the model has no tokenizer.
absl::Status NoTokenizerError(const char* field);

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_COMMON_REQUEST_CONVERSION_H_
