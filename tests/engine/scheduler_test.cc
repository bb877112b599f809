#include "engine/scheduler.h"

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve {
namespace {

constexpr int32_t kEos = 2;
constexpr int32_t kToken = 7;  // a sampled token that stops nothing

SchedulerOptions BaseOptions() {
  SchedulerOptions options;
  options.max_num_seqs = 8;
  options.max_num_batched_tokens = 64;
  options.max_model_len = 128;
  options.max_num_waiting_seqs = 16;
  options.aging_steps_per_priority = 1000;
  options.eos_token_ids = {kEos};
  options.kv_cache = {/*num_blocks=*/65, /*block_size=*/4, /*enable_prefix_caching=*/true};
  return options;
}

std::vector<int32_t> Prompt(int32_t num_tokens, int32_t first = 100) {
  std::vector<int32_t> tokens(num_tokens);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

std::unique_ptr<Sequence> Seq(std::string id, std::vector<int32_t> prompt, int32_t priority = 0) {
  Request request;
  request.id = std::move(id);
  request.prompt_token_ids = std::move(prompt);
  request.priority = priority;
  return std::make_unique<Sequence>(std::move(request));
}

// Feeds `token` to every item that samples.
std::vector<SequenceOutput> Complete(Scheduler& scheduler, const ScheduledBatch& batch,
                                     int32_t token = kToken) {
  return scheduler.Postprocess(batch, std::vector<int32_t>(batch.num_samples, token));
}

// Schedules and completes one step; returns the batch's sequences in item order.
std::vector<std::string> Step(Scheduler& scheduler) {
  const ScheduledBatch batch = scheduler.Schedule();
  std::vector<std::string> ids;
  for (const ScheduledSeq& item : batch.items) ids.push_back(item.seq->id);
  Complete(scheduler, batch);
  return ids;
}

// Runs one sequence alone, sampling `tokens` in turn; returns every output.
std::vector<SequenceOutput> RunAlone(SchedulerOptions options, std::unique_ptr<Sequence> seq,
                                     const std::vector<int32_t>& tokens) {
  Scheduler scheduler(std::move(options));
  EXPECT_TRUE(scheduler.Add(std::move(seq)).ok());
  std::vector<SequenceOutput> outputs;
  for (int32_t token : tokens) {
    if (!scheduler.has_unfinished_seqs()) break;
    const ScheduledBatch batch = scheduler.Schedule();
    for (SequenceOutput& out : Complete(scheduler, batch, token)) outputs.push_back(out);
  }
  return outputs;
}

TEST(SchedulerTest, AddValidatesAndBoundsTheWaitingQueue) {
  Scheduler scheduler(BaseOptions());
  EXPECT_EQ(scheduler.Add(Seq("empty", {})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler.Add(Seq("long", Prompt(128))).code(), absl::StatusCode::kInvalidArgument);
  auto zero = Seq("zero", Prompt(3));
  zero->stopping.max_tokens = 0;
  EXPECT_EQ(scheduler.Add(std::move(zero)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(scheduler.Add(Seq("a", Prompt(127))).ok());
  EXPECT_EQ(scheduler.Add(Seq("a", Prompt(3))).code(), absl::StatusCode::kAlreadyExists);
  for (int i = 1; i < 16; ++i) ASSERT_TRUE(scheduler.Add(Seq(std::to_string(i), Prompt(3))).ok());
  EXPECT_EQ(scheduler.Add(Seq("full", Prompt(3))).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(scheduler.num_waiting_seqs(), 16);
}

TEST(SchedulerTest, PrefillSamplesThenDecodes) {
  Scheduler scheduler(BaseOptions());
  ASSERT_TRUE(scheduler.Add(Seq("a", Prompt(6))).ok());
  ScheduledBatch batch = scheduler.Schedule();
  ASSERT_EQ(batch.items.size(), 1u);
  EXPECT_EQ(batch.items[0].start_position, 0);
  EXPECT_EQ(batch.items[0].num_new_tokens, 6);
  EXPECT_TRUE(batch.items[0].samples_token);
  EXPECT_EQ(batch.num_decodes, 0);
  EXPECT_EQ(batch.num_tokens, 6);
  EXPECT_EQ(batch.items[0].seq->block_table.size(), 2u);
  std::vector<SequenceOutput> outputs = Complete(scheduler, batch);
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].request_id, "a");
  EXPECT_EQ(outputs[0].token, kToken);
  EXPECT_FALSE(outputs[0].finished);

  batch = scheduler.Schedule();
  ASSERT_EQ(batch.items.size(), 1u);
  EXPECT_EQ(batch.num_decodes, 1);
  EXPECT_EQ(batch.items[0].start_position, 6);
  EXPECT_EQ(batch.items[0].num_new_tokens, 1);
  EXPECT_EQ(batch.items[0].seq->block_table.size(), 2u);
  Complete(scheduler, batch);
  EXPECT_THAT(scheduler.Find("a")->token_ids, ::testing::SizeIs(8));
}

TEST(SchedulerTest, LongPromptIsPrefilledInChunks) {
  SchedulerOptions options = BaseOptions();
  options.max_num_batched_tokens = 8;
  Scheduler scheduler(options);
  ASSERT_TRUE(scheduler.Add(Seq("a", Prompt(20))).ok());
  for (auto [start, num_new_tokens] : {std::pair{0, 8}, {8, 8}, {16, 4}}) {
    const ScheduledBatch batch = scheduler.Schedule();
    ASSERT_EQ(batch.items.size(), 1u);
    const ScheduledSeq& item = batch.items[0];
    EXPECT_EQ(item.start_position, start);
    EXPECT_EQ(item.num_new_tokens, num_new_tokens);
    EXPECT_EQ(item.samples_token, start + num_new_tokens == 20);
    EXPECT_GE(item.seq->block_table.size() * 4, static_cast<size_t>(start + num_new_tokens));
    EXPECT_EQ(Complete(scheduler, batch).size(), item.samples_token ? 1u : 0u);
  }
  EXPECT_EQ(scheduler.Find("a")->num_output_tokens(), 1);
}

TEST(SchedulerTest, StepsMixDecodesWithSeveralPrefillChunks) {
  SchedulerOptions options = BaseOptions();
  options.max_num_batched_tokens = 8;
  Scheduler scheduler(options);
  ASSERT_TRUE(scheduler.Add(Seq("a", Prompt(12))).ok());
  ASSERT_TRUE(scheduler.Add(Seq("b", Prompt(12, 200))).ok());
  EXPECT_THAT(Step(scheduler), ::testing::ElementsAre("a"));

  ScheduledBatch batch = scheduler.Schedule();
  ASSERT_EQ(batch.items.size(), 2u);
  EXPECT_EQ(batch.items[0].seq->id, "a");
  EXPECT_EQ(batch.items[0].num_new_tokens, 4);
  EXPECT_TRUE(batch.items[0].samples_token);
  EXPECT_EQ(batch.items[1].seq->id, "b");
  EXPECT_EQ(batch.items[1].num_new_tokens, 4);
  EXPECT_FALSE(batch.items[1].samples_token);
  Complete(scheduler, batch);

  batch = scheduler.Schedule();
  ASSERT_EQ(batch.items.size(), 2u);
  EXPECT_EQ(batch.num_decodes, 1);
  EXPECT_EQ(batch.items[0].seq->id, "a");
  EXPECT_EQ(batch.items[1].seq->id, "b");
  EXPECT_EQ(batch.items[1].start_position, 4);
  EXPECT_EQ(batch.items[1].num_new_tokens, 7);
  EXPECT_EQ(batch.num_tokens, 8);
  Complete(scheduler, batch);
}

TEST(SchedulerTest, DecodesTakeTheTokenBudgetBeforePrefills) {
  SchedulerOptions options = BaseOptions();
  options.max_num_batched_tokens = 4;
  Scheduler scheduler(options);
  for (const char* id : {"a", "b", "c", "d"}) ASSERT_TRUE(scheduler.Add(Seq(id, Prompt(1))).ok());
  EXPECT_THAT(Step(scheduler), ::testing::SizeIs(4));
  ASSERT_TRUE(scheduler.Add(Seq("e", Prompt(3), /*priority=*/9)).ok());
  const ScheduledBatch batch = scheduler.Schedule();
  EXPECT_EQ(batch.num_decodes, 4);
  EXPECT_EQ(batch.items.size(), 4u);
  EXPECT_EQ(scheduler.num_waiting_seqs(), 1);
  Complete(scheduler, batch);
}

TEST(SchedulerTest, MaxNumSeqsBoundsRunningSequences) {
  SchedulerOptions options = BaseOptions();
  options.max_num_seqs = 2;
  Scheduler scheduler(options);
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(scheduler.Add(Seq(id, Prompt(3))).ok());
  EXPECT_THAT(Step(scheduler), ::testing::ElementsAre("a", "b"));
  EXPECT_EQ(scheduler.num_running_seqs(), 2);
  EXPECT_EQ(scheduler.num_waiting_seqs(), 1);
}

TEST(SchedulerTest, AdmitsHigherPriorityFirst) {
  SchedulerOptions options = BaseOptions();
  options.max_num_seqs = 1;
  Scheduler scheduler(options);
  ASSERT_TRUE(scheduler.Add(Seq("low", Prompt(3), 0)).ok());
  ASSERT_TRUE(scheduler.Add(Seq("high", Prompt(3), 5)).ok());
  EXPECT_THAT(Step(scheduler), ::testing::ElementsAre("high"));
}

// One slot; every request finishes after its prefill, and a higher-priority request arrives
// before every step. With aging_steps_per_priority = 2 the low-priority request may be overtaken
// only by arrivals within 2 * (1 - 0) steps after it.
TEST(SchedulerTest, AgingBoundsTheWaitBehindHigherPriorityArrivals) {
  for (int32_t aging : {2, 1000}) {
    SchedulerOptions options = BaseOptions();
    options.max_num_seqs = 1;
    options.aging_steps_per_priority = aging;
    Scheduler scheduler(options);
    auto low = Seq("low", Prompt(3), 0);
    low->stopping.max_tokens = 1;
    ASSERT_TRUE(scheduler.Add(std::move(low)).ok());
    std::vector<std::string> admitted;
    for (int step = 0; step < 10; ++step) {
      auto high = Seq("high" + std::to_string(step), Prompt(3), 1);
      high->stopping.max_tokens = 1;
      ASSERT_TRUE(scheduler.Add(std::move(high)).ok());
      for (const std::string& id : Step(scheduler)) admitted.push_back(id);
    }
    if (aging == 2) {
      EXPECT_THAT(admitted, ::testing::ElementsAre("high0", "high1", "low", "high2", "high3",
                                                   "high4", "high5", "high6", "high7", "high8"));
    } else {
      EXPECT_THAT(admitted, ::testing::Not(::testing::Contains("low")));
    }
  }
}

TEST(SchedulerTest, KvPressurePreemptsLowestPriorityThenNewest) {
  SchedulerOptions options = BaseOptions();
  options.kv_cache = {/*num_blocks=*/5, /*block_size=*/2, /*enable_prefix_caching=*/true};
  options.max_model_len = 8;
  Scheduler scheduler(options);
  auto a = Seq("a", {100, 101}, /*priority=*/1);
  a->stopping.max_tokens = 2;
  ASSERT_TRUE(scheduler.Add(Seq("b", {102, 103})).ok());
  ASSERT_TRUE(scheduler.Add(Seq("c", {104, 105})).ok());
  ASSERT_TRUE(scheduler.Add(std::move(a)).ok());
  EXPECT_THAT(Step(scheduler), ::testing::ElementsAre("a", "b", "c"));

  // Every sequence now needs a second block and one is free: a takes it, b evicts c.
  EXPECT_THAT(Step(scheduler), ::testing::ElementsAre("a", "b"));
  const Sequence* c = scheduler.Find("c");
  EXPECT_EQ(c->status, SequenceStatus::kPreempted);
  EXPECT_EQ(c->num_preemptions, 1);
  EXPECT_EQ(c->num_computed_tokens, 0);
  EXPECT_TRUE(c->block_table.empty());
  EXPECT_THAT(c->token_ids, ::testing::ElementsAre(104, 105, kToken));
  EXPECT_EQ(scheduler.Find("a"), nullptr);  // finished by max_tokens, freeing its blocks

  // c recomputes prompt and output, then samples its next token.
  const ScheduledBatch batch = scheduler.Schedule();
  ASSERT_EQ(batch.items.size(), 2u);
  EXPECT_EQ(batch.items[0].seq->id, "b");
  EXPECT_EQ(batch.items[1].seq, c);
  EXPECT_EQ(batch.items[1].start_position, 0);
  EXPECT_EQ(batch.items[1].num_new_tokens, 3);
  EXPECT_TRUE(batch.items[1].samples_token);
  Complete(scheduler, batch);
  EXPECT_THAT(c->token_ids, ::testing::ElementsAre(104, 105, kToken, kToken));
  EXPECT_TRUE(scheduler.kv_block_manager().CheckInvariants().ok());
}

TEST(SchedulerTest, PreemptedSequenceGetsItsCachedBlocksBack) {
  SchedulerOptions options = BaseOptions();
  options.kv_cache = {/*num_blocks=*/6, /*block_size=*/2, /*enable_prefix_caching=*/true};
  options.max_model_len = 10;
  Scheduler scheduler(options);
  auto a = Seq("a", Prompt(4), /*priority=*/1);
  a->stopping.max_tokens = 2;
  ASSERT_TRUE(scheduler.Add(std::move(a)).ok());
  ASSERT_TRUE(scheduler.Add(Seq("b", Prompt(4, 200))).ok());
  EXPECT_THAT(Step(scheduler), ::testing::ElementsAre("a", "b"));
  EXPECT_THAT(Step(scheduler), ::testing::ElementsAre("a"));  // b preempted itself
  const ScheduledBatch batch = scheduler.Schedule();
  ASSERT_EQ(batch.items.size(), 1u);
  EXPECT_EQ(batch.items[0].seq->id, "b");
  EXPECT_EQ(batch.items[0].seq->num_preemptions, 1);
  EXPECT_EQ(batch.items[0].start_position, 4);  // its two committed blocks were still cached
  EXPECT_EQ(batch.items[0].num_new_tokens, 1);
  EXPECT_EQ(batch.items[0].seq->num_cached_tokens, 0);  // usage counts first admission only
  Complete(scheduler, batch);
}

TEST(SchedulerTest, RepeatedPromptSkipsItsCachedPrefix) {
  Scheduler scheduler(BaseOptions());
  auto a = Seq("a", Prompt(9));
  a->stopping.max_tokens = 1;
  ASSERT_TRUE(scheduler.Add(std::move(a)).ok());
  Step(scheduler);
  std::vector<int32_t> longer = Prompt(9);
  longer.push_back(500);
  ASSERT_TRUE(scheduler.Add(Seq("b", longer)).ok());
  const ScheduledBatch batch = scheduler.Schedule();
  ASSERT_EQ(batch.items.size(), 1u);
  EXPECT_EQ(batch.items[0].start_position, 8);
  EXPECT_EQ(batch.items[0].num_new_tokens, 2);
  const std::vector<SequenceOutput> outputs = Complete(scheduler, batch);
  EXPECT_EQ(outputs[0].num_cached_tokens, 8);
  EXPECT_EQ(scheduler.kv_block_manager().prefix_cache_hit_tokens(), 8u);
}

TEST(SchedulerTest, ExpiredSequencesAreDroppedBeforeCompute) {
  absl::Time now = absl::UnixEpoch();
  SchedulerOptions options = BaseOptions();
  options.max_num_seqs = 1;
  options.clock = [&now] { return now; };
  Scheduler scheduler(options);
  auto a = Seq("a", Prompt(5));
  a->deadline = now + absl::Seconds(10);
  auto b = Seq("b", Prompt(5));
  b->deadline = now + absl::Seconds(1);
  ASSERT_TRUE(scheduler.Add(std::move(a)).ok());
  ASSERT_TRUE(scheduler.Add(std::move(b)).ok());
  EXPECT_THAT(Step(scheduler), ::testing::ElementsAre("a"));

  now += absl::Seconds(2);
  ScheduledBatch batch = scheduler.Schedule();
  ASSERT_EQ(batch.finished.size(), 1u);
  EXPECT_EQ(batch.finished[0].request_id, "b");
  EXPECT_EQ(batch.finished[0].finish_reason, FinishReason::kDeadline);
  EXPECT_TRUE(batch.finished[0].finished);
  ASSERT_EQ(batch.items.size(), 1u);
  Complete(scheduler, batch);

  now += absl::Seconds(8);
  batch = scheduler.Schedule();
  EXPECT_TRUE(batch.items.empty());
  ASSERT_EQ(batch.finished.size(), 1u);
  EXPECT_EQ(batch.finished[0].request_id, "a");
  EXPECT_EQ(batch.finished[0].num_output_tokens, 2);
  EXPECT_EQ(scheduler.kv_block_manager().num_used_blocks(), 0);
  EXPECT_FALSE(scheduler.has_unfinished_seqs());
}

TEST(SchedulerTest, AbortFreesAtOnceAndIsReportedOnce) {
  SchedulerOptions options = BaseOptions();
  options.max_num_seqs = 1;
  Scheduler scheduler(options);
  ASSERT_TRUE(scheduler.Add(Seq("a", Prompt(9))).ok());
  ASSERT_TRUE(scheduler.Add(Seq("b", Prompt(9))).ok());
  Step(scheduler);
  EXPECT_GT(scheduler.kv_block_manager().num_used_blocks(), 0);
  scheduler.Abort("a");
  EXPECT_EQ(scheduler.kv_block_manager().num_used_blocks(), 0);
  EXPECT_EQ(scheduler.Find("a"), nullptr);
  scheduler.Abort("unknown");
  scheduler.Abort("b");
  scheduler.Abort("b");
  ScheduledBatch batch = scheduler.Schedule();
  EXPECT_TRUE(batch.items.empty());
  ASSERT_EQ(batch.finished.size(), 2u);
  EXPECT_EQ(batch.finished[0].request_id, "a");
  EXPECT_EQ(batch.finished[1].request_id, "b");
  EXPECT_EQ(batch.finished[1].finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(scheduler.Schedule().finished.empty());
}

TEST(SchedulerTest, FinishFreesWithoutReporting) {
  Scheduler scheduler(BaseOptions());
  ASSERT_TRUE(scheduler.Add(Seq("a", Prompt(9))).ok());
  Step(scheduler);
  EXPECT_TRUE(scheduler.Finish("a", FinishReason::kStop));
  EXPECT_FALSE(scheduler.Finish("a", FinishReason::kStop));
  EXPECT_EQ(scheduler.kv_block_manager().num_used_blocks(), 0);
  EXPECT_TRUE(scheduler.Schedule().finished.empty());
}

TEST(SchedulerTest, EosStopsWithoutBeingStreamed) {
  const auto outputs = RunAlone(BaseOptions(), Seq("a", Prompt(3)), {kToken, kEos, kToken});
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[0].token, kToken);
  EXPECT_FALSE(outputs[1].token.has_value());
  EXPECT_TRUE(outputs[1].finished);
  EXPECT_EQ(outputs[1].finish_reason, FinishReason::kStop);
  EXPECT_EQ(outputs[1].num_output_tokens, 1);
}

TEST(SchedulerTest, IgnoreEosKeepsGoing) {
  auto seq = Seq("a", Prompt(3));
  seq->stopping.ignore_eos = true;
  seq->stopping.max_tokens = 3;
  const auto outputs = RunAlone(BaseOptions(), std::move(seq), {kEos, kEos, kEos, kEos});
  ASSERT_EQ(outputs.size(), 3u);
  EXPECT_EQ(outputs[2].token, kEos);
  EXPECT_EQ(outputs[2].finish_reason, FinishReason::kLength);
}

TEST(SchedulerTest, StopTokenIdsStop) {
  auto seq = Seq("a", Prompt(3));
  seq->stopping.stop_token_ids = {9};
  const auto outputs = RunAlone(BaseOptions(), std::move(seq), {kToken, 9, kToken});
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[1].finish_reason, FinishReason::kStop);
  EXPECT_FALSE(outputs[1].token.has_value());
}

TEST(SchedulerTest, MinTokensDefersStopTokens) {
  auto seq = Seq("a", Prompt(3));
  seq->stopping.min_tokens = 2;
  seq->stopping.stop_token_ids = {9};
  const auto outputs = RunAlone(BaseOptions(), std::move(seq), {kEos, 9, kEos});
  ASSERT_EQ(outputs.size(), 3u);
  EXPECT_EQ(outputs[0].token, kEos);
  EXPECT_EQ(outputs[1].token, 9);
  EXPECT_EQ(outputs[2].finish_reason, FinishReason::kStop);
  EXPECT_EQ(outputs[2].num_output_tokens, 2);
}

TEST(SchedulerTest, MaxTokensAndContextLimitEndWithLength) {
  auto seq = Seq("a", Prompt(3));
  seq->stopping.max_tokens = 2;
  auto outputs = RunAlone(BaseOptions(), std::move(seq), {kToken, kToken, kToken});
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[1].token, kToken);
  EXPECT_EQ(outputs[1].finish_reason, FinishReason::kLength);

  SchedulerOptions options = BaseOptions();
  options.max_model_len = 8;
  outputs = RunAlone(options, Seq("b", Prompt(6)), {kToken, kToken, kToken});
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[1].finish_reason, FinishReason::kLength);
  EXPECT_EQ(outputs[1].num_output_tokens, 2);
}

TEST(SchedulerTest, ContextLimitIsCappedByTheKvPool) {
  SchedulerOptions options = BaseOptions();
  options.kv_cache.num_blocks = 5;  // 4 usable blocks of 4 tokens
  EXPECT_EQ(Scheduler(options).max_context_tokens(), 16);
  EXPECT_FALSE(ValidateSchedulerOptions(SchedulerOptions{.max_num_seqs = 0}).ok());
}

}  // namespace
}  // namespace mlaserve
