// bench_serving --paired's verdict on a tuned row against its default (header-only,
// so the tests check it): over the rounds that did not lose more than max_cpu_wait of
// their time to other work on the host (cpu_wait, tuner/src/cpu_wait.h; -1, not
// measured, counts as quiet), the median and half interquartile range of the
// per-round time ratio tuned / default. Slower beyond the noise when the median
// exceeds 1 + max(2%, that spread). Not judged with fewer than half the rounds (and
// 3) quiet.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "stats.h"  // Quantile

namespace cliffguard::bench {

// A round that lost more than max_cpu_wait of its time to other work (-1, not
// measured, is not busy).
inline bool RoundBusy(double cpu_wait, double max_cpu_wait) { return cpu_wait > max_cpu_wait; }

struct PairedVerdict {
  bool judged = false;
  size_t quiet_rounds = 0;
  double median = 0, spread = 0;  // of the quiet rounds' ratios (judged only)
  bool slower = false;            // beyond the noise (judged only)
};

inline PairedVerdict JudgePaired(const std::vector<double>& tuned_s, const std::vector<double>& default_s,
                                 const std::vector<double>& round_wait, double max_cpu_wait) {
  PairedVerdict v;
  std::vector<double> ratio;
  for (size_t r = 0; r < tuned_s.size() && r < default_s.size() && r < round_wait.size(); ++r)
    if (!RoundBusy(round_wait[r], max_cpu_wait)) ratio.push_back(tuned_s[r] / default_s[r]);
  v.quiet_rounds = ratio.size();
  if (ratio.size() < std::max<size_t>(3, (round_wait.size() + 1) / 2)) return v;
  std::sort(ratio.begin(), ratio.end());
  v.judged = true;
  v.median = tuner::Quantile(ratio, 0.5);
  v.spread = 0.5 * (tuner::Quantile(ratio, 0.75) - tuner::Quantile(ratio, 0.25));
  v.slower = v.median - 1 > std::max(0.02, v.spread);
  return v;
}

}  // namespace cliffguard::bench
