#include "cliffguard/miss_report.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include <fmt/compile.h>
#include <fmt/format.h>

#include "cliffguard/file_io.h"
#include "json_pull.h"

namespace cliffguard {


const char* MissKindName(MissKind k) {
  switch (k) {
    case MissKind::kDeviceMiss: return "device_miss";
    case MissKind::kShapeMiss: return "shape_miss";
    case MissKind::kRejectedEntry: return "rejected_entry";
  }
  return "?";
}

StatusOr<MissKind> ParseMissKind(std::string_view s) {
  if (s == "device_miss") return MissKind::kDeviceMiss;
  if (s == "shape_miss") return MissKind::kShapeMiss;
  if (s == "rejected_entry") return MissKind::kRejectedEntry;
  return InvalidArgument(fmt::format("miss kind '{}' is not one of: device_miss, shape_miss, rejected_entry", s));
}

const char* ServedByName(ServedBy s) {
  switch (s) {
    case ServedBy::kExact: return "exact";
    case ServedBy::kBucket: return "bucket";
    case ServedBy::kNearest: return "nearest";
    case ServedBy::kBundleDefault: return "bundle_default";
    case ServedBy::kBuiltinDefault: return "builtin_default";
  }
  return "?";
}

StatusOr<ServedBy> ParseServedBy(std::string_view s) {
  for (int i = 0; i < kNumServedBy; ++i)
    if (s == ServedByName(static_cast<ServedBy>(i))) return static_cast<ServedBy>(i);
  return InvalidArgument(
      fmt::format("served-by kind '{}' is not one of: exact, bucket, nearest, bundle_default, builtin_default", s));
}

namespace {
auto KeyOrder(const OpKey& k) { return std::tie(k.op, k.dtype, k.trans_a, k.trans_b, k.constant_weights, k.dims); }
}  // namespace

std::vector<BucketRecommendation> RecommendBuckets(const std::vector<MissRecord>& records, double expected_speedup) {
  struct Range {
    BucketRecommendation rec;
    double rep_us = -1;
  };
  auto less = [](const std::pair<OpKey, int>& a, const std::pair<OpKey, int>& b) {
    return std::make_tuple(KeyOrder(a.first), a.second) < std::make_tuple(KeyOrder(b.first), b.second);
  };
  std::map<std::pair<OpKey, int>, Range, decltype(less)> ranges(less);  // (family, j) -> range (2^(j-1), 2^j]
  for (const MissRecord& m : records) {
    double us = 0;
    uint64_t calls = 0;
    for (int i = 0; i < kNumServedBy; ++i)
      if (i != static_cast<int>(ServedBy::kExact) && !ServedByTunedKey(static_cast<ServedBy>(i))) {
        us += m.served_us[i];
        calls += m.served_calls[i];
      }
    const int64_t v = m.key.dims[kVaryingDim];
    if (calls == 0 || v < 1) continue;
    const int j = v == 1 ? 0 : 64 - std::countl_zero(static_cast<uint64_t>(v - 1));  // 2^(j-1) < v <= 2^j
    Range& r = ranges[{KeyFamily(m.key), j}];
    BucketRecommendation& b = r.rec;
    b.lo = j == 0 ? 1 : (int64_t{1} << (j - 1)) + 1;
    b.hi = int64_t{1} << j;
    ++b.keys;
    b.calls += calls;
    b.default_us_total += us;
    if (us > r.rep_us) {
      r.rep_us = us;
      b.key = m.key;
    }
  }
  std::vector<BucketRecommendation> out;
  for (auto& [id, r] : ranges) {
    r.rec.expected_gain_us = r.rec.default_us_total * (1.0 - 1.0 / std::max(1.0, expected_speedup));
    out.push_back(r.rec);
  }
  std::stable_sort(out.begin(), out.end(), [](const BucketRecommendation& a, const BucketRecommendation& b) {
    if (a.expected_gain_us != b.expected_gain_us) return a.expected_gain_us > b.expected_gain_us;
    return a.default_us_total > b.default_us_total;
  });
  return out;
}

void RankMissRecords(MissReport& report) {
  std::vector<MissRecord>& recs = report.records;
  std::vector<uint32_t> order(recs.size());  // sorted as indices: each record moves once
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    const MissRecord &a = recs[x], &b = recs[y];
    if (a.expected_gain_us != b.expected_gain_us) return a.expected_gain_us > b.expected_gain_us;
    if (a.fallback_us_total != b.fallback_us_total) return a.fallback_us_total > b.fallback_us_total;
    if (a.count != b.count) return a.count > b.count;
    return KeyOrder(a.key) < KeyOrder(b.key);
  });
  std::vector<MissRecord> sorted;
  sorted.reserve(recs.size());
  for (uint32_t i : order) sorted.push_back(std::move(recs[i]));
  recs = std::move(sorted);
}

std::vector<BucketTraffic> BucketTrafficOf(const std::vector<MissRecord>& records) {
  constexpr int kB = static_cast<int>(ServedBy::kBucket);
  std::vector<BucketTraffic> out;
  std::unordered_map<std::string, size_t> at;  // serving key text -> index in out
  for (const MissRecord& m : records) {
    if (m.served_by != ServedBy::kBucket || m.served_calls[kB] == 0 || m.bucket_hi < 1) continue;
    auto [it, added] = at.try_emplace(m.served_from, out.size());
    if (added) {
      auto key = OpKey::Parse(m.served_from);
      if (!key.ok()) {
        at.erase(it);
        continue;
      }
      out.push_back({*key, m.bucket_lo, m.bucket_hi});
    }
    BucketTraffic& b = out[it->second];
    ++b.keys;
    b.calls += m.served_calls[kB];
    b.us_total += m.served_us[kB];
  }
  std::stable_sort(out.begin(), out.end(), [](const BucketTraffic& a, const BucketTraffic& b) { return a.calls > b.calls; });
  return out;
}

namespace {

// Sums for a merge: times as integer nanoseconds, which makes a merge associative to
// the bit; any sum beyond 64 bits (292 years of time) is flagged, not wrapped.
struct Sums {
  bool overflow = false;
  void Add(uint64_t& acc, uint64_t v) { overflow |= __builtin_add_overflow(acc, v, &acc); }
  void Add(int64_t& acc, int64_t v) { overflow |= __builtin_add_overflow(acc, v, &acc); }
  void AddUs(int64_t& acc, double us) {
    if (!(us * 1000.0 < 9.2e18)) {
      overflow = true;
      return;
    }
    Add(acc, static_cast<int64_t>(us * 1000.0 + 0.5));  // us >= 0: rounds to the nearest nanosecond
  }
};
double Micros(int64_t ns) { return double(ns) / 1000.0; }

ReportSource SourceOf(const MissReport& r) {
  return {r.host, r.pid, r.process_start, r.runtime_version, r.generated_at, r.calls};
}

// A total order on what served a record, latest first: the merged record keeps the
// greatest, whatever the grouping.
auto ServedOrder(const MissRecord& m) {
  return std::tie(m.last_seen, m.served_by, m.served_from, m.kind, m.fallback, m.bucket_lo, m.bucket_hi);
}

// A key's sums, and its latest record (what served it).
struct MergedRecord {
  MissRecord latest;
  double first_seen = 0;
  uint64_t count = 0;
  uint64_t served_calls[kNumServedBy] = {};
  int64_t fallback_ns = 0, gain_ns = 0;
  int64_t served_ns[kNumServedBy] = {};
};

using SourceId = std::tuple<std::string, double, int64_t, double>;  // host, start, pid, generated_at
SourceId IdOf(const ReportSource& x) {
  return {x.host, x.process_start, x.pid, x.process_start > 0 ? 0.0 : x.generated_at};
}
std::vector<ReportSource> SourcesOf(const MissReport& r) {
  return r.sources.empty() ? std::vector<ReportSource>{SourceOf(r)} : r.sources;
}
std::string DuplicateSource(const std::string& a, const std::string& b, const ReportSource& x) {
  return fmt::format("{} and {} both hold the counts of process {} on host '{}' (started at {:.3f}): summing them "
                     "would count its calls twice; a later report of a process holds its earlier counts, merge only "
                     "the latest",
                     a, b, x.pid, x.host, x.process_start);
}

}  // namespace

struct MissReportMerger::State {
  MissReport out;
  std::map<SourceId, std::string> source_of;  // -> the report that brought it
  std::unordered_map<OpKey, MergedRecord, OpKeyHash> merged;
  std::string first_name;
  double max_speedup = 0;
  Sums sums;
  size_t reports = 0;
};

MissReportMerger::MissReportMerger() : s_(std::make_unique<State>()) {}
MissReportMerger::~MissReportMerger() = default;
MissReportMerger::MissReportMerger(MissReportMerger&&) noexcept = default;
MissReportMerger& MissReportMerger::operator=(MissReportMerger&&) noexcept = default;
size_t MissReportMerger::reports() const { return s_->reports; }

Status MissReportMerger::Add(const MissReport& r, const std::string& name) {
  State& s = *s_;
  MissReport& out = s.out;
  const std::string me = name.empty() ? fmt::format("report {}", s.reports + 1) : fmt::format("'{}'", name);
  if (s.reports == 0) {
    out.schema_version = r.schema_version;
    out.device_fingerprint = r.device_fingerprint;
    out.device_name = r.device_name;
    out.device_threads = r.device_threads;
    s.first_name = name.empty() ? "report 1" : fmt::format("'{}'", name);
    s.merged.reserve(r.records.size() * 2);
  }
  if (r.schema_version != out.schema_version)
    return FailedPrecondition(fmt::format("{} has schema_version {} but {} has {}: merge reports of one version", me,
                                          r.schema_version, s.first_name, out.schema_version));
  if (r.device_fingerprint != out.device_fingerprint)
    return FailedPrecondition(fmt::format(
        "{} is for device {} but {} is for device {}: a report sums the misses of one device; merge each device's "
        "reports separately",
        me, r.device_fingerprint, s.first_name, out.device_fingerprint));
  const std::vector<ReportSource> sources = SourcesOf(r);
  for (const ReportSource& x : sources)
    if (auto it = s.source_of.find(IdOf(x)); it != s.source_of.end())
      return FailedPrecondition(DuplicateSource(it->second, me, x));
  for (const ReportSource& x : sources) {
    s.source_of.emplace(IdOf(x), me);
    out.sources.push_back(x);
  }
  ++s.reports;
  out.generated_at = std::max(out.generated_at, r.generated_at);
  s.sums.Add(out.hits, r.hits);
  s.sums.Add(out.misses, r.misses);
  s.sums.Add(out.calls, r.calls);
  s.max_speedup = std::max(s.max_speedup, r.expected_speedup);
  for (const MissRecord& m : r.records) {
    auto [it, added] = s.merged.try_emplace(m.key);
    MergedRecord& g = it->second;
    if (added) {
      g.latest = m;
      g.first_seen = m.first_seen;
    } else {
      g.first_seen = std::min(g.first_seen, m.first_seen);
      if (ServedOrder(m) > ServedOrder(g.latest)) g.latest = m;
    }
    s.sums.Add(g.count, m.count);
    s.sums.AddUs(g.fallback_ns, m.fallback_us_total);
    s.sums.AddUs(g.gain_ns, m.expected_gain_us);
    for (int k = 0; k < kNumServedBy; ++k) {
      s.sums.Add(g.served_calls[k], m.served_calls[k]);
      s.sums.AddUs(g.served_ns[k], m.served_us[k]);
    }
  }
  return Status::Ok();
}

StatusOr<MissReport> MissReportMerger::Finish() const {
  const State& s = *s_;
  if (s.reports == 0) return InvalidArgument("no miss report to merge");
  MissReport out = s.out;
  Sums sums = s.sums;
  std::sort(out.sources.begin(), out.sources.end(), [](const ReportSource& a, const ReportSource& b) {
    return std::tie(a.host, a.process_start, a.pid, a.generated_at) < std::tie(b.host, b.process_start, b.pid, b.generated_at);
  });
  int64_t default_ns = 0, gain_ns = 0;
  out.served[static_cast<int>(ServedBy::kExact)] = out.hits;
  int64_t served_ns[kNumServedBy] = {};
  out.records.reserve(s.merged.size());
  for (const auto& [key, g] : s.merged) {
    MissRecord m = g.latest;
    m.first_seen = g.first_seen;
    m.count = g.count;
    std::copy(std::begin(g.served_calls), std::end(g.served_calls), m.served_calls);
    m.fallback_us_total = Micros(g.fallback_ns);
    m.expected_gain_us = Micros(g.gain_ns);
    sums.Add(gain_ns, g.gain_ns);
    for (int k = 0; k < kNumServedBy; ++k) {
      m.served_us[k] = Micros(g.served_ns[k]);
      sums.Add(out.served[k], m.served_calls[k]);
      sums.Add(served_ns[k], g.served_ns[k]);
      if (k != static_cast<int>(ServedBy::kExact) && !ServedByTunedKey(static_cast<ServedBy>(k)))
        sums.Add(default_ns, g.served_ns[k]);
    }
    out.records.push_back(std::move(m));
  }
  if (sums.overflow)
    return OutOfRange(fmt::format("the merged counts or times of {} reports exceed 64 bits (or 292 years of time)",
                                  s.reports));
  for (int k = 0; k < kNumServedBy; ++k) out.served_us[k] = Micros(served_ns[k]);
  if (default_ns > 0 && gain_ns == 0) {
    out.expected_speedup = 1.0;
    out.expected_speedup_basis = "no merged process had measured tuned speed-ups: gain unknown";
  } else if (default_ns > 0) {
    out.expected_speedup = gain_ns < default_ns ? double(default_ns) / double(default_ns - gain_ns) : s.max_speedup;
    out.expected_speedup_basis = fmt::format(
        "implied by the expected gains of {} merged processes over their time in defaults (each priced by its "
        "own runtime's loaded bundles)", out.sources.size());
  } else {
    out.expected_speedup = s.max_speedup;
    out.expected_speedup_basis =
        fmt::format("the largest of {} merged processes (no time in defaults to weigh them)", out.sources.size());
  }
  RankMissRecords(out);
  out.buckets = BucketTrafficOf(out.records);
  out.recommended_buckets = RecommendBuckets(out.records, out.expected_speedup);
  return out;
}

StatusOr<MissReport> MergeMissReports(const std::vector<MissReport>& reports, const std::vector<std::string>& names) {
  MissReportMerger merger;
  for (size_t i = 0; i < reports.size(); ++i)
    CG_RETURN_IF_ERROR(merger.Add(reports[i], i < names.size() ? names[i] : ""));
  return merger.Finish();
}

namespace {

// The report's JSON text, written directly (a report of a busy process holds tens of
// thousands of records and is rewritten while serving). Multiline: one top-level
// field, and one element of a top-level array, per line.
class JsonOut {
 public:
  explicit JsonOut(bool multiline) : multiline_(multiline) { out_.reserve(1 << 16); }
  void Open(char c) {
    Item();
    out_.push_back(c);
    first_.push_back(true);
  }
  void Close(char c) {
    const bool empty = first_.back();
    first_.pop_back();
    if (multiline_ && !empty && first_.size() < 2) Newline();
    out_.push_back(c);
  }
  void Key(std::string_view k) {
    Item();
    String(k);
    out_.push_back(':');
    if (multiline_) out_.push_back(' ');
    pending_value_ = true;
  }
  void Str(std::string_view v) {
    Item();
    String(v);
  }
  void Num(double v) {
    Item();
    if (std::isfinite(v)) fmt::format_to(std::back_inserter(out_), FMT_COMPILE("{}"), v);
    else out_.append("null");
  }
  void Int(int64_t v) {
    Item();
    fmt::format_to(std::back_inserter(out_), FMT_COMPILE("{}"), v);
  }
  void UInt(uint64_t v) {
    Item();
    fmt::format_to(std::back_inserter(out_), FMT_COMPILE("{}"), v);
  }
  template <typename T>
  void Field(std::string_view k, const T& v) {
    Key(k);
    if constexpr (std::is_same_v<T, double>) Num(v);
    else if constexpr (std::is_same_v<T, uint64_t>) UInt(v);
    else if constexpr (std::is_integral_v<T>) Int(int64_t(v));
    else Str(v);
  }
  void Range(std::string_view k, int64_t lo, int64_t hi) {
    Key(k);
    Open('[');
    Int(lo);
    Int(hi);
    Close(']');
  }
  std::string Take() { return std::move(out_); }

 private:
  void Newline() {
    out_.push_back('\n');
    out_.append(2 * first_.size(), ' ');
  }
  // Before a value or key: the separator, and in multiline mode the line break.
  void Item() {
    if (pending_value_) {
      pending_value_ = false;
      return;
    }
    if (first_.empty()) return;
    const bool first = first_.back();
    first_.back() = false;
    if (!first) out_.push_back(',');
    if (multiline_ && first_.size() <= 2) Newline();
    else if (multiline_ && !first) out_.push_back(' ');
  }
  // A JSON string; bytes that are not UTF-8 become U+FFFD.
  void String(std::string_view s) {
    out_.push_back('"');
    for (size_t i = 0; i < s.size();) {
      size_t plain = i;  // the run of bytes that need no escaping, appended at once
      while (plain < s.size()) {
        const auto c = static_cast<unsigned char>(s[plain]);
        if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') break;
        ++plain;
      }
      out_.append(s.data() + i, plain - i);
      i = plain;
      if (i == s.size()) break;
      const auto c = static_cast<unsigned char>(s[i]);
      if (c == '"' || c == '\\') {
        out_.push_back('\\');
        out_.push_back(char(c));
        ++i;
      } else if (c < 0x20) {
        fmt::format_to(std::back_inserter(out_), "\\u{:04x}", c);
        ++i;
      } else {
        const size_t n = detail::JsonPull::Utf8SequenceLength(s.substr(i));
        if (n) out_.append(s.substr(i, n));
        else out_.append("\xEF\xBF\xBD");
        i += n ? n : 1;
      }
    }
    out_.push_back('"');
  }


  bool multiline_;
  bool pending_value_ = false;
  std::vector<bool> first_;
  std::string out_;
};

}  // namespace

std::string MissReportToJson(const MissReport& r, bool multiline) {
  JsonOut j(multiline);
  j.Open('{');
  j.Field("schema_version", r.schema_version);
  j.Key("device");
  j.Open('{');
  j.Field("fingerprint", r.device_fingerprint);
  j.Field("name", r.device_name);
  if (r.device_threads > 0) j.Field("threads", r.device_threads);
  j.Close('}');
  if (!r.host.empty()) j.Field("host", r.host);
  if (r.pid > 0) j.Field("pid", r.pid);
  if (r.process_start > 0) j.Field("process_start", r.process_start);
  if (!r.runtime_version.empty()) j.Field("runtime_version", r.runtime_version);
  j.Field("generated_at", r.generated_at);
  if (!r.sources.empty()) {
    j.Key("sources");
    j.Open('[');
    for (const ReportSource& x : r.sources) {
      j.Open('{');
      j.Field("host", x.host);
      j.Field("pid", x.pid);
      j.Field("process_start", x.process_start);
      j.Field("runtime_version", x.runtime_version);
      j.Field("generated_at", x.generated_at);
      j.Field("calls", x.calls);
      j.Close('}');
    }
    j.Close(']');
  }
  j.Field("calls", r.calls);
  j.Field("hits", r.hits);
  j.Field("misses", r.misses);
  j.Field("expected_speedup", r.expected_speedup);
  if (!r.expected_speedup_basis.empty()) j.Field("expected_speedup_basis", r.expected_speedup_basis);
  j.Key("served");
  j.Open('{');
  for (int i = 0; i < kNumServedBy; ++i) j.Field(ServedByName(static_cast<ServedBy>(i)), r.served[i]);
  j.Close('}');
  j.Key("served_us");
  j.Open('{');
  for (int i = 0; i < kNumServedBy; ++i)
    if (i != static_cast<int>(ServedBy::kExact)) j.Field(ServedByName(static_cast<ServedBy>(i)), r.served_us[i]);
  j.Close('}');
  j.Key("records");
  j.Open('[');
  int64_t rank = 0;
  for (const MissRecord& m : r.records) {
    j.Open('{');
    j.Field("rank", ++rank);
    j.Field("key", m.key.ToString());
    j.Field("kind", std::string_view(MissKindName(m.kind)));
    j.Field("count", m.count);
    j.Field("first_seen", m.first_seen);
    j.Field("last_seen", m.last_seen);
    j.Field("fallback_us_total", m.fallback_us_total);
    j.Field("fallback", m.fallback);
    j.Field("expected_gain_us", m.expected_gain_us);
    j.Field("served_by", std::string_view(ServedByName(m.served_by)));
    if (!m.served_from.empty()) j.Field("served_from", m.served_from);
    if (m.bucket_hi > 0) j.Range("bucket", m.bucket_lo, m.bucket_hi);
    // No split when every call ran served_by (the reader's rule: then count and
    // fallback_us_total are its calls and time).
    const int by = static_cast<int>(m.served_by);
    bool one_kind = m.served_calls[by] == m.count && m.served_us[by] == m.fallback_us_total;
    for (int i = 0; i < kNumServedBy; ++i)
      if (i != by && (m.served_calls[i] || m.served_us[i] != 0)) one_kind = false;
    bool any = false;
    for (int i = 0; i < kNumServedBy && !one_kind; ++i) {
      if (!m.served_calls[i]) continue;
      if (!any) {
        j.Key("served");
        j.Open('{');
        any = true;
      }
      j.Key(ServedByName(static_cast<ServedBy>(i)));
      j.Open('{');
      j.Field("calls", m.served_calls[i]);
      j.Field("us", m.served_us[i]);
      j.Close('}');
    }
    if (any) j.Close('}');
    j.Close('}');
  }
  j.Close(']');
  j.Key("buckets");
  j.Open('[');
  for (const BucketTraffic& b : r.buckets) {
    j.Open('{');
    j.Field("key", b.key.ToString());
    j.Range("range", b.lo, b.hi);
    j.Field("keys", b.keys);
    j.Field("calls", b.calls);
    j.Field("us_total", b.us_total);
    j.Close('}');
  }
  j.Close(']');
  j.Key("recommended_buckets");
  j.Open('[');
  for (const BucketRecommendation& b : r.recommended_buckets) {
    j.Open('{');
    j.Field("key", b.key.ToString());
    j.Range("range", b.lo, b.hi);
    j.Field("keys", b.keys);
    j.Field("calls", b.calls);
    j.Field("default_us_total", b.default_us_total);
    j.Field("expected_gain_us", b.expected_gain_us);
    j.Close('}');
  }
  j.Close(']');
  j.Close('}');
  return j.Take();
}

namespace {

using detail::JsonPull;

// Reads a miss report's fields in document order (a fleet merge parses hundreds of
// megabytes of them). Each error names the field's path, the value and the rule;
// the first one ends the read.
// Where a field is, for messages: built only when a message needs it.
struct Path {
  explicit Path(std::string_view b, size_t i = SIZE_MAX, std::string_view f = {}, std::string_view s = {})
      : base(b), index(i), field(f), sub(s) {}
  std::string_view base;
  size_t index;  // of an array element; SIZE_MAX: none
  std::string_view field, sub;
  std::string Str() const {
    std::string out(base);
    if (index != SIZE_MAX) out += fmt::format("[{}]", index);
    if (!field.empty()) out += fmt::format(".{}", field);
    if (!sub.empty()) out += fmt::format(".{}", sub);
    return out;
  }
};

class ReportParser {
 public:
  explicit ReportParser(std::string_view text) : p_(text) {}

  StatusOr<MissReport> Parse(size_t text_bytes) {
    if (p_.Peek() != JsonPull::Kind::kObject)
      return p_.ok() ? InvalidArgument("miss report: the top level must be an object") : Syntax();
    MissReport r;
    r.records.reserve(text_bytes / 400);  // about what a record takes
    bool have[6] = {};  // schema_version, device, calls, hits, misses, records
    p_.BeginObject();
    const Path top{"miss report"};
    for (std::string_view k; p_.NextMember(k);) {
      bool ok = true;
      if (k == "schema_version") {
        int64_t v = 0;
        ok = Int(top, "schema_version", v, -1, 1 << 20);
        if (ok && v != 1)
          return FailedPrecondition(fmt::format("miss report: schema_version {} is not 1 (the version this build reads)", v));
        r.schema_version = int(v);
        have[0] = true;
      } else if (k == "device") {
        ok = Device(r);
        have[1] = true;
      } else if (k == "host") {
        ok = Str(top, "host", r.host);
      } else if (k == "pid") {
        ok = Int(top, "pid", r.pid, 0, INT64_MAX);
      } else if (k == "process_start") {
        ok = Num(top, "process_start", r.process_start);
      } else if (k == "runtime_version") {
        ok = Str(top, "runtime_version", r.runtime_version);
      } else if (k == "generated_at") {
        ok = Num(top, "generated_at", r.generated_at);
      } else if (k == "calls") {
        ok = UInt(top, "calls", r.calls);
        have[2] = true;
      } else if (k == "hits") {
        ok = UInt(top, "hits", r.hits);
        have[3] = true;
      } else if (k == "misses") {
        ok = UInt(top, "misses", r.misses);
        have[4] = true;
      } else if (k == "expected_speedup") {
        ok = Num(top, "expected_speedup", r.expected_speedup);
      } else if (k == "expected_speedup_basis") {
        ok = Str(top, "expected_speedup_basis", r.expected_speedup_basis);
      } else if (k == "sources") {
        ok = Sources(r);
      } else if (k == "records") {
        ok = Records(r);
        have[5] = true;
      } else if (k == "buckets") {
        ok = Buckets(r);
      } else if (k == "recommended_buckets") {
        ok = Recommended(r);
      } else {
        ok = p_.Skip();
      }
      if (!ok) return Error();
    }
    if (!p_.End()) return Error();
    const char* names[6] = {"schema_version", "device", "calls", "hits", "misses", "records"};
    for (int i = 0; i < 6; ++i)
      if (!have[i]) return InvalidArgument(fmt::format("miss report: field '{}' is required", names[i]));
    return r;
  }

 private:
  Status Syntax() const { return InvalidArgument(fmt::format("miss report: not valid JSON ({})", p_.error())); }
  Status Error() const { return bad_.ok() ? Syntax() : bad_; }
  bool Bad(std::string m) {
    if (bad_.ok()) bad_ = InvalidArgument(std::move(m));
    return false;
  }
  bool Str(const Path& path, std::string_view name, std::string& out) {
    if (p_.Peek() != JsonPull::Kind::kString)
      return p_.ok() && Bad(fmt::format("{}.{} must be a string, got {}", path.Str(), name, p_.Preview()));
    return p_.String(out);
  }
  bool Number(const Path& path, std::string_view name, JsonPull::Number& n, const char* rule) {
    if (p_.Peek() != JsonPull::Kind::kNumber)
      return p_.ok() && Bad(fmt::format("{}.{} must be {}, got {}", path.Str(), name, rule, p_.Preview()));
    return p_.ReadNumber(n);
  }
  bool UInt(const Path& path, std::string_view name, uint64_t& out) {
    JsonPull::Number n;
    if (!Number(path, name, n, "a non-negative integer")) return false;
    if (!n.integer || n.negative)
      return Bad(fmt::format("{}.{} must be a non-negative integer, got {}", path.Str(), name, n.d));
    out = n.u;
    return true;
  }
  bool Int(const Path& path, std::string_view name, int64_t& out, int64_t lo, int64_t hi) {
    JsonPull::Number n;
    if (!Number(path, name, n, "an integer")) return false;
    if (!n.integer) return Bad(fmt::format("{}.{} must be an integer, got {}", path.Str(), name, n.d));
    const int64_t v = n.negative ? (n.u == uint64_t{1} << 63 ? INT64_MIN : -int64_t(n.u))
                                 : (n.u > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(n.u));
    if (v < lo || v > hi) return Bad(fmt::format("{}.{}={} must be in [{}, {}]", path.Str(), name, v, lo, hi));
    out = v;
    return true;
  }
  bool Int(const Path& path, std::string_view name, int& out, int64_t lo, int64_t hi) {
    int64_t v = 0;
    if (!Int(path, name, v, lo, hi)) return false;
    out = int(v);
    return true;
  }
  // A finite number >= 0.
  bool Num(const Path& path, std::string_view name, double& out) {
    JsonPull::Number n;
    if (!Number(path, name, n, "a number")) return false;
    if (n.d < 0) return Bad(fmt::format("{}.{}={} must be a finite number >= 0", path.Str(), name, n.d));
    out = n.d;
    return true;
  }
  // "[lo, hi]" of the varying dimension, 1 <= lo <= hi.
  bool Range(const Path& path, std::string_view name, int64_t& lo, int64_t& hi) {
    const std::string rule = fmt::format("{}.{} must be [lo, hi], integers with 1 <= lo <= hi", path.Str(), name);
    if (p_.Peek() != JsonPull::Kind::kArray) return p_.ok() && Bad(rule);
    p_.BeginArray();
    int64_t v[2] = {0, 0};
    int n = 0;
    while (p_.NextElement()) {
      JsonPull::Number x;
      if (n >= 2 || p_.Peek() != JsonPull::Kind::kNumber) return p_.ok() && Bad(rule);
      if (!p_.ReadNumber(x)) return false;
      if (!x.integer || x.negative || x.u > uint64_t(INT64_MAX)) return Bad(rule);
      v[n++] = int64_t(x.u);
    }
    if (!p_.ok()) return false;
    if (n != 2 || v[0] < 1 || v[0] > v[1]) return Bad(rule);
    lo = v[0];
    hi = v[1];
    return true;
  }
  bool Key(const Path& path, OpKey& out) {
    if (!Str(path, "key", text_)) return false;
    auto key = OpKey::Parse(text_);
    if (!key.ok()) return Bad(fmt::format("{}.key: {}", path.Str(), key.status().message()));
    out = *key;
    return true;
  }
  bool Required(const Path& path, std::initializer_list<std::pair<bool, const char*>> fields) {
    for (const auto& [have, name] : fields)
      if (!have) return Bad(fmt::format("{}: field '{}' is required", path.Str(), name));
    return true;
  }
  // Reads the members of an object at `path` with `member(key)`, which reads the value.
  template <typename Member>
  bool Members(const Path& path, Member&& member) {
    if (p_.Peek() != JsonPull::Kind::kObject) return p_.ok() && Bad(fmt::format("{} must be an object", path.Str()));
    p_.BeginObject();
    for (std::string_view k; p_.NextMember(k);)
      if (!member(k)) return false;
    return p_.ok();
  }
  template <typename Element>
  bool Elements(const Path& path, Element&& element) {
    if (p_.Peek() != JsonPull::Kind::kArray) return p_.ok() && Bad(fmt::format("{} must be an array", path.Str()));
    p_.BeginArray();
    for (size_t i = 0; p_.NextElement(); ++i)
      if (!element(i)) return false;
    return p_.ok();
  }

  bool Device(MissReport& r) {
    const Path path{"miss report.device"};
    bool fingerprint = false;
    return Members(path,
                   [&](std::string_view k) {
                     if (k == "fingerprint") return fingerprint = true, Str(path, k, r.device_fingerprint);
                     if (k == "name") return Str(path, k, r.device_name);
                     if (k == "threads") return Int(path, k, r.device_threads, 1, 1024);
                     return p_.Skip();
                   }) &&
           Required(path, {{fingerprint, "fingerprint"}});
  }
  bool Sources(MissReport& r) {
    return Elements(Path{"miss report.sources"}, [&](size_t i) {
      const Path path{"miss report: sources", i};
      ReportSource x;
      bool h[6] = {};
      return Members(path,
                     [&](std::string_view k) {
                       if (k == "host") return h[0] = true, Str(path, k, x.host);
                       if (k == "pid") return h[1] = true, Int(path, k, x.pid, 0, INT64_MAX);
                       if (k == "process_start") return h[2] = true, Num(path, k, x.process_start);
                       if (k == "runtime_version") return h[3] = true, Str(path, k, x.runtime_version);
                       if (k == "generated_at") return h[4] = true, Num(path, k, x.generated_at);
                       if (k == "calls") return h[5] = true, UInt(path, k, x.calls);
                       return p_.Skip();
                     }) &&
             Required(path, {{h[0], "host"}, {h[1], "pid"}, {h[2], "process_start"}, {h[3], "runtime_version"},
                             {h[4], "generated_at"}, {h[5], "calls"}}) &&
             (r.sources.push_back(std::move(x)), true);
    });
  }
  bool Records(MissReport& r) {
    return Elements(Path{"miss report.records"}, [&](size_t i) {
      const Path path{"miss report: records", i};
      MissRecord m;
      bool h[6] = {}, per = false;
      std::string kind, served_by;
      uint64_t sum = 0;
      const bool ok = Members(path, [&](std::string_view k) {
        if (k == "rank") return p_.Skip();  // the writer's, recomputed
        if (k == "key") return h[0] = true, Key(path, m.key);
        if (k == "kind") return h[1] = true, Str(path, k, kind);
        if (k == "count") return h[2] = true, UInt(path, k, m.count);
        if (k == "first_seen") return h[3] = true, Num(path, k, m.first_seen);
        if (k == "last_seen") return h[4] = true, Num(path, k, m.last_seen);
        if (k == "fallback_us_total") return h[5] = true, Num(path, k, m.fallback_us_total);
        if (k == "expected_gain_us") return Num(path, k, m.expected_gain_us);
        if (k == "fallback") return Str(path, k, m.fallback);
        if (k == "served_by") return Str(path, k, served_by);
        if (k == "served_from") return Str(path, k, m.served_from);
        if (k == "bucket") return Range(path, k, m.bucket_lo, m.bucket_hi);
        if (k == "served") {
          per = true;
          std::fill(std::begin(m.served_calls), std::end(m.served_calls), 0);
          std::fill(std::begin(m.served_us), std::end(m.served_us), 0.0);
          sum = 0;
          return Members(Path{path.base, path.index, "served"}, [&](std::string_view key) {
            const std::string name(key);
            auto s = ParseServedBy(name);
            if (!s.ok() || *s == ServedBy::kExact)
              return Bad(fmt::format("{}.served: '{}' is not a kind a miss is served by", path.Str(), name));
            const Path sub{path.base, path.index, "served", name};
            const int j = static_cast<int>(*s);
            bool calls = false, us = false;
            return Members(sub,
                           [&](std::string_view f) {
                             if (f == "calls") return calls = true, UInt(sub, f, m.served_calls[j]);
                             if (f == "us") return us = true, Num(sub, f, m.served_us[j]);
                             return p_.Skip();
                           }) &&
                   Required(sub, {{calls, "calls"}, {us, "us"}}) && (sum += m.served_calls[j], true);
          });
        }
        return p_.Skip();
      });
      if (!ok || !Required(path, {{h[0], "key"}, {h[1], "kind"}, {h[2], "count"}, {h[3], "first_seen"},
                                  {h[4], "last_seen"}, {h[5], "fallback_us_total"}}))
        return false;
      auto mk = ParseMissKind(kind);
      if (!mk.ok()) return Bad(fmt::format("{}.kind: {}", path.Str(), mk.status().message()));
      m.kind = *mk;
      if (!served_by.empty()) {
        auto s = ParseServedBy(served_by);
        if (!s.ok()) return Bad(fmt::format("{}.served_by: {}", path.Str(), s.status().message()));
        m.served_by = *s;
      }
      if (m.served_by == ServedBy::kBucket && m.bucket_hi == 0)
        return Bad(fmt::format("{}.bucket is missing: a record served by a bucket names its range", path.Str()));
      if (per && sum != m.count)
        return Bad(fmt::format("{}.served: {} calls in total but count is {}", path.Str(), sum, m.count));
      if (!per) {  // reports written before served kinds (every miss ran a default), or without a split
        m.served_calls[static_cast<int>(m.served_by)] = m.count;
        m.served_us[static_cast<int>(m.served_by)] = m.fallback_us_total;
      }
      r.records.push_back(std::move(m));
      return true;
    });
  }
  bool Buckets(MissReport& r) {
    return Elements(Path{"miss report.buckets"}, [&](size_t i) {
      const Path path{"miss report: buckets", i};
      BucketTraffic b;
      bool h[5] = {};
      return Members(path,
                     [&](std::string_view k) {
                       if (k == "key") return h[0] = true, Key(path, b.key);
                       if (k == "range") return h[1] = true, Range(path, k, b.lo, b.hi);
                       if (k == "keys") return h[2] = true, UInt(path, k, b.keys);
                       if (k == "calls") return h[3] = true, UInt(path, k, b.calls);
                       if (k == "us_total") return h[4] = true, Num(path, k, b.us_total);
                       return p_.Skip();
                     }) &&
             (h[1] || Bad(fmt::format("{}.range is missing: [lo, hi] is required", path.Str()))) &&
             Required(path, {{h[0], "key"}, {h[2], "keys"}, {h[3], "calls"}, {h[4], "us_total"}}) &&
             (r.buckets.push_back(b), true);
    });
  }
  bool Recommended(MissReport& r) {
    return Elements(Path{"miss report.recommended_buckets"}, [&](size_t i) {
      const Path path{"miss report: recommended_buckets", i};
      BucketRecommendation b;
      bool h[6] = {};
      if (!Members(path, [&](std::string_view k) {
            if (k == "key") return h[0] = true, Key(path, b.key);
            if (k == "range") return h[1] = true, Range(path, k, b.lo, b.hi);
            if (k == "keys") return h[2] = true, UInt(path, k, b.keys);
            if (k == "calls") return h[3] = true, UInt(path, k, b.calls);
            if (k == "default_us_total") return h[4] = true, Num(path, k, b.default_us_total);
            if (k == "expected_gain_us") return h[5] = true, Num(path, k, b.expected_gain_us);
            return p_.Skip();
          }))
        return false;
      if (!h[1]) return Bad(fmt::format("{}.range is missing: [lo, hi] is required", path.Str()));
      if (!Required(path, {{h[0], "key"}, {h[2], "keys"}, {h[3], "calls"}, {h[4], "default_us_total"},
                           {h[5], "expected_gain_us"}}))
        return false;
      const int64_t v = b.key.dims[kVaryingDim];
      if (v < b.lo || v > b.hi)
        return Bad(fmt::format("{}: the key's {}={} is outside its range [{}, {}]", path.Str(), VaryingDimName(b.key.op), v,
                               b.lo, b.hi));
      r.recommended_buckets.push_back(b);
      return true;
    });
  }

  JsonPull p_;
  Status bad_;
  std::string text_;
};

// The report, checked; ranked when `rank` (a merge ranks only its result).
StatusOr<MissReport> ParseReport(std::string_view text, bool rank) {
  CG_ASSIGN_OR_RETURN(MissReport r, ReportParser(text).Parse(text.size()));
  r.served[static_cast<int>(ServedBy::kExact)] = r.hits;
  for (const MissRecord& m : r.records)
    for (int i = 0; i < kNumServedBy; ++i) {
      r.served[i] += m.served_calls[i];
      r.served_us[i] += m.served_us[i];
    }
  uint64_t sum = 0;
  for (const auto& m : r.records) sum += m.count;
  if (sum != r.misses)
    return InvalidArgument(fmt::format("miss report: records count {} in total but 'misses' is {}", sum, r.misses));
  if (r.hits + r.misses != r.calls)
    return InvalidArgument(fmt::format("miss report: hits {} + misses {} != calls {}", r.hits, r.misses, r.calls));
  if (rank) RankMissRecords(r);
  return r;
}

}  // namespace

StatusOr<MissReport> MissReportFromJson(std::string_view text) { return ParseReport(text, /*rank=*/true); }

StatusOr<std::vector<MissReport>> ReadMissReportFiles(const std::vector<std::string>& paths) {
  std::vector<StatusOr<MissReport>> parsed(paths.size(), InvalidArgument("not read"));
  const size_t workers = std::min<size_t>(paths.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < paths.size();) {
      auto bytes = ReadFileBytes(paths[i], int64_t{1} << 30);
      if (!bytes.ok()) {
        parsed[i] = bytes.status();
        continue;
      }
      auto r = MissReportFromJson(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
      parsed[i] = r.ok() ? std::move(r)
                         : StatusOr<MissReport>(Status(r.status().code(), fmt::format("'{}': {}", paths[i], r.status().message())));
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < workers; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  std::vector<MissReport> out;
  out.reserve(paths.size());
  for (auto& r : parsed) {
    if (!r.ok()) return r.status();
    out.push_back(std::move(*r));
  }
  return out;
}

StatusOr<MissReport> MergeMissReportFiles(const std::vector<std::string>& paths) {
  if (paths.empty()) return InvalidArgument("no miss report to merge");
  const size_t workers = std::min<size_t>(paths.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<MissReportMerger> partial(workers);
  std::vector<std::string> first(workers);  // each partial's first file, to name it
  std::vector<Status> failed(workers);
  std::mutex mu;
  std::map<SourceId, std::string> source_of;  // every process seen -> its file
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  auto work = [&](size_t w) {
    for (size_t i; !stop && (i = next.fetch_add(1)) < paths.size();) {
      Status st = [&]() -> Status {
        CG_ASSIGN_OR_RETURN(auto bytes, ReadFileBytes(paths[i], int64_t{1} << 30));
        auto r = ParseReport(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), false);
        if (!r.ok()) return Status(r.status().code(), fmt::format("'{}': {}", paths[i], r.status().message()));
        {
          std::lock_guard<std::mutex> lock(mu);
          const std::vector<ReportSource> sources = SourcesOf(*r);
          for (const ReportSource& x : sources)
            if (auto it = source_of.find(IdOf(x)); it != source_of.end())
              return FailedPrecondition(DuplicateSource(it->second, fmt::format("'{}'", paths[i]), x));
          for (const ReportSource& x : sources) source_of.emplace(IdOf(x), fmt::format("'{}'", paths[i]));
        }
        if (first[w].empty()) first[w] = paths[i];
        return partial[w].Add(*r, paths[i]);
      }();
      if (!st.ok()) {
        failed[w] = st;
        stop = true;
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < workers; ++t) threads.emplace_back(work, t);
  work(0);
  for (auto& t : threads) t.join();
  for (const Status& st : failed)
    if (!st.ok()) return st;
  MissReportMerger merger;
  for (size_t w = 0; w < workers; ++w) {
    if (partial[w].reports() == 0) continue;
    CG_ASSIGN_OR_RETURN(MissReport part, partial[w].Finish());
    CG_RETURN_IF_ERROR(merger.Add(part, partial[w].reports() == 1 ? first[w]
                                                                  : fmt::format("{} and the {} merged with it", first[w],
                                                                                partial[w].reports() - 1)));
  }
  return merger.Finish();
}

}  // namespace cliffguard
