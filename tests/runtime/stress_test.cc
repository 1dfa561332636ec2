// Concurrency stress of the dispatch path: threads dispatch a mix of hit and miss
// keys through Runtime::Gemm and GemmPlan::Run while another thread reloads bundles
// (ReplaceBundles, LoadBundleBuffer, UnloadAll) hundreds of times; short-lived
// threads exit mid-run (their per-thread slots must fold their counts); one thread
// dispatches through two Runtimes; a reader takes Stats() and miss reports
// throughout. Afterwards every count is exact: per key, hits + misses == calls
// issued, and the miss report agrees with Stats().
//
// Scale: CG_STRESS_SCALE (a float, default 1) multiplies the work; ThreadSanitizer
// and AddressSanitizer builds divide it (they run 5-15x slower).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cliffguard/bundle.h"
#include "cliffguard/runtime.h"

#include "sanitizers.h"

namespace cliffguard {
namespace {

namespace fs = std::filesystem;

double Scale() {
  double s = 1.0;
  if (const char* env = std::getenv("CG_STRESS_SCALE")) s = std::max(0.01, std::atof(env));
#if defined(CG_TEST_TSAN)
  s *= 0.2;
#elif defined(CG_TEST_ASAN)
  s *= 0.4;
#endif
  return s;
}
int Scaled(int n) { return std::max(1, static_cast<int>(n * Scale())); }

// Keys 0..3 are in bundle A, 2..5 in bundle B, 6..7 in none (always misses).
// Small shapes: the kernels cost a microsecond or less, so the dispatch path and
// the reloads are what is stressed.
constexpr int kNumKeys = 8;
OpKey KeyAt(int i) { return OpKey::Gemm(1 + i, 4 + (i % 3), 3 + (i % 2), /*trans_a=*/i == 5, /*trans_b=*/i == 3); }

BundleSpec Bundle(const DeviceInfo& device, int first, int last) {
  BundleSpec spec;
  spec.device = device;
  for (int i = first; i <= last; ++i) {
    BundleEntry e;
    e.key = KeyAt(i);
    e.schedule.variant = "cpu_f32_gemm_4x4__scalar";
    e.schedule.params = {{"kc", 16 * (1 + i % 2)}};
    e.tuned_us = 1.0 + i;
    e.default_us = 2.0 + i;
    spec.entries.push_back(e);
  }
  return spec;
}

// Operands for one key, all ones: every element of C is k.
struct Operands {
  OpKey key;
  std::vector<float> a, b;
  GemmArgs Args(std::vector<float>& c) const {
    return DenseGemmArgs(key, a.data(), b.data(), c.data());
  }
};
std::vector<Operands> AllOperands() {
  std::vector<Operands> out;
  for (int i = 0; i < kNumKeys; ++i) {
    const OpKey k = KeyAt(i);
    out.push_back({k, std::vector<float>(size_t(k.m() * k.k()), 1.f), std::vector<float>(size_t(k.k() * k.n()), 1.f)});
  }
  return out;
}

// Calls issued per key, summed over threads (each thread counts locally).
struct Issued {
  std::mutex mu;
  std::map<int, uint64_t> calls;
  void Add(const std::vector<uint64_t>& local) {
    std::lock_guard<std::mutex> lock(mu);
    for (int i = 0; i < kNumKeys; ++i) calls[i] += local[i];
  }
};

// One call of key i through Gemm or (every third call) through a plan. Checks C.
void Call(Runtime& rt, const Operands& op, std::vector<float>& c, bool use_plan, std::atomic<int>& errors) {
  Status st;
  if (use_plan) {
    auto plan = rt.PlanGemm(op.key);
    if (!plan.ok()) {
      errors.fetch_add(1);
      return;
    }
    const GemmArgs g = op.Args(c);
    st = plan->Run(op.a.data(), g.lda, op.b.data(), g.ldb, c.data(), g.ldc);
  } else {
    st = rt.Gemm(op.Args(c));
  }
  const size_t last = size_t(op.key.m() * op.key.n()) - 1;
  if (!st.ok() || c[0] != float(op.key.k()) || c[last] != float(op.key.k())) errors.fetch_add(1);
}

void ExpectExactCounts(Runtime& rt, const std::map<int, uint64_t>& issued, const char* which) {
  SCOPED_TRACE(which);
  std::map<std::string, KeyStats> stats;
  for (const KeyStats& s : rt.Stats()) stats[s.key.ToString()] = s;
  uint64_t total = 0, hits = 0, misses = 0;
  for (const auto& [i, n] : issued) {
    const std::string key = KeyAt(i).ToString();
    total += n;
    if (n == 0) continue;
    ASSERT_TRUE(stats.count(key)) << key << " was called " << n << " times and is not in Stats()";
    const KeyStats& s = stats[key];
    EXPECT_EQ(s.hits + s.misses, n) << key << ": hits " << s.hits << " + misses " << s.misses << " != calls " << n;
    hits += s.hits;
    misses += s.misses;
  }
  EXPECT_EQ(stats.size(), static_cast<size_t>(std::count_if(issued.begin(), issued.end(), [](auto& p) { return p.second > 0; })));
  const MissReport rep = rt.GetMissReport();
  EXPECT_EQ(rep.calls, total);
  EXPECT_EQ(rep.hits, hits);
  EXPECT_EQ(rep.misses, misses);
  uint64_t report_misses = 0;
  for (const MissRecord& m : rep.records) {
    report_misses += m.count;
    ASSERT_TRUE(stats.count(m.key.ToString())) << m.key.ToString();
    EXPECT_EQ(m.count, stats[m.key.ToString()].misses) << m.key.ToString();
  }
  EXPECT_EQ(report_misses, misses);
  // Keys 6 and 7 are in no bundle: never a hit.
  for (int i : {6, 7})
    if (stats.count(KeyAt(i).ToString())) EXPECT_EQ(stats[KeyAt(i).ToString()].hits, 0u);
}

TEST(StressTest, CountsStayExactUnderDispatchReloadAndThreadExit) {
  const std::string dir = (fs::temp_directory_path() / fmt::format("cg_stress_{}", ::getpid())).string();
  fs::create_directories(dir);
  RuntimeOptions o;
  o.threads = 1;
  o.warn_on_miss = false;
  auto rt_or = Runtime::Create(o);
  ASSERT_TRUE(rt_or.ok());
  Runtime& rt = **rt_or;
  auto rt2_or = Runtime::Create(o);
  ASSERT_TRUE(rt2_or.ok());
  Runtime& rt2 = **rt2_or;
  const std::string path_a = dir + "/a.cgb", path_b = dir + "/b.cgb";
  ASSERT_TRUE(WriteBundleFile(path_a, Bundle(rt.device(), 0, 3)).ok());
  ASSERT_TRUE(WriteBundleFile(path_b, Bundle(rt.device(), 2, 5)).ok());
  const std::vector<uint8_t> bytes_b = SerializeBundle(Bundle(rt.device(), 2, 5));
  ASSERT_TRUE(rt2.LoadBundleFile(path_b).ok());

  const std::vector<Operands> ops = AllOperands();
  const int reloads = Scaled(2000);
  const int calls_per_thread = Scaled(1000000);
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  Issued issued, issued2;

  // Dispatchers: a key pattern mixing hits and misses, one call in three via a plan.
  auto dispatcher = [&](int seed, int calls, Runtime* second) {
    std::vector<uint64_t> local(kNumKeys, 0), local2(kNumKeys, 0);
    std::vector<float> c(64);
    std::mt19937 rng(seed);
    for (int n = 0; n < calls; ++n) {
      const int i = static_cast<int>(rng() % kNumKeys);
      const bool plan = n % 3 == 0;
      Call(rt, ops[i], c, plan, errors);
      ++local[i];
      if (second) {
        Call(*second, ops[i], c, !plan, errors);
        ++local2[i];
      }
    }
    issued.Add(local);
    issued2.Add(local2);
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) threads.emplace_back(dispatcher, 100 + t, calls_per_thread, nullptr);
  // The fourth dispatcher also goes through a second Runtime (two slots per thread).
  threads.emplace_back(dispatcher, 200, calls_per_thread / 2, &rt2);

  // Threads that exit mid-run: each dispatches a little and ends; its slot folds.
  std::atomic<int> exited_threads{0};
  std::thread spawner([&] {
    int seed = 1000;
    while (!stop.load()) {
      exited_threads.fetch_add(1);
      std::thread t(dispatcher, seed++, 50 + seed % 200, seed % 4 == 0 ? &rt2 : nullptr);
      t.join();
    }
  });

  // A reader that snapshots the counts while they change: totals never go down.
  std::thread reader([&] {
    uint64_t last = 0;
    while (!stop.load()) {
      uint64_t total = 0;
      for (const KeyStats& s : rt.Stats()) total += s.hits + s.misses;
      if (total < last) errors.fetch_add(1000000);
      last = total;
      (void)rt.GetMissReport();
      std::this_thread::yield();
    }
  });

  // The reloader.
  std::thread reloader([&] {
    for (int r = 0; r < reloads; ++r) {
      switch (r % 5) {
        case 0:
          if (!rt.ReplaceBundles({path_a}).ok()) errors.fetch_add(1);
          break;
        case 1:
          if (!rt.LoadBundleBuffer(bytes_b, "b-buffer").ok()) errors.fetch_add(1);
          break;
        case 2:
          rt.UnloadAll();
          break;
        case 3:
          if (!rt.ReplaceBundles({path_a, path_b}).ok()) errors.fetch_add(1);
          break;
        case 4:
          // A failing replace changes nothing.
          if (rt.ReplaceBundles({path_b, dir + "/missing.cgb"}).ok()) errors.fetch_add(1);
          break;
      }
      if (r % 50 == 0) (void)rt2.ReplaceBundles({path_b});
    }
  });

  reloader.join();
  for (auto& t : threads) t.join();
  stop.store(true);
  spawner.join();
  reader.join();

  EXPECT_EQ(errors.load(), 0) << "failed calls, wrong results, or counts that went down (x1000000)";
  EXPECT_GT(exited_threads.load(), 10) << "too few threads exited mid-run";
  uint64_t hits = 0, misses = 0;
  for (const KeyStats& s : rt.Stats()) {
    hits += s.hits;
    misses += s.misses;
  }
  EXPECT_GT(hits, 0u);
  EXPECT_GT(misses, 0u);
  std::printf("stress: %d reloads, %d calls per dispatcher, %d threads exited mid-run, %llu hits, %llu misses\n",
              reloads, calls_per_thread, exited_threads.load(), static_cast<unsigned long long>(hits),
              static_cast<unsigned long long>(misses));
  ExpectExactCounts(rt, issued.calls, "runtime 1");
  ExpectExactCounts(rt2, issued2.calls, "runtime 2");
  // Keys 2..5 are in rt2's bundle throughout: every call there was a hit.
  for (const KeyStats& s : rt2.Stats()) {
    const bool in_b = s.key == KeyAt(2) || s.key == KeyAt(3) || s.key == KeyAt(4) || s.key == KeyAt(5);
    if (in_b) EXPECT_EQ(s.misses, 0u) << s.key.ToString();
  }
  fs::remove_all(dir);
}

// A Runtime destroyed while threads that used it are still alive, and threads that
// exit after their Runtime is gone: neither may touch freed memory.
TEST(StressTest, RuntimesComeAndGoWhileThreadsLive) {
  const std::vector<Operands> ops = AllOperands();
  std::atomic<int> errors{0};
  RuntimeOptions o;
  o.threads = 1;
  o.warn_on_miss = false;
  std::vector<std::thread> threads;
  std::atomic<int> phase{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> c(64);
      for (int round = 0; round < Scaled(30); ++round) {
        auto rt = Runtime::Create(o);
        if (!rt.ok()) {
          errors.fetch_add(1);
          return;
        }
        for (int n = 0; n < 50; ++n) Call(**rt, ops[(n + t) % kNumKeys], c, n % 4 == 0, errors);
        uint64_t total = 0;
        for (const KeyStats& s : (*rt)->Stats()) total += s.hits + s.misses;
        if (total != 50) errors.fetch_add(1);
      }
      phase.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(phase.load(), 3);
}

}  // namespace
}  // namespace cliffguard
