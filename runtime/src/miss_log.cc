#include "miss_log.h"

#include <algorithm>
#include <thread>

namespace cliffguard {

TickClock::TickClock()
    : tick0_(Now()),
      steady0_(std::chrono::steady_clock::now()),
      unix0_(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()) {}

double TickClock::TicksPerMicrosecond() const {
  // Calibrate over at least 2 ms of the clock's life.
  auto elapsed = std::chrono::steady_clock::now() - steady0_;
  if (elapsed < std::chrono::milliseconds(2)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2) - elapsed);
    elapsed = std::chrono::steady_clock::now() - steady0_;
  }
  const uint64_t ticks = Now() - tick0_;
  const double us = std::chrono::duration<double, std::micro>(elapsed).count();
  return us > 0 ? double(ticks) / us : 1.0;
}

double TickClock::ToUnixSeconds(uint64_t ticks) const {
  if (ticks == 0) return 0;
  return unix0_ + (double(int64_t(ticks - tick0_)) / TicksPerMicrosecond()) * 1e-6;
}

std::vector<MissLog::Snapshot> MissLog::Snap() const {
  std::vector<Snapshot> out;
  size_t entries = 0;
  for (const Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    entries += s.map.size();
  }
  out.reserve(entries + entries / 8);
  for (const Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    for (const auto& [key, e] : s.map) {
      Snapshot snap{key, e->kind, e->served_by, e->served_from, e->bucket_lo, e->bucket_hi, 0, 0, 0, 0, {}, {},
                    e->fallback_text};
      const uint8_t used = e->used_stripes.load(std::memory_order_relaxed);
      for (int si = 0; si < MissEntry::kStripes; ++si) {
        if (!(used & (1u << si))) continue;
        const MissEntry::Stripe& st = e->stripes[si];
        for (int i = 0; i < kNumServedBy; ++i) {
          const uint64_t n = st.count[i].load(std::memory_order_relaxed), t = st.ticks[i].load(std::memory_order_relaxed);
          snap.served_calls[i] += n;
          snap.served_ticks[i] += t;
          snap.count += n;
          snap.fallback_ticks += t;
        }
        const uint64_t first = st.first_tick.load(std::memory_order_relaxed);
        if (first && (!snap.first_tick || first < snap.first_tick)) snap.first_tick = first;
        snap.last_tick = std::max(snap.last_tick, st.last_tick.load(std::memory_order_relaxed));
      }
      if (snap.count) out.push_back(std::move(snap));
    }
  }
  return out;
}

void MissLog::ResetCounts() {
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    for (auto& [key, e] : s.map)
      for (auto& st : e->stripes) {
        for (auto& c : st.count) c.store(0, std::memory_order_relaxed);
        for (auto& t : st.ticks) t.store(0, std::memory_order_relaxed);
        st.first_tick.store(0, std::memory_order_relaxed);
        st.last_tick.store(0, std::memory_order_relaxed);
      }
  }
}

}  // namespace cliffguard
