#include "engine/request_stream.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace mlaserve {
namespace {

TokenChoice Choice(int32_t id) { return TokenChoice{.token = id, .logprob = -1.0f, .top = {}}; }

Completion Done(int32_t completion_tokens) {
  Completion c;
  c.finish_reason = FinishReason::kLength;
  c.completion_tokens = completion_tokens;
  return c;
}

TEST(RequestStreamTest, TakeCoalescesEverythingPending) {
  RequestStream stream("r");
  EXPECT_TRUE(stream.Take().empty());
  stream.Push({1}, "a", {Choice(1)});
  stream.Push({2, 3}, "bc", {Choice(2), Choice(3)});
  StreamUpdate update = stream.Take();
  EXPECT_EQ(update.token_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(update.text, "abc");
  ASSERT_EQ(update.logprobs.size(), 3u);
  EXPECT_EQ(update.logprobs[2].token, 3);
  EXPECT_FALSE(update.ends_stream());
  EXPECT_TRUE(stream.Take().empty());
}

TEST(RequestStreamTest, TheEndComesAfterPendingOutputAndOnlyOnce) {
  RequestStream stream("r");
  stream.Push({1}, "a", {});
  stream.Finish({2}, "b", {}, Done(2));
  EXPECT_TRUE(stream.ended());
  StreamUpdate update = stream.Take();
  EXPECT_EQ(update.token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(update.text, "ab");
  ASSERT_TRUE(update.completion.has_value());
  EXPECT_EQ(update.completion->completion_tokens, 2);
  EXPECT_TRUE(update.ends_stream());
  EXPECT_TRUE(stream.Take().empty());
  EXPECT_TRUE(stream.WaitAndTake().empty());  // ended: does not block
}

TEST(RequestStreamTest, FailureKeepsUntakenOutput) {
  RequestStream stream("r");
  stream.Push({7}, "x", {});
  stream.Fail(absl::UnavailableError("the engine failed"));
  StreamUpdate update = stream.Take();
  EXPECT_EQ(update.token_ids, (std::vector<int32_t>{7}));
  EXPECT_EQ(update.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(update.completion.has_value());
  EXPECT_TRUE(update.ends_stream());
}

TEST(RequestStreamTest, WaitAndTakeWakesOnPushAndTimesOut) {
  RequestStream stream("r");
  EXPECT_TRUE(stream.WaitAndTake(absl::Milliseconds(1)).empty());
  std::thread producer([&] {
    absl::SleepFor(absl::Milliseconds(20));
    stream.Push({5}, "", {});
  });
  EXPECT_EQ(stream.WaitAndTake().token_ids, (std::vector<int32_t>{5}));
  producer.join();
}

TEST(RequestStreamTest, CallbackRunsPerPushAndAtOnceWhenOutputIsPending) {
  RequestStream stream("r");
  std::atomic<int> calls{0};
  stream.Push({1}, "", {});
  stream.SetReadyCallback([&] {
    ++calls;
    stream.Take();  // allowed from the callback
  });
  EXPECT_EQ(calls.load(), 1);  // output was pending when it was set
  stream.Push({2}, "", {});
  stream.Finish({}, "", {}, Done(2));
  EXPECT_EQ(calls.load(), 3);
  EXPECT_TRUE(stream.Take().empty());
}

TEST(RequestStreamTest, UnregisteredCallbackIsNeverCalledAgain) {
  RequestStream stream("r");
  std::atomic<int> calls{0};
  stream.SetReadyCallback([&] { ++calls; });
  std::thread producer([&] {
    for (int i = 0; i < 1000; ++i) stream.Push({i}, "", {});
  });
  absl::SleepFor(absl::Milliseconds(1));
  stream.SetReadyCallback(nullptr);
  const int after = calls.load();
  producer.join();
  EXPECT_EQ(calls.load(), after);
}

}  // namespace
}  // namespace mlaserve
