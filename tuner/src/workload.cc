#include "cliffguard/tuner/workload.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace cliffguard::tuner {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Line number (1-based) of byte offset `pos` in `text`.
int LineOf(std::string_view text, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

StatusOr<OpKey> ParseKeyText(std::string_view text, std::string_view source, int line) {
  auto key = ParseShape(text);
  if (!key.ok()) return InvalidArgument(fmt::format("{}:{}: {}", source, line, key.status().message()));
  return key;
}

}  // namespace

std::vector<OpKey> DedupKeys(const std::vector<OpKey>& keys) {
  std::unordered_set<OpKey, OpKeyHash> seen;
  std::vector<OpKey> out;
  for (const auto& k : keys)
    if (seen.insert(k).second) out.push_back(k);
  return out;
}

StatusOr<std::vector<OpKey>> ParseWorkload(std::string_view text, std::string_view source) {
  std::vector<OpKey> keys;
  const std::string_view trimmed = Trim(text);
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '[') {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text.begin(), text.end());
    } catch (const nlohmann::json::parse_error& e) {
      return InvalidArgument(fmt::format("{}:{}: not valid JSON (workload as a JSON array of op key strings): {}",
                                         source, LineOf(text, e.byte > 0 ? e.byte - 1 : 0), e.what()));
    } catch (const nlohmann::json::exception& e) {  // e.g. out_of_range for a number too large
      return InvalidArgument(fmt::format("{}: not valid JSON (workload as a JSON array of op key strings): {}", source,
                                         e.what()));
    }
    if (!j.is_array()) return InvalidArgument(fmt::format("{}: a JSON workload must be an array of strings", source));
    // Line numbers for array elements: locate each string in the text in order.
    size_t search_from = first;
    for (size_t i = 0; i < j.size(); ++i) {
      if (!j[i].is_string())
        return InvalidArgument(fmt::format("{}: element {} is {}, not an op key string", source, i,
                                           j[i].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
      const std::string s = j[i].get<std::string>();
      size_t pos = text.find(s, search_from);
      int line = pos == std::string_view::npos ? 0 : LineOf(text, pos);
      if (pos != std::string_view::npos) search_from = pos + s.size();
      CG_ASSIGN_OR_RETURN(OpKey key, ParseKeyText(Trim(s), source, line));
      keys.push_back(key);
    }
  } else {
    int line_no = 0;
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string_view::npos) nl = text.size();
      ++line_no;
      std::string_view line = text.substr(pos, nl - pos);
      if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
      line = Trim(line);
      if (!line.empty()) {
        CG_ASSIGN_OR_RETURN(OpKey key, ParseKeyText(line, source, line_no));
        keys.push_back(key);
      }
      pos = nl + 1;
    }
  }
  (void)trimmed;
  if (keys.empty()) return InvalidArgument(fmt::format("{}: the workload lists no op keys", source));
  return DedupKeys(keys);
}

StatusOr<std::vector<OpKey>> ReadWorkloadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(fmt::format("workload file '{}' cannot be opened", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseWorkload(ss.str(), path);
}

StatusOr<Shard> ParseShard(std::string_view text) {
  Shard s;
  const size_t slash = text.find('/');
  auto number = [](std::string_view v, int& out) {
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    return !v.empty() && ec == std::errc() && end == v.data() + v.size();
  };
  if (slash == std::string_view::npos || !number(text.substr(0, slash), s.index) ||
      !number(text.substr(slash + 1), s.count) || s.count < 1 || s.count > 65536 || s.index < 0 || s.index >= s.count)
    return InvalidArgument(fmt::format("shard '{}' must be I/N with integers 0 <= I < N <= 65536 (shard I of N, "
                                       "counted from 0)",
                                       text));
  return s;
}

std::vector<size_t> ShardIndices(const std::vector<std::string>& names, Shard shard) {
  std::vector<size_t> order(names.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return names[a] < names[b]; });
  std::vector<size_t> out;
  for (size_t r = static_cast<size_t>(shard.index); r < order.size(); r += static_cast<size_t>(shard.count))
    out.push_back(order[r]);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace cliffguard::tuner
