#include "cliffguard/miss_report.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <map>
#include <thread>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cliffguard/detail/json_reader.h"
#include "cliffguard/file_io.h"

namespace cliffguard {

using nlohmann::ordered_json;

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
  std::stable_sort(report.records.begin(), report.records.end(), [](const MissRecord& a, const MissRecord& b) {
    if (a.expected_gain_us != b.expected_gain_us) return a.expected_gain_us > b.expected_gain_us;
    if (a.fallback_us_total != b.fallback_us_total) return a.fallback_us_total > b.fallback_us_total;
    if (a.count != b.count) return a.count > b.count;
    return KeyOrder(a.key) < KeyOrder(b.key);
  });
}

std::vector<BucketTraffic> BucketTrafficOf(const std::vector<MissRecord>& records) {
  constexpr int kB = static_cast<int>(ServedBy::kBucket);
  std::vector<BucketTraffic> out;
  std::unordered_map<std::string, size_t> at;  // serving key text -> index in out
  for (const MissRecord& m : records) {
    if (m.served_by != ServedBy::kBucket || m.served_calls[kB] == 0) continue;
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
    Add(acc, std::llround(us * 1000.0));
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

struct MergedRecord {
  MissRecord rec;
  int64_t fallback_ns = 0, gain_ns = 0;
  int64_t served_ns[kNumServedBy] = {};
};

}  // namespace

StatusOr<MissReport> MergeMissReports(const std::vector<MissReport>& reports, const std::vector<std::string>& names) {
  if (reports.empty()) return InvalidArgument("no miss report to merge");
  auto name = [&](size_t i) { return i < names.size() ? fmt::format("'{}'", names[i]) : fmt::format("report {}", i + 1); };
  const MissReport& first = reports[0];
  MissReport out;
  out.schema_version = first.schema_version;
  out.device_fingerprint = first.device_fingerprint;
  out.device_name = first.device_name;
  out.device_threads = first.device_threads;
  std::map<std::tuple<std::string, double, int64_t, double>, size_t> source_of;  // (host, start, pid, at) -> report
  std::unordered_map<OpKey, MergedRecord, OpKeyHash> merged;
  double max_speedup = 0;
  Sums sums;
  for (size_t i = 0; i < reports.size(); ++i) {
    const MissReport& r = reports[i];
    if (r.schema_version != first.schema_version)
      return FailedPrecondition(fmt::format("{} has schema_version {} but {} has {}: merge reports of one version",
                                            name(i), r.schema_version, name(0), first.schema_version));
    if (r.device_fingerprint != first.device_fingerprint)
      return FailedPrecondition(fmt::format(
          "{} is for device {} but {} is for device {}: a report sums the misses of one device; merge each "
          "device's reports separately",
          name(i), r.device_fingerprint, name(0), first.device_fingerprint));
    std::vector<ReportSource> sources = r.sources;
    if (sources.empty()) sources.push_back(SourceOf(r));
    for (const ReportSource& x : sources) {
      const auto id = std::make_tuple(x.host, x.process_start, x.pid, x.process_start > 0 ? 0.0 : x.generated_at);
      auto [it, added] = source_of.try_emplace(id, i);
      if (!added)
        return FailedPrecondition(fmt::format(
            "{} and {} both hold the counts of process {} on host '{}' (started at {:.3f}): summing them would "
            "count its calls twice; a later report of a process holds its earlier counts, merge only the latest",
            name(it->second), name(i), x.pid, x.host, x.process_start));
      out.sources.push_back(x);
    }
    out.generated_at = std::max(out.generated_at, r.generated_at);
    sums.Add(out.hits, r.hits);
    sums.Add(out.misses, r.misses);
    sums.Add(out.calls, r.calls);
    max_speedup = std::max(max_speedup, r.expected_speedup);
    for (const MissRecord& m : r.records) {
      auto [it, added] = merged.try_emplace(m.key);
      MergedRecord& g = it->second;
      if (added) {
        g.rec = m;
        g.rec.count = 0;
        std::fill(std::begin(g.rec.served_calls), std::end(g.rec.served_calls), 0);
      } else {
        g.rec.first_seen = std::min(g.rec.first_seen, m.first_seen);
        if (ServedOrder(m) > ServedOrder(g.rec)) {
          const double first_seen = g.rec.first_seen;
          const uint64_t count = g.rec.count;
          uint64_t calls[kNumServedBy];
          std::copy(std::begin(g.rec.served_calls), std::end(g.rec.served_calls), calls);
          g.rec = m;
          g.rec.first_seen = first_seen;
          g.rec.count = count;
          std::copy(std::begin(calls), std::end(calls), g.rec.served_calls);
        }
      }
      sums.Add(g.rec.count, m.count);
      sums.AddUs(g.fallback_ns, m.fallback_us_total);
      sums.AddUs(g.gain_ns, m.expected_gain_us);
      for (int k = 0; k < kNumServedBy; ++k) {
        sums.Add(g.rec.served_calls[k], m.served_calls[k]);
        sums.AddUs(g.served_ns[k], m.served_us[k]);
      }
    }
  }
  std::sort(out.sources.begin(), out.sources.end(), [](const ReportSource& a, const ReportSource& b) {
    return std::tie(a.host, a.process_start, a.pid, a.generated_at) < std::tie(b.host, b.process_start, b.pid, b.generated_at);
  });
  int64_t default_ns = 0, gain_ns = 0;
  out.served[static_cast<int>(ServedBy::kExact)] = out.hits;
  int64_t served_ns[kNumServedBy] = {};
  out.records.reserve(merged.size());
  for (auto& [key, g] : merged) {
    MissRecord& m = g.rec;
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
                                  reports.size()));
  for (int k = 0; k < kNumServedBy; ++k) out.served_us[k] = Micros(served_ns[k]);
  if (default_ns > 0 && gain_ns == 0) {
    out.expected_speedup = 1.0;
    out.expected_speedup_basis = "no merged process had measured tuned speed-ups: gain unknown";
  } else if (default_ns > 0) {
    out.expected_speedup = gain_ns < default_ns ? double(default_ns) / double(default_ns - gain_ns) : max_speedup;
    out.expected_speedup_basis = fmt::format(
        "implied by the expected gains of {} merged processes over their time in defaults (each priced by its "
        "own runtime's loaded bundles)", out.sources.size());
  } else {
    out.expected_speedup = max_speedup;
    out.expected_speedup_basis =
        fmt::format("the largest of {} merged processes (no time in defaults to weigh them)", out.sources.size());
  }
  RankMissRecords(out);
  out.buckets = BucketTrafficOf(out.records);
  out.recommended_buckets = RecommendBuckets(out.records, out.expected_speedup);
  return out;
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
    if (std::isfinite(v)) fmt::format_to(std::back_inserter(out_), "{}", v);
    else out_.append("null");
  }
  void Int(int64_t v) {
    Item();
    fmt::format_to(std::back_inserter(out_), "{}", v);
  }
  void UInt(uint64_t v) {
    Item();
    fmt::format_to(std::back_inserter(out_), "{}", v);
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
        const size_t n = Utf8Length(s.substr(i));
        if (n) out_.append(s.substr(i, n));
        else out_.append("\xEF\xBF\xBD");
        i += n ? n : 1;
      }
    }
    out_.push_back('"');
  }
  // The length of the well-formed UTF-8 sequence at the start of s, or 0.
  static size_t Utf8Length(std::string_view s) {
    const auto b = [&](size_t i) { return i < s.size() ? static_cast<unsigned char>(s[i]) : 0u; };
    const unsigned c = b(0);
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 0;
    if (b(1) < lo || b(1) > hi) return 0;
    for (size_t i = 2; i < n; ++i)
      if (b(i) < 0x80 || b(i) > 0xBF) return 0;
    return n;
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
    bool any = false;  // no split: every call ran served_by (the reader's rule)
    for (int i = 0; i < kNumServedBy; ++i) {
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

// o[name] as "[lo, hi]" of the varying dimension, 1 <= lo <= hi. When absent: an error
// if `required`, else lo and hi are left as they are.
Status ReadRange(const ordered_json& o, const char* name, const std::string& path, int64_t& lo, int64_t& hi,
                 bool required) {
  const auto it = o.find(name);
  if (it == o.end())
    return required ? InvalidArgument(fmt::format("{}.{} is missing: [lo, hi] is required", path, name))
                    : Status::Ok();
  const ordered_json& b = *it;
  if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
      b[0].get<int64_t>() < 1 || b[0].get<int64_t>() > b[1].get<int64_t>())
    return InvalidArgument(fmt::format("{}.{} must be [lo, hi], integers with 1 <= lo <= hi", path, name));
  lo = b[0].get<int64_t>();
  hi = b[1].get<int64_t>();
  return Status::Ok();
}

StatusOr<OpKey> ReadKey(detail::JsonReader& rd, const ordered_json& o) {
  const std::string text = rd.String(o, "key");
  CG_RETURN_IF_ERROR(rd.status());
  auto key = OpKey::Parse(text);
  if (!key.ok()) return InvalidArgument(fmt::format("{}.key: {}", rd.path(), key.status().message()));
  return key;
}

}  // namespace

StatusOr<MissReport> MissReportFromJson(std::string_view text) {
  ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("miss report: not valid JSON");
  if (!j.is_object()) return InvalidArgument("miss report: the top level must be an object");
  MissReport r;
  detail::JsonReader rd("miss report");
  r.schema_version = static_cast<int>(rd.Int(j, "schema_version", true, -1, 1 << 20));
  CG_RETURN_IF_ERROR(rd.status());
  if (r.schema_version != 1)
    return FailedPrecondition(fmt::format("miss report: schema_version {} is not 1 (the version this build reads)", r.schema_version));
  const ordered_json* dev = rd.Object(j, "device");
  CG_RETURN_IF_ERROR(rd.status());
  detail::JsonReader dr = rd.Sub("device");
  r.device_fingerprint = dr.String(*dev, "fingerprint");
  r.device_name = dr.String(*dev, "name", false);
  r.device_threads = static_cast<int>(dr.Int(*dev, "threads", false, 1, 1024));
  rd.Absorb(dr);
  r.host = rd.String(j, "host", false);
  r.pid = rd.Int(j, "pid", false, 0);
  r.calls = rd.UInt(j, "calls");
  r.hits = rd.UInt(j, "hits");
  r.misses = rd.UInt(j, "misses");
  r.generated_at = rd.Number(j, "generated_at", false);
  r.process_start = rd.Number(j, "process_start", false);
  r.runtime_version = rd.String(j, "runtime_version", false);
  if (const ordered_json* sources = rd.Array(j, "sources", false)) {
    for (size_t i = 0; i < sources->size(); ++i) {
      detail::JsonReader sr(fmt::format("miss report: sources[{}]", i));
      const ordered_json& o = (*sources)[i];
      ReportSource x;
      x.host = sr.String(o, "host");
      x.pid = sr.Int(o, "pid", true, 0);
      x.process_start = sr.Number(o, "process_start");
      x.runtime_version = sr.String(o, "runtime_version");
      x.generated_at = sr.Number(o, "generated_at");
      x.calls = sr.UInt(o, "calls");
      CG_RETURN_IF_ERROR(sr.status());
      r.sources.push_back(std::move(x));
    }
  }
  if (j.contains("expected_speedup")) r.expected_speedup = rd.Number(j, "expected_speedup");
  r.expected_speedup_basis = rd.String(j, "expected_speedup_basis", false);
  const ordered_json* records = rd.Array(j, "records");
  CG_RETURN_IF_ERROR(rd.status());
  for (size_t i = 0; i < records->size(); ++i) {
    const ordered_json& o = (*records)[i];
    detail::JsonReader er(fmt::format("miss report: records[{}]", i));
    MissRecord m;
    CG_ASSIGN_OR_RETURN(m.key, ReadKey(er, o));
    const std::string kind = er.String(o, "kind");
    CG_RETURN_IF_ERROR(er.status());
    auto k = ParseMissKind(kind);
    if (!k.ok()) return InvalidArgument(fmt::format("{}.kind: {}", er.path(), k.status().message()));
    m.kind = *k;
    m.count = er.UInt(o, "count");
    m.first_seen = er.Number(o, "first_seen");
    m.last_seen = er.Number(o, "last_seen");
    m.fallback_us_total = er.Number(o, "fallback_us_total");
    m.expected_gain_us = er.Number(o, "expected_gain_us", false);
    m.fallback = er.String(o, "fallback", false);
    const std::string served_by = er.String(o, "served_by", false);
    m.served_from = er.String(o, "served_from", false);
    const ordered_json* per = er.Object(o, "served", false);
    CG_RETURN_IF_ERROR(er.status());
    CG_RETURN_IF_ERROR(ReadRange(o, "bucket", er.path(), m.bucket_lo, m.bucket_hi, /*required=*/false));
    if (!served_by.empty()) {
      auto s = ParseServedBy(served_by);
      if (!s.ok()) return InvalidArgument(fmt::format("{}.served_by: {}", er.path(), s.status().message()));
      m.served_by = *s;
    }
    if (per) {
      uint64_t sum = 0;
      for (const auto& [name, v] : per->items()) {
        auto s = ParseServedBy(name);
        if (!s.ok() || *s == ServedBy::kExact)
          return InvalidArgument(fmt::format("{}.served: '{}' is not a kind a miss is served by", er.path(), name));
        detail::JsonReader sr = er.Sub("served." + name);
        const int i = static_cast<int>(*s);
        m.served_calls[i] = sr.UInt(v, "calls");
        m.served_us[i] = sr.Number(v, "us");
        CG_RETURN_IF_ERROR(sr.status());
        sum += m.served_calls[i];
      }
      if (sum != m.count)
        return InvalidArgument(fmt::format("{}.served: {} calls in total but count is {}", er.path(), sum, m.count));
    } else {  // reports written before served kinds (every miss ran a default), or without a split
      m.served_calls[static_cast<int>(m.served_by)] = m.count;
      m.served_us[static_cast<int>(m.served_by)] = m.fallback_us_total;
    }
    r.records.push_back(std::move(m));
  }
  r.served[static_cast<int>(ServedBy::kExact)] = r.hits;
  for (const MissRecord& m : r.records)
    for (int i = 0; i < kNumServedBy; ++i) {
      r.served[i] += m.served_calls[i];
      r.served_us[i] += m.served_us[i];
    }
  if (const ordered_json* buckets = rd.Array(j, "buckets", false)) {
    for (size_t i = 0; i < buckets->size(); ++i) {
      const ordered_json& o = (*buckets)[i];
      detail::JsonReader br(fmt::format("miss report: buckets[{}]", i));
      BucketTraffic b;
      CG_ASSIGN_OR_RETURN(b.key, ReadKey(br, o));
      CG_RETURN_IF_ERROR(ReadRange(o, "range", br.path(), b.lo, b.hi, /*required=*/true));
      b.keys = br.UInt(o, "keys");
      b.calls = br.UInt(o, "calls");
      b.us_total = br.Number(o, "us_total");
      CG_RETURN_IF_ERROR(br.status());
      r.buckets.push_back(b);
    }
  }
  if (const ordered_json* rec = rd.Array(j, "recommended_buckets", false)) {
    for (size_t i = 0; i < rec->size(); ++i) {
      const ordered_json& o = (*rec)[i];
      detail::JsonReader br(fmt::format("miss report: recommended_buckets[{}]", i));
      BucketRecommendation b;
      CG_ASSIGN_OR_RETURN(b.key, ReadKey(br, o));
      CG_RETURN_IF_ERROR(ReadRange(o, "range", br.path(), b.lo, b.hi, /*required=*/true));
      const int64_t v = b.key.dims[kVaryingDim];
      if (v < b.lo || v > b.hi)
        return InvalidArgument(fmt::format("{}: the key's {}={} is outside its range [{}, {}]", br.path(),
                                           VaryingDimName(b.key.op), v, b.lo, b.hi));
      b.keys = br.UInt(o, "keys");
      b.calls = br.UInt(o, "calls");
      b.default_us_total = br.Number(o, "default_us_total");
      b.expected_gain_us = br.Number(o, "expected_gain_us");
      CG_RETURN_IF_ERROR(br.status());
      r.recommended_buckets.push_back(b);
    }
  }
  CG_RETURN_IF_ERROR(rd.status());
  uint64_t sum = 0;
  for (const auto& m : r.records) sum += m.count;
  if (sum != r.misses)
    return InvalidArgument(fmt::format("miss report: records count {} in total but 'misses' is {}", sum, r.misses));
  if (r.hits + r.misses != r.calls)
    return InvalidArgument(fmt::format("miss report: hits {} + misses {} != calls {}", r.hits, r.misses, r.calls));
  RankMissRecords(r);
  return r;
}

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

}  // namespace cliffguard
