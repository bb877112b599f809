// Request: what a client asked for, after validation by the server. Plain data; the engine turns
// it into a Sequence (engine/sequence.h) when it is submitted.
#ifndef MLASERVE_ENGINE_REQUEST_H_
#define MLASERVE_ENGINE_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace mlaserve {

using RequestId = std::string;

// How the next token is drawn from the logits. Defaults are "plain sampling at temperature 1".
// api.md: at most this many alternatives per generated token (Request::top_logprobs).
inline constexpr int32_t kMaxTopLogprobs = 20;

struct SamplingOptions {
  float temperature = 1.0f;         // 0 means greedy
  float top_p = 1.0f;               // nucleus mass kept, in (0, 1]
  int32_t top_k = 0;                // 0: no top-k cut
  float min_p = 0.0f;               // drop tokens below min_p * max probability
  std::optional<uint64_t> seed;     // unset: nondeterministic
  float repetition_penalty = 1.0f;  // multiplicative, over prompt and output tokens
  float presence_penalty = 0.0f;    // additive, once per distinct output token
  float frequency_penalty = 0.0f;   // additive, per occurrence in the output
};

// When generation ends. Token-level conditions are applied by the scheduler; stop strings by the
// engine after detokenization.
struct StoppingOptions {
  std::optional<int32_t> max_tokens;  // unset: until a stop condition or the context limit
  int32_t min_tokens = 0;             // eos and stop_token_ids do not stop before this many
  std::vector<std::string> stop;      // stop strings
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
};

struct Request {
  RequestId id;
  std::vector<int32_t> prompt_token_ids;
  SamplingOptions sampling;
  StoppingOptions stopping;
  int32_t priority = 0;      // larger is served first
  int32_t top_logprobs = 0;  // alternatives reported per output token
  bool return_logprobs = false;
  // Requests share prefix-cache blocks only when their salts are equal (both unset included),
  // so tenants cannot probe each other's prompts through cache timing.
  std::optional<std::string> cache_salt;
  // When the request arrived, on the engine's clock (Engine::Now); unset: Engine::Submit stamps it.
  absl::Time arrival_time = absl::InfinitePast();
  absl::Time deadline = absl::InfiniteFuture();  // dropped unfinished at this time
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_REQUEST_H_
