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
  // Time per call, microseconds (ok only): the median of every timed call (Measure),
  // or of the rounds' mean call times (MeasureInterleaved).
  double median_us = 0;
  std::string error;      // why not ok, e.g. "wrong result: max error 3.1e-02 > 1.0e-03"
  // How far the result moves within the measurement (ok only; 0: not known): half
  // the range of round_us.
  double spread_us = 0;
  // In order (ok only): the mean call time of each interleaved round
  // (MeasureInterleaved, where the candidates take turns, so round r of two
  // candidates measured together ran under the same conditions: ComparePaired in
  // tuner.h), or the median of each quarter of the calls (Measure).
  std::vector<double> round_us;
  // ok only: the share of the timed window its worker process lost to others, in
  // [0, 1]: its measuring thread's run-queue wait over its running and runnable
  // time, plus the hypervisor's steal over the window's CPU time (tuner/src/cpu_wait.h). A
  // measurement at a high share ran on a busy host, and its times can be biased
  // between schedules. -1: not measured (no /proc, or a fake).
  double cpu_wait = -1;
};

}  // namespace cliffguard::tuner
