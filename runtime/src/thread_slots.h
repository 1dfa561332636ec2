// Internal: the per-thread dispatch state of one Runtime. Each thread that
// dispatches gets a slot: its hit counters (summed into totals when the thread
// changes table or exits), its miss cache, and the hazard pointer that keeps the
// dispatch table it counts against alive until it moves on.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cliffguard/kernel.h"
#include "cliffguard/op_key.h"
#include "dispatch_table.h"
#include "miss_log.h"

namespace cliffguard {

// One (runtime, thread) pair. `table` is both the table whose entries `hits`
// counts and the hazard pointer that keeps that table alive.
struct ThreadSlot {
  std::atomic<const DispatchTable*> table{nullptr};
  std::unique_ptr<std::atomic<uint64_t>[]> hits;       // per entry of `table`
  std::unique_ptr<std::atomic<uint64_t>[]> plan_hits;  // per plan index; grown under mu
  size_t plan_cap = 0;
  uint32_t stripe = 0;  // this slot's stripe of the miss counters
  // Owner-only cache of recently missed keys: repeated misses skip the miss log's
  // shard mutex. Lines stay valid for one dispatch-table generation.
  struct MissCacheLine {
    uint64_t hash = 0;
    uint64_t generation = ~uint64_t{0};
    MissEntry* entry = nullptr;
    Schedule fallback;
    ArgBounds bounds{};  // the key's argument bounds
    ServedBy served_by = ServedBy::kBuiltinDefault;
    uint32_t untimed = 0;  // calls since the last timed one (sampled kinds)
    bool Holds(uint64_t h, uint64_t gen, const OpKey& key) const {
      return entry && hash == h && generation == gen && entry->key == key;
    }
  };
  std::array<MissCacheLine, 16> miss_cache{};  // indexed by hash >> 60 (OpKey::Hash: high bits)
  std::mutex mu;       // taken on table switches and by readers of the counts, never on a hit
  bool in_use = true;  // guarded by ThreadSlots::mu_

  // Owner thread only; relaxed, exact (one writer per counter).
  void CountHit(uint32_t entry_index) {
    std::atomic<uint64_t>& c = hits[entry_index];
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
};

// The calling thread's most recently used slot, trivially constructible and
// destructible so that the hit path reads it with one thread-pointer access.
struct LastSlot {
  uint64_t owner = 0;
  ThreadSlot* slot = nullptr;
};
extern constinit thread_local LastSlot t_last_slot;

class ThreadSlots {
 public:
  // `on_fork_child` runs in a child of fork() after the slots are reset (the
  // owner resets what else it counts).
  explicit ThreadSlots(std::function<void()> on_fork_child);
  ~ThreadSlots();
  ThreadSlots(const ThreadSlots&) = delete;
  ThreadSlots& operator=(const ThreadSlots&) = delete;

  // The calling thread's slot, created on its first call.
  ThreadSlot* Local() {
    const LastSlot& last = t_last_slot;  // one thread-pointer read for both fields
    if (last.owner == id_) [[likely]] return last.slot;
    return LocalSlow();
  }

  // Publishes `current` as the slot's table (its hazard) and counts against it from
  // now on; the counts of its previous table go to the totals.
  const DispatchTable* SwitchTable(ThreadSlot* s, const std::atomic<const DispatchTable*>& current);

  // The index of a plan key's counters (one per distinct key, stable).
  uint32_t PlanIndex(const OpKey& key);
  void CountPlanHit(ThreadSlot* s, uint32_t index) {
    if (index >= s->plan_cap) [[unlikely]] GrowPlanHits(s, index);
    std::atomic<uint64_t>& c = s->plan_hits[index];
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  // Adds the tables some slot still counts against (and so may still read).
  void AddLiveTables(std::unordered_set<const DispatchTable*>& live);

  // Calls add(key, hits) for the folded totals and every slot's current counters
  // (a key may be reported several times; the caller sums).
  void CollectHits(const std::function<void(const OpKey&, uint64_t)>& add);

 private:
  friend void ReleaseSlotAtThreadExit(uint64_t owner, ThreadSlot* slot);
  friend void ResetSlotsInForkChild();
  [[gnu::noinline]] ThreadSlot* LocalSlow();
  [[gnu::noinline]] void GrowPlanHits(ThreadSlot* s, uint32_t index);
  void FoldLocked(ThreadSlot* s);       // caller holds s->mu
  void FoldPlansLocked(ThreadSlot* s);  // caller holds s->mu
  void Release(ThreadSlot* s);
  void ResetAfterFork();

  const uint64_t id_;
  std::function<void()> on_fork_child_;
  std::mutex mu_;
  std::vector<std::unique_ptr<ThreadSlot>> slots_;
  std::mutex totals_mu_;  // lock order: slot mu(s) before totals_mu_
  std::unordered_map<OpKey, uint64_t, OpKeyHash> totals_;
  std::mutex plans_mu_;   // lock order: slot mu(s), totals_mu_, then plans_mu_
  std::unordered_map<OpKey, uint32_t, OpKeyHash> plan_index_;
  std::vector<OpKey> plan_keys_;  // index -> key; append-only
};

}  // namespace cliffguard
