// The hit path's cost per call after 0, 10, 100 and 1000 bundle reloads: it must
// not grow with reloads (retired tables are reclaimed; the per-thread slot follows
// the current table). Each iteration times a block of Runtime::Gemm calls on a
// cached 1x1x1 key and a block of direct RunGemm calls of the same schedule, in the
// same run, interleaved, so the difference is the dispatch overhead alone:
//   hit_ns      Runtime::Gemm per call (hit)
//   direct_ns   RunGemm of the same schedule per call
//   overhead_ns hit_ns - direct_ns
// Reloads cycle through ReplaceBundles, LoadBundleBuffer and UnloadAll (ending with
// the bundle loaded), one dispatch after each so the slot switches tables.
//
//   bench_reload --benchmark_counters_tabular=true
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "cliffguard/log.h"
#include "cliffguard/bundle.h"
#include "cliffguard/runtime.h"

namespace cg = cliffguard;

namespace {

constexpr int kBlock = 256;  // calls per timed block

cg::BundleSpec Spec(const cg::DeviceInfo& device, int extra_keys) {
  cg::BundleSpec spec;
  spec.device = device;
  auto add = [&](const cg::OpKey& k) {
    cg::BundleEntry e;
    e.key = k;
    e.schedule.variant = "cpu_f32_gemm_4x4__scalar";
    e.tuned_us = 0.01;
    e.default_us = 0.02;
    spec.entries.push_back(e);
  };
  add(cg::OpKey::Gemm(1, 1, 1));
  for (int i = 0; i < extra_keys; ++i) add(cg::OpKey::Gemm(2 + i, 64, 64));  // a realistic table size
  return spec;
}

void BM_HitAfterReloads(benchmark::State& state) {
  cg::SetLogLevel(cg::LogLevel::kError);
  const int reloads = static_cast<int>(state.range(0));
  cg::RuntimeOptions o;
  o.threads = 1;
  o.warn_on_miss = false;
  auto rt_or = cg::Runtime::Create(o);
  if (!rt_or.ok()) return state.SkipWithError(rt_or.status().ToString().c_str());
  cg::Runtime& rt = **rt_or;
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("cg_bench_reload_{}.cgb", ::getpid())).string();
  const cg::BundleSpec spec = Spec(rt.device(), 255);
  if (!cg::WriteBundleFile(path, spec).ok()) return state.SkipWithError("cannot write the bundle");
  const std::vector<uint8_t> bytes = cg::SerializeBundle(spec);

  float a = 1.f, b = 2.f, c = 0.f;
  const cg::GemmArgs args = cg::DenseGemmArgs(cg::OpKey::Gemm(1, 1, 1), &a, &b, &c);

  if (!rt.ReplaceBundles({path}).ok()) return state.SkipWithError("load failed");
  for (int r = 0; r < reloads; ++r) {
    bool ok = true;
    switch (r % 3) {
      case 0: rt.UnloadAll(); break;
      case 1: ok = rt.LoadBundleBuffer(bytes, "buffer").ok(); break;
      case 2: ok = rt.ReplaceBundles({path}).ok(); break;
    }
    if (!ok) return state.SkipWithError("reload failed");
    (void)rt.Gemm(args);  // the slot follows the new table
  }
  if (!rt.ReplaceBundles({path}).ok()) return state.SkipWithError("final load failed");
  auto res = rt.Resolve(cg::OpKey::Gemm(1, 1, 1));
  if (!res.ok() || !res->hit) return state.SkipWithError("1x1x1 is not a hit");
  const cg::Schedule schedule = res->schedule;
  (void)rt.Gemm(args);

  using clock = std::chrono::steady_clock;
  double hit_ns = 0, direct_ns = 0;
  int64_t blocks = 0;
  for (auto _ : state) {
    const auto t0 = clock::now();
    for (int i = 0; i < kBlock; ++i) benchmark::DoNotOptimize(rt.Gemm(args));
    const auto t1 = clock::now();
    for (int i = 0; i < kBlock; ++i) benchmark::DoNotOptimize(cg::RunGemm(schedule, args));
    const auto t2 = clock::now();
    benchmark::ClobberMemory();
    hit_ns += std::chrono::duration<double, std::nano>(t1 - t0).count();
    direct_ns += std::chrono::duration<double, std::nano>(t2 - t1).count();
    ++blocks;
  }
  const double calls = double(blocks) * kBlock;
  state.counters["hit_ns"] = hit_ns / calls;
  state.counters["direct_ns"] = direct_ns / calls;
  state.counters["overhead_ns"] = (hit_ns - direct_ns) / calls;
  state.counters["reloads"] = reloads;
  // Every hit was counted: the warm-up calls plus the timed ones.
  uint64_t hits = 0;
  for (const cg::KeyStats& s : rt.Stats())
    if (s.key == cg::OpKey::Gemm(1, 1, 1)) hits = s.hits;
  if (hits < static_cast<uint64_t>(calls)) state.SkipWithError("hits were lost");
  std::filesystem::remove(path);
}

BENCHMARK(BM_HitAfterReloads)->Arg(0)->Arg(10)->Arg(100)->Arg(1000)->ArgName("reloads")->MinTime(0.5);

}  // namespace

BENCHMARK_MAIN();
