// Generate, the Abort RPC and admission against a scripted engine: message order, coalescing,
// every error status, and that every way a call ends reaches the engine.
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics/request_observer.h"
#include "tests/server/server_test_util.h"

namespace mlaserve::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class CountingObserver final : public RequestObserver {
 public:
  void OnAdmitted(int32_t num_prompt_tokens) override {
    absl::MutexLock lock(&mu_);
    ++admitted_;
  }
  void OnTokensSent(int32_t num_tokens) override {
    absl::MutexLock lock(&mu_);
    tokens_ += num_tokens;
  }
  void OnCompleted(const Completion&) override {
    absl::MutexLock lock(&mu_);
    ++completed_;
  }
  void OnFailed(absl::StatusCode code) override {
    absl::MutexLock lock(&mu_);
    failures_.push_back(code);
  }
  int admitted() const {
    absl::MutexLock l(&mu_);
    return admitted_;
  }
  int tokens() const {
    absl::MutexLock l(&mu_);
    return tokens_;
  }
  int completed() const {
    absl::MutexLock l(&mu_);
    return completed_;
  }
  std::vector<absl::StatusCode> failures() const {
    absl::MutexLock l(&mu_);
    return failures_;
  }

 private:
  mutable absl::Mutex mu_;
  int admitted_ = 0, tokens_ = 0, completed_ = 0;
  std::vector<absl::StatusCode> failures_;
};

class GenerateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = std::make_shared<FakeEngine>();
    InferenceServerOptions options;
    options.observer = &observer_;
    server_ = StartTestServer(engine_, options);
    ASSERT_NE(server_, nullptr);
  }

  CountingObserver observer_;
  std::shared_ptr<FakeEngine> engine_;
  std::unique_ptr<TestServer> server_;
};

TEST_F(GenerateTest, OutputPendingBeforeTheFirstWriteIsOneChunkThenComplete) {
  engine_->set_on_submit([](RequestStream& stream) {
    stream.Push({7}, "a", {});
    stream.Push({8}, "b", {});
    stream.Finish({9}, "c", {}, MakeCompletion(FinishReason::kLength, 3));
  });
  v1::GenerateRequest request = GreedyRequest({1, 2}, 3);
  request.set_request_id("mine");
  GenerateResult r = RunGenerate(*server_->inference, request);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.responses.size(), 2u);
  EXPECT_THAT(r.responses[0].chunk().token_ids(), ElementsAre(7, 8, 9));
  EXPECT_EQ(r.responses[0].chunk().text(), "abc");
  EXPECT_EQ(r.responses[0].request_id(), "mine");
  ASSERT_TRUE(r.responses[1].has_complete());
  EXPECT_EQ(r.responses[1].request_id(), "mine");
  EXPECT_EQ(r.responses[1].complete().finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r.responses[1].complete().completion_tokens(), 3u);
  EXPECT_EQ(observer_.completed(), 1);
  EXPECT_EQ(observer_.tokens(), 3);
}

TEST_F(GenerateTest, TokensPushedConcurrentlyArriveInOrderWithIdOnFirstAndComplete) {
  constexpr int kTokens = 300;
  std::thread engine_thread([this] {
    ASSERT_TRUE(engine_->WaitForSubmitted(1, absl::Seconds(10)));
    std::shared_ptr<RequestStream> stream = engine_->stream("fake-0");
    for (int i = 0; i < kTokens; ++i) stream->Push({i % 256}, "", {});
    stream->Finish({}, "tail", {}, MakeCompletion(FinishReason::kStop, kTokens));
  });
  GenerateResult r = RunGenerate(*server_->inference, GreedyRequest({1}, kTokens));
  engine_thread.join();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.token_ids.size(), static_cast<size_t>(kTokens));
  for (int i = 0; i < kTokens; ++i) EXPECT_EQ(r.token_ids[i], static_cast<uint32_t>(i % 256));
  EXPECT_EQ(r.text, "tail");  // the text-only final Chunk comes before Complete
  ASSERT_GE(r.responses.size(), 2u);
  EXPECT_EQ(r.responses.front().request_id(), "fake-0");
  for (size_t i = 1; i + 1 < r.responses.size(); ++i) {
    EXPECT_TRUE(r.responses[i].has_chunk());
    EXPECT_EQ(r.responses[i].request_id(), "");
  }
  EXPECT_TRUE(r.responses.back().has_complete());
  EXPECT_EQ(r.responses.back().request_id(), "fake-0");
  EXPECT_EQ(r.responses.back().complete().finish_reason(), v1::FINISH_REASON_STOP);
}

TEST_F(GenerateTest, EngineRefusalsKeepTheirCodeAndMessage) {
  for (const absl::Status& refusal :
       {absl::AlreadyExistsError("request_id: \"x\" is already running"),
        absl::ResourceExhaustedError("the admission queue is full"),
        absl::UnavailableError("the engine failed")}) {
    engine_->set_submit_status(refusal);
    GenerateResult r = RunGenerate(*server_->inference, GreedyRequest({1}, 2));
    EXPECT_EQ(static_cast<int>(r.status.error_code()), static_cast<int>(refusal.code()));
    EXPECT_EQ(r.status.error_message(), refusal.message());
    EXPECT_TRUE(r.responses.empty());
  }
  EXPECT_THAT(observer_.failures(),
              ElementsAre(absl::StatusCode::kAlreadyExists, absl::StatusCode::kResourceExhausted,
                          absl::StatusCode::kUnavailable));
}

TEST_F(GenerateTest, InvalidRequestNeverReachesTheEngine) {
  v1::GenerateRequest request = GreedyRequest({1}, 2);
  request.mutable_sampling()->set_top_p(2.0f);
  GenerateResult r = RunGenerate(*server_->inference, request);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("top_p"));
  EXPECT_TRUE(engine_->submitted().empty());
}

TEST_F(GenerateTest, EngineFailureAfterTokensDeliversThemThenTheError) {
  engine_->set_on_submit([](RequestStream& stream) {
    stream.Push({5, 6}, "", {});
    stream.Fail(absl::UnavailableError("the engine failed: device lost"));
  });
  GenerateResult r = RunGenerate(*server_->inference, GreedyRequest({1}, 8));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(), HasSubstr("device lost"));
  EXPECT_THAT(r.token_ids, ElementsAre(5, 6));
}

TEST_F(GenerateTest, EngineDeadlineCompletionIsDeadlineExceeded) {
  engine_->set_on_submit([](RequestStream& stream) {
    stream.Finish({}, "", {}, MakeCompletion(FinishReason::kDeadline, 0));
  });
  GenerateResult r = RunGenerate(*server_->inference, GreedyRequest({1}, 8));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(observer_.failures(), ElementsAre(absl::StatusCode::kDeadlineExceeded));
}

TEST_F(GenerateTest, ClientCancelAbortsTheRequest) {
  grpc::ClientContext context;
  auto reader = server_->inference->Generate(&context, GreedyRequest({1}, 8));
  ASSERT_TRUE(engine_->WaitForSubmitted(1, absl::Seconds(10)));
  engine_->stream("fake-0")->Push({3}, "", {});
  v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  context.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(engine_->WaitForAbort("fake-0", absl::Seconds(10)));
  EXPECT_TRUE(WaitFor([&] { return !observer_.failures().empty(); }));
  EXPECT_THAT(observer_.failures(), ElementsAre(absl::StatusCode::kCancelled));
}

TEST_F(GenerateTest, GrpcDeadlineBecomesTheRequestDeadlineAndAbortsWhenItPasses) {
  const absl::Time before = absl::Now();
  GenerateResult r =
      RunGenerate(*server_->inference, GreedyRequest({1}, 8), absl::Milliseconds(300));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  ASSERT_EQ(engine_->submitted().size(), 1u);
  const absl::Time deadline = engine_->submitted()[0].deadline;
  EXPECT_GT(deadline, before);
  EXPECT_LT(deadline, before + absl::Seconds(2));
  EXPECT_TRUE(engine_->WaitForAbort("fake-0", absl::Seconds(10)));
}

TEST_F(GenerateTest, AbortRpcListsLiveIdsAndTheStreamCompletesWithAbort) {
  grpc::ClientContext context;
  v1::GenerateRequest request = GreedyRequest({1}, 8);
  request.set_request_id("victim");
  auto reader = server_->inference->Generate(&context, request);
  ASSERT_TRUE(engine_->WaitForSubmitted(1, absl::Seconds(10)));

  grpc::ClientContext abort_context;
  v1::AbortRequest abort;
  abort.add_request_ids("victim");
  abort.add_request_ids("never-seen");
  v1::AbortResponse aborted;
  ASSERT_TRUE(server_->inference->Abort(&abort_context, abort, &aborted).ok());
  EXPECT_THAT(aborted.aborted(), ElementsAre("victim"));

  v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  ASSERT_TRUE(response.has_complete());
  EXPECT_EQ(response.complete().finish_reason(), v1::FINISH_REASON_ABORT);
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_TRUE(reader->Finish().ok());
}

TEST_F(GenerateTest, DrainingRefusesGenerateButAnswersInfo) {
  server_->server->inference().StartDraining();
  GenerateResult r = RunGenerate(*server_->inference, GreedyRequest({1}, 2));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(), HasSubstr("draining"));
  grpc::ClientContext context;
  v1::GetServerInfoResponse info;
  ASSERT_TRUE(server_->inference->GetServerInfo(&context, {}, &info).ok());
  EXPECT_TRUE(info.draining());
}

TEST(GenerateLoadingTest, EveryRpcIsUnavailableUntilTheEngineArrives) {
  std::unique_ptr<TestServer> server = StartTestServer(nullptr);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(RunGenerate(*server->inference, GreedyRequest({1}, 2)).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  grpc::ClientContext context;
  v1::GetModelInfoResponse info;
  EXPECT_EQ(server->inference->GetModelInfo(&context, {}, &info).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  server->server->SetEngine(std::make_shared<FakeEngine>());
  grpc::ClientContext again;
  ASSERT_TRUE(server->inference->GetModelInfo(&again, {}, &info).ok());
  EXPECT_EQ(info.vocab_size(), FakeEngine::kVocabSize);
}

}  // namespace
}  // namespace mlaserve::testing
