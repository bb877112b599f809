// sampling::DrawToken against the distribution it must sample, worked out here independently:
// softmax(logits / temperature) restricted to the kept set, where the kept set is computed by
// the plain definitions (sort by logit then id; top-k prefix; relative probability >= min_p;
// shortest prefix holding top_p of the mass). Frequencies over 40,000 draws (positions 0..N of
// one seed) must lie within 5 standard deviations of the probabilities, kept tokens must all
// appear and no other token may.
#include "kernels/host_sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mlaserve::sampling {
namespace {

constexpr int kDraws = 40000;

RowOptions Options(float temperature, int32_t top_k, float top_p, float min_p, uint64_t seed) {
  return {.temperature = temperature,
          .top_p = top_p,
          .min_p = min_p,
          .top_k = top_k,
          .seed_low = static_cast<uint32_t>(seed),
          .seed_high = static_cast<uint32_t>(seed >> 32),
          .position = 0,
          .unused = 0};
}

// Probability of each token under the plain definition of the cuts.
std::vector<double> Expected(const std::vector<float>& logits, const RowOptions& o) {
  const int n = static_cast<int>(logits.size());
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const double max = logits[order[0]];
  std::vector<double> p(n);
  for (int i = 0; i < n; ++i) p[i] = std::exp((logits[i] - max) / o.temperature);
  int kept = (o.top_k > 0 && o.top_k < n) ? o.top_k : n;
  for (int i = 1; i < kept; ++i) {
    if (p[order[i]] < o.min_p) {
      kept = i;
      break;
    }
  }
  double total = 0.0;
  for (int i = 0; i < kept; ++i) total += p[order[i]];
  if (o.top_p < 1.0f) {
    double mass = 0.0;
    for (int i = 0; i < kept; ++i) {
      mass += p[order[i]];
      if (mass >= o.top_p * total) {
        kept = i + 1;
        total = mass;
        break;
      }
    }
  }
  std::vector<double> out(n, 0.0);
  for (int i = 0; i < kept; ++i) out[order[i]] = p[order[i]] / total;
  return out;
}

void ExpectSamples(const std::vector<float>& logits, RowOptions o, const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<double> expected = Expected(logits, o);
  std::vector<int> counts(logits.size(), 0);
  std::vector<int32_t> scratch;
  for (int i = 0; i < kDraws; ++i) {
    o.position = i;
    ++counts[DrawToken(logits, o, scratch)];
  }
  for (size_t t = 0; t < logits.size(); ++t) {
    if (expected[t] == 0.0) {
      EXPECT_EQ(counts[t], 0) << "token " << t << " is cut";
      continue;
    }
    const double mean = kDraws * expected[t];
    const double sigma = std::sqrt(kDraws * expected[t] * (1 - expected[t]));
    EXPECT_NEAR(counts[t], mean, 5 * sigma + 1) << "token " << t;
    EXPECT_GT(counts[t], 0) << "token " << t << " is kept";
  }
}

const std::vector<float> kRow = {1.0f, 2.5f, 0.3f, 2.5f, -1.0f, 1.7f, 0.9f};

TEST(HostSamplingTest, TemperatureAloneSamplesTheSoftmax) {
  ExpectSamples(kRow, Options(1.0f, 0, 1.0f, 0.0f, 1), "T=1");
  ExpectSamples(kRow, Options(0.5f, 0, 1.0f, 0.0f, 2), "T=0.5");
  ExpectSamples(kRow, Options(3.0f, 0, 1.0f, 0.0f, 3), "T=3");
}

TEST(HostSamplingTest, TopKKeepsTheBestWithTiesToTheLowerId) {
  ExpectSamples(kRow, Options(1.0f, 1, 1.0f, 0.0f, 4), "k=1: token 1, not its tie 3");
  ExpectSamples(kRow, Options(1.0f, 3, 1.0f, 0.0f, 5), "k=3");
}

TEST(HostSamplingTest, TopPKeepsTheShortestPrefixHoldingTheMass) {
  ExpectSamples(kRow, Options(1.0f, 0, 0.5f, 0.0f, 6), "p=0.5");
  ExpectSamples(kRow, Options(0.8f, 0, 0.9f, 0.0f, 7), "p=0.9");
  ExpectSamples(kRow, Options(1.0f, 4, 0.7f, 0.0f, 8), "k=4 then p=0.7");
}

TEST(HostSamplingTest, MinPCutsRelativeToTheBest) {
  ExpectSamples(kRow, Options(1.0f, 0, 1.0f, 0.3f, 9), "min_p=0.3");
  ExpectSamples(kRow, Options(1.0f, 0, 0.95f, 0.1f, 10), "min_p=0.1, p=0.95");
}

TEST(HostSamplingTest, DrawsDependOnSeedAndPositionOnly) {
  std::vector<int32_t> scratch;
  RowOptions o = Options(1.0f, 0, 1.0f, 0.0f, 42);
  std::vector<int32_t> first, again, other;
  for (int i = 0; i < 200; ++i) {
    o.position = i;
    first.push_back(DrawToken(kRow, o, scratch));
    again.push_back(DrawToken(kRow, o, scratch));
  }
  o.seed_high = 1;
  for (int i = 0; i < 200; ++i) {
    o.position = i;
    other.push_back(DrawToken(kRow, o, scratch));
  }
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
}

}  // namespace
}  // namespace mlaserve::sampling
