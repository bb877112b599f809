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
