// Scraping GET /metrics in tests: a plain-socket HTTP/1.0 GET and a parser of the Prometheus
// text format.
#ifndef MLASERVE_TESTS_SERVER_SCRAPE_UTIL_H_
#define MLASERVE_TESTS_SERVER_SCRAPE_UTIL_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace mlaserve::testing {

// The body of GET http://127.0.0.1:port/path; an error unless the status is 200.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);

// Every sample of a text-format exposition, keyed by the series as written
// (`name{label="value",...}` or `name`); comments skipped.
absl::StatusOr<std::map<std::string, double>> ParseTextFormat(const std::string& text);

// HttpGet(port, "/metrics") parsed.
absl::StatusOr<std::map<std::string, double>> Scrape(int port);

}  // namespace mlaserve::testing

#endif  // MLASERVE_TESTS_SERVER_SCRAPE_UTIL_H_
