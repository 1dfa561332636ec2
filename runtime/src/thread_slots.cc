#include "thread_slots.h"

#include <pthread.h>

#include <algorithm>
#include <bit>

namespace cliffguard {

constinit thread_local LastSlot t_last_slot;

void ReleaseSlotAtThreadExit(uint64_t owner, ThreadSlot* slot);

namespace {

std::atomic<uint64_t> g_next_owner{1};
std::mutex g_registry_mu;
// Every live ThreadSlots by owner id. Never destroyed: threads exit after static
// destruction has begun.
std::unordered_map<uint64_t, ThreadSlots*>& Registry() {
  static auto* r = new std::unordered_map<uint64_t, ThreadSlots*>();
  return *r;
}

// The calling thread's slots, one per runtime it dispatched through. Released at
// thread exit so that their counts fold into the runtime's totals.
struct LocalSlots {
  std::vector<std::pair<uint64_t, ThreadSlot*>> all;
  ~LocalSlots() {
    for (auto& [owner, slot] : all) ReleaseSlotAtThreadExit(owner, slot);
  }
};
thread_local LocalSlots t_slots;

}  // namespace

void ReleaseSlotAtThreadExit(uint64_t owner, ThreadSlot* slot) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = Registry().find(owner);
  if (it != Registry().end()) it->second->Release(slot);
}

// Documented rule: fork while no other thread is inside a cliffguard call, so no
// cliffguard lock is held by a thread that does not exist in the child.
void ResetSlotsInForkChild() {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  for (auto& [owner, slots] : Registry()) slots->ResetAfterFork();
}

ThreadSlots::ThreadSlots(std::function<void()> on_fork_child)
    : id_(g_next_owner.fetch_add(1)), on_fork_child_(std::move(on_fork_child)) {
  static std::once_flag fork_handler;
  std::call_once(fork_handler, [] { ::pthread_atfork(nullptr, nullptr, ResetSlotsInForkChild); });
  std::lock_guard<std::mutex> lock(g_registry_mu);
  Registry()[id_] = this;
}

ThreadSlots::~ThreadSlots() {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  Registry().erase(id_);
}

ThreadSlot* ThreadSlots::LocalSlow() {
  {
    // Forget slots of runtimes destroyed since: the list stays as long as the
    // number of live runtimes this thread uses.
    std::lock_guard<std::mutex> lock(g_registry_mu);
    std::erase_if(t_slots.all, [](const auto& e) { return !Registry().count(e.first); });
  }
  for (auto& [owner, slot] : t_slots.all) {
    if (owner == id_) {
      t_last_slot = {id_, slot};
      return slot;
    }
  }
  ThreadSlot* slot = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : slots_) {
      if (!s->in_use) {
        s->in_use = true;
        slot = s.get();
        break;
      }
    }
    if (!slot) {
      slots_.push_back(std::make_unique<ThreadSlot>());
      slot = slots_.back().get();
      slot->stripe = static_cast<uint32_t>(slots_.size() - 1);
    }
  }
  t_slots.all.emplace_back(id_, slot);
  t_last_slot = {id_, slot};
  return slot;
}

void ThreadSlots::FoldLocked(ThreadSlot* s) {
  const DispatchTable* t = s->table.load(std::memory_order_relaxed);
  if (!t || !s->hits) return;
  std::lock_guard<std::mutex> lock(totals_mu_);
  for (size_t i = 0; i < t->size(); ++i) {
    const uint64_t n = s->hits[i].load(std::memory_order_relaxed);
    if (n) totals_[t->entries()[i].key] += n;
  }
}

void ThreadSlots::FoldPlansLocked(ThreadSlot* s) {
  if (!s->plan_cap) return;
  std::lock_guard<std::mutex> lock(totals_mu_);
  std::lock_guard<std::mutex> plans_lock(plans_mu_);
  for (size_t i = 0; i < s->plan_cap; ++i) {
    const uint64_t n = s->plan_hits[i].load(std::memory_order_relaxed);
    if (n) totals_[plan_keys_[i]] += n;
    s->plan_hits[i].store(0, std::memory_order_relaxed);
  }
}

void ThreadSlots::GrowPlanHits(ThreadSlot* s, uint32_t i) {
  std::lock_guard<std::mutex> lock(s->mu);
  const size_t cap = std::max<size_t>(16, std::bit_ceil(size_t(i) + 1));
  auto grown = std::make_unique<std::atomic<uint64_t>[]>(cap);
  for (size_t j = 0; j < cap; ++j)
    grown[j].store(j < s->plan_cap ? s->plan_hits[j].load(std::memory_order_relaxed) : 0, std::memory_order_relaxed);
  s->plan_hits = std::move(grown);
  s->plan_cap = cap;
}

const DispatchTable* ThreadSlots::SwitchTable(ThreadSlot* s, const std::atomic<const DispatchTable*>& current) {
  std::lock_guard<std::mutex> lock(s->mu);
  FoldLocked(s);
  for (;;) {
    const DispatchTable* t = current.load(std::memory_order_acquire);
    s->table.store(t, std::memory_order_seq_cst);
    if (current.load(std::memory_order_seq_cst) == t) {
      const size_t n = std::max<size_t>(1, t->size());
      s->hits.reset(new std::atomic<uint64_t>[n]);
      for (size_t i = 0; i < n; ++i) s->hits[i].store(0, std::memory_order_relaxed);
      return t;
    }
  }
}

void ThreadSlots::Release(ThreadSlot* s) {
  {
    std::lock_guard<std::mutex> lock(s->mu);
    FoldLocked(s);
    FoldPlansLocked(s);
    s->hits.reset();
    s->table.store(nullptr, std::memory_order_seq_cst);
  }
  std::lock_guard<std::mutex> lock(mu_);
  s->in_use = false;
}

uint32_t ThreadSlots::PlanIndex(const OpKey& key) {
  std::lock_guard<std::mutex> lock(plans_mu_);
  auto [it, inserted] = plan_index_.try_emplace(key, static_cast<uint32_t>(plan_keys_.size()));
  if (inserted) plan_keys_.push_back(key);
  return it->second;
}

void ThreadSlots::AddLiveTables(std::unordered_set<const DispatchTable*>& live) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : slots_) live.insert(s->table.load(std::memory_order_seq_cst));
}

void ThreadSlots::CollectHits(const std::function<void(const OpKey&, uint64_t)>& add) {
  std::lock_guard<std::mutex> slots_lock(mu_);
  std::vector<std::unique_lock<std::mutex>> held;
  held.reserve(slots_.size());
  for (auto& s : slots_) held.emplace_back(s->mu);
  for (auto& s : slots_) {
    const DispatchTable* t = s->table.load(std::memory_order_relaxed);
    if (!t || !s->hits) continue;
    for (size_t i = 0; i < t->size(); ++i)
      if (uint64_t n = s->hits[i].load(std::memory_order_relaxed)) add(t->entries()[i].key, n);
  }
  std::lock_guard<std::mutex> totals_lock(totals_mu_);
  for (const auto& [k, n] : totals_) add(k, n);
  std::lock_guard<std::mutex> plans_lock(plans_mu_);
  for (auto& s : slots_)
    for (size_t i = 0; i < s->plan_cap; ++i)
      if (uint64_t n = s->plan_hits[i].load(std::memory_order_relaxed)) add(plan_keys_[i], n);
}

// In a child of fork(), where only the forking thread runs: counts start at zero and
// slots of threads that do not exist here are freed.
void ThreadSlots::ResetAfterFork() {
  {
    std::lock_guard<std::mutex> slots_lock(mu_);
    for (auto& sp : slots_) {
      ThreadSlot* s = sp.get();
      std::lock_guard<std::mutex> lock(s->mu);
      const DispatchTable* t = s->table.load(std::memory_order_relaxed);
      if (t && s->hits)
        for (size_t i = 0; i < std::max<size_t>(1, t->size()); ++i) s->hits[i].store(0, std::memory_order_relaxed);
      for (size_t i = 0; i < s->plan_cap; ++i) s->plan_hits[i].store(0, std::memory_order_relaxed);
      const bool mine = std::any_of(t_slots.all.begin(), t_slots.all.end(),
                                    [&](const auto& e) { return e.first == id_ && e.second == s; });
      if (!mine) {
        s->hits.reset();
        s->table.store(nullptr, std::memory_order_relaxed);
        s->in_use = false;
      }
    }
    std::lock_guard<std::mutex> lock(totals_mu_);
    totals_.clear();
  }
  if (on_fork_child_) on_fork_child_();
}

}  // namespace cliffguard
