#include "server/http/openai_response.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

OpenAiResponseHeader Header(OpenAiEndpoint endpoint) {
  return {.endpoint = endpoint, .id = "cmpl-1", .created = 7, .model = "tiny"};
}

TEST(OpenAiResponseTest, SseEventsAreDataLinesEndedByABlankLine) {
  EXPECT_EQ(SseEvent(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  // Text with a newline stays on one data line (JSON escapes it).
  EXPECT_EQ(SseEvent(json{{"t", "x\ny"}}), "data: {\"t\":\"x\\ny\"}\n\n");
  // Invalid UTF-8 is replaced, not thrown on.
  EXPECT_EQ(SseEvent(json("\xff")), "data: \"\xEF\xBF\xBD\"\n\n");
}

TEST(OpenAiResponseTest, ChatChunksCarryDeltasAndTheUsageChunkHasNoChoices) {
  const OpenAiResponseHeader h = Header(OpenAiEndpoint::kChatCompletions);
  const json choice = Choice(h, 0, {.text = "hi"}, 0, /*delta=*/true, nullptr);
  EXPECT_EQ(choice, json::parse(R"({"index":0,"delta":{"content":"hi"},"logprobs":null,
                                   "finish_reason":null})"));
  const json finish = Choice(h, 0, {}, 2, /*delta=*/true, "stop");
  EXPECT_EQ(finish["delta"], json::object());
  const json chunk = Chunk(h, json::array({choice}), /*include_usage=*/true);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_TRUE(chunk["usage"].is_null());
  EXPECT_FALSE(Chunk(h, json::array({choice}), false).contains("usage"));
  const json usage = Chunk(h, json::array(), true, Usage(3, 4));
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"], json::parse(R"({"prompt_tokens":3,"completion_tokens":4,
                                            "total_tokens":7})"));
}

TEST(OpenAiResponseTest, ResponsesHaveTheOpenAiObjectShapes) {
  const OpenAiResponseHeader chat = Header(OpenAiEndpoint::kChatCompletions);
  const json message = Choice(chat, 1, {.text = "ok"}, 0, /*delta=*/false, "length");
  EXPECT_EQ(message["message"], json::parse(R"({"role":"assistant","content":"ok"})"));
  EXPECT_EQ(message["finish_reason"], "length");
  const json response = Response(chat, json::array({message}), Usage(1, 1));
  EXPECT_EQ(response["object"], "chat.completion");
  EXPECT_EQ(response["id"], "cmpl-1");
  EXPECT_EQ(response["created"], 7);
  EXPECT_EQ(response["model"], "tiny");
  const OpenAiResponseHeader completions = Header(OpenAiEndpoint::kCompletions);
  EXPECT_EQ(Choice(completions, 0, {.text = "ok"}, 0, false, "stop")["text"], "ok");
  EXPECT_EQ(Response(completions, json::array(), nullptr)["object"], "text_completion");
}

TEST(OpenAiResponseTest, LogprobsWithoutATokenizerNameTokenIds) {
  const ChoiceOutput output{.text = "ab",
                            .logprobs = {{.token = 5, .logprob = -0.5f, .top = {{5, -0.5f}}}}};
  const json completions = Logprobs(Header(OpenAiEndpoint::kCompletions), output, 10);
  EXPECT_EQ(completions["tokens"], json::array({"token_id:5"}));
  EXPECT_EQ(completions["text_offset"], json::array({10}));
  EXPECT_EQ(completions["top_logprobs"][0]["token_id:5"], -0.5);
  const json chat = Logprobs(Header(OpenAiEndpoint::kChatCompletions), output, 0);
  EXPECT_EQ(chat["content"][0]["token"], "token_id:5");
  EXPECT_EQ(chat["content"][0]["top_logprobs"].size(), 1u);
  EXPECT_TRUE(Logprobs(Header(OpenAiEndpoint::kChatCompletions), {}, 0).is_null());
}

TEST(OpenAiResponseTest, ErrorsNameTheirFieldAndStatus) {
  const json error = ErrorBody(absl::InvalidArgumentError("top_p: 3 is outside (0, 1]"));
  EXPECT_EQ(error["error"]["param"], "top_p");
  EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  EXPECT_EQ(error["error"]["message"], "top_p: 3 is outside (0, 1]");
  EXPECT_TRUE(
      ErrorBody(absl::UnavailableError("the server is draining"))["error"]["param"].is_null());
  EXPECT_EQ(
      ErrorBody(absl::InvalidArgumentError("prompt[2] = 300 is not a token id"))["error"]["param"],
      "prompt[2]");
  EXPECT_EQ(ErrorBody(absl::NotFoundError("model: no"))["error"]["code"], "model_not_found");
  EXPECT_EQ(HttpStatus(absl::InvalidArgumentError("")), 400);
  EXPECT_EQ(HttpStatus(absl::FailedPreconditionError("")), 400);
  EXPECT_EQ(HttpStatus(absl::NotFoundError("")), 404);
  EXPECT_EQ(HttpStatus(absl::ResourceExhaustedError("")), 429);
  EXPECT_EQ(HttpStatus(absl::UnavailableError("")), 503);
  EXPECT_EQ(HttpStatus(absl::InternalError("")), 500);
  EXPECT_STREQ(OpenAiFinishReason(FinishReason::kStop), "stop");
  EXPECT_STREQ(OpenAiFinishReason(FinishReason::kLength), "length");
  EXPECT_STREQ(OpenAiFinishReason(FinishReason::kAbort), "abort");
}

}  // namespace
}  // namespace mlaserve
