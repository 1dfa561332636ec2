// For cliffguard's own libraries (runtime, tuner; needs fmt): formatted logging
// through the cliffguard logger (cliffguard/log.h).
// Formats only when the level is enabled.
#pragma once

#include <utility>

#include <fmt/format.h>

#include "cliffguard/log.h"

namespace cliffguard::logging {

template <typename... Args>
void Log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (level < GetLogLevel()) return;
  LogMessage(level, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void Info(fmt::format_string<Args...> f, Args&&... a) { Log(LogLevel::kInfo, f, std::forward<Args>(a)...); }
template <typename... Args>
void Warn(fmt::format_string<Args...> f, Args&&... a) { Log(LogLevel::kWarn, f, std::forward<Args>(a)...); }
template <typename... Args>
void Error(fmt::format_string<Args...> f, Args&&... a) { Log(LogLevel::kError, f, std::forward<Args>(a)...); }

}  // namespace cliffguard::logging
