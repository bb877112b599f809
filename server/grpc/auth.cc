#include "server/grpc/auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/util/read_file.h"

namespace mlaserve {
namespace {

constexpr char kScheme[] = "Bearer ";

// Whether `given` equals `secret`, in time that depends on the secret's length only.
bool ConstantTimeEquals(const std::string& given, const std::string& secret) {
  unsigned char diff = given.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < secret.size(); ++i) {
    const char g = i < given.size() ? given[i] : '\0';
    diff |= static_cast<unsigned char>(g ^ secret[i]);
  }
  return diff == 0;
}

}  // namespace

absl::StatusOr<BearerAuth> BearerAuth::FromFile(const std::string& path) {
  if (path.empty()) return BearerAuth();
  absl::StatusOr<std::string> content = ReadWholeFile(path);
  if (!content.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth_token_file: ", content.status().message()));
  }
  std::string token(absl::StripAsciiWhitespace(*content));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--auth_token_file: \"", path, "\" is empty"));
  }
  return BearerAuth(std::move(token));
}

absl::Status BearerAuth::Check(const grpc::ServerContextBase& context) const {
  if (!enabled()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("authorization: the call carries no bearer token");
  }
  const std::string value(it->second.data(), it->second.size());
  const std::string scheme(kScheme);
  if (value.compare(0, scheme.size(), scheme) != 0 ||
      !ConstantTimeEquals(value.substr(scheme.size()), token_)) {
    return absl::UnauthenticatedError("authorization: the bearer token is not the server's");
  }
  return absl::OkStatus();
}

}  // namespace mlaserve
