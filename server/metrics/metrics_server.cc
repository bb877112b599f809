#include "server/metrics/metrics_server.h"

#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mlaserve {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& host, int port, std::weak_ptr<prometheus::Collectable> collectable) {
  const std::string address = absl::StrCat(host, ":", port);
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("--metrics_port: cannot serve metrics on ", address, ": ", e.what()));
  }
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(absl::StrCat("--metrics_port: nothing listens on ", address));
  }
  exposer->RegisterCollectable(collectable);
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(exposer), ports[0]));
}

MetricsServer::MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, int port)
    : exposer_(std::move(exposer)), port_(port) {}

}  // namespace mlaserve
