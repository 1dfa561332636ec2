// A small persistent thread pool for the CPU kernels (internal; no OpenMP).
//
// Model: fork-join. `Run(n, fn, ctx)` calls fn(ctx, tid, n_granted) once for every
// tid in [0, n_granted): tid 0 runs on the calling thread, tids 1.. on pool workers,
// and Run returns when every call has returned.
//
// Threads: workers are created lazily the first time a call asks for more of them
// than exist, and are then reused for every later call (no thread creation per
// call after warm-up). They are joined when the process-wide pool is destroyed at
// exit. A child of fork() starts with a pool of its own (the parent's workers do not
// exist there), so kernels may run on several threads before and after a fork, as
// long as no other thread of the parent was inside a kernel at the fork. A worker
// that finds itself on its caller's CPU when a call starts (a new thread starts on
// its creator's, a woken one may be put there) moves to another CPU of its allowed
// set and is then allowed its whole set again: no thread is pinned. Idle
// workers poll briefly (pause, then yield, to catch back-to-back calls cheaply
// without starving other threads on a busy host), then block on a condition
// variable.
//
// Concurrency: one call at a time owns the workers. When a second application
// thread calls Run while the pool is busy, or when Run is called from inside a pool
// task (nesting), that call is NOT queued: it runs serially on its caller with
// n_granted == 1. Callers must therefore partition work by the n_granted they are
// given, never by the n they asked for. Run is safe to call from any thread.
//
// Inside a task, `SpinBarrier` synchronizes the n_granted participants of one call
// (pause, then yield); every participant passes the same n_granted to Wait.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace cliffguard::cpu {

class ThreadPool {
 public:
  using TaskFn = void (*)(void* ctx, int tid, int nthreads);

  // The process-wide pool (created on first use, thread-safe).
  static ThreadPool& Global();

  // Runs fn on min(n, kMaxThreads) threads when the pool is free, else on the
  // caller alone. Returns n_granted (the nthreads every fn call saw).
  int Run(int n, TaskFn fn, void* ctx);

  static constexpr int kMaxThreads = 256;

  ThreadPool() = default;
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

 private:
  void WorkerLoop(int tid, uint64_t seen);
  void EnsureWorkers(int count);  // called only by the owner of busy_

  std::atomic<bool> busy_{false};
  // Job word: (sequence << 16) | nthreads. Workers wake on a change of sequence
  // and join the job when their tid < nthreads; fn_/ctx_ are written before the
  // word is published (release) and read only by participants (acquire).
  std::atomic<uint64_t> job_{0};
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  std::atomic<int> leader_cpu_{-1};  // the caller's CPU; a worker found on it moves off
  std::atomic<int> pending_{0};  // participants (excluding tid 0) not yet done
  std::atomic<bool> stop_{false};

  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::mutex workers_mu_;
  std::vector<std::thread> workers_;
};

// Reusable barrier for the participants of one Run call.
class SpinBarrier {
 public:
  void Wait(int n);

 private:
  std::atomic<int> arrived_{0};
  std::atomic<uint32_t> phase_{0};
};

// A short CPU pause for spin loops (no ISA intrinsics: a builtin on x86-64).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace cliffguard::cpu
