// "random": uniformly random valid points not measured or proposed before.
#include "cliffguard/tuner/strategy.h"

namespace cliffguard::tuner {
namespace {

class RandomStrategy final : public StrategyBase {
 public:
  RandomStrategy(const SearchSpace& space, const StrategyOptions& options) : StrategyBase(space, options) {}
  std::string_view name() const override { return "random"; }
  std::vector<Schedule> NextBatch(int n) override { return Propose(RandomUnvisited(n)); }
  void Update(std::span<const MeasureResult> results) override { MarkMeasured(results); }
};

}  // namespace

std::unique_ptr<SearchStrategy> MakeRandomStrategy(const SearchSpace& space, const StrategyOptions& options) {
  return std::make_unique<RandomStrategy>(space, options);
}

}  // namespace cliffguard::tuner
