#include "cliffguard/miss_report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

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

namespace {

Status Need(const ordered_json& o, const char* field, const std::string& where, bool (ordered_json::*is)() const,
            const char* what) {
  auto it = o.find(field);
  if (it == o.end()) return InvalidArgument(fmt::format("miss report: {}: field '{}' is required", where, field));
  if (!((*it).*is)()) return InvalidArgument(fmt::format("miss report: {}.{} must be {}", where, field, what));
  return Status::Ok();
}

Status NeedNumber(const ordered_json& o, const char* field, const std::string& where) {
  CG_RETURN_IF_ERROR(Need(o, field, where, &ordered_json::is_number, "a number"));
  const double v = o[field].get<double>();
  if (!std::isfinite(v) || v < 0)
    return InvalidArgument(fmt::format("miss report: {}.{}={} must be a finite number >= 0", where, field, v));
  return Status::Ok();
}

}  // namespace

StatusOr<MissReport> MissReportFromJson(std::string_view text) {
  ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("miss report: not valid JSON");
  if (!j.is_object()) return InvalidArgument("miss report: the top level must be an object");
  MissReport r;
  CG_RETURN_IF_ERROR(Need(j, "schema_version", "report", &ordered_json::is_number_integer, "an integer"));
  r.schema_version = static_cast<int>(std::clamp<int64_t>(j["schema_version"].get<int64_t>(), -1, 1 << 20));
  if (r.schema_version != 1)
    return FailedPrecondition(fmt::format("miss report: schema_version {} is not 1 (the version this build reads)", r.schema_version));
  CG_RETURN_IF_ERROR(Need(j, "device", "report", &ordered_json::is_object, "an object"));
  CG_RETURN_IF_ERROR(Need(j["device"], "fingerprint", "report.device", &ordered_json::is_string, "a string"));
  r.device_fingerprint = j["device"]["fingerprint"].get<std::string>();
  if (j["device"].contains("name") && j["device"]["name"].is_string()) r.device_name = j["device"]["name"].get<std::string>();
  if (j["device"].contains("threads")) {
    const ordered_json& t = j["device"]["threads"];
    if (!t.is_number_unsigned() || t.get<uint64_t>() < 1 || t.get<uint64_t>() > 1024)
      return InvalidArgument("miss report: report.device.threads must be an integer in [1, 1024]");
    r.device_threads = static_cast<int>(t.get<uint64_t>());
  }
  if (j.contains("host")) {
    CG_RETURN_IF_ERROR(Need(j, "host", "report", &ordered_json::is_string, "a string"));
    r.host = j["host"].get<std::string>();
  }
  if (j.contains("pid")) {
    CG_RETURN_IF_ERROR(Need(j, "pid", "report", &ordered_json::is_number_unsigned, "a non-negative integer"));
    r.pid = static_cast<int64_t>(std::min<uint64_t>(j["pid"].get<uint64_t>(), INT64_MAX));
  }
  if (j.contains("expected_speedup_basis")) {
    CG_RETURN_IF_ERROR(Need(j, "expected_speedup_basis", "report", &ordered_json::is_string, "a string"));
    r.expected_speedup_basis = j["expected_speedup_basis"].get<std::string>();
  }
  for (const char* f : {"calls", "hits", "misses"})
    CG_RETURN_IF_ERROR(Need(j, f, "report", &ordered_json::is_number_unsigned, "a non-negative integer"));
  r.calls = j["calls"].get<uint64_t>();
  r.hits = j["hits"].get<uint64_t>();
  r.misses = j["misses"].get<uint64_t>();
  if (j.contains("generated_at")) {
    CG_RETURN_IF_ERROR(NeedNumber(j, "generated_at", "report"));
    r.generated_at = j["generated_at"].get<double>();
  }
  if (j.contains("expected_speedup")) {
    CG_RETURN_IF_ERROR(NeedNumber(j, "expected_speedup", "report"));
    r.expected_speedup = j["expected_speedup"].get<double>();
  }
  CG_RETURN_IF_ERROR(Need(j, "records", "report", &ordered_json::is_array, "an array"));
  for (size_t i = 0; i < j["records"].size(); ++i) {
    const ordered_json& o = j["records"][i];
    const std::string where = fmt::format("records[{}]", i);
    if (!o.is_object()) return InvalidArgument(fmt::format("miss report: {} must be an object", where));
    MissRecord m;
    CG_RETURN_IF_ERROR(Need(o, "key", where, &ordered_json::is_string, "a string"));
    auto key = OpKey::Parse(o["key"].get<std::string>());
    if (!key.ok()) return InvalidArgument(fmt::format("miss report: {}.key: {}", where, key.status().message()));
    m.key = *key;
    CG_RETURN_IF_ERROR(Need(o, "kind", where, &ordered_json::is_string, "a string"));
    auto kind = ParseMissKind(o["kind"].get<std::string>());
    if (!kind.ok()) return InvalidArgument(fmt::format("miss report: {}.kind: {}", where, kind.status().message()));
    m.kind = *kind;
    CG_RETURN_IF_ERROR(Need(o, "count", where, &ordered_json::is_number_unsigned, "a non-negative integer"));
    m.count = o["count"].get<uint64_t>();
    for (const char* f : {"first_seen", "last_seen", "fallback_us_total"}) CG_RETURN_IF_ERROR(NeedNumber(o, f, where));
    m.first_seen = o["first_seen"].get<double>();
    m.last_seen = o["last_seen"].get<double>();
    m.fallback_us_total = o["fallback_us_total"].get<double>();
    if (o.contains("expected_gain_us")) {
      CG_RETURN_IF_ERROR(NeedNumber(o, "expected_gain_us", where));
      m.expected_gain_us = o["expected_gain_us"].get<double>();
    }
    if (o.contains("fallback")) {
      CG_RETURN_IF_ERROR(Need(o, "fallback", where, &ordered_json::is_string, "a string"));
      m.fallback = o["fallback"].get<std::string>();
    }
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
