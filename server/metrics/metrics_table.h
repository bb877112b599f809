// The table of every Prometheus metric the server exports (contracts/metrics.md): name, type,
// help, labels, and for histograms their buckets. server/metrics/metrics.cc creates the metrics from it
// and nothing else names them; docs/metrics.md describes them.
#ifndef MLASERVE_SERVER_METRICS_METRICS_TABLE_H_
#define MLASERVE_SERVER_METRICS_METRICS_TABLE_H_

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mlaserve {

enum class MetricType { kCounter, kGauge, kHistogram };

// Index of each metric in MetricsTable(), in table order.
enum class MetricId {
  kNumRequestsRunning,
  kNumRequestsWaiting,
  kKvCacheUsagePerc,
  kKvCacheBlocksTotal,
  kKvCacheBlocksFree,
  kCacheConfigInfo,
  kEngineLastStepAgeSeconds,
  kDraining,
  kWeightBytes,
  kKvCacheBytes,
  kGraphMemoryBytes,
  kPromptTokensTotal,
  kGenerationTokensTotal,
  kRequestSuccessTotal,
  kRequestFailureTotal,
  kNumPreemptionsTotal,
  kPrefixCacheQueriesTotal,
  kPrefixCacheHitsTotal,
  kGraphReplaysTotal,
  kEagerStepsTotal,
  kEngineStepsTotal,
  kCpuDecodePrefetchSwitchesTotal,
  kTimeToFirstTokenSeconds,
  kInterTokenLatencySeconds,
  kE2eRequestLatencySeconds,
  kRequestQueueTimeSeconds,
  kEngineStepSeconds,
  kIterationTokens,
  kRequestPromptTokens,
  kRequestGenerationTokens,
};
inline constexpr size_t kNumMetrics = static_cast<size_t>(MetricId::kRequestGenerationTokens) + 1;

struct MetricSpec {
  MetricId id;
  std::string_view name;
  MetricType type;
  std::string_view help;
  // Label names. A metric with exactly one label and `label_values` has one series per value,
  // created at 0 with the metric; other labelled metrics get their series from the server
  // (cache_config_info from the engine's configuration, graph_replays per captured bucket).
  std::span<const std::string_view> labels;
  std::span<const std::string_view> label_values;
  std::span<const double> buckets;  // histograms: default upper bounds, ascending
  // The same gauge under vLLM's names (exported with MetricsOptions::vllm_names), for routers
  // that speak the Gateway API Inference Extension's model-server protocol.
  std::span<const std::string_view> vllm_names;
};

// Every metric, indexed by MetricId.
const std::array<MetricSpec, kNumMetrics>& MetricsTable();
const MetricSpec& Spec(MetricId id);

// Parses a --metrics_*_buckets flag: comma-separated, strictly ascending, finite, positive
// upper bounds ("" is an error). InvalidArgument names `flag`.
absl::StatusOr<std::vector<double>> ParseBuckets(std::string_view flag, const std::string& text);

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_METRICS_METRICS_TABLE_H_
