// The SIGTERM sequence of InferenceServer::DrainAndShutdown against a real engine: health
// turns NOT_SERVING and Generate UNAVAILABLE at once, info RPCs keep answering, short streams
// finish normally, long ones end with FINISH_REASON_ABORT, and no KV block is left behind.
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/server_test_util.h"

namespace mlaserve::testing {
namespace {

using grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

TEST(DrainTest, FinishesShortStreamsAbortsLongOnesAndKeepsAnsweringInfo) {
  // 5 ms steps: the long streams (4 000 tokens) cannot finish within the drain timeout,
  // which is long enough for the RPCs below even on a loaded host or under ThreadSanitizer.
  RealEngineOptions options;
  options.step_delay = absl::Milliseconds(5);
  absl::StatusOr<std::shared_ptr<ServingEngine>> engine = MakeRealEngine(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::unique_ptr<TestServer> server = StartTestServer(*engine);
  ASSERT_NE(server, nullptr);

  // Long streams, each holding KV blocks when the drain starts.
  constexpr int kLong = 3;
  std::vector<grpc::ClientContext> contexts(kLong);
  std::vector<std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>>> readers;
  for (int i = 0; i < kLong; ++i) {
    readers.push_back(server->inference->Generate(
        &contexts[i], GreedyRequest({static_cast<uint32_t>(i + 1), 2, 3}, kLongRequestTokens)));
    v1::GenerateResponse first;
    ASSERT_TRUE(readers.back()->Read(&first));
  }

  std::thread drain([&] { server->server->DrainAndShutdown(absl::Seconds(2)); });
  ASSERT_TRUE(WaitFor(
      [&] { return HealthCheck(*server->health, "").status == HealthCheckResponse::NOT_SERVING; }));
  const GenerateResult refused = RunGenerate(*server->inference, GreedyRequest({1}, 2));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("draining"));
  {
    grpc::ClientContext context;
    v1::GetServerInfoResponse info;
    ASSERT_TRUE(server->inference->GetServerInfo(&context, {}, &info).ok());
    EXPECT_TRUE(info.draining());
    grpc::ClientContext model_context;
    v1::GetModelInfoResponse model;
    EXPECT_TRUE(server->inference->GetModelInfo(&model_context, {}, &model).ok());
  }

  for (auto& reader : readers) {
    v1::GenerateResponse response;
    while (reader->Read(&response) && response.has_chunk()) {
    }
    ASSERT_TRUE(response.has_complete());
    EXPECT_EQ(response.complete().finish_reason(), v1::FINISH_REASON_ABORT);
    EXPECT_TRUE(reader->Finish().ok());
  }
  drain.join();
  const EngineStats stats = (*engine)->stats();
  EXPECT_EQ(stats.num_running, 0);
  EXPECT_EQ(stats.num_waiting, 0);
  EXPECT_EQ(stats.kv_blocks_free, stats.kv_blocks_total);
}

TEST(DrainTest, StreamsThatFinishWithinTheTimeoutCompleteNormally) {
  absl::StatusOr<std::shared_ptr<ServingEngine>> engine = MakeRealEngine({});
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::unique_ptr<TestServer> server = StartTestServer(*engine);
  ASSERT_NE(server, nullptr);
  grpc::ClientContext context;
  auto reader = server->inference->Generate(&context, GreedyRequest({9, 8, 7}, 24));
  v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));

  const absl::Time start = absl::Now();
  std::thread drain([&] { server->server->DrainAndShutdown(absl::Seconds(60)); });
  size_t streamed = static_cast<size_t>(response.chunk().token_ids_size());
  while (reader->Read(&response) && response.has_chunk()) {
    streamed += static_cast<size_t>(response.chunk().token_ids_size());
  }
  ASSERT_TRUE(response.has_complete());
  EXPECT_EQ(response.complete().finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(streamed, 24u);
  EXPECT_TRUE(reader->Finish().ok());
  drain.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));  // returned when the work was done
}

}  // namespace
}  // namespace mlaserve::testing
