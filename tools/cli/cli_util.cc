#include "cli_util.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace cliffguard::cli {

StatusOr<OpKey> ParseGemmShape(std::string_view text) {
  if (text.rfind("gemm ", 0) == 0) return OpKey::Parse(text);
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (parts.size() != 3 && parts.size() != 4)
    return InvalidArgument(fmt::format("shape '{}' must be M,N,K or M,N,K,LAYOUT (LAYOUT: nn, nt, tn, tt)", text));
  int64_t d[3];
  const char* names[3] = {"M", "N", "K"};
  for (int i = 0; i < 3; ++i) {
    auto [p, ec] = std::from_chars(parts[i].data(), parts[i].data() + parts[i].size(), d[i]);
    if (ec != std::errc() || p != parts[i].data() + parts[i].size())
      return InvalidArgument(fmt::format("shape '{}': {}='{}' is not an integer", text, names[i], parts[i]));
  }
  bool ta = false, tb = false;
  if (parts.size() == 4) {
    const std::string_view l = parts[3];
    if (l != "nn" && l != "nt" && l != "tn" && l != "tt")
      return InvalidArgument(fmt::format("shape '{}': layout '{}' must be one of nn, nt, tn, tt", text, l));
    ta = l[0] == 't';
    tb = l[1] == 't';
  }
  OpKey key = OpKey::Gemm(d[0], d[1], d[2], ta, tb);
  Status st = key.Validate();
  if (!st.ok()) return InvalidArgument(fmt::format("shape '{}': {}", text, st.message()));
  return key;
}

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

}  // namespace cliffguard::cli
