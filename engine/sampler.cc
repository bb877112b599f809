#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/check.h"
#include "kernels/host_sampling.h"

namespace mlaserve {
namespace {

// vLLM's semantics: frequency and presence penalties count output tokens only; the
// repetition penalty divides positive (multiplies negative) logits of any token seen in the
// prompt or the output. Only for options with a penalty (!SamplesFromLogitsAlone).
void ApplyPenalties(const SamplingOptions& o, absl::Span<const int32_t> prompt,
                    absl::Span<const int32_t> output, SamplerScratch& s) {
  const bool repetition = o.repetition_penalty != 1.0f;
  std::vector<int32_t>& counts = s.counts;  // > 0: times in output; -1: prompt only
  counts.assign(s.values.size(), 0);
  for (int32_t t : output) ++counts[t];
  for (size_t t = 0; t < counts.size(); ++t) {
    if (counts[t] > 0) {
      s.values[t] -= o.frequency_penalty * static_cast<float>(counts[t]) + o.presence_penalty;
    }
  }
  if (!repetition) return;
  for (int32_t t : prompt) {
    if (counts[t] == 0) counts[t] = -1;
  }
  for (size_t t = 0; t < counts.size(); ++t) {
    if (counts[t] == 0) continue;
    float& v = s.values[t];
    v = v > 0 ? v / o.repetition_penalty : v * o.repetition_penalty;
  }
}

}  // namespace

TokenChoice SampleToken(absl::Span<const float> logits, const SamplingOptions& options,
                        absl::Span<const int32_t> prompt, absl::Span<const int32_t> output,
                        uint64_t seed, int top_logprobs, SamplerScratch& scratch) {
  // The draw reads the logits in place unless penalties rewrite them.
  absl::Span<const float> values = logits;
  if (!SamplesFromLogitsAlone(options)) {
    scratch.values.assign(logits.begin(), logits.end());
    ApplyPenalties(options, prompt, output, scratch);
    values = scratch.values;
  }
  // One read of the raw row gives the logprob's log-sum-exp and, unless penalties rewrote the
  // values drawn from, their largest entry: a greedy draw's token, a sampled draw's bound.
  const sampling::RowSummary raw = sampling::SummarizeRow(logits);
  const double lse = raw.log_sum_exp;
  const int32_t top = values.data() == logits.data() ? raw.argmax : sampling::Argmax(values);
  TokenChoice choice;
  if (options.temperature == 0.0f) {
    choice.token = top;
  } else {
    choice.token = sampling::DrawToken(values, top, RowOptionsFor(options, seed, output.size()),
                                       scratch.draw);
  }
  choice.logprob = static_cast<float>(logits[choice.token] - lse);
  if (top_logprobs > 0) {
    std::vector<int32_t>& idx = scratch.indices;
    idx.resize(logits.size());
    std::iota(idx.begin(), idx.end(), 0);
    const int32_t k = std::min<int32_t>(top_logprobs, static_cast<int32_t>(logits.size()));
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int32_t i = 0; i < k; ++i) {
      choice.top.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lse));
    }
  }
  return choice;
}

bool SamplesFromLogitsAlone(const SamplingOptions& options) {
  return options.repetition_penalty == 1.0f && options.presence_penalty == 0.0f &&
         options.frequency_penalty == 0.0f;
}

sampling::RowOptions RowOptionsFor(const SamplingOptions& options, uint64_t seed,
                                   size_t position) {
  return {.temperature = options.temperature,
          .top_p = options.top_p,
          .min_p = options.min_p,
          .top_k = options.top_k,
          .seed_low = static_cast<uint32_t>(seed),
          .seed_high = static_cast<uint32_t>(seed >> 32),
          .position = static_cast<int32_t>(position),
          .unused = 0};
}

TokenChoice ChoiceFromDraw(int32_t token, float logprob, absl::Span<const int32_t> best_ids,
                           absl::Span<const float> best_logprobs, int wanted) {
  MLASERVE_CHECK(best_ids.size() == best_logprobs.size() &&
                 best_ids.size() >= static_cast<size_t>(wanted));
  TokenChoice choice{.token = token, .logprob = logprob, .top = {}};
  for (int i = 0; i < wanted; ++i) choice.top.emplace_back(best_ids[i], best_logprobs[i]);
  return choice;
}

}  // namespace mlaserve
