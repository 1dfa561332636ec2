// Shape buckets (dynamic shapes): which ranges of the varying dimension (kVaryingDim,
// op_key.h: m for gemm) to tune as buckets, and the key that represents each range.
// A BucketTarget (tuner.h) is tuned like any key, then checked at the ends of its
// range; a verified bucket lets one bundle entry serve every missed key of its family
// whose varying dimension falls in the range. See docs/tuning.md, "Buckets".
//
// Spec grammar (`tune --buckets`), DIM being the op's VaryingDimName ("m" for gemm):
//   DIM:E1,E2,...,En   upper ends of the ranges, strictly increasing, 1 <= Ei <= 2^31;
//                      the ranges are [1, E1], [E1+1, E2], ..., [E(n-1)+1, En]
//   DIM:pow2:N         the ends 1, 2, 4, ... (powers of two below N), then N;
//                      1 <= N <= 2^31 ("m:pow2:16" is "m:1,2,4,8,16")
// Spaces around the parts are ignored.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "cliffguard/miss_report.h"
#include "cliffguard/op_key.h"
#include "cliffguard/status.h"
#include "cliffguard/tuner/tuner.h"

namespace cliffguard::tuner {

// The largest end a bucket may have (CheckBucket's bound).
inline constexpr int64_t kMaxBucketEnd = int64_t{1} << 31;

// The upper ends of a bucket spec (grammar above) for keys of `op`. Errors
// (kInvalidArgument) name the spec text, the offending part and the rule.
StatusOr<std::vector<int64_t>> ParseBucketEnds(std::string_view spec, OpKind op = OpKind::kGemm);

struct BucketPlan {
  // Per family (KeyFamily) of the given keys, in order of first appearance, one
  // target per range, ranges ascending. A range's representative key is the given
  // key of the family with the largest varying dimension inside the range, else
  // the family's key at the range's upper end. Given keys inside a range other than
  // its representative are not tuned themselves: the bucket serves them.
  std::vector<BucketTarget> targets;
  // Given keys whose varying dimension exceeds the last end: in no bucket, tuned as
  // exact keys (in their given order, without duplicates).
  std::vector<OpKey> exact_keys;
};

// The bucket targets of `keys` for the range ends `ends` (as ParseBucketEnds returns
// them: positive, strictly increasing). Empty `ends`: every key is exact.
BucketPlan BucketTargets(const std::vector<OpKey>& keys, const std::vector<int64_t>& ends);

// What `tune --from-report` takes from a miss report. When the report recommends
// buckets (MissReport::recommended_buckets), its `top` recommendations of highest
// expected gain that `accept` keeps become bucket targets (lo, hi and the
// representative key as recommended) and no key is taken exactly; a report without
// recommendations (older reports) gives its `top` first ranked records that `accept`
// keeps as exact keys (rank the records first: RankMissRecords). `skipped` lists the
// keys `accept` refused before `top` was reached.
struct ReportSelection {
  std::vector<BucketTarget> buckets;
  std::vector<OpKey> keys;
  std::vector<OpKey> skipped;
};
ReportSelection SelectFromReport(const MissReport& report, int top,
                                 const std::function<bool(const OpKey&)>& accept);

}  // namespace cliffguard::tuner
