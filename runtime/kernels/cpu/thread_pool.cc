#include "kernels/cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <system_error>

namespace cliffguard::cpu {
namespace {

// Spin budgets (iterations). Each spin loop pauses for the first kPauseSpins
// iterations, then yields the core (so that a busy or oversubscribed host still
// runs the thread we wait for), then blocks (workers, leader) or keeps yielding
// (barrier).
constexpr int kPauseSpins = 1 << 10;
constexpr int kWorkerSpins = 1 << 12;
constexpr int kLeaderSpins = 1 << 12;

void SpinStep(int i) {
  if (i < kPauseSpins) {
    CpuRelax();
  } else {
    std::this_thread::yield();
  }
}

constexpr uint64_t Seq(uint64_t word) { return word >> 16; }
constexpr int Count(uint64_t word) { return static_cast<int>(word & 0xffff); }

// The process-wide pool. A child of fork() has none of the parent's worker threads:
// the child handler drops the parent's pool (leaked on purpose: destroying it would
// join threads that do not exist in the child) and the child's first call creates
// its own.
std::atomic<ThreadPool*> g_pool{nullptr};

void ForgetPoolInChild() { g_pool.store(nullptr, std::memory_order_relaxed); }

// A worker found on its leader's CPU moves itself to another CPU of its allowed set
// (the tid-th other one, in turn), then allows its whole set again: a placement, not
// a pinning. The scheduler starts a new thread on its creator's CPU and may wake a
// blocked one there; in a KVM guest a fresh pool's worker shared its caller's CPU in
// 19 of 20 forked processes, for 46 to 368 of 400 calls, each 2-thread call 2.8x as
// long as on two CPUs, and the tuner's forked measurement workers timed 2-thread
// schedules 1.8-3.9x slow in such spells (bench/RESULTS.md, "a pool worker on its
// caller's CPU").
void MoveOffCpu(int tid, int cpu) {
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  const int others = CPU_COUNT(&allowed) - (cpu < CPU_SETSIZE && CPU_ISSET(cpu, &allowed) ? 1 : 0);
  if (others <= 0) return;
  int skip = (tid - 1) % others;  // the tid-th other CPU, in turn
  int to = 0;
  for (; to < CPU_SETSIZE; ++to)
    if (to != cpu && CPU_ISSET(to, &allowed) && skip-- == 0) break;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(to, &one);
  if (::sched_setaffinity(0, sizeof(one), &one) == 0) ::sched_setaffinity(0, sizeof(allowed), &allowed);
}

struct PoolReaper {
  PoolReaper() { pthread_atfork(nullptr, nullptr, ForgetPoolInChild); }
  ~PoolReaper() { delete g_pool.exchange(nullptr); }  // joins the workers at exit
};

}  // namespace

ThreadPool& ThreadPool::Global() {
  static PoolReaper reaper;
  ThreadPool* p = g_pool.load(std::memory_order_acquire);
  if (p) [[likely]] return *p;
  auto* fresh = new ThreadPool();
  if (g_pool.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *p;
}

ThreadPool::~ThreadPool() {
  std::lock_guard<std::mutex> wl(workers_mu_);
  {
    std::lock_guard<std::mutex> lk(wake_mu_);
    stop_.store(true, std::memory_order_relaxed);
    job_.store(((Seq(job_.load(std::memory_order_relaxed)) + 1) << 16), std::memory_order_release);
  }
  wake_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::EnsureWorkers(int count) {
  std::lock_guard<std::mutex> wl(workers_mu_);
  const uint64_t seen = Seq(job_.load(std::memory_order_relaxed));
  while (static_cast<int>(workers_.size()) < count) {
    const int tid = static_cast<int>(workers_.size()) + 1;
    try {
      workers_.emplace_back([this, tid, seen] { WorkerLoop(tid, seen); });
    } catch (const std::system_error&) {
      break;  // run with the workers we have
    }
  }
}

// `seen` is the job sequence current when the owner created this worker, before it
// published the job it created the worker for; the worker joins every later job.
void ThreadPool::WorkerLoop(int tid, uint64_t seen) {
  for (;;) {
    uint64_t word = job_.load(std::memory_order_acquire);
    for (int i = 0; Seq(word) == seen && i < kWorkerSpins; ++i) {
      SpinStep(i);
      word = job_.load(std::memory_order_acquire);
    }
    if (Seq(word) == seen) {
      std::unique_lock<std::mutex> lk(wake_mu_);
      wake_cv_.wait(lk, [&] { return Seq(job_.load(std::memory_order_acquire)) != seen; });
      word = job_.load(std::memory_order_acquire);
    }
    seen = Seq(word);
    if (stop_.load(std::memory_order_relaxed)) return;
    if (tid >= Count(word)) continue;
    const int leader_cpu = leader_cpu_.load(std::memory_order_relaxed);
    if (leader_cpu >= 0 && ::sched_getcpu() == leader_cpu) MoveOffCpu(tid, leader_cpu);
    fn_(ctx_, tid, Count(word));
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lk(done_mu_);
      done_cv_.notify_one();
    }
  }
}

int ThreadPool::Run(int n, TaskFn fn, void* ctx) {
  n = std::clamp(n, 1, kMaxThreads);
  if (n == 1 || busy_.exchange(true, std::memory_order_acquire)) {
    fn(ctx, 0, 1);  // pool busy (another caller, or a nested call): run serially
    return 1;
  }
  EnsureWorkers(n - 1);
  {
    std::lock_guard<std::mutex> wl(workers_mu_);
    n = std::min(n, static_cast<int>(workers_.size()) + 1);
  }
  if (n == 1) {
    fn(ctx, 0, 1);
    busy_.store(false, std::memory_order_release);
    return 1;
  }
  fn_ = fn;
  ctx_ = ctx;
  leader_cpu_.store(::sched_getcpu(), std::memory_order_relaxed);
  pending_.store(n - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lk(wake_mu_);
    const uint64_t seq = Seq(job_.load(std::memory_order_relaxed)) + 1;
    job_.store((seq << 16) | static_cast<uint64_t>(n), std::memory_order_release);
  }
  wake_cv_.notify_all();
  fn(ctx, 0, n);
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0 && i < kLeaderSpins; ++i) SpinStep(i);
  if (pending_.load(std::memory_order_acquire) != 0) {
    std::unique_lock<std::mutex> lk(done_mu_);
    done_cv_.wait(lk, [&] { return pending_.load(std::memory_order_acquire) == 0; });
  }
  busy_.store(false, std::memory_order_release);
  return n;
}

void SpinBarrier::Wait(int n) {
  if (n <= 1) return;
  const uint32_t phase = phase_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n - 1) {
    arrived_.store(0, std::memory_order_relaxed);
    phase_.store(phase + 1, std::memory_order_release);
    return;
  }
  for (int i = 0; phase_.load(std::memory_order_acquire) == phase; ++i) SpinStep(i);
}

}  // namespace cliffguard::cpu
