// Internal: how much of a measurement window the measuring thread lost to other work
// on the host (the measurer's cpu_wait, MeasureResult::cpu_wait).
//
// Two counters, read at the window's start and end:
//   - the calling thread's run-queue wait (/proc/thread-self/schedstat, second
//     field: time runnable but not running, because another task held its CPU), as
//     a share of the time it was running or runnable. The calling thread is tid 0
//     of every kernel call (the own pool's and OpenMP's). Another busy task is
//     moved between the CPUs by the scheduler's balancing, so over a window of
//     calls it holds the calling thread's CPU about as often as a worker's (beside
//     one busy process on 2 cores, 2-thread measurements lost 20-40%, 1-thread ones,
//     with a core free, 0-3%). The workers' wait does not count: idle pool and
//     library workers poll with sched_yield, so they are runnable while idle;
//   - the hypervisor's steal (/proc/stat, all CPUs), as a share of the window's CPU
//     time (wall x online CPUs).
// cpu_wait is their sum, at most 1.
#pragma once

#include <chrono>

namespace cliffguard::tuner {

// Counters at one instant.
struct CpuCounters {
  double run_ns = 0, wait_ns = 0;  // the calling thread's
  double steal_s = 0;              // all CPUs together
  bool ok = false;                 // both sources were read
};

// Reads the calling thread's counters (ok = false where /proc does not give them).
CpuCounters ReadCpuCounters();

// cpu_wait between two readings `wall_s` apart on a host of `cpus` online CPUs:
// in [0, 1]; -1 when either reading failed or the window is empty.
double CpuWaitShare(const CpuCounters& start, const CpuCounters& end, double wall_s, int cpus);

// A window from construction to Share(), on the constructing thread.
class CpuWaitMeter {
 public:
  CpuWaitMeter();
  double Share() const;  // CpuWaitShare from construction to now (call it on the same thread)

 private:
  CpuCounters start_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace cliffguard::tuner
