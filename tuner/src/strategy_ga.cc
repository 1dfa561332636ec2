// "ga": a genetic search over measured points. Parents are the best `population`
// measured points (elitism: the best are never dropped from the pool), chosen by
// tournament (size 3); children take each knob from either parent (uniform crossover,
// the second parent first moved to the first's variant), then each knob mutates to a
// random value with probability 0.1 (the variant with probability 0.05). Fitness is
// measured throughput (1 / median time; failures 0). Children that are invalid,
// visited or repeated are redrawn; the batch is topped up with random points.
#include <algorithm>

#include "cliffguard/tuner/strategy.h"

namespace cliffguard::tuner {
namespace {

class GaStrategy final : public StrategyBase {
 public:
  GaStrategy(const SearchSpace& space, const StrategyOptions& options)
      : StrategyBase(space, options), population_(options.population) {}
  std::string_view name() const override { return "ga"; }

  void Update(std::span<const MeasureResult> results) override {
    for (const auto& [k, r] : MarkMeasured(results))
      members_.push_back({k, r->ok && r->median_us > 0 ? 1.0 / r->median_us : 0.0});
  }

  std::vector<Schedule> NextBatch(int n) override {
    if (n <= 0) return {};
    const int pop = std::max(4, population_ > 0 ? population_ : n);
    // Stable order for determinism: fitness desc, then id.
    std::vector<Member> pool = members_;
    std::stable_sort(pool.begin(), pool.end(), [&](const Member& a, const Member& b) {
      return a.fitness != b.fitness ? a.fitness > b.fitness : space_.Id(a.knobs) < space_.Id(b.knobs);
    });
    while (!pool.empty() && pool.back().fitness <= 0) pool.pop_back();
    if (static_cast<int>(pool.size()) > pop) pool.resize(pop);

    std::vector<Knobs> out;
    if (pool.size() >= 2) {
      std::unordered_set<uint64_t> picked;
      std::uniform_real_distribution<double> u01(0.0, 1.0);
      std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
      auto tournament = [&]() -> const Knobs& {
        size_t best = pick(rng_);
        for (int i = 1; i < 3; ++i) best = std::min(best, pick(rng_));  // pool is sorted best first
        return pool[best].knobs;
      };
      const int max_tries = 20 * n + 100;
      for (int t = 0; static_cast<int>(out.size()) < n && t < max_tries; ++t) {
        const Knobs& a = tournament();
        const Knobs b = space_.SwitchVariant(tournament(), a.variant);
        Knobs c = a;
        const KernelVariant& v = *space_.variants()[a.variant];
        for (size_t i = 0; i < v.params.size(); ++i) {
          if (rng_() & 1) c.idx[i] = b.idx[i];
          if (u01(rng_) < 0.1)
            c.idx[i] = static_cast<int16_t>(std::uniform_int_distribution<int>(0, static_cast<int>(v.params[i].values.size()) - 1)(rng_));
        }
        if (space_.num_searched_variants() > 1 && u01(rng_) < 0.05)
          c = space_.SwitchVariant(c, std::uniform_int_distribution<int>(0, space_.num_searched_variants() - 1)(rng_));
        const uint64_t id = space_.Id(c);
        if (Visited(id) || picked.count(id) || !space_.IsValid(c)) continue;
        picked.insert(id);
        out.push_back(c);
      }
      // Top up with random points (exclude this batch's children).
      for (const Knobs& k : out) visited_.insert(space_.Id(k));
    }
    for (const Knobs& k : RandomUnvisited(n - static_cast<int>(out.size()))) out.push_back(k);
    return Propose(out);
  }

 private:
  struct Member {
    Knobs knobs;
    double fitness;
  };
  int population_;
  std::vector<Member> members_;
};

}  // namespace

std::unique_ptr<SearchStrategy> MakeGaStrategy(const SearchSpace& space, const StrategyOptions& options) {
  return std::make_unique<GaStrategy>(space, options);
}

}  // namespace cliffguard::tuner
