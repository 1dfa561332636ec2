#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cliffguard/bundle.h"
#include "cliffguard/detail/json_reader.h"

namespace cliffguard {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64Encode(const std::vector<uint8_t>& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = uint32_t(in[i]) << 16;
    if (i + 1 < in.size()) v |= uint32_t(in[i + 1]) << 8;
    if (i + 2 < in.size()) v |= in[i + 2];
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kB64[v & 63] : '=';
  }
  return out;
}

StatusOr<std::vector<uint8_t>> Base64Decode(std::string_view in) {
  if (in.size() % 4 != 0) return InvalidArgument(fmt::format("base64 length {} is not a multiple of 4", in.size()));
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<uint8_t> out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      const char c = in[i + j];
      if (c == '=' && i + 4 == in.size() && j >= 2) {
        v[j] = 0;
        ++pad;
        continue;
      }
      if (pad) return InvalidArgument("base64 padding in the middle");
      v[j] = val(c);
      if (v[j] < 0) return InvalidArgument(fmt::format("base64 character '{}' at {} is invalid", c, i + j));
    }
    const uint32_t x = (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out.push_back(uint8_t(x >> 16));
    if (pad < 2) out.push_back(uint8_t(x >> 8));
    if (pad < 1) out.push_back(uint8_t(x));
  }
  return out;
}

using Reader = detail::JsonReader;

}  // namespace

std::string BundleToJson(const BundleSpec& spec, int indent) {
  ordered_json props = ordered_json::object();
  for (const auto& [name, value] : spec.device.properties) props[name] = value;
  ordered_json j;
  j["schema_version"] = spec.schema_version;
  j["producer"] = spec.producer;
  j["producer_version"] = spec.producer_version;
  j["created_at"] = spec.created_at;
  j["device"] = ordered_json{{"backend", BackendName(spec.device.backend)},
                             {"name", spec.device.name},
                             {"vendor", spec.device.vendor},
                             {"arch", spec.device.arch},
                             {"properties", props},
                             {"fingerprint", spec.device.fingerprint}};
  ordered_json entries = ordered_json::array();
  for (const BundleEntry& e : spec.entries) {
    ordered_json entry{{"key", e.key.ToString()},
                       {"schedule", detail::ScheduleToJson(e.schedule)},
                       {"tuned_us", e.tuned_us},
                       {"default_us", e.default_us}};
    if (e.tuned_spread_us > 0 || e.default_spread_us > 0) {
      entry["tuned_spread_us"] = e.tuned_spread_us;
      entry["default_spread_us"] = e.default_spread_us;
    }
    if (e.bucket_lo != 0 || e.bucket_hi != 0) entry["bucket"] = ordered_json::array({e.bucket_lo, e.bucket_hi});
    entry["trials"] = e.trials;
    entry["tuned_at"] = e.tuned_at;
    entry["provenance"] = e.provenance;
    entries.push_back(std::move(entry));
  }
  j["entries"] = entries;
  ordered_json defaults = ordered_json::array();
  for (const BundleOpDefault& d : spec.defaults) {
    ordered_json o{{"op", OpKindName(d.op)}, {"dtype", DTypeName(d.dtype)}};
    if (d.shape_class != ShapeClass::kUnspecified) o["shape_class"] = ShapeClassName(d.shape_class);
    o["schedule"] = detail::ScheduleToJson(d.schedule);
    defaults.push_back(std::move(o));
  }
  j["defaults"] = defaults;
  if (!spec.cost_model_format.empty() || !spec.cost_model.empty())
    j["cost_model"] = ordered_json{{"format", spec.cost_model_format}, {"base64", Base64Encode(spec.cost_model)}};
  // Strings in a bundle are untrusted bytes: invalid UTF-8 is replaced, never thrown.
  return j.dump(indent, ' ', false, ordered_json::error_handler_t::replace);
}

StatusOr<BundleSpec> BundleFromJson(std::string_view text) {
  ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("bundle JSON: not valid JSON");
  if (!j.is_object()) return InvalidArgument("bundle JSON: the top level must be an object");
  BundleSpec spec;
  Reader r("bundle");
  spec.schema_version = static_cast<uint32_t>(r.Int(j, "schema_version", false, 1, kBundleSchemaVersion));
  if (!j.contains("schema_version")) spec.schema_version = kBundleSchemaVersion;
  spec.producer = j.contains("producer") ? r.String(j, "producer") : "cliffguard";
  spec.producer_version = r.String(j, "producer_version", false);
  spec.created_at = r.UInt(j, "created_at", false);
  CG_RETURN_IF_ERROR(r.status());

  const ordered_json* dev = r.Field(j, "device", true);
  CG_RETURN_IF_ERROR(r.status());
  Reader d("bundle.device");
  const std::string backend = d.String(*dev, "backend");
  if (backend == "cpu") spec.device.backend = Backend::kCpu;
  else if (backend == "cuda") spec.device.backend = Backend::kCuda;
  else if (d.status().ok()) d.Fail(fmt::format("bundle.device.backend '{}' is not one of: cpu, cuda", backend));
  spec.device.name = d.String(*dev, "name", false);
  spec.device.vendor = d.String(*dev, "vendor", false);
  spec.device.arch = d.String(*dev, "arch");
  spec.device.fingerprint = d.String(*dev, "fingerprint");
  spec.device.properties = d.IntMap(*dev, "properties", false);
  CG_RETURN_IF_ERROR(d.status());
  for (const auto& [name, v] : spec.device.properties) {
    if (name == "family") spec.device.family = int(v);
    else if (name == "model") spec.device.model = int(v);
    else if (name == "isa") spec.device.isa = uint32_t(v);
    else if (name == "threads") spec.device.threads = int(v);
    else if (name == "l1d_bytes") spec.device.l1d_bytes = v;
    else if (name == "l2_bytes") spec.device.l2_bytes = v;
    else if (name == "l3_bytes") spec.device.l3_bytes = v;
  }

  if (const ordered_json* entries = r.Field(j, "entries", false)) {
    if (!entries->is_array()) return InvalidArgument("bundle.entries must be an array");
    spec.entries.reserve(entries->size());
    for (size_t i = 0; i < entries->size(); ++i) {
      const ordered_json& e = (*entries)[i];
      Reader er(fmt::format("bundle.entries[{}]", i));
      BundleEntry out;
      const std::string key = er.String(e, "key");
      CG_RETURN_IF_ERROR(er.status());
      auto parsed = OpKey::Parse(key);
      if (!parsed.ok()) return InvalidArgument(fmt::format("bundle.entries[{}].key: {}", i, parsed.status().message()));
      out.key = *parsed;
      out.schedule = er.Schedule(e, "schedule");
      out.tuned_us = er.Number(e, "tuned_us");
      out.default_us = er.Number(e, "default_us", false);
      out.tuned_spread_us = er.Number(e, "tuned_spread_us", false);
      out.default_spread_us = er.Number(e, "default_spread_us", false);
      if (e.contains("bucket")) {
        const auto& b = e["bucket"];
        if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer())
          return InvalidArgument(fmt::format("bundle.entries[{}].bucket: must be [lo, hi], two integers", i));
        out.bucket_lo = b[0].get<int64_t>();
        out.bucket_hi = b[1].get<int64_t>();
      }
      out.trials = static_cast<uint32_t>(er.Int(e, "trials", false, 0, UINT32_MAX));
      out.tuned_at = er.UInt(e, "tuned_at", false);
      out.provenance = er.String(e, "provenance", false);
      CG_RETURN_IF_ERROR(er.status());
      spec.entries.push_back(std::move(out));
    }
  }
  if (const ordered_json* defaults = r.Field(j, "defaults", false)) {
    if (!defaults->is_array()) return InvalidArgument("bundle.defaults must be an array");
    for (size_t i = 0; i < defaults->size(); ++i) {
      const ordered_json& e = (*defaults)[i];
      Reader dr(fmt::format("bundle.defaults[{}]", i));
      BundleOpDefault out;
      const std::string op = dr.String(e, "op"), dtype = dr.String(e, "dtype");
      CG_RETURN_IF_ERROR(dr.status());
      auto pop = ParseOpKind(op);
      if (!pop.ok()) return InvalidArgument(fmt::format("bundle.defaults[{}].op: {}", i, pop.status().message()));
      auto pdt = ParseDType(dtype);
      if (!pdt.ok()) return InvalidArgument(fmt::format("bundle.defaults[{}].dtype: {}", i, pdt.status().message()));
      out.op = *pop;
      out.dtype = *pdt;
      if (e.contains("shape_class")) {
        const std::string sc = dr.String(e, "shape_class");
        CG_RETURN_IF_ERROR(dr.status());
        auto psc = ParseShapeClass(sc);
        if (!psc.ok()) return InvalidArgument(fmt::format("bundle.defaults[{}].shape_class: {}", i, psc.status().message()));
        out.shape_class = *psc;
      }
      out.schedule = dr.Schedule(e, "schedule");
      CG_RETURN_IF_ERROR(dr.status());
      spec.defaults.push_back(std::move(out));
    }
  }
  if (const ordered_json* cm = r.Field(j, "cost_model", false)) {
    Reader cr("bundle.cost_model");
    spec.cost_model_format = cr.String(*cm, "format");
    const std::string b64 = cr.String(*cm, "base64");
    CG_RETURN_IF_ERROR(cr.status());
    auto bytes = Base64Decode(b64);
    if (!bytes.ok()) return InvalidArgument(fmt::format("bundle.cost_model.base64: {}", bytes.status().message()));
    spec.cost_model = std::move(bytes).value();
  }
  return spec;
}

}  // namespace cliffguard
