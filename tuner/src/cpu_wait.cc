#include "cpu_wait.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace cliffguard::tuner {
namespace {

// The steal time of all CPUs (the eighth number of /proc/stat's `cpu` line), in
// seconds; -1 when unreadable.
double StealSeconds() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return -1;
  unsigned long long v[8] = {};
  const int got = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                              &v[5], &v[6], &v[7]);
  std::fclose(f);
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (got != 8 || hz <= 0) return -1;
  return double(v[7]) / double(hz);
}

}  // namespace

CpuCounters ReadCpuCounters() {
  CpuCounters c;
  c.steal_s = StealSeconds();
  std::FILE* f = std::fopen("/proc/thread-self/schedstat", "r");
  if (!f) return c;
  unsigned long long run = 0, wait = 0;
  const bool read = std::fscanf(f, "%llu %llu", &run, &wait) == 2;
  std::fclose(f);
  c.run_ns = double(run);
  c.wait_ns = double(wait);
  c.ok = read && c.steal_s >= 0;
  return c;
}

double CpuWaitShare(const CpuCounters& start, const CpuCounters& end, double wall_s, int cpus) {
  if (!start.ok || !end.ok || !(wall_s > 0) || cpus < 1) return -1;
  const double run = std::max(0.0, end.run_ns - start.run_ns), wait = std::max(0.0, end.wait_ns - start.wait_ns);
  const double queued = run + wait > 0 ? wait / (run + wait) : 0;
  const double stolen = std::max(0.0, end.steal_s - start.steal_s) / (wall_s * double(cpus));
  return std::min(1.0, queued + stolen);
}

CpuWaitMeter::CpuWaitMeter() : start_(ReadCpuCounters()), t0_(std::chrono::steady_clock::now()) {}

double CpuWaitMeter::Share() const {
  const CpuCounters now = ReadCpuCounters();
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  return CpuWaitShare(start_, now, wall_s, int(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN))));
}

}  // namespace cliffguard::tuner
