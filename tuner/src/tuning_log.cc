#include "cliffguard/tuner/tuning_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include "cliffguard/detail/logging.h"

namespace cliffguard::tuner {

// ordered: fields and schedule parameters keep their written order.
using json = nlohmann::ordered_json;

const char* RecordKindName(RecordKind k) {
  switch (k) {
    case RecordKind::kTrial: return "trial";
    case RecordKind::kDefault: return "default";
    case RecordKind::kRemeasure: return "remeasure";
    case RecordKind::kCross: return "cross";
  }
  return "?";
}

StatusOr<RecordKind> ParseRecordKind(std::string_view s) {
  if (s == "trial") return RecordKind::kTrial;
  if (s == "default") return RecordKind::kDefault;
  if (s == "remeasure") return RecordKind::kRemeasure;
  if (s == "cross") return RecordKind::kCross;
  return InvalidArgument(fmt::format("record kind '{}' is not one of: trial, default, remeasure, cross", s));
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string RecordToJson(const LogRecord& r) {
  json params = json::object();
  for (const auto& [name, value] : r.schedule.params) params[name] = value;
  json j = json::object();
  j["v"] = kTuningLogVersion;
  j["kind"] = RecordKindName(r.kind);
  j["key"] = r.key.ToString();
  j["device"] = r.device;
  json sched = json::object();
  sched["variant"] = r.schedule.variant;
  sched["params"] = params;
  j["schedule"] = sched;
  j["strategy"] = r.strategy;
  j["seed"] = r.seed;
  j["trial"] = r.trial;
  if (r.ok) {
    j["median_us"] = r.median_us;
  } else {
    j["error"] = r.error.empty() ? "unknown error" : r.error;
  }
  j["ts"] = r.timestamp;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

StatusOr<LogRecord> RecordFromJson(std::string_view line) {
  json j;
  try {
    j = json::parse(line.begin(), line.end());
  } catch (const json::exception& e) {  // parse_error, or out_of_range for huge numbers
    return DataLoss(fmt::format("not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) return DataLoss("a record must be a JSON object");
  auto need = [&](const char* field, json::value_t type) -> Status {
    if (!j.contains(field)) return DataLoss(fmt::format("field '{}' is missing", field));
    const auto& f = j[field];
    bool good = type == json::value_t::number_float ? f.is_number()
                : type == json::value_t::number_unsigned ? f.is_number_unsigned() || (f.is_number_integer() && f.get<int64_t>() >= 0)
                : type == json::value_t::number_integer ? f.is_number_integer()
                : f.type() == type;
    if (!good) return DataLoss(fmt::format("field '{}' has the wrong type ({})", field,
                                                   f.dump(-1, ' ', false, json::error_handler_t::replace)));
    return Status::Ok();
  };
  LogRecord r;
  CG_RETURN_IF_ERROR(need("v", json::value_t::number_integer));
  if (j["v"].get<int64_t>() > kTuningLogVersion)
    return FailedPrecondition(fmt::format("log version {} is newer than this build's {}", j["v"].get<int64_t>(), kTuningLogVersion));
  CG_RETURN_IF_ERROR(need("kind", json::value_t::string));
  auto kind = ParseRecordKind(j["kind"].get<std::string>());
  if (!kind.ok()) return DataLoss(kind.status().message());
  r.kind = *kind;
  CG_RETURN_IF_ERROR(need("key", json::value_t::string));
  auto key = OpKey::Parse(j["key"].get<std::string>());
  if (!key.ok()) return DataLoss(fmt::format("key: {}", key.status().message()));
  r.key = *key;
  CG_RETURN_IF_ERROR(need("device", json::value_t::string));
  r.device = j["device"].get<std::string>();
  CG_RETURN_IF_ERROR(need("schedule", json::value_t::object));
  const json& s = j["schedule"];
  if (!s.contains("variant") || !s["variant"].is_string()) return DataLoss("schedule.variant is missing or not a string");
  r.schedule.variant = s["variant"].get<std::string>();
  if (!s.contains("params") || !s["params"].is_object()) return DataLoss("schedule.params is missing or not an object");
  for (const auto& [name, value] : s["params"].items()) {
    if (!value.is_number_integer()) return DataLoss(fmt::format("schedule.params.{} is not an integer", name));
    r.schedule.params.emplace_back(name, value.get<int64_t>());
  }
  CG_RETURN_IF_ERROR(need("strategy", json::value_t::string));
  r.strategy = j["strategy"].get<std::string>();
  CG_RETURN_IF_ERROR(need("seed", json::value_t::number_unsigned));
  r.seed = j["seed"].get<uint64_t>();
  CG_RETURN_IF_ERROR(need("trial", json::value_t::number_integer));
  r.trial = j["trial"].get<int64_t>();
  const bool has_time = j.contains("median_us"), has_error = j.contains("error");
  if (has_time == has_error) return DataLoss("exactly one of 'median_us' and 'error' must be present");
  if (has_time) {
    CG_RETURN_IF_ERROR(need("median_us", json::value_t::number_float));
    r.ok = true;
    r.median_us = j["median_us"].get<double>();
    if (!(r.median_us > 0) || !std::isfinite(r.median_us))
      return DataLoss(fmt::format("median_us={} must be a positive finite number", r.median_us));
  } else {
    CG_RETURN_IF_ERROR(need("error", json::value_t::string));
    r.error = j["error"].get<std::string>();
  }
  CG_RETURN_IF_ERROR(need("ts", json::value_t::number_float));
  r.timestamp = j["ts"].get<double>();
  return r;
}

StatusOr<TuningLogContents> ReadTuningLog(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(fmt::format("tuning log '{}' cannot be opened", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  TuningLogContents out;
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    const bool complete = nl != std::string::npos;
    const size_t end = complete ? nl : text.size();
    ++line_no;
    std::string_view line(text.data() + pos, end - pos);
    const bool last = !complete || end + 1 >= text.size();
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
      if (complete) out.valid_bytes = static_cast<int64_t>(end + 1);
      pos = end + 1;
      continue;
    }
    auto rec = RecordFromJson(line);
    if (!rec.ok() || !complete) {
      if (last) {
        logging::Warn("tuning log {}:{}: dropping {} last line ({})", path, line_no,
                     complete ? "corrupt" : "partial", rec.ok() ? "no newline: the write was cut off" : rec.status().message());
        out.dropped_last_line = true;
        break;
      }
      return DataLoss(fmt::format("tuning log {}:{}: corrupt line: {}", path, line_no, rec.status().message()));
    }
    out.records.push_back(std::move(*rec));
    out.valid_bytes = static_cast<int64_t>(end + 1);
    pos = end + 1;
  }
  return out;
}

StatusOr<std::unique_ptr<TuningLogWriter>> TuningLogWriter::Open(const std::string& path, Mode mode, int64_t keep_bytes) {
  int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC;
  if (mode == Mode::kTruncate) flags |= O_TRUNC;
  int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return IoError(fmt::format("tuning log '{}' cannot be opened for writing: {}", path, std::strerror(errno)));
  if (mode == Mode::kAppend && keep_bytes >= 0) {
    if (::ftruncate(fd, keep_bytes) != 0) {
      int e = errno;
      ::close(fd);
      return IoError(fmt::format("tuning log '{}': cannot truncate to {} bytes: {}", path, keep_bytes, std::strerror(e)));
    }
  }
  return std::unique_ptr<TuningLogWriter>(new TuningLogWriter(path, fd));
}

TuningLogWriter::~TuningLogWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status TuningLogWriter::Append(const LogRecord& r) {
  std::string line = RecordToJson(r);
  line.push_back('\n');
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(fmt::format("tuning log '{}': write failed: {}", path_, std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  if (::fdatasync(fd_) != 0) return IoError(fmt::format("tuning log '{}': fdatasync failed: {}", path_, std::strerror(errno)));
  return Status::Ok();
}

StatusOr<Schedule> ResolveNamed(const NamedSchedule& s, std::span<const KernelVariant* const> variants) {
  if (variants.empty()) return Schedule::FromNamed(s.variant, s.params);
  for (const KernelVariant* v : variants) {
    if (s.variant != v->name) continue;
    Schedule out;
    out.variant = v;
    for (size_t i = 0; i < v->params.size(); ++i) out.params[i] = v->params[i].default_value;
    for (const auto& [name, value] : s.params) {
      int idx = v->ParamIndex(name);
      if (idx < 0) return InvalidArgument(fmt::format("{}: unknown parameter '{}'", v->name, name));
      out.params[idx] = static_cast<int32_t>(value);
    }
    return out;
  }
  return NotFound(fmt::format("kernel variant '{}' is not among the variants being tuned", s.variant));
}

StatusOr<MeasureResult> ToMeasureResult(const LogRecord& r, std::span<const KernelVariant* const> variants) {
  CG_ASSIGN_OR_RETURN(Schedule s, ResolveNamed(r.schedule, variants));
  MeasureResult m;
  m.key = r.key;
  m.schedule = s;
  m.ok = r.ok;
  m.median_us = r.median_us;
  m.error = r.error;
  return m;
}

}  // namespace cliffguard::tuner
