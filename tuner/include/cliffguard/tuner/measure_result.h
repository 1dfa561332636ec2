// One measurement of one schedule for one key: what the measurer produces, the
// tuning log stores and the strategies learn from.
#pragma once

#include <string>
#include <vector>

#include "cliffguard/kernel.h"
#include "cliffguard/op_key.h"

namespace cliffguard::tuner {

struct MeasureResult {
  OpKey key;
  Schedule schedule;
  bool ok = false;        // passed the correctness gate and timed
  double median_us = 0;   // median time per call, microseconds (ok only)
  std::string error;      // why not ok, e.g. "wrong result: max error 3.1e-02 > 1.0e-03"
  // How far the median moves within the measurement (ok only; 0: not known): half
  // the range of the medians of its interleaved rounds, or of four consecutive parts.
  double spread_us = 0;
  // Those medians, in order (ok only): one per interleaved round (MeasureInterleaved,
  // where the candidates' calls alternate, so round r of two candidates measured
  // together ran under the same conditions: ComparePaired in tuner.h), or one per
  // quarter of the calls (Measure).
  std::vector<double> round_us;
};

}  // namespace cliffguard::tuner
