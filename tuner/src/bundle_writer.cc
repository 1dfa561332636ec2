#include "cliffguard/tuner/bundle_writer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <fmt/format.h>

namespace cliffguard::tuner {

std::optional<size_t> ChooseBundleDefault(const std::vector<std::vector<double>>& times,
                                          const std::vector<double>& best, double* score) {
  if (times.empty()) return std::nullopt;
  const size_t num_candidates = times[0].size();
  std::optional<size_t> winner;
  double winner_score = -1;
  for (size_t c = 0; c < num_candidates; ++c) {
    double log_sum = 0;
    bool eligible = true;
    for (size_t s = 0; s < times.size() && eligible; ++s) {
      const double t = c < times[s].size() ? times[s][c] : 0;
      if (!(t > 0) || !(best[s] > 0)) {
        eligible = false;
        break;
      }
      log_sum += std::log(std::min(1.0, best[s] / t));
    }
    if (!eligible) continue;
    const double g = std::exp(log_sum / static_cast<double>(times.size()));
    if (g > winner_score) {
      winner_score = g;
      winner = c;
    }
  }
  if (winner && score) *score = winner_score;
  return winner;
}

BundleSpec MakeBundleSpec(const DeviceInfo& device, std::span<const KeyOutcome> outcomes,
                          std::vector<BundleOpDefault> defaults, std::vector<uint8_t> cost_model,
                          uint64_t created_at) {
  BundleSpec spec;
  spec.producer = "cliffguard tune";
  spec.producer_version = CliffguardVersion();
  spec.created_at = created_at;
  spec.device = device;
  for (const auto& o : outcomes) {
    if (!o.has_best) continue;
    BundleEntry e;
    e.key = o.key;
    e.schedule = ToNamed(o.best);
    e.tuned_us = o.tuned_us;
    e.default_us = o.default_us;
    e.tuned_spread_us = o.tuned_spread_us;
    e.default_spread_us = o.default_spread_us;
    e.trials = o.trials;
    e.bucket_lo = o.bucket_lo;
    e.bucket_hi = o.bucket_hi;
    e.tuned_at = o.tuned_at;
    e.provenance = o.provenance;
    spec.entries.push_back(std::move(e));
  }
  std::sort(spec.entries.begin(), spec.entries.end(),
            [](const BundleEntry& a, const BundleEntry& b) { return a.key.ToString() < b.key.ToString(); });
  spec.defaults = std::move(defaults);
  if (!cost_model.empty()) {
    spec.cost_model_format = "xgboost-json";
    spec.cost_model = std::move(cost_model);
  }
  return spec;
}

StatusOr<BundleSpec> MergeBundles(std::span<const BundleSpec> bundles, std::span<const std::string> sources,
                                  uint64_t created_at) {
  if (bundles.empty()) return InvalidArgument("merge: no bundles given");
  if (sources.size() != bundles.size())
    return InvalidArgument(fmt::format("merge: {} sources for {} bundles", sources.size(), bundles.size()));
  bool mixed = false;
  for (const auto& b : bundles) mixed |= b.device.fingerprint != bundles[0].device.fingerprint;
  if (mixed) {
    std::string list;
    for (size_t i = 0; i < bundles.size(); ++i)
      list += fmt::format("\n  {}: {} ({})", sources[i], bundles[i].device.fingerprint, bundles[i].device.name);
    return FailedPrecondition(fmt::format(
        "merge: the bundles are for different devices; a bundle holds one device, so bundles of "
        "different devices cannot be merged (ship them side by side instead):{}",
        list));
  }
  BundleSpec out;
  out.producer = "cliffguard merge";
  out.producer_version = CliffguardVersion();
  out.created_at = created_at;
  out.device = bundles[0].device;
  std::map<std::string, BundleEntry> by_key;
  for (const auto& b : bundles)
    for (const auto& e : b.entries) {
      auto [it, inserted] = by_key.emplace(e.key.ToString(), e);
      if (!inserted && e.tuned_us > 0 && (e.tuned_us < it->second.tuned_us || !(it->second.tuned_us > 0)))
        it->second = e;
    }
  for (auto& [k, e] : by_key) out.entries.push_back(std::move(e));

  // Op defaults: per (op, dtype, shape class), from the source with the most entries
  // of that op and class that has one. A default of unspecified class (an older
  // bundle) serves the classes of its own bundle's entries: it is written once for
  // each of them, so merging does not widen it to the other sources' shapes.
  std::map<std::tuple<int, int, int>, std::pair<size_t, BundleOpDefault>> chosen;
  for (const auto& b : bundles)
    for (const auto& d : b.defaults)
      for (uint8_t c = 1; c < kNumShapeClasses; ++c) {
        const auto cls = static_cast<ShapeClass>(c);
        if (d.shape_class != ShapeClass::kUnspecified && d.shape_class != cls) continue;
        const size_t n = std::count_if(b.entries.begin(), b.entries.end(), [&](const BundleEntry& e) {
          return e.key.op == d.op && e.key.dtype == d.dtype && ShapeClassOf(e.key) == cls;
        });
        if (d.shape_class == ShapeClass::kUnspecified && n == 0) continue;
        BundleOpDefault x = d;
        x.shape_class = cls;
        const auto key = std::make_tuple(static_cast<int>(d.op), static_cast<int>(d.dtype), static_cast<int>(c));
        auto it = chosen.find(key);
        if (it == chosen.end() || n > it->second.first) chosen[key] = {n, std::move(x)};
      }
  for (auto& [k, v] : chosen) out.defaults.push_back(std::move(v.second));

  const BundleSpec* model_src = nullptr;
  for (const auto& b : bundles)
    if (!b.cost_model.empty() && (!model_src || b.entries.size() > model_src->entries.size())) model_src = &b;
  if (model_src) {
    out.cost_model_format = model_src->cost_model_format;
    out.cost_model = model_src->cost_model;
  }
  return out;
}

}  // namespace cliffguard::tuner
