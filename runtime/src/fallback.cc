// What a missed key runs (bundle default of its class, else the built-in default),
// its miss record (counted exactly, warned once), and Resolve.
#include <fmt/format.h>

#include "cliffguard/detail/logging.h"
#include "runtime_impl.h"

namespace cliffguard {

void Runtime::Impl::RefreshMiss(MissEntry& m, const DispatchTable* t, const TableEntry* found) const {
  m.kind = t->MissKindFor(found);
  if (const Schedule* d = t->BundleDefault(m.key); d && CheckSchedule(*d, m.key, device).ok()) {
    m.fallback = *d;
    m.fallback_source = "bundle default";
    return;
  }
  auto s = DefaultSchedule(m.key, device);
  if (s.ok()) {
    m.fallback = *s;
    m.fallback_source = "built-in default";
  } else {
    m.fallback = Schedule{};
    m.fallback_source = s.status().message();
  }
}

MissEntry* Runtime::Impl::FindMiss(const OpKey& key, uint64_t hash, const DispatchTable* t, const TableEntry* found,
                                   Schedule& fallback, std::string& why) {
  bool created = false;
  MissEntry* m = misses.Get(
      key, hash, t->generation(), [&](MissEntry& e) { RefreshMiss(e, t, found); }, created, fallback, why);
  if (m && created && options.warn_on_miss) {
    logging::Warn("{} for '{}' on device {}: no tuned schedule; running the {} ({}). "
                  "It is counted in the miss report; tune it to remove this cliff.",
                  MissKindName(m->kind), key.ToString(), device.fingerprint, m->fallback_source, fallback.ToString());
  }
  return m;
}

Status Runtime::Impl::FillMissLine(ThreadSlot::MissCacheLine& line, const OpKey& key, uint64_t hash,
                                   const DispatchTable* t, const TableEntry* found, const ArgBounds& bounds) {
  Schedule fallback;
  std::string why;
  MissEntry* m = FindMiss(key, hash, t, found, fallback, why);
  if (!m)
    return Unimplemented(fmt::format("{}: no kernel runs '{}' on {}: {}", OpKindName(key.op), key.ToString(),
                                     device.fingerprint, why));
  line = {hash, t->generation(), m, fallback, bounds};
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
  res.fallback = tmp.fallback_source;
  if (!res.schedule.variant) return Unimplemented(tmp.fallback_source);
  return res;
}

}  // namespace cliffguard
