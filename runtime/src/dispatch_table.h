// Internal: the immutable dispatch table built from the loaded bundles.
#pragma once

#include <cstdint>
#include <vector>

#include "cliffguard/kernel.h"
#include "cliffguard/miss_report.h"
#include "cliffguard/op_key.h"

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
    uint64_t pos = key.Hash() & mask_;
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
};

struct TableEntry {
  OpKey key;
  Schedule schedule;     // variant == nullptr when rejected
  bool rejected = false; // present in a bundle for this device but unusable
  uint32_t index = 0;    // position in entries(); indexes per-thread hit counters
  double tuned_us = 0, default_us = 0;
};

// Open addressing, load factor <= 0.5, built once, never mutated after Build().
class DispatchTable {
 public:
  struct Input {
    OpKey key;
    Schedule schedule;
    bool rejected = false;
    double tuned_us = 0, default_us = 0;
  };
  // Keys must be unique in `in`.
  DispatchTable(std::vector<Input> in, bool has_device_bundle, std::vector<std::pair<OpKey, Schedule>> defaults,
                uint64_t generation);

  // Hit path: no allocation, no locks.
  const TableEntry* Find(const OpKey& key, uint64_t hash) const {
    return Probe(hash, [&](const OpKey& k) { return k == key; });
  }

  // The hit path for a GEMM call: matches without building an OpKey. Gemm keys in
  // the table have zero unused dimensions (OpKey::Validate), so comparing the gemm
  // fields is key equality.
  const TableEntry* FindGemm(const GemmArgs& a, uint64_t hash) const {
    return Probe(hash, [&](const OpKey& k) {
      return ((k.dims[0] ^ a.m) | (k.dims[1] ^ a.n) | (k.dims[2] ^ a.k)) == 0 && k.op == OpKind::kGemm &&
             k.dtype == a.dtype && k.trans_a == a.trans_a && k.trans_b == a.trans_b;
    });
  }

  const std::vector<TableEntry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  bool has_device_bundle() const { return has_device_bundle_; }
  uint64_t generation() const { return generation_; }
  // The bundle default for key's op and dtype, or nullptr.
  const Schedule* BundleDefault(const OpKey& key) const;
  // Median default_us / tuned_us of usable entries of this op (1.0 when none).
  double ExpectedSpeedup(OpKind op) const;
  MissKind MissKindFor(const TableEntry* found) const {
    if (!has_device_bundle_) return MissKind::kDeviceMiss;
    return found && found->rejected ? MissKind::kRejectedEntry : MissKind::kShapeMiss;
  }

 private:
  // Linear probing from hash; `match` compares a candidate entry's key.
  template <typename Match>
  const TableEntry* Probe(uint64_t hash, Match&& match) const {
    for (uint64_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.index == 0) return nullptr;
      if (s.hash == hash && match(entries_[s.index - 1].key)) return &entries_[s.index - 1];
    }
  }

  struct Slot {
    uint64_t hash = 0;
    uint32_t index = 0;  // entry index + 1; 0 = empty
  };
  std::vector<TableEntry> entries_;
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  bool has_device_bundle_ = false;
  std::vector<std::pair<OpKey, Schedule>> defaults_;
  double speedup_[2] = {1.0, 1.0};
  uint64_t generation_ = 0;
};

}  // namespace cliffguard
