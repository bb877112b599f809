#include "server/common/request_conversion.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve {
namespace {

using ::testing::HasSubstr;

constexpr ModelLimits kLimits{.vocab_size = 256, .max_context_tokens = 64};

v1::GenerateRequest ValidRequest() {
  v1::GenerateRequest r;
  r.mutable_token_ids()->add_ids(1);
  r.mutable_token_ids()->add_ids(2);
  return r;
}

TEST(RequestConversionTest, UnsetOptionalsTakeTheDocumentedDefaults) {
  absl::StatusOr<Request> request = ToEngineRequest(ValidRequest(), kLimits, nullptr);
  ASSERT_TRUE(request.ok()) << request.status();
  const Request defaults;
  EXPECT_EQ(request->prompt_token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(request->sampling.temperature, defaults.sampling.temperature);
  EXPECT_EQ(request->sampling.top_p, defaults.sampling.top_p);
  EXPECT_EQ(request->sampling.top_k, defaults.sampling.top_k);
  EXPECT_EQ(request->sampling.min_p, defaults.sampling.min_p);
  EXPECT_EQ(request->sampling.repetition_penalty, defaults.sampling.repetition_penalty);
  EXPECT_FALSE(request->sampling.seed.has_value());
  EXPECT_FALSE(request->stopping.max_tokens.has_value());
  EXPECT_FALSE(request->return_logprobs);
}

TEST(RequestConversionTest, CopiesEverySetField) {
  v1::GenerateRequest proto = ValidRequest();
  proto.set_request_id("r1");
  proto.set_priority(-3);
  proto.set_top_logprobs(5);
  v1::SamplingParams& s = *proto.mutable_sampling();
  s.set_temperature(0.0f);  // greedy: 0 must survive, not read as "unset"
  s.set_top_p(0.5f);
  s.set_top_k(7);
  s.set_min_p(0.1f);
  s.set_seed(42);
  s.set_repetition_penalty(1.2f);
  s.set_presence_penalty(-2.0f);
  s.set_frequency_penalty(2.0f);
  v1::StoppingCriteria& t = *proto.mutable_stopping();
  t.set_max_tokens(9);
  t.set_min_tokens(3);
  t.add_stop("END");
  t.add_stop_token_ids(255);
  t.set_ignore_eos(true);
  t.set_include_stop_str_in_output(true);
  absl::StatusOr<Request> r = ToEngineRequest(proto, kLimits, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id, "r1");
  EXPECT_EQ(r->priority, -3);
  EXPECT_EQ(r->top_logprobs, 5);
  EXPECT_TRUE(r->return_logprobs);  // implied by top_logprobs
  EXPECT_EQ(r->sampling.temperature, 0.0f);
  EXPECT_EQ(r->sampling.top_p, 0.5f);
  EXPECT_EQ(r->sampling.top_k, 7);
  EXPECT_EQ(r->sampling.min_p, 0.1f);
  EXPECT_EQ(r->sampling.seed, 42u);
  EXPECT_EQ(r->sampling.repetition_penalty, 1.2f);
  EXPECT_EQ(r->sampling.presence_penalty, -2.0f);
  EXPECT_EQ(r->sampling.frequency_penalty, 2.0f);
  EXPECT_EQ(r->stopping.max_tokens, 9);
  EXPECT_EQ(r->stopping.min_tokens, 3);
  EXPECT_EQ(r->stopping.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r->stopping.stop_token_ids, std::vector<int32_t>{255});
  EXPECT_TRUE(r->stopping.ignore_eos);
  EXPECT_TRUE(r->stopping.include_stop_str_in_output);
}

struct InvalidCase {
  std::string name;
  std::function<void(v1::GenerateRequest&)> edit;
  std::string field;  // must appear in the message
};

class InvalidRequestTest : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidRequestTest, IsInvalidArgumentNamingTheField) {
  v1::GenerateRequest proto = ValidRequest();
  GetParam().edit(proto);
  absl::StatusOr<Request> r = ToEngineRequest(proto, kLimits, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(GetParam().field));
}

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

INSTANTIATE_TEST_SUITE_P(
    EveryRule, InvalidRequestTest,
    ::testing::Values(
        InvalidCase{"NoPrompt", [](auto& r) { r.clear_prompt(); }, "prompt"},
        InvalidCase{"EmptyTokenIds", [](auto& r) { r.mutable_token_ids()->clear_ids(); },
                    "token_ids"},
        InvalidCase{"EmptyText", [](auto& r) { r.set_text(""); }, "text"},
        InvalidCase{"IdAtVocab", [](auto& r) { r.mutable_token_ids()->add_ids(256); },
                    "token_ids[2]"},
        InvalidCase{"PromptAtContext",
                    [](auto& r) {
                      for (int i = 0; i < 62; ++i) r.mutable_token_ids()->add_ids(3);
                    },
                    "token_ids"},
        InvalidCase{"MinTokensOverContext",
                    [](auto& r) { r.mutable_stopping()->set_min_tokens(63); }, "min_tokens"},
        InvalidCase{"MaxTokensZero", [](auto& r) { r.mutable_stopping()->set_max_tokens(0); },
                    "max_tokens"},
        InvalidCase{"NegativeTemperature",
                    [](auto& r) { r.mutable_sampling()->set_temperature(-0.1f); }, "temperature"},
        InvalidCase{"NanTemperature", [](auto& r) { r.mutable_sampling()->set_temperature(kNan); },
                    "temperature"},
        InvalidCase{"TopPZero", [](auto& r) { r.mutable_sampling()->set_top_p(0.0f); }, "top_p"},
        InvalidCase{"TopPAboveOne", [](auto& r) { r.mutable_sampling()->set_top_p(1.01f); },
                    "top_p"},
        InvalidCase{"TopPInf", [](auto& r) { r.mutable_sampling()->set_top_p(kInf); }, "top_p"},
        InvalidCase{"NegativeTopK", [](auto& r) { r.mutable_sampling()->set_top_k(-1); }, "top_k"},
        InvalidCase{"MinPAboveOne", [](auto& r) { r.mutable_sampling()->set_min_p(1.5f); },
                    "min_p"},
        InvalidCase{"NegativeMinP", [](auto& r) { r.mutable_sampling()->set_min_p(-0.5f); },
                    "min_p"},
        InvalidCase{"ZeroRepetitionPenalty",
                    [](auto& r) { r.mutable_sampling()->set_repetition_penalty(0.0f); },
                    "repetition_penalty"},
        InvalidCase{"InfRepetitionPenalty",
                    [](auto& r) { r.mutable_sampling()->set_repetition_penalty(kInf); },
                    "repetition_penalty"},
        InvalidCase{"PresenceBelowRange",
                    [](auto& r) { r.mutable_sampling()->set_presence_penalty(-2.01f); },
                    "presence_penalty"},
        InvalidCase{"FrequencyAboveRange",
                    [](auto& r) { r.mutable_sampling()->set_frequency_penalty(2.5f); },
                    "frequency_penalty"},
        InvalidCase{"FrequencyNan",
                    [](auto& r) { r.mutable_sampling()->set_frequency_penalty(-kNan); },
                    "frequency_penalty"},
        InvalidCase{"TopLogprobsOver20", [](auto& r) { r.set_top_logprobs(21); }, "top_logprobs"},
        InvalidCase{"EmptyStopString",
                    [](auto& r) {
                      r.mutable_stopping()->add_stop("ok");
                      r.mutable_stopping()->add_stop("");
                    },
                    "stop[1]"},
        InvalidCase{"StopTokenAtVocab",
                    [](auto& r) { r.mutable_stopping()->add_stop_token_ids(256); },
                    "stop_token_ids[0]"}),
    [](const ::testing::TestParamInfo<InvalidCase>& info) { return info.param.name; });

TEST(RequestConversionTest, BoundaryValuesAreAccepted) {
  v1::GenerateRequest proto = ValidRequest();
  proto.mutable_sampling()->set_top_p(1.0f);
  proto.mutable_sampling()->set_min_p(1.0f);
  proto.mutable_sampling()->set_presence_penalty(2.0f);
  proto.set_top_logprobs(20);
  proto.mutable_token_ids()->add_ids(255);       // the last id of the vocabulary
  proto.mutable_stopping()->set_min_tokens(61);  // 3 + 61 == the context limit
  EXPECT_TRUE(ToEngineRequest(proto, kLimits, nullptr).ok());
}

TEST(RequestConversionTest, HugeMaxTokensIsClampedNotWrapped) {
  v1::GenerateRequest proto = ValidRequest();
  proto.mutable_stopping()->set_max_tokens(std::numeric_limits<uint32_t>::max());
  absl::StatusOr<Request> r = ToEngineRequest(proto, kLimits, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stopping.max_tokens, std::numeric_limits<int32_t>::max());
}

TEST(RequestConversionTest, TextWithoutTokenizerIsFailedPreconditionNamingText) {
  v1::GenerateRequest proto;
  proto.set_text("hello");
  absl::StatusOr<Request> r = ToEngineRequest(proto, kLimits, nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("text"));
}

TEST(RequestConversionTest, DetokenizeRefusesIdsAtVocab) {
  v1::DetokenizeRequest proto;
  proto.add_ids(0);
  proto.add_ids(255);
  absl::StatusOr<std::vector<int32_t>> ids = DetokenizeIds(proto, 256);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{0, 255}));
  proto.add_ids(256);
  ids = DetokenizeIds(proto, 256);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("ids[2]"));
}

// Found by tests/fuzz/request_conversion_fuzz: with a vocabulary size over 2^31 (a corrupt
// config), ids of 2^31 and more passed the check and became negative int32 ids.
TEST(RequestConversionTest, IdsThatDoNotFitInt32AreRefusedWhateverTheVocabSize) {
  constexpr int64_t kHugeVocab = int64_t{1} << 33;
  v1::DetokenizeRequest detokenize;
  detokenize.add_ids(0x80000000u);
  absl::StatusOr<std::vector<int32_t>> ids = DetokenizeIds(detokenize, kHugeVocab);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("ids[0]"));

  v1::GenerateRequest generate;
  generate.mutable_token_ids()->add_ids(0xFFFFFFFFu);
  absl::StatusOr<Request> r =
      ToEngineRequest(generate, {.vocab_size = kHugeVocab, .max_context_tokens = 64}, nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("token_ids[0]"));
}

}  // namespace
}  // namespace mlaserve
