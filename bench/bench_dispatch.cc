// Per-call dispatch overhead of the runtime on hit and on miss, against the two
// lookups serving stacks commonly use: a string-keyed std::map behind a mutex (as
// FasterTransformer's cublasAlgoMap) and a std::unordered_map behind a mutex.
//
// Every benchmark runs the same 1x1x1 GEMM kernel with the same schedule, so the
// dispatch overhead of a method is its time minus BM_kernel_direct's, in one run;
// the BM_interleaved_* benchmarks take that difference inside one loop.
// Also: loading and verifying a 100,000-entry bundle.
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "cliffguard/log.h"
#include "cliffguard/runtime.h"

namespace cliffguard {
namespace {

const OpKey kHitKey = OpKey::Gemm(1, 1, 1);
const OpKey kMissKey = OpKey::Gemm(1, 1, 2);
// Dynamic shapes: an entry m=4 of the hit key's family with the bucket [3, 4]; m=3
// is served by that bucket, m=2 by the nearest tuned key (m=1 and m=4 are equally
// near in log2 m: the larger wins).
const OpKey kBucketEntryKey = OpKey::Gemm(4, 1, 1);
const OpKey kBucketKey = OpKey::Gemm(3, 1, 1);
const OpKey kNearestKey = OpKey::Gemm(2, 1, 1);

struct Fixture {
  std::unique_ptr<Runtime> rt;
  Schedule hit_schedule;
  Schedule miss_schedule;
  Schedule bucket_schedule;  // what the bucket and nearest keys run
  std::map<std::string, Schedule> map;
  std::unordered_map<std::string, Schedule> umap;
  std::mutex mu;

  Fixture() {
    SetLogLevel(LogLevel::kError);
    RuntimeOptions o;
    o.warn_on_miss = false;
    rt = std::move(Runtime::Create(o)).value();
    hit_schedule = DefaultSchedule(kHitKey, rt->device()).value();
    miss_schedule = DefaultSchedule(kMissKey, rt->device()).value();
    BundleSpec spec;
    spec.device = rt->device();
    // A realistic table: the hit key among a few thousand others.
    for (int m = 1; m <= 64; ++m)
      for (int n : {768, 3072, 1024, 4096})
        for (int k : {768, 3072, 1024, 4096}) {
          const OpKey key = OpKey::Gemm(m, n, k);
          const Schedule s = DefaultSchedule(key, rt->device()).value();
          spec.entries.push_back({key, ToNamed(s), 1, 2, 1, 0, ""});
          map[fmt::format("{}_{}_{}_{}_{}", m, n, k, 0, 0)] = s;
          umap[fmt::format("{}_{}_{}_{}_{}", m, n, k, 0, 0)] = s;
        }
    spec.entries.push_back({kHitKey, ToNamed(hit_schedule), 1, 2, 1, 0, ""});
    bucket_schedule = DefaultSchedule(kBucketEntryKey, rt->device()).value();
    BundleEntry bucket{kBucketEntryKey, ToNamed(bucket_schedule), 1, 2, 1, 0, ""};
    bucket.bucket_lo = 3;
    bucket.bucket_hi = 4;
    spec.entries.push_back(bucket);
    map["1_1_1_0_0"] = hit_schedule;
    umap["1_1_1_0_0"] = hit_schedule;
    const auto bytes = SerializeBundle(spec);
    auto rep = rt->LoadBundleBuffer(bytes, "bench");
    if (!rep.ok() || rep->entries_loaded != spec.entries.size()) std::abort();
  }
};

Fixture& F() {
  static Fixture f;
  return f;
}

struct Operands {
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {1, 2, 3, 4, 5, 6, 7, 8}, c[8] = {};
  GemmArgs Args(const OpKey& key) { return DenseGemmArgs(key, a, b, c); }
};

void BM_kernel_direct_hit(benchmark::State& state) {
  Operands o;
  const GemmArgs a = o.Args(kHitKey);
  const Schedule s = F().hit_schedule;
  for (auto _ : state) {
    benchmark::DoNotOptimize(RunGemm(s, a));
    benchmark::ClobberMemory();
  }
}

void BM_kernel_direct_miss(benchmark::State& state) {
  Operands o;
  const GemmArgs a = o.Args(kMissKey);
  const Schedule s = F().miss_schedule;
  for (auto _ : state) {
    benchmark::DoNotOptimize(RunGemm(s, a));
    benchmark::ClobberMemory();
  }
}

void BM_hit_cliffguard(benchmark::State& state) {
  Operands o;
  const GemmArgs a = o.Args(kHitKey);
  Runtime& rt = *F().rt;
  for (auto _ : state) {
    benchmark::DoNotOptimize(rt.Gemm(a));
    benchmark::ClobberMemory();
  }
}

void BM_hit_cliffguard_plan(benchmark::State& state) {
  Operands o;
  Runtime& rt = *F().rt;
  const GemmPlan plan = rt.PlanGemm(kHitKey).value();
  for (auto _ : state) {
    benchmark::DoNotOptimize(plan.Run(o.a, 1, o.b, 1, o.c, 1));
    benchmark::ClobberMemory();
  }
}

void BM_miss_cliffguard(benchmark::State& state) {
  Operands o;
  const GemmArgs a = o.Args(kMissKey);
  Runtime& rt = *F().rt;
  (void)rt.Gemm(a);  // first miss: warns and creates the record
  for (auto _ : state) {
    benchmark::DoNotOptimize(rt.Gemm(a));
    benchmark::ClobberMemory();
  }
}

template <typename Map>
void MapDispatch(benchmark::State& state, Map& map, const OpKey& key, const Schedule& fallback) {
  Operands o;
  const GemmArgs a = o.Args(key);
  for (auto _ : state) {
    Schedule s;
    {
      std::lock_guard<std::mutex> lock(F().mu);
      auto it = map.find(fmt::format("{}_{}_{}_{}_{}", a.m, a.n, a.k, int(a.trans_a), int(a.trans_b)));
      s = it == map.end() ? fallback : it->second;
    }
    benchmark::DoNotOptimize(RunGemm(s, a));
    benchmark::ClobberMemory();
  }
}

void BM_hit_map_mutex(benchmark::State& state) { MapDispatch(state, F().map, kHitKey, F().miss_schedule); }
void BM_hit_unordered_map_mutex(benchmark::State& state) { MapDispatch(state, F().umap, kHitKey, F().miss_schedule); }
void BM_miss_map_mutex(benchmark::State& state) { MapDispatch(state, F().map, kMissKey, F().miss_schedule); }
void BM_miss_unordered_map_mutex(benchmark::State& state) { MapDispatch(state, F().umap, kMissKey, F().miss_schedule); }

BENCHMARK(BM_kernel_direct_hit)->Threads(1)->Threads(2);
BENCHMARK(BM_hit_cliffguard)->Threads(1)->Threads(2);
BENCHMARK(BM_hit_cliffguard_plan)->Threads(1)->Threads(2);
BENCHMARK(BM_hit_map_mutex)->Threads(1)->Threads(2);
BENCHMARK(BM_hit_unordered_map_mutex)->Threads(1)->Threads(2);
BENCHMARK(BM_kernel_direct_miss)->Threads(1)->Threads(2);
BENCHMARK(BM_miss_cliffguard)->Threads(1)->Threads(2);
BENCHMARK(BM_miss_map_mutex)->Threads(1)->Threads(2);
BENCHMARK(BM_miss_unordered_map_mutex)->Threads(1)->Threads(2);

// The same overheads measured in one loop: each iteration times a block of calls
// through the method, then a block of direct RunGemm calls of the schedule the method
// runs, so drift of a shared machine (frequency, neighbours) affects both alike.
// Counters, per call: method_ns, direct_ns and overhead_ns = method_ns - direct_ns.
constexpr int kBlock = 256;

template <typename Dispatch>
void Interleaved(benchmark::State& state, const Schedule& direct, const GemmArgs& a, Dispatch&& dispatch) {
  using clock = std::chrono::steady_clock;
  double method_ns = 0, direct_ns = 0;
  int64_t calls = 0;
  for (auto _ : state) {
    const auto t0 = clock::now();
    for (int i = 0; i < kBlock; ++i) benchmark::DoNotOptimize(dispatch());
    const auto t1 = clock::now();
    for (int i = 0; i < kBlock; ++i) benchmark::DoNotOptimize(RunGemm(direct, a));
    const auto t2 = clock::now();
    benchmark::ClobberMemory();
    method_ns += std::chrono::duration<double, std::nano>(t1 - t0).count();
    direct_ns += std::chrono::duration<double, std::nano>(t2 - t1).count();
    calls += kBlock;
  }
  const auto avg = benchmark::Counter::kAvgThreads;
  state.counters["method_ns"] = benchmark::Counter(method_ns / double(calls), avg);
  state.counters["direct_ns"] = benchmark::Counter(direct_ns / double(calls), avg);
  state.counters["overhead_ns"] = benchmark::Counter((method_ns - direct_ns) / double(calls), avg);
}

Status MapCall(const std::map<std::string, Schedule>& map, const GemmArgs& a, const Schedule& fallback) {
  Schedule s;
  {
    std::lock_guard<std::mutex> lock(F().mu);
    auto it = map.find(fmt::format("{}_{}_{}_{}_{}", a.m, a.n, a.k, int(a.trans_a), int(a.trans_b)));
    s = it == map.end() ? fallback : it->second;
  }
  return RunGemm(s, a);
}

void BM_interleaved_hit_cliffguard(benchmark::State& state) {
  Operands o;
  const GemmArgs a = o.Args(kHitKey);
  Runtime& rt = *F().rt;
  Interleaved(state, F().hit_schedule, a, [&] { return rt.Gemm(a); });
}
void BM_interleaved_hit_cliffguard_plan(benchmark::State& state) {
  Operands o;
  const GemmArgs a = o.Args(kHitKey);
  const GemmPlan plan = F().rt->PlanGemm(kHitKey).value();
  Interleaved(state, F().hit_schedule, a, [&] { return plan.Run(o.a, 1, o.b, 1, o.c, 1); });
}
void BM_interleaved_hit_map_mutex(benchmark::State& state) {
  Operands o;
  const GemmArgs a = o.Args(kHitKey);
  Interleaved(state, F().hit_schedule, a, [&] { return MapCall(F().map, a, F().miss_schedule); });
}
void BM_interleaved_miss_cliffguard(benchmark::State& state) {
  Operands o;
  const GemmArgs a = o.Args(kMissKey);
  Runtime& rt = *F().rt;
  (void)rt.Gemm(a);
  Interleaved(state, F().miss_schedule, a, [&] { return rt.Gemm(a); });
}
// A repeated key served by a bucket or the nearest tuned key: the runtime must
// resolve it once, then dispatch it about as cheaply as a hit.
void ApproximateHit(benchmark::State& state, const OpKey& key, ServedBy expected) {
  Operands o;
  const GemmArgs a = o.Args(key);
  Runtime& rt = *F().rt;
  if (rt.Resolve(key).value().served_by != expected) state.SkipWithError("not served as expected");
  (void)rt.Gemm(a);
  Interleaved(state, F().bucket_schedule, a, [&] { return rt.Gemm(a); });
}
void BM_interleaved_bucket_cliffguard(benchmark::State& state) { ApproximateHit(state, kBucketKey, ServedBy::kBucket); }
void BM_interleaved_nearest_cliffguard(benchmark::State& state) {
  ApproximateHit(state, kNearestKey, ServedBy::kNearest);
}
void BM_interleaved_miss_map_mutex(benchmark::State& state) {
  Operands o;
  const GemmArgs a = o.Args(kMissKey);
  Interleaved(state, F().miss_schedule, a, [&] { return MapCall(F().map, a, F().miss_schedule); });
}
BENCHMARK(BM_interleaved_hit_cliffguard)->Threads(1)->Threads(2);
BENCHMARK(BM_interleaved_hit_cliffguard_plan)->Threads(1)->Threads(2);
BENCHMARK(BM_interleaved_hit_map_mutex)->Threads(1)->Threads(2);
BENCHMARK(BM_interleaved_miss_cliffguard)->Threads(1)->Threads(2);
BENCHMARK(BM_interleaved_bucket_cliffguard)->Threads(1)->Threads(2);
BENCHMARK(BM_interleaved_nearest_cliffguard)->Threads(1)->Threads(2);
BENCHMARK(BM_interleaved_miss_map_mutex)->Threads(1)->Threads(2);

void BM_load_bundle_100k_entries(benchmark::State& state) {
  const DeviceInfo dev = F().rt->device();
  BundleSpec spec;
  spec.device = dev;
  const Schedule s = DefaultSchedule(OpKey::Gemm(64, 64, 64), dev).value();
  for (int i = 0; i < 100000; ++i)
    spec.entries.push_back({OpKey::Gemm(1 + i % 1000, 64 + i / 1000, 768), ToNamed(s), 1, 2, 1, 0, "bench"});
  const auto bytes = SerializeBundle(spec);
  for (auto _ : state) {
    RuntimeOptions o;
    o.warn_on_miss = false;
    auto rt = std::move(Runtime::Create(o)).value();
    auto rep = rt->LoadBundleBuffer(bytes, "big");
    if (!rep.ok() || rep->entries_loaded != 100000) state.SkipWithError("load failed");
    benchmark::DoNotOptimize(rep);
  }
  state.counters["bytes"] = double(bytes.size());
}
BENCHMARK(BM_load_bundle_100k_entries)->Unit(benchmark::kMillisecond)->Iterations(10);

}  // namespace
}  // namespace cliffguard

BENCHMARK_MAIN();
