// The metrics table: every name of contracts/metrics.md exactly once (and the additions),
// well-formed specs, and the bucket flag parser.
#include "server/metrics/metrics_table.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(MetricsTableTest, HoldsEveryContractMetricOnce) {
  const std::set<std::string> contract = {
      "mlaserve_num_requests_running", "mlaserve_num_requests_waiting",
      "mlaserve_kv_cache_usage_perc", "mlaserve_kv_cache_blocks_total",
      "mlaserve_kv_cache_blocks_free", "mlaserve_cache_config_info",
      "mlaserve_engine_last_step_age_seconds", "mlaserve_draining", "mlaserve_weight_bytes",
      "mlaserve_kv_cache_bytes", "mlaserve_graph_memory_bytes", "mlaserve_prompt_tokens_total",
      "mlaserve_generation_tokens_total", "mlaserve_request_success_total",
      "mlaserve_request_failure_total", "mlaserve_num_preemptions_total",
      "mlaserve_prefix_cache_queries_total", "mlaserve_prefix_cache_hits_total",
      "mlaserve_graph_replays_total", "mlaserve_eager_steps_total", "mlaserve_engine_steps_total",
      "mlaserve_time_to_first_token_seconds", "mlaserve_inter_token_latency_seconds",
      "mlaserve_e2e_request_latency_seconds", "mlaserve_request_queue_time_seconds",
      "mlaserve_engine_step_seconds", "mlaserve_iteration_tokens",
      "mlaserve_request_prompt_tokens", "mlaserve_request_generation_tokens"};
  // Added to the contract's names (docs/metrics.md).
  const std::set<std::string> added = {"mlaserve_cpu_decode_prefetch_switches_total"};
  std::set<std::string> names;
  for (const MetricSpec& spec : MetricsTable()) {
    EXPECT_TRUE(names.insert(std::string(spec.name)).second) << spec.name;
  }
  std::set<std::string> expected = contract;
  expected.insert(added.begin(), added.end());
  EXPECT_EQ(names, expected);
}

TEST(MetricsTableTest, SpecsAreWellFormed) {
  for (size_t i = 0; i < MetricsTable().size(); ++i) {
    const MetricSpec& spec = MetricsTable()[i];
    SCOPED_TRACE(spec.name);
    EXPECT_EQ(static_cast<size_t>(spec.id), i);
    EXPECT_EQ(&Spec(spec.id), &spec);
    EXPECT_FALSE(spec.help.empty());
    if (spec.type == MetricType::kCounter) {
      EXPECT_TRUE(spec.name.ends_with("_total"));
    }
    EXPECT_EQ(spec.type == MetricType::kHistogram, !spec.buckets.empty());
    for (size_t b = 1; b < spec.buckets.size(); ++b) EXPECT_LT(spec.buckets[b - 1], spec.buckets[b]);
    if (!spec.label_values.empty()) {
      EXPECT_EQ(spec.labels.size(), 1u);
    }
    if (!spec.vllm_names.empty()) {
      EXPECT_EQ(spec.type, MetricType::kGauge);
    }
  }
}

TEST(MetricsTableTest, LatencyBucketsSpanLlmServing) {
  const auto& ttft = Spec(MetricId::kTimeToFirstTokenSeconds).buckets;
  EXPECT_EQ(ttft.front(), 0.001);
  EXPECT_EQ(ttft.back(), 60);
  const auto& itl = Spec(MetricId::kInterTokenLatencySeconds).buckets;
  EXPECT_EQ(itl.front(), 0.0001);
  EXPECT_EQ(itl.back(), 5);
}

TEST(MetricsTableTest, LabelValuesFollowTheContract) {
  EXPECT_THAT(Spec(MetricId::kRequestSuccessTotal).label_values,
              ElementsAre("stop", "length", "abort"));
  EXPECT_THAT(Spec(MetricId::kRequestFailureTotal).label_values,
              ElementsAre("invalid_argument", "already_exists", "resource_exhausted",
                          "unavailable", "deadline_exceeded", "cancelled", "internal",
                          "unauthenticated"));
  EXPECT_THAT(Spec(MetricId::kEagerStepsTotal).label_values,
              ElementsAre("prefill", "decode", "mixed"));
  EXPECT_THAT(Spec(MetricId::kKvCacheUsagePerc).vllm_names,
              ElementsAre("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"));
}

TEST(ParseBucketsTest, AcceptsAscendingPositiveBounds) {
  absl::StatusOr<std::vector<double>> buckets = ParseBuckets("metrics_ttft_buckets", "0.01,0.5,2");
  ASSERT_TRUE(buckets.ok()) << buckets.status();
  EXPECT_THAT(*buckets, ElementsAre(0.01, 0.5, 2));
}

TEST(ParseBucketsTest, RefusesBadListsNamingTheFlag) {
  for (const char* text : {"", "0.1,x", "0.5,0.1", "0.1,0.1", "-1", "0", "inf"}) {
    absl::StatusOr<std::vector<double>> buckets = ParseBuckets("metrics_ttft_buckets", text);
    EXPECT_EQ(buckets.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(buckets.status().message(), HasSubstr("--metrics_ttft_buckets")) << text;
  }
}

}  // namespace
}  // namespace mlaserve
