// Explorer: simulated annealing over a synthetic score on a ~1.5e5-point fake GEMM space.
#include "cliffguard/tuner/explorer.h"
#include "fake_gemm_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <unordered_set>

namespace cliffguard::tuner {
namespace {

using namespace cliffguard::tuner::testing;  // kParams and its value lists

// threads <= device threads; packed B block kc x nc x 4 bytes <= 4 MiB.
Status Check(const KernelVariant&, const OpKey&, const ParamValues& p, const DeviceInfo& d) {
  if (p[4] > d.threads) return InvalidArgument("threads");
  if (int64_t{p[1]} * p[2] * 4 > (4 << 20)) return InvalidArgument("B block");
  return Status::Ok();
}

const KernelVariant kVariants[] = {
    {"fake_gemm_8x16", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kParams, nullptr, Check, nullptr, {.gemm = nullptr}, {.gemm = {8, 16}}},
    {"fake_gemm_4x32", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kParams, nullptr, Check, nullptr, {.gemm = nullptr}, {.gemm = {4, 32}}},
};

SearchSpace MakeSpace() {
  DeviceInfo d;
  d.isa = kIsaScalar;
  d.threads = 2;
  const KernelVariant* vs[] = {&kVariants[0], &kVariants[1]};
  auto s = SearchSpace::Create(OpKey::Gemm(256, 768, 768), d, vs);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// Synthetic score (higher is better) with interactions between knobs; unique optimum.
float Synthetic(const Knobs& k) {
  auto sq = [](double x) { return x * x; };
  double s = 100.0;
  s -= 3.0 * sq(k.idx[0] - 5) + 2.0 * sq(k.idx[1] - 4) + 1.5 * sq(k.idx[2] - 5 + (k.idx[1] > 4 ? 1 : 0));
  s -= (k.idx[3] == (k.idx[4] == 1 ? 1 : 0)) ? 0.0 : 4.0;  // par interacts with threads
  s -= 5.0 * (1 - k.idx[4]) + 2.0 * sq(k.idx[5] - 2) + 3.0 * (1 - k.idx[6]) + 1.0 * k.idx[7];
  s -= k.variant == 1 ? 6.0 : 0.0;
  return static_cast<float>(s);
}

void ScoreAll(std::span<const Knobs> p, std::span<float> s) {
  for (size_t i = 0; i < p.size(); ++i) s[i] = Synthetic(p[i]);
}

TEST(ExplorerTest, FindsOptimumOfSyntheticScoreWithinFewBatches) {
  const SearchSpace space = MakeSpace();
  ASSERT_GT(space.size(), 100000u);
  float optimum = -1e30f;
  for (uint64_t id = 0; id < space.size(); ++id) {
    const Knobs k = space.FromId(id);
    if (space.IsValid(k)) optimum = std::max(optimum, Synthetic(k));
  }
  Explorer ex(space, ScoreAll);
  std::unordered_set<uint64_t> visited;
  float best = -1e30f;
  int batches = 0;
  for (; batches < 4 && best < optimum - 0.01f * std::abs(optimum); ++batches) {
    for (const Knobs& k : ex.NextBatch(32, [&](uint64_t id) { return visited.count(id) != 0; })) {
      visited.insert(space.Id(k));
      best = std::max(best, Synthetic(k));
    }
  }
  EXPECT_GE(best, optimum - 0.01f * std::abs(optimum)) << "after " << batches << " batches";
  std::printf("optimum %.2f found %.2f after %d batch(es) of 32 (space %llu points)\n", optimum, best, batches,
              static_cast<unsigned long long>(space.size()));
}

TEST(ExplorerTest, BatchIsValidDistinctUnvisitedAndScoredOncePerStep) {
  const SearchSpace space = MakeSpace();
  int calls = 0;
  size_t max_batch = 0;
  ExplorerOptions opt;
  opt.n_chains = 64;
  opt.n_steps = 100;
  Explorer ex(space, [&](std::span<const Knobs> p, std::span<float> s) {
    ++calls;
    max_batch = std::max(max_batch, p.size());
    ScoreAll(p, s);
  }, opt);
  std::unordered_set<uint64_t> visited;
  for (int round = 0; round < 3; ++round) {
    calls = 0;
    const auto batch = ex.NextBatch(40, [&](uint64_t id) { return visited.count(id) != 0; });
    EXPECT_EQ(batch.size(), 40u);
    EXPECT_EQ(calls, ex.stats().steps + 1);  // chain init + one call per step
    EXPECT_EQ(max_batch, 64u);
    EXPECT_LE(ex.stats().steps, 100);
    std::unordered_set<uint64_t> ids;
    for (const Knobs& k : batch) {
      EXPECT_TRUE(CheckSchedule(space.ToSchedule(k), space.key(), space.device()).ok());
      EXPECT_TRUE(ids.insert(space.Id(k)).second) << "duplicate in batch";
      EXPECT_EQ(visited.count(space.Id(k)), 0u) << "visited point proposed";
    }
    visited.insert(ids.begin(), ids.end());
  }
}

TEST(ExplorerTest, SameSeedSameBatchesAndFlatScoresStillFill) {
  const SearchSpace space = MakeSpace();
  auto never = [](uint64_t) { return false; };
  Explorer a(space, ScoreAll), b(space, ScoreAll);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(a.NextBatch(16, never), b.NextBatch(16, never));
  Explorer flat(space, [](std::span<const Knobs>, std::span<float> s) { std::fill(s.begin(), s.end(), 0.0f); });
  const auto batch = flat.NextBatch(16, never);
  EXPECT_EQ(batch.size(), 16u);
  for (const Knobs& k : batch) EXPECT_TRUE(space.IsValid(k));
}

}  // namespace
}  // namespace cliffguard::tuner
