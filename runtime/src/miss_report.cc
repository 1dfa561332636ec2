#include "cliffguard/miss_report.h"

#include <algorithm>
#include <cmath>

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
  ordered_json recs = ordered_json::array();
  int rank = 0;
  for (const MissRecord& m : r.records) {
    recs.push_back(ordered_json{{"rank", ++rank},
                                {"key", m.key.ToString()},
                                {"kind", MissKindName(m.kind)},
                                {"count", m.count},
                                {"first_seen", m.first_seen},
                                {"last_seen", m.last_seen},
                                {"fallback_us_total", m.fallback_us_total},
                                {"fallback", m.fallback},
                                {"expected_gain_us", m.expected_gain_us}});
  }
  j["records"] = recs;
  return j.dump(indent, ' ', false, ordered_json::error_handler_t::replace);
}

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
    const std::string key = er.String(o, "key"), kind = er.String(o, "kind");
    CG_RETURN_IF_ERROR(er.status());
    auto parsed = OpKey::Parse(key);
    if (!parsed.ok()) return InvalidArgument(fmt::format("{}.key: {}", er.path(), parsed.status().message()));
    m.key = *parsed;
    auto k = ParseMissKind(kind);
    if (!k.ok()) return InvalidArgument(fmt::format("{}.kind: {}", er.path(), k.status().message()));
    m.kind = *k;
    m.count = er.UInt(o, "count");
    m.first_seen = er.Number(o, "first_seen");
    m.last_seen = er.Number(o, "last_seen");
    m.fallback_us_total = er.Number(o, "fallback_us_total");
    m.expected_gain_us = er.Number(o, "expected_gain_us", false);
    m.fallback = er.String(o, "fallback", false);
    CG_RETURN_IF_ERROR(er.status());
    r.records.push_back(std::move(m));
  }
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
