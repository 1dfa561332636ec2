// Miss reports: which keys missed the loaded bundles, how often, and what the
// fallback cost. Ranked so that the first row is the shape most worth tuning.
// JSON schema: formats/miss_report.schema.json.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cliffguard/op_key.h"
#include "cliffguard/status.h"

namespace cliffguard {

enum class MissKind : uint8_t {
  kDeviceMiss = 0,     // no loaded bundle is for this device
  kShapeMiss = 1,      // a bundle for this device is loaded, the key is not in it
  kRejectedEntry = 2,  // the key is in a bundle, but its entry was rejected
};
const char* MissKindName(MissKind k);  // "device_miss", "shape_miss", "rejected_entry"
StatusOr<MissKind> ParseMissKind(std::string_view s);

struct MissRecord {
  OpKey key;
  MissKind kind = MissKind::kShapeMiss;
  uint64_t count = 0;
  double first_seen = 0;        // unix seconds
  double last_seen = 0;         // unix seconds
  double fallback_us_total = 0; // wall time spent in the fallback kernel, microseconds
  std::string fallback;         // the fallback schedule used (Schedule::ToString)
  // Estimated time that tuning this key would have saved so far (microseconds):
  // fallback_us_total * (1 - 1/expected_speedup); expected_speedup is the median
  // default_us/tuned_us of the loaded entries of the same op on this device, or 1
  // (unknown, gain 0) when there are none.
  double expected_gain_us = 0;
};

struct MissReport {
  int schema_version = 1;
  std::string device_fingerprint;
  std::string device_name;
  int device_threads = 0;          // the runtime's thread budget (0: not recorded)
  std::string host;                // hostname of the process that wrote it ("" unknown)
  int64_t pid = 0;                 // that process (a child of fork() reports on its own)
  double generated_at = 0;         // unix seconds
  uint64_t calls = 0;              // hits + misses over every key
  uint64_t hits = 0;
  uint64_t misses = 0;
  double expected_speedup = 1.0;   // used for expected_gain_us
  std::string expected_speedup_basis;  // how expected_speedup was obtained, for people
  std::vector<MissRecord> records; // ranked: expected_gain_us, then fallback time, then count
};

std::string MissReportToJson(const MissReport& report, int indent = 2);
// Strict parse (the `misses` command and `tune --from-report` read reports).
StatusOr<MissReport> MissReportFromJson(std::string_view json);
// Sorts records by the ranking rule above (stable, then by key text).
void RankMissRecords(MissReport& report);

}  // namespace cliffguard
