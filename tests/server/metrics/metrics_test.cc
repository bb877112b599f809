// Metrics on the real engine (tiny checkpoint) behind a real gRPC server, read back by scraping
// GET /metrics over HTTP: after a known workload every counter equals the known token, request
// and step counts, and the gauges are back to idle.
#include "server/metrics/metrics.h"

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_stream_tuning.h"
#include "server/metrics/metrics_server.h"
#include "tests/kernels/online_tuning_feed.h"
#include "tests/server/scrape_util.h"
#include "tests/server/server_test_util.h"

namespace mlaserve::testing {
namespace {

using Samples = std::map<std::string, double>;

// Sum over every series of `name` (all label values); histograms: name_count etc.
double Total(const Samples& samples, const std::string& name) {
  double total = 0;
  for (const auto& [series, value] : samples) {
    if (series == name || series.starts_with(name + "{")) total += value;
  }
  return total;
}

double At(const Samples& samples, const std::string& series) {
  auto it = samples.find(series);
  EXPECT_NE(it, samples.end()) << series;
  return it == samples.end() ? -1 : it->second;
}

class MetricsTest : public ::testing::Test {
 protected:
  void Start(const MetricsOptions& options = {}) {
    metrics_ = std::make_shared<Metrics>(options);
    RealEngineOptions engine_options;
    engine_options.on_step = [m = metrics_.get()](const StepObservation& step) { m->OnStep(step); };
    absl::StatusOr<std::shared_ptr<ServingEngine>> engine = MakeRealEngine(engine_options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *engine;
    metrics_->SetEngine(engine_);
    absl::StatusOr<std::unique_ptr<MetricsServer>> http =
        MetricsServer::Start("127.0.0.1", 0, metrics_);
    ASSERT_TRUE(http.ok()) << http.status();
    http_ = *std::move(http);
    InferenceServerOptions server_options;
    server_options.observer = metrics_.get();
    server_ = StartTestServer(engine_, server_options);
    ASSERT_NE(server_, nullptr);
  }

  Samples ScrapeOrDie() {
    absl::StatusOr<Samples> samples = Scrape(http_->port());
    EXPECT_TRUE(samples.ok()) << samples.status();
    return samples.ok() ? *samples : Samples{};
  }

  // Destroyed in reverse: the server and the engine (whose steps call the metrics) first.
  std::shared_ptr<Metrics> metrics_;
  std::unique_ptr<MetricsServer> http_;
  std::shared_ptr<ServingEngine> engine_;
  std::unique_ptr<TestServer> server_;
};

TEST_F(MetricsTest, StartsAtZeroWithEveryLabelValue) {
  Start();
  const Samples s = ScrapeOrDie();
  for (const char* reason : {"stop", "length", "abort"}) {
    EXPECT_EQ(At(s, absl::StrCat("mlaserve_request_success_total{finished_reason=\"", reason,
                                 "\"}")),
              0);
  }
  for (const char* code : {"invalid_argument", "already_exists", "resource_exhausted",
                           "unavailable", "deadline_exceeded", "cancelled", "internal",
                           "unauthenticated"}) {
    EXPECT_EQ(At(s, absl::StrCat("mlaserve_request_failure_total{code=\"", code, "\"}")), 0);
  }
  for (const char* phase : {"prefill", "decode", "mixed"}) {
    EXPECT_EQ(At(s, absl::StrCat("mlaserve_eager_steps_total{phase=\"", phase, "\"}")), 0);
  }
  for (const char* size : {"1", "2", "4", "8"}) {
    EXPECT_EQ(At(s, absl::StrCat("mlaserve_graph_replays_total{batch_size=\"", size, "\"}")), 0);
  }
  EXPECT_EQ(At(s, "mlaserve_cache_config_info{block_size=\"16\",num_blocks=\"1024\"}"), 1);
  EXPECT_EQ(At(s, "mlaserve_kv_cache_blocks_total"), 1024);
  EXPECT_EQ(At(s, "mlaserve_kv_cache_blocks_free"), 1024);
  EXPECT_GT(At(s, "mlaserve_weight_bytes"), 0);
  EXPECT_GT(At(s, "mlaserve_kv_cache_bytes"), 0);
  EXPECT_GE(At(s, "mlaserve_engine_last_step_age_seconds"), 0);
  EXPECT_EQ(At(s, "mlaserve_draining"), 0);
  EXPECT_EQ(s.count("vllm:num_requests_waiting"), 0u);
}

TEST_F(MetricsTest, CountersEqualTheWorkloadAndGaugesReturnToIdle) {
  Start();
  // Prompts shorter than a KV block share no cached prefix, so every prompt token is computed.
  const std::vector<std::vector<uint32_t>> prompts = {
      {1, 2, 3, 4, 5}, {10, 11, 12, 13, 14, 15, 16, 17, 18}, {20, 21, 22}, {30, 31, 32, 33, 34, 35, 36}};
  const std::vector<uint32_t> max_tokens = {4, 7, 2, 6};
  std::vector<GenerateResult> results(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      results[i] = RunGenerate(*server_->inference, GreedyRequest(prompts[i], max_tokens[i]));
    });
  }
  for (std::thread& t : clients) t.join();
  double prompt_tokens = 0, generated = 0, inter_token = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(results[i].status.ok()) << results[i].status.error_message();
    ASSERT_EQ(results[i].token_ids.size(), max_tokens[i]);
    prompt_tokens += static_cast<double>(prompts[i].size());
    generated += max_tokens[i];
    inter_token += max_tokens[i] - 1;
  }
  // One refused call.
  EXPECT_EQ(RunGenerate(*server_->inference, GreedyRequest({}, 3)).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  const double n = static_cast<double>(prompts.size());
  ASSERT_TRUE(WaitFor([&] { return Total(ScrapeOrDie(), "mlaserve_num_requests_running") == 0; }));
  const Samples s = ScrapeOrDie();
  EXPECT_EQ(At(s, "mlaserve_prompt_tokens_total"), prompt_tokens);
  EXPECT_EQ(At(s, "mlaserve_generation_tokens_total"), generated);
  EXPECT_EQ(At(s, "mlaserve_request_success_total{finished_reason=\"length\"}"), n);
  EXPECT_EQ(At(s, "mlaserve_request_success_total{finished_reason=\"stop\"}"), 0);
  EXPECT_EQ(At(s, "mlaserve_request_failure_total{code=\"invalid_argument\"}"), 1);
  EXPECT_EQ(Total(s, "mlaserve_request_failure_total"), 1);
  EXPECT_EQ(At(s, "mlaserve_time_to_first_token_seconds_count"), n);
  EXPECT_EQ(At(s, "mlaserve_e2e_request_latency_seconds_count"), n);
  EXPECT_EQ(At(s, "mlaserve_request_queue_time_seconds_count"), n);
  EXPECT_EQ(At(s, "mlaserve_inter_token_latency_seconds_count"), inter_token);
  EXPECT_EQ(At(s, "mlaserve_request_prompt_tokens_sum"), prompt_tokens);
  EXPECT_EQ(At(s, "mlaserve_request_generation_tokens_sum"), generated);
  EXPECT_GT(At(s, "mlaserve_time_to_first_token_seconds_sum"), 0);
  EXPECT_LE(At(s, "mlaserve_time_to_first_token_seconds_sum"),
            At(s, "mlaserve_e2e_request_latency_seconds_sum"));
  // Every step is a graph replay or an eager step, and is observed once.
  const double steps = At(s, "mlaserve_engine_steps_total");
  EXPECT_GT(steps, 0);
  EXPECT_EQ(Total(s, "mlaserve_graph_replays_total") + Total(s, "mlaserve_eager_steps_total"),
            steps);
  EXPECT_GT(Total(s, "mlaserve_graph_replays_total"), 0);
  EXPECT_EQ(Total(s, "mlaserve_engine_step_seconds_count"), steps);
  EXPECT_EQ(At(s, "mlaserve_iteration_tokens_count"), steps);
  // Computed tokens: every prompt token, and every generated token but the last of each request.
  EXPECT_EQ(At(s, "mlaserve_iteration_tokens_sum"), prompt_tokens + inter_token);
  EXPECT_EQ(At(s, "mlaserve_prefix_cache_hits_total"), 0);
  EXPECT_EQ(At(s, "mlaserve_num_preemptions_total"), 0);
  // Idle again, no leaked KV block.
  EXPECT_EQ(At(s, "mlaserve_num_requests_running"), 0);
  EXPECT_EQ(At(s, "mlaserve_num_requests_waiting"), 0);
  EXPECT_EQ(At(s, "mlaserve_kv_cache_blocks_free"), At(s, "mlaserve_kv_cache_blocks_total"));
  EXPECT_EQ(At(s, "mlaserve_kv_cache_usage_perc"), 0);
}

TEST_F(MetricsTest, VllmNamesAndBucketOverrides) {
  Start({.ttft_buckets = {0.5, 2}, .inter_token_buckets = {0.25}, .vllm_names = true});
  ASSERT_TRUE(RunGenerate(*server_->inference, GreedyRequest({1, 2, 3}, 3)).status.ok());
  const Samples s = ScrapeOrDie();
  EXPECT_EQ(At(s, "vllm:num_requests_waiting"), 0);
  EXPECT_EQ(At(s, "vllm:num_requests_running"), 0);
  EXPECT_EQ(At(s, "vllm:gpu_cache_usage_perc"), 0);
  EXPECT_EQ(At(s, "vllm:kv_cache_usage_perc"), 0);
  EXPECT_EQ(At(s, "vllm:cache_config_info{block_size=\"16\",num_blocks=\"1024\"}"), 1);
  EXPECT_EQ(At(s, "mlaserve_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 1);
  EXPECT_EQ(s.count("mlaserve_time_to_first_token_seconds_bucket{le=\"0.5\"}"), 1u);
  EXPECT_EQ(s.count("mlaserve_time_to_first_token_seconds_bucket{le=\"0.001\"}"), 0u);
  EXPECT_EQ(At(s, "mlaserve_inter_token_latency_seconds_bucket{le=\"+Inf\"}"), 2);
  EXPECT_EQ(s.count("mlaserve_inter_token_latency_seconds_bucket{le=\"0.25\"}"), 1u);
  EXPECT_EQ(s.count("mlaserve_inter_token_latency_seconds_bucket{le=\"0.0001\"}"), 0u);
}

// The CPU decode prefetch tuner's changes of choice: the process-wide count, one more after the
// tuner is fed timings under which another candidate reads twice as fast.
TEST_F(MetricsTest, CountsTheDecodePrefetchTunersChanges) {
  Start();
  const double before = At(ScrapeOrDie(), "mlaserve_cpu_decode_prefetch_switches_total");
  EXPECT_EQ(before, static_cast<double>(OnlineStreamTuningSwitches()));
  SetOnlineStreamTuning(true, {4, true});  // nta:4
  test::FeedOnlineTuner(
      test::kCallsToSwitch, [](const std::string& t) { return t == "t1:2" ? 20.0 : 10.0; },
      /*until_switch=*/true);
  SetOnlineStreamTuning(false, {1, true});
  EXPECT_EQ(At(ScrapeOrDie(), "mlaserve_cpu_decode_prefetch_switches_total"), before + 1);
}

}  // namespace
}  // namespace mlaserve::testing
