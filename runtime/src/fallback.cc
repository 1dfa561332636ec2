// What a missed key runs (bundle default of its class, else the built-in default),
// its miss record (counted exactly, warned once), and Resolve.
#include <fmt/format.h>

#include "cliffguard/detail/logging.h"
#include "runtime_impl.h"

namespace cliffguard {

void Runtime::Impl::RefreshMiss(MissEntry& m, const DispatchTable* t, const TableEntry* found) const {
  m.kind = t->MissKindFor(found);
  m.served_from = OpKey{};
  m.bucket_lo = m.bucket_hi = 0;
  const TunedFallback tuned =
      t->FindTuned(m.key, policy, [&](const Schedule& s) { return CheckSchedule(s, m.key, device).ok(); });
  if (tuned.entry) {
    const TableEntry& e = *tuned.entry;
    m.served_by = tuned.served_by;
    m.served_from = e.key;
    m.fallback = e.schedule;
    if (tuned.served_by == ServedBy::kBucket) {
      m.bucket_lo = e.bucket_lo;
      m.bucket_hi = e.bucket_hi;
      m.fallback_source = fmt::format("bucket [{}, {}] of '{}'", e.bucket_lo, e.bucket_hi, e.key.ToString());
    } else {
      m.fallback_source = fmt::format("nearest tuned key '{}'", e.key.ToString());
    }
    return;
  }
  if (const Schedule* d = t->BundleDefault(m.key); d && CheckSchedule(*d, m.key, device).ok()) {
    m.served_by = ServedBy::kBundleDefault;
    m.fallback = *d;
    m.fallback_source = "bundle default";
    return;
  }
  m.served_by = ServedBy::kBuiltinDefault;
  auto s = DefaultSchedule(m.key, device);
  if (s.ok()) {
    m.fallback = *s;
    m.fallback_source = options.disable ? "built-in default (cliffguard disabled)" : "built-in default";
  } else {
    m.fallback = Schedule{};
    m.fallback_source = s.status().message();
  }
}

MissEntry* Runtime::Impl::FindMiss(const OpKey& key, uint64_t hash, const DispatchTable* t, const TableEntry* found,
                                   MissEntry& current, std::string& why) {
  bool created = false;
  MissEntry* m = misses.Get(
      key, hash, t->generation(), [&](MissEntry& e) { RefreshMiss(e, t, found); }, created, current, why);
  if (m && created && options.warn_on_miss && !options.disable) {
    // A bucket is a tuned, verified range: worth a note, not a warning.
    logging::Log(current.served_by == ServedBy::kBucket ? LogLevel::kInfo : LogLevel::kWarn,
                 "{} for '{}' on device {}: no tuned schedule of its own; running the {} ({}). "
                 "It is counted in the miss report{}.",
                 MissKindName(current.kind), key.ToString(), device.fingerprint, current.fallback_source,
                 current.fallback.ToString(),
                 ServedByTunedKey(current.served_by)           ? ""
                 : current.kind == MissKind::kDeviceMiss         ? "; no loaded bundle applies to this device (the bundle "
                                                                   "load warning says which property differs)"
                                                                 : "; tune it to remove this cliff");
  }
  return m;
}

Status Runtime::Impl::FillMissLine(ThreadSlot::MissCacheLine& line, const OpKey& key, uint64_t hash,
                                   const DispatchTable* t, const TableEntry* found, const ArgBounds& bounds) {
  MissEntry current;
  std::string why;
  MissEntry* m = FindMiss(key, hash, t, found, current, why);
  if (!m)
    return Unimplemented(fmt::format("{}: no kernel runs '{}' on {}: {}", OpKindName(key.op), key.ToString(),
                                     device.fingerprint, why));
  line.hash = hash;
  line.generation = t->generation();
  line.entry = m;
  line.fallback = current.fallback;
  line.bounds = bounds;
  line.served_by = current.served_by;
  line.untimed = 0;
  return Status::Ok();
}

Status Runtime::Impl::ResolvePlan(const char* caller, std::span<const OpKey> keys, bool& hit, Schedule& schedule,
                                  MissEntry*& miss, ServedBy& served_by, OpKey& counted) {
  std::lock_guard<std::mutex> lock(load_mu);
  const DispatchTable* t = table.load(std::memory_order_acquire);
  for (const OpKey& k : keys) {
    const TableEntry* e = t->Find(k, k.Hash());
    if (e && !e->rejected) {
      hit = true;
      schedule = e->schedule;
      counted = k;
      return Status::Ok();
    }
  }
  const OpKey& key = keys[0];
  std::string why;
  MissEntry current;
  miss = FindMiss(key, key.Hash(), t, t->Find(key, key.Hash()), current, why);
  if (!miss)
    return Unimplemented(fmt::format("{}: no kernel runs '{}' on {}: {}", caller, key.ToString(), device.fingerprint, why));
  schedule = current.fallback;
  served_by = current.served_by;
  counted = key;
  return Status::Ok();
}

StatusOr<Runtime::Resolution> Runtime::Resolve(const OpKey& key) const {
  CG_RETURN_IF_ERROR(key.Validate());
  Impl& r = *impl_;
  std::lock_guard<std::mutex> lock(r.load_mu);
  const DispatchTable* t = r.table.load(std::memory_order_acquire);
  const TableEntry* e = t->Find(key, key.Hash());
  Resolution res;
  if (e && !e->rejected) {
    res.schedule = e->schedule;
    res.hit = true;
    return res;
  }
  MissEntry tmp;
  tmp.key = key;
  r.RefreshMiss(tmp, t, e);
  res.schedule = tmp.fallback;
  res.miss_kind = tmp.kind;
  res.served_by = tmp.served_by;
  res.served_from = tmp.served_from;
  res.fallback = tmp.fallback_source;
  if (!res.schedule.variant) return Unimplemented(tmp.fallback_source);
  return res;
}

}  // namespace cliffguard
