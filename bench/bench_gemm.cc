// CPU fp32 GEMM: cliffguard default schedule vs a hand-picked schedule vs oneDNN's matmul
// (the cpu_f32_gemm_onednn variant, where built) vs OpenBLAS cblas_sgemm, at 1 and 2
// threads, reported as GFLOP/s (counter "GFLOPS").
//
//   build-kern/bench/bench_gemm [--benchmark_filter=...] [--benchmark_min_time=0.3s]
//       [--shape=M,N,K ...] [--bundle=t1.cgb,t2.cgb]
//   build-kern/bench/bench_gemm --explore=M,N,K,THREADS[,TRIALS[,VARIANT]]  (schedule search)
//
// OpenBLAS runs the kernels of the host's vector ISA: main() re-executes this
// binary once with the library environment (bench_util.h), which sets
// OPENBLAS_CORETYPE when OpenBLAS's own detection falls short of the host (Debian
// 12's OpenBLAS runs its SSE3 kernels on a Xeon of family 6 model 207) and removes
// OPENBLAS_L2_SIZE; the core OpenBLAS runs is printed (openblas_get_corename) and
// stored in the benchmark context.
//
// --shape=M,N,K (repeatable) replaces the built-in shapes. --bundle= (or CG_BUNDLE)
// adds a `tuned` row per shape and thread count that the bundles hit: the schedule a
// Runtime with that thread budget resolves, run through its GemmPlan (the serving
// path). Every row reports peak_fraction: GFLOP/s over the FMA peak of its thread
// count, measured at start.
//
// Hand-picked schedules (kHandPicked below) were chosen with --explore: a seeded
// random sample of the declared parameter space for the shape, best of 3 runs
// each, then the winner rounded to a readable schedule and re-checked with the
// benchmark itself. They are what a careful engineer picks by hand, not the tuner's
// output.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "bench_util.h"
#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "cliffguard/log.h"
#include "cliffguard/runtime.h"

#ifdef CG_HAVE_OPENBLAS
#include <cblas.h>
extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);
extern "C" void openblas_set_num_threads(int);
#endif

namespace cliffguard {
namespace {

struct Shape {
  int64_t m, n, k;
};

std::vector<Shape> g_shapes;  // --shape=M,N,K; empty: BenchShapes()

// 256^3, 1024^3, 2048^3 and the BERT-base GEMMs (tokens m, (n, k) in
// {(768, 768), (3072, 768), (768, 3072)}), or the --shape list.
const std::vector<Shape>& BenchShapes() {
  static const std::vector<Shape> shapes = [] {
    if (!g_shapes.empty()) return g_shapes;
    std::vector<Shape> s = {{256, 256, 256}, {1024, 1024, 1024}, {2048, 2048, 2048}};
    for (int64_t m : {1, 16, 128, 384})
      for (auto nk : {std::pair<int64_t, int64_t>{768, 768}, {3072, 768}, {768, 3072}})
        s.push_back({m, nk.first, nk.second});
    return s;
  }();
  return shapes;
}

std::vector<std::string> g_bundles;
std::vector<std::unique_ptr<Runtime>> g_runtimes;  // index threads - 1; kept alive for the plans

// Hand-picked schedules, keyed by (m, n, k, threads). Parameter order:
// mc kc nc par threads unroll_k prefetch pack_a pack_b.
struct HandPick {
  Shape shape;
  int threads;
  const char* variant;
  std::vector<std::pair<std::string, int64_t>> params;
};

#define CG_P(mc, kc, nc, par, t, u, pf, pa, pb)                                                       \
  {{"mc", mc}, {"kc", kc}, {"nc", nc}, {"par", par}, {"threads", t}, {"unroll_k", u}, {"prefetch", pf}, \
   {"pack_a", pa}, {"pack_b", pb}}

const std::vector<HandPick>& HandPicked() {
  // From --explore on the AVX-512 host (1 thread; CPU-time rates, 30 random
  // schedules of the AVX-512 variants plus 8 candidates per shape). At 2 threads the
  // same schedule splits M (par=1) when M has enough mr panels, else N (par=0);
  // calls under ~20 MFLOP (m = 1, 16x768x768) stay on one thread, which measured
  // faster than waking a worker on this (shared, busy) host.
  //   large M: 6x64 (A panel 6 x kc in L1, 24 accumulators), mc=48, kc=256;
  //     2048^3: 8x32 with kc=384 (fewer passes over C, whose rows are 8 KiB apart)
  //   M = 1 or 16 with wide N: 8x32 reading A and B in place (no packing: each
  //     element of B is used by at most 16 rows), short kc=32 blocks
  static const char* k8x32 = "cpu_f32_gemm_8x32__avx512";
  static const char* k6x64 = "cpu_f32_gemm_6x64__avx512";
  static const char* k6x16 = "cpu_f32_gemm_6x16__avx2";
  static const std::vector<HandPick> picks = {
      {{256, 256, 256}, 1, k6x64, CG_P(48, 256, 1536, 1, 1, 2, 0, 1, 1)},
      {{256, 256, 256}, 2, k6x64, CG_P(48, 256, 1536, 1, 2, 2, 0, 1, 1)},
      {{1024, 1024, 1024}, 1, k6x64, CG_P(48, 256, 4096, 1, 1, 2, 0, 1, 1)},
      {{1024, 1024, 1024}, 2, k6x64, CG_P(48, 256, 4096, 1, 2, 2, 0, 1, 1)},
      {{2048, 2048, 2048}, 1, k8x32, CG_P(128, 384, 2048, 0, 1, 4, 0, 1, 1)},
      {{2048, 2048, 2048}, 2, k8x32, CG_P(128, 384, 2048, 1, 2, 4, 0, 1, 1)},
      {{1, 768, 768}, 1, k8x32, CG_P(48, 32, 2048, 1, 1, 1, 16, 0, 0)},
      {{1, 768, 768}, 2, k8x32, CG_P(48, 32, 2048, 1, 1, 1, 16, 0, 0)},
      {{1, 3072, 768}, 1, k8x32, CG_P(48, 32, 2048, 1, 1, 1, 16, 0, 0)},
      {{1, 3072, 768}, 2, k8x32, CG_P(48, 32, 2048, 1, 1, 1, 16, 0, 0)},
      {{1, 768, 3072}, 1, k8x32, CG_P(48, 32, 2048, 1, 1, 1, 16, 0, 0)},
      {{1, 768, 3072}, 2, k8x32, CG_P(48, 32, 2048, 1, 1, 1, 16, 0, 0)},
      {{16, 768, 768}, 1, k8x32, CG_P(64, 384, 2048, 0, 1, 4, 0, 1, 0)},
      {{16, 768, 768}, 2, k8x32, CG_P(64, 384, 2048, 0, 1, 4, 0, 1, 0)},
      {{16, 3072, 768}, 1, k8x32, CG_P(48, 32, 2048, 1, 1, 1, 16, 0, 0)},
      {{16, 3072, 768}, 2, k8x32, CG_P(48, 32, 2048, 0, 2, 1, 16, 0, 0)},
      {{16, 768, 3072}, 1, k8x32, CG_P(64, 384, 2048, 0, 1, 4, 0, 1, 0)},
      {{16, 768, 3072}, 2, k8x32, CG_P(64, 384, 2048, 0, 2, 4, 0, 1, 0)},
      {{128, 768, 768}, 1, k6x64, CG_P(48, 256, 4096, 1, 1, 2, 0, 1, 1)},
      {{128, 768, 768}, 2, k6x64, CG_P(48, 256, 4096, 1, 2, 2, 0, 1, 1)},
      {{128, 3072, 768}, 1, k8x32, CG_P(64, 256, 1024, 0, 1, 4, 0, 1, 1)},
      {{128, 3072, 768}, 2, k8x32, CG_P(64, 256, 1024, 0, 2, 4, 0, 1, 1)},
      {{128, 768, 3072}, 1, k6x64, CG_P(48, 256, 1536, 1, 1, 2, 0, 1, 1)},
      {{128, 768, 3072}, 2, k6x64, CG_P(48, 256, 1536, 1, 2, 2, 0, 1, 1)},
      {{384, 768, 768}, 1, k6x64, CG_P(48, 256, 4096, 1, 1, 2, 0, 1, 1)},
      {{384, 768, 768}, 2, k6x64, CG_P(48, 256, 4096, 1, 2, 2, 0, 1, 1)},
      {{384, 3072, 768}, 1, k8x32, CG_P(32, 192, 2048, 1, 1, 1, 4, 0, 1)},
      {{384, 3072, 768}, 2, k8x32, CG_P(32, 192, 2048, 1, 2, 1, 4, 0, 1)},
      {{384, 768, 3072}, 1, k6x64, CG_P(48, 256, 4096, 1, 1, 2, 0, 1, 1)},
      {{384, 768, 3072}, 2, k6x64, CG_P(48, 256, 4096, 1, 2, 2, 0, 1, 1)},
      // AVX2 hosts (AMD EPYC, Zen 3), from --explore with explicit candidates: 6x16,
      // A block 96 x 256 (96 KiB, in L2), B panel 256 x 16 (16 KiB, in L1).
      {{1024, 1024, 1024}, 1, k6x16, CG_P(96, 256, 1024, 0, 1, 4, 0, 1, 1)},
      {{1024, 1024, 1024}, 2, k6x16, CG_P(96, 256, 1024, 1, 2, 4, 0, 1, 1)},
      {{2048, 2048, 2048}, 1, k6x16, CG_P(96, 256, 1024, 0, 1, 4, 0, 1, 1)},
      {{2048, 2048, 2048}, 2, k6x16, CG_P(96, 256, 1024, 1, 2, 4, 0, 1, 1)},
  };
  return picks;
}

// The first hand-picked schedule for (shape, threads) that the host runs, or an
// error naming why none does.
StatusOr<Schedule> FindHandPick(const Shape& s, int threads, const OpKey& key, const DeviceInfo& device) {
  Status why = NotFound("no hand-picked schedule");
  for (const auto& p : HandPicked()) {
    if (p.shape.m != s.m || p.shape.n != s.n || p.shape.k != s.k || p.threads != threads) continue;
    auto sched = Schedule::FromNamed(p.variant, p.params);
    why = sched.ok() ? CheckSchedule(*sched, key, device) : sched.status();
    if (why.ok()) return sched;
  }
  return why;
}

// Operands of one shape, filled once with values in [-1, 1].
struct Operands {
  std::vector<float> a, b, c;
  explicit Operands(const Shape& s) : a(s.m * s.k), b(s.k * s.n), c(s.m * s.n) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (auto& x : a) x = d(rng);
    for (auto& x : b) x = d(rng);
  }
  GemmArgs Args(const Shape& s) { return DenseGemmArgs(OpKey::Gemm(s.m, s.n, s.k), a.data(), b.data(), c.data()); }
};

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// GFLOPS: by wall time (the headline figure). GFLOPS_cpu: by process CPU time
// divided by the thread count, an estimate of the uncontended rate on a busy host
// (it counts spinning workers as busy, so it errs low for threads > 1).
// FMA peak of 1 and 2 threads (bench::MeasureFmaPeak), measured at start.
double g_peak[3] = {0, 0, 0};

void SetFlops(benchmark::State& state, const Shape& s, double cpu_seconds, int threads) {
  const double flops = 2.0 * s.m * s.n * s.k * state.iterations();
  state.counters["GFLOPS"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsRate);
  if (threads >= 1 && threads <= 2 && g_peak[threads] > 0)
    state.counters["peak_fraction"] = benchmark::Counter(flops * 1e-9 / g_peak[threads], benchmark::Counter::kIsRate);
  state.counters["GFLOPS_cpu"] = cpu_seconds > 0 ? flops * 1e-9 / (cpu_seconds / threads) : 0.0;
}

// Times call() (a Status) on `threads` threads, with the shape's counters.
template <class Call>
void TimeCalls(benchmark::State& state, const Shape& s, const std::vector<float>& c, int threads, Call&& call) {
  const double cpu0 = ProcessCpuSeconds();
  for (auto _ : state) {
    Status st = call();
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  SetFlops(state, s, ProcessCpuSeconds() - cpu0, threads);
}

void BenchSchedule(benchmark::State& state, Shape s, Schedule sched) {
  Operands ops(s);
  const GemmArgs args = ops.Args(s);
  state.SetLabel(sched.ToString());
  TimeCalls(state, s, ops.c, int(sched.params[sched.variant->ParamIndex("threads")]), [&] { return RunGemm(sched, args); });
}

// A bundle's entry through the runtime's plan (dispatch included, as served).
void BenchTuned(benchmark::State& state, Shape s, Runtime* rt) {
  Operands ops(s);
  auto plan = rt->PlanGemm(OpKey::Gemm(s.m, s.n, s.k));
  if (!plan.ok()) return state.SkipWithError(plan.status().ToString().c_str());
  state.SetLabel(plan->schedule().ToString());
  TimeCalls(state, s, ops.c, rt->device().threads,
            [&] { return plan->Run(ops.a.data(), s.k, ops.b.data(), s.n, ops.c.data(), s.n); });
}

// Runtimes for 1 and 2 threads with every --bundle loaded (none without bundles).
void LoadBundles() {
  if (g_bundles.empty()) return;
  for (int threads : {1, 2}) {
    auto rt = Runtime::Create(RuntimeOptions{.threads = threads, .miss_report_path = "", .warn_on_miss = false});
    if (!rt.ok()) {
      std::fprintf(stderr, "runtime (threads=%d): %s\n", threads, rt.status().ToString().c_str());
      std::exit(2);
    }
    for (const auto& b : g_bundles) bench::LoadBundleOrDie(**rt, b);
    g_runtimes.push_back(std::move(*rt));
  }
}

#ifdef CG_HAVE_OPENBLAS
void BenchOpenBlas(benchmark::State& state, Shape s, int threads) {
  Operands ops(s);
  openblas_set_num_threads(threads);
  state.SetLabel(openblas_get_corename());
  const double cpu0 = ProcessCpuSeconds();
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k, 1.0f, ops.a.data(), s.k, ops.b.data(), s.n,
                0.0f, ops.c.data(), s.n);
    benchmark::DoNotOptimize(ops.c.data());
    benchmark::ClobberMemory();
  }
  SetFlops(state, s, ProcessCpuSeconds() - cpu0, threads);
}
#endif

void RegisterAll() {
  for (const Shape& s : BenchShapes()) {
    for (int threads : {1, 2}) {
      const std::string shape = fmt::format("m={},n={},k={}/threads:{}", s.m, s.n, s.k, threads);
      const OpKey key = OpKey::Gemm(s.m, s.n, s.k);
      const DeviceInfo device = HostCpuDevice(threads);
      auto def = DefaultSchedule(key, device);
      if (def.ok()) {
        benchmark::RegisterBenchmark(("gemm_f32/" + shape + "/default").c_str(), BenchSchedule, s, *def)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
      if (size_t(threads) <= g_runtimes.size()) {
        Runtime* rt = g_runtimes[size_t(threads) - 1].get();
        if (auto res = rt->Resolve(key); res.ok() && res->hit) {
          benchmark::RegisterBenchmark(("gemm_f32/" + shape + "/tuned").c_str(), BenchTuned, s, rt)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        } else {
          std::fprintf(stderr, "no tuned entry for %s at threads=%d in the given bundles\n", key.ToString().c_str(),
                       threads);
        }
      }
      if (auto sched = FindHandPick(s, threads, key, device); sched.ok()) {
        benchmark::RegisterBenchmark(("gemm_f32/" + shape + "/hand").c_str(), BenchSchedule, s, *sched)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      } else if (sched.status().code() != StatusCode::kNotFound) {
        std::fprintf(stderr, "hand-picked schedule for %s skipped: %s\n", shape.c_str(), sched.status().ToString().c_str());
      }
      // oneDNN's matmul through its kernel variant (B as stored: no constant weights here),
      // in builds that have it.
      if (auto onednn = Schedule::FromNamed("cpu_f32_gemm_onednn", {{"threads", threads}, {"reorder_b", 0}});
          onednn.ok() && CheckSchedule(*onednn, key, device).ok()) {
        benchmark::RegisterBenchmark(("gemm_f32/" + shape + "/onednn").c_str(), BenchSchedule, s, *onednn)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
#ifdef CG_HAVE_OPENBLAS
      benchmark::RegisterBenchmark(("gemm_f32/" + shape + "/openblas").c_str(), BenchOpenBlas, s, threads)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
#endif
    }
  }
}

// --explore=M,N,K,THREADS[,TRIALS[,VARIANT_SUBSTRING]]: times TRIALS random valid
// schedules (of the variants the host runs whose name contains the substring) and
// any explicit schedules given as further arguments ("variant mc=.. kc=.."), plus the default and prints the 15 fastest.
std::vector<std::string> g_explicit;

int Explore(const char* spec) {
  long m = 0, n = 0, k = 0, threads = 1, trials = 300;
  char only[128] = "";
  if (std::sscanf(spec, "%ld,%ld,%ld,%ld,%ld,%127s", &m, &n, &k, &threads, &trials, only) < 4) {
    std::fprintf(stderr, "--explore=M,N,K,THREADS[,TRIALS[,VARIANT_SUBSTRING]]\n");
    return 2;
  }
  const Shape s{m, n, k};
  const OpKey key = OpKey::Gemm(m, n, k);
  const DeviceInfo device = HostCpuDevice(static_cast<int>(threads));
  Operands ops(s);
  const GemmArgs args = ops.Args(s);
  auto time_it = [&](const Schedule& sched) {
    double best = 1e30;
    const int reps = std::max<int>(1, static_cast<int>(2e8 / (2.0 * m * n * k)));
    for (int r = 0; r < 3; ++r) {
      const double t0 = ProcessCpuSeconds(), w0 = WallSeconds();
      for (int i = 0; i < reps; ++i) (void)RunGemm(sched, args);
      // One thread: CPU time (robust to a busy host); more: wall time.
      const double t = threads == 1 ? ProcessCpuSeconds() - t0 : WallSeconds() - w0;
      best = std::min(best, t / reps);
    }
    return 2.0 * m * n * k / best * 1e-9;
  };
  std::vector<std::pair<double, std::string>> results;
  // Explicit schedules after the shape: "--explore=M,N,K,T,0 'variant k=v ...' ...".
  for (const std::string& text : g_explicit) {
    std::istringstream in(text);
    std::string name, kv;
    in >> name;
    std::vector<std::pair<std::string, int64_t>> named;
    while (in >> kv) {
      const auto eq = kv.find('=');
      if (eq != std::string::npos) named.emplace_back(kv.substr(0, eq), std::stoll(kv.substr(eq + 1)));
    }
    auto sched = Schedule::FromNamed(name, named);
    const Status st = sched.ok() ? CheckSchedule(*sched, key, device) : sched.status();
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      continue;
    }
    for (int r = 0; r < 2; ++r) results.emplace_back(time_it(*sched), sched->ToString());
  }
  auto def = DefaultSchedule(key, device);
  if (def.ok()) results.emplace_back(time_it(*def), "default: " + def->ToString());
  std::mt19937 rng(42);
  std::vector<const KernelVariant*> variants;
  for (const auto& v : AllKernelVariants())
    if (VariantSupports(v, key, device).ok() && std::strstr(v.name, only)) variants.push_back(&v);
  for (long t = 0; t < trials; ++t) {
    const KernelVariant& v = *variants[rng() % variants.size()];
    Schedule sched;
    sched.variant = &v;
    for (size_t i = 0; i < v.params.size(); ++i) sched.params[i] = v.params[i].values[rng() % v.params[i].values.size()];
    if (!CheckSchedule(sched, key, device).ok()) {
      --t;
      continue;
    }
    results.emplace_back(time_it(sched), sched.ToString());
  }
  std::sort(results.rbegin(), results.rend());
  for (size_t i = 0; i < results.size() && i < 15; ++i)
    std::printf("%8.1f GFLOP/s  %s\n", results[i].first, results[i].second.c_str());
  return 0;
}

}  // namespace
}  // namespace cliffguard

int main(int argc, char** argv) {
  // OpenBLAS picks its core when the library loads: clean the environment and
  // re-execute once so that it chooses by cpuid (see the file comment).
  cliffguard::bench::ReexecWithLibraryEnvironment(argv);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--explore=", 10) == 0) {
      for (int j = i + 1; j < argc; ++j) cliffguard::g_explicit.emplace_back(argv[j]);
      return cliffguard::Explore(argv[i] + 10);
    }
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (cliffguard::bench::ParseBundleFlag(argv[i], cliffguard::g_bundles)) continue;
    cliffguard::Shape s{};
    if (const int got = cliffguard::bench::ParseShapeFlag(argv[i], s.m, s.n, s.k)) {
      if (got < 0) return 2;
      cliffguard::g_shapes.push_back(s);
      continue;
    }
    rest.push_back(argv[i]);
  }
  if (const char* env = std::getenv("CG_BUNDLE")) cliffguard::bench::SplitInto(env, cliffguard::g_bundles);
  cliffguard::SetLogLevel(cliffguard::LogLevel::kError);
  cliffguard::LoadBundles();
#ifdef CG_HAVE_OPENBLAS
  std::fprintf(stderr, "OpenBLAS core: %s (%s)\n", openblas_get_corename(), openblas_get_config());
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
#endif
  const cliffguard::DeviceInfo host = cliffguard::HostCpuDevice();
  benchmark::AddCustomContext("cliffguard_device", host.fingerprint + " " + host.name);
  if (host.isa & cliffguard::kIsaAvx2)
    for (int t : {1, 2}) {
      cliffguard::g_peak[t] = cliffguard::bench::MeasureFmaPeak(t);
      benchmark::AddCustomContext(fmt::format("fma_peak_gflops_{}t", t), fmt::format("{:.1f}", cliffguard::g_peak[t]));
    }
  int rc = static_cast<int>(rest.size());
  benchmark::Initialize(&rc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rc, rest.data())) return 1;
  cliffguard::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
