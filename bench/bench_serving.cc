// Serving GEMMs in inference layouts, side by side in one run: cliffguard's built-in
// default (what a miss runs), cliffguard tuned (entries of --bundle=, through a
// plan), oneDNN (dnnl_sgemm, and the matmul primitive with its weights reordered
// once, as a serving stack runs it) and OpenBLAS (cblas_sgemm), on 1 and 2 threads.
// Counters: GFLOPS, and weight_GBps (bytes of B per second: the bound of decode
// shapes). BM_read_bandwidth (a read of 512 MiB in four prefetched streams per thread)
// and BM_fma_peak (register
// FMAs) give the machine's two bounds in the same run.
//
//   build/bench/bench_serving [--bundle=a.cgb,b.cgb] [--benchmark_filter=...]
//       [--benchmark_repetitions=5 --benchmark_enable_random_interleaving=true]
//   build/bench/bench_serving --print_workload   (the shapes, as a `tune --workload` file)
//
// Rows: packed/ (the packed GEMM's default, m <= 16), default/ (the built-in default,
// what a miss runs per call), default_packed/ (the same through a constant-weights
// plan: B packed once), tuned/ and tuned_packed/ (the --bundle entries of the key
// and of its weights=constant key, through plans), and the libraries.
// With --bundle, the run ends with a verdict on stderr and exits 1 when a tuned row
// is slower than its default row beyond the noise (max(2%, the mean half
// interquartile range over the repetitions)).
//
// Operands rotate over copies covering 2x the last-level cache (weights are not
// found in cache from the previous call, as in serving). Shapes (name layout m n k):
// BERT-base and BERT-large layers at 128 and 384 tokens, decode steps (m = 1, 4, 16)
// of 768-, 3072- and 4096-wide models, a 7B-class model at m = 32 and 128, and
// ResNet-50 convolutions as GEMMs (im2col: m = output pixels, k = ic x kh x kw);
// each in nn (weights k x n) and nt (weights n x k, as PyTorch stores them).
#include <immintrin.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <span>
#include <string_view>
#include <memory>
#include <string>
#include <thread>
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
extern "C" void openblas_set_num_threads(int);
#endif
#ifdef CG_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
extern "C" void omp_set_num_threads(int);
#endif

namespace cliffguard {
namespace {

struct Shape {
  const char* group;
  int64_t m, n, k;
};

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = [] {
    std::vector<Shape> s;
    for (int64_t m : {128, 384})
      for (auto [n, k] : {std::pair<int64_t, int64_t>{768, 768}, {3072, 768}, {768, 3072}}) s.push_back({"bert_base", m, n, k});
    for (auto [n, k] : {std::pair<int64_t, int64_t>{1024, 1024}, {4096, 1024}, {1024, 4096}}) s.push_back({"bert_large", 128, n, k});
    for (int64_t m : {1, 4, 16})
      for (auto [n, k] : {std::pair<int64_t, int64_t>{768, 768}, {3072, 768}, {4096, 4096}, {11008, 4096}})
        s.push_back({"decode", m, n, k});
    for (int64_t m : {32, 128})
      for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {11008, 4096}, {4096, 11008}}) s.push_back({"llm_7b", m, n, k});
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{3136, 64, 576}, {3136, 256, 64}, {784, 128, 1152},
                           {196, 256, 2304}, {49, 512, 4608}, {784, 512, 128}})
      s.push_back({"resnet50", m, n, k});
    return s;
  }();
  return shapes;
}

int64_t CoverBytes(const DeviceInfo& d) { return 2 * std::max<int64_t>(d.l3_bytes + d.l2_bytes * 2, 32 << 20); }

void SetCounters(benchmark::State& st, const Shape& s) {
  st.counters["GFLOPS"] = benchmark::Counter(2.0 * s.m * s.n * s.k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["weight_GBps"] = benchmark::Counter(4.0 * s.n * s.k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

std::vector<std::string> g_bundles;
std::vector<std::unique_ptr<Runtime>> g_runtimes;  // kept alive for the plans

// A runtime with the thread budget, with the --bundle files or with none (every
// key then misses and runs the built-in default).
Runtime* RuntimeFor(int threads, bool with_bundles = true) {
  static std::vector<std::pair<int, bool>> kinds;  // of g_runtimes, index by index
  for (size_t i = 0; i < kinds.size(); ++i)
    if (kinds[i] == std::pair(threads, with_bundles)) return g_runtimes[i].get();
  RuntimeOptions o;
  o.threads = threads;
  o.warn_on_miss = false;
  auto rt = Runtime::Create(o);
  if (!rt.ok()) return nullptr;
  if (with_bundles)
    for (const auto& b : g_bundles) (void)(*rt)->LoadBundleFile(b);
  g_runtimes.push_back(std::move(*std::move(rt)));
  kinds.emplace_back(threads, with_bundles);
  return g_runtimes.back().get();
}

// Serves a key through constant-weight plans, one per rotated copy of the operands
// (each with its own packed weights, so weights are cold as between layers).
void TimePackedPlans(benchmark::State& st, Runtime& rt, const Shape& s, const OpKey& key, const DeviceInfo& device) {
  bench::RotatedOperands ops(s.m, s.n, s.k, CoverBytes(device));
  std::vector<GemmPlan> plans;
  const int64_t ldb = key.trans_b ? s.k : s.n;
  for (auto& x : ops.sets) {
    auto plan = rt.PlanGemm(key, x.b.data(), ldb);
    if (!plan.ok()) return st.SkipWithError(plan.status().ToString().c_str());
    plans.push_back(std::move(*plan));
  }
  st.SetLabel(fmt::format("{}{}", plans[0].hit() ? "" : "miss: ", plans[0].schedule().ToString()));
  size_t i = 0;
  for (auto _ : st) {
    auto& x = ops.sets[i % ops.sets.size()];
    Status ok = plans[i % plans.size()].Run(x.a.data(), s.k, x.c.data(), s.n);
    if (!ok.ok()) return st.SkipWithError(ok.ToString().c_str());
    ++i;
  }
  SetCounters(st, s);
}

// Times one schedule through RunGemm on rotated operands.
void TimeSchedule(benchmark::State& st, const Shape& s, const OpKey& key, const DeviceInfo& device, const Schedule& sched) {
  st.SetLabel(sched.ToString());
  bench::RotatedOperands ops(s.m, s.n, s.k, CoverBytes(device));
  for (auto _ : st) {
    auto& x = ops.Next();
    Status ok = RunGemm(sched, DenseGemmArgs(key, x.a.data(), x.b.data(), x.c.data()));
    if (!ok.ok()) return st.SkipWithError(ok.ToString().c_str());
  }
  SetCounters(st, s);
}

void RegisterShape(const Shape& s, bool nt, int threads) {
  const std::string suffix = fmt::format("{}/{}/m={}/n={}/k={}/threads:{}", s.group, nt ? "nt" : "nn", s.m, s.n, s.k, threads);
  const OpKey key = OpKey::Gemm(s.m, s.n, s.k, false, nt);
  const DeviceInfo device = HostCpuDevice(threads);

  // The packed GEMM's default (what a miss ran before the small-m kernels) for m <= 16.
  if (s.m <= 16)
    benchmark::RegisterBenchmark(("packed/" + suffix).c_str(), [s, key, device](benchmark::State& st) {
      const KernelVariant* packed = nullptr;
      for (const auto& v : AllKernelVariants())
        if (!packed && std::string_view(v.name).find("_gemm_") != std::string_view::npos && VariantSupports(v, key, device).ok())
          packed = &v;
      if (!packed) return st.SkipWithError("no packed variant");
      TimeSchedule(st, s, key, device, VariantDefaultSchedule(*packed, key, device));
    })->UseRealTime();

  benchmark::RegisterBenchmark(("default/" + suffix).c_str(), [s, key, device](benchmark::State& st) {
    auto sched = DefaultSchedule(key, device);
    if (!sched.ok()) return st.SkipWithError(sched.status().ToString().c_str());
    TimeSchedule(st, s, key, device, *sched);
  })->UseRealTime();

  benchmark::RegisterBenchmark(("default_packed/" + suffix).c_str(), [s, key, device, threads](benchmark::State& st) {
    Runtime* rt = RuntimeFor(threads, false);
    if (!rt) return st.SkipWithError("cannot create a runtime");
    TimePackedPlans(st, *rt, s, key, device);
  })->UseRealTime();

  if (Runtime* rt = g_bundles.empty() ? nullptr : RuntimeFor(threads)) {
    OpKey packed_key = key;
    packed_key.constant_weights = true;
    auto packed_res = rt->Resolve(packed_key);
    if (packed_res.ok() && packed_res->hit)
      benchmark::RegisterBenchmark(("tuned_packed/" + suffix).c_str(), [rt, s, key, device](benchmark::State& st) {
        TimePackedPlans(st, *rt, s, key, device);
      })->UseRealTime();
    auto res = rt->Resolve(key);
    if (res.ok() && res->hit)
      benchmark::RegisterBenchmark(("tuned/" + suffix).c_str(), [rt, s, key, device](benchmark::State& st) {
        auto plan = rt->PlanGemm(key);
        if (!plan.ok()) return st.SkipWithError(plan.status().ToString().c_str());
        st.SetLabel(plan->schedule().ToString());
        bench::RotatedOperands ops(s.m, s.n, s.k, CoverBytes(device));
        const int64_t ldb = key.trans_b ? s.k : s.n;
        for (auto _ : st) {
          auto& x = ops.Next();
          Status ok = plan->Run(x.a.data(), s.k, x.b.data(), ldb, x.c.data(), s.n);
          if (!ok.ok()) return st.SkipWithError(ok.ToString().c_str());
        }
        SetCounters(st, s);
      })->UseRealTime();
  }

#ifdef CG_HAVE_ONEDNN
  benchmark::RegisterBenchmark(("onednn_sgemm/" + suffix).c_str(), [s, nt, threads, device](benchmark::State& st) {
    omp_set_num_threads(threads);
    bench::RotatedOperands ops(s.m, s.n, s.k, CoverBytes(device));
    for (auto _ : st) {
      auto& x = ops.Next();
      dnnl_sgemm('N', nt ? 'T' : 'N', s.m, s.n, s.k, 1.0f, x.a.data(), s.k, x.b.data(), nt ? s.k : s.n, 0.0f,
                 x.c.data(), s.n);
    }
    SetCounters(st, s);
  })->UseRealTime();
  benchmark::RegisterBenchmark(("onednn_matmul/" + suffix).c_str(), [s, nt, threads, device](benchmark::State& st) {
    using dnnl::memory;
    omp_set_num_threads(threads);
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    const memory::desc a_md({s.m, s.k}, memory::data_type::f32, memory::format_tag::ab);
    const memory::desc b_user({s.k, s.n}, memory::data_type::f32, nt ? memory::format_tag::ba : memory::format_tag::ab);
    const memory::desc b_any({s.k, s.n}, memory::data_type::f32, memory::format_tag::any);
    const memory::desc c_md({s.m, s.n}, memory::data_type::f32, memory::format_tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), eng);
    const dnnl::matmul mm(pd);
    bench::RotatedOperands ops(s.m, s.n, s.k, CoverBytes(device));
    std::vector<memory> weights;  // reordered once per copy: the serving path's constant weights
    for (auto& x : ops.sets) {
      memory user(b_user, eng, x.b.data());
      memory packed(pd.weights_desc(), eng);
      dnnl::reorder(user, packed).execute(strm, user, packed);
      weights.push_back(packed);
    }
    strm.wait();
    st.SetLabel(fmt::format("weights {}", pd.weights_desc() == b_user ? "as given" : "reordered once"));
    size_t i = 0;
    for (auto _ : st) {
      auto& x = ops.sets[i % ops.sets.size()];
      memory a(a_md, eng, x.a.data()), c(c_md, eng, x.c.data());
      mm.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, weights[i % weights.size()]}, {DNNL_ARG_DST, c}});
      strm.wait();
      ++i;
    }
    SetCounters(st, s);
  })->UseRealTime();
#endif

#ifdef CG_HAVE_OPENBLAS
  benchmark::RegisterBenchmark(("openblas/" + suffix).c_str(), [s, nt, threads, device](benchmark::State& st) {
    openblas_set_num_threads(threads);
    st.SetLabel(openblas_get_corename());
    bench::RotatedOperands ops(s.m, s.n, s.k, CoverBytes(device));
    for (auto _ : st) {
      auto& x = ops.Next();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, nt ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f, x.a.data(), s.k,
                  x.b.data(), nt ? s.k : s.n, 0.0f, x.c.data(), s.n);
    }
    SetCounters(st, s);
    openblas_set_num_threads(1);  // as the runtime's OpenBLAS variant expects it
  })->UseRealTime();
#endif
}

// Runs fn(t) on `threads` threads (the caller is thread 0) and joins them.
template <typename Fn>
void OnThreads(int threads, Fn&& fn) {
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(fn, t);
  fn(0);
  for (auto& th : pool) th.join();
}

// Sums n floats read as kStreams concurrent sequential streams (consecutive quarters
// of the range), prefetching kAhead cache lines ahead in each: more streams and the
// prefetch keep more lines in flight than one stream does. On the AVX-512 host one
// AVX2 stream read 8 GB/s on one core, this 13 (AVX-512 loads) and 16 (four
// streams, prefetch): the bound must be the fastest read, or kernels exceed it.
constexpr int kStreams = 4, kAhead = 16, kLine = 16;  // kLine: floats per 64-byte line

__attribute__((target("avx2"))) float SumAvx2(const float* p, size_t n) {
  __m256 s[kStreams];
  for (auto& x : s) x = _mm256_setzero_ps();
  const size_t len = n / kStreams / kLine * kLine;
  for (size_t i = 0; i < len; i += kLine)
    for (int q = 0; q < kStreams; ++q) {
      const float* b = p + q * len + i;
      _mm_prefetch(reinterpret_cast<const char*>(b + kAhead * kLine), _MM_HINT_T0);
      s[q] = _mm256_add_ps(s[q], _mm256_add_ps(_mm256_load_ps(b), _mm256_load_ps(b + 8)));
    }
  for (int q = 1; q < kStreams; ++q) s[0] = _mm256_add_ps(s[0], s[q]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s[0]);
  return out[0] + out[7];
}

__attribute__((target("avx512f"))) float SumAvx512(const float* p, size_t n) {
  __m512 s[kStreams];
  for (auto& x : s) x = _mm512_setzero_ps();
  const size_t len = n / kStreams / kLine * kLine;
  for (size_t i = 0; i < len; i += kLine)
    for (int q = 0; q < kStreams; ++q) {
      const float* b = p + q * len + i;
      _mm_prefetch(reinterpret_cast<const char*>(b + kAhead * kLine), _MM_HINT_T0);
      s[q] = _mm512_add_ps(s[q], _mm512_load_ps(b));
    }
  for (int q = 1; q < kStreams; ++q) s[0] = _mm512_add_ps(s[0], s[q]);
  return _mm512_reduce_add_ps(s[0]);
}

void BM_read_bandwidth(benchmark::State& st) {
  static float* buf_data = [] {  // 512 MiB, 64-byte aligned
    auto* p = static_cast<float*>(std::aligned_alloc(64, size_t(512) << 20));
    std::fill(p, p + (size_t(512) << 18), 1.0f);
    return p;
  }();
  static const std::span<const float> buf(buf_data, size_t(512) << 18);
  static float (*const sum)(const float*, size_t) = (HostCpuDevice().isa & kIsaAvx512) ? SumAvx512 : SumAvx2;
  const int threads = int(st.range(0));
  const size_t share = buf.size() / size_t(threads) / 64 * 64;
  std::vector<float> sink(static_cast<size_t>(threads), 0.0f);
  for (auto _ : st) OnThreads(threads, [&](int t) { sink[size_t(t)] += sum(buf.data() + share * size_t(t), share); });
  benchmark::DoNotOptimize(sink.data());
  st.counters["GBps"] = benchmark::Counter(double(share * size_t(threads)) * 4e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_fma_peak(benchmark::State& st) {
  const int threads = int(st.range(0));
  constexpr int64_t kSteps = 1 << 20;
  std::vector<float> sink(static_cast<size_t>(threads), 0.0f);
  for (auto _ : st) OnThreads(threads, [&](int t) { sink[size_t(t)] += bench::FmaChains(kSteps); });
  benchmark::DoNotOptimize(sink.data());
  st.counters["GFLOPS"] =
      benchmark::Counter(bench::FmaChainsFlops(kSteps) * threads * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Collects every run's real time per benchmark (one per repetition) for the
// verdict, and passes everything on to the chosen display reporter.
class VerdictReporter final : public benchmark::BenchmarkReporter {
 public:
  explicit VerdictReporter(std::unique_ptr<benchmark::BenchmarkReporter> inner) : inner_(std::move(inner)) {}
  bool ReportContext(const Context& c) override { return inner_->ReportContext(c); }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (r.run_type == Run::RT_Iteration && !r.error_occurred) {
        const std::string name = r.run_name.function_name + (r.run_name.args.empty() ? "" : "/" + r.run_name.args);
        times_[name].push_back(r.GetAdjustedRealTime());
        labels_[name] = r.report_label.starts_with("miss: ") ? r.report_label.substr(6) : r.report_label;
      }
    inner_->ReportRuns(runs);
  }
  void Finalize() override { inner_->Finalize(); }

  // Every tuned row against its default row (tuned/ vs default/, tuned_packed/ vs
  // default_packed/) whose schedule differs (a shipped default is the same schedule):
  // median and half interquartile range over the repetitions. Returns the number of
  // rows slower than their default beyond the noise: max(2% of the default, the mean
  // of the two spreads), the tuner's own rule.
  int Verdict() const {
    int slower = 0, compared = 0, same = 0;
    for (const auto& [name, tuned] : times_) {
      for (const std::string_view prefix : {"tuned/", "tuned_packed/"}) {
        if (!name.starts_with(prefix)) continue;
        const std::string rest = name.substr(prefix.size());
        const std::string def_name = (prefix == "tuned/" ? "default/" : "default_packed/") + rest;
        auto it = times_.find(def_name);
        if (it == times_.end()) continue;
        if (labels_.at(name) == labels_.at(def_name)) {
          ++same;
          continue;
        }
        const auto [tm, ts] = MedianSpread(tuned);
        const auto [dm, ds] = MedianSpread(it->second);
        const double noise = std::max(0.02 * dm, 0.5 * (ts + ds));
        ++compared;
        if (tm - dm > noise) {
          ++slower;
          std::fprintf(stderr, "SLOWER THAN DEFAULT: %s %.4g (+-%.2g) vs %s %.4g (+-%.2g), noise %.2g, %zu reps\n",
                       name.c_str(), tm, ts, def_name.c_str(), dm, ds, noise, tuned.size());
        }
      }
    }
    std::fprintf(stderr,
                 "verdict: %d tuned rows with a schedule of their own compared with their default, %d slower beyond "
                 "noise (%d rows run the default schedule itself)\n",
                 compared, slower, same);
    return slower;
  }

 private:
  static std::pair<double, double> MedianSpread(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    auto q = [&](double f) {
      const double pos = f * double(v.size() - 1);
      const size_t lo = size_t(pos), hi = std::min(lo + 1, v.size() - 1);
      return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
    };
    return {q(0.5), 0.5 * (q(0.75) - q(0.25))};
  }
  std::unique_ptr<benchmark::BenchmarkReporter> inner_;
  std::map<std::string, std::vector<double>> times_;
  std::map<std::string, std::string> labels_;  // the schedule each row ran
};

void RegisterAll() {
  if (HostCpuDevice().isa & kIsaAvx2) {
    benchmark::RegisterBenchmark("BM_read_bandwidth", BM_read_bandwidth)->Arg(1)->Arg(2)->UseRealTime();
    benchmark::RegisterBenchmark("BM_fma_peak", BM_fma_peak)->Arg(1)->Arg(2)->UseRealTime();
  }
  for (const Shape& s : Shapes())
    for (bool nt : {false, true})
      for (int threads : {1, 2}) RegisterShape(s, nt, threads);
}

}  // namespace
}  // namespace cliffguard

int main(int argc, char** argv) {
  cliffguard::bench::ReexecWithLibraryEnvironment(argv);
  cliffguard::SetLogLevel(cliffguard::LogLevel::kError);
  std::vector<char*> rest;
  bool json = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--benchmark_format=json") == 0) json = true;
    if (std::strcmp(argv[i], "--print_workload") == 0) {  // the shapes as a tuner workload (constant weights)
      for (const auto& s : cliffguard::Shapes())
        for (bool nt : {false, true}) {
          cliffguard::OpKey key = cliffguard::OpKey::Gemm(s.m, s.n, s.k, false, nt);
          key.constant_weights = true;
          std::printf("%s\n", key.ToString().c_str());
        }
      return 0;
    }
    if (std::strncmp(argv[i], "--bundle=", 9) == 0) {
      std::string list = argv[i] + 9;
      for (size_t pos = 0; pos <= list.size();) {
        size_t comma = list.find(',', pos);
        if (comma == std::string::npos) comma = list.size();
        if (comma > pos) cliffguard::g_bundles.push_back(list.substr(pos, comma - pos));
        pos = comma + 1;
      }
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rc = static_cast<int>(rest.size());
  benchmark::Initialize(&rc, rest.data());
#ifdef CG_HAVE_OPENBLAS
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
#endif
  const cliffguard::DeviceInfo host = cliffguard::HostCpuDevice();
  benchmark::AddCustomContext("cliffguard_device", host.fingerprint + " " + host.name);
  cliffguard::RegisterAll();
  std::unique_ptr<benchmark::BenchmarkReporter> display;
  if (json)
    display = std::make_unique<benchmark::JSONReporter>();
  else
    display = std::make_unique<benchmark::ConsoleReporter>();
  cliffguard::VerdictReporter reporter(std::move(display));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  // With bundles: fail loudly when a shipped entry serves slower than its default.
  return !cliffguard::g_bundles.empty() && reporter.Verdict() > 0 ? 1 : 0;
}
