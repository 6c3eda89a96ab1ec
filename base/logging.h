// A small leveled logger (Debian's abseil has no absl/log). Thread-safe, writes to stderr.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace ridge {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
absl::StatusOr<LogLevel> ParseLogLevel(std::string_view name);
void LogLine(LogLevel level, std::string_view message);

template <typename... Args>
void Log(LogLevel level, const Args&... args) {
  if (level >= GetLogLevel()) LogLine(level, absl::StrCat(args...));
}

}  // namespace ridge
