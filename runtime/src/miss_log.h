// Internal: exact, concurrent miss accounting and a cheap clock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cliffguard/kernel.h"
#include "cliffguard/miss_report.h"
#include "cliffguard/op_key.h"

namespace cliffguard {

// Time-stamp counter ticks, converted to seconds with a calibration taken over the
// clock's own lifetime (the longer it lives, the more exact).
class TickClock {
 public:
  TickClock();
  static uint64_t Now() {
#if defined(__x86_64__)
    return __builtin_ia32_rdtsc();
#else
    return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
  }
  double TicksPerMicrosecond() const;
  double ToUnixSeconds(uint64_t ticks) const;

 private:
  uint64_t tick0_;
  std::chrono::steady_clock::time_point steady0_;
  double unix0_;
};

// One missed key. Counters are striped by thread (each stripe on its own cache lines)
// so that threads missing the same key do not contend, and kept per ServedBy kind
// (a reload can change what serves the key); kind, fallback and generation change
// only under the owning shard's mutex.
struct MissEntry {
  static constexpr int kStripes = 8;
  // Calls served by a tuned key of the family (bucket, nearest) run at hit speed, so
  // they are timed one in kTimeSampling per thread and key: that call's time stands
  // for the calls since the previous timed one. Counts stay exact. Calls served by a
  // default are all timed.
  static constexpr uint32_t kTimeSampling = 16;
  struct alignas(64) Stripe {
    std::atomic<uint64_t> count[kNumServedBy] = {};
    std::atomic<uint64_t> ticks[kNumServedBy] = {};  // time in the schedule that served
    std::atomic<uint64_t> first_tick{0};  // 0: none yet
    std::atomic<uint64_t> last_tick{0};
  };
  OpKey key;
  Stripe stripes[kStripes];
  std::atomic<uint8_t> used_stripes{0};  // bit s: stripe s has recorded (a snapshot reads only those)
  // Guarded by the shard mutex:
  MissKind kind = MissKind::kShapeMiss;
  ServedBy served_by = ServedBy::kBuiltinDefault;
  OpKey served_from;                    // bucket, nearest: the tuned key whose schedule runs
  int64_t bucket_lo = 0, bucket_hi = 0;  // bucket: its range
  Schedule fallback;
  std::string fallback_text;     // fallback.ToString(), for reports
  std::string fallback_source;   // what serves it, for people: "bucket [9, 16] of '...'", "built-in default", ...
  uint64_t generation = ~uint64_t{0};  // dispatch-table generation kind/fallback were computed for

  // Records `calls` runs served by `by` that took `ticks` in all, the last one
  // ending at t1 (stripe: any value, taken modulo kStripes).
  void Record(uint32_t stripe, ServedBy by, uint64_t calls, uint64_t ticks, uint64_t t0, uint64_t t1) {
    Stripe& s = Use(stripe);
    const int i = static_cast<int>(by);
    s.count[i].fetch_add(calls, std::memory_order_relaxed);
    s.ticks[i].fetch_add(ticks, std::memory_order_relaxed);
    Stamp(s, t0, t1);
  }
  void Record(uint32_t stripe, ServedBy by, uint64_t t0, uint64_t t1) { Record(stripe, by, 1, t1 - t0, t0, t1); }
  // One call, not timed (sampled kinds: its time comes with a later timed call).
  void Count(uint32_t stripe, ServedBy by) {
    Use(stripe).count[static_cast<int>(by)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t Count() const {
    uint64_t n = 0;
    for (const Stripe& s : stripes)
      for (const auto& c : s.count) n += c.load(std::memory_order_relaxed);
    return n;
  }

 private:
  Stripe& Use(uint32_t stripe) {
    const auto bit = static_cast<uint8_t>(1u << (stripe % kStripes));
    if (!(used_stripes.load(std::memory_order_relaxed) & bit)) used_stripes.fetch_or(bit, std::memory_order_relaxed);
    return stripes[stripe % kStripes];
  }
  static void Stamp(Stripe& s, uint64_t t0, uint64_t t1) {
    uint64_t first = 0;
    if (s.first_tick.load(std::memory_order_relaxed) == 0)
      s.first_tick.compare_exchange_strong(first, t0, std::memory_order_relaxed);
    uint64_t last = s.last_tick.load(std::memory_order_relaxed);
    while (t1 > last && !s.last_tick.compare_exchange_weak(last, t1, std::memory_order_relaxed)) {
    }
  }
};

class MissLog {
 public:
  static constexpr int kShards = 64;

  // Finds or creates the entry for `key`; `created` tells whether this is its first
  // miss. `refresh` computes kind and fallback when the entry's generation is not
  // `generation`; `current` receives them (its counters untouched). A key no kernel can run (no fallback) gets no entry: nullptr, with
  // the reason in `why`, and nothing is counted. The returned entry lives as long as
  // the MissLog.
  template <typename Refresh>
  MissEntry* Get(const OpKey& key, uint64_t hash, uint64_t generation, Refresh&& refresh, bool& created,
                 MissEntry& current, std::string& why) {
    Shard& s = shards_[(hash >> 58) & (kShards - 1)];
    std::lock_guard<std::mutex> lock(s.mu);
    auto [it, inserted] = s.map.try_emplace(key, nullptr);
    if (inserted) {
      it->second = std::make_unique<MissEntry>();
      it->second->key = key;
    }
    MissEntry* e = it->second.get();
    if (e->generation != generation) {
      refresh(*e);
      e->fallback_text = e->fallback.ToString();
      e->generation = generation;
    }
    created = inserted;
    current.kind = e->kind;
    current.served_by = e->served_by;
    current.served_from = e->served_from;
    current.bucket_lo = e->bucket_lo;
    current.bucket_hi = e->bucket_hi;
    current.fallback = e->fallback;
    current.fallback_source = e->fallback_source;
    if (!e->fallback.variant) {
      why = e->fallback_source;
      if (e->Count() == 0) s.map.erase(it);
      return nullptr;
    }
    return e;
  }

  struct Snapshot {
    OpKey key;
    MissKind kind;
    ServedBy served_by;
    OpKey served_from;
    int64_t bucket_lo, bucket_hi;
    uint64_t count, fallback_ticks, first_tick, last_tick;
    uint64_t served_calls[kNumServedBy], served_ticks[kNumServedBy];
    std::string fallback;
  };
  // Every entry with at least one counted miss, each read under its shard's lock.
  std::vector<Snapshot> Snap() const;
  // Zeroes every count and time (a child of fork() starts its own accounting).
  // Caller guarantees no other thread records meanwhile.
  void ResetCounts();

 private:
  struct alignas(64) Shard {
    mutable std::mutex mu;
    std::unordered_map<OpKey, std::unique_ptr<MissEntry>, OpKeyHash> map;
  };
  Shard shards_[kShards];
};

}  // namespace cliffguard
