#include "server/cli/metrics_flags.h"

#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "engine/status_macros.h"

ABSL_FLAG(int, metrics_port, 9400,
          "Prometheus metrics at GET /metrics on this port (0 = metrics off)");
ABSL_FLAG(std::string, metrics_host, "0.0.0.0", "metrics bind address (IPv4)");
ABSL_FLAG(std::string, metrics_ttft_buckets, "",
          "time-to-first-token histogram bounds, comma-separated seconds (\"\" = 1 ms .. 60 s)");
ABSL_FLAG(std::string, metrics_inter_token_buckets, "",
          "inter-token latency histogram bounds, comma-separated seconds (\"\" = 0.1 ms .. 5 s)");
ABSL_FLAG(bool, metrics_vllm_names, false,
          "also export the gauges routers read under vLLM's names (vllm:num_requests_waiting, "
          "...) for the Gateway API Inference Extension's endpoint picker");

namespace mlaserve {
namespace {

absl::StatusOr<std::vector<double>> BucketsFlag(const absl::Flag<std::string>& flag,
                                                const char* name) {
  const std::string text = absl::GetFlag(flag);
  if (text.empty()) return std::vector<double>{};
  return ParseBuckets(name, text);
}

}  // namespace

absl::StatusOr<MetricsFromFlags> StartMetricsFromFlags() {
  const int port = absl::GetFlag(FLAGS_metrics_port);
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError("--metrics_port: must be in [0, 65535]");
  }
  MetricsOptions options;
  ASSIGN_OR_RETURN(options.ttft_buckets,
                   BucketsFlag(FLAGS_metrics_ttft_buckets, "metrics_ttft_buckets"));
  ASSIGN_OR_RETURN(options.inter_token_buckets,
                   BucketsFlag(FLAGS_metrics_inter_token_buckets, "metrics_inter_token_buckets"));
  options.vllm_names = absl::GetFlag(FLAGS_metrics_vllm_names);
  MetricsFromFlags result;
  if (port == 0) return result;
  result.metrics = std::make_shared<Metrics>(options);
  ASSIGN_OR_RETURN(result.server,
                   MetricsServer::Start(absl::GetFlag(FLAGS_metrics_host), port, result.metrics));
  return result;
}

}  // namespace mlaserve
