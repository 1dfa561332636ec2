// Bundle writer: turns tuning outcomes into a BundleSpec (bundle.h), chooses the
// per-op bundle default, and merges bundles. Writing goes through WriteBundleFile
// (atomic: temporary file, fsync, rename).
//
// Bundle default rule (CLBlast-style, STYLE H4): among candidate schedules valid
// for EVERY tuned shape of an op, pick the one with the highest geometric mean of
// (best time of the shape / time of the candidate on the shape) over all shapes.
// A candidate that is invalid or fails on any shape is not eligible. Shapes whose
// candidate time is unknown are measured by the tuner ("cross" log records) before
// the rule is applied; see tuner.h.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cliffguard/bundle.h"
#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "cliffguard/status.h"

namespace cliffguard::tuner {

// The outcome of tuning one key. Only outcomes with a verified best go into a bundle.
struct KeyOutcome {
  OpKey key;
  bool has_best = false;       // a schedule passed the correctness gate and was timed
  Schedule best;               // the winner (after the near-tie re-measurement)
  double tuned_us = 0;         // its median time, microseconds
  double default_us = 0;       // DefaultSchedule(key)'s median time; 0 when it failed
  double tuned_spread_us = 0;  // MeasureResult::spread_us behind tuned_us (0: not known)
  double default_spread_us = 0;
  uint32_t trials = 0;         // trial measurements spent on this key (resumed ones included)
  // The bucket verified for `best` (BundleEntry::bucket_lo/hi): the range of the
  // varying dimension whose missed keys of this key's family it serves. 0, 0: none.
  int64_t bucket_lo = 0, bucket_hi = 0;
  uint64_t tuned_at = 0;       // unix seconds
  std::string provenance;      // "strategy=xgb seed=1 trials=64 host=... log=..."
};

// Index of the candidate the bundle default rule picks. times[s][c] is candidate
// c's time on shape s (<= 0 or NaN: invalid or failed there); best[s] is the best
// time known on shape s. nullopt when no candidate is valid for every shape.
// `score` receives the winner's geometric-mean relative speed in (0, 1].
std::optional<size_t> ChooseBundleDefault(const std::vector<std::vector<double>>& times,
                                          const std::vector<double>& best, double* score = nullptr);

// A bundle for `device` with one entry per outcome that has a verified best
// (entries sorted by key text, so equal inputs give equal bytes), the given op
// defaults, and the cost model ("" format and no bytes when `cost_model` is empty).
BundleSpec MakeBundleSpec(const DeviceInfo& device, std::span<const KeyOutcome> outcomes,
                          std::vector<BundleOpDefault> defaults, std::vector<uint8_t> cost_model,
                          uint64_t created_at);

// Merges bundles of ONE device (bundles hold one device each; mixing devices is
// refused with kFailedPrecondition listing every source and its fingerprint).
// Same key in several bundles: the lower tuned_us wins (first source on a tie).
// Per-op defaults and the cost model come from the source with the most entries of
// that op (resp. the most entries overall) among those that have one.
// `sources` names the bundles in messages (same length as `bundles`).
StatusOr<BundleSpec> MergeBundles(std::span<const BundleSpec> bundles, std::span<const std::string> sources,
                                  uint64_t created_at);

}  // namespace cliffguard::tuner
