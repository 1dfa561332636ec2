// Tuning logs: JSON lines, one measurement per line, append-only and resumable.
// Schema: formats/tuning_log.schema.json. A line looks like
//   {"v":1,"kind":"trial","key":"gemm f32 nn m=128 n=768 k=768",
//    "device":"cpu-avx512-3f9a...","schedule":{"variant":"cpu_f32_gemm_14x32__avx512",
//    "params":{"mc":112,"kc":256,...}},"strategy":"xgb","seed":1,"trial":17,
//    "median_us":812.4,"ts":1764489600.25}
// with "error":"wrong result: ..." instead of "median_us" for a failed candidate.
//
// Durability: every record is one write(2) of the whole line on an O_APPEND file
// descriptor followed by fdatasync, so a killed tuner leaves at most one partial
// last line. Reading drops a partial or corrupt LAST line with a spdlog warning
// naming the file and line; a corrupt line anywhere else is a kDataLoss error
// naming the line.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cliffguard/bundle.h"
#include "cliffguard/kernel.h"
#include "cliffguard/op_key.h"
#include "cliffguard/status.h"
#include "cliffguard/tuner/measure_result.h"

namespace cliffguard::tuner {

inline constexpr int kTuningLogVersion = 1;

// What a record measured.
//   trial:     a schedule proposed by the strategy; counts toward the trial budget.
//   default:   DefaultSchedule(key) on this device (the cliff size); one per key.
//   remeasure: a near-tie re-measurement (interleaved, more repeats) of a top
//              candidate; decides the winner, not counted as a trial.
//   cross:     a candidate for the per-op bundle default measured on another
//              shape of the workload; not counted as a trial.
//   confirm:   the winner and the default measured together, interleaved, as the
//              serving path runs them; decides which of the two ships.
//   bucket:    a bucket's check at one end of its range: the winner of the bucket's
//              key and the default of the end key, measured together, interleaved;
//              the record's key is the end key. Decides whether the bucket ships.
enum class RecordKind : uint8_t { kTrial = 0, kDefault = 1, kRemeasure = 2, kCross = 3, kConfirm = 4, kBucket = 5 };
const char* RecordKindName(RecordKind k);
StatusOr<RecordKind> ParseRecordKind(std::string_view s);

struct LogRecord {
  RecordKind kind = RecordKind::kTrial;
  OpKey key;
  std::string device;        // device fingerprint
  NamedSchedule schedule;
  std::string strategy;      // "xgb", "random", ...; "default" for default records
  uint64_t seed = 0;
  int64_t trial = -1;        // 0-based trial index within the key (trial records), else -1
  bool ok = false;
  double median_us = 0;      // ok only
  // ok only, may be empty: MeasureResult::round_us, the times the median came from
  // (interleaved kinds: each round's mean call time; trial, default: the median of
  // each quarter of the calls), so that a verdict's evidence stays in the log.
  std::vector<double> round_us;
  double cpu_wait = -1;      // ok only: MeasureResult::cpu_wait; -1 (not written) when not measured
  std::string error;         // !ok only
  double timestamp = 0;      // unix seconds
};

// One JSON object, no trailing newline.
std::string RecordToJson(const LogRecord& r);
StatusOr<LogRecord> RecordFromJson(std::string_view line);

struct TuningLogContents {
  std::vector<LogRecord> records;
  // Bytes of the file up to and including the last good line. A writer that
  // resumes truncates the file here first, so a dropped partial line never ends up
  // in the middle of the log.
  int64_t valid_bytes = 0;
  bool dropped_last_line = false;
};

// Reads a whole log. A missing file is kNotFound.
StatusOr<TuningLogContents> ReadTuningLog(const std::string& path);

// Appends records. Not thread-safe (the tuner driver owns one).
class TuningLogWriter {
 public:
  // mode kTruncate starts an empty log; kAppend keeps the first `keep_bytes`
  // bytes (from ReadTuningLog's valid_bytes; -1 keeps all) and appends after them.
  enum class Mode { kTruncate, kAppend };
  static StatusOr<std::unique_ptr<TuningLogWriter>> Open(const std::string& path, Mode mode,
                                                         int64_t keep_bytes = -1);
  ~TuningLogWriter();
  TuningLogWriter(const TuningLogWriter&) = delete;
  TuningLogWriter& operator=(const TuningLogWriter&) = delete;

  // One write of the whole line, then fdatasync.
  Status Append(const LogRecord& r);
  const std::string& path() const { return path_; }

 private:
  TuningLogWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

// Resolves a record's schedule against `variants` (by name; empty: every variant
// in this build) into a MeasureResult the strategies understand.
StatusOr<MeasureResult> ToMeasureResult(const LogRecord& r, std::span<const KernelVariant* const> variants = {});

// Resolves a named schedule against an explicit variant list (empty: this build).
StatusOr<Schedule> ResolveNamed(const NamedSchedule& s, std::span<const KernelVariant* const> variants = {});

double UnixNow();

}  // namespace cliffguard::tuner
