// ForwardBatchBuilder::BuildDecodes (a replayed decode step written into the views its bucket
// was captured over) against Build, the general planner every eager step runs, over the same
// sequences: the metadata words copied to the device and the logits rows must be the same, on
// a backend whose memory the host writes in place and on one it copies staged words to.
#include "engine/forward_batch.h"

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/copy_only_backend.h"

namespace mlaserve {
namespace {

constexpr int64_t kBlockSize = 16;
constexpr int64_t kMaxBlocks = 6;

ForwardLimits Limits(int64_t split_workers, MlaSplitRule rule) {
  return {.max_num_tokens = 64,
          .max_num_seqs = 8,
          .max_blocks_per_seq = kMaxBlocks,
          .block_size = kBlockSize,
          .context_chunk_tokens = 64,
          .max_context_rounds = 8,
          .mla_split_workers = split_workers,
          .mla_split_rule = rule};
}

// Decoding sequences with random lengths, tokens and block tables (each table just long enough).
struct Decodes {
  Decodes(int32_t count, std::mt19937* rng) : tokens(count), tables(count) {
    for (int32_t i = 0; i < count; ++i) {
      const int32_t start = std::uniform_int_distribution<int32_t>(0, 95)(*rng);
      for (int32_t t = 0; t <= start; ++t) tokens[i].push_back((*rng)() % 1000);
      const int32_t blocks = static_cast<int32_t>((start + kBlockSize) / kBlockSize);
      for (int32_t b = 0; b < blocks; ++b) tables[i].push_back(1 + (*rng)() % 40);
      seqs.push_back({.token_ids = tokens[i], .start_position = start, .num_new_tokens = 1,
                      .block_table = tables[i], .needs_logits = true});
    }
  }
  std::vector<std::vector<int32_t>> tokens, tables;
  std::vector<StepSequence> seqs;
};

// A host backend that claims no host address: the builder stages its words and copies them.
class StagingBackend final : public CopyOnlyBackend {
 public:
  const void* HostAddress(const TensorView&) const override { return nullptr; }
};

std::vector<int32_t> Words(const ForwardBatch& fb) {
  const auto* base = static_cast<const int32_t*>(fb.input_ids.data());  // the buffer's start
  return {base, base + fb.metadata_words};
}

// Both builders on `backend`, over every bucket, decode count and split-KV plan.
void ExpectBuildDecodesWritesWhatBuildWrites(Backend* backend) {
  std::mt19937 rng(7);
  for (const int64_t workers : {0, 4}) {
    for (const MlaSplitRule rule : {MlaSplitRule::kBalanced, MlaSplitRule::kPerSequence}) {
      auto planner = ForwardBatchBuilder::Create(Limits(workers, rule), backend);
      auto replayer = ForwardBatchBuilder::Create(Limits(workers, rule), backend);
      ASSERT_TRUE(planner.ok() && replayer.ok());
      for (const int32_t bucket : {1, 4, 8}) {
        ForwardBatch padded;  // as a capture plans it: padding rows only
        replayer->Build({}, &padded, bucket);
        ASSERT_EQ(padded.num_decodes, bucket);
        const DecodeLayout layout = replayer->DecodeLayoutOf(padded);
        for (int round = 0; round < 4; ++round) {
          for (int32_t count = 0; count <= bucket; ++count) {
            SCOPED_TRACE(testing::Message() << "workers " << workers << " rule "
                                            << static_cast<int>(rule) << " bucket " << bucket
                                            << " decodes " << count << " round " << round);
            const Decodes step(count, &rng);
            ForwardBatch expected;
            planner->Build(step.seqs, &expected, bucket);
            replayer->BuildDecodes(step.seqs, layout);
            EXPECT_EQ(expected.metadata_words, layout.words);
            EXPECT_EQ(Words(expected), Words(padded));
            // BuildDecodes' logit rows: row r is seqs[r] (GraphRunner::Prepare relies on it).
            std::vector<int32_t> items(static_cast<size_t>(count));
            std::iota(items.begin(), items.end(), 0);
            EXPECT_EQ(expected.logit_items, items);
          }
        }
      }
    }
  }
}

TEST(ForwardBatchTest, BuildDecodesWritesWhatBuildWritesInPlace) {
  CopyOnlyBackend backend;
  ExpectBuildDecodesWritesWhatBuildWrites(&backend);
}

TEST(ForwardBatchTest, BuildDecodesWritesWhatBuildWritesStaged) {
  StagingBackend backend;
  ExpectBuildDecodesWritesWhatBuildWrites(&backend);
}

// A replay's block-table rows hold only what changed since the last step into the same bucket
// (ForwardBatchBuilder's table_dirty_); here the buckets' steps come in random order with
// eager steps (a prefill and decodes, planned by Build on the same builder, into the same
// buffer) between some of them, and every replayed step must still write what Build writes.
void ExpectInterleavedStepsWriteWhatBuildWrites(Backend* backend) {
  std::mt19937 rng(13);
  auto planner = ForwardBatchBuilder::Create(Limits(4, MlaSplitRule::kBalanced), backend);
  auto replayer = ForwardBatchBuilder::Create(Limits(4, MlaSplitRule::kBalanced), backend);
  ASSERT_TRUE(planner.ok() && replayer.ok());
  const std::vector<int32_t> buckets = {1, 4, 8};
  std::vector<ForwardBatch> padded(buckets.size());
  std::vector<DecodeLayout> layouts;
  for (size_t b = 0; b < buckets.size(); ++b) {  // every bucket captured first, as at start-up
    replayer->Build({}, &padded[b], buckets[b]);
    layouts.push_back(replayer->DecodeLayoutOf(padded[b]));
  }
  std::vector<int32_t> prompt(40, 3), prompt_table = {9, 8, 7};
  for (int step = 0; step < 300; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    if (rng() % 5 == 0) {  // an eager step: a prompt of 40 tokens beside a few decodes
      Decodes eager(static_cast<int32_t>(rng() % 4), &rng);
      eager.seqs.push_back({.token_ids = prompt, .start_position = 0, .num_new_tokens = 40,
                            .block_table = prompt_table, .needs_logits = true});
      ForwardBatch fb;
      replayer->Build(eager.seqs, &fb, 0);
      continue;
    }
    const size_t b = rng() % buckets.size();
    const Decodes decodes(static_cast<int32_t>(rng() % (buckets[b] + 1)), &rng);
    ForwardBatch expected;
    planner->Build(decodes.seqs, &expected, buckets[b]);
    replayer->BuildDecodes(decodes.seqs, layouts[b]);
    EXPECT_EQ(Words(expected), Words(padded[b])) << "bucket " << buckets[b];
  }
}

TEST(ForwardBatchTest, InterleavedStepsWriteWhatBuildWritesInPlace) {
  CopyOnlyBackend backend;
  ExpectInterleavedStepsWriteWhatBuildWrites(&backend);
}

TEST(ForwardBatchTest, InterleavedStepsWriteWhatBuildWritesStaged) {
  StagingBackend backend;
  ExpectInterleavedStepsWriteWhatBuildWrites(&backend);
}

TEST(ForwardBatchTest, MetadataWordsCoverEveryView) {
  CopyOnlyBackend backend;
  auto builder = ForwardBatchBuilder::Create(Limits(4, MlaSplitRule::kBalanced), &backend);
  ASSERT_TRUE(builder.ok());
  std::mt19937 rng(11);
  Decodes decodes(3, &rng);
  // A prefill chunk over cached context, so that the step has context rounds too.
  std::vector<int32_t> tokens(70, 5), table = {3, 4, 5, 6, 7};
  decodes.seqs.push_back({.token_ids = tokens, .start_position = 40, .num_new_tokens = 30,
                          .block_table = table, .needs_logits = true});
  ForwardBatch fb;
  builder->Build(decodes.seqs, &fb, 0);
  ASSERT_FALSE(fb.context_rounds.empty());
  const auto* base = static_cast<const int32_t*>(fb.input_ids.data());
  const ContextRound& last = fb.context_rounds.back();
  EXPECT_EQ(fb.metadata_words, static_cast<const int32_t*>(last.gather_start.data()) +
                                   last.gather_start.numel() - base);
}

}  // namespace
}  // namespace mlaserve
