// cliffguard's diagnostics: one named logger ("cliffguard") of the library's own,
// never spdlog's default logger and never stdout.
//
// By default messages at or above the level go to stderr as
//   [cliffguard] [warning] bundle 'x.cgb' is for another device ...
// naming cliffguard once: a message that starts with "cliffguard: " loses that
// prefix, on stderr and in a host's sink alike.
// The level is `warn` unless CLIFFGUARD_LOG_LEVEL (trace, debug, info, warn, error,
// off) says otherwise when the logger is first used, or SetLogLevel changes it.
// A host that has a logging system of its own installs a sink: every message at or
// above the level is then handed to it instead of stderr.
//
// Thread-safety: every function here may be called from any thread at any time,
// including while other threads log. The sink is called from the thread that logs,
// one message at a time (calls are serialised); it must not call back into
// cliffguard. The logger is never destroyed, so messages logged while a Runtime in
// a global or static variable is destroyed at exit still arrive.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "cliffguard/status.h"

namespace cliffguard {

enum class LogLevel : uint8_t { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };
const char* LogLevelName(LogLevel level);  // "trace", ..., "warning", "error", "off"
// Accepts trace, debug, info, warn (or warning), error, off.
StatusOr<LogLevel> ParseLogLevel(std::string_view s);

// Receives one message (no prefix, no leading "cliffguard: ", no trailing newline).
using LogSink = std::function<void(LogLevel level, std::string_view message)>;

// Installs the host's sink; an empty function restores the stderr sink.
void SetLogSink(LogSink sink);
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

// Logs one message through the cliffguard logger (used by cliffguard's libraries).
void LogMessage(LogLevel level, std::string_view message);

}  // namespace cliffguard
