// Engine end to end on a tiny real checkpoint (CPU backend): golden greedy output through
// Submit, many concurrent requests, Abort, deadlines, queue limits, Drain, validation and model
// failure.
#include "engine/engine.h"

#include <atomic>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/model_test_util.h"

namespace mlaserve {
namespace {

using testing::Collect;
using testing::GreedyRequest;
using ::testing::HasSubstr;
using testing::NewTestEngine;
using testing::RandomPrompt;
using testing::StreamResult;
using testing::TestEngineOptions;

// An engine whose every step takes at least `step_delay`, so that requests are still running
// when a test acts on them.
std::unique_ptr<Engine> SlowEngine(absl::Duration step_delay, TestEngineOptions options = {}) {
  auto control = std::make_shared<testing::BackendControl>();
  control->step_delay_us = absl::ToInt64Microseconds(step_delay);
  options.backend = testing::MakeControlledBackend(control);
  return NewTestEngine(std::move(options));
}

std::shared_ptr<RequestStream> MustSubmit(Engine& engine, Request request) {
  auto stream = engine.Submit(std::move(request));
  EXPECT_TRUE(stream.ok()) << stream.status();
  return stream.ok() ? *stream : nullptr;
}

void ExpectAllBlocksFree(const Engine& engine) {
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.kv_blocks_free, stats.kv_blocks_total);
  EXPECT_EQ(stats.num_running, 0);
  EXPECT_EQ(stats.num_waiting, 0);
}

TEST(EngineTest, GreedyGenerationMatchesGolden) {
  for (const std::string& variant : testing::ModelVariants()) {
    auto engine = NewTestEngine({.variant = variant});
    ASSERT_NE(engine, nullptr);
    auto golden = testing::ReadGolden(testing::ModelDir(variant));
    ASSERT_TRUE(golden.ok()) << golden.status();
    const int32_t steps = static_cast<int32_t>(golden->steps.size());
    StreamResult r = Collect(*MustSubmit(*engine, GreedyRequest(golden->prompt_ids, steps)));
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_EQ(r.token_ids.size(), golden->steps.size()) << variant;
    ASSERT_EQ(r.logprobs.size(), golden->steps.size());
    for (int32_t i = 0; i < steps; ++i) {
      EXPECT_EQ(r.token_ids[i], golden->steps[i].id) << variant << " step " << i;
      EXPECT_NEAR(r.logprobs[i].logprob, golden->steps[i].top[0].second, 1e-3) << variant;
    }
    EXPECT_EQ(r.completion.finish_reason, FinishReason::kLength);
    EXPECT_EQ(r.completion.prompt_tokens, static_cast<int32_t>(golden->prompt_ids.size()));
    EXPECT_EQ(r.completion.completion_tokens, steps);
    EXPECT_GE(r.completion.e2e_seconds, r.completion.time_to_first_token_seconds);
    EXPECT_GE(r.completion.time_to_first_token_seconds, r.completion.queue_seconds);
    EXPECT_GT(r.completion.time_to_first_token_seconds, 0);
    EXPECT_TRUE(r.text.empty());  // no tokenizer
  }
}

class ConcurrencyTest : public ::testing::TestWithParam<std::vector<int32_t>> {};

TEST_P(ConcurrencyTest, ManyRequestsAllFinishAndFreeTheirBlocks) {
  // 24 requests over 8 sequence slots and a KV pool too small for all of them at once, so
  // requests queue and get preempted; every fifth is aborted after its first output.
  auto engine =
      NewTestEngine({.max_num_seqs = 8, .num_kv_blocks = 1 + 40, .graph_batch_sizes = GetParam()});
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->info().graph_batch_sizes, GetParam());
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<int32_t> max_tokens;
  for (int i = 0; i < 24; ++i) {
    max_tokens.push_back(1 + (i * 7) % 30);
    streams.push_back(
        MustSubmit(*engine, GreedyRequest(RandomPrompt(i, 5 + (i * 13) % 60), max_tokens.back())));
  }
  for (int i = 0; i < 24; ++i) {
    StreamResult r;
    if (i % 5 == 4) {
      const StreamUpdate first = streams[i]->WaitAndTake();
      engine->Abort(streams[i]->id());
      // A short request may have ended before the abort.
      if (first.ends_stream()) {
        r.completion = *first.completion;
      } else {
        r = Collect(*streams[i]);
      }
      r.token_ids.insert(r.token_ids.begin(), first.token_ids.begin(), first.token_ids.end());
    } else {
      r = Collect(*streams[i]);
      EXPECT_EQ(r.completion.finish_reason, FinishReason::kLength) << i;
      EXPECT_EQ(r.completion.completion_tokens, max_tokens[i]) << i;
    }
    EXPECT_EQ(r.completion.completion_tokens, static_cast<int32_t>(r.token_ids.size())) << i;
  }
  ExpectAllBlocksFree(*engine);
  EXPECT_GT(engine->stats().steps_total, 0u);
}

INSTANTIATE_TEST_SUITE_P(Graphs, ConcurrencyTest,
                         ::testing::Values(std::vector<int32_t>{},
                                           std::vector<int32_t>{1, 2, 4, 8}),
                         [](const auto& info) { return info.param.empty() ? "Eager" : "Graphs"; });

TEST(EngineTest, AbortEndsTheStreamAndFreesBlocks) {
  auto engine = SlowEngine(absl::Milliseconds(2));
  ASSERT_NE(engine, nullptr);
  auto stream = MustSubmit(*engine, GreedyRequest(RandomPrompt(1, 40), 200));
  int32_t taken = 0;
  while (taken < 3) taken += static_cast<int32_t>(stream->WaitAndTake().token_ids.size());
  EXPECT_TRUE(engine->Abort(stream->id()));
  StreamResult rest = Collect(*stream);
  EXPECT_EQ(rest.completion.finish_reason, FinishReason::kAbort);
  EXPECT_EQ(rest.completion.completion_tokens, taken + static_cast<int32_t>(rest.token_ids.size()));
  EXPECT_LT(rest.completion.completion_tokens, 200);
  EXPECT_FALSE(engine->Abort(stream->id()));  // finished ids are not live
  EXPECT_FALSE(engine->Abort("no-such-request"));
  ExpectAllBlocksFree(*engine);
}

TEST(EngineTest, DeadlineEndsTheStreamWithDeadline) {
  auto engine = SlowEngine(absl::Milliseconds(2));
  ASSERT_NE(engine, nullptr);
  Request late = GreedyRequest(RandomPrompt(2, 30), 250);
  late.deadline = engine->Now() + absl::Milliseconds(100);
  Request expired = GreedyRequest(RandomPrompt(3, 30), 10);
  expired.deadline = engine->Now() - absl::Seconds(1);
  StreamResult r = Collect(*MustSubmit(*engine, std::move(late)));
  EXPECT_EQ(r.completion.finish_reason, FinishReason::kDeadline);
  EXPECT_EQ(r.completion.completion_tokens, static_cast<int32_t>(r.token_ids.size()));
  StreamResult e = Collect(*MustSubmit(*engine, std::move(expired)));
  EXPECT_EQ(e.completion.finish_reason, FinishReason::kDeadline);
  EXPECT_TRUE(e.token_ids.empty());
  EXPECT_EQ(e.completion.completion_tokens, 0);
  ExpectAllBlocksFree(*engine);
}

TEST(EngineTest, FullQueueIsResourceExhausted) {
  // One sequence slot keeps everything after the first request waiting.
  auto engine = SlowEngine(absl::Milliseconds(2), {.max_num_seqs = 1, .max_num_waiting_seqs = 3});
  ASSERT_NE(engine, nullptr);
  std::vector<std::shared_ptr<RequestStream>> streams;
  absl::Status refused;
  for (int i = 0; i < 10 && refused.ok(); ++i) {
    auto stream = engine->Submit(GreedyRequest(RandomPrompt(i, 20), 200));
    if (stream.ok()) {
      streams.push_back(*stream);
    } else {
      refused = stream.status();
    }
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  // At most the running one plus three waiting were accepted.
  EXPECT_LE(streams.size(), 4u);
  EXPECT_GE(streams.size(), 3u);
  for (auto& stream : streams) engine->Abort(stream->id());
  for (auto& stream : streams)
    EXPECT_EQ(Collect(*stream).completion.finish_reason, FinishReason::kAbort);
  ExpectAllBlocksFree(*engine);
}

TEST(EngineTest, DuplicateLiveIdIsAlreadyExistsAndIdsAreAssigned) {
  auto engine = SlowEngine(absl::Milliseconds(2));
  ASSERT_NE(engine, nullptr);
  Request a = GreedyRequest(RandomPrompt(4, 10), 100);
  a.id = "same";
  auto first = MustSubmit(*engine, a);
  auto second = engine->Submit(a);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  auto unnamed = MustSubmit(*engine, GreedyRequest(RandomPrompt(5, 10), 2));
  EXPECT_FALSE(unnamed->id().empty());
  EXPECT_NE(unnamed->id(), "same");
  engine->Abort("same");
  Collect(*first);
  // Once ended, the id can be used again.
  a.stopping.max_tokens = 1;
  EXPECT_EQ(Collect(*MustSubmit(*engine, a)).completion.finish_reason, FinishReason::kLength);
  Collect(*unnamed);
}

TEST(EngineTest, InvalidRequestsNameTheField) {
  auto engine = NewTestEngine();
  ASSERT_NE(engine, nullptr);
  const auto error = [&](Request r) { return engine->Submit(std::move(r)).status(); };
  const auto expect = [](const absl::Status& s, const char* field) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(field));
  };
  expect(error(GreedyRequest({}, 1)), "token_ids");
  expect(error(GreedyRequest({1, 256}, 1)), "token_ids");
  expect(error(GreedyRequest({-1}, 1)), "token_ids");
  expect(error(GreedyRequest(RandomPrompt(6, 256), 1)), "token_ids");
  expect(error(GreedyRequest({1, 2}, 0)), "max_tokens");
  Request min_tokens = GreedyRequest(RandomPrompt(6, 200), 10);
  min_tokens.stopping.min_tokens = 100;
  expect(error(min_tokens), "min_tokens");
  Request stop_ids = GreedyRequest({1, 2}, 1);
  stop_ids.stopping.stop_token_ids = {300};
  expect(error(stop_ids), "stop_token_ids");
  Request top = GreedyRequest({1, 2}, 1);
  top.top_logprobs = 21;
  expect(error(top), "top_logprobs");
  Request stop = GreedyRequest({1, 2}, 1);
  stop.stopping.stop = {"x"};
  expect(error(stop), "stop");  // no tokenizer loaded
}

TEST(EngineTest, DrainAbortsWhatOutlivesTheTimeout) {
  auto engine = SlowEngine(absl::Milliseconds(2));
  ASSERT_NE(engine, nullptr);
  auto short_one = MustSubmit(*engine, GreedyRequest(RandomPrompt(7, 10), 2));
  auto long_one = MustSubmit(*engine, GreedyRequest(RandomPrompt(8, 10), 240));
  engine->Drain(absl::Milliseconds(100));
  EXPECT_TRUE(short_one->ended());
  EXPECT_TRUE(long_one->ended());
  EXPECT_EQ(Collect(*short_one).completion.finish_reason, FinishReason::kLength);
  StreamResult r = Collect(*long_one);
  EXPECT_EQ(r.completion.finish_reason, FinishReason::kAbort);
  EXPECT_EQ(r.completion.completion_tokens, static_cast<int32_t>(r.token_ids.size()));
  EXPECT_TRUE(engine->stats().draining);
  EXPECT_EQ(engine->Submit(GreedyRequest({1}, 1)).status().code(), absl::StatusCode::kUnavailable);
  ExpectAllBlocksFree(*engine);
}

TEST(EngineTest, ModelFailureFailsEveryStreamAndTheEngine) {
  auto control = std::make_shared<testing::BackendControl>();
  control->step_delay_us = 2000;
  auto engine = NewTestEngine({.backend = testing::MakeControlledBackend(control)});
  ASSERT_NE(engine, nullptr);
  auto a = MustSubmit(*engine, GreedyRequest(RandomPrompt(9, 10), 240));
  auto b = MustSubmit(*engine, GreedyRequest(RandomPrompt(10, 10), 240));
  a->WaitAndTake();
  control->fail = true;
  EXPECT_EQ(Collect(*a).status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Collect(*b).status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(engine->stats().failed);
  EXPECT_EQ(engine->Submit(GreedyRequest({1}, 1)).status().code(), absl::StatusCode::kUnavailable);
}

TEST(EngineTest, DestructorAbortsLiveRequests) {
  auto engine = SlowEngine(absl::Milliseconds(2));
  ASSERT_NE(engine, nullptr);
  auto stream = MustSubmit(*engine, GreedyRequest(RandomPrompt(11, 10), 240));
  engine.reset();
  EXPECT_EQ(Collect(*stream).completion.finish_reason, FinishReason::kAbort);
}

}  // namespace
}  // namespace mlaserve
