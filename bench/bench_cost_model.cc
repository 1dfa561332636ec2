// Cost of the tuner's model loop: XGBoost prediction per candidate in batches
// (target <= 5 us per candidate), training on 500 rows, and one simulated-annealing
// round (128 chains x 500 steps) scored by the model.
//
//   build-search/bench/bench_cost_model --benchmark_counters_tabular=true
//
// ns_per_candidate is CPU time per candidate in ns (tabular output prints 1.3ks for
// 1300 ns: the counter is an inverted rate).
// Rows are real feature rows (features.h) of GEMM schedules: the build's CPU kernel
// variants when they run on this host, else a built-in table with the same
// parameter lists, for BERT-base shapes; targets come from a synthetic timing model.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>

#include "cliffguard/tuner/cost_model.h"
#include "cliffguard/tuner/explorer.h"
#include "cliffguard/tuner/features.h"
#include "cliffguard/tuner/space.h"

namespace cliffguard::tuner {
namespace {

constexpr int32_t kMc[] = {16, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024};
constexpr int32_t kKc[] = {16, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024};
constexpr int32_t kNc[] = {32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096};
constexpr int32_t kPar[] = {0, 1, 2};
constexpr int32_t kThreads[] = {1, 2, 4, 8, 16, 32, 64};
constexpr int32_t kUnroll[] = {1, 2, 4, 8};
constexpr int32_t kPrefetch[] = {0, 2, 4, 8, 16};
constexpr int32_t kBool[] = {0, 1};
const ParamSpec kParams[] = {{"mc", kMc, 192, ""},          {"kc", kKc, 256, ""},       {"nc", kNc, 2048, ""},
                             {"par", kPar, 0, ""},          {"threads", kThreads, 1, ""},
                             {"unroll_k", kUnroll, 4, ""},  {"prefetch", kPrefetch, 8, ""},
                             {"pack_a", kBool, 1, ""},      {"pack_b", kBool, 1, ""}};
Status Check(const KernelVariant&, const OpKey&, const ParamValues& p, const DeviceInfo& d) {
  return p[4] <= d.threads ? Status::Ok() : InvalidArgument("threads");
}
const KernelVariant kFallback[] = {
    {"bench_gemm_16x32", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kParams, nullptr, Check, nullptr, {.gemm = nullptr}, {.gemm = {16, 32}}},
    {"bench_gemm_8x32", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kParams, nullptr, Check, nullptr, {.gemm = nullptr}, {.gemm = {8, 32}}},
};

const char* g_table = "built-in table";

SearchSpace MakeSpace(const OpKey& key) {
  const DeviceInfo host = HostCpuDevice(2);
  if (auto real = SearchSpace::Create(key, host); real.ok()) {
    g_table = "this build's kernel variants";
    return std::move(real).value();
  }
  DeviceInfo d = host;
  d.isa |= kIsaScalar;
  const KernelVariant* vs[] = {&kFallback[0], &kFallback[1]};
  return std::move(SearchSpace::Create(key, d, vs)).value();
}

// Synthetic time: roofline-ish with cache-fit, tiling and threading effects.
double SyntheticTimeUs(const float* f) {
  const auto& names = FeatureNames();
  auto at = [&](std::string_view n) { return f[std::find(names.begin(), names.end(), n) - names.begin()]; };
  double eff = 0.9;
  eff /= 1 + 0.5 * std::max(0.0f, at("ws_b_over_l2") - 1) + 0.3 * std::max(0.0f, at("ws_micro_over_l1") - 1);
  eff *= 1 - 0.5 * at("pad_work");
  eff *= 1 - 0.3 * at("par_imbalance");
  const double thr = std::max(1.0f, std::min(at("threads_eff"), at("par_items")));
  return std::exp2(at("log2_flops")) / (100e3 * eff * thr);
}

struct Data {
  std::vector<float> rows;  // n x NumFeatures
  std::vector<uint64_t> groups;
  std::vector<double> times;
};

Data MakeData(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const OpKey keys[] = {OpKey::Gemm(1, 768, 768), OpKey::Gemm(16, 3072, 768), OpKey::Gemm(64, 768, 3072),
                        OpKey::Gemm(128, 768, 768), OpKey::Gemm(384, 3072, 768)};
  Data d;
  const int nf = NumFeatures();
  d.rows.resize(n * nf);
  for (size_t i = 0; i < n; ++i) {
    const OpKey& key = keys[i % std::size(keys)];
    const SearchSpace space = MakeSpace(key);
    const Knobs k = *space.SampleValid(rng);
    ExtractFeatures(key, space.ToSchedule(k), space.device(), &d.rows[i * nf]);
    d.groups.push_back(key.Hash());
    d.times.push_back(SyntheticTimeUs(&d.rows[i * nf]));
  }
  return d;
}

CostModel& TrainedModel() {
  static CostModel* model = [] {
    auto* m = new CostModel();
    const Data d = MakeData(500, 1);
    for (size_t i = 0; i < d.times.size(); ++i)
      (void)m->AddSample(d.groups[i], i, std::span<const float>(&d.rows[i * NumFeatures()], NumFeatures()), d.times[i]);
    (void)m->Retrain();
    return m;
  }();
  return *model;
}

void BM_Predict(benchmark::State& state) {
  CostModel& model = TrainedModel();
  const size_t batch = static_cast<size_t>(state.range(0));
  const Data d = MakeData(batch, 2);
  std::vector<float> out(batch);
  for (auto _ : state) {
    if (!model.Predict(d.rows.data(), batch, NumFeatures(), out.data()).ok()) state.SkipWithError("predict failed");
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["ns_per_candidate"] =
      benchmark::Counter(static_cast<double>(batch) * state.iterations() * 1e-9, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetLabel(g_table);
}
BENCHMARK(BM_Predict)->Arg(1)->Arg(64)->Arg(512)->Arg(4096)->Unit(benchmark::kMicrosecond);

// Feature extraction plus prediction: what one annealing step pays per candidate.
void BM_FeaturesAndPredict(benchmark::State& state) {
  CostModel& model = TrainedModel();
  const size_t batch = static_cast<size_t>(state.range(0));
  const SearchSpace space = MakeSpace(OpKey::Gemm(128, 768, 768));
  std::mt19937_64 rng(3);
  std::vector<Schedule> sch;
  for (size_t i = 0; i < batch; ++i) sch.push_back(space.ToSchedule(*space.SampleValid(rng)));
  std::vector<float> rows(batch * NumFeatures()), out(batch);
  for (auto _ : state) {
    for (size_t i = 0; i < batch; ++i) ExtractFeatures(space.key(), sch[i], space.device(), &rows[i * NumFeatures()]);
    if (!model.Predict(rows.data(), batch, NumFeatures(), out.data()).ok()) state.SkipWithError("predict failed");
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["ns_per_candidate"] =
      benchmark::Counter(static_cast<double>(batch) * state.iterations() * 1e-9, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_FeaturesAndPredict)->Arg(128)->Arg(4096)->Unit(benchmark::kMicrosecond);

void BM_Train(benchmark::State& state) {
  const Data d = MakeData(static_cast<size_t>(state.range(0)), 4);
  CostModelOptions opt;
  opt.objective = state.range(1) ? "rank:pairwise" : "reg:squarederror";
  CostModel model = std::move(CostModel::Create(opt)).value();
  for (size_t i = 0; i < d.times.size(); ++i)
    (void)model.AddSample(d.groups[i], i, std::span<const float>(&d.rows[i * NumFeatures()], NumFeatures()), d.times[i]);
  for (auto _ : state)
    if (!model.Retrain().ok()) state.SkipWithError("train failed");
  state.SetLabel(opt.objective);
}
BENCHMARK(BM_Train)->Args({500, 1})->Args({500, 0})->Args({1000, 1})->Unit(benchmark::kMillisecond);

// One annealing round: 128 chains x 500 steps (early stop off unless range(0) == 1).
void BM_AnnealingRound(benchmark::State& state) {
  CostModel& model = TrainedModel();
  const SearchSpace space = MakeSpace(OpKey::Gemm(128, 768, 768));
  std::vector<float> rows;
  auto score = [&](std::span<const Knobs> p, std::span<float> s) {
    rows.resize(p.size() * NumFeatures());
    for (size_t i = 0; i < p.size(); ++i)
      ExtractFeatures(space.key(), space.ToSchedule(p[i]), space.device(), &rows[i * NumFeatures()]);
    (void)model.Predict(rows.data(), p.size(), NumFeatures(), s.data());
  };
  ExplorerOptions opt;
  opt.n_chains = 128;
  opt.n_steps = 500;
  if (state.range(0) == 0) opt.early_stop = 1 << 30;
  int steps = 0;
  for (auto _ : state) {
    Explorer ex(space, score, opt);
    benchmark::DoNotOptimize(ex.NextBatch(64, [](uint64_t) { return false; }));
    steps = ex.stats().steps;
  }
  state.counters["steps"] = steps;
  state.SetLabel(state.range(0) == 0 ? "full 500 steps" : "early stop after 50 idle steps");
}
BENCHMARK(BM_AnnealingRound)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace cliffguard::tuner

BENCHMARK_MAIN();
