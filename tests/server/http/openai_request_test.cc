#include "server/http/openai_request.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/http/openai_response.h"

namespace mlaserve {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

OpenAiModel TokenIdModel() {
  return {.name = "tiny", .limits = {.vocab_size = 256, .max_context_tokens = 64}};
}

absl::StatusOr<OpenAiRequest> Completions(const std::string& body,
                                          const OpenAiModel& model = TokenIdModel()) {
  return ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body, model);
}

// The message names `field` first, so that the OpenAI error's `param` is the field.
void ExpectFieldError(const std::string& body, const std::string& field,
                      OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions) {
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(endpoint, body, TokenIdModel());
  ASSERT_FALSE(r.ok()) << body;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(ErrorBody(r.status())["error"]["param"], field) << r.status();
}

TEST(OpenAiRequestTest, MapsEveryFieldOntoTheEngineRequest) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({
    "model": "tiny", "prompt": [1, 2, 3], "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
    "top_k": 4, "min_p": 0.1, "seed": 11, "stop": "xy", "presence_penalty": 0.5,
    "frequency_penalty": -0.5, "repetition_penalty": 1.1, "priority": 3, "ignore_eos": true,
    "logprobs": 2, "stream": true, "stream_options": {"include_usage": true}, "user": "u",
    "min_tokens": 1, "stop_token_ids": [9]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  ASSERT_EQ(r->choices.size(), 1u);
  const Request& q = r->choices[0];
  EXPECT_EQ(q.prompt_token_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(q.stopping.max_tokens, 7);
  EXPECT_FLOAT_EQ(q.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(q.sampling.top_p, 0.9f);
  EXPECT_EQ(q.sampling.top_k, 4);
  EXPECT_FLOAT_EQ(q.sampling.min_p, 0.1f);
  EXPECT_EQ(q.sampling.seed, 11u);
  EXPECT_EQ(q.stopping.stop, (std::vector<std::string>{"xy"}));
  EXPECT_FLOAT_EQ(q.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(q.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(q.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(q.priority, 3);
  EXPECT_TRUE(q.stopping.ignore_eos);
  EXPECT_EQ(q.stopping.min_tokens, 1);
  EXPECT_EQ(q.stopping.stop_token_ids, (std::vector<int32_t>{9}));
  EXPECT_TRUE(q.return_logprobs);
  EXPECT_EQ(q.top_logprobs, 2);
}

TEST(OpenAiRequestTest, CompletionsDefaultToSixteenTokensAndNullMeansUnset) {
  absl::StatusOr<OpenAiRequest> r =
      Completions(R"({"prompt": [5], "temperature": null, "top_k": -1})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->choices[0].stopping.max_tokens, 16);
  EXPECT_FLOAT_EQ(r->choices[0].sampling.temperature, 1.0f);
  EXPECT_EQ(r->choices[0].sampling.top_k, 0);
  EXPECT_EQ(r->model, "tiny");
}

TEST(OpenAiRequestTest, PromptListsAndNMakeChoicesWithSuccessiveSeeds) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({"prompt": [[1], [2, 3]], "n": 2, "seed": 10})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->choices.size(), 4u);
  EXPECT_EQ(r->n, 2);
  EXPECT_EQ(r->choices[1].prompt_token_ids, (std::vector<int32_t>{1}));
  EXPECT_EQ(r->choices[2].prompt_token_ids, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(r->choices[0].sampling.seed, 10u);
  EXPECT_EQ(r->choices[1].sampling.seed, 11u);
  EXPECT_EQ(r->choices[2].sampling.seed, 10u);
}

TEST(OpenAiRequestTest, ValidatorErrorsComeBackWithOpenAiFieldNames) {
  ExpectFieldError(R"({"prompt": [1], "top_p": 1.5})", "top_p");
  ExpectFieldError(R"({"prompt": [1], "temperature": -1})", "temperature");
  ExpectFieldError(R"({"prompt": [1], "top_k": -2})", "top_k");
  ExpectFieldError(R"({"prompt": [1], "presence_penalty": 3})", "presence_penalty");
  ExpectFieldError(R"({"prompt": [1], "max_tokens": 0})", "max_tokens");
  ExpectFieldError(R"({"prompt": [1], "logprobs": 21})", "logprobs");
  ExpectFieldError(R"({"prompt": [1], "stop": ["a", ""]})", "stop[1]");
  ExpectFieldError(R"({"prompt": [300]})", "prompt[0]");
  ExpectFieldError(R"({"prompt": [[1], [300]]})", "prompt[1][0]");
  ExpectFieldError(R"({"prompt": [1], "temperature": 1e300})", "temperature");
  std::string long_prompt = R"({"prompt": [1)";
  for (int i = 0; i < 64; ++i) long_prompt += ",1";
  ExpectFieldError(long_prompt + "]}", "prompt");
}

TEST(OpenAiRequestTest, ShapesAndUnsupportedFieldsAreRefusedByName) {
  ExpectFieldError(R"({"prompt": [1], "temperature": "hot"})", "temperature");
  ExpectFieldError(R"({"prompt": [1], "max_tokens": -1})", "max_tokens");
  ExpectFieldError(R"({"prompt": [1], "n": 0})", "n");
  ExpectFieldError(R"({"prompt": [1], "n": 100, "best_of": 3})", "best_of");
  EXPECT_TRUE(Completions(R"({"prompt": [1], "n": 2, "best_of": 2})").ok());
  ExpectFieldError(R"({"prompt": [1], "echo": true})", "echo");
  ExpectFieldError(R"({"prompt": [1], "logit_bias": {"5": 1}})", "logit_bias");
  ExpectFieldError(R"({"prompt": [1], "suffix": "x"})", "suffix");
  ExpectFieldError(R"({"prompt": [1], "frobnicate": 1})", "frobnicate");
  ExpectFieldError(R"({"prompt": [1], "stream_options": {"x": true}})", "stream_options.x");
  ExpectFieldError(R"({"prompt": [1], "stream_options": {"include_usage": true}})",
                   "stream_options");
  ExpectFieldError(R"({"prompt": [1], "messages": []})", "messages");
  ExpectFieldError(R"({"prompt": []})", "prompt");
  ExpectFieldError(R"({"prompt": [-1]})", "prompt");
  ExpectFieldError(R"({})", "prompt");
  ExpectFieldError(R"([1, 2])", "body");
  ExpectFieldError(R"({"prompt": )", "body");
  ExpectFieldError(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
                   "top_logprobs", OpenAiEndpoint::kChatCompletions);
  ExpectFieldError(R"({"messages": [{"content": "x"}]})", "messages[0]",
                   OpenAiEndpoint::kChatCompletions);
  ExpectFieldError(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
                   "messages[0].content[0]", OpenAiEndpoint::kChatCompletions);
  ExpectFieldError(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
                   "tool_choice", OpenAiEndpoint::kChatCompletions);
  ExpectFieldError(R"({"messages": [], "prompt": "x"})", "prompt",
                   OpenAiEndpoint::kChatCompletions);
}

TEST(OpenAiRequestTest, UnknownModelIsNotFound) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({"model": "other", "prompt": [1]})");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), StartsWith("model: "));
}

TEST(OpenAiRequestTest, ChatNeedsATemplateAndATokenizer) {
  const std::string body = R"({"messages": [{"role": "user", "content": "hi"}]})";
  absl::StatusOr<OpenAiRequest> r =
      ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions, body, TokenIdModel());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("chat template"));

  absl::StatusOr<ChatTemplate> chat_template =
      ChatTemplate::Compile("{% for m in messages %}{{ m.content }}{% endfor %}", "", "");
  ASSERT_TRUE(chat_template.ok()) << chat_template.status();
  OpenAiModel model = TokenIdModel();
  model.chat_template = &*chat_template;
  r = ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions, body, model);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), StartsWith("messages: "));

  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(
      std::string(std::getenv("MLASERVE_SOURCE_DIR")) + "/tests/server/data/tiny_tokenizer");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  model.tokenizer = tokenizer->get();
  r = ParseOpenAiRequest(
      OpenAiEndpoint::kChatCompletions,
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                             "max_completion_tokens": 3})",
      model);
  ASSERT_TRUE(r.ok()) << r.status();
  const nlohmann::json messages = {{{"role", "user"}, {"content", "hi"}}};
  absl::StatusOr<std::string> rendered = chat_template->Render({.messages = &messages});
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  // The template writes the special tokens; the tokenizer adds none.
  EXPECT_EQ(r->choices[0].prompt_token_ids, (*tokenizer)->Encode(*rendered, false));
  EXPECT_EQ(r->choices[0].stopping.max_tokens, 3);
}

}  // namespace
}  // namespace mlaserve
