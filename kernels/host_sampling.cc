#include "kernels/host_sampling.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
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

// The value's place in rank order as an unsigned key, smaller first (RankKey's upper half,
// inverted).
uint32_t DescendingKey(float value) { return ~static_cast<uint32_t>(RankKey(value, 0) >> 32); }

// Sorts ids[0, n), given in ascending order, into rank order (RankKey descending), the order
// std::sort by RankKey gives: a stable LSD radix sort of (key, id) pairs, three passes of 11
// bits on DescendingKey, so that equal values keep their ascending ids. The keys are read
// through the ids once and then move with them, so every pass reads its input in order.
// `keys`: 2n entries of storage; `ids`: 2n (the second halves: each pass's output).
void SortByRank(absl::Span<const float> v, uint32_t* keys, int32_t* ids, int32_t n) {
  constexpr int kBits = 11;
  constexpr uint32_t kMask = (1u << kBits) - 1;
  for (int32_t i = 0; i < n; ++i) keys[i] = DescendingKey(v[static_cast<size_t>(ids[i])]);
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

// Buckets of DescendingKey (its sign, exponent and top three mantissa bits): the cuts below
// find the bucket they end in from a pass over the row and rank that bucket's tokens alone.
constexpr int kBucketShift = 20;
constexpr size_t kRankBuckets = size_t{1} << (32 - kBucketShift);

// The top_k best tokens (0 < top_k < v.size()) in rank order, into scratch.ids[0, top_k): the
// same as std::nth_element and std::sort by RankKey, from a count of each bucket's tokens and
// a sort of the tokens up to the bucket where the k-th falls. On a 102,400-entry row, top_k
// 50: 0.80-1.17 ms with nth_element, 0.15 with the buckets.
void KeepTopK(absl::Span<const float> v, int32_t top_k, DrawScratch& s) {
  const size_t vocab = v.size();
  std::vector<uint32_t>& keys = s.keys;
  keys.resize(3 * vocab);  // each token's key, then the sort's keys and buffer
  std::array<int32_t, kRankBuckets> count{};
  for (size_t i = 0; i < vocab; ++i) {
    keys[i] = DescendingKey(v[i]);
    ++count[keys[i] >> kBucketShift];
  }
  uint32_t end_bucket = 0;  // the bucket of the k-th token
  for (int32_t before = 0; before + count[end_bucket] < top_k; ++end_bucket) {
    before += count[end_bucket];
  }
  std::vector<int32_t>& ids = s.ids;
  ids.resize(2 * vocab);  // the candidates, then the sort's buffer
  int32_t n = 0;
  for (size_t i = 0; i < vocab; ++i) {
    ids[static_cast<size_t>(n)] = static_cast<int32_t>(i);
    n += (keys[i] >> kBucketShift) <= end_bucket;
  }
  SortByRank(v, keys.data() + vocab, ids.data(), n);
}

// The kept tokens of a draw without a top-k cut, into scratch.ids[0, n); returns n. Those whose
// probability relative to the best reaches min_p (the best, `top`, always), then for top_p < 1
// the shortest prefix of them in rank order that holds top_p of their total. The prefix is
// found without sorting the row: the mass of each of kRankBuckets buckets of DescendingKey (the
// value's sign, exponent and top three mantissa bits) gives the bucket where the prefix ends,
// and only that bucket's tokens are sorted. The sums run bucket by bucket, each in id order,
// not in rank order, so a cut may differ from a rank-order sum's (and the device's) only
// where the mass lands within double rounding of top_p's share. A top-p draw from a
// 102,400-entry row: 9.2 ms when std::sort ranked the whole row, 1.7 ms with a radix sort
// through the ids, 1.35 with a radix sort of (key, id) pairs, 0.75 with the buckets, about
// half that with the probabilities from the vector exp (CpuKernels::relative_probabilities,
// within two ulp of std::exp: a cut may differ from one with std::exp's values only where the
// mass lands that close to top_p's share).
int32_t KeepByMass(absl::Span<const float> v, int32_t top, float max, const RowOptions& o,
                   DrawScratch& s) {
  const size_t vocab = v.size();
  std::vector<double>& p = s.probabilities;
  p.resize(vocab);
  std::vector<uint32_t>& keys = s.keys;
  keys.resize(3 * vocab);  // each token's key, then the boundary sort's keys and buffer
  std::vector<double>& mass = s.bucket_mass;
  mass.assign(kRankBuckets, 0.0);
  const bool by_mass = o.top_p < 1.0f;
  // kept(i): p[i] is not below min_p (a NaN stays, as a rank-order walk keeps it), or i is
  // the best.
  auto kept = [&](size_t i) {
    return static_cast<bool>(!(p[i] < o.min_p) | (i == static_cast<size_t>(top)));
  };
  Kernels().relative_probabilities(v.data(), static_cast<int64_t>(vocab), max, o.temperature,
                                   p.data());
  std::vector<int32_t>& ids = s.ids;
  ids.resize(3 * vocab);  // the kept ids, the boundary bucket's, and its sort's buffer
  int32_t n = 0;
  if (!by_mass) {  // min-p alone keeps a run of most tokens or of few: a branch predicts it
    for (size_t i = 0; i < vocab; ++i) {
      if (kept(i)) ids[static_cast<size_t>(n++)] = static_cast<int32_t>(i);
    }
    return n;
  }
  for (size_t i = 0; i < vocab; ++i) {
    keys[i] = DescendingKey(v[i]);
    mass[keys[i] >> kBucketShift] += kept(i) ? p[i] : 0.0;
  }
  double total = 0.0;
  for (double m : mass) total += m;
  const double target = o.top_p * total;
  size_t end_bucket = kRankBuckets;  // kept: buckets before it, and a prefix of it
  double before = 0.0;               // the mass of the buckets before it
  for (size_t b = 0; b < kRankBuckets; ++b) {
    if (before + mass[b] >= target) {  // never when a NaN took part: all are kept
      end_bucket = b;
      break;
    }
    before += mass[b];
  }
  // The kept tokens before the boundary bucket and those in it, in one pass without branches
  // (the buckets fall in no pattern a branch could predict).
  int32_t m = 0;
  int32_t* boundary = ids.data() + vocab;
  for (size_t i = 0; i < vocab; ++i) {
    const uint32_t bucket = keys[i] >> kBucketShift;
    const bool take = kept(i);
    ids[static_cast<size_t>(n)] = boundary[m] = static_cast<int32_t>(i);
    n += take & (bucket < end_bucket);
    m += take & (bucket == end_bucket);
  }
  SortByRank(v, keys.data() + vocab, boundary, m);
  double sum = before;
  int32_t j = 0;
  while (j < m) {
    sum += p[static_cast<size_t>(boundary[j])];
    ids[static_cast<size_t>(n++)] = boundary[j++];
    if (sum >= target) break;
  }
  return n;  // all of the bucket when its sum in rank order fell short by rounding
}

}  // namespace

// Draws from softmax(values / temperature) restricted by top-k, min-p and top-p. The kept set is
// a prefix of the rank order (kernels/sampling_math.h): the top_k best, then those whose
// probability relative to the best reaches min_p, then the shortest prefix holding top_p of
// what is left; the Gumbel-max trick with the (seed, position, token) noise picks among it, in
// any order (ties go to the lower id).
int32_t DrawToken(absl::Span<const float> v, int32_t top, const RowOptions& o,
                  DrawScratch& scratch) {
  const uint64_t seed = (uint64_t{o.seed_high} << 32) | o.seed_low;
  const uint64_t stream = RowStream(seed, static_cast<uint64_t>(o.position));
  const int32_t vocab = static_cast<int32_t>(v.size());
  const float max = v[top];
  int32_t n = vocab;
  std::vector<int32_t>& idx = scratch.ids;
  const bool cut = (o.top_k > 0 && o.top_k < vocab) || o.min_p > 0.0f || o.top_p < 1.0f;
  if (cut && !(o.top_k > 0 && o.top_k < vocab)) {
    n = KeepByMass(v, top, max, o, scratch);
  } else if (cut) {  // the top_k best in rank order, then min-p and top-p walk that prefix
    KeepTopK(v, o.top_k, scratch);
    n = o.top_k;
    std::vector<double>& p = scratch.probabilities;  // each kept token's, for the top-p walk
    p.resize(static_cast<size_t>(n));
    double total = 0.0;
    for (int32_t i = 0; i < n; ++i) {
      p[static_cast<size_t>(i)] = RelativeProbability(v[idx[i]], max, o.temperature);
      if (i > 0 && p[static_cast<size_t>(i)] < o.min_p) {  // the best has p = 1 and stays
        n = i;
        break;
      }
      total += p[static_cast<size_t>(i)];
    }
    if (o.top_p < 1.0f) {
      double kept = 0.0;
      for (int32_t i = 0; i < n; ++i) {
        kept += p[static_cast<size_t>(i)];
        if (kept >= o.top_p * total) {
          n = i + 1;
          break;
        }
      }
    }
  }
  // The highest score, ties to the lower id, over the kept tokens idx[0, n) (every token
  // without a cut), of those the Gumbel screen (CpuKernels::gumbel_screen) lets through: a
  // chunk at a time against the best score before it, which only rises.
  int32_t best = top;
  double best_score = -std::numeric_limits<double>::infinity();
  auto consider = [&](int32_t id) {
    const double score = StreamDrawScore(v[id], max, o.temperature, stream, id);
    if (score > best_score || (score == best_score && id < best)) {
      best_score = score;
      best = id;
    }
  };
  consider(top);  // kept by every cut: the largest value first, for the bound
  GumbelScreen screen{.values = v.data(),
                      .max = max,
                      .inv_temperature = 1.0 / static_cast<double>(o.temperature),
                      .stream = stream,
                      .best = best_score};
  constexpr int32_t kChunk = 256;
  std::array<int32_t, kChunk> through;
  for (int32_t begin = 0; begin < n; begin += kChunk) {
    screen.best = best_score;
    const int32_t m = Kernels().gumbel_screen(screen, cut ? idx.data() : nullptr, begin,
                                              std::min(n, begin + kChunk), through.data());
    for (int32_t j = 0; j < m; ++j) consider(through[static_cast<size_t>(j)]);
  }
  return best;
}

int32_t DrawToken(absl::Span<const float> values, const RowOptions& options, DrawScratch& scratch) {
  return DrawToken(values, Argmax(values), options, scratch);
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
  const auto block =
      values.subspan(static_cast<size_t>(stats.first_block),
                     static_cast<size_t>(std::min(kRowStatsBlock, n - stats.first_block)));
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
  const auto best = first != values.end() ? first : std::max_element(values.begin(), values.end());
  return static_cast<int32_t>(best - values.begin());
}

}  // namespace mlaserve::sampling
