#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/common/log.h"
#include "server/grpc/status_conversion.h"

namespace mlaserve {
namespace {

TEST(LogTest, TextLineQuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(FormatLogLine(LogFormat::kText, "T", "request_failed",
                          {{"request_id", std::string("r1")},
                           {"message", std::string("top_p: 2 is outside (0, 1]")},
                           {"tokens", int64_t{3}},
                           {"ok", false}}),
            "T request_failed request_id=r1 message=\"top_p: 2 is outside (0, 1]\" tokens=3 "
            "ok=false");
}

TEST(LogTest, JsonLineIsOneParsableObject) {
  const std::string line =
      FormatLogLine(LogFormat::kJson, "T", "health",
                    {{"status", std::string("NOT\nSERVING")}, {"seconds", 1.5}, {"ready", true}});
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const nlohmann::json parsed = nlohmann::json::parse(line);
  EXPECT_EQ(parsed["ts"], "T");
  EXPECT_EQ(parsed["event"], "health");
  EXPECT_EQ(parsed["status"], "NOT\nSERVING");
  EXPECT_EQ(parsed["seconds"], 1.5);
  EXPECT_EQ(parsed["ready"], true);
}

TEST(LogTest, ParseLogFormatNamesTheFlag) {
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_THAT(std::string(ParseLogFormat("xml").status().message()),
              ::testing::HasSubstr("--log_format"));
}

TEST(StatusConversionTest, CodesAndMessagesSurviveBothWays) {
  for (const absl::Status& s :
       {absl::InvalidArgumentError("top_p: bad"), absl::AlreadyExistsError("request_id: dup"),
        absl::ResourceExhaustedError("queue"), absl::UnavailableError("draining"),
        absl::DeadlineExceededError("late"), absl::CancelledError("gone")}) {
    const grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), static_cast<int>(s.code()));
    EXPECT_EQ(g.error_message(), s.message());
    EXPECT_EQ(FromGrpcStatus(g), s);
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(StatusConversionTest, LabelsMatchTheMetricsContract) {
  EXPECT_EQ(StatusCodeLabel(absl::StatusCode::kInvalidArgument), "invalid_argument");
  EXPECT_EQ(StatusCodeLabel(absl::StatusCode::kDeadlineExceeded), "deadline_exceeded");
  EXPECT_EQ(StatusCodeLabel(absl::StatusCode::kResourceExhausted), "resource_exhausted");
  EXPECT_EQ(StatusCodeLabel(absl::StatusCode::kCancelled), "cancelled");
}

}  // namespace
}  // namespace mlaserve
