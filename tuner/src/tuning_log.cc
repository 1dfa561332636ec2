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

#include "cliffguard/detail/json_reader.h"
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
    case RecordKind::kConfirm: return "confirm";
    case RecordKind::kBucket: return "bucket";
  }
  return "?";
}

StatusOr<RecordKind> ParseRecordKind(std::string_view s) {
  if (s == "trial") return RecordKind::kTrial;
  if (s == "default") return RecordKind::kDefault;
  if (s == "remeasure") return RecordKind::kRemeasure;
  if (s == "cross") return RecordKind::kCross;
  if (s == "confirm") return RecordKind::kConfirm;
  if (s == "bucket") return RecordKind::kBucket;
  return InvalidArgument(
      fmt::format("record kind '{}' is not one of: trial, default, remeasure, cross, confirm, bucket", s));
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string RecordToJson(const LogRecord& r) {
  json j = json::object();
  j["v"] = kTuningLogVersion;
  j["kind"] = RecordKindName(r.kind);
  j["key"] = r.key.ToString();
  j["device"] = r.device;
  j["schedule"] = detail::ScheduleToJson(r.schedule);
  j["strategy"] = r.strategy;
  j["seed"] = r.seed;
  j["trial"] = r.trial;
  if (r.ok) {
    j["median_us"] = r.median_us;
    if (!r.round_us.empty()) j["round_us"] = r.round_us;
    if (r.cpu_wait >= 0) j["cpu_wait"] = r.cpu_wait;
  } else {
    j["error"] = r.error.empty() ? "unknown error" : r.error;
  }
  j["ts"] = r.timestamp;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

StatusOr<LogRecord> RecordFromJson(std::string_view line) {
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return DataLoss("not valid JSON");
  if (!j.is_object()) return DataLoss("a record must be a JSON object");
  detail::JsonReader rd("record", StatusCode::kDataLoss);
  LogRecord r;
  const int64_t version = rd.Int(j, "v");
  CG_RETURN_IF_ERROR(rd.status());
  if (version > kTuningLogVersion)
    return FailedPrecondition(fmt::format("log version {} is newer than this build's {}", version, kTuningLogVersion));
  const std::string kind = rd.String(j, "kind"), key = rd.String(j, "key");
  CG_RETURN_IF_ERROR(rd.status());
  auto k = ParseRecordKind(kind);
  if (!k.ok()) return DataLoss(k.status().message());
  r.kind = *k;
  auto parsed = OpKey::Parse(key);
  if (!parsed.ok()) return DataLoss(fmt::format("key: {}", parsed.status().message()));
  r.key = *parsed;
  r.device = rd.String(j, "device");
  r.schedule = rd.Schedule(j, "schedule");
  r.strategy = rd.String(j, "strategy");
  r.seed = rd.UInt(j, "seed");
  r.trial = rd.Int(j, "trial");
  const bool has_time = j.contains("median_us"), has_error = j.contains("error");
  if (has_time == has_error) rd.Fail("exactly one of 'median_us' and 'error' must be present");
  r.ok = has_time;
  if (has_time) r.median_us = rd.Number(j, "median_us", true, /*positive=*/true);
  if (has_error) r.error = rd.String(j, "error");
  if (has_error && j.contains("round_us")) rd.Fail("'round_us' belongs to a record with 'median_us'");
  if (has_time) r.round_us = rd.Numbers(j, "round_us", /*required=*/false, /*positive=*/true);
  if (has_error && j.contains("cpu_wait")) rd.Fail("'cpu_wait' belongs to a record with 'median_us'");
  if (has_time && j.contains("cpu_wait")) {
    r.cpu_wait = rd.Number(j, "cpu_wait");
    if (rd.status().ok() && !(r.cpu_wait >= 0 && r.cpu_wait <= 1))
      rd.Fail(fmt::format("record.cpu_wait must be in [0, 1], got {}", r.cpu_wait));
  }
  r.timestamp = rd.Number(j, "ts");
  CG_RETURN_IF_ERROR(rd.status());
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
  return Schedule::FromNamed(s.variant, s.params, variants);
}

StatusOr<MeasureResult> ToMeasureResult(const LogRecord& r, std::span<const KernelVariant* const> variants) {
  CG_ASSIGN_OR_RETURN(Schedule s, ResolveNamed(r.schedule, variants));
  MeasureResult m;
  m.key = r.key;
  m.schedule = s;
  m.ok = r.ok;
  m.median_us = r.median_us;
  m.round_us = r.round_us;
  m.cpu_wait = r.cpu_wait;
  m.error = r.error;
  return m;
}

}  // namespace cliffguard::tuner
