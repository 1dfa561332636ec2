#include "cliffguard/log.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include <fmt/format.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

namespace cliffguard {
namespace {

spdlog::level::level_enum ToSpd(LogLevel l) {
  switch (l) {
    case LogLevel::kTrace: return spdlog::level::trace;
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kOff: break;
  }
  return spdlog::level::off;
}

LogLevel FromSpd(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace: return LogLevel::kTrace;
    case spdlog::level::debug: return LogLevel::kDebug;
    case spdlog::level::info: return LogLevel::kInfo;
    case spdlog::level::warn: return LogLevel::kWarn;
    case spdlog::level::err:
    case spdlog::level::critical: return LogLevel::kError;
    default: return LogLevel::kOff;
  }
}

// The message without a leading "cliffguard: " (or "cliffguard:"): the stderr form
// names cliffguard once, in its "[cliffguard]" prefix.
std::string_view WithoutOwnPrefix(std::string_view text) {
  constexpr std::string_view kOwn = "cliffguard:";
  while (text.substr(0, kOwn.size()) == kOwn) {
    text.remove_prefix(kOwn.size());
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  }
  return text;
}

// Hands each message to the host's sink, or writes it to stderr. base_sink's mutex
// serialises both.
class HostSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void Set(LogSink sink) {
    std::lock_guard<std::mutex> lock(mutex_);
    sink_ = std::move(sink);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string_view text = WithoutOwnPrefix(std::string_view(msg.payload.data(), msg.payload.size()));
    if (sink_) {
      sink_(FromSpd(msg.level), text);
      return;
    }
    const auto name = spdlog::level::to_string_view(msg.level);
    const std::string line = fmt::format("[cliffguard] [{}] {}\n", std::string_view(name.data(), name.size()), text);
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }

 private:
  LogSink sink_;
};

struct Logger {
  std::shared_ptr<HostSink> sink = std::make_shared<HostSink>();
  spdlog::logger logger{"cliffguard", sink};
  Logger() {
    LogLevel level = LogLevel::kWarn;
    if (const char* env = std::getenv("CLIFFGUARD_LOG_LEVEL")) {
      auto parsed = ParseLogLevel(env);
      if (parsed.ok()) level = *parsed;
      else std::fprintf(stderr, "[cliffguard] [warning] CLIFFGUARD_LOG_LEVEL: %s; using warn\n", parsed.status().message().c_str());
    }
    logger.set_level(ToSpd(level));
  }
};

Logger& TheLogger() {
  static Logger* l = new Logger();  // never destroyed: usable from destructors run at exit
  return *l;
}

}  // namespace

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "trace";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warning";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "?";
}

StatusOr<LogLevel> ParseLogLevel(std::string_view s) {
  if (s == "trace") return LogLevel::kTrace;
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "warn" || s == "warning") return LogLevel::kWarn;
  if (s == "error") return LogLevel::kError;
  if (s == "off") return LogLevel::kOff;
  return InvalidArgument(fmt::format("log level '{}' is not one of: trace, debug, info, warn, error, off", s));
}

void SetLogSink(LogSink sink) { TheLogger().sink->Set(std::move(sink)); }
void SetLogLevel(LogLevel level) { TheLogger().logger.set_level(ToSpd(level)); }
LogLevel GetLogLevel() { return FromSpd(TheLogger().logger.level()); }

void LogMessage(LogLevel level, std::string_view message) {
  TheLogger().logger.log(ToSpd(level), spdlog::string_view_t(message.data(), message.size()));
}

}  // namespace cliffguard
