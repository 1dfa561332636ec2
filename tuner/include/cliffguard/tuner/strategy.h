// Search strategies: which schedules to measure next for one op key.
// The tuner driver (tuner.h) asks a strategy for a batch, measures it on the
// device, and feeds the results back; a strategy never measures anything itself.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "cliffguard/op_key.h"
#include "cliffguard/status.h"

namespace cliffguard::tuner {

class SearchSpace;
class CostModel;

// One measurement of one schedule for one key.
struct MeasureResult {
  OpKey key;
  Schedule schedule;
  bool ok = false;        // passed the correctness gate and timed
  double median_us = 0;   // median time per call, microseconds (ok only)
  std::string error;      // why not ok, e.g. "wrong result: max error 3.1e-02 > 1.0e-03"
};

struct StrategyOptions {
  uint64_t seed = 1;
  // xgb only: the cost model shared by every key of the same (device, op); it is
  // trained by the strategy on all results it has seen, including `history`.
  CostModel* model = nullptr;
  // xgb only: measurements of other keys (or of this key in an earlier, resumed run)
  // to warm-start the model with (transfer across shapes).
  std::span<const MeasureResult> history = {};
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

// Names accepted by MakeStrategy, in documentation order: "xgb", "random", "grid", "ga".
std::span<const std::string_view> StrategyNames();

// kInvalidArgument naming the value and the accepted names for an unknown name;
// kInvalidArgument when "xgb" is asked for without options.model.
StatusOr<std::unique_ptr<SearchStrategy>> MakeStrategy(std::string_view name, const SearchSpace& space,
                                                       const StrategyOptions& options);

}  // namespace cliffguard::tuner
