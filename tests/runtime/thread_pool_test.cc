// The CPU kernels' thread pool: every tid runs once per call, a busy pool runs a
// second caller serially, and a worker that finds itself on its caller's CPU moves to
// another CPU of its allowed set and keeps that whole set.
#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <thread>
#include <vector>

namespace cliffguard::cpu {
namespace {

struct Seen {
  std::atomic<int> calls{0};
  int granted[ThreadPool::kMaxThreads] = {};
  int cpu[ThreadPool::kMaxThreads] = {};
  int allowed[ThreadPool::kMaxThreads] = {};
};

void Record(void* ctx, int tid, int n) {
  auto& s = *static_cast<Seen*>(ctx);
  s.calls.fetch_add(1);
  s.granted[tid] = n;
  s.cpu[tid] = ::sched_getcpu();
  cpu_set_t set;
  s.allowed[tid] = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : -1;
}

TEST(ThreadPoolTest, EveryTidRunsOncePerCall) {
  ThreadPool pool;
  for (int n : {1, 2, 3, 7, 2}) {
    Seen s;
    const int granted = pool.Run(n, &Record, &s);
    EXPECT_EQ(granted, n);
    EXPECT_EQ(s.calls.load(), granted);
    for (int t = 0; t < granted; ++t) EXPECT_EQ(s.granted[t], granted) << "tid " << t;
  }
}

TEST(ThreadPoolTest, ANestedCallRunsSeriallyOnItsCaller) {
  ThreadPool pool;
  struct Outer {
    ThreadPool* pool;
    std::atomic<int> inner_granted_max{0};
  } outer{&pool};
  pool.Run(
      2,
      [](void* ctx, int, int) {
        auto& o = *static_cast<Outer*>(ctx);
        Seen s;
        const int g = o.pool->Run(2, &Record, &s);
        int prev = o.inner_granted_max.load();
        while (g > prev && !o.inner_granted_max.compare_exchange_weak(prev, g)) {
        }
      },
      &outer);
  EXPECT_EQ(outer.inner_granted_max.load(), 1);
}

// Two allowed CPUs a and b, the caller on a, the worker put on a by its previous
// task: the worker runs its next task on b and is allowed both again (a placement,
// not a pinning).
TEST(ThreadPoolTest, AWorkerOnItsCallersCpuMovesOffAndKeepsItsAllowedSet) {
  cpu_set_t process;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(process), &process), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &process)) cpus.push_back(c);
  if (cpus.size() < 2) GTEST_SKIP() << "needs two allowed CPUs";
  static cpu_set_t one, both;
  CPU_ZERO(&one);
  CPU_SET(cpus[0], &one);
  CPU_ZERO(&both);
  CPU_SET(cpus[0], &both);
  CPU_SET(cpus[1], &both);
  auto to_a = [](void*, int, int) {  // every participant: onto a, then allowed a and b
    ::sched_setaffinity(0, sizeof(one), &one);
    ::sched_setaffinity(0, sizeof(both), &both);
  };
  std::thread caller([&] {
    ThreadPool pool;
    int checked = 0;
    for (int call = 0; call < 5; ++call) {
      ASSERT_EQ(pool.Run(2, to_a, nullptr), 2);
      Seen s;
      ASSERT_EQ(pool.Run(2, &Record, &s), 2);
      if (s.cpu[0] != cpus[0]) continue;  // the scheduler moved the caller meanwhile
      ++checked;
      EXPECT_EQ(s.cpu[1], cpus[1]) << "call " << call;
      EXPECT_EQ(s.allowed[1], 2) << "call " << call;
    }
    EXPECT_GT(checked, 0);
  });
  caller.join();
}

}  // namespace
}  // namespace cliffguard::cpu
