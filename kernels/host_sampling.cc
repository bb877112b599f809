#include "kernels/host_sampling.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"

namespace mlaserve::sampling {
namespace {

// This processor's CPU kernels, for the vector maximum and exp sums over a row.
const CpuKernels& Kernels() {
  static const CpuKernels& kernels = GetCpuKernels(SelectCpuIsa());
  return kernels;
}

// ids[0, n) = 0, 1, ..., n - 1 in rank order (RankKey descending), the order std::sort by
// RankKey gives: a stable LSD radix sort of (key, id) pairs, three passes of 11 bits on the
// value's ordered bits descending, so that equal values keep their ascending ids. The keys are
// computed once and move with their ids, so every pass reads its input in order. `keys`: 2n
// entries of storage, `ids`: 2n (the second halves: each pass's output). A top-p draw from a
// 102,400-entry row took 9.2 ms with std::sort, 1.7 ms with a radix sort that read each key
// through its id and summed the probabilities twice, 1.4-1.5 ms with this and the sums kept.
void SortByRank(absl::Span<const float> v, uint32_t* keys, int32_t* ids, int32_t n) {
  constexpr int kBits = 11;
  constexpr uint32_t kMask = (1u << kBits) - 1;
  for (int32_t i = 0; i < n; ++i) {
    keys[i] = ~static_cast<uint32_t>(RankKey(v[static_cast<size_t>(i)], i) >> 32);
    ids[i] = i;
  }
  std::array<int32_t, size_t{1} << kBits> count;
  uint32_t* src_keys = keys;
  uint32_t* dst_keys = keys + n;
  int32_t* src_ids = ids;
  int32_t* dst_ids = ids + n;
  for (int shift = 0; shift < 32; shift += kBits) {
    std::fill(count.begin(), count.end(), 0);
    for (int32_t i = 0; i < n; ++i) ++count[(src_keys[i] >> shift) & kMask];
    int32_t start = 0;
    for (int32_t& c : count) start += std::exchange(c, start);
    for (int32_t i = 0; i < n; ++i) {
      const int32_t to = count[(src_keys[i] >> shift) & kMask]++;
      dst_keys[to] = src_keys[i];
      dst_ids[to] = src_ids[i];
    }
    std::swap(src_keys, dst_keys);
    std::swap(src_ids, dst_ids);
  }
  if (src_ids != ids) std::copy(src_ids, src_ids + n, ids);
}

// Whether a kept token's score (StreamDrawScore) is certainly below `best`. Its Gumbel noise
// -log(-log u) is at most -log(1 - u), since -log u >= 1 - u, so it stays below best when
// 1 - u > exp(a - best), a = (value - max) / temperature (inv_temperature = 1 / temperature).
// With t = a - best + 1e-6 (the margin covers every rounding) and 2^e <= 1 - u (e its binary
// exponent), e > t * log2(e) + 1 is enough: no logarithm is taken, and a draw skips the noise of
// most tokens this way and picks the same token.
bool CannotReach(float value, float max, double inv_temperature, uint64_t stream, int32_t id,
                 double best) {
  const double t = (static_cast<double>(value) - max) * inv_temperature - best + 1e-6;
  if (!(t < 0)) return false;  // NaN included
  if (t < -700) return true;   // the noise is below 38 for every 53-bit uniform
  const double rest = 1.0 - StreamUniform(stream, static_cast<uint32_t>(id));  // >= 2^-54
  uint64_t bits;
  std::memcpy(&bits, &rest, sizeof bits);
  const int exponent = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  return exponent > t * 1.4426950408889634 + 1.0 + 1e-9;
}

}  // namespace

// Draws from softmax(values / temperature) restricted by top-k, min-p and top-p. The kept set is
// a prefix of the rank order (kernels/sampling_math.h): the top_k best, then those whose
// probability relative to the best reaches min_p, then the shortest prefix holding top_p of
// what is left; the Gumbel-max trick with the (seed, position, token) noise picks among it.
int32_t DrawToken(absl::Span<const float> v, const RowOptions& o, DrawScratch& scratch) {
  const uint64_t seed = (uint64_t{o.seed_high} << 32) | o.seed_low;
  const uint64_t stream = RowStream(seed, static_cast<uint64_t>(o.position));
  const int32_t vocab = static_cast<int32_t>(v.size());
  const int32_t top = Argmax(v);
  const float max = v[top];
  int32_t n = vocab;
  std::vector<int32_t>& idx = scratch.ids;
  const bool cut = (o.top_k > 0 && o.top_k < vocab) || o.min_p > 0.0f || o.top_p < 1.0f;
  if (cut) {  // the kept tokens are idx[0, n); without a cut every token is kept
    auto by_rank = [&](int32_t a, int32_t b) {
      return RankKey(v[a], a) > RankKey(v[b], b);
    };
    if (o.top_k > 0 && o.top_k < vocab) {
      idx.resize(v.size());
      std::iota(idx.begin(), idx.end(), 0);
      std::nth_element(idx.begin(), idx.begin() + o.top_k, idx.end(), by_rank);
      n = o.top_k;
      std::sort(idx.begin(), idx.begin() + n, by_rank);
    } else {
      idx.resize(2 * v.size());  // the second half: the radix sort's buffer
      scratch.keys.resize(2 * v.size());
      SortByRank(v, scratch.keys.data(), idx.data(), n);
    }
    // mass[i]: the probabilities relative to the best of idx[0, i], summed in rank order; the
    // top-p cut reads these sums rather than adding the same terms again.
    std::vector<double>& mass = scratch.mass;
    mass.resize(static_cast<size_t>(n));
    double total = 0.0;
    for (int32_t i = 0; i < n; ++i) {
      const double p = RelativeProbability(v[idx[i]], max, o.temperature);
      if (i > 0 && p < o.min_p) {  // the best token has p = 1 and always stays
        n = i;
        break;
      }
      total += p;
      mass[static_cast<size_t>(i)] = total;
    }
    if (o.top_p < 1.0f) {
      // The shortest prefix holding top_p of the total.
      const double target = o.top_p * total;
      for (int32_t i = 0; i < n; ++i) {
        if (mass[static_cast<size_t>(i)] >= target) {
          n = i + 1;
          break;
        }
      }
    }
  }
  // The highest score, ties to the lower id, over the kept tokens.
  auto kept_id = [&](int32_t i) { return cut ? idx[i] : i; };
  int32_t best = kept_id(0);
  double best_score = -std::numeric_limits<double>::infinity();
  auto consider = [&](int32_t id) {
    const double score = StreamDrawScore(v[id], max, o.temperature, stream, id);
    if (score > best_score || (score == best_score && id < best)) {
      best_score = score;
      best = id;
    }
  };
  consider(cut ? idx[0] : top);  // a kept token of the largest value first, for the bound
  const double inv_temperature = 1.0 / static_cast<double>(o.temperature);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t id = kept_id(i);
    if (!CannotReach(v[id], max, inv_temperature, stream, id, best_score)) consider(id);
  }
  return best;
}

double LogSumExp(absl::Span<const float> values) {
  // Terms in f32 (expf is within 1 ulp), the sum in double: on a 102,400-entry row 0.39 ms
  // against 0.62 ms for a double exp per term, the result the same to 2e-9.
  const float max = *std::max_element(values.begin(), values.end());
  double sum = 0.0;
  for (float v : values) sum += std::exp(v - max);
  return static_cast<double>(max) + std::log(sum);
}

RowSummary SummarizeRow(absl::Span<const float> values) {
  const auto n = static_cast<int64_t>(values.size());
  const RowStats stats = Kernels().row_stats(values.data(), n);
  const auto block = values.subspan(static_cast<size_t>(stats.first_block),
                                    static_cast<size_t>(std::min(kRowStatsBlock,
                                                                 n - stats.first_block)));
  const auto first = std::find(block.begin(), block.end(), stats.max);
  // Not found only when a NaN took part in a block's maximum.
  const int32_t argmax = first != block.end()
                             ? static_cast<int32_t>(stats.first_block + (first - block.begin()))
                             : Argmax(values);
  return {.argmax = argmax,
          .log_sum_exp = static_cast<double>(stats.max) + std::log(stats.sum_exp)};
}

int32_t Argmax(absl::Span<const float> values) {
  const float max = Kernels().max(values.data(), static_cast<int64_t>(values.size()));
  const auto first = std::find(values.begin(), values.end(), max);
  // Not found only when a NaN took part in the vector maximum.
  const auto best =
      first != values.end() ? first : std::max_element(values.begin(), values.end());
  return static_cast<int32_t>(best - values.begin());
}

}  // namespace mlaserve::sampling
