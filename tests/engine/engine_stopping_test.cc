// Stop conditions and streamed text through the Engine: max_tokens, eos, ignore_eos,
// stop_token_ids, min_tokens, stop strings (with include_stop_str_in_output), text flushing,
// and completion_tokens == streamed ids for every finish reason.
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/engine_test_util.h"

namespace mlaserve {
namespace {

using testing::Collect;
using testing::GreedyRequest;
using testing::RandomPrompt;
using testing::StreamResult;
using testing::TestEngineOptions;

constexpr int32_t kMaxTokens = 40;

class EngineStoppingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = testing::TinyTokenizer();
    ASSERT_NE(tokenizer_, nullptr);
    engine_ = NewEngine({});
    ASSERT_NE(engine_, nullptr);
    prompt_ = RandomPrompt(42, 24);
    reference_ = RunToEnd(*engine_, GreedyRequest(prompt_, kMaxTokens));
    ASSERT_EQ(reference_.token_ids.size(), static_cast<size_t>(kMaxTokens));
  }

  std::unique_ptr<Engine> NewEngine(TestEngineOptions options) {
    options.tokenizer = tokenizer_;
    return testing::NewTestEngine(std::move(options));
  }

  static StreamResult RunToEnd(Engine& engine, Request request) {
    auto stream = engine.Submit(std::move(request));
    EXPECT_TRUE(stream.ok()) << stream.status();
    StreamResult result = stream.ok() ? Collect(**stream) : StreamResult{};
    EXPECT_TRUE(result.status.ok()) << result.status;
    EXPECT_EQ(result.completion.completion_tokens, static_cast<int32_t>(result.token_ids.size()));
    return result;
  }

  // The reference output's first `n` ids.
  std::vector<int32_t> ReferencePrefix(size_t n) const {
    return {reference_.token_ids.begin(), reference_.token_ids.begin() + n};
  }
  // Index of the first reference token that did not occur earlier in the output.
  size_t FirstRepeatFreeIndex(size_t from) const {
    for (size_t i = from; i < reference_.token_ids.size(); ++i) {
      const auto begin = reference_.token_ids.begin();
      if (std::find(begin, begin + i, reference_.token_ids[i]) == begin + i) return i;
    }
    return reference_.token_ids.size();
  }

  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<Engine> engine_;
  std::vector<int32_t> prompt_;
  StreamResult reference_;
};

TEST_F(EngineStoppingTest, TextIsTheDecodedOutput) {
  EXPECT_EQ(reference_.completion.finish_reason, FinishReason::kLength);
  EXPECT_EQ(reference_.text, tokenizer_->Decode(reference_.token_ids, true));
  EXPECT_TRUE(reference_.completion.matched_stop.empty());
}

TEST_F(EngineStoppingTest, StopTokenIdEndsBeforeItAndIsNotStreamed) {
  const size_t k = FirstRepeatFreeIndex(5);
  ASSERT_LT(k, reference_.token_ids.size());
  Request request = GreedyRequest(prompt_, kMaxTokens);
  request.stopping.stop_token_ids = {reference_.token_ids[k]};
  const StreamResult r = RunToEnd(*engine_, request);
  EXPECT_EQ(r.completion.finish_reason, FinishReason::kStop);
  EXPECT_EQ(r.token_ids, ReferencePrefix(k));
  EXPECT_TRUE(r.completion.matched_stop.empty());
  EXPECT_EQ(r.text, tokenizer_->Decode(r.token_ids, true));
}

TEST_F(EngineStoppingTest, MinTokensSuppressesStopTokensUntilReached) {
  const size_t k = FirstRepeatFreeIndex(5);
  ASSERT_LT(k, reference_.token_ids.size());
  Request request = GreedyRequest(prompt_, kMaxTokens);
  request.stopping.stop_token_ids = {reference_.token_ids[k]};
  request.stopping.min_tokens = static_cast<int32_t>(k) + 1;
  const StreamResult r = RunToEnd(*engine_, request);
  // The stop token at k is kept as an ordinary token; the output follows the reference until
  // the stop token's next occurrence, or to max_tokens.
  ASSERT_GT(r.token_ids.size(), k);
  EXPECT_EQ(r.token_ids, ReferencePrefix(r.token_ids.size()));
  if (r.completion.finish_reason == FinishReason::kStop) {
    EXPECT_EQ(reference_.token_ids[r.token_ids.size()], reference_.token_ids[k]);
  } else {
    EXPECT_EQ(r.completion.finish_reason, FinishReason::kLength);
    EXPECT_EQ(r.token_ids.size(), static_cast<size_t>(kMaxTokens));
  }
}

TEST_F(EngineStoppingTest, EosStopsUnlessIgnored) {
  const size_t k = FirstRepeatFreeIndex(3);
  ASSERT_LT(k, reference_.token_ids.size());
  auto engine = NewEngine({.eos_token_ids = {reference_.token_ids[k]}});
  ASSERT_NE(engine, nullptr);
  Request request = GreedyRequest(prompt_, kMaxTokens);
  request.stopping.ignore_eos = false;
  const StreamResult stopped = RunToEnd(*engine, request);
  EXPECT_EQ(stopped.completion.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stopped.token_ids, ReferencePrefix(k));
  request.stopping.ignore_eos = true;
  const StreamResult ignored = RunToEnd(*engine, request);
  EXPECT_EQ(ignored.completion.finish_reason, FinishReason::kLength);
  EXPECT_EQ(ignored.token_ids, reference_.token_ids);
}

TEST_F(EngineStoppingTest, MaxTokensEndsWithLength) {
  const StreamResult r = RunToEnd(*engine_, GreedyRequest(prompt_, 7));
  EXPECT_EQ(r.completion.finish_reason, FinishReason::kLength);
  EXPECT_EQ(r.token_ids, ReferencePrefix(7));
  EXPECT_EQ(r.completion.prompt_tokens, static_cast<int32_t>(prompt_.size()));
}

// A stop string taken from the middle of the reference text: two ASCII characters, so that it
// is whole characters of the reference output.
std::string PickStopString(const std::string& text, size_t* position) {
  for (size_t i = 4; i + 1 < text.size(); ++i) {
    const auto ascii = [](char c) { return c > ' ' && c < 0x7f; };
    if (ascii(text[i]) && ascii(text[i + 1])) {
      *position = text.find(text.substr(i, 2));  // its first occurrence
      return text.substr(i, 2);
    }
  }
  return "";
}

TEST_F(EngineStoppingTest, StopStringEndsTheTextBeforeIt) {
  size_t position = 0;
  const std::string stop = PickStopString(reference_.text, &position);
  ASSERT_FALSE(stop.empty()) << reference_.text;
  for (const bool include : {false, true}) {
    Request request = GreedyRequest(prompt_, kMaxTokens);
    request.stopping.stop = {"never-matches", stop};
    request.stopping.include_stop_str_in_output = include;
    const StreamResult r = RunToEnd(*engine_, request);
    EXPECT_EQ(r.completion.finish_reason, FinishReason::kStop);
    EXPECT_EQ(r.completion.matched_stop, stop);
    EXPECT_EQ(r.text, reference_.text.substr(0, position + (include ? stop.size() : 0)));
    // Ids stream up to and including the token that completed the stop string.
    EXPECT_EQ(r.token_ids, ReferencePrefix(r.token_ids.size()));
    EXPECT_LT(r.token_ids.size(), static_cast<size_t>(kMaxTokens));
    const std::string decoded = tokenizer_->Decode(r.token_ids, true);
    EXPECT_NE(decoded.find(stop), std::string::npos);
  }
}

TEST_F(EngineStoppingTest, HeldBackTextIsFlushedAtTheEnd) {
  // A stop string that starts like the output's ending but never completes: the tail is held
  // back while it might, and must still arrive before the end. The engine waits after its
  // first step until the first update has been taken, so the output comes in at least two
  // updates (the last one flushing the tail) however the threads are scheduled.
  absl::Notification first_taken;
  std::atomic<bool> waited{false};
  TestEngineOptions options;
  options.on_step = [&](const StepObservation&) {
    if (!waited.exchange(true)) first_taken.WaitForNotification();
  };
  std::unique_ptr<Engine> engine = NewEngine(std::move(options));
  ASSERT_NE(engine, nullptr);
  const std::string last = reference_.text.substr(reference_.text.size() - 1);
  Request request = GreedyRequest(prompt_, kMaxTokens);
  request.stopping.stop = {last + "\x01\x02"};
  auto stream = engine->Submit(std::move(request));
  if (!stream.ok()) first_taken.Notify();
  ASSERT_TRUE(stream.ok()) << stream.status();
  StreamUpdate first = (*stream)->WaitAndTake();
  while (first.empty() && !(*stream)->ended()) first = (*stream)->WaitAndTake();
  first_taken.Notify();
  ASSERT_FALSE(first.ends_stream()) << "the engine ended the request in its first step";
  const StreamResult rest = Collect(**stream);
  ASSERT_TRUE(rest.status.ok()) << rest.status;
  EXPECT_EQ(rest.completion.finish_reason, FinishReason::kLength);
  EXPECT_EQ(first.text + rest.text, reference_.text);
  EXPECT_EQ(first.token_ids.size() + rest.token_ids.size(), reference_.token_ids.size());
}

}  // namespace
}  // namespace mlaserve
