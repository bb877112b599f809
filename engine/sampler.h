// Token selection from one row of logits: penalties, temperature, top-k, top-p, min-p, and a
// counter-based generator keyed by (seed, output position) so that a seeded request draws the
// same tokens whatever else is batched with it, and after a preemption. Logprobs reported are
// the model's raw log-softmax over the full vocabulary (before penalties and temperature).
// Stateless and thread-compatible: each call uses only its arguments and `scratch`.
#ifndef MLASERVE_ENGINE_SAMPLER_H_
#define MLASERVE_ENGINE_SAMPLER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "engine/request.h"

namespace mlaserve {

struct TokenChoice {
  int32_t token = 0;
  float logprob = 0.0f;                         // raw log-softmax of `token`
  std::vector<std::pair<int32_t, float>> top;   // top_logprobs best (id, logprob), descending
};

// Reused buffers, so that a warmed-up call allocates nothing.
struct SamplerScratch {
  std::vector<float> values;     // [vocab]
  std::vector<int32_t> indices;  // [vocab]
  std::vector<int32_t> counts;   // [vocab]
};

// A uniform draw in [0, 1) that depends only on (seed, position).
double UniformDraw(uint64_t seed, uint64_t position);

// logits: [vocab] raw model output. `prompt` and `output` are the sequence's tokens (for the
// repetition/presence/frequency penalties). `seed` is the request's (the engine picks one for
// requests without). Ties in greedy selection pick the lowest id.
TokenChoice SampleToken(absl::Span<const float> logits, const SamplingOptions& options,
                        absl::Span<const int32_t> prompt, absl::Span<const int32_t> output,
                        uint64_t seed, int top_logprobs, SamplerScratch& scratch);

// Whether SampleToken takes the argmax of the raw logits (temperature 0 and no penalty), so
// that a row selected on the device (Backend::TopLogprobs) serves the request.
bool PicksRawArgmax(const SamplingOptions& options);

// The choice SampleToken makes for such a request, from the row's device selection: `ids` and
// `logprobs` the best tokens in descending order (ties to the lower id), at least
// max(1, top_logprobs) of them.
TokenChoice ChoiceFromSelection(absl::Span<const int32_t> ids, absl::Span<const float> logprobs,
                                int top_logprobs);

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_SAMPLER_H_
