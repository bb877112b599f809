// BearerAuth: the optional static bearer token of `mlaserve serve --auth_token_file`. When a
// token is configured, every mlaserve.v1.Inference call must carry the metadata
// `authorization: Bearer <token>`; grpc.health.v1 stays open so that probes need no secret.
//
// Thread-safety: immutable after construction; Check may be called from any thread.
#ifndef MLASERVE_SERVER_GRPC_AUTH_H_
#define MLASERVE_SERVER_GRPC_AUTH_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace mlaserve {

class BearerAuth {
 public:
  // No token: every call is allowed.
  BearerAuth() = default;
  // `token` must not be empty.
  explicit BearerAuth(std::string token) : token_(std::move(token)) {}

  // Reads the token from `path` (surrounding whitespace, such as a trailing newline, is not
  // part of it). An empty path means no token. Errors name the flag: unreadable or empty file.
  static absl::StatusOr<BearerAuth> FromFile(const std::string& path);

  bool enabled() const { return !token_.empty(); }

  // OK when no token is configured or `context` carries it; else UNAUTHENTICATED naming the
  // `authorization` metadata. The comparison takes the same time wherever the values differ.
  absl::Status Check(const grpc::ServerContextBase& context) const;

 private:
  std::string token_;
};

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_GRPC_AUTH_H_
