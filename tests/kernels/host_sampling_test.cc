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
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_gumbel_screen.h"
#include "kernels/cpu/cpu_kernels.h"

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

// Uniform values in [-scale / 2, scale / 2), a linear congruential sequence from seed.
std::vector<float> LogitRow(size_t n, float scale, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t state = seed;
  for (float& x : v) {
    state = state * 1664525u + 1013904223u;
    x = scale * (static_cast<float>(state >> 8) / 16777216.0f - 0.5f);
  }
  return v;
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
  DrawScratch scratch;
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
  DrawScratch scratch;
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

// A vocabulary-sized row (the rank order comes from a radix sort there): four tokens tie at the
// cut, which keeps the two lowest ids among them, by top-p and then by top-k with the same
// scratch; every draw comes from the kept set of the plain definition, and each kept token is
// drawn.
TEST(HostSamplingTest, WideRowCutsTiesByRank) {
  std::vector<float> row(5000);
  for (size_t i = 0; i < row.size(); ++i) row[i] = -20.0f - static_cast<float>(i % 97) * 0.1f;
  row[100] = 5.5f;
  for (int id : {4000, 17, 2500, 3999}) row[id] = 5.0f;
  row[42] = -std::numeric_limits<float>::infinity();
  DrawScratch scratch;
  for (const RowOptions& o : {Options(1.0f, 0, 0.6f, 0.0f, 9), Options(1.0f, 3, 1.0f, 0.0f, 10)}) {
    const std::vector<double> expected = Expected(row, o);
    std::vector<int> kept;
    for (size_t t = 0; t < row.size(); ++t) {
      if (expected[t] > 0) kept.push_back(static_cast<int>(t));
    }
    ASSERT_EQ(kept, (std::vector<int>{17, 100, 2500})) << "top_k " << o.top_k;
    std::vector<int> counts(row.size(), 0);
    RowOptions draw = o;
    for (int i = 0; i < 3000; ++i) {
      draw.position = i;
      ++counts[DrawToken(row, draw, scratch)];
    }
    for (size_t t = 0; t < row.size(); ++t) {
      if (expected[t] > 0) {
        EXPECT_GT(counts[t], 0) << "top_k " << o.top_k << ": token " << t << " is kept";
      } else {
        EXPECT_EQ(counts[t], 0) << "top_k " << o.top_k << ": token " << t << " is cut";
      }
    }
  }
}

// Every draw is the Gumbel-max winner by the plain definition: the largest DrawScore over the
// kept tokens, ties to the lower id (DrawToken skips the noise of tokens whose bound says they
// cannot win; this checks it never skips the winner): low and high temperatures, a row of equal
// values (the noise alone decides), masked entries, and cuts — top-p also on a row of a few
// dozen distinct values (hundreds of tokens tie in the bucket where a top-p prefix ends, so the
// cut falls among ties) and on a vocabulary-wide row.
TEST(HostSamplingTest, DrawsAreTheGumbelMaxOfTheKeptTokens) {
  std::vector<float> spread(2000), masked(2000), flat(2000, 1.0f), steps(3000);
  std::vector<float> wide = LogitRow(102400, 12.0f, 31);
  uint32_t state = 11;
  for (size_t i = 0; i < spread.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    spread[i] = 10.0f * (static_cast<float>(state >> 8) / 16777216.0f - 0.5f);
    masked[i] = i % 3 == 0 ? -std::numeric_limits<float>::infinity() : spread[i];
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    steps[i] = std::round(spread[i % spread.size()] * 2.0f) / 4.0f + (i % 7 == 0 ? 0.0f : 0.5f);
  }
  struct Case {
    const std::vector<float>* row;
    RowOptions o;
  };
  std::vector<Case> cases;
  for (const std::vector<float>* row : {&spread, &masked, &flat}) {
    for (float t : {0.05f, 1.0f, 3.0f, 50.0f})
      cases.push_back({row, Options(t, 0, 1.0f, 0.0f, 21)});
  }
  cases.push_back({&spread, Options(1.0f, 50, 1.0f, 0.0f, 22)});
  cases.push_back({&spread, Options(0.7f, 0, 0.9f, 0.0f, 23)});
  cases.push_back({&masked, Options(2.0f, 0, 1.0f, 0.01f, 24)});
  for (float top_p : {0.05f, 0.3f, 0.9f, 0.999f}) {
    cases.push_back({&steps, Options(1.0f, 0, top_p, 0.0f, 25)});
  }
  cases.push_back({&steps, Options(0.5f, 0, 0.8f, 0.02f, 26)});
  cases.push_back({&wide, Options(1.0f, 0, 0.7f, 0.0f, 27)});
  cases.push_back({&wide, Options(1.3f, 0, 0.95f, 0.001f, 28)});
  // top-k cuts inside a run of ties (steps), past the finite values into the -inf ones
  // (masked keeps 1,333 finite of 2,000), just below the vocabulary, and with min-p and top-p
  // walking the prefix.
  for (int32_t top_k : {1, 7, 40, 333, 2999}) {
    cases.push_back({&steps, Options(1.0f, top_k, 1.0f, 0.0f, 29)});
  }
  cases.push_back({&steps, Options(0.8f, 300, 0.6f, 0.0f, 30)});
  cases.push_back({&masked, Options(1.0f, 1500, 1.0f, 0.0f, 31)});
  cases.push_back({&flat, Options(1.0f, 10, 1.0f, 0.0f, 32)});
  cases.push_back({&wide, Options(1.0f, 1000, 0.9f, 0.0f, 33)});
  cases.push_back({&wide, Options(2.0f, 20000, 1.0f, 0.01f, 34)});
  DrawScratch scratch;
  for (const Case& c : cases) {
    const std::vector<float>& row = *c.row;
    const std::vector<double> expected = Expected(row, c.o);
    const bool cut = c.o.top_k > 0 || c.o.top_p < 1.0f || c.o.min_p > 0.0f;
    const float max = *std::max_element(row.begin(), row.end());
    const uint64_t seed = (uint64_t{c.o.seed_high} << 32) | c.o.seed_low;
    RowOptions o = c.o;
    for (int pos = 0; pos < 200; ++pos) {
      o.position = pos;
      int32_t want = -1;
      double want_score = -std::numeric_limits<double>::infinity();
      for (int32_t id = 0; id < static_cast<int32_t>(row.size()); ++id) {
        if (cut && expected[id] == 0.0) continue;
        const double score = DrawScore(row[id], max, o.temperature, seed, pos, id);
        if (want < 0 || score > want_score) {
          want = id;
          want_score = score;
        }
      }
      ASSERT_EQ(DrawToken(row, o, scratch), want)
          << "T " << o.temperature << " top_k " << o.top_k << " top_p " << o.top_p << " min_p "
          << o.min_p << " position " << pos;
    }
  }
}

// A draw depends on the row and its options only, not on what the reused scratch holds from
// earlier draws: a scratch carried through every kind of cut draws what a fresh one draws.
TEST(HostSamplingTest, DrawsDoNotDependOnTheScratchHistory) {
  std::vector<float> row(20000);
  uint32_t state = 5;
  for (float& x : row) {
    state = state * 1664525u + 1013904223u;
    x = 10.0f * (static_cast<float>(state >> 8) / 16777216.0f - 0.5f);
  }
  DrawScratch carried;
  for (const RowOptions& o : {Options(1.0f, 0, 0.9f, 0.0f, 1), Options(1.0f, 50, 1.0f, 0.0f, 2),
                              Options(1.0f, 50, 0.9f, 0.0f, 3), Options(0.7f, 0, 1.0f, 0.05f, 4),
                              Options(1.0f, 0, 1.0f, 0.0f, 5)}) {
    RowOptions draw = o;
    for (int i = 0; i < 20; ++i) {
      draw.position = i;
      DrawScratch fresh;
      EXPECT_EQ(DrawToken(row, draw, carried), DrawToken(row, draw, fresh))
          << "top_k " << o.top_k << " top_p " << o.top_p << " position " << i;
    }
  }
}

// log Σ exp(v) in long double, term by term: the reference for both log-sum-exps.
long double ExactLogSumExp(const std::vector<float>& v) {
  const float max = *std::max_element(v.begin(), v.end());
  long double sum = 0;
  for (float x : v) sum += std::exp(static_cast<long double>(x) - max);
  return max + std::log(sum);
}

// Rows for the one-read statistics: random ones, a rising ramp (the maximum moves on in every
// block, so every block's sum is rescaled), leading blocks of -inf (their terms would be NaN
// against a maximum of -inf) and masked entries.
std::vector<std::vector<float>> StatsRows() {
  std::vector<std::vector<float>> rows;
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t n : {1, 7, 16, 17, 255, 256, 257, 1000, 102400}) {
    for (float scale : {1.0f, 40.0f}) {
      std::vector<float> v = LogitRow(n, scale, static_cast<uint32_t>(n));
      if (n > 10) v[3] = v[n - 2] = -inf;
      rows.push_back(std::move(v));
    }
  }
  for (float slope : {1e-3f, 0.05f}) {
    std::vector<float> ramp(5000);
    for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = slope * static_cast<float>(i);
    rows.push_back(std::move(ramp));
  }
  std::vector<float> late = LogitRow(3000, 10.0f, 11);
  std::fill(late.begin(), late.begin() + 600, -inf);
  rows.push_back(std::move(late));
  return rows;
}

// The CPU builds this processor runs (the AMX build's vector code is the AVX-512 BF16 one's).
std::vector<CpuIsa> HostIsas() {
  std::vector<CpuIsa> isas = {CpuIsa::kScalar};
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
    if (DetectCpuIsa() >= isa) isas.push_back(isa);
  }
  return isas;
}

// Units in the last place between two non-negative doubles (their bit patterns are ordered
// as the values are, subnormals included).
int64_t UlpsApart(double a, double b) {
  int64_t ia, ib;
  std::memcpy(&ia, &a, sizeof ia);
  std::memcpy(&ib, &b, sizeof ib);
  return ia > ib ? ia - ib : ib - ia;
}

// Every CPU build this processor runs: CpuKernels::relative_probabilities against std::exp of
// the same quotient, within two ulp: values from the maximum down through the subnormal results
// (quotients -708 to -745) and past them to 0, masked (-inf) entries, a NaN, temperatures from
// 0.05 to 50 and every length around the vector widths.
TEST(HostSamplingTest, RelativeProbabilitiesMatchStdExp) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float temperature : {0.05f, 0.7f, 1.0f, 1.3f, 50.0f}) {
    const float max = 3.5f;
    std::vector<float> v;
    for (double d = 0.0; d < 760.0; d += 0.0137) {
      v.push_back(static_cast<float>(max - temperature * d));
    }
    for (double d = 705.0; d < 748.0; d += 0.001) {
      v.push_back(static_cast<float>(max - temperature * d));
    }
    v.push_back(max);
    v.push_back(-inf);
    v.push_back(std::numeric_limits<float>::quiet_NaN());
    for (CpuIsa isa : HostIsas()) {
      const CpuKernels& kernels = GetCpuKernels(isa);
      for (size_t n :
           {size_t{1}, size_t{3}, size_t{4}, size_t{7}, size_t{9}, size_t{17}, v.size()}) {
        const size_t first = v.size() - n;  // the row's last n entries: -inf and NaN included
        std::vector<double> p(n + 1, -1.0);
        kernels.relative_probabilities(v.data() + first, static_cast<int64_t>(n), max, temperature,
                                       p.data());
        EXPECT_EQ(p[n], -1.0) << CpuIsaName(isa) << ": wrote past n=" << n;
        for (size_t i = 0; i < n; ++i) {
          const float x = v[first + i];
          const double want = std::exp((static_cast<double>(x) - max) / temperature);
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(p[i])) << CpuIsaName(isa) << " x=" << x;
            continue;
          }
          ASSERT_LE(UlpsApart(p[i], want), 2) << CpuIsaName(isa) << " T=" << temperature
                                              << " x=" << x << ": " << p[i] << " against " << want;
        }
      }
    }
  }
}

// Every CPU build this processor runs: CpuKernels::gumbel_screen drops only tokens whose exact
// Gumbel-max score (StreamDrawScore) is below the best, keeps exactly the tokens of the rule
// token by token (cpu_impl::ScreenKeeps), and with a best score a winner would have drops most
// of a row. Tokens gathered through ids and counted alike, lengths around the lane counts,
// NaN and -inf values, temperatures 0.05 to 50.
TEST(HostSamplingTest, GumbelScreenDropsOnlyTokensThatCannotWin) {
  const std::vector<float> row = [] {
    std::vector<float> v = LogitRow(5000, 12.0f, 41);
    v[17] = std::numeric_limits<float>::quiet_NaN();
    v[18] = -std::numeric_limits<float>::infinity();
    return v;
  }();
  const float max = 6.0f;  // above every finite value of the row
  std::vector<int32_t> ids;
  for (int32_t i = 4999; i >= 0; i -= 3) ids.push_back(i);
  for (CpuIsa isa : HostIsas()) {
    const CpuKernels& kernels = GetCpuKernels(isa);
    for (float temperature : {0.05f, 0.7f, 1.0f, 50.0f}) {
      for (double best : {-5.0, 0.0, 2.0, 9.0}) {
        const uint64_t stream = RowStream(77, static_cast<uint64_t>(best * 10 + temperature));
        const GumbelScreen screen{.values = row.data(),
                                  .max = max,
                                  .inv_temperature = 1.0 / static_cast<double>(temperature),
                                  .stream = stream,
                                  .best = best};
        for (const bool gathered : {false, true}) {
          const int32_t* through_ids = gathered ? ids.data() : nullptr;
          const int32_t count = gathered ? static_cast<int32_t>(ids.size()) : 5000;
          for (int32_t begin : {0, 3}) {
            for (int32_t end : {count, count - 5, begin + 9}) {
              std::vector<int32_t> out(static_cast<size_t>(end - begin));
              const int32_t m = kernels.gumbel_screen(screen, through_ids, begin, end, out.data());
              out.resize(static_cast<size_t>(m));
              std::vector<int32_t> want;
              for (int32_t i = begin; i < end; ++i) {
                const int32_t id = gathered ? ids[static_cast<size_t>(i)] : i;
                const bool keeps = cpu_impl::ScreenKeeps(screen, row[static_cast<size_t>(id)], id);
                if (keeps) want.push_back(id);
                const double score =
                    StreamDrawScore(row[static_cast<size_t>(id)], max, temperature, stream, id);
                if (!keeps) {
                  ASSERT_LT(score, best) << CpuIsaName(isa) << " dropped token " << id;
                }
              }
              ASSERT_EQ(out, want)
                  << CpuIsaName(isa) << " T=" << temperature << " best=" << best
                  << " gathered=" << gathered << " [" << begin << ", " << end << ")";
              if (temperature == 1.0f && best == 9.0 && end == count) {
                EXPECT_LT(m, count / 20) << CpuIsaName(isa) << ": the screen keeps too much";
              }
            }
          }
        }
      }
    }
  }
}

// Every CPU build this processor runs: CpuKernels::row_stats against long double and
// std::max_element; and SummarizeRow (the engine's) against the same references.
TEST(HostSamplingTest, RowStatsMatchLongDouble) {
  const std::vector<CpuIsa> isas = HostIsas();
  for (const std::vector<float>& v : StatsRows()) {
    const auto top = std::max_element(v.begin(), v.end());
    const float max = *top;
    long double exact = 0;
    for (float x : v) exact += std::exp(static_cast<long double>(x) - max);
    for (CpuIsa isa : isas) {
      const RowStats stats = GetCpuKernels(isa).row_stats(v.data(), static_cast<int64_t>(v.size()));
      const std::string what = std::string(CpuIsaName(isa)) + " n=" + std::to_string(v.size()) +
                               " v[1]=" + std::to_string(v[v.size() > 1 ? 1 : 0]);
      EXPECT_EQ(stats.max, max) << what;
      EXPECT_EQ(stats.first_block, (top - v.begin()) / kRowStatsBlock * kRowStatsBlock) << what;
      EXPECT_NEAR(stats.sum_exp / static_cast<double>(exact), 1.0, 2e-6) << what;
    }
    const RowSummary summary = SummarizeRow(v);
    EXPECT_EQ(summary.argmax, top - v.begin()) << "n=" << v.size();
    EXPECT_NEAR(summary.log_sum_exp, static_cast<double>(ExactLogSumExp(v)), 2e-6)
        << "n=" << v.size();
  }
  for (float scale : {1.0f, 40.0f}) {
    const std::vector<float> row = LogitRow(102400, scale, 7);
    EXPECT_NEAR(LogSumExp(row), static_cast<double>(ExactLogSumExp(row)), 2e-6);
  }
}

// Argmax and SummarizeRow's argmax against std::max_element (the first index of the largest
// value): rows of every length around the vector widths, the maximum in the vector part or the
// tail, repeated maxima (ties go to the first), masked (-inf) entries and all -inf rows.
TEST(HostSamplingTest, ArgmaxIsTheFirstLargestEntry) {
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t n : {1, 2, 15, 16, 17, 31, 33, 1000, 102400}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      std::vector<float> v = LogitRow(n, 10.0f, seed * 7919u + static_cast<uint32_t>(n));
      const std::string what = "n=" + std::to_string(n) + " seed=" + std::to_string(seed);
      if (seed == 2) {  // the maximum in the last (tail) entry, and masked entries
        v[n - 1] = 100.0f;
        if (n > 3) v[1] = -inf;
      }
      if (seed == 3 && n > 4) {  // a tie: the same maximum at three places
        v[n / 3] = v[n / 2] = v[n - 2] = 50.0f;
      }
      EXPECT_EQ(Argmax(v), std::max_element(v.begin(), v.end()) - v.begin()) << what;
      EXPECT_EQ(SummarizeRow(v).argmax, Argmax(v)) << what;
    }
  }
  EXPECT_EQ(Argmax(std::vector<float>(40, -inf)), 0);
  EXPECT_EQ(SummarizeRow(std::vector<float>(600, -inf)).argmax, 0);
}

}  // namespace
}  // namespace mlaserve::sampling
