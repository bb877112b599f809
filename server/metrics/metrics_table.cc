#include "server/metrics/metrics_table.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mlaserve {
namespace {

using L = std::string_view;
using MI = MetricId;
constexpr MetricType kCounter = MetricType::kCounter;
constexpr MetricType kGauge = MetricType::kGauge;
constexpr MetricType kHistogram = MetricType::kHistogram;

constexpr L kFinishedReason[] = {"finished_reason"};
constexpr L kFinishedReasons[] = {"stop", "length", "abort"};
constexpr L kCode[] = {"code"};
// The contract's codes, then additions: unauthenticated (--auth_token_file).
constexpr L kCodes[] = {"invalid_argument", "already_exists",    "resource_exhausted",
                        "unavailable",      "deadline_exceeded", "cancelled",
                        "internal",         "unauthenticated"};
constexpr L kPhase[] = {"phase"};
constexpr L kPhases[] = {"prefill", "decode", "mixed"};
constexpr L kBatchSize[] = {"batch_size"};
constexpr L kCacheConfig[] = {"block_size", "num_blocks"};

constexpr L kVllmWaiting[] = {"vllm:num_requests_waiting"};
constexpr L kVllmRunning[] = {"vllm:num_requests_running"};
constexpr L kVllmKvUsage[] = {"vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"};
constexpr L kVllmCacheConfig[] = {"vllm:cache_config_info"};

// Serving latencies: a cached prompt's first token in a millisecond up to a long prompt queued
// behind others for a minute.
constexpr double kTtftBuckets[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
                                   0.5,   0.75,   1,     2.5,  5,    7.5,  10,   20,   40,  60};
// A graph-replayed decode step of a small batch up to a step stalled behind a long prefill.
constexpr double kInterTokenBuckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075,
                                         0.01,   0.015,   0.02,   0.03,  0.04,   0.05,  0.075,
                                         0.1,    0.15,    0.2,    0.3,   0.5,    1,     2.5,  5};
constexpr double kRequestBuckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,  1,    2.5,
                                      5,     10,   20,    40,   60,  120,  300,  600,  1800};
constexpr double kStepBuckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                   0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
constexpr double kTokenBuckets[] = {1,    2,    4,    8,     16,    32,    64,    128,   256,
                                    512,  1024, 2048, 4096,  8192,  16384, 32768, 65536, 131072};

constexpr std::array<MetricSpec, kNumMetrics> kTable = {{
    {MI::kNumRequestsRunning, "mlaserve_num_requests_running", kGauge,
     "Requests holding KV cache blocks (being prefilled or decoded).", {}, {}, {}, kVllmRunning},
    {MI::kNumRequestsWaiting, "mlaserve_num_requests_waiting", kGauge,
     "Requests queued for admission or preempted, waiting to run.", {}, {}, {}, kVllmWaiting},
    {MI::kKvCacheUsagePerc, "mlaserve_kv_cache_usage_perc", kGauge,
     "Fraction (0..1) of KV cache blocks referenced by live sequences.", {}, {}, {}, kVllmKvUsage},
    {MI::kKvCacheBlocksTotal, "mlaserve_kv_cache_blocks_total", kGauge,
     "KV cache blocks that can be handed out.", {}, {}, {}, {}},
    {MI::kKvCacheBlocksFree, "mlaserve_kv_cache_blocks_free", kGauge,
     "KV cache blocks no live sequence references (unreferenced prefix-cache blocks included).",
     {}, {}, {}, {}},
    {MI::kCacheConfigInfo, "mlaserve_cache_config_info", kGauge,
     "KV cache configuration, in labels; the value is always 1.", kCacheConfig, {}, {},
     kVllmCacheConfig},
    {MI::kEngineLastStepAgeSeconds, "mlaserve_engine_last_step_age_seconds", kGauge,
     "Seconds since the engine last finished a step (since it was loaded, before the first).",
     {}, {}, {}, {}},
    {MI::kDraining, "mlaserve_draining", kGauge,
     "1 while the server drains (refuses new requests, finishes running ones), else 0.", {}, {},
     {}, {}},
    {MI::kWeightBytes, "mlaserve_weight_bytes", kGauge, "Bytes of model weights.", {}, {}, {},
     {}},
    {MI::kKvCacheBytes, "mlaserve_kv_cache_bytes", kGauge, "Bytes of the KV cache.", {}, {}, {},
     {}},
    {MI::kGraphMemoryBytes, "mlaserve_graph_memory_bytes", kGauge,
     "Bytes the captured decode graphs own (on the CPU, their recorded op lists).", {}, {}, {},
     {}},
    {MI::kPromptTokensTotal, "mlaserve_prompt_tokens_total", kCounter,
     "Prompt tokens of admitted requests.", {}, {}, {}, {}},
    {MI::kGenerationTokensTotal, "mlaserve_generation_tokens_total", kCounter,
     "Generated tokens sent to clients.", {}, {}, {}, {}},
    {MI::kRequestSuccessTotal, "mlaserve_request_success_total", kCounter,
     "Generate calls that ended with a Complete message, by finish reason.", kFinishedReason,
     kFinishedReasons, {}, {}},
    {MI::kRequestFailureTotal, "mlaserve_request_failure_total", kCounter,
     "Generate calls that ended with an error status, by gRPC code.", kCode, kCodes, {}, {}},
    {MI::kNumPreemptionsTotal, "mlaserve_num_preemptions_total", kCounter,
     "Running sequences preempted for KV cache space (recomputed later).", {}, {}, {}, {}},
    {MI::kPrefixCacheQueriesTotal, "mlaserve_prefix_cache_queries_total", kCounter,
     "Prompt tokens looked up in the prefix cache.", {}, {}, {}, {}},
    {MI::kPrefixCacheHitsTotal, "mlaserve_prefix_cache_hits_total", kCounter,
     "Prompt tokens served from the prefix cache.", {}, {}, {}, {}},
    {MI::kGraphReplaysTotal, "mlaserve_graph_replays_total", kCounter,
     "Decode steps replayed from a captured graph, by graph batch size.", kBatchSize, {}, {}, {}},
    {MI::kEagerStepsTotal, "mlaserve_eager_steps_total", kCounter,
     "Steps run eagerly (no captured graph), by phase.", kPhase, kPhases, {}, {}},
    {MI::kEngineStepsTotal, "mlaserve_engine_steps_total", kCounter,
     "Engine steps that ran the model.", {}, {}, {}, {}},
    {MI::kCpuDecodePrefetchSwitchesTotal, "mlaserve_cpu_decode_prefetch_switches_total",
     kCounter,
     "Changes of the CPU decode GEMMs' weight prefetch by the tuner that keeps it under test on "
     "the decode steps (0 on other backends).",
     {}, {}, {}, {}},
    {MI::kTimeToFirstTokenSeconds, "mlaserve_time_to_first_token_seconds", kHistogram,
     "Seconds from a request's arrival at the server to its first token.", {}, {}, kTtftBuckets,
     {}},
    {MI::kInterTokenLatencySeconds, "mlaserve_inter_token_latency_seconds", kHistogram,
     "Seconds between consecutive tokens of a request.", {}, {}, kInterTokenBuckets, {}},
    {MI::kE2eRequestLatencySeconds, "mlaserve_e2e_request_latency_seconds", kHistogram,
     "Seconds from a request's arrival to its Complete.", {}, {}, kRequestBuckets, {}},
    {MI::kRequestQueueTimeSeconds, "mlaserve_request_queue_time_seconds", kHistogram,
     "Seconds from a request's arrival to its first scheduled step.", {}, {}, kRequestBuckets,
     {}},
    {MI::kEngineStepSeconds, "mlaserve_engine_step_seconds", kHistogram,
     "Seconds per engine step (model forward and sampling), by phase.", kPhase, kPhases,
     kStepBuckets, {}},
    {MI::kIterationTokens, "mlaserve_iteration_tokens", kHistogram,
     "Tokens computed per engine step (prompt chunks plus decodes).", {}, {}, kTokenBuckets, {}},
    {MI::kRequestPromptTokens, "mlaserve_request_prompt_tokens", kHistogram,
     "Prompt tokens per admitted request.", {}, {}, kTokenBuckets, {}},
    {MI::kRequestGenerationTokens, "mlaserve_request_generation_tokens", kHistogram,
     "Generated tokens per completed request.", {}, {}, kTokenBuckets, {}},
}};

constexpr bool TableIsInIdOrder() {
  for (size_t i = 0; i < kTable.size(); ++i) {
    if (static_cast<size_t>(kTable[i].id) != i) return false;
  }
  return true;
}
static_assert(TableIsInIdOrder(), "kTable must list the metrics in MetricId order");

}  // namespace

const std::array<MetricSpec, kNumMetrics>& MetricsTable() { return kTable; }

const MetricSpec& Spec(MetricId id) { return kTable[static_cast<size_t>(id)]; }

absl::StatusOr<std::vector<double>> ParseBuckets(std::string_view flag, const std::string& text) {
  std::vector<double> bounds;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    double bound = 0;
    if (!absl::SimpleAtod(part, &bound) || !std::isfinite(bound) || bound <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", std::string(flag), ": \"",
                                                     std::string(part),
                                                     "\" is not a positive number of seconds"));
    }
    if (!bounds.empty() && bound <= bounds.back()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", std::string(flag), ": bounds must be strictly ascending"));
    }
    bounds.push_back(bound);
  }
  return bounds;
}

}  // namespace mlaserve
