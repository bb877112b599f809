#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/check.h"

namespace mlaserve {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// log(sum(exp(x))) in double for a row of f32 logits.
double LogSumExp(absl::Span<const float> x) {
  const float max = *std::max_element(x.begin(), x.end());
  double sum = 0.0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - max);
  return max + std::log(sum);
}

// vLLM's semantics: frequency and presence penalties count output tokens only; the
// repetition penalty divides positive (multiplies negative) logits of any token seen in the
// prompt or the output.
void ApplyPenalties(const SamplingOptions& o, absl::Span<const int32_t> prompt,
                    absl::Span<const int32_t> output, SamplerScratch& s) {
  const bool repetition = o.repetition_penalty != 1.0f;
  if (!repetition && o.presence_penalty == 0.0f && o.frequency_penalty == 0.0f) return;
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

int32_t Argmax(absl::Span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Draws from softmax(values / temperature) restricted by top-k, top-p and min-p.
int32_t Draw(const SamplingOptions& o, double u, SamplerScratch& s) {
  std::vector<float>& v = s.values;
  std::vector<int32_t>& idx = s.indices;
  const int32_t vocab = static_cast<int32_t>(v.size());
  idx.resize(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  auto by_value = [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
  int32_t n = vocab;
  if (o.top_k > 0 && o.top_k < vocab) {
    std::nth_element(idx.begin(), idx.begin() + o.top_k, idx.end(), by_value);
    n = o.top_k;
  }
  std::sort(idx.begin(), idx.begin() + n, by_value);
  const double max = v[idx[0]];
  double total = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    const double p = std::exp((v[idx[i]] - max) / o.temperature);
    // min-p keeps tokens whose probability is at least min_p times the best one's.
    if (o.min_p > 0.0f && p < o.min_p) {
      n = i;
      break;
    }
    v[idx[i]] = static_cast<float>(p);
    total += p;
  }
  if (o.top_p < 1.0f) {
    double kept = 0.0;
    for (int32_t i = 0; i < n; ++i) {
      kept += v[idx[i]];
      if (kept >= o.top_p * total) {
        n = i + 1;
        total = kept;
        break;
      }
    }
  }
  double target = u * total;
  for (int32_t i = 0; i < n; ++i) {
    target -= v[idx[i]];
    if (target < 0.0) return idx[i];
  }
  return idx[n - 1];
}

}  // namespace

double UniformDraw(uint64_t seed, uint64_t position) {
  const uint64_t bits = SplitMix64(SplitMix64(seed) ^ (position * 0xd1b54a32d192ed03ull));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}

TokenChoice SampleToken(absl::Span<const float> logits, const SamplingOptions& options,
                        absl::Span<const int32_t> prompt, absl::Span<const int32_t> output,
                        uint64_t seed, int top_logprobs, SamplerScratch& scratch) {
  scratch.values.assign(logits.begin(), logits.end());
  ApplyPenalties(options, prompt, output, scratch);
  TokenChoice choice;
  if (options.temperature == 0.0f) {
    choice.token = Argmax(scratch.values);
  } else {
    choice.token = Draw(options, UniformDraw(seed, output.size()), scratch);
  }
  const double lse = LogSumExp(logits);
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

bool PicksRawArgmax(const SamplingOptions& options) {
  return options.temperature == 0.0f && options.repetition_penalty == 1.0f &&
         options.presence_penalty == 0.0f && options.frequency_penalty == 0.0f;
}

TokenChoice ChoiceFromSelection(absl::Span<const int32_t> ids, absl::Span<const float> logprobs,
                                int top_logprobs) {
  MLASERVE_CHECK(!ids.empty() && ids.size() == logprobs.size() &&
                 ids.size() >= static_cast<size_t>(top_logprobs));
  TokenChoice choice{.token = ids[0], .logprob = logprobs[0], .top = {}};
  for (int i = 0; i < top_logprobs; ++i) choice.top.emplace_back(ids[i], logprobs[i]);
  return choice;
}

}  // namespace mlaserve
