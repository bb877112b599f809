// grpc.health.v1 and the watchdog: SERVING only when loaded and healthy, NOT_SERVING while
// loading, draining, after an engine failure and during a stall; Watch streams every change.
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/common/health_monitor.h"
#include "tests/server/server_test_util.h"

namespace mlaserve::testing {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

bool Serving(TestServer& server) {
  const HealthAnswer answer = HealthCheck(*server.health, "");
  return answer.code == grpc::StatusCode::OK && answer.status == HealthCheckResponse::SERVING;
}

bool NotServing(TestServer& server) {
  const HealthAnswer answer = HealthCheck(*server.health, "");
  return answer.code == grpc::StatusCode::OK && answer.status == HealthCheckResponse::NOT_SERVING;
}

EngineStats Busy(uint64_t steps, absl::Time last_step) {
  EngineStats stats;
  stats.num_running = 1;
  stats.steps_total = steps;
  stats.last_step_time = last_step;
  return stats;
}

TEST(StallDetectorTest, IdleTimeBeforeWorkArrivesDoesNotCount) {
  StallDetector detector(absl::Seconds(10));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(detector.Stalled(EngineStats{}, t0));
  // The last step ended an hour ago, but the work only just arrived.
  EXPECT_FALSE(detector.Stalled(Busy(5, t0 - absl::Hours(1)), t0 + absl::Seconds(1)));
  EXPECT_FALSE(detector.Stalled(Busy(5, t0 - absl::Hours(1)), t0 + absl::Seconds(10)));
  EXPECT_TRUE(detector.Stalled(Busy(5, t0 - absl::Hours(1)), t0 + absl::Seconds(12)));
  // A step finishes: healthy again until the next gap.
  EXPECT_FALSE(detector.Stalled(Busy(6, t0 + absl::Seconds(12)), t0 + absl::Seconds(13)));
  EXPECT_TRUE(detector.Stalled(Busy(6, t0 + absl::Seconds(12)), t0 + absl::Seconds(23)));
  // Going idle resets it.
  EXPECT_FALSE(detector.Stalled(EngineStats{}, t0 + absl::Seconds(24)));
  EXPECT_FALSE(detector.Stalled(Busy(6, t0 + absl::Seconds(12)), t0 + absl::Seconds(30)));
}

TEST(StallDetectorTest, ZeroTimeoutNeverStalls) {
  StallDetector detector(absl::ZeroDuration());
  EXPECT_FALSE(detector.Stalled(Busy(0, absl::InfinitePast()), absl::Now()));
}

TEST(HealthTest, NotServingWhileLoadingThenServingForBothNames) {
  std::unique_ptr<TestServer> server = StartTestServer(nullptr);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(NotServing(*server));
  server->server->SetEngine(std::make_shared<FakeEngine>());
  EXPECT_TRUE(Serving(*server));
  const HealthAnswer inference = HealthCheck(*server->health, "mlaserve.v1.Inference");
  EXPECT_EQ(inference.status, HealthCheckResponse::SERVING);
  EXPECT_EQ(HealthCheck(*server->health, "no.such.Service").code, grpc::StatusCode::NOT_FOUND);
}

TEST(HealthTest, EngineFailureIsNotServing) {
  auto engine = std::make_shared<FakeEngine>();
  std::unique_ptr<TestServer> server = StartTestServer(engine);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(Serving(*server));
  EngineStats failed;
  failed.failed = true;
  engine->set_stats(failed);
  EXPECT_TRUE(WaitFor([&] { return NotServing(*server); }));
}

TEST(HealthTest, WatchdogReportsAStallAndItsRecovery) {
  auto engine = std::make_shared<FakeEngine>();
  InferenceServerOptions options;
  options.stall_timeout = absl::Milliseconds(200);
  std::unique_ptr<TestServer> server = StartTestServer(engine, options);
  ASSERT_NE(server, nullptr);
  const absl::Time start = absl::Now();
  engine->set_stats(Busy(1, start));
  EXPECT_TRUE(Serving(*server));
  ASSERT_TRUE(WaitFor([&] { return NotServing(*server); }));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  engine->set_stats(Busy(2, absl::Now()));  // a step finished
  EXPECT_TRUE(WaitFor([&] { return Serving(*server); }));
}

TEST(HealthTest, WatchStreamsChangesAndEndsAtShutdown) {
  auto engine = std::make_shared<FakeEngine>();
  std::unique_ptr<TestServer> server = StartTestServer(nullptr);
  ASSERT_NE(server, nullptr);
  grpc::ClientContext context;
  HealthCheckRequest request;
  request.set_service("mlaserve.v1.Inference");
  auto reader = server->health->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  server->server->SetEngine(engine);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);

  grpc::ClientContext unknown_context;
  HealthCheckRequest unknown;
  unknown.set_service("no.such.Service");
  auto unknown_reader = server->health->Watch(&unknown_context, unknown);
  ASSERT_TRUE(unknown_reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVICE_UNKNOWN);

  server->server->DrainAndShutdown(absl::Seconds(1));
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_FALSE(unknown_reader->Read(&response));
  EXPECT_EQ(unknown_reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace mlaserve::testing
