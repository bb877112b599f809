// The one mapping between absl::Status (engine and validation) and grpc::Status (the wire).
// Both use the canonical code space, so codes map one to one and messages pass unchanged.
//
// Thread-safety: pure functions.
#ifndef MLASERVE_SERVER_GRPC_STATUS_CONVERSION_H_
#define MLASERVE_SERVER_GRPC_STATUS_CONVERSION_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace mlaserve {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// Lower-case snake name of a code, as metrics label it ("invalid_argument", "cancelled").
std::string StatusCodeLabel(absl::StatusCode code);

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_GRPC_STATUS_CONVERSION_H_
