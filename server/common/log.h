// Event log of the daemon: one line per event on stderr, as `key=value` text or as one JSON
// object per line (--log_format=json), so that log collectors need no parser of their own.
//
// Thread-safety: LogEvent may be called from any thread; lines never interleave.
// SetLogFormat is meant for start-up, before other threads log.
#ifndef MLASERVE_SERVER_COMMON_LOG_H_
#define MLASERVE_SERVER_COMMON_LOG_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "absl/status/statusor.h"

namespace mlaserve {

enum class LogFormat { kText, kJson };

// Parses "text" or "json"; the error names --log_format.
absl::StatusOr<LogFormat> ParseLogFormat(std::string_view name);
void SetLogFormat(LogFormat format);

using LogValue = std::variant<std::string, int64_t, double, bool>;
using LogField = std::pair<std::string_view, LogValue>;

// Writes `event` with a UTC timestamp and `fields`, in the configured format.
void LogEvent(std::string_view event, std::initializer_list<LogField> fields = {});

// The line LogEvent would write (without the newline), for tests.
std::string FormatLogLine(LogFormat format, std::string_view timestamp, std::string_view event,
                          std::initializer_list<LogField> fields);

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_COMMON_LOG_H_
