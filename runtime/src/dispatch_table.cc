#include "dispatch_table.h"

#include "ops/op_table.h"

#include <algorithm>
#include <bit>

namespace cliffguard {

KeyIndex::KeyIndex(size_t expected) {
  const size_t cap = std::bit_ceil(std::max<size_t>(16, expected * 2));
  slots_.assign(cap, 0);
  mask_ = cap - 1;
  shift_ = 64 - std::countr_zero(cap);
}

DispatchTable::DispatchTable(std::vector<Input> in, bool has_device_bundle,
                             std::vector<ResolvedDefault> defaults, uint64_t generation)
    : has_device_bundle_(has_device_bundle), defaults_(std::move(defaults)), generation_(generation) {
  const size_t cap = std::bit_ceil(std::max<size_t>(16, in.size() * 2));
  slots_.resize(cap);
  mask_ = cap - 1;
  shift_ = 64 - std::countr_zero(cap);
  entries_.reserve(in.size());
  std::vector<double> ratios[kNumOpKinds];
  for (Input& x : in) {
    TableEntry e;
    e.key = x.key;
    e.schedule = x.schedule;
    e.rejected = x.rejected;
    e.bounds = OpRuntimeOf(e.key.op).arg_bounds(e.key);
    e.index = static_cast<uint32_t>(entries_.size());
    e.tuned_us = x.tuned_us;
    e.default_us = x.default_us;
    e.bucket_lo = x.bucket_lo;
    e.bucket_hi = x.bucket_hi;
    if (!e.rejected && e.tuned_us > 0 && e.default_us > 0)
      ratios[static_cast<int>(e.key.op)].push_back(e.default_us / e.tuned_us);
    const uint64_t h = e.key.Hash();
    uint64_t i = h >> shift_;
    while (slots_[i].entry) i = (i + 1) & mask_;
    entries_.push_back(e);  // reserved above: never reallocates
    slots_[i] = {h, &entries_.back()};
  }
  for (const TableEntry& e : entries_)
    if (!e.rejected) families_[KeyFamily(e.key)].push_back(&e);
  for (auto& [family, list] : families_)
    std::sort(list.begin(), list.end(), [](const TableEntry* a, const TableEntry* b) {
      return a->key.dims[kVaryingDim] < b->key.dims[kVaryingDim];
    });
  for (int op = 0; op < kNumOpKinds; ++op) {
    auto& r = ratios[op];
    speedup_[op] = 1.0;
    speedup_samples_[op] = r.size();
    if (r.empty()) continue;
    std::nth_element(r.begin(), r.begin() + r.size() / 2, r.end());
    speedup_[op] = std::max(1.0, r[r.size() / 2]);
  }
}

const Schedule* DispatchTable::BundleDefault(const OpKey& key) const {
  for (const ResolvedDefault& d : defaults_)
    if (d.Serves(key)) return &d.schedule;
  return nullptr;
}


}  // namespace cliffguard
