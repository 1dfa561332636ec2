// Order statistics the measurer and the tuner share (internal).
#pragma once

#include <algorithm>
#include <vector>

namespace cliffguard::tuner {

// The q-quantile of sorted, non-empty values (linear interpolation).
inline double Quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * double(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - double(lo)) * (sorted[hi] - sorted[lo]);
}

// The median of non-empty values.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return Quantile(v, 0.5);
}

}  // namespace cliffguard::tuner
