// Search strategies: which schedules to measure next for one op key.
// The tuner driver (tuner.h) asks a strategy for a batch, measures it on the
// device, and feeds the results back; a strategy never measures anything itself.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "cliffguard/op_key.h"
#include "cliffguard/status.h"
#include "cliffguard/tuner/measure_result.h"
#include "cliffguard/tuner/space.h"

namespace cliffguard::tuner {

class SearchSpace;
class CostModel;

struct StrategyOptions {
  uint64_t seed = 1;
  // xgb only: the cost model shared by every key of the same (device, op); it is
  // trained by the strategy on all results it has seen, including `history`.
  CostModel* model = nullptr;
  // xgb only: measurements of other keys (or of this key in an earlier, resumed run)
  // to warm-start the model with (transfer across shapes).
  std::span<const MeasureResult> history = {};
  // xgb only: simulated annealing per batch (explorer.h): chains, steps per round
  // (a round stops early after 50 steps without a new top candidate), and the share of
  // each batch given to random valid points.
  int sa_chains = 128;
  int sa_steps = 500;
  double epsilon = 0.05;
  // ga only: population (parents kept); 0 = the batch size.
  int population = 0;
};

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  virtual std::string_view name() const = 0;
  // Up to n valid schedules not proposed before; fewer (possibly none) when the
  // space is exhausted.
  virtual std::vector<Schedule> NextBatch(int n) = 0;
  // Results of measured schedules (ok or not), in any order. Resumed runs feed
  // earlier measurements of this key through Update before the first NextBatch;
  // those schedules are then never proposed again.
  virtual void Update(std::span<const MeasureResult> results) = 0;
};

// Base of the built-in strategies: owns a copy of the space, the generator seeded
// from options.seed, and the set of points measured or proposed (by SearchSpace::Id).
// Same seed and same Update calls -> same proposals.
class StrategyBase : public SearchStrategy {
 public:
  const SearchSpace& space() const { return space_; }

 protected:
  StrategyBase(const SearchSpace& space, const StrategyOptions& options);
  // Marks every result for this space's key whose schedule lies in the space as
  // visited; returns those results' points (same order, others skipped) with them.
  std::vector<std::pair<Knobs, const MeasureResult*>> MarkMeasured(std::span<const MeasureResult> results);
  bool Visited(uint64_t id) const { return visited_.count(id) != 0; }
  // Marks the points proposed and turns them into schedules.
  std::vector<Schedule> Propose(const std::vector<Knobs>& points);
  // Up to n distinct valid unvisited points, uniformly at random (rejection), then, if
  // the space is nearly exhausted, by a scan from a random place (up to 2^24 points).
  std::vector<Knobs> RandomUnvisited(int n);

  SearchSpace space_;
  std::mt19937_64 rng_;
  std::unordered_set<uint64_t> visited_;
};

// The built-in strategies (MakeStrategy dispatches to these by name).
std::unique_ptr<SearchStrategy> MakeRandomStrategy(const SearchSpace& space, const StrategyOptions& options);
std::unique_ptr<SearchStrategy> MakeGridStrategy(const SearchSpace& space, const StrategyOptions& options);
std::unique_ptr<SearchStrategy> MakeGaStrategy(const SearchSpace& space, const StrategyOptions& options);
// Precondition: options.model != nullptr.
std::unique_ptr<SearchStrategy> MakeXgbStrategy(const SearchSpace& space, const StrategyOptions& options);

// Names accepted by MakeStrategy, in documentation order: "xgb", "random", "grid", "ga".
std::span<const std::string_view> StrategyNames();

// kInvalidArgument naming the value and the accepted names for an unknown name;
// kInvalidArgument when "xgb" is asked for without options.model.
// The strategy keeps a copy of `space` (cheap: it refers to the kernel variants, which
// must outlive it) and a pointer to options.model, which must outlive the strategy.
// "xgb" warm-starts from options.history (adds it to the model, retrains) at creation.
// A strategy is used by one thread at a time; strategies sharing one model may run
// on different threads (the model serialises calls).
StatusOr<std::unique_ptr<SearchStrategy>> MakeStrategy(std::string_view name, const SearchSpace& space,
                                                       const StrategyOptions& options);

}  // namespace cliffguard::tuner
