#include "tests/server/scrape_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/status_macros.h"

namespace mlaserve::testing {

absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to 127.0.0.1:", port));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::InternalError("write() failed");
  }
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) response.append(buffer, n);
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (!absl::StartsWith(response, "HTTP/1.1 200") && !absl::StartsWith(response, "HTTP/1.0 200")) {
    return absl::InternalError(absl::StrCat("GET ", path, ": ", response.substr(0, body)));
  }
  if (body == std::string::npos) return absl::InternalError("no end of the HTTP headers");
  return response.substr(body + 4);
}

absl::StatusOr<std::map<std::string, double>> ParseTextFormat(const std::string& text) {
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#")) continue;
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("no value: ", line));
    }
    const std::string value(line.substr(space + 1));
    double v = 0;
    if (value == "Nan" || value == "NaN") {
      v = std::nan("");
    } else if (!absl::SimpleAtod(value, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("bad value: ", line));
    }
    samples[std::string(line.substr(0, space))] = v;
  }
  return samples;
}

absl::StatusOr<std::map<std::string, double>> Scrape(int port) {
  ASSIGN_OR_RETURN(std::string body, HttpGet(port, "/metrics"));
  return ParseTextFormat(body);
}

}  // namespace mlaserve::testing
