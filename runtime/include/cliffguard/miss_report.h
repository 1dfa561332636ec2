// Miss reports: which keys missed the loaded bundles, how often, and what the
// fallback cost. Ranked so that the first row is the shape most worth tuning.
// JSON schema: formats/miss_report.schema.json.
#pragma once

#include <cstdint>
#include <memory>
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

// What ran a call, in the runtime's lookup order (runtime.h): the key's own tuned
// entry; else the bucket of a tuned key of its family whose range holds the call's
// varying dimension; else the nearest tuned key of its family; else the bundle
// default of its op and shape class; else the built-in default. Every call but an
// exact one is a miss (its key has no entry of its own), counted under the kind that
// served it.
enum class ServedBy : uint8_t {
  kExact = 0,
  kBucket = 1,
  kNearest = 2,
  kBundleDefault = 3,
  kBuiltinDefault = 4,
};
inline constexpr int kNumServedBy = 5;
// "exact", "bucket", "nearest", "bundle_default", "builtin_default"
const char* ServedByName(ServedBy s);
StatusOr<ServedBy> ParseServedBy(std::string_view s);
// Bucket and nearest run a schedule tuned for another key of the family.
inline bool ServedByTunedKey(ServedBy s) { return s == ServedBy::kBucket || s == ServedBy::kNearest; }

struct MissRecord {
  OpKey key;
  MissKind kind = MissKind::kShapeMiss;
  uint64_t count = 0;
  double first_seen = 0;        // unix seconds
  double last_seen = 0;         // unix seconds
  double fallback_us_total = 0; // wall time spent in the fallback kernel, microseconds
  std::string fallback;         // the fallback schedule used (Schedule::ToString)
  // What served the calls: served_by / served_from are the latest (served_from: the
  // tuned key whose schedule ran, for bucket and nearest; bucket_lo/hi: that
  // bucket's range); calls and time per kind sum to count and fallback_us_total
  // (a reload can change the kind between calls). Index: ServedBy (kExact unused).
  ServedBy served_by = ServedBy::kBuiltinDefault;
  std::string served_from;
  int64_t bucket_lo = 0, bucket_hi = 0;
  uint64_t served_calls[kNumServedBy] = {};
  double served_us[kNumServedBy] = {};
  // Estimated time that tuning this key would have saved so far (microseconds):
  // the time its calls spent in a default (bundle or built-in) times
  // (1 - 1/expected_speedup); expected_speedup is the median default_us/tuned_us of
  // the loaded entries of the same op on this device, or 1 (unknown, gain 0) when
  // there are none. Calls served by a bucket or the nearest key already ran a tuned
  // schedule and add no gain.
  double expected_gain_us = 0;
};

// The traffic one bucket absorbed: missed keys served by the bucket of `key`.
struct BucketTraffic {
  OpKey key;                // the tuned key whose bucket served them
  int64_t lo = 0, hi = 0;   // its range of the varying dimension
  uint64_t keys = 0;        // distinct missed keys it served
  uint64_t calls = 0;
  double us_total = 0;      // time in its schedule, microseconds
};

// A range worth tuning as a bucket (`tune --from-report`): per family, the missed
// calls that ran a default, grouped into ranges of the varying dimension between
// powers of two, (2^(j-1), 2^j]; `key` is the range's representative, the value of
// the range that spent the most time in a default. Ranked by expected gain.
struct BucketRecommendation {
  OpKey key;
  int64_t lo = 0, hi = 0;
  uint64_t keys = 0;            // distinct missed keys in the range
  uint64_t calls = 0;
  double default_us_total = 0;  // time those calls spent in a default
  // The sum of its records' expected_gain_us: each record's time in a default priced
  // by the speed-up of its own op's tuned entries (a conv2d range by conv2d's).
  double expected_gain_us = 0;
};

// The process whose counts a report holds. A merged report lists all of them.
struct ReportSource {
  std::string host;
  int64_t pid = 0;
  double process_start = 0;     // unix seconds (0: not recorded)
  std::string runtime_version;  // CliffguardVersion() of the runtime that counted
  double generated_at = 0;      // when that process wrote the report merged
  uint64_t calls = 0;
};

struct MissReport {
  int schema_version = 1;
  std::string device_fingerprint;
  std::string device_name;
  int device_threads = 0;          // the runtime's thread budget (0: not recorded)
  std::string host;                // hostname of the process that wrote it ("" unknown)
  int64_t pid = 0;                 // that process (a child of fork() reports on its own)
  double process_start = 0;        // when that process started, unix seconds (0: not recorded)
  std::string runtime_version;     // CliffguardVersion() of that process ("" not recorded)
  double generated_at = 0;         // unix seconds
  // A merged report (MergeMissReports): every process whose counts it sums, ordered
  // by host, process start and pid; host, pid, process_start and runtime_version above
  // are then empty. Empty for a report one process wrote.
  std::vector<ReportSource> sources;
  uint64_t calls = 0;              // hits + misses over every key
  uint64_t hits = 0;
  uint64_t misses = 0;
  double expected_speedup = 1.0;   // used for expected_gain_us
  std::string expected_speedup_basis;  // how expected_speedup was obtained, for people
  std::vector<MissRecord> records; // ranked: expected_gain_us, then fallback time, then count
  // Calls per kind that served them (ServedBy index; served[kExact] == hits), and the
  // time of the missed ones per kind (served_us[kExact] is not measured: 0).
  uint64_t served[kNumServedBy] = {};
  double served_us[kNumServedBy] = {};
  std::vector<BucketTraffic> buckets;                   // by calls, descending
  std::vector<BucketRecommendation> recommended_buckets;  // by expected gain, descending
};

// The recommended buckets of a report's records (see BucketRecommendation).
std::vector<BucketRecommendation> RecommendBuckets(const std::vector<MissRecord>& records);

// The traffic buckets absorbed, from records served by a bucket (their latest kind).
std::vector<BucketTraffic> BucketTrafficOf(const std::vector<MissRecord>& records);

// Merges reports of one device (replicas of a fleet) into one:
//   - calls, hits, misses, counts and times per key and per kind are summed (times
//     at nanosecond resolution, in integers, so merging is associative and
//     commutative to the bit: any grouping and order gives the same report);
//   - first_seen is the earliest, last_seen and generated_at the latest; what served a
//     key (kind, served_by, served_from, bucket, fallback) is its latest record's;
//   - expected gains are summed (each replica priced its own misses); the merged
//     expected_speedup is the one those gains imply over the time spent in defaults
//     (the largest input's when no time was spent in a default);
//   - buckets and recommended_buckets are recomputed from the merged records;
//   - sources lists every process merged.
// Refused, naming the inputs (`names`, parallel to `reports`; may be empty): no input,
// different schema versions or device fingerprints, and two inputs from the same
// process (host, pid and start time; for reports that do not record the start time,
// the same generated_at), whose counts would be summed twice: a later report of a
// process already holds its earlier counts.
StatusOr<MissReport> MergeMissReports(const std::vector<MissReport>& reports,
                                      const std::vector<std::string>& names = {});

// Merges reports one at a time, by MergeMissReports's rules, holding only the sums
// (for many large reports read one by one). Add refuses, naming `name`, what
// MergeMissReports refuses; Finish gives the merged report.
class MissReportMerger {
 public:
  MissReportMerger();
  ~MissReportMerger();
  MissReportMerger(MissReportMerger&&) noexcept;
  MissReportMerger& operator=(MissReportMerger&&) noexcept;
  Status Add(const MissReport& report, const std::string& name = "");
  StatusOr<MissReport> Finish() const;
  size_t reports() const;  // added so far

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Reads and parses miss report files, several at once (one thread per CPU); an error
// names the file.
StatusOr<std::vector<MissReport>> ReadMissReportFiles(const std::vector<std::string>& paths);
// Reads and merges miss report files (`cliffguard misses merge`): one thread per CPU
// parses files and merges them into a share of its own, then the shares are merged;
// the result is the same as MergeMissReports of the reports in any order. Each report
// is dropped once merged, so memory holds the merged keys, not every report.
StatusOr<MissReport> MergeMissReportFiles(const std::vector<std::string>& paths);

// JSON text. Multiline: one top-level field, and one array element (a record, a
// bucket), per line; else one line.
std::string MissReportToJson(const MissReport& report, bool multiline = true);
// Strict parse (the `misses` command and `tune --from-report` read reports).
StatusOr<MissReport> MissReportFromJson(std::string_view json);
// Sorts records by the ranking rule above, then by key (op, dtype, layout, dims).
void RankMissRecords(MissReport& report);

}  // namespace cliffguard
