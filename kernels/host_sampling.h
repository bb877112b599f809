// A token drawn on the host, the way kernels/sampling_math.h defines it: the CPU engine's
// sampler (engine/sampler.cc) and every host backend's SampleTokens run this one function;
// the device's kernel (kernels/cuda/sampling.cu) is an independent implementation of the same
// selection, tested against it.
#ifndef MLASERVE_KERNELS_HOST_SAMPLING_H_
#define MLASERVE_KERNELS_HOST_SAMPLING_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "kernels/sampling_math.h"

namespace mlaserve::sampling {

// DrawToken's reused storage: a warmed-up draw allocates nothing.
struct DrawScratch {
  std::vector<int32_t> ids;           // the kept tokens, and a sort's buffer
  std::vector<uint32_t> keys;         // the tokens' rank keys, and a sort's keys and buffer
  std::vector<double> probabilities;  // relative to the best: every token's, or the top k's
  std::vector<double> bucket_mass;    // the kept probability of each range of rank keys
};

// Draws from softmax(values / temperature) restricted by top-k, min-p and top-p (REQUIRES:
// temperature > 0, values non-empty).
int32_t DrawToken(absl::Span<const float> values, const RowOptions& options, DrawScratch& scratch);
// The same draw when the caller has top = Argmax(values) already (the engine's sampler, from
// SummarizeRow), which spares two reads of the row.
int32_t DrawToken(absl::Span<const float> values, int32_t top, const RowOptions& options,
                  DrawScratch& scratch);

// log Σ exp(values): each term exp(v - max) in f32, the sum and the result in double
// (REQUIRES: values non-empty).
double LogSumExp(absl::Span<const float> values);

// A row's first largest entry and log-sum-exp, from one read of the row (CpuKernels::row_stats
// with this processor's kernels: vector exp in f32, partial sums of 256 terms in f32, their sum
// in double), which keeps the row out of the outer caches: the engine's sampler reads a batch
// of vocabulary-wide rows between two decode steps with it. `argmax` is Argmax(values) on rows
// without NaN and `log_sum_exp` agrees with LogSumExp to ~1e-6, ~10x faster on a
// vocabulary-wide row (REQUIRES: values non-empty).
struct RowSummary {
  int32_t argmax = 0;
  double log_sum_exp = 0.0;
};
RowSummary SummarizeRow(absl::Span<const float> values);

// The first index of the largest value, as std::max_element finds it (the same index on rows
// without NaN), from the vector maximum and one search: ~10x faster than std::max_element's
// dependent compare per entry on a vocabulary-wide row. Greedy decoding picks with it
// (REQUIRES: values non-empty).
int32_t Argmax(absl::Span<const float> values);

}  // namespace mlaserve::sampling

#endif  // MLASERVE_KERNELS_HOST_SAMPLING_H_
