// Token selection from one row of logits: penalties, temperature, top-k, top-p, min-p, and
// counter-based noise keyed by (seed, output position, token) so that a seeded request draws the
// same tokens whatever else is batched with it, after a preemption, and on every backend (the
// device draws the same way: kernels/sampling_math.h, Backend::SampleTokens). Logprobs reported are
// the model's raw log-softmax over the full vocabulary (before penalties and temperature).
// Stateless and thread-compatible: each call uses only its arguments and `scratch`.
#ifndef MLASERVE_ENGINE_SAMPLER_H_
#define MLASERVE_ENGINE_SAMPLER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "engine/request.h"
#include "kernels/host_sampling.h"
#include "kernels/sampling_math.h"

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
  sampling::DrawScratch draw;
};

// logits: [vocab] raw model output. `prompt` and `output` are the sequence's tokens (for the
// repetition/presence/frequency penalties). `seed` is the request's (the engine picks one for
// requests without). Ties in greedy selection pick the lowest id.
TokenChoice SampleToken(absl::Span<const float> logits, const SamplingOptions& options,
                        absl::Span<const int32_t> prompt, absl::Span<const int32_t> output,
                        uint64_t seed, int top_logprobs, SamplerScratch& scratch);

// Whether SampleToken's choice depends on the logits row alone (no penalty), so that the
// device may draw it the same way (Backend::SampleTokens).
bool SamplesFromLogitsAlone(const SamplingOptions& options);

// What the draw of output position `position` (output tokens so far) reads: the options, the
// seed and the position (kernels/sampling_math.h).
sampling::RowOptions RowOptionsFor(const SamplingOptions& options, uint64_t seed, size_t position);

// The choice SampleToken makes, from a device draw: the token, its raw logprob and the row's
// best tokens in descending order (ties to the lower id), at least `wanted` of them.
TokenChoice ChoiceFromDraw(int32_t token, float logprob, absl::Span<const int32_t> best_ids,
                           absl::Span<const float> best_logprobs, int wanted);

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_SAMPLER_H_
