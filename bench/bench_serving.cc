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
//   build/bench/bench_serving --paired [--paired_rounds=15] [--paired_window_ms=20]
//       [--paired_rows=default_packed,tuned_packed,onednn_matmul,openblas] [--bundle=...]
//   build/bench/bench_serving --print_workload   (the shapes, as a `tune --workload` file)
//   --shape=M,N,K (repeatable): these shapes (group "custom") replace the serving shapes
//   --schedule="VARIANT NAME=VALUE ..." (repeatable): rows schedule1, schedule2, ... for
//       --paired_rows: that schedule (parameters not named fitted per key; weights
//       packed once when the variant packs them, unless --per_call_schedules)
//   --per_call_schedules: the --schedule rows pass B with every call, as a miss of a
//       per-call key runs (a variant that packs B then packs it in each call)
//   --warm: one operand set per row, reused by every call (whatever fits stays in cache
//       from call to call, as in a loop over the same buffers); the decode read bound
//       does not apply then
//   --isa=avx2: the rows that pick an own variant (packed, gemv, gemv_packed, default)
//       decline the AVX-512 ones, as on an AVX2 host (the runtime's rows and the
//       libraries still run as the host allows)
//
// Rows: packed/ (the packed GEMM's default, m <= 16), gemm_packed/ (the same on
// weights packed once; --paired_rows only), gemv/ (the small-m kernels'
// default, where they run the key, weights in place), gemv_packed/ (the small-m
// kernels on packed panels, where they run the key's constant-weights form), default/ (the built-in default,
// what a miss runs per call), default_packed/ (the same through a constant-weights
// plan: B packed once), tuned/ and tuned_packed/ (the --bundle entries of the key
// and of its weights=constant key, through plans), and the libraries.
// With --bundle (or CG_BUNDLE), the run ends with a verdict on stderr and exits 1
// when a tuned row is slower than its default row beyond the noise (max(2%, the mean
// half interquartile range over the repetitions)).
//
// --paired: one benchmark per shape and thread count (paired/...) builds its rows
// once and times them in alternation: per round, in a random order, each row runs
// an untimed call and then calls for at least the window; counters <row>_us (the
// median over the rounds of the row's mean call time) and <row>_spread (half the
// interquartile range over the median). A host whose speed drifts over minutes
// slows every row of a round alike, where repetitions of separate rows run minutes
// apart. The machine's bounds run as rows of the same rounds: the read of
// BM_read_bandwidth for decode sizes, m <= 16 (counter read_bandwidth_GBps), and the FMAs of
// BM_fma_peak for m, n, k >= 1000 (fma_peak_GFLOPS). Its verdict compares the
// per-round ratio of tuned to default: slower beyond the noise when its median
// exceeds 1 + max(2%, its half interquartile range) (JudgePaired, paired_verdict.h). Rounds that lost more than
// --max_cpu_wait (default 0.10) of their time to other work on the host (counters
// cpu_wait, the median round's share, and busy_rounds; the tuner's measure,
// tuner/src/cpu_wait.h) are left out of it; a shape with fewer than half its rounds
// quiet is not judged, and the run exits 1 saying so.
//
// Operands rotate over copies covering 2x the last-level cache (weights are not
// found in cache from the previous call, as in serving), unless --warm. Shapes (name layout m n k):
// BERT-base and BERT-large layers at 128 and 384 tokens, decode steps (m = 1, 4, 16)
// of 768-, 3072- and 4096-wide models, a 7B-class model at m = 32 and 128, and
// ResNet-50 convolutions as GEMMs (im2col: m = output pixels, k = ic x kh x kw);
// each in nn (weights k x n) and nt (weights n x k, as PyTorch stores them).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <span>
#include <string_view>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "bench_util.h"
#include "cpu_wait.h"
#include "paired_verdict.h"
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

std::vector<Shape> g_shapes;  // --shape=M,N,K (group "custom"); empty: the serving shapes
bool g_avx2_only = false;     // --isa=avx2: the own variant rows as on a host without AVX-512

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = [] {
    if (!g_shapes.empty()) return g_shapes;
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

bool g_warm = false;  // --warm: one operand set

int64_t CoverBytes(const DeviceInfo& d) {
  return g_warm ? 0 : 2 * std::max<int64_t>(d.l3_bytes + d.l2_bytes * 2, 32 << 20);
}

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
    for (const auto& b : g_bundles) bench::LoadBundleOrDie(**rt, b);
  g_runtimes.push_back(std::move(*std::move(rt)));
  kinds.emplace_back(threads, with_bundles);
  return g_runtimes.back().get();
}

// Whether the --bundle files hold the key for a runtime of `threads`.
bool BundleHits(int threads, const OpKey& key) {
  Runtime* rt = g_bundles.empty() ? nullptr : RuntimeFor(threads);
  if (!rt) return false;
  auto res = rt->Resolve(key);
  return res.ok() && res->hit;
}

// What one row runs: call(i) serves the i-th call of the shape on its own rotated
// operands (state owns them and any packed weights); enter() and leave() bracket a
// run of calls (a library's thread count).
struct Contender {
  std::string label;  // the schedule or library setting it runs
  std::function<Status(size_t)> call;
  std::function<void()> enter = [] {}, leave = [] {};
  std::shared_ptr<void> state;
};

// A row's contender for (shape, key, device, threads); an error when it cannot run here.
using ContenderMaker = std::function<StatusOr<Contender>(const Shape&, const OpKey&, const DeviceInfo&, int)>;

// The rotated operands of a shape's per-call rows: one set of copies that every such
// row reads while it lives, so that rows compare on the same memory. Each row with
// copies of its own (line-aligned) measured identical code up to 1.29x apart on one
// thread at 2 x 11977 x 1245, consistently within a run (bench/RESULTS.md, "...
// per-call rows on the same copies").
std::shared_ptr<bench::RotatedOperands> PerCallOperands(const Shape& s, const DeviceInfo& device) {
  static std::map<std::array<int64_t, 4>, std::weak_ptr<bench::RotatedOperands>> live;
  const int64_t cover = CoverBytes(device);
  std::weak_ptr<bench::RotatedOperands>& w = live[{s.m, s.n, s.k, cover}];
  if (auto ops = w.lock()) return ops;
  auto ops = std::make_shared<bench::RotatedOperands>(s.m, s.n, s.k, cover);
  w = ops;
  return ops;
}

// One schedule through RunGemm.
Contender ScheduleContender(const Shape& s, const OpKey& key, const DeviceInfo& device, const Schedule& sched) {
  auto ops = PerCallOperands(s, device);
  return {sched.ToString(), [ops, key, sched](size_t) {
            auto& x = ops->Next();
            return RunGemm(sched, DenseGemmArgs(key, x.a.data(), x.b.data(), x.c.data()));
          },
          [] {}, [] {}, ops};
}

// A key served through constant-weights plans, one per rotated copy of the operands
// (each with its own packed weights, so weights are cold as between layers).
StatusOr<Contender> PlansContender(Runtime* rt, const Shape& s, const OpKey& key, const DeviceInfo& device) {
  if (!rt) return Internal("cannot create a runtime");
  struct State {
    bench::RotatedOperands ops;
    std::vector<GemmPlan> plans;
  };
  auto st = std::make_shared<State>(State{bench::RotatedOperands(s.m, s.n, s.k, CoverBytes(device)), {}});
  const int64_t ldb = key.trans_b ? s.k : s.n;
  for (auto& x : st->ops.sets) {
    auto plan = rt->PlanGemm(key, x.b.data(), ldb);
    if (!plan.ok()) return plan.status();
    st->plans.push_back(std::move(*plan));
    LineAlignedFloats().swap(x.b);  // the plan holds its own copy
  }
  const GemmPlan& p0 = st->plans[0];
  return Contender{fmt::format("{}{}", p0.hit() ? "" : "miss: ", p0.schedule().ToString()),
                   [st, s](size_t i) {
                     auto& x = st->ops.sets[i % st->ops.sets.size()];
                     return st->plans[i % st->plans.size()].Run(x.a.data(), s.k, x.c.data(), s.n);
                   },
                   [] {}, [] {}, st};
}

// The first variant (in table order) whose name contains `part` and which runs the
// key, or nullptr.
const KernelVariant* FirstVariant(std::string_view part, const OpKey& key, const DeviceInfo& device) {
  for (const auto& v : AllKernelVariants())
    if (std::string_view(v.name).find(part) != std::string_view::npos && VariantSupports(v, key, device).ok()) return &v;
  return nullptr;
}

// That variant's declared default schedule for the key, per call.
ContenderMaker FirstVariantRow(std::string_view part) {
  return [part](const Shape& s, const OpKey& key, const DeviceInfo& device, int) -> StatusOr<Contender> {
    if (const KernelVariant* v = FirstVariant(part, key, device))
      return ScheduleContender(s, key, device, VariantDefaultSchedule(*v, key, device));
    return NotFound(fmt::format("no {} variant runs the key", part));
  };
}

OpKey ConstantWeights(OpKey key) {
  key.constant_weights = true;
  return key;
}

// `sched` on the constant-weights key, from weights packed once per rotated copy by
// its variant's pack_weights.
StatusOr<Contender> PackedScheduleContender(const Shape& s, const OpKey& ckey, const Schedule& sched,
                                            const DeviceInfo& device) {
  const KernelVariant* v = sched.variant;
  struct State {
    bench::RotatedOperands ops;
    std::vector<std::unique_ptr<float, decltype(&std::free)>> packed;
  };
  auto st = std::make_shared<State>(State{bench::RotatedOperands(s.m, s.n, s.k, CoverBytes(device)), {}});
  const size_t bytes = v->packed_weights_bytes(*v, ckey, sched.params);
  for (auto& x : st->ops.sets) {
    st->packed.emplace_back(AllocateWeights(bytes), &std::free);
    CG_RETURN_IF_ERROR(v->pack_weights(*v, ckey, sched.params, x.b.data(), ckey.trans_b ? s.k : s.n,
                                       st->packed.back().get()));
    LineAlignedFloats().swap(x.b);
  }
  return Contender{sched.ToString(), [st, ckey, sched](size_t i) {
                     auto& x = st->ops.sets[i % st->ops.sets.size()];
                     GemmArgs g = DenseGemmArgs(ckey, x.a.data(), nullptr, x.c.data());
                     g.b = nullptr;
                     g.packed_b = st->packed[i % st->packed.size()].get();
                     return RunGemm(sched, g);
                   },
                   [] {}, [] {}, st};
}

// That variant's declared default schedule for the constant-weights key, from weights
// packed once per rotated copy.
ContenderMaker PackedVariantRow(std::string_view part) {
  return [part](const Shape& s, const OpKey& key, const DeviceInfo& device, int) -> StatusOr<Contender> {
    const OpKey ckey = ConstantWeights(key);
    const KernelVariant* v = FirstVariant(part, ckey, device);
    if (!v || !v->pack_weights) return NotFound(fmt::format("no {} variant packs the key's weights", part));
    return PackedScheduleContender(s, ckey, VariantDefaultSchedule(*v, ckey, device), device);
  };
}

// --schedule=TEXT rows (schedule1, schedule2, ...): "VARIANT NAME=VALUE ...", the
// parameters not named fitted to each key as the variant's default; weights packed
// once when the variant packs them (unless --per_call_schedules), else per call. A
// key the schedule cannot run (CheckSchedule) has no such row.
std::vector<std::pair<std::string, std::vector<std::pair<std::string, int64_t>>>> g_schedules;
bool g_per_call_schedules = false;

ContenderMaker ScheduleRow(size_t i) {
  return [i](const Shape& s, const OpKey& key, const DeviceInfo& device, int) -> StatusOr<Contender> {
    const auto& [variant, named] = g_schedules[i];
    const KernelVariant* v = FindKernelVariant(variant);
    if (!v) return NotFound(fmt::format("--schedule: no kernel variant '{}'", variant));
    const OpKey ckey = v->pack_weights && !g_per_call_schedules ? ConstantWeights(key) : key;
    Schedule sched = VariantDefaultSchedule(*v, ckey, device);
    uint32_t seen = 0;
    for (const auto& [name, value] : named) CG_RETURN_IF_ERROR(sched.SetParam(name, value, seen));
    CG_RETURN_IF_ERROR(CheckSchedule(sched, ckey, device));
    if (ckey.constant_weights) return PackedScheduleContender(s, ckey, sched, device);
    return ScheduleContender(s, key, device, sched);
  };
}

// The rows, by name: what a miss runs and what the tuned bundle serves (per call and
// with packed weights), and the libraries a user would call instead.
const std::vector<std::pair<std::string, ContenderMaker>>& Rows() {
  static const std::vector<std::pair<std::string, ContenderMaker>> rows = {
      // The packed GEMM's default (what a miss ran before the small-m kernels), m <= 16.
      {"packed", FirstVariantRow("_gemm_")},
      // The packed GEMM's default on weights packed once (its constant-weights form), any m.
      {"gemm_packed", PackedVariantRow("_gemm_")},
      // The small-m kernels' default (nt: m <= 16, nn: m <= 4), weights read in place.
      {"gemv", FirstVariantRow("_gemv_")},
      // The small-m kernels on panels of packed weights (either layout), where they run the key.
      {"gemv_packed", PackedVariantRow("_gemv_packed_")},
      {"default",
       [](const Shape& s, const OpKey& key, const DeviceInfo& device, int) -> StatusOr<Contender> {
         auto sched = DefaultSchedule(key, device);
         if (!sched.ok()) return sched.status();
         return ScheduleContender(s, key, device, *sched);
       }},
      {"default_packed",
       [](const Shape& s, const OpKey& key, const DeviceInfo& device, int threads) {
         return PlansContender(RuntimeFor(threads, false), s, key, device);
       }},
      {"tuned_packed",
       [](const Shape& s, const OpKey& key, const DeviceInfo& device, int threads) -> StatusOr<Contender> {
         if (!BundleHits(threads, ConstantWeights(key))) return NotFound("no bundle entry");
         return PlansContender(RuntimeFor(threads), s, key, device);
       }},
      {"tuned",
       [](const Shape& s, const OpKey& key, const DeviceInfo& device, int threads) -> StatusOr<Contender> {
         if (!BundleHits(threads, key)) return NotFound("no bundle entry");
         auto plan = RuntimeFor(threads)->PlanGemm(key);
         if (!plan.ok()) return plan.status();
         struct State {
           std::shared_ptr<bench::RotatedOperands> ops;
           GemmPlan plan;
         };
         auto st = std::make_shared<State>(State{PerCallOperands(s, device), std::move(*plan)});
         const int64_t ldb = key.trans_b ? s.k : s.n;
         return Contender{st->plan.schedule().ToString(),
                          [st, s, ldb](size_t) {
                            auto& x = st->ops->Next();
                            return st->plan.Run(x.a.data(), s.k, x.b.data(), ldb, x.c.data(), s.n);
                          },
                          [] {}, [] {}, st};
       }},
#ifdef CG_HAVE_ONEDNN
      {"onednn_sgemm",
       [](const Shape& s, const OpKey& key, const DeviceInfo& device, int threads) -> StatusOr<Contender> {
         auto ops = PerCallOperands(s, device);
         const bool nt = key.trans_b;
         return Contender{"dnnl_sgemm",
                          [ops, s, nt](size_t) {
                            auto& x = ops->Next();
                            dnnl_sgemm('N', nt ? 'T' : 'N', s.m, s.n, s.k, 1.0f, x.a.data(), s.k, x.b.data(),
                                       nt ? s.k : s.n, 0.0f, x.c.data(), s.n);
                            return Status::Ok();
                          },
                          [threads] { omp_set_num_threads(threads); }, [] {}, ops};
       }},
      // The matmul primitive with its weights reordered once per copy, as a serving
      // stack runs it.
      {"onednn_matmul",
       [](const Shape& s, const OpKey& key, const DeviceInfo& device, int threads) -> StatusOr<Contender> {
         using dnnl::memory;
         omp_set_num_threads(threads);
         struct State {
           dnnl::engine eng{dnnl::engine::kind::cpu, 0};
           dnnl::stream strm{eng};
           memory::desc a_md, c_md;
           dnnl::matmul mm;
           bench::RotatedOperands ops;
           std::vector<memory> weights;
         };
         const memory::desc a_md({s.m, s.k}, memory::data_type::f32, memory::format_tag::ab);
         const memory::desc b_user({s.k, s.n}, memory::data_type::f32,
                                   key.trans_b ? memory::format_tag::ba : memory::format_tag::ab);
         const memory::desc b_any({s.k, s.n}, memory::data_type::f32, memory::format_tag::any);
         const memory::desc c_md({s.m, s.n}, memory::data_type::f32, memory::format_tag::ab);
         auto st = std::make_shared<State>(State{.a_md = a_md, .c_md = c_md,
                                                 .ops = bench::RotatedOperands(s.m, s.n, s.k, CoverBytes(device))});
         const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), st->eng);
         st->mm = dnnl::matmul(pd);
         for (auto& x : st->ops.sets) {
           memory user(b_user, st->eng, x.b.data());
           memory packed(pd.weights_desc(), st->eng);
           dnnl::reorder(user, packed).execute(st->strm, user, packed);
           st->weights.push_back(packed);
         }
         st->strm.wait();
         for (auto& x : st->ops.sets) LineAlignedFloats().swap(x.b);
         return Contender{fmt::format("weights {}", pd.weights_desc() == b_user ? "as given" : "reordered once"),
                          [st](size_t i) {
                            auto& x = st->ops.sets[i % st->ops.sets.size()];
                            memory a(st->a_md, st->eng, x.a.data()), c(st->c_md, st->eng, x.c.data());
                            st->mm.execute(st->strm, {{DNNL_ARG_SRC, a},
                                                      {DNNL_ARG_WEIGHTS, st->weights[i % st->weights.size()]},
                                                      {DNNL_ARG_DST, c}});
                            st->strm.wait();
                            return Status::Ok();
                          },
                          [threads] { omp_set_num_threads(threads); }, [] {}, st};
       }},
#endif
#ifdef CG_HAVE_OPENBLAS
      {"openblas",
       [](const Shape& s, const OpKey& key, const DeviceInfo& device, int threads) -> StatusOr<Contender> {
         auto ops = PerCallOperands(s, device);
         const bool nt = key.trans_b;
         return Contender{openblas_get_corename(),
                          [ops, s, nt](size_t) {
                            auto& x = ops->Next();
                            cblas_sgemm(CblasRowMajor, CblasNoTrans, nt ? CblasTrans : CblasNoTrans, s.m, s.n, s.k,
                                        1.0f, x.a.data(), s.k, x.b.data(), nt ? s.k : s.n, 0.0f, x.c.data(), s.n);
                            return Status::Ok();
                          },
                          [threads] { openblas_set_num_threads(threads); },
                          [] { openblas_set_num_threads(1); },  // as the runtime's OpenBLAS variant expects it
                          ops};
       }},
#endif
  };
  return rows;
}

const ContenderMaker* RowMaker(std::string_view name) {
  for (const auto& [n, make] : Rows())
    if (n == name) return &make;
  static std::vector<ContenderMaker> schedule_rows;
  if (schedule_rows.size() < g_schedules.size())
    for (size_t i = schedule_rows.size(); i < g_schedules.size(); ++i) schedule_rows.push_back(ScheduleRow(i));
  for (size_t i = 0; i < g_schedules.size(); ++i)
    if (name == fmt::format("schedule{}", i + 1)) return &schedule_rows[i];
  return nullptr;
}

// A row: one contender timed by Google Benchmark (repetitions interleave rows).
void TimeRow(benchmark::State& st, const Shape& s, const OpKey& key, const DeviceInfo& device, int threads,
             const ContenderMaker& make) {
  auto c = make(s, key, device, threads);
  if (!c.ok()) return st.SkipWithError(c.status().ToString().c_str());
  st.SetLabel(c->label);
  c->enter();
  size_t i = 0;
  for (auto _ : st) {
    Status ok = c->call(i++);
    if (!ok.ok()) {
      st.SkipWithError(ok.ToString().c_str());
      break;
    }
  }
  c->leave();
  SetCounters(st, s);
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

// 512 MiB, 64-byte aligned, larger than any last-level cache here.
std::span<const float> ReadBuffer() {
  static float* data = [] {
    auto* p = static_cast<float*>(std::aligned_alloc(64, size_t(512) << 20));
    std::fill(p, p + (size_t(512) << 18), 1.0f);
    return p;
  }();
  return {data, size_t(512) << 18};
}

// Reads the buffer once, split in equal shares between `threads` threads; returns
// the bytes read.
double ReadShares(int threads) {
  static float (*const sum)(const float*, size_t) = (HostCpuDevice().isa & kIsaAvx512) ? SumAvx512 : SumAvx2;
  const std::span<const float> buf = ReadBuffer();
  const size_t share = buf.size() / size_t(threads) / 64 * 64;
  std::vector<float> sink(static_cast<size_t>(threads), 0.0f);
  OnThreads(threads, [&](int t) { sink[size_t(t)] += sum(buf.data() + share * size_t(t), share); });
  benchmark::DoNotOptimize(sink.data());
  return double(share * size_t(threads)) * 4;
}

constexpr int64_t kPeakSteps = 1 << 20;

// bench::FmaChains(kPeakSteps) on each of `threads` threads at once.
void FmaOnThreads(int threads) {
  std::vector<float> sink(static_cast<size_t>(threads), 0.0f);
  OnThreads(threads, [&](int t) { sink[size_t(t)] += bench::FmaChains(kPeakSteps); });
  benchmark::DoNotOptimize(sink.data());
}

void BM_read_bandwidth(benchmark::State& st) {
  double bytes = 0;
  for (auto _ : st) bytes = ReadShares(int(st.range(0)));
  st.counters["GBps"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_fma_peak(benchmark::State& st) {
  const int threads = int(st.range(0));
  for (auto _ : st) FmaOnThreads(threads);
  st.counters["GFLOPS"] = benchmark::Counter(bench::FmaChainsFlops(kPeakSteps) * threads * 1e-9,
                                             benchmark::Counter::kIsIterationInvariantRate);
}

// --paired: the rows of one shape built once and timed in alternation, so that a
// host whose speed drifts over minutes slows every row alike. Per round, in a fresh
// random order, each row runs one untimed call (its threads wake) and then calls for
// at least g_window_s; the row's time in that round is their mean.
std::vector<std::string> g_paired_rows = {"default_packed", "tuned_packed", "onednn_matmul", "openblas"};
int g_rounds = 15;
double g_window_s = 0.02;
std::vector<std::string> g_paired_slower;  // verdict lines: tuned slower than default beyond noise
std::vector<std::string> g_paired_busy;    // verdict lines: not judged, too few rounds on a quiet host
int g_paired_compared = 0, g_paired_same = 0;
// A round that lost more than this share of its time to other work on the host
// (CpuWaitMeter, as the tuner's --max-cpu-wait) is left out of the verdict.
double g_max_cpu_wait = 0.10;

double Quantile(std::vector<double> v, double f) {
  std::sort(v.begin(), v.end());
  return tuner::Quantile(v, f);
}

// The machine's bounds as paired rows, timed in the same rounds as the shape's rows:
// for decode sizes (m <= 16, where reading the weights bounds the small-m kernels) the
// read of BM_read_bandwidth, for large shapes (m, n, k >= 1000) the
// register FMAs of BM_fma_peak. Their counters are rates: read_bandwidth_GBps and
// fma_peak_GFLOPS, medians over the rounds.
struct BoundRow {
  const char* name;
  const char* counter;
  double work;  // bytes or floating-point operations per call
  std::function<void()> call;
};

std::vector<BoundRow> BoundRows(const Shape& s, int threads) {
  std::vector<BoundRow> rows;
  if (s.m <= 16 && (HostCpuDevice().isa & kIsaAvx2))
    rows.push_back({"read_bandwidth", "read_bandwidth_GBps", double(ReadBuffer().size() / size_t(threads) / 64 * 64) * 4 * threads,
                    [threads] { (void)ReadShares(threads); }});
  if (std::min({s.m, s.n, s.k}) >= 1000 && (HostCpuDevice().isa & kIsaAvx2))
    rows.push_back({"fma_peak", "fma_peak_GFLOPS", bench::FmaChainsFlops(kPeakSteps) * threads, [threads] { FmaOnThreads(threads); }});
  return rows;
}

void TimePaired(benchmark::State& st, const Shape& s, const OpKey& key, const DeviceInfo& device, int threads,
                const std::string& name) {
  std::vector<std::pair<std::string, Contender>> rows;
  for (const auto& row : g_paired_rows) {
    auto c = (*RowMaker(row))(s, key, device, threads);
    if (c.ok()) rows.emplace_back(row, std::move(*c));
  }
  const size_t shape_rows = rows.size();
  std::vector<BoundRow> bounds = BoundRows(s, threads);
  for (const auto& b : bounds)
    rows.emplace_back(b.name, Contender{b.name, [&b](size_t) { b.call(); return Status::Ok(); }});
  if (rows.empty()) return st.SkipWithError("no row runs here");
  std::vector<std::vector<double>> secs(rows.size());
  std::vector<size_t> next_call(rows.size(), 0);
  std::mt19937 rng(1);
  std::vector<size_t> order(rows.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::vector<double> round_wait;  // each round's cpu_wait (-1: not measured)
  for (auto _ : st) {
    for (int round = 0; round < g_rounds; ++round) {
      const tuner::CpuWaitMeter window;
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t j : order) {
        Contender& c = rows[j].second;
        size_t& i = next_call[j];  // the row's operands keep rotating across rounds
        c.enter();
        Status ok = c.call(i++);
        int64_t calls = 0;
        const auto t0 = std::chrono::steady_clock::now();
        double elapsed = 0;
        while (ok.ok() && (calls == 0 || elapsed < g_window_s)) {
          ok = c.call(i++);
          ++calls;
          elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        c.leave();
        if (!ok.ok()) return st.SkipWithError((rows[j].first + ": " + ok.ToString()).c_str());
        secs[j].push_back(elapsed / double(calls));
      }
      round_wait.push_back(window.Share());
    }
  }
  st.counters["cpu_wait"] = Quantile(round_wait, 0.5);
  st.counters["busy_rounds"] = double(
      std::count_if(round_wait.begin(), round_wait.end(), [](double w) { return bench::RoundBusy(w, g_max_cpu_wait); }));
  for (size_t j = shape_rows; j < rows.size(); ++j) {
    const BoundRow& b = bounds[j - shape_rows];
    st.counters[b.counter] = b.work * 1e-9 / Quantile(secs[j], 0.5);
  }
  rows.resize(shape_rows);
  secs.resize(shape_rows);
  std::string label;
  for (size_t j = 0; j < rows.size(); ++j) {
    const double med = Quantile(secs[j], 0.5);
    st.counters[rows[j].first + "_us"] = med * 1e6;
    st.counters[rows[j].first + "_spread"] = 0.5 * (Quantile(secs[j], 0.75) - Quantile(secs[j], 0.25)) / med;
    label += fmt::format("{}{}={}", label.empty() ? "" : "; ", rows[j].first, rows[j].second.label);
  }
  st.SetLabel(label);
  // The verdict of a tuned row against its default (JudgePaired, paired_verdict.h).
  auto ran = [](const Contender& c) { return c.label.starts_with("miss: ") ? c.label.substr(6) : c.label; };
  for (const auto& [tuned, def] : {std::pair<std::string, std::string>{"tuned_packed", "default_packed"}, {"tuned", "default"}}) {
    auto find = [&](const std::string& n) {
      for (size_t j = 0; j < rows.size(); ++j)
        if (rows[j].first == n) return int(j);
      return -1;
    };
    const int t = find(tuned), d = find(def);
    if (t < 0 || d < 0) continue;
    if (ran(rows[size_t(t)].second) == ran(rows[size_t(d)].second)) {
      ++g_paired_same;
      continue;
    }
    const bench::PairedVerdict v = bench::JudgePaired(secs[size_t(t)], secs[size_t(d)], round_wait, g_max_cpu_wait);
    if (!v.judged) {
      g_paired_busy.push_back(fmt::format("NOT JUDGED (busy host): {} {}: {} of {} rounds lost more than {:.0f}% of "
                                          "their time to other work",
                                          name, tuned, round_wait.size() - v.quiet_rounds, round_wait.size(),
                                          100 * g_max_cpu_wait));
      continue;
    }
    ++g_paired_compared;
    if (v.slower)
      g_paired_slower.push_back(fmt::format("SLOWER THAN DEFAULT: {} {}: {:.3f}x its time (+-{:.3f}), {} rounds",
                                            name, tuned, v.median, v.spread, v.quiet_rounds));
  }
}

void RegisterShape(const Shape& s, bool nt, int threads, bool paired) {
  const std::string suffix = fmt::format("{}/{}/m={}/n={}/k={}/threads:{}", s.group, nt ? "nt" : "nn", s.m, s.n, s.k, threads);
  const OpKey key = OpKey::Gemm(s.m, s.n, s.k, false, nt);
  DeviceInfo device = HostCpuDevice(threads);
  if (g_avx2_only) device.isa &= ~uint32_t{kIsaAvx512};
  if (paired) {
    benchmark::RegisterBenchmark(("paired/" + suffix).c_str(), [s, key, device, threads, suffix](benchmark::State& st) {
      TimePaired(st, s, key, device, threads, suffix);
    })->Iterations(1)->UseRealTime();
    return;
  }
  for (const auto& [row, make] : Rows()) {
    if (row == "packed" && s.m > 16) continue;
    if (row == "gemm_packed") continue;  // --paired_rows only
    if (row == "gemv" && !FirstVariant("_gemv_", key, device)) continue;
    if (row == "gemv_packed" && !FirstVariant("_gemv_packed_", ConstantWeights(key), device)) continue;
    if (row.starts_with("tuned")) {  // only where the bundles hold the key
      OpKey k = key;
      k.constant_weights = row == "tuned_packed";
      if (!BundleHits(threads, k)) continue;
    }
    benchmark::RegisterBenchmark((row + "/" + suffix).c_str(), [s, key, device, threads, &make](benchmark::State& st) {
      TimeRow(st, s, key, device, threads, make);
    })->UseRealTime();
  }
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

void RegisterAll(bool paired) {
  if (HostCpuDevice().isa & kIsaAvx2) {
    benchmark::RegisterBenchmark("BM_read_bandwidth", BM_read_bandwidth)->Arg(1)->Arg(2)->UseRealTime();
    benchmark::RegisterBenchmark("BM_fma_peak", BM_fma_peak)->Arg(1)->Arg(2)->UseRealTime();
  }
  for (const Shape& s : Shapes())
    for (bool nt : {false, true})
      for (int threads : {1, 2}) RegisterShape(s, nt, threads, paired);
}

}  // namespace
}  // namespace cliffguard

int main(int argc, char** argv) {
  cliffguard::bench::ReexecWithLibraryEnvironment(argv);
  cliffguard::SetLogLevel(cliffguard::LogLevel::kError);
  std::vector<char*> rest;
  bool json = false, paired = false, print_workload = false;
  for (int i = 0; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--benchmark_format=json") json = true;
    if (arg == "--print_workload") {
      print_workload = true;
      continue;
    }
    if (cliffguard::bench::ParseBundleFlag(argv[i], cliffguard::g_bundles)) continue;
    cliffguard::Shape s{"custom", 0, 0, 0};
    if (const int got = cliffguard::bench::ParseShapeFlag(argv[i], s.m, s.n, s.k)) {
      if (got < 0) return 2;
      cliffguard::g_shapes.push_back(s);
      continue;
    }
    if (arg == "--paired") {
      paired = true;
    } else if (arg.starts_with("--paired_rounds=")) {
      cliffguard::g_rounds = std::atoi(argv[i] + 16);
      if (cliffguard::g_rounds < 1) return std::fprintf(stderr, "--paired_rounds=%s: must be at least 1\n", argv[i] + 16), 2;
    } else if (arg.starts_with("--max_cpu_wait=")) {
      char* end = nullptr;
      cliffguard::g_max_cpu_wait = std::strtod(argv[i] + 15, &end);
      if (end == argv[i] + 15 || *end != '\0' || !(cliffguard::g_max_cpu_wait >= 0 && cliffguard::g_max_cpu_wait <= 1))
        return std::fprintf(stderr, "--max_cpu_wait=%s: must be a number in [0, 1]\n", argv[i] + 15), 2;
    } else if (arg.starts_with("--paired_window_ms=")) {
      cliffguard::g_window_s = std::atof(argv[i] + 19) * 1e-3;
      if (!(cliffguard::g_window_s > 0))
        return std::fprintf(stderr, "--paired_window_ms=%s: must be a positive number\n", argv[i] + 19), 2;
    } else if (arg == "--warm") {
      cliffguard::g_warm = true;
    } else if (arg == "--per_call_schedules") {
      cliffguard::g_per_call_schedules = true;
    } else if (arg.starts_with("--isa=")) {
      if (arg != "--isa=avx2") return std::fprintf(stderr, "%s: the one value is avx2\n", argv[i]), 2;
      cliffguard::g_avx2_only = true;
    } else if (arg.starts_with("--schedule=")) {
      std::vector<std::string> words;
      for (std::string_view rest = arg.substr(11); !rest.empty();) {
        const size_t sp = rest.find(' ');
        if (sp != 0) words.emplace_back(rest.substr(0, sp));
        rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
      }
      if (words.empty()) return std::fprintf(stderr, "--schedule=: names no kernel variant\n"), 2;
      auto& [variant, named] = cliffguard::g_schedules.emplace_back(words[0], std::vector<std::pair<std::string, int64_t>>{});
      if (!cliffguard::FindKernelVariant(variant))
        return std::fprintf(stderr, "--schedule: no kernel variant '%s'\n", variant.c_str()), 2;
      for (size_t w = 1; w < words.size(); ++w) {
        const size_t eq = words[w].find('=');
        char* end = nullptr;
        const long long v = eq == std::string::npos ? 0 : std::strtoll(words[w].c_str() + eq + 1, &end, 10);
        if (eq == std::string::npos || eq == 0 || !end || *end != '\0' || end == words[w].c_str() + eq + 1)
          return std::fprintf(stderr, "--schedule: '%s' is not NAME=INTEGER\n", words[w].c_str()), 2;
        named.emplace_back(words[w].substr(0, eq), v);
      }
    } else if (arg.starts_with("--paired_rows=")) {
      cliffguard::g_paired_rows.clear();
      cliffguard::bench::SplitInto(argv[i] + 14, cliffguard::g_paired_rows);
    } else {
      rest.push_back(argv[i]);
    }
  }
  for (const auto& r : cliffguard::g_paired_rows)
    if (!cliffguard::RowMaker(r)) return std::fprintf(stderr, "--paired_rows: unknown row '%s'\n", r.c_str()), 2;
  if (print_workload) {  // the shapes as a tuner workload (constant weights)
    for (const auto& s : cliffguard::Shapes())
      for (bool nt : {false, true}) {
        cliffguard::OpKey key = cliffguard::OpKey::Gemm(s.m, s.n, s.k, false, nt);
        key.constant_weights = true;
        std::printf("%s\n", key.ToString().c_str());
      }
    return 0;
  }
  cliffguard::bench::AddEnvironmentBundles(cliffguard::g_bundles);
  int rc = static_cast<int>(rest.size());
  benchmark::Initialize(&rc, rest.data());
#ifdef CG_HAVE_OPENBLAS
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
#endif
  const cliffguard::DeviceInfo host = cliffguard::HostCpuDevice();
  benchmark::AddCustomContext("cliffguard_device", host.fingerprint + " " + host.name);
  benchmark::AddCustomContext("operands", cliffguard::g_warm ? "warm" : "rotated");
  cliffguard::RegisterAll(paired);
  std::unique_ptr<benchmark::BenchmarkReporter> display;
  if (json)
    display = std::make_unique<benchmark::JSONReporter>();
  else
    display = std::make_unique<benchmark::ConsoleReporter>();
  cliffguard::VerdictReporter reporter(std::move(display));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  // With bundles: fail loudly when a shipped entry serves slower than its default.
  if (cliffguard::g_bundles.empty()) return 0;
  if (!paired) return reporter.Verdict() > 0 ? 1 : 0;
  for (const auto& line : cliffguard::g_paired_slower) std::fprintf(stderr, "%s\n", line.c_str());
  for (const auto& line : cliffguard::g_paired_busy) std::fprintf(stderr, "%s\n", line.c_str());
  std::fprintf(stderr,
               "verdict: %d tuned rows with a schedule of their own compared with their default in paired rounds, %zu "
               "slower beyond noise (%d rows run the default schedule itself; %zu not judged: busy host, rerun on a "
               "quiet one)\n",
               cliffguard::g_paired_compared, cliffguard::g_paired_slower.size(), cliffguard::g_paired_same,
               cliffguard::g_paired_busy.size());
  return cliffguard::g_paired_slower.empty() && cliffguard::g_paired_busy.empty() ? 0 : 1;
}
