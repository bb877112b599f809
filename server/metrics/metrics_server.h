// MetricsServer: HTTP GET /metrics in the Prometheus text format, served by prometheus-cpp's
// embedded web server on threads of its own.
//
// Thread-safety: port() may be called from any thread; destruction stops serving.
#ifndef MLASERVE_SERVER_METRICS_METRICS_SERVER_H_
#define MLASERVE_SERVER_METRICS_METRICS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace mlaserve {

class MetricsServer {
 public:
  // Serves `collectable` (while it lives) at http://host:port/metrics; `host` is an IPv4
  // address (Debian's embedded server is built without IPv6), port 0: any free port.
  // Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& host, int port, std::weak_ptr<prometheus::Collectable> collectable);

  int port() const { return port_; }

 private:
  MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, int port);

  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_METRICS_METRICS_SERVER_H_
