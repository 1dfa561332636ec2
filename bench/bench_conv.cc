// fp32 conv2d (NHWC) on ResNet-18's twelve distinct convolutions at batch 1, on 1
// and 2 threads, side by side in one run:
//
//   default: DefaultSchedule(key, device) through RunConv2d, the filter packed once
//            when the variant packs (pack_weights), as a plan runs it.
//   tuned:   the schedule a Runtime with that thread budget resolves from the given
//            bundles (Runtime::Resolve of the key with constant weights, then of the
//            key), run like default. Layers without a hit are skipped with a message.
//   onednn:  oneDNN's own best as its users run it: convolution_forward with
//            convolution_auto, src/dst nhwc, weights format_tag::any reordered once
//            to the primitive's layout, threads via omp_set_num_threads (only in a
//            build with oneDNN).
//
//   build/bench/bench_conv [--bundle=a.cgb --bundle=b.cgb | CG_BUNDLE=a.cgb,b.cgb]
//       [--benchmark_repetitions=5 --benchmark_enable_random_interleaving=true]
//       [--benchmark_out=conv.json --benchmark_out_format=json]
//   bench/conv_table.py conv.json   (the side-by-side table)
//
// Rows: <contender>/<layer>/h=../ic=../oc=../k=../s=../threads:<t>. Each row sets up
// its own buffers, schedule and primitive (one untimed call first), so rows can run
// in any order (random interleaving). Counters: GFLOPS (2 n oh ow oc kh kw ic per
// call) and peak_fraction (GFLOPS over the assumed FMA peak of that many threads:
// threads x the one-core peak, measured at start as 10 independent AVX2 FMA chains,
// best of 20, or given as --fma_peak=GFLOPS per core; in the context as
// fma_peak_gflops_<t>t, beside the measured all-thread figure, which a loaded host
// pulls down). Buffers are warm (one set per row); no bias (the filters of an
// inference graph with batch norm folded in would add one per output channel).
//
// OpenMP: like bench_serving, main() re-executes once with OMP_WAIT_POLICY=passive
// unless the variable is set (the serving configuration: the library variants need
// it for threads > 1, and spinning oneDNN workers would slow the rows after theirs).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench_util.h"
#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "cliffguard/runtime.h"

#ifdef CG_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
extern "C" void omp_set_num_threads(int);
#endif

namespace cliffguard {
namespace {

// ResNet-18's convolutions (He et al. 2016, table 1), batch 1, SAME padding (k-1)/2.
struct Layer {
  const char* name;
  int64_t hw, ic, oc, k, s;
};
constexpr Layer kLayers[] = {
    {"C1", 224, 3, 64, 7, 2},    {"C2", 56, 64, 64, 3, 1},    {"C3", 56, 64, 64, 1, 1},
    {"C4", 56, 64, 128, 3, 2},   {"C5", 56, 64, 128, 1, 2},   {"C6", 28, 128, 128, 3, 1},
    {"C7", 28, 128, 256, 3, 2},  {"C8", 28, 128, 256, 1, 2},  {"C9", 14, 256, 256, 3, 1},
    {"C10", 14, 256, 512, 3, 2}, {"C11", 14, 256, 512, 1, 2}, {"C12", 7, 512, 512, 3, 1},
};
constexpr int kThreadCounts[] = {1, 2};

OpKey KeyOf(const Layer& l) {
  const int64_t pad = (l.k - 1) / 2;
  return OpKey::Conv2d(1, l.hw, l.hw, l.ic, l.oc, l.k, l.k, l.s, l.s, pad, pad);
}

double g_peak[3] = {0, 0, 0};  // assumed FMA peak GFLOP/s on 1 and 2 threads

// ---- rows ----

struct Tensors {
  std::vector<float> x, w, y;  // x NHWC, w OHWI dense, y NHWC
  explicit Tensors(const OpKey& key) {
    const Conv2dOutput out = Conv2dOutputDims(key);
    const auto& d = key.dims;
    x.resize(size_t(d[0] * d[1] * d[2] * d[3]));
    w.resize(size_t(d[4] * d[5] * d[6] * d[3]));
    y.resize(size_t(d[0] * out.oh * out.ow * d[4]));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto& v : x) v = u(rng);
    for (auto& v : w) v = u(rng);
  }
};

void SetRate(benchmark::State& st, const OpKey& key, int threads) {
  const double gflop = key.Flops() * 1e-9;
  st.counters["GFLOPS"] = benchmark::Counter(gflop, benchmark::Counter::kIsIterationInvariantRate);
  if (g_peak[threads] > 0)
    st.counters["peak_fraction"] = benchmark::Counter(gflop / g_peak[threads], benchmark::Counter::kIsIterationInvariantRate);
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

// A schedule run as a plan runs it: the filter packed once when the variant packs.
void RunSchedule(benchmark::State& st, const OpKey& key, const Schedule& sched, int threads) {
  st.SetLabel(sched.ToString());
  Tensors t(key);
  Conv2dArgs args = DenseConv2dArgs(key, t.x.data(), t.w.data(), nullptr, t.y.data());
  std::unique_ptr<void, AlignedFree> packed;
  const KernelVariant& v = *sched.variant;
  if (v.pack_weights && v.packed_weights_bytes) {
    const size_t bytes = v.packed_weights_bytes(v, key, sched.params);
    packed.reset(AllocateWeights(bytes));
    const Status ok = v.pack_weights(v, key, sched.params, t.w.data(), key.dims[5] * key.dims[6] * key.dims[3],
                                     packed.get());
    if (!ok.ok()) return st.SkipWithError(("pack_weights: " + ok.ToString()).c_str());
    args.packed_weights = packed.get();
  }
  if (Status ok = RunConv2d(sched, args); !ok.ok()) return st.SkipWithError(ok.ToString().c_str());  // untimed
  for (auto _ : st) {
    Status ok = RunConv2d(sched, args);
    if (!ok.ok()) return st.SkipWithError(ok.ToString().c_str());
  }
  SetRate(st, key, threads);
}

#ifdef CG_HAVE_ONEDNN
void RunOnednn(benchmark::State& st, const OpKey& key, int threads) {
  using dnnl::memory;
  using Dims = memory::dims;
  omp_set_num_threads(threads);  // before the primitive descriptor: oneDNN plans for this count
  const auto& d = key.dims;
  const Conv2dOutput out = Conv2dOutputDims(key);
  Tensors t(key);
  try {
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    const auto f32 = memory::data_type::f32;
    const memory::desc src_md(Dims{d[0], d[3], d[1], d[2]}, f32, memory::format_tag::nhwc);
    const memory::desc dst_md(Dims{d[0], d[4], out.oh, out.ow}, f32, memory::format_tag::nhwc);
    const memory::desc any_w(Dims{d[4], d[3], d[5], d[6]}, f32, memory::format_tag::any);
    const dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_auto, src_md,
                                        any_w, dst_md, Dims{d[7], d[8]}, Dims{d[9], d[10]}, Dims{d[9], d[10]}),
        eng);
    const dnnl::convolution_forward conv(pd);
    memory user_w(memory::desc(Dims{d[4], d[3], d[5], d[6]}, f32, memory::format_tag::ohwi), eng, t.w.data());
    memory wei(pd.weights_desc(), eng);
    dnnl::reorder(user_w, wei).execute(strm, user_w, wei);  // once, as a plan
    memory src(pd.src_desc(), eng, t.x.data()), dst(pd.dst_desc(), eng, t.y.data());
    st.SetLabel(fmt::format("{} (convolution_auto, weights reordered once)", pd.impl_info_str()));
    const std::unordered_map<int, memory> exec_args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
    conv.execute(strm, exec_args);  // untimed
    strm.wait();
    for (auto _ : st) {
      conv.execute(strm, exec_args);
      strm.wait();
    }
  } catch (const dnnl::error& e) {
    return st.SkipWithError(fmt::format("oneDNN: {} (status {})", e.what(), int(e.status)).c_str());
  }
  SetRate(st, key, threads);
}
#endif

std::vector<std::string> g_bundles;
std::vector<std::unique_ptr<Runtime>> g_runtimes;  // kept alive for their resolutions

void RegisterAll() {
  for (int threads : kThreadCounts) {
    Runtime* r = nullptr;
    DeviceInfo device = HostCpuDevice();
    device.threads = threads;
    RuntimeOptions options;
    options.threads = threads;
    options.miss_report_path = "";
    options.warn_on_miss = false;
    auto rt = Runtime::Create(options);
    if (rt.ok()) {
      r = rt->get();
      for (const auto& b : g_bundles)
        if (auto rep = r->LoadBundleFile(b); !rep.ok()) fmt::print(stderr, "bundle {}: {}\n", b, rep.status().ToString());
      device = r->device();
      g_runtimes.push_back(std::move(*rt));
    } else {
      fmt::print(stderr, "runtime (threads={}): {}: tuned rows skipped\n", threads, rt.status().ToString());
    }
    for (const Layer& l : kLayers) {
      const OpKey key = KeyOf(l);
      const std::string suffix =
          fmt::format("{}/h={}/ic={}/oc={}/k={}/s={}/threads:{}", l.name, l.hw, l.ic, l.oc, l.k, l.s, threads);

      if (auto sched = DefaultSchedule(key, device); sched.ok()) {
        benchmark::RegisterBenchmark(("default/" + suffix).c_str(), [key, s = *sched, threads](benchmark::State& st) {
          RunSchedule(st, key, s, threads);
        })->UseRealTime();
      } else {
        const std::string why = sched.status().ToString();
        fmt::print(stderr, "default/{}: skipped: no built-in default: {}\n", suffix, why.substr(0, why.find('\n')));
      }

      if (r != nullptr && !g_bundles.empty()) {
        OpKey constant = key;
        constant.constant_weights = true;
        auto res = r->Resolve(constant);
        if (!res.ok() || !res->hit) res = r->Resolve(key);
        if (res.ok() && res->hit) {
          benchmark::RegisterBenchmark(("tuned/" + suffix).c_str(),
                                       [key, s = res->schedule, threads](benchmark::State& st) {
                                         RunSchedule(st, key, s, threads);
                                       })->UseRealTime();
        } else {
          fmt::print(stderr, "tuned/{}: skipped: {}\n", suffix,
                     res.ok() ? fmt::format("no tuned entry for {} at threads={} in the given bundles", key.ToString(),
                                            threads)
                              : res.status().ToString());
        }
      }

#ifdef CG_HAVE_ONEDNN
      benchmark::RegisterBenchmark(("onednn/" + suffix).c_str(), [key, threads](benchmark::State& st) {
        RunOnednn(st, key, threads);
      })->UseRealTime();
#endif
    }
  }
}

}  // namespace
}  // namespace cliffguard

int main(int argc, char** argv) {
  using namespace cliffguard;
  bench::ReexecWithLibraryEnvironment(argv);  // also sets the idle-thread policies (bench_util.h)
  std::vector<char*> rest;
  double core_peak = 0;  // GFLOP/s of one core; 0: measure
  for (int i = 0; i < argc; ++i) {
    if (bench::ParseBundleFlag(argv[i], g_bundles)) continue;
    if (std::strncmp(argv[i], "--fma_peak=", 11) == 0) core_peak = std::atof(argv[i] + 11);
    else rest.push_back(argv[i]);
  }
  bench::AddEnvironmentBundles(g_bundles);
  int rc = static_cast<int>(rest.size());
  benchmark::Initialize(&rc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rc, rest.data())) return 1;
  const bool measured = core_peak <= 0;
  if (measured) core_peak = bench::MeasureFmaPeak(1);
  for (int t : kThreadCounts) {
    g_peak[t] = core_peak * t;
    benchmark::AddCustomContext(fmt::format("fma_peak_gflops_{}t", t), fmt::format("{:.1f}", g_peak[t]));
  }
  const double all = bench::MeasureFmaPeak(kThreadCounts[1]);
  benchmark::AddCustomContext(fmt::format("fma_peak_measured_gflops_{}t", kThreadCounts[1]), fmt::format("{:.1f}", all));
  fmt::print(stderr, "FMA peak assumed: {:.1f} GFLOP/s per core ({}); measured on {} threads now: {:.1f}\n", core_peak,
             measured ? "measured, AVX2" : "--fma_peak", kThreadCounts[1], all);
  benchmark::AddCustomContext("omp_wait_policy", std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "");
  benchmark::AddCustomContext("bundles", fmt::format("{}", fmt::join(g_bundles, ",")));
  RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
