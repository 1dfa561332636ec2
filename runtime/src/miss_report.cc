#include "cliffguard/miss_report.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cliffguard/detail/json_reader.h"

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

std::vector<BucketRecommendation> RecommendBuckets(const std::vector<MissRecord>& records, double expected_speedup) {
  struct Range {
    BucketRecommendation rec;
    double rep_us = -1;
  };
  std::map<std::pair<std::string, int>, Range> ranges;  // (family text, j) -> range (2^(j-1), 2^j]
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
    Range& r = ranges[{KeyFamily(m.key).ToString(), j}];
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
    return a.key.ToString() < b.key.ToString();
  });
}

std::string MissReportToJson(const MissReport& r, int indent) {
  ordered_json j;
  j["schema_version"] = r.schema_version;
  j["device"] = ordered_json{{"fingerprint", r.device_fingerprint}, {"name", r.device_name}};
  if (r.device_threads > 0) j["device"]["threads"] = r.device_threads;
  if (!r.host.empty()) j["host"] = r.host;
  if (r.pid > 0) j["pid"] = r.pid;
  j["generated_at"] = r.generated_at;
  j["calls"] = r.calls;
  j["hits"] = r.hits;
  j["misses"] = r.misses;
  j["expected_speedup"] = r.expected_speedup;
  if (!r.expected_speedup_basis.empty()) j["expected_speedup_basis"] = r.expected_speedup_basis;
  ordered_json served = ordered_json::object(), served_us = ordered_json::object();
  for (int i = 0; i < kNumServedBy; ++i) {
    served[ServedByName(static_cast<ServedBy>(i))] = r.served[i];
    if (i != static_cast<int>(ServedBy::kExact)) served_us[ServedByName(static_cast<ServedBy>(i))] = r.served_us[i];
  }
  j["served"] = served;
  j["served_us"] = served_us;
  ordered_json recs = ordered_json::array();
  int rank = 0;
  for (const MissRecord& m : r.records) {
    ordered_json o{{"rank", ++rank},
                   {"key", m.key.ToString()},
                   {"kind", MissKindName(m.kind)},
                   {"count", m.count},
                   {"first_seen", m.first_seen},
                   {"last_seen", m.last_seen},
                   {"fallback_us_total", m.fallback_us_total},
                   {"fallback", m.fallback},
                   {"expected_gain_us", m.expected_gain_us},
                   {"served_by", ServedByName(m.served_by)}};
    if (!m.served_from.empty()) o["served_from"] = m.served_from;
    if (m.bucket_hi > 0) o["bucket"] = ordered_json::array({m.bucket_lo, m.bucket_hi});
    ordered_json per = ordered_json::object();
    for (int i = 0; i < kNumServedBy; ++i)
      if (m.served_calls[i])
        per[ServedByName(static_cast<ServedBy>(i))] = ordered_json{{"calls", m.served_calls[i]}, {"us", m.served_us[i]}};
    if (!per.empty()) o["served"] = per;  // else every call ran served_by (the reader's rule)
    recs.push_back(std::move(o));
  }
  j["records"] = recs;
  ordered_json buckets = ordered_json::array();
  for (const BucketTraffic& b : r.buckets)
    buckets.push_back(ordered_json{{"key", b.key.ToString()},
                                   {"range", ordered_json::array({b.lo, b.hi})},
                                   {"keys", b.keys},
                                   {"calls", b.calls},
                                   {"us_total", b.us_total}});
  j["buckets"] = buckets;
  ordered_json recommended = ordered_json::array();
  for (const BucketRecommendation& b : r.recommended_buckets)
    recommended.push_back(ordered_json{{"key", b.key.ToString()},
                                       {"range", ordered_json::array({b.lo, b.hi})},
                                       {"keys", b.keys},
                                       {"calls", b.calls},
                                       {"default_us_total", b.default_us_total},
                                       {"expected_gain_us", b.expected_gain_us}});
  j["recommended_buckets"] = recommended;
  return j.dump(indent, ' ', false, ordered_json::error_handler_t::replace);
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

}  // namespace cliffguard
