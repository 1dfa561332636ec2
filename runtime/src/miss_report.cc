#include "cliffguard/miss_report.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <charconv>
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
#include "miss_log.h"

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

// The functions below read records (MissRecord) and rows (MissRow) alike.
const OpKey& KeyOf(const MissRecord& m) { return m.key; }
const OpKey& KeyOf(const MissRow& m) { return *m.key; }
// Families (KeyFamily) as records are grouped by them: a record's by its family's
// key, a row's by the id the miss log gave its family (without reading its key).
OpKey FamilyOf(const MissRecord& m) { return KeyFamily(m.key); }
uint32_t FamilyOf(const MissRow& m) { return m.family; }
uint64_t FamilyHash(const OpKey& family) { return family.Hash(); }
uint64_t FamilyHash(uint32_t family) { return family; }
int64_t VaryingOf(const MissRecord& m) { return m.key.dims[kVaryingDim]; }
int64_t VaryingOf(const MissRow& m) { return m.varying; }
std::string_view TextOf(const std::string& s) { return s; }
std::string_view TextOf(const ReportText* t) { return t ? std::string_view(t->text) : std::string_view(); }

// The first fields of KeyOrder in one number, which orders keys as KeyOrder does
// where it differs (the varying dimension saturates).
uint64_t KeyOrderPrefix(const OpKey& k) {
  constexpr int64_t kMaxDim = (int64_t{1} << 45) - 1;
  return uint64_t(k.op) << 56 | uint64_t(k.dtype) << 48 | uint64_t(k.trans_a) << 47 | uint64_t(k.trans_b) << 46 |
         uint64_t(k.constant_weights) << 45 | uint64_t(std::clamp<int64_t>(k.dims[0], 0, kMaxDim));
}

template <typename R>
MissRankKey RankKeyOfRecord(const R& m, uint32_t index) {
  return {m.expected_gain_us, m.fallback_us_total, m.count, KeyOrderPrefix(KeyOf(m)), index};
}

// Sorts keys (keys[i]: RankKeyOfRecord(rec(i), i)) by the ranking rule: expected
// gain, then time in the fallback, then count (each descending), then key; equal
// keys (a report may repeat one) keep their order. (Many records tie up to the key:
// times are counted in clock ticks.)
template <typename RecordAt>
void SortRankKeys(RecordAt&& rec, std::vector<MissRankKey>& keys) {
  std::sort(keys.begin(), keys.end(), [&](const MissRankKey& a, const MissRankKey& b) {
    if (a.gain_us != b.gain_us) return a.gain_us > b.gain_us;
    if (a.fallback_us != b.fallback_us) return a.fallback_us > b.fallback_us;
    if (a.count != b.count) return a.count > b.count;
    if (a.key_prefix != b.key_prefix) return a.key_prefix < b.key_prefix;
    const auto ka = KeyOrder(KeyOf(rec(a.index))), kb = KeyOrder(KeyOf(rec(b.index)));
    if (ka != kb) return ka < kb;
    return a.index < b.index;
  });
}

template <typename Records>
std::vector<BucketRecommendation> RecommendBucketsOf(const Records& records) {
  using Family = decltype(FamilyOf(records[0]));
  // Per family and j, the range (2^(j-1), 2^j] of the varying dimension.
  struct Range {
    Family id;
    OpKey family;
    int j;
    BucketRecommendation rec;
    double rep_us = -1;
  };
  std::vector<Range> ranges;
  // (family, j) -> index in ranges, by open addressing (a report has few ranges and
  // many records).
  constexpr uint32_t kFree = ~uint32_t{0};
  std::vector<uint32_t> slots(64, kFree);
  auto slot_of = [&](const Family& id, int j) -> uint32_t& {
    size_t i = MixHash64(FamilyHash(id) + uint64_t(j) * 0x9e3779b97f4a7c15ull) & (slots.size() - 1);
    while (slots[i] != kFree && !(ranges[slots[i]].j == j && ranges[slots[i]].id == id)) i = (i + 1) & (slots.size() - 1);
    return slots[i];
  };
  for (const auto& m : records) {
    double us = 0;
    uint64_t calls = 0;
    for (int k = 0; k < kNumServedBy; ++k)
      if (k != static_cast<int>(ServedBy::kExact) && !ServedByTunedKey(static_cast<ServedBy>(k))) {
        us += m.served_us[k];
        calls += m.served_calls[k];
      }
    const int64_t v = VaryingOf(m);
    if (calls == 0 || v < 1) continue;
    const int j = v == 1 ? 0 : 64 - std::countl_zero(static_cast<uint64_t>(v - 1));  // 2^(j-1) < v <= 2^j
    const Family id = FamilyOf(m);
    uint32_t* at = &slot_of(id, j);
    if (*at == kFree) {
      if (2 * (ranges.size() + 1) > slots.size()) {  // keep it at most half full
        slots.assign(2 * slots.size(), kFree);
        for (uint32_t k = 0; k < ranges.size(); ++k) slot_of(ranges[k].id, ranges[k].j) = k;
        at = &slot_of(id, j);
      }
      *at = static_cast<uint32_t>(ranges.size());
      ranges.push_back({id, KeyFamily(KeyOf(m)), j, {}});
    }
    Range& r = ranges[*at];
    BucketRecommendation& b = r.rec;
    b.lo = j == 0 ? 1 : (int64_t{1} << (j - 1)) + 1;
    b.hi = int64_t{1} << j;
    ++b.keys;
    b.calls += calls;
    b.default_us_total += us;
    b.expected_gain_us += m.expected_gain_us;
    if (us > r.rep_us) {
      r.rep_us = us;
      b.key = KeyOf(m);
    }
  }
  // By family and range, then ranked (stable: equal gains keep that order).
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    const auto ka = KeyOrder(a.family), kb = KeyOrder(b.family);
    return ka != kb ? ka < kb : a.j < b.j;
  });
  std::vector<BucketRecommendation> out;
  out.reserve(ranges.size());
  for (Range& r : ranges) out.push_back(r.rec);
  std::stable_sort(out.begin(), out.end(), [](const BucketRecommendation& a, const BucketRecommendation& b) {
    if (a.expected_gain_us != b.expected_gain_us) return a.expected_gain_us > b.expected_gain_us;
    return a.default_us_total > b.default_us_total;
  });
  return out;
}

template <typename Records>
std::vector<BucketTraffic> BucketTrafficOfRecords(const Records& records) {
  constexpr int kB = static_cast<int>(ServedBy::kBucket);
  std::vector<BucketTraffic> out;
  std::unordered_map<std::string_view, size_t> at;  // serving key text -> index in out
  for (const auto& m : records) {
    if (m.served_by != ServedBy::kBucket || m.served_calls[kB] == 0 || m.bucket_hi < 1) continue;
    auto [it, added] = at.try_emplace(TextOf(m.served_from), out.size());
    if (added) {
      auto key = OpKey::Parse(TextOf(m.served_from));
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

}  // namespace

std::vector<BucketRecommendation> RecommendBuckets(const std::vector<MissRecord>& records) {
  return RecommendBucketsOf(records);
}
std::vector<BucketRecommendation> RecommendBuckets(std::span<const MissRow> ranked) { return RecommendBucketsOf(ranked); }

void RankMissRecords(MissReport& report) {
  std::vector<MissRecord>& recs = report.records;
  std::vector<MissRankKey> keys;  // sorted as keys: each record moves once
  keys.reserve(recs.size());
  for (size_t i = 0; i < recs.size(); ++i) keys.push_back(RankKeyOfRecord(recs[i], static_cast<uint32_t>(i)));
  SortRankKeys([&](size_t i) -> const MissRecord& { return recs[i]; }, keys);
  std::vector<MissRecord> sorted;
  sorted.reserve(recs.size());
  for (const MissRankKey& k : keys) sorted.push_back(std::move(recs[k.index]));
  recs = std::move(sorted);
}

MissRankKey RankKeyOf(const MissRow& row, uint32_t index) { return RankKeyOfRecord(row, index); }

void RankMissRows(std::vector<MissRow>& rows, std::vector<MissRow>& unranked, std::vector<MissRankKey>& keys) {
  SortRankKeys([&](size_t i) -> const MissRow& { return rows[i]; }, keys);
  // Moved into rank order once, so that what reads them next reads them in order.
  std::swap(rows, unranked);
  rows.clear();
  rows.reserve(unranked.size());
  constexpr size_t kAhead = 8;  // rows are read out of order: ask for them early
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + kAhead < keys.size())
      for (size_t at = 0; at < sizeof(MissRow); at += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(&unranked[keys[i + kAhead].index]) + at);
    rows.push_back(unranked[keys[i].index]);
  }
}

std::vector<BucketTraffic> BucketTrafficOf(const std::vector<MissRecord>& records) {
  return BucketTrafficOfRecords(records);
}
std::vector<BucketTraffic> BucketTrafficOf(std::span<const MissRow> ranked) {
  return BucketTrafficOfRecords(ranked);
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
  out.recommended_buckets = RecommendBuckets(out.records);
  return out;
}

StatusOr<MissReport> MergeMissReports(const std::vector<MissReport>& reports, const std::vector<std::string>& names) {
  MissReportMerger merger;
  for (size_t i = 0; i < reports.size(); ++i)
    CG_RETURN_IF_ERROR(merger.Add(reports[i], i < names.size() ? names[i] : ""));
  return merger.Finish();
}

namespace {

// Whether any of the 8 bytes of w needs escaping in a JSON string: a control
// character, '"', '\\', or a byte >= 0x80 (checked as UTF-8).
bool NeedsEscape(uint64_t w) {
  constexpr uint64_t k01 = 0x0101010101010101ull, k80 = 0x8080808080808080ull;
  auto zero_byte = [](uint64_t v) { return (v - k01) & ~v & k80; };
  return ((w & k80) | ((w - 0x20 * k01) & ~w & k80) | zero_byte(w ^ ('"' * k01)) | zero_byte(w ^ ('\\' * k01))) != 0;
}
bool NeedsEscape(unsigned char c) { return c < 0x20 || c >= 0x80 || c == '"' || c == '\\'; }

// `s` copied to p; returns the end. An empty view may have a null data(), which
// memcpy must not be given.
char* CopyText(char* p, std::string_view s) {
  if (!s.empty()) std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

// `s` as a JSON string at p, which has room for 2 + 6 * s.size() bytes (an escape
// takes at most 6 bytes per byte); bytes that are not UTF-8 become U+FFFD. Returns
// the end.
char* EscapedText(char* p, std::string_view s) {
  auto append = [&](std::string_view t) { p = CopyText(p, t); };
  *p++ = '"';
  const char* in = s.data();
  const char* const last = in + s.size();
  const char* plain = in;  // bytes from here to `in` were copied as they are
  for (;;) {
    for (uint64_t w; last - in >= 8; in += 8, p += 8) {  // runs of bytes that need nothing, 8 at a time
      std::memcpy(&w, in, 8);
      if (NeedsEscape(w)) break;
      std::memcpy(p, &w, 8);
    }
    if (in != last && last - in < 8 && in - plain >= 8 - (last - in)) {
      // The last 8 bytes, the first of them copied already: if none needs escaping,
      // copied again at once (the same bytes land where they are).
      uint64_t w;
      std::memcpy(&w, last - 8, 8);
      if (!NeedsEscape(w)) {
        std::memcpy(p - (8 - (last - in)), &w, 8);
        p += last - in;
        in = last;
      }
    }
    while (in != last && !NeedsEscape(static_cast<unsigned char>(*in))) *p++ = *in++;
    if (in == last) break;
    const auto c = static_cast<unsigned char>(*in);
    if (c == '"' || c == '\\') {
      *p++ = '\\';
      *p++ = char(c);
      ++in;
    } else if (c < 0x20) {
      static constexpr char kHex[] = "0123456789abcdef";
      append("\\u00");
      *p++ = kHex[c >> 4];
      *p++ = kHex[c & 15];
      ++in;
    } else {
      const size_t n = detail::JsonPull::Utf8SequenceLength(std::string_view(in, size_t(last - in)));
      if (n) append(std::string_view(in, n));
      else append("\xEF\xBF\xBD");
      in += n ? n : 1;
    }
    plain = in;
  }
  *p++ = '"';
  return p;
}

// A text as a JSON string: records escape theirs, rows have them escaped already.
struct Escaped {
  std::string_view json;
};
size_t JsonBound(std::string_view s) { return 2 + 6 * s.size(); }
size_t JsonBound(const ReportText* t) { return t ? t->json.size() : 0; }
size_t JsonBound(Escaped s) { return s.json.size(); }
char* JsonText(char* p, std::string_view s) { return EscapedText(p, s); }
char* JsonText(char* p, const ReportText* t) { return CopyText(p, t->json); }
char* JsonText(char* p, Escaped s) { return CopyText(p, s.json); }

constexpr size_t kNumberBytes = 48;  // room for a number's text (and for the whole-word copies that write it)

constexpr char kDigitPairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";
void Digits4(char* p, uint32_t x) {
  std::memcpy(p, kDigitPairs + 2 * (x / 100), 2);
  std::memcpy(p + 2, kDigitPairs + 2 * (x % 100), 2);
}
void Digits8(char* p, uint32_t x) {
  Digits4(p, x / 10000);
  Digits4(p + 4, x % 10000);
}
// The decimal digits of s < 10^17 in out[0, 17), right-aligned with leading zeros;
// returns how many there are.
int Digits17(char* out, uint64_t s) {
  constexpr uint64_t k8 = 100000000;
  out[0] = char('0' + s / (k8 * k8));
  const uint64_t rest = s % (k8 * k8);
  Digits8(out + 1, uint32_t(rest / k8));
  Digits8(out + 9, uint32_t(rest % k8));
  static constexpr uint64_t kPow10[] = {1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull,
                                        100000000ull, 1000000000ull, 10000000000ull, 100000000000ull, 1000000000000ull,
                                        10000000000000ull, 100000000000000ull, 1000000000000000ull, 10000000000000000ull,
                                        100000000000000000ull};
  const int n = (std::bit_width(s) * 1233) >> 12;  // floor(log10(s)) + 1, or one less
  return std::max(1, n + (s >= kPow10[n]));
}

// A number at p (room for kNumberBytes), as fmt's "{}" writes it: the shortest
// digits that read back as v (fmt's Dragonbox), in fixed notation when the decimal
// exponent is in [-4, 16), else as d.ddde+XX; null when it is not finite. (fmt's
// writer takes twice the instructions for the same text; a report has tens of
// thousands of numbers.)
char* NumberText(char* p, double v) {
  if (!std::isfinite(v)) {
    std::memcpy(p, "null", 4);
    return p + 4;
  }
  if (std::signbit(v)) {
    *p++ = '-';
    v = -v;
  }
  if (v == 0) {
    *p = '0';
    return p + 1;
  }
  const auto dec = fmt::detail::dragonbox::to_decimal(v);  // at most 17 digits
  char buf[48] = {};
  const int n = Digits17(buf, dec.significand);
  const char* digits = buf + 17 - n;  // 17 bytes may be read from here
  const int exp = dec.exponent + n - 1;  // of the first digit
  if (exp < -4 || exp >= 16) {
    *p++ = digits[0];
    if (n > 1) {
      *p++ = '.';
      std::memcpy(p, digits + 1, 16);
      p += n - 1;
    }
    *p++ = 'e';
    *p++ = exp < 0 ? '-' : '+';
    const int e = exp < 0 ? -exp : exp;
    if (e >= 100) *p++ = char('0' + e / 100);
    *p++ = char('0' + e / 10 % 10);
    *p++ = char('0' + e % 10);
  } else if (exp >= n - 1) {  // an integer: the digits, then zeros
    std::memcpy(p, digits, 17);
    p += n;
    std::memset(p, '0', 16);
    p += exp - (n - 1);
  } else if (exp >= 0) {
    std::memcpy(p, digits, 17);
    p += exp + 1;
    *p++ = '.';
    std::memcpy(p, digits + exp + 1, 16);
    p += n - 1 - exp;
  } else {  // 0.000ddd
    *p++ = '0';
    *p++ = '.';
    std::memset(p, '0', 4);
    p += -exp - 1;
    std::memcpy(p, digits, 17);
    p += n;
  }
  return p;
}

// The report's JSON text, written directly (a report of a busy process holds tens of
// thousands of records and is rewritten while serving): into memory the caller may
// reuse, each value with its room ensured once and then written through a pointer.
// Multiline: one top-level field, and one element of a top-level array, per line.
class JsonOut {
 public:
  // Writes `out` from its start, reusing its memory; Finish() cuts it to what was written.
  JsonOut(std::string& out, bool multiline, size_t size_hint) : out_(out), multiline_(multiline) {
    out_.resize(std::max(out_.capacity(), size_hint));
    p_ = out_.data();
    end_ = p_ + out_.size();
    // What goes before an item in a container `depth` deep: a comma unless it is the
    // first, and in multiline mode a line break and indent (top level and top-level
    // arrays) or a space.
    for (int depth = 1; depth < kMaxDepth; ++depth)
      for (int first = 0; first < 2; ++first) {
        Separator& x = separators_[depth][first];
        if (!first) x.text[x.size++] = ',';
        if (multiline && depth <= 2) {
          x.text[x.size++] = '\n';
          for (int i = 0; i < 2 * depth; ++i) x.text[x.size++] = ' ';
        } else if (multiline && !first) {
          x.text[x.size++] = ' ';
        }
      }
  }
  // Cuts `out` to what was written, then `tail`.
  void Finish(std::string_view tail = {}) {
    Room(tail.size());
    Append(tail);
    out_.resize(size_t(p_ - out_.data()));
  }

  void Open(char c) {
    Item();
    Room(1);
    *p_++ = c;
    first_[++depth_] = true;  // depth is bounded by the report's format
  }
  void Close(char c) {
    const bool empty = first_[depth_--];
    Room(2 * kMaxDepth + 2);
    if (multiline_ && !empty && depth_ < 2) {
      *p_++ = '\n';
      std::memset(p_, ' ', 2 * size_t(depth_));
      p_ += 2 * depth_;
    }
    *p_++ = c;
  }
  // A member's key (text of the writer's own: nothing to escape); its value is what
  // is written next. A literal's length is known where it is written.
  template <size_t N>
  [[gnu::always_inline]] void Key(const char (&k)[N]) {
    Key(std::string_view(k, N - 1));
  }
  void Key(std::string_view k) {
    Member(k);
    pending_value_ = true;
  }
  void Int(int64_t v) {
    Item();
    Room(24);
    p_ = std::to_chars(p_, end_, v).ptr;
  }
  // A member: its key and value.
  template <size_t N, typename T>
  [[gnu::always_inline]] void Field(const char (&k)[N], const T& v) {
    Field(std::string_view(k, N - 1), v);
  }
  template <typename T>
  [[gnu::always_inline]] void Field(std::string_view k, const T& v) {
    Member(k);
    if constexpr (std::is_same_v<T, double>) {
      Number(v);
    } else if constexpr (std::is_integral_v<T>) {
      Room(24);
      if constexpr (std::is_same_v<T, uint64_t>) p_ = std::to_chars(p_, end_, v).ptr;
      else p_ = std::to_chars(p_, end_, int64_t(v)).ptr;
    } else {
      String(v);
    }
  }
  // An element of the innermost array written by write(p), which writes at most
  // `bound` bytes and returns their end.
  template <typename Write>
  [[gnu::always_inline]] void Element(size_t bound, Write&& write) {
    Item();
    Room(bound);
    p_ = write(p_);
  }
  bool multiline() const { return multiline_; }
  void Range(std::string_view k, int64_t lo, int64_t hi) {
    Key(k);
    Open('[');
    Int(lo);
    Int(hi);
    Close(']');
  }

 private:
  static constexpr int kMaxDepth = 8;
  struct Separator {
    char text[16] = {};  // copied whole; `size` of it count
    uint8_t size = 0;
  };
  // At least n bytes of room after p_.
  [[gnu::always_inline]] void Room(size_t n) {
    if (size_t(end_ - p_) < n) [[unlikely]] Grow(n);
  }
  [[gnu::noinline]] void Grow(size_t n) {
    const size_t used = size_t(p_ - out_.data());
    out_.resize(std::max(2 * out_.size(), used + n));
    p_ = out_.data() + used;
    end_ = out_.data() + out_.size();
  }
  // Before a value or key: its separator.
  [[gnu::always_inline]] void Item() {
    if (pending_value_) {
      pending_value_ = false;
      return;
    }
    if (depth_ == 0) return;
    const Separator& sep = separators_[depth_][first_[depth_]];
    first_[depth_] = false;
    Room(sizeof sep.text);
    std::memcpy(p_, sep.text, sizeof sep.text);
    p_ += sep.size;
  }
  // The separator and the key.
  [[gnu::always_inline]] void Member(std::string_view k) {
    Item();
    Room(k.size() + 4);
    *p_++ = '"';
    p_ = CopyText(p_, k);
    *p_++ = '"';
    *p_++ = ':';
    if (multiline_) *p_++ = ' ';
  }
  void Number(double v) {
    Room(kNumberBytes);
    p_ = NumberText(p_, v);
  }
  void Append(std::string_view s) { p_ = CopyText(p_, s); }  // room ensured
  void String(std::string_view s) {
    Room(2 + 6 * s.size());
    p_ = EscapedText(p_, s);
  }

  std::string& out_;
  char* p_;
  char* end_;
  bool multiline_;
  bool pending_value_ = false;
  int depth_ = 0;               // open containers
  bool first_[kMaxDepth] = {};  // [depth]: nothing written yet in the container that deep
  Separator separators_[kMaxDepth][2];  // [depth][first]
};

// One record. Inside a record nothing breaks the line: every separator is ", " (multiline) or
// ",", so a record is written straight through a pointer, with literals.
template <bool kMultiline>
struct RecordText {
  // `"name": `, after a separator unless it is the object's first member.
  template <size_t N>
  [[gnu::always_inline]] static char* Member(char* p, const char (&name)[N], bool first = false) {
    if (!first) {
      *p++ = ',';
      if (kMultiline) *p++ = ' ';
    }
    *p++ = '"';
    std::memcpy(p, name, N - 1);
    p += N - 1;
    *p++ = '"';
    *p++ = ':';
    if (kMultiline) *p++ = ' ';
    return p;
  }
  static char* Int(char* p, int64_t v) { return std::to_chars(p, p + 24, v).ptr; }
  static char* UInt(char* p, uint64_t v) { return std::to_chars(p, p + 24, v).ptr; }

  // Bytes a record may take (texts escaped at worst).
  template <typename R, typename Key>
  static size_t Bound(const R& m, const Key& key) {
    return 1024 + JsonBound(key) + JsonBound(m.fallback) + JsonBound(m.served_from);
  }

  // One record at p, with room for Bound(m, key) bytes; returns its end.
  template <typename R, typename Key>
  static char* Write(char* p, int64_t rank, const R& m, const Key& key) {
    // The names as JSON strings; [last]: "?", for a value out of range.
    static const std::array<std::string, 4> kKinds = {
        JsonString(MissKindName(MissKind::kDeviceMiss)), JsonString(MissKindName(MissKind::kShapeMiss)),
        JsonString(MissKindName(MissKind::kRejectedEntry)), JsonString("?")};
    static const std::array<std::string, kNumServedBy + 1> kServedBy = [] {
      std::array<std::string, kNumServedBy + 1> names;
      for (int i = 0; i <= kNumServedBy; ++i) names[size_t(i)] = JsonString(ServedByName(static_cast<ServedBy>(i)));
      return names;
    }();
    *p++ = '{';
    p = Int(Member(p, "rank", /*first=*/true), rank);
    p = JsonText(Member(p, "key"), key);
    p = JsonText(Member(p, "kind"), Escaped{kKinds[std::min(size_t(m.kind), kKinds.size() - 1)]});
    p = UInt(Member(p, "count"), m.count);
    p = NumberText(Member(p, "first_seen"), m.first_seen);
    p = NumberText(Member(p, "last_seen"), m.last_seen);
    p = NumberText(Member(p, "fallback_us_total"), m.fallback_us_total);
    p = JsonText(Member(p, "fallback"), m.fallback);
    p = NumberText(Member(p, "expected_gain_us"), m.expected_gain_us);
    const int by = static_cast<int>(m.served_by);
    p = JsonText(Member(p, "served_by"), Escaped{kServedBy[std::min(size_t(by), size_t(kNumServedBy))]});
    if (!TextOf(m.served_from).empty()) p = JsonText(Member(p, "served_from"), m.served_from);
    if (m.bucket_hi > 0) {
      p = Member(p, "bucket");
      *p++ = '[';
      p = Int(p, m.bucket_lo);
      *p++ = ',';
      if (kMultiline) *p++ = ' ';
      p = Int(p, m.bucket_hi);
      *p++ = ']';
    }
    // No split when every call ran served_by (the reader's rule: then count and
    // fallback_us_total are its calls and time).
    bool one_kind = m.served_calls[by] == m.count && m.served_us[by] == m.fallback_us_total;
    for (int i = 0; i < kNumServedBy; ++i)
      if (i != by && (m.served_calls[i] || m.served_us[i] != 0)) one_kind = false;
    bool any = false;
    for (int i = 0; i < kNumServedBy && !one_kind; ++i) {
      if (!m.served_calls[i]) continue;
      if (!any) {
        p = Member(p, "served");
        *p++ = '{';
      } else {
        *p++ = ',';
        if (kMultiline) *p++ = ' ';
      }
      any = true;
      p = JsonText(p, Escaped{kServedBy[size_t(i)]});
      *p++ = ':';
      if (kMultiline) *p++ = ' ';
      *p++ = '{';
      p = UInt(Member(p, "calls", /*first=*/true), m.served_calls[i]);
      p = NumberText(Member(p, "us"), m.served_us[i]);
      *p++ = '}';
    }
    if (any) *p++ = '}';
    *p++ = '}';
    return p;
  }
};

// The report `r`, its records written by write_records(j).
template <typename WriteRecords>
void WriteReport(JsonOut& j, const MissReport& r, WriteRecords&& write_records) {
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
  write_records(j);
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
}

constexpr size_t kRecordBytes = 400;  // about what a record takes

// One record; `key`: its key's text, or that as a JSON string already.
template <typename R, typename Key>
void WriteRecord(JsonOut& j, int64_t rank, const R& m, const Key& key) {
  if (j.multiline())
    j.Element(RecordText<true>::Bound(m, key), [&](char* p) { return RecordText<true>::Write(p, rank, m, key); });
  else
    j.Element(RecordText<false>::Bound(m, key), [&](char* p) { return RecordText<false>::Write(p, rank, m, key); });
}

}  // namespace

std::string JsonString(std::string_view text) {
  std::string out(JsonBound(text), '\0');
  out.resize(size_t(EscapedText(out.data(), text) - out.data()));
  return out;
}

std::string MissReportToJson(const MissReport& r, bool multiline) {
  std::string out;
  JsonOut j(out, multiline, 4096 + kRecordBytes * r.records.size());
  WriteReport(j, r, [&](JsonOut& j) {
    int64_t rank = 0;
    for (const MissRecord& m : r.records) WriteRecord(j, ++rank, m, std::string_view(m.key.ToString()));
  });
  j.Finish();
  return out;
}

void MissReportFileText(const MissReport& head, std::span<const MissRow> ranked, std::string& out) {
  JsonOut j(out, /*multiline=*/true, 4096 + kRecordBytes * ranked.size());
  WriteReport(j, head, [&](JsonOut& j) {
    constexpr size_t kAhead = 8;  // the keys' texts are apart in memory: ask for them early
    for (size_t i = 0; i < ranked.size(); ++i) {
      if (i + kAhead < ranked.size()) __builtin_prefetch(ranked[i + kAhead].key_json.data());
      WriteRecord(j, int64_t(i + 1), ranked[i], Escaped{ranked[i].key_json});
    }
  });
  j.Finish("\n");
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
