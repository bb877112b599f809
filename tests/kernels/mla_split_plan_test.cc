// The split-KV plan (kernels/mla_split_plan.h) against its contract, checked item by item, for
// both rules: every sequence's positions covered exactly once, in order, by non-empty
// block-aligned ranges no longer than the rule's target; the item count within
// MlaSplitCapacity; unused slots marked; the worked examples of the balancing rule; and, per
// sequence, a sequence's items the same whatever else the step plans.
#include "kernels/mla_split_plan.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mlaserve {
namespace {

struct Plan {
  std::vector<int32_t> offsets;
  std::vector<MlaSplitItem> items;
  int64_t used = 0;
};

constexpr MlaSplitRule kRules[] = {MlaSplitRule::kBalanced, MlaSplitRule::kPerSequence};

Plan MakePlan(const std::vector<int32_t>& lens, int64_t block_size, int64_t workers,
              MlaSplitRule rule = MlaSplitRule::kBalanced) {
  Plan plan;
  plan.offsets.assign(lens.size() + 1, -7);
  // Two slots beyond the capacity, to see that every slot past the plan is marked unused.
  plan.items.assign(MlaSplitCapacity(static_cast<int64_t>(lens.size()), workers, rule) + 2,
                    MlaSplitItem{-7, -7, -7});
  plan.used = PlanMlaSplits(lens, block_size, workers, absl::MakeSpan(plan.offsets),
                            absl::MakeSpan(plan.items), rule);
  return plan;
}

void ExpectValidPlan(const std::vector<int32_t>& lens, int64_t block_size, int64_t workers,
                     const Plan& plan, const std::string& what,
                     MlaSplitRule rule = MlaSplitRule::kBalanced) {
  SCOPED_TRACE(what);
  const int64_t num_seqs = static_cast<int64_t>(lens.size());
  auto blocks_of = [&](int64_t len) { return (len + block_size - 1) / block_size; };
  int64_t total_blocks = 0;
  for (int32_t len : lens) total_blocks += blocks_of(len);
  // Positions per item at most: the step's target, or the sequence's own.
  auto target_rows = [&](int64_t s) {
    const int64_t blocks = rule == MlaSplitRule::kBalanced ? total_blocks : blocks_of(lens[s]);
    return ((blocks + workers - 1) / workers) * block_size;
  };
  ASSERT_LE(plan.used, MlaSplitCapacity(num_seqs, workers, rule));
  ASSERT_EQ(plan.offsets[0], 0);
  ASSERT_EQ(plan.offsets[num_seqs], plan.used);
  for (int64_t s = 0; s < num_seqs; ++s) {
    ASSERT_LT(plan.offsets[s], plan.offsets[s + 1]) << "sequence " << s << " has no item";
    int32_t next = 0;  // the position the sequence's next item must start at
    for (int32_t i = plan.offsets[s]; i < plan.offsets[s + 1]; ++i) {
      const MlaSplitItem& item = plan.items[i];
      EXPECT_EQ(item.seq, s) << "item " << i;
      EXPECT_EQ(item.begin, next) << "item " << i;
      EXPECT_LT(item.begin, item.end) << "item " << i;
      EXPECT_EQ(item.begin % block_size, 0) << "item " << i;
      EXPECT_LE(item.end - item.begin, target_rows(s)) << "item " << i;
      next = item.end;
    }
    EXPECT_EQ(next, lens[s]) << "sequence " << s << " not covered to its length";
  }
  for (size_t i = static_cast<size_t>(plan.used); i < plan.items.size(); ++i) {
    EXPECT_EQ(plan.items[i].seq, -1) << "slot " << i;
    EXPECT_EQ(plan.items[i].begin, plan.items[i].end) << "slot " << i;
  }
}

TEST(MlaSplitPlanTest, OneLongSequenceIsSplitOverTheWorkers) {
  const Plan plan = MakePlan({1000}, 64, 4);  // 16 blocks, 4 per item
  ASSERT_EQ(plan.used, 4);
  const std::vector<std::pair<int32_t, int32_t>> expected = {
      {0, 256}, {256, 512}, {512, 768}, {768, 1000}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(plan.items[i].begin, expected[i].first);
    EXPECT_EQ(plan.items[i].end, expected[i].second);
  }
}

TEST(MlaSplitPlanTest, OneWorkerMeansOneItemPerSequence) {
  const std::vector<int32_t> lens = {1, 64, 65, 3000};
  const Plan plan = MakePlan(lens, 64, 1);
  EXPECT_EQ(plan.used, 4);
  ExpectValidPlan(lens, 64, 1, plan, "one worker");
}

TEST(MlaSplitPlanTest, ShortSequencesAreNotSplitBelowABlock) {
  const std::vector<int32_t> lens = {1, 5, 64};
  const Plan plan = MakePlan(lens, 64, 132);
  EXPECT_EQ(plan.used, 3);
  ExpectValidPlan(lens, 64, 132, plan, "short");
}

TEST(MlaSplitPlanTest, LongSequenceAmongShortOnesTakesTheSpareWorkers) {
  const std::vector<int32_t> lens = {6400, 10, 10, 10};  // 103 blocks over 8 workers: 13 each
  const Plan plan = MakePlan(lens, 64, 8);
  EXPECT_EQ(plan.offsets[1] - plan.offsets[0], 8);
  ExpectValidPlan(lens, 64, 8, plan, "mixed");
}

TEST(MlaSplitPlanTest, RandomLengthsBlockSizesAndWorkers) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t block_size = std::uniform_int_distribution<int>(1, 96)(rng);
    const int64_t workers = std::uniform_int_distribution<int>(1, 300)(rng);
    std::vector<int32_t> lens(std::uniform_int_distribution<int>(0, 40)(rng));
    for (int32_t& len : lens) len = std::uniform_int_distribution<int32_t>(1, 9000)(rng);
    for (MlaSplitRule rule : kRules) {
      ExpectValidPlan(lens, block_size, workers, MakePlan(lens, block_size, workers, rule),
                      "trial " + std::to_string(trial), rule);
    }
  }
}

TEST(MlaSplitPlanTest, PerSequenceSplitsEachSequenceAsIfAlone) {
  // 100 blocks over 8 workers: items of 13 blocks, 8 of them; each 10-token sequence one item.
  const std::vector<int32_t> lens = {6400, 10, 10, 10};
  const Plan plan = MakePlan(lens, 64, 8, MlaSplitRule::kPerSequence);
  EXPECT_EQ(plan.offsets[1] - plan.offsets[0], 8);
  EXPECT_EQ(plan.used, 11);
  // Beside a long sequence, a balanced plan leaves a 1000-token one whole; per sequence it is
  // cut as alone (16 blocks over 4 workers: 4 items).
  const std::vector<int32_t> company = {1000, 64000};
  EXPECT_EQ(MakePlan(company, 64, 4).offsets[1], 1);
  EXPECT_EQ(MakePlan(company, 64, 4, MlaSplitRule::kPerSequence).offsets[1], 4);
}

TEST(MlaSplitPlanTest, PerSequenceItemsDoNotDependOnTheCompany) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const int64_t block_size = std::uniform_int_distribution<int>(1, 96)(rng);
    const int64_t workers = std::uniform_int_distribution<int>(1, 40)(rng);
    std::vector<int32_t> lens(std::uniform_int_distribution<int>(1, 30)(rng));
    for (int32_t& len : lens) len = std::uniform_int_distribution<int32_t>(1, 9000)(rng);
    const Plan plan = MakePlan(lens, block_size, workers, MlaSplitRule::kPerSequence);
    for (size_t s = 0; s < lens.size(); ++s) {
      const Plan alone = MakePlan({lens[s]}, block_size, workers, MlaSplitRule::kPerSequence);
      ASSERT_EQ(plan.offsets[s + 1] - plan.offsets[s], alone.used) << "sequence " << s;
      EXPECT_LE(alone.used, workers);
      for (int32_t i = 0; i < alone.used; ++i) {
        EXPECT_EQ(plan.items[plan.offsets[s] + i].begin, alone.items[i].begin);
        EXPECT_EQ(plan.items[plan.offsets[s] + i].end, alone.items[i].end);
      }
    }
  }
}

TEST(MlaSplitPlanTest, SplitRangeCutsOnBlockBoundaries) {
  // Three parts of 130 positions in blocks of 64: 3 blocks as 1 + 1 + 1.
  EXPECT_EQ(MlaSplitRange(130, 3, 0, 64).begin, 0);
  EXPECT_EQ(MlaSplitRange(130, 3, 0, 64).end, 64);
  EXPECT_EQ(MlaSplitRange(130, 3, 1, 64).end, 128);
  EXPECT_EQ(MlaSplitRange(130, 3, 2, 64).end, 130);
  // More parts than blocks leaves some empty.
  EXPECT_EQ(MlaSplitRange(10, 4, 0, 64).end - MlaSplitRange(10, 4, 0, 64).begin, 0);
  EXPECT_EQ(MlaSplitRange(10, 4, 3, 64).end, 10);
}

}  // namespace
}  // namespace mlaserve
