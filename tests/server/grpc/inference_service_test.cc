// The Inference service over a real loopback channel against a real engine on a tiny
// checkpoint: every RPC, the status codes that depend on engine state, and that cancelled,
// expired and aborted calls leave no KV block behind.
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/server_test_util.h"

namespace mlaserve::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class InferenceServiceTest : public ::testing::Test {
 protected:
  void StartWith(const RealEngineOptions& options) {
    absl::StatusOr<std::shared_ptr<ServingEngine>> engine = MakeRealEngine(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    server_ = StartTestServer(*engine);
    ASSERT_NE(server_, nullptr);
  }
  void SetUp() override { StartWith({}); }

  v1::GetServerInfoResponse ServerInfo() {
    grpc::ClientContext context;
    v1::GetServerInfoResponse info;
    EXPECT_TRUE(server_->inference->GetServerInfo(&context, {}, &info).ok());
    return info;
  }

  // Whether the engine ends up with nothing live and every KV block free.
  bool EventuallyIdleWithNoLeak() {
    return WaitFor([&] {
      const v1::GetServerInfoResponse info = ServerInfo();
      return info.num_running() == 0 && info.num_waiting() == 0 &&
             info.kv_blocks_free() == info.kv_blocks_total();
    });
  }

  std::unique_ptr<TestServer> server_;
};

TEST_F(InferenceServiceTest, ModelAndServerInfoDescribeTheModel) {
  grpc::ClientContext context;
  v1::GetModelInfoResponse model;
  ASSERT_TRUE(server_->inference->GetModelInfo(&context, {}, &model).ok());
  EXPECT_EQ(model.model_name(), "v2_lite_dense_first");
  EXPECT_EQ(model.architecture(), "DeepseekV2ForCausalLM");
  EXPECT_EQ(model.vocab_size(), 256u);
  EXPECT_EQ(model.max_context_length(), 4096u);
  EXPECT_THAT(model.eos_token_ids(), ElementsAre(255));
  EXPECT_EQ(model.bos_token_id(), 254u);
  EXPECT_GT(model.num_layers(), 0u);
  const v1::GetServerInfoResponse info = ServerInfo();
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_EQ(info.activation_dtype(), "float32");
  EXPECT_EQ(info.kv_cache_dtype(), "float32");
  EXPECT_THAT(info.graph_batch_sizes(), ElementsAre(1, 2, 4, 8));
  EXPECT_FALSE(info.version().empty());
  EXPECT_EQ(info.kv_blocks_total(), 4u * 256u);
  EXPECT_EQ(info.kv_blocks_free(), info.kv_blocks_total());
  EXPECT_EQ(info.kv_block_size(), 16u);
  EXPECT_GT(info.weight_bytes(), 0u);
  EXPECT_GT(info.kv_cache_bytes(), 0u);
  EXPECT_GT(info.workspace_bytes(), 0u);
  EXPECT_GT(info.graph_memory_bytes(), 0u);  // graphs for 1, 2, 4 and 8
  EXPECT_FALSE(info.draining());
}

TEST_F(InferenceServiceTest, ServerInfoNamesABf16CacheAndItsHalvedBytes) {
  const uint64_t f32_bytes = ServerInfo().kv_cache_bytes();
  StartWith({.kv_cache_dtype = DType::kBF16});
  const v1::GetServerInfoResponse info = ServerInfo();
  EXPECT_EQ(info.kv_cache_dtype(), "bfloat16");
  EXPECT_EQ(info.kv_cache_bytes() * 2, f32_bytes);
}

TEST_F(InferenceServiceTest, TokenizeAndDetokenizeRoundTrip) {
  grpc::ClientContext context;
  v1::TokenizeRequest tokenize;
  tokenize.set_text("hi");
  tokenize.set_add_special_tokens(true);
  v1::TokenizeResponse ids;
  ASSERT_TRUE(server_->inference->Tokenize(&context, tokenize, &ids).ok());
  ASSERT_EQ(ids.ids_size(), 3);
  EXPECT_EQ(ids.ids(0), 254u);  // tokenizer_config.json asks for bos

  grpc::ClientContext detokenize_context;
  v1::DetokenizeRequest detokenize;
  *detokenize.mutable_ids() = ids.ids();
  detokenize.set_skip_special_tokens(true);
  v1::DetokenizeResponse text;
  ASSERT_TRUE(server_->inference->Detokenize(&detokenize_context, detokenize, &text).ok());
  EXPECT_EQ(text.text(), "hi");

  grpc::ClientContext bad_context;
  detokenize.add_ids(256);
  const grpc::Status bad = server_->inference->Detokenize(&bad_context, detokenize, &text);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("ids[3]"));
}

TEST_F(InferenceServiceTest, GreedyIsReproducibleAndCountsWhatItStreams) {
  v1::GenerateRequest request = GreedyRequest({10, 20, 30, 40, 50}, 12);
  request.set_top_logprobs(3);
  const GenerateResult a = RunGenerate(*server_->inference, request);
  const GenerateResult b = RunGenerate(*server_->inference, request);
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  EXPECT_EQ(a.token_ids.size(), 12u);
  EXPECT_EQ(a.token_ids, b.token_ids);
  const v1::Complete& complete = a.responses.back().complete();
  EXPECT_EQ(complete.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(complete.prompt_tokens(), 5u);
  EXPECT_EQ(complete.completion_tokens(), a.token_ids.size());
  EXPECT_GE(complete.e2e_seconds(), complete.time_to_first_token_seconds());
  size_t num_logprobs = 0;
  for (const v1::GenerateResponse& r : a.responses) {
    for (const v1::TokenLogprob& lp : r.chunk().logprobs()) {
      EXPECT_EQ(lp.top_size(), 3);
      EXPECT_LE(lp.logprob(), 0.0f);
      ++num_logprobs;
    }
  }
  EXPECT_EQ(num_logprobs, a.token_ids.size());  // top_logprobs implies return_logprobs
}

TEST_F(InferenceServiceTest, TextPromptIsTokenizedWithBosAndStreamsText) {
  v1::GenerateRequest request = GreedyRequest({}, 6);
  request.set_text("hello");
  const GenerateResult r = RunGenerate(*server_->inference, request);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.responses.back().complete().prompt_tokens(), 6u);  // <bos> + 5 bytes
  EXPECT_EQ(r.token_ids.size(), 6u);
}

TEST_F(InferenceServiceTest, ThirtyTwoConcurrentStreamsAllCompleteAndFreeEverything) {
  constexpr int kStreams = 32;
  std::vector<GenerateResult> results(kStreams);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      results[i] = RunGenerate(*server_->inference,
                               GreedyRequest({static_cast<uint32_t>(i), 7, 9}, 8 + i % 5));
    });
  }
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(results[i].status.ok()) << i << ": " << results[i].status.error_message();
    EXPECT_EQ(results[i].token_ids.size(), static_cast<size_t>(8 + i % 5));
    EXPECT_EQ(results[i].responses.back().complete().completion_tokens(),
              results[i].token_ids.size());
  }
  EXPECT_TRUE(EventuallyIdleWithNoLeak());
}

TEST_F(InferenceServiceTest, ClientCancelFreesTheKvBlocks) {
  grpc::ClientContext context;
  auto reader =
      server_->inference->Generate(&context, GreedyRequest({1, 2, 3}, kLongRequestTokens));
  v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  // Stats are published after each step, so the blocks show up shortly after the first token.
  EXPECT_TRUE(WaitFor([&] {
    const v1::GetServerInfoResponse info = ServerInfo();
    return info.kv_blocks_free() < info.kv_blocks_total();
  }));
  context.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(EventuallyIdleWithNoLeak());
}

TEST_F(InferenceServiceTest, ExpiredDeadlineIsDeadlineExceededAndFreesTheKvBlocks) {
  const GenerateResult r = RunGenerate(
      *server_->inference, GreedyRequest({1, 2, 3}, kLongRequestTokens), absl::Milliseconds(100));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(r.token_ids.size(), kLongRequestTokens);
  EXPECT_TRUE(EventuallyIdleWithNoLeak());
}

TEST_F(InferenceServiceTest, AbortEndsTheStreamWithAbortAndCountsStreamedTokens) {
  grpc::ClientContext context;
  v1::GenerateRequest request = GreedyRequest({4, 5}, kLongRequestTokens);
  request.set_request_id("long");
  auto reader = server_->inference->Generate(&context, request);
  v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  size_t streamed = static_cast<size_t>(response.chunk().token_ids_size());

  grpc::ClientContext abort_context;
  v1::AbortRequest abort;
  abort.add_request_ids("long");
  v1::AbortResponse aborted;
  ASSERT_TRUE(server_->inference->Abort(&abort_context, abort, &aborted).ok());
  EXPECT_THAT(aborted.aborted(), ElementsAre("long"));

  while (reader->Read(&response) && response.has_chunk()) {
    streamed += static_cast<size_t>(response.chunk().token_ids_size());
  }
  ASSERT_TRUE(response.has_complete());
  EXPECT_EQ(response.complete().finish_reason(), v1::FINISH_REASON_ABORT);
  EXPECT_EQ(response.complete().completion_tokens(), streamed);
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_TRUE(EventuallyIdleWithNoLeak());
}

TEST_F(InferenceServiceTest, LiveDuplicateIdIsAlreadyExists) {
  grpc::ClientContext context;
  v1::GenerateRequest request = GreedyRequest({4, 5}, kLongRequestTokens);
  request.set_request_id("twice");
  auto reader = server_->inference->Generate(&context, request);
  v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  const GenerateResult duplicate = RunGenerate(*server_->inference, request);
  EXPECT_EQ(duplicate.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(duplicate.status.error_message(), HasSubstr("request_id"));
  context.TryCancel();
  reader->Finish();
  EXPECT_TRUE(EventuallyIdleWithNoLeak());
}

TEST_F(InferenceServiceTest, FullAdmissionQueueIsResourceExhausted) {
  server_.reset();
  // Slow steps: the running request must still hold the only slot (40 s) when the third
  // arrives, however loaded the host.
  StartWith({.max_num_seqs = 1, .max_num_waiting_seqs = 1, .step_delay = absl::Milliseconds(10)});
  grpc::ClientContext running_context, waiting_context;
  auto running =
      server_->inference->Generate(&running_context, GreedyRequest({1}, kLongRequestTokens));
  v1::GenerateResponse response;
  ASSERT_TRUE(running->Read(&response));
  // The engine publishes its counts after the step that streamed the first chunk; until then
  // the running request still counts as waiting and would fill the queue.
  ASSERT_TRUE(WaitFor([&] {
    const v1::GetServerInfoResponse info = ServerInfo();
    return info.num_running() == 1 && info.num_waiting() == 0;
  }));
  auto waiting =
      server_->inference->Generate(&waiting_context, GreedyRequest({2}, kLongRequestTokens));
  ASSERT_TRUE(WaitFor([&] { return ServerInfo().num_waiting() == 1; }));
  const GenerateResult refused = RunGenerate(*server_->inference, GreedyRequest({3}, 4));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  running_context.TryCancel();
  waiting_context.TryCancel();
  running->Finish();
  waiting->Finish();
  EXPECT_TRUE(EventuallyIdleWithNoLeak());
}

}  // namespace
}  // namespace mlaserve::testing
