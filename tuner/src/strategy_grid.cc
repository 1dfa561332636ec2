// "grid": the space in SearchSpace::GridId order (a strided walk that spreads any
// prefix over the whole space), skipping invalid and visited points.
#include "cliffguard/tuner/strategy.h"

namespace cliffguard::tuner {
namespace {

class GridStrategy final : public StrategyBase {
 public:
  GridStrategy(const SearchSpace& space, const StrategyOptions& options) : StrategyBase(space, options) {}
  std::string_view name() const override { return "grid"; }

  std::vector<Schedule> NextBatch(int n) override {
    std::vector<Knobs> points;
    while (static_cast<int>(points.size()) < n && cursor_ < space_.searched_size()) {
      const uint64_t id = space_.GridId(cursor_++);
      if (Visited(id)) continue;
      Knobs k = space_.FromId(id);
      if (space_.IsValid(k)) points.push_back(k);
    }
    return Propose(points);
  }
  void Update(std::span<const MeasureResult> results) override { MarkMeasured(results); }

 private:
  uint64_t cursor_ = 0;
};

}  // namespace

std::unique_ptr<SearchStrategy> MakeGridStrategy(const SearchSpace& space, const StrategyOptions& options) {
  return std::make_unique<GridStrategy>(space, options);
}

}  // namespace cliffguard::tuner
