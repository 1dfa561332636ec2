// For cliffguard's own libraries (needs nlohmann_json and fmt): the one typed reader
// of JSON fields used by every format (bundle JSON, miss reports, tuning logs). Each
// type error becomes a Status naming the field's path, the value and the rule; the
// first error is kept and later reads return empty values, so a parser reads every
// field and checks status() once.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cliffguard/bundle.h"
#include "cliffguard/status.h"

namespace cliffguard::detail {

class JsonReader {
 public:
  using Json = nlohmann::ordered_json;

  // `path` names the object read ("bundle.entries[3]"); errors carry `code`.
  explicit JsonReader(std::string path, StatusCode code = StatusCode::kInvalidArgument)
      : path_(std::move(path)), code_(code) {}
  Status status() const { return status_; }
  const std::string& path() const { return path_; }
  // A reader for a nested object, reporting to the same status.
  JsonReader Sub(const std::string& name) const { return JsonReader(path_ + "." + name, code_); }

  // The field, or nullptr (an error when required and absent, or obj not an object).
  const Json* Field(const Json& obj, const char* name, bool required) {
    if (!status_.ok()) return nullptr;
    if (!obj.is_object()) return Fail(fmt::format("{} must be an object", path_)), nullptr;
    auto it = obj.find(name);
    if (it == obj.end()) {
      if (required) Fail(fmt::format("{}: field '{}' is required", path_, name));
      return nullptr;
    }
    return &*it;
  }
  const Json* Object(const Json& obj, const char* name, bool required = true) {
    const Json* f = Field(obj, name, required);
    if (f && !f->is_object()) return Fail(fmt::format("{}.{} must be an object", path_, name)), nullptr;
    return f;
  }
  const Json* Array(const Json& obj, const char* name, bool required = true) {
    const Json* f = Field(obj, name, required);
    if (f && !f->is_array()) return Fail(fmt::format("{}.{} must be an array", path_, name)), nullptr;
    return f;
  }
  std::string String(const Json& obj, const char* name, bool required = true) {
    const Json* f = Field(obj, name, required);
    if (!f) return {};
    if (!f->is_string()) return Fail(fmt::format("{}.{} must be a string, got {}", path_, name, Dump(*f))), std::string();
    return f->get<std::string>();
  }
  // An integer in [lo, hi].
  int64_t Int(const Json& obj, const char* name, bool required = true, int64_t lo = INT64_MIN,
              int64_t hi = INT64_MAX) {
    const Json* f = Field(obj, name, required);
    if (!f) return 0;
    if (!f->is_number_integer()) return Fail(fmt::format("{}.{} must be an integer, got {}", path_, name, Dump(*f))), 0;
    const int64_t v = f->is_number_unsigned() && f->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : f->get<int64_t>();
    if (v < lo || v > hi) return Fail(fmt::format("{}.{}={} must be in [{}, {}]", path_, name, v, lo, hi)), 0;
    return v;
  }
  uint64_t UInt(const Json& obj, const char* name, bool required = true) {
    const Json* f = Field(obj, name, required);
    if (!f) return 0;
    if (!f->is_number_unsigned())
      return Fail(fmt::format("{}.{} must be a non-negative integer, got {}", path_, name, Dump(*f))), 0;
    return f->get<uint64_t>();
  }
  // A finite number >= 0 (> 0 when `positive`).
  double Number(const Json& obj, const char* name, bool required = true, bool positive = false) {
    const Json* f = Field(obj, name, required);
    if (!f) return 0;
    if (!f->is_number()) return Fail(fmt::format("{}.{} must be a number, got {}", path_, name, Dump(*f))), 0;
    const double v = f->get<double>();
    if (!std::isfinite(v) || v < 0 || (positive && v == 0))
      return Fail(fmt::format("{}.{}={} must be a finite number {} 0", path_, name, v, positive ? ">" : ">=")), 0;
    return v;
  }
  // [number, ...]: each a finite number >= 0 (> 0 when `positive`).
  std::vector<double> Numbers(const Json& obj, const char* name, bool required = true, bool positive = false) {
    std::vector<double> out;
    const Json* f = Array(obj, name, required);
    if (!f) return out;
    for (size_t i = 0; i < f->size(); ++i) {
      const Json& e = (*f)[i];
      const double v = e.is_number() ? e.get<double>() : -1;
      if (!e.is_number() || !std::isfinite(v) || v < 0 || (positive && v == 0))
        return Fail(fmt::format("{}.{}[{}]={} must be a finite number {} 0", path_, name, i, Dump(e),
                                positive ? ">" : ">=")),
               std::vector<double>();
      out.push_back(v);
    }
    return out;
  }
  // {"name": integer, ...} in document order.
  std::vector<std::pair<std::string, int64_t>> IntMap(const Json& obj, const char* name, bool required) {
    std::vector<std::pair<std::string, int64_t>> out;
    const Json* f = Object(obj, name, required);
    if (!f) return out;
    for (auto it = f->begin(); it != f->end(); ++it) {
      if (!it.value().is_number_integer())
        return Fail(fmt::format("{}.{}.{} must be an integer, got {}", path_, name, it.key(), Dump(it.value()))), out;
      out.emplace_back(it.key(), it.value().get<int64_t>());
    }
    return out;
  }
  // {"variant": string, "params": {"name": integer, ...}}: a schedule by name.
  NamedSchedule Schedule(const Json& obj, const char* name) {
    NamedSchedule s;
    const Json* f = Object(obj, name, true);
    if (!f) return s;
    JsonReader sub = Sub(name);
    s.variant = sub.String(*f, "variant");
    s.params = sub.IntMap(*f, "params", false);
    Absorb(sub);
    return s;
  }

  void Fail(std::string message) {
    if (status_.ok()) status_ = Status(code_, std::move(message));
  }
  // Takes a nested reader's first error.
  void Absorb(const JsonReader& sub) {
    if (status_.ok() && !sub.status_.ok()) status_ = sub.status_;
  }

  static std::string Dump(const Json& v) {
    std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
    if (s.size() > 64) s = s.substr(0, 61) + "...";
    return s;
  }

 private:
  std::string path_;
  StatusCode code_;
  Status status_;
};

// The JSON form of a schedule by name, as JsonReader::Schedule reads it.
inline nlohmann::ordered_json ScheduleToJson(const NamedSchedule& s) {
  nlohmann::ordered_json params = nlohmann::ordered_json::object();
  for (const auto& [name, value] : s.params) params[name] = value;
  return nlohmann::ordered_json{{"variant", s.variant}, {"params", params}};
}

}  // namespace cliffguard::detail
