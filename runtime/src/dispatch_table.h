// Internal: the immutable dispatch table built from the loaded bundles.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "cliffguard/bundle.h"
#include "cliffguard/kernel.h"
#include "cliffguard/miss_report.h"
#include "cliffguard/op_key.h"
#include "cliffguard/runtime.h"

namespace cliffguard {

// Open-addressing set of indices into a caller's array of keys; used while loading,
// where node-based containers would cost an allocation per entry.
class KeyIndex {
 public:
  explicit KeyIndex(size_t expected);
  // Inserts index `i` whose key is `key`, unless an equal key is present: then
  // returns the index already there (and inserts nothing). Returns -1 on insertion.
  template <typename KeyAt>
  int64_t InsertOrFind(const OpKey& key, uint32_t i, KeyAt&& key_at) {
    uint64_t pos = key.Hash() >> shift_;
    while (slots_[pos] != 0) {
      const uint32_t j = slots_[pos] - 1;
      if (key_at(j) == key) return j;
      pos = (pos + 1) & mask_;
    }
    slots_[pos] = i + 1;
    return -1;
  }

 private:
  std::vector<uint32_t> slots_;
  uint64_t mask_;
  int shift_;  // slot = hash >> shift_: the high bits (OpKey::Hash)
};

// Bounds a call's arguments must meet for one key, computed once per key by the
// key's op (ops/op_table.h) so that a hit checks them without the op's rule; gemm:
// lda, ldb, ldc each in [lo, hi].
struct ArgBounds {
  int64_t lo[4] = {}, hi[4] = {};
};

struct TableEntry {
  OpKey key;
  Schedule schedule;     // variant == nullptr when rejected
  bool rejected = false; // present in a bundle for this device but unusable
  uint32_t index = 0;    // position in entries(); indexes per-thread hit counters
  ArgBounds bounds{};    // what a call with this key may pass
  double tuned_us = 0, default_us = 0;
  int64_t bucket_lo = 0, bucket_hi = 0;  // range of the varying dimension it also serves; 0, 0: none
};

// A tuned entry that serves a missed key of its family (bucket or nearest).
struct TunedFallback {
  ServedBy served_by = ServedBy::kBuiltinDefault;  // kBucket or kNearest when `entry` is set
  const TableEntry* entry = nullptr;
};

// Open addressing, load factor <= 0.5, built once, never mutated after Build().
class DispatchTable {
 public:
  struct Input {
    OpKey key;
    Schedule schedule;
    bool rejected = false;
    double tuned_us = 0, default_us = 0;
    int64_t bucket_lo = 0, bucket_hi = 0;
  };
  // Keys must be unique in `in`.
  DispatchTable(std::vector<Input> in, bool has_device_bundle, std::vector<ResolvedDefault> defaults,
                uint64_t generation);
  DispatchTable(const DispatchTable&) = delete;  // slots point into entries_
  DispatchTable& operator=(const DispatchTable&) = delete;

  // Hit path: no allocation, no locks.
  const TableEntry* Find(const OpKey& key, uint64_t hash) const {
    return Probe(hash, [&](const OpKey& k) { return k == key; });
  }

  const std::vector<TableEntry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  bool has_device_bundle() const { return has_device_bundle_; }
  uint64_t generation() const { return generation_; }
  // The bundle default that serves key (its op, dtype and shape class), or nullptr.
  const Schedule* BundleDefault(const OpKey& key) const;
  // The tuned entry of key's family that serves it as a miss under `policy`
  // (runtime.h, FallbackPolicy): a bucket holding its varying dimension (of several,
  // the one whose key is nearest), else with kNearest the nearest tuned key within a
  // factor of kNearestMaxRatio; only
  // entries whose schedule `valid` accepts for key. A constant-weights key looks in
  // its own family, then in the family without constant weights. Not on the hit
  // path: a missed key resolves once per table.
  template <typename Valid>
  TunedFallback FindTuned(const OpKey& key, FallbackPolicy policy, Valid&& valid) const;
  // Median default_us / tuned_us of usable entries of this op (1.0 when none), and
  // how many entries it is taken over.
  double ExpectedSpeedup(OpKind op) const { return speedup_[static_cast<int>(op)]; }
  size_t SpeedupSamples(OpKind op) const { return speedup_samples_[static_cast<int>(op)]; }
  MissKind MissKindFor(const TableEntry* found) const {
    if (!has_device_bundle_) return MissKind::kDeviceMiss;
    return found && found->rejected ? MissKind::kRejectedEntry : MissKind::kShapeMiss;
  }

  // A key's op, dtype, trans_a and trans_b as one word (op in the lowest byte, as
  // KeyHeaderHash builds it): one compare instead of four.
  static uint32_t HeadWord(const OpKey& k) {
    static_assert(offsetof(OpKey, op) == 0 && offsetof(OpKey, dtype) == 1 && offsetof(OpKey, trans_a) == 2 &&
                  offsetof(OpKey, trans_b) == 3);
    static_assert(std::endian::native == std::endian::little);
    uint32_t w;
    std::memcpy(&w, &k, sizeof w);
    return w;
  }

  // Linear probing from hash; `match` compares a candidate entry's key. Ops' hit
  // paths match their call arguments without building an OpKey.
  template <typename Match>
  const TableEntry* Probe(uint64_t hash, Match&& match) const {
    for (uint64_t i = hash >> shift_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.entry) return nullptr;
      if (s.hash == hash && match(s.entry->key)) return s.entry;
    }
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    const TableEntry* entry = nullptr;  // into entries_, which never reallocates; null = empty
  };
  std::vector<TableEntry> entries_;
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  int shift_ = 64;  // slot = hash >> shift_: the high bits (OpKey::Hash)
  bool has_device_bundle_ = false;
  std::vector<ResolvedDefault> defaults_;
  // Usable entries by family (KeyFamily), each list ordered by the varying dimension.
  std::unordered_map<OpKey, std::vector<const TableEntry*>, OpKeyHash> families_;
  double speedup_[kNumOpKinds] = {};
  size_t speedup_samples_[kNumOpKinds] = {};
  uint64_t generation_ = 0;
};

template <typename Valid>
TunedFallback DispatchTable::FindTuned(const OpKey& key, FallbackPolicy policy, Valid&& valid) const {
  if (policy == FallbackPolicy::kExact || families_.empty()) return {};
  const int64_t v = key.dims[kVaryingDim];
  const auto distance = [v](const TableEntry* e) {
    return std::abs(std::log2(double(e->key.dims[kVaryingDim])) - std::log2(double(v)));
  };
  // Of two candidates, the nearer; at equal distance the larger varying dimension.
  const auto better = [&](const TableEntry* a, const TableEntry* b) {
    if (!b) return true;
    const double da = distance(a), db = distance(b);
    return da != db ? da < db : a->key.dims[kVaryingDim] > b->key.dims[kVaryingDim];
  };
  OpKey families[2] = {KeyFamily(key), KeyFamily(key)};
  families[1].constant_weights = false;
  const int n = key.constant_weights ? 2 : 1;
  for (const ServedBy by : {ServedBy::kBucket, ServedBy::kNearest}) {
    if (by == ServedBy::kNearest && policy != FallbackPolicy::kNearest) break;
    for (int f = 0; f < n; ++f) {
      auto it = families_.find(families[f]);
      if (it == families_.end()) continue;
      const TableEntry* best = nullptr;
      for (const TableEntry* e : it->second) {
        const int64_t w = e->key.dims[kVaryingDim];
        if (by == ServedBy::kBucket ? !(e->bucket_lo <= v && v <= e->bucket_hi)
                                    : w > kNearestMaxRatio * v || v > kNearestMaxRatio * w)
          continue;
        if (better(e, best) && valid(e->schedule)) best = e;
      }
      if (best) return {by, best};
    }
  }
  return {};
}

}  // namespace cliffguard
