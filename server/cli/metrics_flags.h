// The metrics flags of `mlaserve serve` (docs/cli.md): where GET /metrics is served and how
// the histograms are bucketed. Errors name the flag.
#ifndef MLASERVE_SERVER_CLI_METRICS_FLAGS_H_
#define MLASERVE_SERVER_CLI_METRICS_FLAGS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "server/metrics/metrics.h"
#include "server/metrics/metrics_server.h"

namespace mlaserve {

// Metrics configured by the flags, and the server exposing them; both null with
// --metrics_port=0 (metrics off: nothing is observed).
struct MetricsFromFlags {
  std::shared_ptr<Metrics> metrics;
  std::unique_ptr<MetricsServer> server;
};

// Creates the metrics and starts serving them on --metrics_host:--metrics_port.
absl::StatusOr<MetricsFromFlags> StartMetricsFromFlags();

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_CLI_METRICS_FLAGS_H_
