// Search strategies on fake kernel tables with a synthetic "measurement".
#include "cliffguard/tuner/strategy.h"
#include "fake_gemm_params.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <set>

#include "cliffguard/tuner/cost_model.h"

namespace cliffguard::tuner {
namespace {

using namespace cliffguard::tuner::testing;  // kParams and its value lists
// A small table for exhaustion tests: 4 * 3 * 2 * 3 = 72 points per variant.
constexpr int32_t kMcSmall[] = {16, 32, 48, 64};
constexpr int32_t kKcSmall[] = {32, 64, 128};
constexpr int32_t kNcSmall[] = {64, 128};
const ParamSpec kParamsSmall[] = {{"mc", kMcSmall, 32, ""}, {"kc", kKcSmall, 64, ""}, {"nc", kNcSmall, 64, ""},
                                  {"threads", kThreads, 1, ""}};

// threads <= device threads; packed B block kc x nc x 4 bytes <= 4 MiB.
Status Check(const KernelVariant& v, const OpKey&, const ParamValues& p, const DeviceInfo& d) {
  const int ti = v.ParamIndex("threads");
  if (p[ti] > d.threads) return InvalidArgument("threads");
  if (int64_t{p[1]} * p[2] * 4 > (4 << 20)) return InvalidArgument("B block");
  return Status::Ok();
}

const KernelVariant kBig[] = {
    {"fake_gemm_8x16", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kParams, nullptr, Check, nullptr, {.gemm = nullptr}, {.gemm = {8, 16}}},
    {"fake_gemm_4x32", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kParams, nullptr, Check, nullptr, {.gemm = nullptr}, {.gemm = {4, 32}}},
};
const KernelVariant kSmall[] = {
    {"fake_small_8x16", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kParamsSmall, nullptr, Check, nullptr, {.gemm = nullptr}, {.gemm = {8, 16}}},
    {"fake_small_4x32", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kParamsSmall, nullptr, Check, nullptr, {.gemm = nullptr}, {.gemm = {4, 32}}},
};

DeviceInfo TestDevice() {
  DeviceInfo d;
  d.isa = kIsaScalar;
  d.threads = 2;
  d.l1d_bytes = 48 << 10;
  d.l2_bytes = 1 << 20;
  d.l3_bytes = 32 << 20;
  d.fingerprint = "cpu-test";
  return d;
}

SearchSpace MakeSpace(const KernelVariant (&table)[2], const OpKey& key = OpKey::Gemm(256, 768, 768)) {
  const KernelVariant* vs[] = {&table[0], &table[1]};
  auto s = SearchSpace::Create(key, TestDevice(), vs);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

int IndexOf(std::span<const int32_t> values, int32_t v) {
  return static_cast<int>(std::find(values.begin(), values.end(), v) - values.begin());
}

// Noise-free synthetic time (us) of a schedule on the big table: cache, threading
// and unrolling effects with interactions.
double TrueTimeUs(const Schedule& s) {
  const auto& p = s.params;
  auto sq = [](double x) { return x * x; };
  const int mc = IndexOf(kMc, p[0]), kc = IndexOf(kKc, p[1]), nc = IndexOf(kNc, p[2]);
  double t = 50.0;
  t *= 1 + 0.08 * sq(mc - 5);
  t *= 1 + 0.3 * std::max(0.0, std::log2(double(p[1]) * p[2] * 4 / (1 << 20))) + 0.04 * sq(kc - 4);
  t *= 1 + 0.03 * sq(nc - 4);
  if (p[4] == 2) t *= p[3] == 1 ? 0.52 : p[3] == 0 ? 0.6 : 0.75;
  t *= p[5] == 1 ? 1.15 : p[5] == 2 ? 1.05 : p[5] == 4 ? 1.0 : 1.03;
  t *= p[6] ? 0.96 : 1.0;
  t *= p[7] ? (p[1] >= 256 ? 0.97 : 1.02) : 1.0;
  t *= s.variant == &kBig[1] ? 1.06 : 1.0;
  return t;
}

std::vector<MeasureResult> Measure(const OpKey& key, const std::vector<Schedule>& batch, std::mt19937_64& rng,
                                   double noise = 0.02) {
  std::normal_distribution<double> n01(0.0, 1.0);
  std::vector<MeasureResult> out;
  for (const Schedule& s : batch) {
    MeasureResult r;
    r.key = key;
    r.schedule = s;
    r.ok = true;
    r.median_us = TrueTimeUs(s) * (1 + noise * n01(rng));
    out.push_back(r);
  }
  return out;
}

StrategyOptions Options(uint64_t seed, CostModel* model) {
  StrategyOptions o;
  o.seed = seed;
  o.model = model;
  return o;
}

class StrategyTest : public ::testing::TestWithParam<std::string_view> {};

TEST_P(StrategyTest, NeverRepeatsNeverInvalidAndExhaustsTheSpace) {
  const SearchSpace space = MakeSpace(kSmall, OpKey::Gemm(64, 128, 128));
  uint64_t n_valid = 0;
  for (uint64_t id = 0; id < space.size(); ++id) n_valid += space.IsValid(space.FromId(id));
  CostModel model;
  auto st = MakeStrategy(GetParam(), space, Options(5, &model));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ((*st)->name(), GetParam());
  std::set<std::string> seen;
  std::mt19937_64 rng(1);
  for (int round = 0; round < 100; ++round) {
    const auto batch = (*st)->NextBatch(10);
    if (batch.empty()) break;
    EXPECT_LE(batch.size(), 10u);
    for (const Schedule& s : batch) {
      EXPECT_TRUE(CheckSchedule(s, space.key(), space.device()).ok()) << s.ToString();
      EXPECT_TRUE(seen.insert(s.ToString()).second) << "repeated " << s.ToString();
    }
    // Small-table times: any positive function will do.
    std::vector<MeasureResult> results;
    for (const Schedule& s : batch) results.push_back({space.key(), s, true, 10.0 + s.params[0] * 0.1 + s.params[1] * 0.01, ""});
    (*st)->Update(results);
  }
  EXPECT_EQ(seen.size(), n_valid);
  EXPECT_TRUE((*st)->NextBatch(10).empty());
}

TEST_P(StrategyTest, ResumeSkipsEarlierMeasurements) {
  const SearchSpace space = MakeSpace(kSmall, OpKey::Gemm(64, 128, 128));
  // An earlier run measured every fourth valid point (one of them failed).
  std::vector<MeasureResult> earlier;
  std::set<std::string> earlier_names;
  int i = 0;
  for (uint64_t id = 0; id < space.size(); ++id) {
    const Knobs k = space.FromId(id);
    if (!space.IsValid(k) || i++ % 4) continue;
    earlier.push_back({space.key(), space.ToSchedule(k), earlier.size() != 3, 20.0 + earlier.size(), ""});
    earlier_names.insert(earlier.back().schedule.ToString());
  }
  CostModel model;
  auto st = MakeStrategy(GetParam(), space, Options(9, &model));
  ASSERT_TRUE(st.ok());
  (*st)->Update(earlier);
  size_t proposed = 0;
  for (int round = 0; round < 100; ++round) {
    const auto batch = (*st)->NextBatch(8);
    if (batch.empty()) break;
    for (const Schedule& s : batch) EXPECT_EQ(earlier_names.count(s.ToString()), 0u) << s.ToString();
    proposed += batch.size();
    std::vector<MeasureResult> results;
    for (const Schedule& s : batch) results.push_back({space.key(), s, true, 15.0 + s.params[2] * 0.1, ""});
    (*st)->Update(results);
  }
  EXPECT_EQ(proposed + earlier.size(), static_cast<size_t>(i));
}

TEST_P(StrategyTest, SameSeedSameProposals) {
  const SearchSpace space = MakeSpace(kBig);
  CostModel model_a, model_b;
  auto a = MakeStrategy(GetParam(), space, Options(3, &model_a));
  auto b = MakeStrategy(GetParam(), space, Options(3, &model_b));
  ASSERT_TRUE(a.ok() && b.ok());
  std::mt19937_64 rng_a(4), rng_b(4);
  for (int round = 0; round < 3; ++round) {
    const auto ba = (*a)->NextBatch(16), bb = (*b)->NextBatch(16);
    ASSERT_EQ(ba.size(), 16u);
    EXPECT_EQ(ba, bb) << "round " << round;
    (*a)->Update(Measure(space.key(), ba, rng_a));
    (*b)->Update(Measure(space.key(), bb, rng_b));
  }
}

INSTANTIATE_TEST_SUITE_P(All, StrategyTest, ::testing::ValuesIn(StrategyNames()),
                         [](const auto& info) { return std::string(info.param); });

TEST(StrategyFactoryTest, NamesAndErrors) {
  ASSERT_EQ(StrategyNames().size(), 4u);
  EXPECT_EQ(StrategyNames()[0], "xgb");
  const SearchSpace space = MakeSpace(kSmall);
  auto unknown = MakeStrategy("annealing", space, {});
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("annealing"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("xgb, random, grid, ga"), std::string::npos);
  EXPECT_EQ(MakeStrategy("xgb", space, {}).status().code(), StatusCode::kInvalidArgument);
}

TEST(StrategyXgbTest, WarmStartsFromHistoryOfOtherKeys) {
  const SearchSpace space = MakeSpace(kBig);
  const OpKey other = OpKey::Gemm(128, 768, 768);
  std::mt19937_64 rng(2);
  std::vector<Schedule> sampled;
  for (int i = 0; i < 200; ++i) sampled.push_back(space.ToSchedule(*space.SampleValid(rng)));
  const auto history = Measure(other, sampled, rng);
  CostModel model;
  StrategyOptions o = Options(1, &model);
  o.history = history;
  auto st = MakeStrategy("xgb", space, o);
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(model.trained());
  EXPECT_EQ(model.num_samples(), 200u);
  // The first batch is model-guided: clearly better than random on average.
  const auto batch = (*st)->NextBatch(32);
  double guided = 0, random = 0;
  for (const Schedule& s : batch) guided += TrueTimeUs(s) / batch.size();
  for (const Schedule& s : sampled) random += TrueTimeUs(s) / sampled.size();
  EXPECT_LT(guided, 0.8 * random);
}

// Trials until the best measured schedule (by true time) is within 95% of the
// optimum's throughput; budget + 1 when never.
int TrialsTo95(std::string_view name, uint64_t seed, const SearchSpace& space, double best_time, int budget) {
  CostModel model;
  auto st = MakeStrategy(name, space, Options(seed, &model));
  EXPECT_TRUE(st.ok());
  std::mt19937_64 rng(seed * 7919);
  int trials = 0;
  while (trials < budget) {
    const auto batch = (*st)->NextBatch(32);
    if (batch.empty()) break;
    for (const Schedule& s : batch) {
      ++trials;
      if (best_time / TrueTimeUs(s) >= 0.95) return trials;
    }
    (*st)->Update(Measure(space.key(), batch, rng));
  }
  return budget + 1;
}

TEST(StrategyXgbTest, ReachesNearOptimumInFewerTrialsThanRandom) {
  const SearchSpace space = MakeSpace(kBig);
  double best = 1e30;
  uint64_t valid = 0, near = 0;
  for (uint64_t id = 0; id < space.size(); ++id) {
    const Knobs k = space.FromId(id);
    if (space.IsValid(k)) ++valid, best = std::min(best, TrueTimeUs(space.ToSchedule(k)));
  }
  for (uint64_t id = 0; id < space.size(); ++id) {
    const Knobs k = space.FromId(id);
    near += space.IsValid(k) && best / TrueTimeUs(space.ToSchedule(k)) >= 0.95;
  }
  const int budget = 800;
  std::vector<int> xgb, rnd;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    xgb.push_back(TrialsTo95("xgb", seed, space, best, budget));
    rnd.push_back(TrialsTo95("random", seed, space, best, budget));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::sort(xgb.begin(), xgb.end());
  std::sort(rnd.begin(), rnd.end());
  std::printf("space %llu valid, %llu within 95%%; trials to 95%%: xgb %d %d %d %d %d | random %d %d %d %d %d (%.1f s)\n",
              static_cast<unsigned long long>(valid), static_cast<unsigned long long>(near), xgb[0], xgb[1], xgb[2],
              xgb[3], xgb[4], rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], secs);
  EXPECT_LE(xgb[2], budget);
  EXPECT_LT(xgb[2], rnd[2]);
}

}  // namespace
}  // namespace cliffguard::tuner
