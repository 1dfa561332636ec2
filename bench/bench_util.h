// Helpers shared by the benchmark programs.
#pragma once

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cliffguard/device.h"
#include "cliffguard/runtime.h"

namespace cliffguard::bench {

// The CPU libraries read their environment when they load, before main(): the
// benchmarks run them as the cliffguard command does (SetLibraryEnvironment,
// device.h): idle oneDNN (OpenMP) and OpenBLAS workers sleep instead of spinning
// after each library row and slowing the own kernels' threaded rows measured next,
// and an OpenBLAS that does not know this CPU runs the host ISA's kernels
// (OPENBLAS_CORETYPE), not its SSE3 fallback. OPENBLAS_L2_SIZE, which some images
// force, is removed. Re-executes this binary once when anything changed; call
// first thing in main().
inline void ReexecWithLibraryEnvironment(char** argv) {
  const bool forced_l2 = std::getenv("OPENBLAS_L2_SIZE") != nullptr;
  ::unsetenv("OPENBLAS_L2_SIZE");
  if (!SetLibraryEnvironment() && !forced_l2) return;
  ::execv("/proc/self/exe", argv);
  std::perror("re-exec with the library environment failed; the libraries keep the environment they loaded with");
}

// The compute bound: 10 independent FMA chains of `steps` steps in registers
// (unrolled, so the chains stay in registers), of the widest vectors the host has
// (AVX-512 where present, else AVX2): the peak the own kernels of that ISA can reach.
// Returns a value to sink; FmaChainsFlops gives the work.
__attribute__((target("avx2,fma"))) inline float FmaChains256(int64_t steps) {
  __m256 acc[10];
  for (auto& a : acc) a = _mm256_set1_ps(1.0f);
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < steps; ++i) {
#pragma GCC unroll 10
    for (auto& a : acc) a = _mm256_fmadd_ps(a, x, y);
  }
  float s = 0;
  for (auto& a : acc) s += _mm256_cvtss_f32(a);
  return s;
}
__attribute__((target("avx512f"))) inline float FmaChains512(int64_t steps) {
  __m512 acc[10];
  for (auto& a : acc) a = _mm512_set1_ps(1.0f);
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < steps; ++i) {
#pragma GCC unroll 10
    for (auto& a : acc) a = _mm512_fmadd_ps(a, x, y);
  }
  float s = 0;
  for (auto& a : acc) s += _mm512_cvtss_f32(a);
  return s;
}

inline bool HostHasAvx512() {
  static const bool yes = (HostCpuDevice().isa & kIsaAvx512) != 0;
  return yes;
}
inline float FmaChains(int64_t steps) { return HostHasAvx512() ? FmaChains512(steps) : FmaChains256(steps); }
// Floating-point operations of one FmaChains(steps) call.
inline double FmaChainsFlops(int64_t steps) { return double(steps) * 10 * 2 * (HostHasAvx512() ? 16 : 8); }

// GFLOP/s of FmaChains on `threads` threads at once: best of 20 runs of 10 chains x
// 2^20 FMAs of 8 or 16 lanes each (about 1.5 ms on a 3 GHz core with two FMA pipes).
inline double MeasureFmaPeak(int threads) {
  constexpr int64_t kSteps = int64_t{1} << 20;
  double best = 0;
  std::vector<float> sink(size_t(threads), 0.0f);
  for (int rep = 0; rep < 20; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back([&sink, t] { sink[size_t(t)] += FmaChains(kSteps); });
    sink[0] += FmaChains(kSteps);
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, FmaChainsFlops(kSteps) * threads * 1e-9 / s);
  }
  volatile float keep = sink[0];
  (void)keep;
  return best;
}

// Appends the comma-separated items of `list` to `out` (empty items skipped).
inline void SplitInto(const std::string& list, std::vector<std::string>& out) {
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    if (comma > pos) out.push_back(list.substr(pos, comma - pos));
    pos = comma + 1;
  }
}

// Bundles a benchmark loads for its tuned rows: the paths of every --bundle=a,b
// argument, then those of CG_BUNDLE (comma-separated too). Returns whether `arg` is
// a --bundle= argument (its paths then appended to `bundles`).
inline bool ParseBundleFlag(const char* arg, std::vector<std::string>& bundles) {
  if (std::strncmp(arg, "--bundle=", 9) != 0) return false;
  SplitInto(arg + 9, bundles);
  return true;
}

// After the arguments: appends CG_BUNDLE's paths to `bundles`, and says on stderr
// when there are none at all.
inline void AddEnvironmentBundles(std::vector<std::string>& bundles) {
  if (const char* env = std::getenv("CG_BUNDLE")) SplitInto(env, bundles);
  if (bundles.empty()) std::fputs("no bundle given (CG_BUNDLE or --bundle=): tuned rows are skipped\n", stderr);
}

// Loads a bundle into a benchmark's runtime, or exits 2 naming why: the file does
// not load, or an entry is rejected (a library variant this process cannot run,
// e.g. oneDNN on two threads without OMP_WAIT_POLICY=passive, which
// ReexecWithLibraryEnvironment sets): a benchmark must not time the built-in
// default in place of a shipped entry without saying so. Returns the report: a
// bundle for another device (another thread budget) loads nothing here, and its
// device_rule says why.
inline LoadReport LoadBundleOrDie(Runtime& rt, const std::string& path) {
  auto rep = rt.LoadBundleFile(path);
  if (!rep.ok()) {
    std::fprintf(stderr, "bundle %s: %s\n", path.c_str(), rep.status().ToString().c_str());
    std::exit(2);
  }
  for (const auto& r : rep->rejected) std::fprintf(stderr, "bundle %s: entry rejected: %s\n", path.c_str(), r.message.c_str());
  if (rep->device_match && !rep->rejected.empty()) std::exit(2);
  return *std::move(rep);
}

// A --shape=M,N,K argument: 0 when `arg` is none, 1 with m, n, k set, -1 (after
// an error on stderr naming the value) when the value is not three positive integers.
inline int ParseShapeFlag(const char* arg, int64_t& m, int64_t& n, int64_t& k) {
  if (std::strncmp(arg, "--shape=", 8) != 0) return 0;
  long long mm = 0, nn = 0, kk = 0;
  char tail = 0;
  if (std::sscanf(arg + 8, "%lld,%lld,%lld%c", &mm, &nn, &kk, &tail) != 3 || mm < 1 || nn < 1 || kk < 1) {
    std::fprintf(stderr, "--shape: '%s' is not M,N,K with three positive integers\n", arg + 8);
    return -1;
  }
  m = mm, n = nn, k = kk;
  return 1;
}

// Copies of one GEMM's operands (A m x k, B the weights, C m x n), rotated between
// calls so that a call does not find its operands in cache from the previous call:
// together they cover at least `cover_bytes` (e.g. twice the last-level cache), so
// that weights come from memory as between the layers of a model larger than the
// cache. The count is not capped below that: a cap of 32 left the 2.4 MB weights of
// a 768 x 768 layer in a 260 MiB L3 (75 MB of copies). Each operand starts on a
// cache line (LineAligned).
struct RotatedOperands {
  struct Set {
    LineAlignedFloats a, b, c;
  };
  std::vector<Set> sets;
  size_t next = 0;
  RotatedOperands(int64_t m, int64_t n, int64_t k, int64_t cover_bytes, int max_copies = 1 << 14) {
    Set first{LineAlignedFloats(size_t(m * k)), LineAlignedFloats(size_t(k * n)), LineAlignedFloats(size_t(m * n))};
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto& x : first.a) x = u(rng);
    for (auto& x : first.b) x = u(rng);
    const int64_t set_bytes = 4 * (m * k + k * n + m * n);
    const int64_t copies = std::clamp<int64_t>((cover_bytes + set_bytes - 1) / set_bytes, 1, max_copies);
    sets.assign(size_t(copies), first);
  }
  // The set least recently handed out (every row that shares the copies takes the
  // next in one rotation, so none finds a set another row has just read).
  Set& Next() { return sets[next++ % sets.size()]; }
};

}  // namespace cliffguard::bench
