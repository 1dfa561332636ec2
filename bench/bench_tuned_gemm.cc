// Tuned vs default vs OpenBLAS: fp32 GEMM on the DESIGN.md transformer shapes, at 1
// and 2 threads, as GFLOP/s (counter "GFLOPS").
//
//   CG_BUNDLE=a.cgb,b.cgb build-tune/bench/bench_tuned_gemm [--benchmark_min_time=0.3s]
//   build-tune/bench/bench_tuned_gemm --bundle=a.cgb --bundle=b.cgb [--cold]
//
// tuned:   the schedule a Runtime with that thread budget resolves from the given
//          bundles (a bundle applies only to its device, and the thread budget is part
//          of the device: tune once with --threads 1 and once with --threads 2 and pass
//          both). Runs through GemmPlan::Run, the serving hot path. Shapes without a
//          hit are skipped (reported as "no tuned entry").
// default: DefaultSchedule(key, device) through RunGemm (what a miss runs without a
//          bundle default).
// openblas: cblas_sgemm with openblas_set_num_threads(threads).
//
// OpenBLAS reads OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE when the library loads (before
// main): main() re-executes this binary once with the library environment
// (bench_util.h: the host ISA's OpenBLAS core, no forced L2 size), then prints
// openblas_get_corename().
//
// By default each benchmark reuses one set of buffers (warm cache) for all three
// contenders. With --cold, every iteration uses the next of several identical copies
// of (A, B, C), with the tuner measurer's rule: enough copies to cover twice the
// device cache (L3 + L2 x threads), at most 16 and 1 GiB, so operands come from
// memory as in the tuner's measurements (and in serving, between layers).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "bench_util.h"
#include "cliffguard/log.h"
#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "cliffguard/runtime.h"

#ifdef CG_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace {

using namespace cliffguard;

// DESIGN.md paper workloads: BERT-base GEMMs (n,k in {768x768, 3072x768, 768x3072},
// m = tokens) plus two square shapes.
struct Shape {
  int64_t m, n, k;
};
constexpr Shape kShapes[] = {
    {1, 768, 768},     {16, 768, 768},    {16, 3072, 768},  {16, 768, 3072},   {64, 768, 768},
    {128, 768, 768},   {128, 3072, 768},  {128, 768, 3072}, {384, 768, 768},   {256, 256, 256},
    {1024, 1024, 1024},
};

bool g_cold = false;

struct Buffers {
  struct Set {
    std::vector<float> a, b, c;
  };
  std::vector<Set> sets;
  size_t next = 0;
  Buffers(const Shape& s, const DeviceInfo& device) {
    Set first{std::vector<float>(s.m * s.k), std::vector<float>(s.k * s.n), std::vector<float>(s.m * s.n)};
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto& x : first.a) x = u(rng);
    for (auto& x : first.b) x = u(rng);
    int64_t copies = 1;
    if (g_cold) {
      const int64_t set_bytes = 4 * (s.m * s.k + s.k * s.n + s.m * s.n);
      const int64_t cache = device.l3_bytes + device.l2_bytes * std::max(1, device.threads);
      const int64_t budget = 2 * (cache > 0 ? cache : (int64_t{32} << 20));
      copies = std::clamp<int64_t>((budget + set_bytes - 1) / set_bytes, 1, 16);
      copies = std::max<int64_t>(1, std::min<int64_t>(copies, (int64_t{1} << 30) / set_bytes));
    }
    sets.assign(copies, first);
  }
  Set& Next() { return sets[next++ % sets.size()]; }
};

void SetRate(benchmark::State& st, const Shape& s) {
  st.counters["GFLOPS"] = benchmark::Counter(2.0 * s.m * s.n * s.k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

std::vector<std::string> g_bundles;
std::vector<std::unique_ptr<Runtime>> g_runtimes;  // kept alive for the plans

void RegisterAll() {
  for (int threads : {1, 2}) {
    auto rt = Runtime::Create(RuntimeOptions{.threads = threads, .miss_report_path = "", .warn_on_miss = false});
    if (!rt.ok()) {
      fmt::print(stderr, "runtime (threads={}): {}\n", threads, rt.status().ToString());
      continue;
    }
    Runtime* r = rt->get();
    for (const auto& b : g_bundles) {
      auto rep = r->LoadBundleFile(b);
      if (!rep.ok()) fmt::print(stderr, "bundle {}: {}\n", b, rep.status().ToString());
    }
    g_runtimes.push_back(std::move(*rt));
    const DeviceInfo device = r->device();
    for (const Shape& s : kShapes) {
      const OpKey key = OpKey::Gemm(s.m, s.n, s.k);
      const std::string suffix = fmt::format("m={}/n={}/k={}/threads={}", s.m, s.n, s.k, threads);
      auto res = r->Resolve(key);
      if (res.ok() && res->hit) {
        benchmark::RegisterBenchmark(("tuned/" + suffix).c_str(), [r, s, key](benchmark::State& st) {
          auto plan = r->PlanGemm(key);
          if (!plan.ok()) return st.SkipWithError(plan.status().ToString().c_str());
          st.SetLabel(plan->schedule().ToString());
          Buffers buf(s, r->device());
          for (auto _ : st) {
            auto& x = buf.Next();
            Status ok = plan->Run(x.a.data(), s.k, x.b.data(), s.n, x.c.data(), s.n);
            if (!ok.ok()) return st.SkipWithError(ok.ToString().c_str());
          }
          SetRate(st, s);
        })->UseRealTime();
      } else {
        fmt::print(stderr, "no tuned entry for {} at threads={} in the given bundles\n", key.ToString(), threads);
      }
      benchmark::RegisterBenchmark(("default/" + suffix).c_str(), [s, key, device](benchmark::State& st) {
        auto sched = DefaultSchedule(key, device);
        if (!sched.ok()) return st.SkipWithError(sched.status().ToString().c_str());
        st.SetLabel(sched->ToString());
        Buffers buf(s, device);
        for (auto _ : st) {
          auto& x = buf.Next();
          Status ok = RunGemm(*sched, DenseGemmArgs(key, x.a.data(), x.b.data(), x.c.data()));
          if (!ok.ok()) return st.SkipWithError(ok.ToString().c_str());
        }
        SetRate(st, s);
      })->UseRealTime();
#ifdef CG_HAVE_OPENBLAS
      benchmark::RegisterBenchmark(("openblas/" + suffix).c_str(), [s, threads, device](benchmark::State& st) {
        openblas_set_num_threads(threads);
        st.SetLabel(openblas_get_corename());
        Buffers buf(s, device);
        for (auto _ : st) {
          auto& x = buf.Next();
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k, 1.0f, x.a.data(), s.k, x.b.data(), s.n,
                      0.0f, x.c.data(), s.n);
        }
        SetRate(st, s);
      })->UseRealTime();
#endif
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
#ifdef CG_HAVE_OPENBLAS
  cliffguard::bench::ReexecWithLibraryEnvironment(argv);
  fmt::print(stderr, "OpenBLAS core: {}\n", openblas_get_corename());
#endif
  
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (cliffguard::bench::ParseBundleFlag(argv[i], g_bundles)) continue;
    if (std::strcmp(argv[i], "--cold") == 0) {
      g_cold = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  cliffguard::bench::AddEnvironmentBundles(g_bundles);
  int rc = static_cast<int>(rest.size());
  benchmark::Initialize(&rc, rest.data());
#ifdef CG_HAVE_OPENBLAS
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
#endif
  benchmark::AddCustomContext("buffers", g_cold ? "cold (rotated copies, as the tuner measures)" : "warm (one set)");
  benchmark::AddCustomContext("bundles", fmt::format("{}", fmt::join(g_bundles, ",")));
  RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
