#include "cliffguard/runtime.h"

#include <algorithm>
#include <array>
#include <bit>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <pthread.h>
#include <unistd.h>

#include <fmt/format.h>

#include "cliffguard/detail/logging.h"

#include "bundle_internal.h"
#include "dispatch_table.h"
#include "miss_log.h"

namespace cliffguard {

namespace {

// Per-thread dispatch state, one per (runtime, thread). `table` is both the table
// whose entries `hits` counts and the hazard pointer that keeps that table alive.
struct ThreadSlot {
  std::atomic<const DispatchTable*> table{nullptr};
  std::unique_ptr<std::atomic<uint64_t>[]> hits;
  // Hits of GemmPlan runs, indexed by the plan key's index; grown under mu.
  std::unique_ptr<std::atomic<uint64_t>[]> plan_hits;
  size_t plan_cap = 0;
  uint32_t stripe = 0;  // this slot's stripe of the miss counters
  // Owner-only cache of recently missed keys: repeated misses skip the miss log's
  // shard mutex. Entries stay valid for one dispatch-table generation.
  struct MissCacheLine {
    uint64_t hash = 0;
    uint64_t generation = ~uint64_t{0};
    MissEntry* entry = nullptr;
    Schedule fallback;
    GemmLdBounds ld{};  // the key's leading-dimension bounds
  };
  std::array<MissCacheLine, 16> miss_cache{};  // indexed by hash >> 60
  std::mutex mu;        // taken on table switches and by readers of the counts, never on a hit
  bool in_use = true;   // guarded by Impl::slots_mu
};

std::atomic<uint64_t> g_next_runtime_id{1};
std::mutex g_registry_mu;
std::unordered_map<uint64_t, Runtime::Impl*>& Registry() {
  static auto* r = new std::unordered_map<uint64_t, Runtime::Impl*>();  // never destroyed: used at thread exit
  return *r;
}

void ReleaseSlotOf(uint64_t runtime_id, ThreadSlot* slot);

// The calling thread's slots, one per runtime it dispatched through. Released at
// thread exit so that their counts fold into the runtime's totals.
struct LocalSlots {
  std::vector<std::pair<uint64_t, ThreadSlot*>> all;
  ~LocalSlots() {
    for (auto& [id, slot] : all) ReleaseSlotOf(id, slot);
  }
};
thread_local LocalSlots t_slots;
// The last slot used, trivially destructible so that the hit path reads it directly.
struct LastSlot {
  uint64_t id = 0;
  ThreadSlot* slot = nullptr;
};
thread_local LastSlot t_last;

// Argument checks for a call whose key is known valid (a table entry's or a plan's):
// that key's leading-dimension bounds (ValidateGemmArgs' rule) and pointers.
// Branch-free.
inline bool KnownKeyArgsValid(const GemmArgs& a, const GemmLdBounds& ld) {
  return (a.lda >= ld.lo[0]) & (a.lda <= ld.hi[0]) & (a.ldb >= ld.lo[1]) & (a.ldb <= ld.hi[1]) &
         (a.ldc >= ld.lo[2]) & (a.ldc <= ld.hi[2]) & (a.a != nullptr) & (a.b != nullptr) & (a.c != nullptr);
}

// The entry a call hits (usable, arguments valid for its key), or nullptr; `found`
// keeps what the probe found, which decides the kind of a miss.
inline const TableEntry* HitEntry(const DispatchTable& t, const GemmArgs& a, uint64_t hash, const TableEntry*& found) {
  found = t.FindGemm(a, hash);
  return found && !found->rejected && KnownKeyArgsValid(a, found->ld) ? found : nullptr;
}

// Counts a hit in the thread's counter and runs the entry's schedule.
inline Status RunHit(ThreadSlot* s, const TableEntry& e, const GemmArgs& a) {
  std::atomic<uint64_t>& c = s->hits[e.index];
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return RunGemm(e.schedule, a);
}

// Dimensions that can form a gemm key; the rest of ValidateGemmArgs' rule is the
// key's leading-dimension bounds (KnownKeyArgsValid).
inline bool GemmDimsValid(const GemmArgs& a) {
  constexpr int64_t kMax = int64_t{1} << 31;
  return (a.m >= 1) & (a.n >= 1) & (a.k >= 1) & (a.m <= kMax) & (a.n <= kMax) & (a.k <= kMax) &
         (static_cast<uint8_t>(a.dtype) < kNumDTypes);
}

// Out of line so that the hit paths keep a small frame.
[[gnu::noinline, gnu::cold]] Status InvalidGemmArgs(const GemmArgs& a) {
  CG_RETURN_IF_ERROR(ValidateGemmArgs(a));
  return InvalidArgument(fmt::format("gemm: arguments m={} n={} k={} are too large", a.m, a.n, a.k));
}

struct LoadedBundle {
  LoadReport report;
  ResolvedBundle resolved;  // empty when the device does not match
};

}  // namespace

struct Runtime::Impl {
  RuntimeOptions options;
  DeviceInfo device;
  uint64_t id = g_next_runtime_id.fetch_add(1);
  TickClock clock;

  std::atomic<const DispatchTable*> table{nullptr};
  std::mutex load_mu;  // serialises loads, table swaps and reclamation
  std::vector<LoadedBundle> bundles;
  std::vector<std::unique_ptr<const DispatchTable>> tables;  // current + retired, still referenced
  uint64_t generation = 0;

  std::mutex slots_mu;
  std::vector<std::unique_ptr<ThreadSlot>> slots;

  std::mutex totals_mu;  // lock order: slot mu(s) before totals_mu
  std::unordered_map<OpKey, uint64_t, OpKeyHash> hit_totals;

  std::mutex plans_mu;  // lock order: slot mu(s), totals_mu, then plans_mu
  std::unordered_map<OpKey, uint32_t, OpKeyHash> plan_index;
  std::vector<OpKey> plan_keys;  // index -> key; append-only

  MissLog misses;

  std::mutex warned_mu;
  std::unordered_set<std::string> warned_bundles;  // LogLoad: bundles warned about once

  pid_t pid = ::getpid();  // the process whose calls are counted (a fork child's own)
  std::string report_path;  // where the destructor writes the miss report; "" for none

  ThreadSlot* LocalSlot() {
    const LastSlot& last = t_last;  // one thread-pointer read for both fields
    if (last.id == id) [[likely]] return last.slot;
    return LocalSlotSlow();
  }

  [[gnu::noinline]] ThreadSlot* LocalSlotSlow() {
    {
      // Forget slots of runtimes destroyed since: the list stays as long as the
      // number of live runtimes this thread uses.
      std::lock_guard<std::mutex> lock(g_registry_mu);
      std::erase_if(t_slots.all, [](const auto& e) { return !Registry().count(e.first); });
    }
    for (auto& [rid, slot] : t_slots.all) {
      if (rid == id) {
        t_last = {id, slot};
        return slot;
      }
    }
    ThreadSlot* slot = nullptr;
    {
      std::lock_guard<std::mutex> lock(slots_mu);
      for (auto& s : slots) {
        if (!s->in_use) {
          s->in_use = true;
          slot = s.get();
          break;
        }
      }
      if (!slot) {
        slots.push_back(std::make_unique<ThreadSlot>());
        slot = slots.back().get();
        slot->stripe = static_cast<uint32_t>(slots.size() - 1);
      }
    }
    t_slots.all.emplace_back(id, slot);
    t_last = {id, slot};
    return slot;
  }

  // Adds the slot's table hit counts to the totals. Caller holds s->mu.
  void FoldLocked(ThreadSlot* s) {
    const DispatchTable* t = s->table.load(std::memory_order_relaxed);
    if (!t || !s->hits) return;
    std::lock_guard<std::mutex> lock(totals_mu);
    for (size_t i = 0; i < t->size(); ++i) {
      const uint64_t n = s->hits[i].load(std::memory_order_relaxed);
      if (n) hit_totals[t->entries()[i].key] += n;
    }
  }

  // Adds the slot's plan hit counts to the totals and clears them. Caller holds s->mu.
  void FoldPlansLocked(ThreadSlot* s) {
    if (!s->plan_cap) return;
    std::lock_guard<std::mutex> lock(totals_mu);
    std::lock_guard<std::mutex> plans_lock(plans_mu);
    for (size_t i = 0; i < s->plan_cap; ++i) {
      const uint64_t n = s->plan_hits[i].load(std::memory_order_relaxed);
      if (n) hit_totals[plan_keys[i]] += n;
      s->plan_hits[i].store(0, std::memory_order_relaxed);
    }
  }

  // Makes room for plan index i in the slot's plan counters (first run of a plan on
  // this thread).
  [[gnu::noinline]] void GrowPlanHits(ThreadSlot* s, uint32_t i) {
    std::lock_guard<std::mutex> lock(s->mu);
    const size_t cap = std::max<size_t>(16, std::bit_ceil(size_t(i) + 1));
    auto grown = std::make_unique<std::atomic<uint64_t>[]>(cap);
    for (size_t j = 0; j < cap; ++j)
      grown[j].store(j < s->plan_cap ? s->plan_hits[j].load(std::memory_order_relaxed) : 0, std::memory_order_relaxed);
    s->plan_hits = std::move(grown);
    s->plan_cap = cap;
  }

  // Publishes the current table as this slot's hazard and counts against it.
  [[gnu::noinline]] const DispatchTable* SwitchTable(ThreadSlot* s) {
    std::lock_guard<std::mutex> lock(s->mu);
    FoldLocked(s);
    for (;;) {
      const DispatchTable* t = table.load(std::memory_order_acquire);
      s->table.store(t, std::memory_order_seq_cst);
      if (table.load(std::memory_order_seq_cst) == t) {
        s->hits.reset(new std::atomic<uint64_t>[std::max<size_t>(1, t->size())]);
        for (size_t i = 0; i < std::max<size_t>(1, t->size()); ++i) s->hits[i].store(0, std::memory_order_relaxed);
        return t;
      }
    }
  }

  void ReleaseSlot(ThreadSlot* s) {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      FoldLocked(s);
      FoldPlansLocked(s);
      s->hits.reset();
      s->table.store(nullptr, std::memory_order_seq_cst);
    }
    std::lock_guard<std::mutex> lock(slots_mu);
    s->in_use = false;
  }

  // Frees retired tables no slot still points at. Caller holds load_mu.
  void ReclaimLocked() {
    std::unordered_set<const DispatchTable*> live;
    live.insert(table.load(std::memory_order_seq_cst));
    {
      std::lock_guard<std::mutex> lock(slots_mu);
      for (auto& s : slots) live.insert(s->table.load(std::memory_order_seq_cst));
    }
    std::erase_if(tables, [&](const std::unique_ptr<const DispatchTable>& t) { return !live.count(t.get()); });
  }

  // Builds a table from the loaded bundles and swaps it in. Caller holds load_mu.
  void RebuildLocked() {
    std::vector<DispatchTable::Input> in;
    std::vector<ResolvedDefault> defaults;
    bool has_device_bundle = false;
    size_t expected = 0;
    for (const LoadedBundle& b : bundles) expected += b.resolved.entries.size() + b.resolved.rejected.size();
    in.reserve(expected);
    KeyIndex index(expected);
    auto key_at = [&](uint32_t j) -> const OpKey& { return in[j].key; };
    for (const LoadedBundle& b : bundles) {
      if (!b.report.device_match) continue;
      has_device_bundle = true;
      for (const ResolvedEntry& e : b.resolved.entries) {
        const int64_t at = index.InsertOrFind(e.key, static_cast<uint32_t>(in.size()), key_at);
        if (at < 0) {
          in.push_back({e.key, e.schedule, false, e.tuned_us, e.default_us});
          continue;
        }
        DispatchTable::Input& cur = in[size_t(at)];  // the faster verified entry wins
        if (cur.rejected || (e.tuned_us > 0 && (cur.tuned_us <= 0 || e.tuned_us < cur.tuned_us)))
          cur = {e.key, e.schedule, false, e.tuned_us, e.default_us};
      }
      for (const RejectedEntry& r : b.resolved.rejected) {
        if (r.reason == EntryRejection::kBadKey || r.reason == EntryRejection::kDuplicateKey) continue;
        if (index.InsertOrFind(r.key, static_cast<uint32_t>(in.size()), key_at) < 0) {
          DispatchTable::Input x;
          x.key = r.key;
          x.rejected = true;
          in.push_back(x);
        }
      }
      for (ResolvedDefault d : b.resolved.defaults) {  // per (op, dtype, class): the first bundle's wins
        for (const ResolvedDefault& x : defaults)
          if (x.op == d.op && x.dtype == d.dtype) d.classes &= uint8_t(~x.classes);
        if (d.classes) defaults.push_back(d);
      }
    }
    auto t = std::make_unique<DispatchTable>(std::move(in), has_device_bundle, std::move(defaults), ++generation);
    table.store(t.get(), std::memory_order_seq_cst);
    tables.push_back(std::move(t));
    ReclaimLocked();
  }

  StatusOr<LoadedBundle> Prepare(std::span<const uint8_t> bytes, const std::string& source) const {
    const AlignedBytes aligned(bytes);
    CG_ASSIGN_OR_RETURN(const fb::Bundle* b, VerifyBundle(aligned.span(), source));
    LoadedBundle lb;
    LoadReport& r = lb.report;
    r.source = source;
    r.device_fingerprint = b->device()->fingerprint() ? b->device()->fingerprint()->str() : "";
    r.entries_total = b->entries() ? b->entries()->size() : 0;
    const DeviceInfo bd = DeviceFromFlatbuffer(b->device());
    if (r.device_fingerprint == device.fingerprint) {
      r.device_match = true;
      r.device_rule = "exact";
    } else if (options.allow_same_arch_bundles && bd.backend == device.backend && bd.arch == device.arch) {
      r.device_match = true;
      r.device_rule = "same-arch";
    } else {
      r.device_rule = fmt::format("device '{}' is not this device '{}'", r.device_fingerprint, device.fingerprint);
    }
    if (r.device_match) {
      lb.resolved = ResolveVerifiedBundle(*b, device);
      r.entries_loaded = lb.resolved.entries.size();
      r.rejected = lb.resolved.rejected;
      r.rejected.insert(r.rejected.end(), lb.resolved.rejected_defaults.begin(), lb.resolved.rejected_defaults.end());
      r.defaults_loaded = lb.resolved.defaults.size();
    }
    return lb;
  }

  // Warnings about a bundle are given once per (source, device, outcome); reloading
  // the same file logs them again at info level only.
  void LogLoad(const LoadReport& r) {
    const std::string id = fmt::format("{}|{}|{}|{}", r.source, r.device_fingerprint, r.device_rule, r.rejected.size());
    bool first;
    {
      std::lock_guard<std::mutex> lock(warned_mu);
      first = warned_bundles.insert(id).second;
    }
    const LogLevel warn = first ? LogLevel::kWarn : LogLevel::kInfo;
    if (!r.device_match) {
      logging::Log(warn, "bundle '{}' is for another device and is not applied: {}", r.source, r.device_rule);
      return;
    }
    logging::Info("bundle '{}': {} of {} entries loaded ({} rejected), device rule {}", r.source, r.entries_loaded,
                  r.entries_total, r.rejected.size(), r.device_rule);
    for (const RejectedEntry& e : r.rejected)
      logging::Log(warn, "bundle '{}': entry rejected ({}): {}", r.source, EntryRejectionName(e.reason), e.message);
  }

  // Fallback for a missed key under table t.
  void RefreshMiss(MissEntry& m, const DispatchTable* t, const TableEntry* found) const {
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

  // The miss record of a key, or nullptr (reason in `why`) when no kernel runs it:
  // such a call fails and is not a miss.
  MissEntry* FindMiss(const OpKey& key, uint64_t hash, const DispatchTable* t, const TableEntry* found,
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

  // Runtime::Gemm after its fast path: the thread's first call on a new table, a
  // hit with bad arguments, or a miss.
  [[gnu::noinline]] Status GemmSlow(ThreadSlot* s, const GemmArgs& a, uint64_t hash) {
    const DispatchTable* t = table.load(std::memory_order_acquire);
    if (t != s->table.load(std::memory_order_relaxed)) t = SwitchTable(s);
    const TableEntry* found;
    if (const TableEntry* e = HitEntry(*t, a, hash, found)) return RunHit(s, *e, a);
    if (!GemmDimsValid(a)) [[unlikely]] return InvalidGemmArgs(a);
    return MissGemm(s, a, hash, t, found);
  }

  Status MissGemm(ThreadSlot* s, const GemmArgs& a, uint64_t hash, const DispatchTable* t, const TableEntry* found) {
    const OpKey key = GemmKeyOf(a);
    ThreadSlot::MissCacheLine& line = s->miss_cache[hash >> 60];  // 16 lines, high bits (OpKey::Hash)
    if (!(line.entry && line.hash == hash && line.generation == t->generation() && line.entry->key == key)) {
      // Checked before the miss is recorded: a call with bad arguments is refused, not counted.
      const GemmLdBounds ld = GemmLeadingDimBounds(key);
      if (!KnownKeyArgsValid(a, ld)) [[unlikely]] return InvalidGemmArgs(a);
      Schedule fallback;
      std::string why;
      MissEntry* m = FindMiss(key, hash, t, found, fallback, why);
      if (!m) return Unimplemented(fmt::format("gemm: no kernel runs '{}' on {}: {}", key.ToString(), device.fingerprint, why));
      line = {hash, t->generation(), m, fallback, ld};
    } else if (!KnownKeyArgsValid(a, line.ld)) [[unlikely]] {
      return InvalidGemmArgs(a);
    }
    const uint64_t t0 = TickClock::Now();
    Status st = RunGemm(line.fallback, a);
    line.entry->Record(s->stripe, t0, TickClock::Now());
    return st;
  }

  // In a child of fork(), where only the forking thread runs: counts start at zero,
  // slots of threads that do not exist here are freed, and the report goes to a path
  // of the child's own, so parent and child never overwrite one report.
  void ResetAfterFork() {
    pid = ::getpid();
    if (!report_path.empty()) {
      const std::string base = options.miss_report_path;
      const size_t dot = base.rfind('.'), slash = base.rfind('/');
      const bool ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
      report_path = ext ? fmt::format("{}.{}{}", base.substr(0, dot), pid, base.substr(dot))
                        : fmt::format("{}.{}", base, pid);
    }
    std::lock_guard<std::mutex> slots_lock(slots_mu);
    for (auto& sp : slots) {
      ThreadSlot* s = sp.get();
      std::lock_guard<std::mutex> lock(s->mu);
      const DispatchTable* t = s->table.load(std::memory_order_relaxed);
      if (t && s->hits)
        for (size_t i = 0; i < std::max<size_t>(1, t->size()); ++i) s->hits[i].store(0, std::memory_order_relaxed);
      for (size_t i = 0; i < s->plan_cap; ++i) s->plan_hits[i].store(0, std::memory_order_relaxed);
      const bool mine = std::any_of(t_slots.all.begin(), t_slots.all.end(),
                                    [&](const auto& e) { return e.first == id && e.second == s; });
      if (!mine) {
        s->hits.reset();
        s->table.store(nullptr, std::memory_order_relaxed);
        s->in_use = false;
      }
    }
    {
      std::lock_guard<std::mutex> lock(totals_mu);
      hit_totals.clear();
    }
    misses.ResetCounts();
  }

  // Per-key hits and misses; the misses from `snap`, so that a report's totals and
  // records come from one snapshot.
  std::unordered_map<OpKey, KeyStats, OpKeyHash> CollectStats(const std::vector<MissLog::Snapshot>& snap) {
    std::unordered_map<OpKey, KeyStats, OpKeyHash> out;
    auto add_hits = [&](const OpKey& k, uint64_t n) {
      KeyStats& s = out[k];
      s.key = k;
      s.hits += n;
    };
    {
      std::lock_guard<std::mutex> slots_lock(slots_mu);
      std::vector<std::unique_lock<std::mutex>> held;
      held.reserve(slots.size());
      for (auto& s : slots) held.emplace_back(s->mu);
      for (auto& s : slots) {
        const DispatchTable* t = s->table.load(std::memory_order_relaxed);
        if (!t || !s->hits) continue;
        for (size_t i = 0; i < t->size(); ++i)
          if (uint64_t n = s->hits[i].load(std::memory_order_relaxed)) add_hits(t->entries()[i].key, n);
      }
      std::lock_guard<std::mutex> totals_lock(totals_mu);
      for (const auto& [k, n] : hit_totals) add_hits(k, n);
      std::lock_guard<std::mutex> plans_lock(plans_mu);
      for (auto& s : slots)
        for (size_t i = 0; i < s->plan_cap; ++i)
          if (uint64_t n = s->plan_hits[i].load(std::memory_order_relaxed)) add_hits(plan_keys[i], n);
    }
    for (const auto& m : snap) {
      KeyStats& s = out[m.key];
      s.key = m.key;
      s.misses += m.count;
    }
    return out;
  }
};

namespace {
void ReleaseSlotOf(uint64_t runtime_id, ThreadSlot* slot) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = Registry().find(runtime_id);
  if (it != Registry().end()) it->second->ReleaseSlot(slot);
}

// Documented rule: fork while no other thread is inside a cliffguard call, so no
// cliffguard lock is held by a thread that does not exist in the child.
void ResetRuntimesInForkChild() {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  for (auto& [id, impl] : Registry()) impl->ResetAfterFork();
}
}  // namespace

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusOr<std::unique_ptr<Runtime>> Runtime::Create(const RuntimeOptions& options) {
  CG_ASSIGN_OR_RETURN(const int threads, ResolveThreadBudget(options.threads, "RuntimeOptions.threads"));
  static std::once_flag fork_handler;
  std::call_once(fork_handler, [] { ::pthread_atfork(nullptr, nullptr, ResetRuntimesInForkChild); });
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (impl->options.miss_report_path.empty())
    if (const char* env = std::getenv("CLIFFGUARD_MISS_REPORT")) impl->options.miss_report_path = env;
  impl->report_path = impl->options.miss_report_path;
  impl->device = HostCpuDevice(threads);
  if (const int cpus = AvailableCpus(); threads > cpus)
    logging::Warn("thread budget {} ({}) exceeds the {} CPUs this process may use: multi-threaded schedules will "
                  "oversubscribe them; bundles apply only when tuned for the same budget",
                  threads, options.threads ? "RuntimeOptions.threads" : "CLIFFGUARD_THREADS", cpus);
  {
    std::lock_guard<std::mutex> lock(impl->load_mu);
    impl->RebuildLocked();  // the empty table: every call is a device miss
  }
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    Registry()[impl->id] = impl.get();
  }
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

Runtime::~Runtime() {
  if (!impl_->report_path.empty()) {
    Status st = WriteMissReport(impl_->report_path);
    if (!st.ok()) logging::Error("cannot write the miss report at exit: {}", st.ToString());
    else logging::Info("miss report written to '{}'", impl_->report_path);
  }
  std::lock_guard<std::mutex> lock(g_registry_mu);
  Registry().erase(impl_->id);
}

const DeviceInfo& Runtime::device() const { return impl_->device; }

StatusOr<LoadReport> Runtime::LoadBundleBuffer(std::span<const uint8_t> bytes, const std::string& source) {
  CG_ASSIGN_OR_RETURN(LoadedBundle lb, impl_->Prepare(bytes, source));
  impl_->LogLoad(lb.report);
  LoadReport report = lb.report;
  std::lock_guard<std::mutex> lock(impl_->load_mu);
  impl_->bundles.push_back(std::move(lb));
  impl_->RebuildLocked();
  return report;
}

StatusOr<LoadReport> Runtime::LoadBundleFile(const std::string& path) {
  CG_ASSIGN_OR_RETURN(auto bytes, ReadBundleFileBytes(path));
  return LoadBundleBuffer(bytes, path);
}

StatusOr<std::vector<LoadReport>> Runtime::ReplaceBundles(const std::vector<std::string>& paths) {
  std::vector<LoadedBundle> fresh;
  for (const std::string& p : paths) {
    CG_ASSIGN_OR_RETURN(auto bytes, ReadBundleFileBytes(p));
    CG_ASSIGN_OR_RETURN(LoadedBundle lb, impl_->Prepare(bytes, p));
    fresh.push_back(std::move(lb));
  }
  std::vector<LoadReport> reports;
  for (const auto& lb : fresh) {
    impl_->LogLoad(lb.report);
    reports.push_back(lb.report);
  }
  std::lock_guard<std::mutex> lock(impl_->load_mu);
  impl_->bundles = std::move(fresh);
  impl_->RebuildLocked();
  return reports;
}

void Runtime::UnloadAll() {
  std::lock_guard<std::mutex> lock(impl_->load_mu);
  impl_->bundles.clear();
  impl_->RebuildLocked();
}


Status Runtime::Gemm(const GemmArgs& a) {
  Impl& r = *impl_;
  // Look up first: a key found in the table is a valid key, so a hit only checks
  // the leading dimensions and pointers. The hit path ends in a tail call; anything
  // else (a new table for this thread, a miss, bad arguments) goes to GemmSlow.
  const uint64_t hash = GemmKeyHash(a.dtype, a.trans_a, a.trans_b, a.m, a.n, a.k);
  ThreadSlot* s = r.LocalSlot();
  const DispatchTable* t = r.table.load(std::memory_order_acquire);
  if (t == s->table.load(std::memory_order_relaxed)) [[likely]] {
    const TableEntry* found;
    if (const TableEntry* e = HitEntry(*t, a, hash, found)) [[likely]] return RunHit(s, *e, a);
  }
  return r.GemmSlow(s, a, hash);
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

StatusOr<GemmPlan> Runtime::PlanGemm(const OpKey& key) {
  if (key.op != OpKind::kGemm) return InvalidArgument(fmt::format("PlanGemm: key '{}' is not a gemm", key.ToString()));
  CG_RETURN_IF_ERROR(key.Validate());
  Impl& r = *impl_;
  GemmPlan plan;
  plan.key_ = key;
  plan.ld_ = GemmLeadingDimBounds(key);
  {
    std::lock_guard<std::mutex> lock(r.load_mu);
    const DispatchTable* t = r.table.load(std::memory_order_acquire);
    const TableEntry* e = t->Find(key, key.Hash());
    if (e && !e->rejected) {
      plan.hit_ = true;
      plan.schedule_ = e->schedule;
    } else {
      std::string why;
      plan.miss_ = r.FindMiss(key, key.Hash(), t, e, plan.schedule_, why);
      if (!plan.miss_)
        return Unimplemented(fmt::format("PlanGemm: no kernel runs '{}' on {}: {}", key.ToString(), r.device.fingerprint, why));
    }
  }
  if (plan.hit_) {
    std::lock_guard<std::mutex> lock(r.plans_mu);
    auto [it, inserted] = r.plan_index.try_emplace(key, static_cast<uint32_t>(r.plan_keys.size()));
    if (inserted) r.plan_keys.push_back(key);
    plan.plan_index_ = it->second;
  }
  plan.runtime_ = &r;
  return plan;
}

std::vector<KeyStats> Runtime::Stats() const {
  auto m = impl_->CollectStats(impl_->misses.Snap());
  std::vector<KeyStats> out;
  out.reserve(m.size());
  for (auto& [k, s] : m) out.push_back(s);
  std::sort(out.begin(), out.end(), [](const KeyStats& a, const KeyStats& b) {
    return a.hits + a.misses != b.hits + b.misses ? a.hits + a.misses > b.hits + b.misses
                                                   : a.key.ToString() < b.key.ToString();
  });
  return out;
}

MissReport Runtime::GetMissReport() const {
  Impl& r = *impl_;
  MissReport rep;
  rep.device_fingerprint = r.device.fingerprint;
  rep.device_name = r.device.name;
  rep.device_threads = r.device.threads;
  rep.pid = r.pid;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) rep.host = host;
  rep.generated_at = r.clock.ToUnixSeconds(TickClock::Now());
  // One snapshot of the misses gives both the records and the totals, so that
  // sum(records[].count) == misses holds while other threads keep missing.
  const std::vector<MissLog::Snapshot> snap = r.misses.Snap();
  for (const auto& [k, s] : r.CollectStats(snap)) rep.hits += s.hits;
  const double tpu = r.clock.TicksPerMicrosecond();
  double speedup[kNumOpKinds];
  {
    std::lock_guard<std::mutex> lock(r.load_mu);
    const DispatchTable* t = r.table.load(std::memory_order_acquire);
    for (uint8_t op = 0; op < kNumOpKinds; ++op) speedup[op] = t->ExpectedSpeedup(static_cast<OpKind>(op));
    const size_t n = t->SpeedupSamples(OpKind::kGemm);
    rep.expected_speedup_basis =
        n ? fmt::format("median default_us/tuned_us of {} loaded gemm entries, as measured by the tuner", n)
          : "no loaded gemm entry with measured times: gain unknown";
  }
  rep.expected_speedup = speedup[static_cast<int>(OpKind::kGemm)];
  for (const auto& m : snap) {
    MissRecord rec;
    rec.key = m.key;
    rec.kind = m.kind;
    rec.count = m.count;
    rec.first_seen = r.clock.ToUnixSeconds(m.first_tick);
    rec.last_seen = r.clock.ToUnixSeconds(m.last_tick);
    rec.fallback_us_total = double(m.fallback_ticks) / tpu;
    rec.fallback = m.fallback;
    rec.expected_gain_us = rec.fallback_us_total * (1.0 - 1.0 / speedup[static_cast<int>(m.key.op)]);
    rep.misses += m.count;
    rep.records.push_back(std::move(rec));
  }
  rep.calls = rep.hits + rep.misses;
  RankMissRecords(rep);
  return rep;
}

Status Runtime::WriteMissReport(const std::string& path) const {
  const std::string json = MissReportToJson(GetMissReport()) + "\n";
  return WriteFileAtomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(json.data()), json.size()));
}

std::vector<LoadReport> Runtime::LoadReports() const {
  std::lock_guard<std::mutex> lock(impl_->load_mu);
  std::vector<LoadReport> out;
  for (const auto& b : impl_->bundles) out.push_back(b.report);
  return out;
}

GemmPlan::GemmPlan(GemmPlan&& o) noexcept { *this = std::move(o); }
GemmPlan& GemmPlan::operator=(GemmPlan&& o) noexcept {
  runtime_ = std::exchange(o.runtime_, nullptr);
  key_ = o.key_;
  schedule_ = o.schedule_;
  ld_ = o.ld_;
  hit_ = std::exchange(o.hit_, false);
  plan_index_ = o.plan_index_;
  miss_ = std::exchange(o.miss_, nullptr);
  return *this;
}
GemmPlan::~GemmPlan() = default;

Status GemmPlan::Run(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, float alpha,
                     float beta) const {
  if (!runtime_) [[unlikely]] return InvalidState("GemmPlan::Run: the plan is empty (default-constructed or moved from)");
  GemmArgs args;
  args.trans_a = key_.trans_a;
  args.trans_b = key_.trans_b;
  args.m = key_.dims[0];
  args.n = key_.dims[1];
  args.k = key_.dims[2];
  args.a = a;
  args.lda = lda;
  args.b = b;
  args.ldb = ldb;
  args.c = c;
  args.ldc = ldc;
  args.alpha = alpha;
  args.beta = beta;
  if (!KnownKeyArgsValid(args, ld_)) [[unlikely]] return InvalidGemmArgs(args);
  if (hit_) [[likely]] {
    ThreadSlot* s = runtime_->LocalSlot();
    if (plan_index_ >= s->plan_cap) [[unlikely]] runtime_->GrowPlanHits(s, plan_index_);
    std::atomic<uint64_t>& c = s->plan_hits[plan_index_];
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return RunGemm(schedule_, args);
  }
  const uint64_t t0 = TickClock::Now();
  Status st = RunGemm(schedule_, args);
  miss_->Record(runtime_->LocalSlot()->stripe, t0, TickClock::Now());
  return st;
}

}  // namespace cliffguard
