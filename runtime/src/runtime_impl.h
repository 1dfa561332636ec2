// Internal: the state behind a Runtime, shared by the files that implement it:
//   runtime.cc      creation, device, destruction, fork
//   bundle_set.cc   the loaded bundles, table build and swap, reclamation, load logs
//   fallback.cc     what a missed key runs, miss records, Resolve
//   reports.cc      Stats, miss reports
//   ops/<op>.cc     each op's entry points (the only files that know an op)
//   thread_slots.*  per-thread counters and hazard pointers
#pragma once

#include <sys/types.h>

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cliffguard/runtime.h"
#include "dispatch_table.h"
#include "miss_log.h"
#include "thread_slots.h"

namespace cliffguard {

struct LoadedBundle {
  LoadReport report;
  ResolvedBundle resolved;  // empty when the device does not match
};

struct Runtime::Impl {
  explicit Impl(RuntimeOptions o, DeviceInfo d);

  RuntimeOptions options;
  FallbackPolicy policy;  // options.fallback, else CLIFFGUARD_FALLBACK, else kNearest
  DeviceInfo device;
  TickClock clock;

  std::atomic<const DispatchTable*> table{nullptr};
  std::mutex load_mu;  // serialises loads, table swaps and reclamation
  std::vector<LoadedBundle> bundles;
  std::vector<std::unique_ptr<const DispatchTable>> tables;  // current + retired, still referenced
  uint64_t generation = 0;

  // Bundle activity, for metrics (guarded by load_mu).
  uint64_t bundle_loads_total = 0;      // bundles loaded (each file of a replace counts)
  uint64_t entries_rejected_total = 0;  // entries rejected by those loads
  uint64_t reloads_total = 0;           // ReplaceBundles and UnloadAll calls

  MissLog misses;
  ThreadSlots slots;

  std::mutex warned_mu;
  std::unordered_set<std::string> warned_bundles;  // LogLoad: bundles warned about once

  Runtime* self = nullptr;  // the Runtime this is the state of
  pid_t pid;                // the process whose calls are counted (a fork child's own)
  double process_start = 0;  // its start, unix seconds
  std::string report_path;  // where the destructor writes the miss report; "" for none

  // The periodic writer of the miss report (options.miss_report_interval_s > 0) and of
  // the metrics file (options.metrics_path). write_mu is held while it writes, and by
  // fork's prepare handler, so a child never inherits a half-taken snapshot; a child
  // starts a writer of its own.
  std::mutex write_mu;
  std::mutex writer_mu;
  std::condition_variable writer_cv;
  bool writer_stop = false;
  bool writer_running = false;
  pthread_t writer{};
  void StartWriter();
  void StopWriter();
  void WriterLoop();

  // bundle_set.cc
  StatusOr<LoadedBundle> Prepare(std::span<const uint8_t> bytes, const std::string& source) const;
  void LogLoad(const LoadReport& r);
  void RebuildLocked();  // caller holds load_mu
  void ReclaimLocked();  // caller holds load_mu

  // fallback.cc
  // Kind, what serves it and its schedule, for a missed key under table t (`found`: what the
  // probe found, a rejected entry or nothing).
  void RefreshMiss(MissEntry& m, const DispatchTable* t, const TableEntry* found) const;
  // The miss record of a key, or nullptr (reason in `why`) when no kernel runs it:
  // such a call fails and is not a miss. Warns once per key.
  MissEntry* FindMiss(const OpKey& key, uint64_t hash, const DispatchTable* t, const TableEntry* found,
                      MissEntry& current, std::string& why);
  // Fills a thread's miss cache line for a key under table t (its record, fallback
  // and argument bounds); the call's arguments were checked against `bounds`.
  // kUnimplemented (nothing recorded) when no kernel runs the key.
  Status FillMissLine(ThreadSlot::MissCacheLine& line, const OpKey& key, uint64_t hash, const DispatchTable* t,
                      const TableEntry* found, const ArgBounds& bounds);

  // Resolves a plan's schedule under the current table: a usable entry of one of
  // `keys` (in order) is a hit (`counted`: that key); else the miss record of keys[0]
  // and its fallback. `caller` names the plan function in errors.
  Status ResolvePlan(const char* caller, std::span<const OpKey> keys, bool& hit, Schedule& schedule,
                     MissEntry*& miss, ServedBy& served_by, OpKey& counted);

  // reports.cc
  // Reused by the next miss report (the periodic rewrites); a report taken while
  // another holds them uses buffers of its own.
  std::mutex report_buffers_mu;
  MissReportBuffers report_buffers;
  // Per-key hits and misses; the misses from `snap`, so that a report's totals and
  // records come from one snapshot.
  std::unordered_map<OpKey, KeyStats, OpKeyHash> CollectStats(const std::vector<MissLog::Snapshot>& snap);

  // runtime.cc
  void ResetAfterFork();
};

// Runs a missed call on its thread's miss cache line (filled for the call's key) and
// records it: every call counted, the time of the schedule that served it taken on
// every call, or on one in MissEntry::kTimeSampling for kinds served by a tuned key
// (bucket, nearest), whose sampled time is scaled to the calls it stands for.
// `run(schedule)` runs the call.
template <typename RunFn>
inline Status RunMissed(ThreadSlot* s, ThreadSlot::MissCacheLine& line, RunFn&& run) {
  if (ServedByTunedKey(line.served_by) && ++line.untimed < MissEntry::kTimeSampling) {
    line.entry->Count(s->stripe, line.served_by);
    return run(line.fallback);
  }
  const uint64_t t0 = TickClock::Now();
  Status st = run(line.fallback);
  const uint64_t t1 = TickClock::Now();
  const uint64_t calls = ServedByTunedKey(line.served_by) ? std::exchange(line.untimed, 0) : 1;
  line.entry->Record(s->stripe, line.served_by, 1, (t1 - t0) * calls, t0, t1);
  return st;
}

// Runs a plan's call and counts it: a hit in the calling thread's plan counters, a
// miss (timed) in the plan's miss record. `run()` runs the call.
template <typename RunFn>
inline Status RunPlanned(Runtime::Impl& r, bool hit, uint32_t plan_index, MissEntry* miss, ServedBy served_by,
                         RunFn&& run) {
  if (hit) [[likely]] {
    r.slots.CountPlanHit(r.slots.Local(), plan_index);
    return run();
  }
  const uint64_t t0 = TickClock::Now();
  Status st = run();
  miss->Record(r.slots.Local()->stripe, served_by, t0, TickClock::Now());
  return st;
}

}  // namespace cliffguard
