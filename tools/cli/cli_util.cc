#include "cli_util.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace cliffguard::cli {

std::string Table::Render() const {
  std::vector<size_t> w(header_.size(), 0);
  auto widen = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  };
  widen(header_);
  for (const auto& r : rows_) widen(r);
  auto numeric = [](const std::string& s) {
    return !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' || s[0] == '+') &&
           s.find_first_of("abcdefghijklmnopqrstuvwxyz=") == std::string::npos;
  };
  std::string out;
  auto line = [&](const std::vector<std::string>& r) {
    std::string l;
    for (size_t i = 0; i < w.size(); ++i) {
      const std::string cell = i < r.size() ? r[i] : "";
      if (i) l += "  ";
      l += numeric(cell) ? fmt::format("{:>{}}", cell, w[i]) : fmt::format("{:<{}}", cell, w[i]);
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(header_);
  std::vector<std::string> rule;
  for (size_t x : w) rule.push_back(std::string(x, '-'));
  line(rule);
  for (const auto& r : rows_) line(r);
  return out;
}

std::string HumanMicros(double us) {
  if (us < 1000) return fmt::format("{:.1f} us", us);
  if (us < 1e6) return fmt::format("{:.2f} ms", us / 1e3);
  return fmt::format("{:.2f} s", us / 1e6);
}

std::string DeviceDifferences(const DeviceInfo& bundle, const DeviceInfo& here) {
  std::vector<std::string> diffs;
  auto text = [&](const char* what, std::string_view theirs, std::string_view ours) {
    if (theirs != ours) diffs.push_back(fmt::format("{} '{}' (here '{}')", what, theirs, ours));
  };
  text("backend", BackendName(bundle.backend), BackendName(here.backend));
  text("vendor", bundle.vendor, here.vendor);
  text("name", bundle.name, here.name);
  text("arch", bundle.arch, here.arch);
  for (const auto& prop : bundle.properties) {
    if (prop.first == "isa") continue;
    const auto it = std::find_if(here.properties.begin(), here.properties.end(),
                                 [&](const auto& p) { return p.first == prop.first; });
    if (it == here.properties.end()) diffs.push_back(fmt::format("{} {} (here none)", prop.first, prop.second));
    else if (it->second != prop.second)
      diffs.push_back(fmt::format("{} {} (here {})", prop.first, prop.second, it->second));
  }
  if (diffs.empty()) return "the properties it lists match; its fingerprint does not";
  std::string out;
  for (const auto& d : diffs) out += (out.empty() ? "" : ", ") + d;
  return out;
}

}  // namespace cliffguard::cli
