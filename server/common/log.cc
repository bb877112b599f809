#include "server/common/log.h"

#include <atomic>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace mlaserve {
namespace {

std::atomic<LogFormat> g_format{LogFormat::kText};

// Text values are quoted only when a reader could otherwise split them.
std::string TextValue(const std::string& s) {
  const bool plain = !s.empty() && s.find_first_of(" \"=\t\n") == std::string::npos;
  return plain ? s
               : nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--log_format: \"", std::string(name), "\" is not text or json"));
}

void SetLogFormat(LogFormat format) { g_format.store(format); }

std::string FormatLogLine(LogFormat format, std::string_view timestamp, std::string_view event,
                          std::initializer_list<LogField> fields) {
  if (format == LogFormat::kJson) {
    nlohmann::ordered_json line;
    line["ts"] = timestamp;
    line["event"] = event;
    for (const auto& [key, value] : fields) {
      std::visit([&line, key = std::string(key)](const auto& v) { line[key] = v; }, value);
    }
    return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string line(timestamp);
  line.append(" ").append(event);
  for (const auto& [key, value] : fields) {
    line.append(" ").append(key).append("=");
    std::visit(
        [&line](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) {
            absl::StrAppend(&line, TextValue(v));
          } else if constexpr (std::is_same_v<T, bool>) {
            absl::StrAppend(&line, v ? "true" : "false");
          } else {
            absl::StrAppend(&line, v);
          }
        },
        value);
  }
  return line;
}

void LogEvent(std::string_view event, std::initializer_list<LogField> fields) {
  const std::string timestamp =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  std::string line = FormatLogLine(g_format.load(), timestamp, event, fields);
  line.push_back('\n');
  // One fwrite of the whole line: stdio locks the stream per call, so lines never interleave.
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace mlaserve
