// Host time per GEMM call on a GPU: the runtime on a hit and on a miss, against the
// same schedule's kernel entry point called directly (RunGemm), for each kind of GPU
// schedule (the cuBLAS default, a cuBLASLt algorithm, the own GEMV and tensor-core
// kernels). A hit's dispatch overhead is its time minus the direct call's, in one run.
//
// The key is small (bf16 nt 1 x 256 x 256) so that the GPU keeps pace with the
// launches; the stream is drained every kDrainEvery calls outside the timed region,
// so host time never includes waiting on a full launch queue. Without a GPU every
// benchmark is skipped with the probe's reason.
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "cliffguard/bundle.h"
#include "cliffguard/log.h"
#include "cliffguard/runtime.h"

namespace cliffguard {
namespace {

constexpr int kDrainEvery = 128;
constexpr DType kDtype = DType::kBF16;

// One schedule kind: its variant, and the key it is cached under in the bundle
// (a distinct n per kind, so one runtime holds all four).
struct Kind {
  const char* label;
  const char* variant;
  int64_t n;
};
constexpr Kind kKinds[] = {
    {"cublas", "cuda_bf16_gemm_cublas", 256},
    {"cublaslt", "cuda_bf16_gemm_cublaslt", 264},
    {"gemv", "cuda_bf16_gemv_nt", 272},
    {"mma", "cuda_bf16_gemm_mma", 280},
};
constexpr int64_t kM = 1, kK = 256;
const OpKey kMissKey = OpKey::Gemm(3, 256, 256, false, true, kDtype);

OpKey KeyOf(const Kind& k) { return OpKey::Gemm(kM, k.n, kK, false, true, kDtype); }

struct Fixture {
  std::string error;  // non-empty: no GPU or no runtime; every benchmark skips
  std::unique_ptr<Runtime> rt;
  std::vector<Schedule> schedules;  // per kKinds entry
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  cudaStream_t stream = nullptr;

  Fixture() {
    SetLogLevel(LogLevel::kError);
    RuntimeOptions o;
    o.device = "cuda:0";
    o.warn_on_miss = false;
    auto created = Runtime::Create(o);
    if (!created.ok()) {
      error = created.status().ToString();
      return;
    }
    rt = std::move(created).value();
    const DeviceInfo& dev = rt->device();
    BundleSpec spec;
    spec.device = dev;
    // A realistic table: the four keys among a few thousand cuBLAS entries.
    for (int m = 1; m <= 64; ++m)
      for (int n : {768, 3072, 1024, 4096})
        for (int k : {768, 3072, 1024, 4096}) {
          const OpKey key = OpKey::Gemm(m, n, k, false, true, kDtype);
          spec.entries.push_back({key, ToNamed(DefaultSchedule(key, dev).value()), 1, 2, 1, 0, ""});
        }
    for (const Kind& kind : kKinds) {
      const OpKey key = KeyOf(kind);
      const KernelVariant* v = FindKernelVariant(kind.variant);
      if (!v) {
        error = fmt::format("no variant {} in this build", kind.variant);
        return;
      }
      Schedule s = VariantDefaultSchedule(*v, key, dev);
      if (v->candidates) {
        const std::vector<ParamValues> found = v->candidates(*v, key, dev);
        if (found.empty()) {
          error = fmt::format("{} proposes no schedule for {}", kind.variant, key.ToString());
          return;
        }
        s.params = found[0];
      }
      if (Status st = CheckSchedule(s, key, dev); !st.ok()) {
        error = st.ToString();
        return;
      }
      schedules.push_back(s);
      spec.entries.push_back({key, ToNamed(s), 1, 2, 1, 0, ""});
    }
    auto rep = rt->LoadBundleBuffer(SerializeBundle(spec), "bench");
    if (!rep.ok() || rep->entries_loaded != spec.entries.size()) {
      error = rep.ok() ? fmt::format("{} of {} entries loaded", rep->entries_loaded, spec.entries.size())
                       : rep.status().ToString();
      return;
    }
    const size_t bytes = size_t(kK) * 512 * 2;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
        cudaMalloc(&c, bytes) != cudaSuccess || cudaStreamCreate(&stream) != cudaSuccess) {
      error = "cudaMalloc or cudaStreamCreate failed";
      return;
    }
    // Small random-ish values (bf16 bit patterns of moderate magnitude), never zeros.
    std::vector<uint16_t> host(bytes / 2);
    for (size_t i = 0; i < host.size(); ++i) host[i] = uint16_t(0x3c00 + (i * 2654435761u >> 20) % 0x300);
    cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice);
  }

  GemmArgs Args(const OpKey& key) const {
    GemmArgs g = DenseGemmArgs(key, a, b, c);
    g.stream = stream;
    return g;
  }
};

Fixture& F() {
  static Fixture f;
  return f;
}

// Runs `call` per iteration, draining the stream every kDrainEvery calls untimed;
// `after_warm` runs once the untimed warm-up calls are done.
template <typename Call, typename AfterWarm = void (*)()>
void Loop(benchmark::State& state, Fixture& f, Call call, AfterWarm after_warm = [] {}) {
  for (int i = 0; i < 16; ++i) (void)call();  // warm: handles, plans, workspaces
  cudaStreamSynchronize(f.stream);
  after_warm();
  int since = 0;
  for (auto _ : state) {
    if (!call().ok()) {
      state.SkipWithError("the call failed");
      break;
    }
    if (++since == kDrainEvery) {
      state.PauseTiming();
      cudaStreamSynchronize(f.stream);
      state.ResumeTiming();
      since = 0;
    }
  }
  cudaStreamSynchronize(f.stream);
  if (cudaGetLastError() != cudaSuccess) state.SkipWithError("a CUDA error is pending");
}

// The fixture, or null with the benchmark skipped (no GPU, or the fixture failed).
Fixture* Ready(benchmark::State& state) {
  Fixture& f = F();
  if (f.error.empty()) return &f;
  state.SkipWithError(f.error.c_str());
  return nullptr;
}

// One schedule kind's call (state.range(0) indexes kKinds), labelled with the kind.
struct KindCall {
  Fixture* f;
  GemmArgs args;
  Schedule schedule;
};
std::optional<KindCall> ForKind(benchmark::State& state) {
  Fixture* f = Ready(state);
  if (!f) return std::nullopt;
  const int kind = int(state.range(0));
  state.SetLabel(kKinds[kind].label);
  return KindCall{f, f->Args(KeyOf(kKinds[kind])), f->schedules[size_t(kind)]};
}

void BM_direct(benchmark::State& state) {
  if (auto c = ForKind(state)) Loop(state, *c->f, [&] { return RunGemm(c->schedule, c->args); });
}

void BM_hit(benchmark::State& state) {
  if (auto c = ForKind(state)) Loop(state, *c->f, [&] { return c->f->rt->Gemm(c->args); });
}

// The hit's overhead inside one loop: each iteration times the direct call and the
// hit (alternating which goes first) with the host clock; the counters are the mean
// host time of each and of their difference.
void BM_hit_minus_direct(benchmark::State& state) {
  using Clock = std::chrono::steady_clock;
  auto c = ForKind(state);
  if (!c) return;
  double direct_ns = 0, hit_ns = 0;
  int64_t n = 0;
  bool hit_first = false;
  auto direct = [&] { return RunGemm(c->schedule, c->args); };
  auto hit = [&] { return c->f->rt->Gemm(c->args); };
  Loop(
      state, *c->f,
      [&] {
        hit_first = !hit_first;
        const auto t0 = Clock::now();
        const Status first = hit_first ? hit() : direct();
        const auto t1 = Clock::now();
        const Status second = hit_first ? direct() : hit();
        const auto t2 = Clock::now();
        const double a = std::chrono::duration<double, std::nano>(t1 - t0).count();
        const double b = std::chrono::duration<double, std::nano>(t2 - t1).count();
        direct_ns += hit_first ? b : a;
        hit_ns += hit_first ? a : b;
        ++n;
        return first.ok() ? second : first;
      },
      [&] { direct_ns = hit_ns = 0, n = 0; });
  if (n == 0) return;
  state.counters["direct_ns"] = direct_ns / double(n);
  state.counters["hit_ns"] = hit_ns / double(n);
  state.counters["overhead_ns"] = (hit_ns - direct_ns) / double(n);
}

// A miss: the cuBLAS default plus the miss count and the event pair that prices it.
void BM_miss(benchmark::State& state) {
  state.SetLabel("cublas");
  Fixture* f = Ready(state);
  if (!f) return;
  const GemmArgs g = f->Args(kMissKey);
  Loop(state, *f, [&] { return f->rt->Gemm(g); });
}

BENCHMARK(BM_direct)->DenseRange(0, 3)->UseRealTime();
BENCHMARK(BM_hit)->DenseRange(0, 3)->UseRealTime();
BENCHMARK(BM_hit_minus_direct)->DenseRange(0, 3)->UseRealTime();
BENCHMARK(BM_miss)->UseRealTime();

}  // namespace
}  // namespace cliffguard

BENCHMARK_MAIN();
