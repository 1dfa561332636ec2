// The search space of one (op key, device): every kernel variant that supports the
// key, crossed with the value lists of its tunable parameters (STYLE H10: named
// parameters, value lists and constraint predicates, all taken from KernelVariant).
//
// A point of the space ("knobs") is a variant index plus one value index per
// parameter. Each point has a dense 64-bit id in [0, size()): the variants' blocks
// laid end to end, each block a mixed-radix number over its parameters' value
// indices. The id is stable for a given variant list and is used to dedupe.
// Variants measured only through their candidates (KernelVariant::candidates_only,
// e.g. cuBLASLt's algorithm ids, valid only as its heuristic returns them) take the
// last blocks, past searched_size(): random draws, neighbours and the grid walk stay
// below it, so such a block (1e14 points, a handful valid) cannot crowd out the
// searched variants.
//
// A point is valid when CheckSchedule() accepts its schedule, i.e. the variant's own
// check() passes (values are in their lists by construction; VariantSupports was
// checked once, at Create), and the variant does not call it redundant (a repeat of
// a schedule with smaller blocks, KernelVariant::redundant).
//
// Thread-safety: a SearchSpace is immutable after Create; const methods may be called
// from any number of threads (random methods take the caller's generator).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "cliffguard/op_key.h"
#include "cliffguard/status.h"

namespace cliffguard::tuner {

// One point: `variant` indexes SearchSpace::variants(); idx[i] indexes the value list
// of the variant's i-th parameter (slots past the variant's parameter count are 0).
struct Knobs {
  int16_t variant = 0;
  std::array<int16_t, kMaxParams> idx{};
  friend bool operator==(const Knobs& a, const Knobs& b) = default;
};

// Number of knob positions (variant included) where a and b differ; a different
// variant counts as 1 plus every parameter slot whose index differs.
int KnobDistance(const Knobs& a, const Knobs& b);

// A 64-bit hash of (variant name, parameter values): stable across runs, builds and
// spaces (unlike SearchSpace::Id). Used to dedupe measurements in the cost model.
uint64_t ScheduleHash(const Schedule& s);

class SearchSpace {
 public:
  // Builds the space for `key` on `device` from `variants` (default, when empty: every
  // variant in AllKernelVariants()). Variants that VariantSupports() declines are
  // dropped and their reasons kept in declined(). Errors: kInvalidArgument for an
  // invalid key, a null variant, a variant with more than kMaxParams parameters or an
  // empty/unsorted value list, or a space with 2^62 points or more; kUnimplemented
  // naming every reason when no variant supports the key.
  // The variants must outlive the space (AllKernelVariants() entries always do).
  static StatusOr<SearchSpace> Create(const OpKey& key, const DeviceInfo& device,
                                      std::span<const KernelVariant* const> variants = {});

  const OpKey& key() const { return key_; }
  const DeviceInfo& device() const { return device_; }
  std::span<const KernelVariant* const> variants() const { return variants_; }
  int num_variants() const { return static_cast<int>(variants_.size()); }
  // "<variant>: <reason>" for each variant dropped by VariantSupports at Create.
  const std::vector<std::string>& declined() const { return declined_; }

  // Points before constraints (sum over variants of the product of list lengths).
  uint64_t size() const { return size_; }
  // Points of the searched variants: ids [0, searched_size()), variants
  // [0, num_searched_variants()).
  uint64_t searched_size() const { return searched_size_; }
  int num_searched_variants() const { return num_searched_; }
  uint64_t variant_size(int v) const { return block_size_[v]; }
  // Fraction of points that are valid, estimated at Create from a fixed-seed uniform
  // sample (exact when the space has at most 4096 points).
  double valid_fraction() const { return valid_fraction_; }

  // Point <-> dense id in [0, size()). Precondition: id < size(), knobs in range.
  uint64_t Id(const Knobs& k) const;
  Knobs FromId(uint64_t id) const;

  // Point <-> schedule. FromSchedule fails with kNotFound when the variant is not in
  // this space and kOutOfRange when a value is not in its list.
  Schedule ToSchedule(const Knobs& k) const;
  StatusOr<Knobs> FromSchedule(const Schedule& s) const;

  // CheckSchedule(ToSchedule(k)), without re-checking what Create established.
  Status Check(const Knobs& k) const;
  bool IsValid(const Knobs& k) const { return Check(k).ok(); }

  // A uniformly random point of the searched variants (valid or not). Precondition:
  // searched_size() > 0.
  Knobs SampleAny(std::mt19937_64& rng) const;
  // A uniformly random valid point of the searched variants: rejection sampling (up
  // to `max_tries`), then a walk in grid order from a random start (up to 2^22
  // points). nullopt when neither finds one.
  std::optional<Knobs> SampleValid(std::mt19937_64& rng, int max_tries = 256) const;
  // A valid neighbour of k for annealing: one or two knobs moved by +-1 index or set
  // to a random value; with probability `p_switch` the variant changes instead,
  // keeping the nearest value of every same-named parameter. nullopt when `max_tries`
  // proposals were all invalid or equal to k.
  std::optional<Knobs> Neighbour(const Knobs& k, std::mt19937_64& rng, double p_switch = 0.05,
                                 int max_tries = 16) const;
  // The same parameter values, as near as the lists allow, on variant v.
  Knobs SwitchVariant(const Knobs& k, int v) const;

  // Grid order: GridId(i) for i = 0 .. searched_size()-1 visits every searched id exactly once, in a
  // deterministic rank-1 lattice walk (stride ~ size/golden ratio, coprime with size)
  // so that any prefix is spread over the whole space and every variant, rather than
  // sweeping one corner first.
  uint64_t GridId(uint64_t i) const;

 private:
  SearchSpace() = default;

  OpKey key_;
  DeviceInfo device_;
  std::vector<const KernelVariant*> variants_;
  std::vector<std::string> declined_;
  std::vector<uint64_t> block_size_;   // points per variant
  std::vector<uint64_t> block_start_;  // first id of each variant
  uint64_t size_ = 0;
  uint64_t searched_size_ = 0;  // ids below it: the searched variants' points
  int num_searched_ = 0;        // variants_[0, num_searched_) are searched
  uint64_t grid_stride_ = 1;
  double valid_fraction_ = 0;
};

}  // namespace cliffguard::tuner
