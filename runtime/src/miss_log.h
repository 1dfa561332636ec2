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

// One missed key. Counters are striped by thread (each stripe on its own cache line)
// so that threads missing the same key do not contend; kind, fallback and
// generation change only under the owning shard's mutex.
struct MissEntry {
  static constexpr int kStripes = 8;
  struct alignas(64) Stripe {
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> fallback_ticks{0};
    std::atomic<uint64_t> first_tick{0};  // 0: none yet
    std::atomic<uint64_t> last_tick{0};
  };
  OpKey key;
  Stripe stripes[kStripes];
  // Guarded by the shard mutex:
  MissKind kind = MissKind::kShapeMiss;
  Schedule fallback;
  std::string fallback_source;   // "bundle default" or "built-in default"
  uint64_t generation = ~uint64_t{0};  // dispatch-table generation kind/fallback were computed for

  // Records one fallback run on stripe `stripe` (any value; taken modulo kStripes).
  void Record(uint32_t stripe, uint64_t t0, uint64_t t1) {
    Stripe& s = stripes[stripe % kStripes];
    s.count.fetch_add(1, std::memory_order_relaxed);
    s.fallback_ticks.fetch_add(t1 - t0, std::memory_order_relaxed);
    uint64_t first = 0;
    if (s.first_tick.load(std::memory_order_relaxed) == 0)
      s.first_tick.compare_exchange_strong(first, t0, std::memory_order_relaxed);
    uint64_t last = s.last_tick.load(std::memory_order_relaxed);
    while (t1 > last && !s.last_tick.compare_exchange_weak(last, t1, std::memory_order_relaxed)) {
    }
  }
  uint64_t Count() const {
    uint64_t n = 0;
    for (const Stripe& s : stripes) n += s.count.load(std::memory_order_relaxed);
    return n;
  }
};

class MissLog {
 public:
  static constexpr int kShards = 64;

  // Finds or creates the entry for `key`; `created` tells whether this is its first
  // miss. `refresh` computes kind and fallback when the entry's generation is not
  // `generation`. A key no kernel can run (no fallback) gets no entry: nullptr, with
  // the reason in `why`, and nothing is counted. The returned entry lives as long as
  // the MissLog.
  template <typename Refresh>
  MissEntry* Get(const OpKey& key, uint64_t hash, uint64_t generation, Refresh&& refresh, bool& created,
                 Schedule& fallback, std::string& why) {
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
      e->generation = generation;
    }
    created = inserted;
    fallback = e->fallback;
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
    uint64_t count, fallback_ticks, first_tick, last_tick;
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
