#include "cliffguard/tuner/strategy.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace cliffguard::tuner {

StrategyBase::StrategyBase(const SearchSpace& space, const StrategyOptions& options)
    : space_(space), rng_(options.seed) {}

std::vector<std::pair<Knobs, const MeasureResult*>> StrategyBase::MarkMeasured(std::span<const MeasureResult> results) {
  std::vector<std::pair<Knobs, const MeasureResult*>> out;
  for (const MeasureResult& r : results) {
    if (r.key != space_.key() || !r.schedule.variant) continue;
    auto k = space_.FromSchedule(r.schedule);
    if (!k.ok()) continue;
    visited_.insert(space_.Id(*k));
    out.emplace_back(*k, &r);
  }
  return out;
}

std::vector<Schedule> StrategyBase::Propose(const std::vector<Knobs>& points) {
  std::vector<Schedule> out;
  out.reserve(points.size());
  for (const Knobs& k : points) {
    visited_.insert(space_.Id(k));
    out.push_back(space_.ToSchedule(k));
  }
  return out;
}

std::vector<Knobs> StrategyBase::RandomUnvisited(int n) {
  std::vector<Knobs> out;
  if (n <= 0) return out;
  std::unordered_set<uint64_t> picked;
  const int max_tries = 32 * n + 256;
  for (int t = 0; static_cast<int>(out.size()) < n && t < max_tries; ++t) {
    auto k = space_.SampleValid(rng_, 64);
    if (!k) return out;  // no valid point at all
    const uint64_t id = space_.Id(*k);
    if (Visited(id) || !picked.insert(id).second) continue;
    out.push_back(*k);
  }
  if (static_cast<int>(out.size()) < n) {
    // Nearly exhausted: scan in grid order from a random place.
    const uint64_t size = space_.searched_size();
    if (size == 0) return out;
    const uint64_t start = std::uniform_int_distribution<uint64_t>(0, size - 1)(rng_);
    const uint64_t limit = std::min<uint64_t>(size, uint64_t{1} << 24);
    for (uint64_t j = 0; j < limit && static_cast<int>(out.size()) < n; ++j) {
      const uint64_t id = space_.GridId((start + j) % size);
      if (Visited(id) || picked.count(id)) continue;
      Knobs k = space_.FromId(id);
      if (!space_.IsValid(k)) continue;
      picked.insert(id);
      out.push_back(k);
    }
  }
  return out;
}

std::span<const std::string_view> StrategyNames() {
  static constexpr std::array<std::string_view, 4> kNames = {"xgb", "random", "grid", "ga"};
  return kNames;
}

StatusOr<std::unique_ptr<SearchStrategy>> MakeStrategy(std::string_view name, const SearchSpace& space,
                                                       const StrategyOptions& options) {
  if (name == "xgb") {
    if (!options.model) return InvalidArgument("strategy 'xgb' needs StrategyOptions::model (a CostModel)");
    if (options.sa_chains < 1 || options.sa_steps < 1 || options.epsilon < 0 || options.epsilon > 1)
      return InvalidArgument(fmt::format("strategy 'xgb': sa_chains={} and sa_steps={} must be >= 1, epsilon={} in [0, 1]",
                                         options.sa_chains, options.sa_steps, options.epsilon));
    return MakeXgbStrategy(space, options);
  }
  if (name == "random") return MakeRandomStrategy(space, options);
  if (name == "grid") return MakeGridStrategy(space, options);
  if (name == "ga") return MakeGaStrategy(space, options);
  return InvalidArgument(fmt::format("unknown search strategy '{}'; expected one of: {}", name,
                                     fmt::join(StrategyNames(), ", ")));
}

}  // namespace cliffguard::tuner
