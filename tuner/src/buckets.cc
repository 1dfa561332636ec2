#include "cliffguard/tuner/buckets.h"

#include <algorithm>
#include <charconv>
#include <string>

#include <fmt/format.h>

namespace cliffguard::tuner {

namespace {

std::string_view Trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

bool ParseInt(std::string_view text, int64_t& v) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return !text.empty() && ec == std::errc() && p == text.data() + text.size();
}

}  // namespace

StatusOr<std::vector<int64_t>> ParseBucketEnds(std::string_view spec, OpKind op) {
  const std::string_view dim = VaryingDimName(op);
  const std::string_view t = Trim(spec);
  const size_t colon = t.find(':');
  if (colon == std::string_view::npos)
    return InvalidArgument(fmt::format("bucket spec '{}' must be {}:E1,E2,... (increasing upper ends) or {}:pow2:N",
                                       spec, dim, dim));
  const std::string_view prefix = Trim(t.substr(0, colon)), body = Trim(t.substr(colon + 1));
  if (prefix != dim)
    return InvalidArgument(fmt::format("bucket spec '{}': dimension '{}' is not the varying dimension of {} ('{}')",
                                       spec, prefix, OpKindName(op), dim));
  std::vector<int64_t> ends;
  const size_t colon2 = body.find(':');
  if (colon2 != std::string_view::npos) {
    const std::string_view form = Trim(body.substr(0, colon2)), arg = Trim(body.substr(colon2 + 1));
    if (form != "pow2")
      return InvalidArgument(fmt::format("bucket spec '{}': '{}' is not a form of ends (pow2)", spec, form));
    int64_t n = 0;
    if (!ParseInt(arg, n) || n < 1 || n > kMaxBucketEnd)
      return InvalidArgument(fmt::format("bucket spec '{}': pow2 bound '{}' must be an integer in [1, 2^31]", spec, arg));
    for (int64_t e = 1; e < n; e *= 2) ends.push_back(e);
    ends.push_back(n);
    return ends;
  }
  for (size_t start = 0;;) {
    const size_t comma = body.find(',', start);
    const std::string_view part =
        Trim(body.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    int64_t e = 0;
    if (part == "pow2") return InvalidArgument(fmt::format("bucket spec '{}': pow2 needs its bound: {}:pow2:N", spec, dim));
    if (!ParseInt(part, e))
      return InvalidArgument(fmt::format("bucket spec '{}': end '{}' is not an integer", spec, part));
    if (e < 1 || e > kMaxBucketEnd)
      return InvalidArgument(fmt::format("bucket spec '{}': end {} must be in [1, 2^31]", spec, e));
    if (!ends.empty() && e <= ends.back())
      return InvalidArgument(
          fmt::format("bucket spec '{}': end {} after {}: the ends must be strictly increasing", spec, e, ends.back()));
    ends.push_back(e);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ends;
}

BucketPlan BucketTargets(const std::vector<OpKey>& keys, const std::vector<int64_t>& ends) {
  BucketPlan plan;
  std::vector<OpKey> families;
  for (const OpKey& k : keys) {
    const int64_t v = k.dims[kVaryingDim];
    if (ends.empty() || v > ends.back()) {
      if (std::find(plan.exact_keys.begin(), plan.exact_keys.end(), k) == plan.exact_keys.end())
        plan.exact_keys.push_back(k);
      continue;
    }
    const OpKey f = KeyFamily(k);
    if (std::find(families.begin(), families.end(), f) == families.end()) families.push_back(f);
  }
  for (const OpKey& f : families) {
    int64_t lo = 1;
    for (const int64_t hi : ends) {
      int64_t rep = 0;
      for (const OpKey& k : keys)
        if (KeyFamily(k) == f && k.dims[kVaryingDim] >= lo && k.dims[kVaryingDim] <= hi)
          rep = std::max(rep, k.dims[kVaryingDim]);
      plan.targets.push_back({WithVaryingDim(f, rep > 0 ? rep : hi), lo, hi});
      lo = hi + 1;
    }
  }
  return plan;
}

ReportSelection SelectFromReport(const MissReport& report, int top, const std::function<bool(const OpKey&)>& accept) {
  ReportSelection out;
  if (!report.recommended_buckets.empty()) {
    std::vector<const BucketRecommendation*> recs;
    for (const auto& b : report.recommended_buckets) recs.push_back(&b);
    std::stable_sort(recs.begin(), recs.end(), [](const BucketRecommendation* a, const BucketRecommendation* b) {
      return a->expected_gain_us > b->expected_gain_us;
    });
    for (const BucketRecommendation* b : recs) {
      if (static_cast<int>(out.buckets.size()) >= top) break;
      if (!accept(b->key)) {
        out.skipped.push_back(b->key);
        continue;
      }
      out.buckets.push_back({b->key, b->lo, b->hi});
    }
    return out;
  }
  for (const MissRecord& r : report.records) {
    if (static_cast<int>(out.keys.size()) >= top) break;
    if (!accept(r.key)) {
      out.skipped.push_back(r.key);
      continue;
    }
    out.keys.push_back(r.key);
  }
  return out;
}

}  // namespace cliffguard::tuner
