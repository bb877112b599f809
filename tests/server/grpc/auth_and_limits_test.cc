// The server's protections: the static bearer token (--auth_token_file), the prompt-size
// limit checked before tokenization, and the cancellation of streams whose client stopped
// reading (--stream_write_timeout_s).
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/server_test_util.h"

namespace mlaserve::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "s3cret-token";

std::string WriteTokenFile(const std::string& content) {
  const std::string path =
      ::testing::TempDir() + "/auth_token_" + std::to_string(std::rand()) + ".txt";
  std::ofstream(path) << content;
  return path;
}

std::unique_ptr<TestServer> StartWithToken(std::shared_ptr<ServingEngine> engine) {
  InferenceServerOptions options;
  options.auth_token_file = WriteTokenFile(std::string(kToken) + "\n");
  return StartTestServer(std::move(engine), options);
}

grpc::Status GetServerInfo(TestServer& server, const std::string& authorization) {
  grpc::ClientContext context;
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  v1::GetServerInfoResponse response;
  return server.inference->GetServerInfo(&context, {}, &response);
}

TEST(AuthTest, EveryInferenceCallNeedsTheToken) {
  auto engine = std::make_shared<FakeEngine>();
  engine->set_on_submit([](RequestStream& stream) {
    stream.Finish({7}, "", {}, MakeCompletion(FinishReason::kLength, 1));
  });
  auto server = StartWithToken(engine);
  ASSERT_NE(server, nullptr);

  const grpc::Status missing = GetServerInfo(*server, "");
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(missing.error_message(), HasSubstr("authorization"));
  EXPECT_EQ(GetServerInfo(*server, "Bearer wrong").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(GetServerInfo(*server, "Bearer s3cret-tokenX").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(GetServerInfo(*server, kToken).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(GetServerInfo(*server, std::string("Bearer ") + kToken).ok());

  // Generate without the token is refused before the engine sees it.
  const GenerateResult refused = RunGenerate(*server->inference, GreedyRequest({1, 2}, 1));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(engine->submitted().empty());

  grpc::ClientContext context;
  context.AddMetadata("authorization", std::string("Bearer ") + kToken);
  auto reader = server->inference->Generate(&context, GreedyRequest({1, 2}, 1));
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(engine->submitted().size(), 1u);

  // Health stays open: probes carry no secret.
  EXPECT_EQ(HealthCheck(*server->health, "").code, grpc::StatusCode::OK);
}

TEST(AuthTest, AnUnreadableOrEmptyTokenFileIsRefusedNamingTheFlag) {
  InferenceServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.auth_token_file = WriteTokenFile("  \n");
  auto empty = InferenceServer::Start(options);
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("--auth_token_file"));
  options.auth_token_file = "/nonexistent/token";
  auto missing = InferenceServer::Start(options);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("--auth_token_file: /nonexistent/token: no such file"));
  options.auth_token_file = ::testing::TempDir();  // a folder: opens, but cannot be read
  auto folder = InferenceServer::Start(options);
  ASSERT_FALSE(folder.ok());
  EXPECT_THAT(folder.status().message(), HasSubstr("--auth_token_file: "));
  EXPECT_THAT(folder.status().message(), HasSubstr(": read failed: "));
}

TEST(LimitsTest, TextPromptsOverTheByteLimitAreRefusedBeforeTokenization) {
  auto engine = std::make_shared<FakeEngine>();
  InferenceServerOptions options;
  options.max_prompt_bytes = 16;
  auto server = StartTestServer(engine, options);
  ASSERT_NE(server, nullptr);
  v1::GenerateRequest request;
  request.set_text(std::string(17, 'a'));
  const GenerateResult result = RunGenerate(*server->inference, request);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(result.status.error_message(), HasSubstr("text"));
  EXPECT_THAT(result.status.error_message(), HasSubstr("17 bytes"));
  EXPECT_TRUE(engine->submitted().empty());
}

TEST(LimitsTest, AStreamWhoseClientStopsReadingIsCancelledAndItsRequestAborted) {
  auto engine = std::make_shared<FakeEngine>();
  // One update far larger than the client's flow-control window: its write cannot complete
  // while the client does not read.
  engine->set_on_submit([](RequestStream& stream) {
    stream.Push({7}, std::string(256 << 10, 'x'), {});
  });
  InferenceServerOptions options;
  options.stream_write_timeout = absl::Milliseconds(200);
  auto server = StartTestServer(engine, options);
  ASSERT_NE(server, nullptr);

  // A client with a small flow-control window that never reads.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server->server->port()),
                                           grpc::InsecureChannelCredentials(), args);
  auto stub = v1::Inference::NewStub(channel);
  v1::GenerateRequest request = GreedyRequest({1, 2}, 100000);
  request.set_request_id("never-read");
  grpc::ClientContext context;
  auto reader = stub->Generate(&context, request);
  EXPECT_TRUE(engine->WaitForAbort("never-read", absl::Seconds(20)))
      << "the stalled stream was never cancelled";
  // The call ends with CANCELLED once the client looks.
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST(LimitsTest, AReaderThatKeepsUpIsNeverCancelled) {
  auto engine = std::make_shared<FakeEngine>();
  InferenceServerOptions options;
  // The stream lasts longer than the timeout (20 x 75 ms), but each message is taken at once:
  // the timeout is per message, not per call. It is long enough that a loaded host (a
  // sanitizer build, a busy CI machine) does not make one read late by that much.
  options.stream_write_timeout = absl::Seconds(1);
  std::thread producer;
  engine->set_on_submit([&producer](RequestStream& stream) {
    producer = std::thread([&stream] {
      for (int i = 0; i < 20; ++i) {
        stream.Push({7}, "", {});
        absl::SleepFor(absl::Milliseconds(75));
      }
      stream.Finish({}, "", {}, MakeCompletion(FinishReason::kLength, 20));
    });
  });
  auto server = StartTestServer(engine, options);
  ASSERT_NE(server, nullptr);
  const GenerateResult result = RunGenerate(*server->inference, GreedyRequest({1, 2}, 20));
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
  producer.join();
  EXPECT_EQ(result.token_ids.size(), 20u);
  EXPECT_TRUE(engine->aborted().empty());
}

}  // namespace
}  // namespace mlaserve::testing
