// CostModel over XGBoost: learns a synthetic ranking with either objective,
// round-trips through Serialize/Deserialize, and reports errors as statuses.
#include "cliffguard/tuner/cost_model.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>

namespace cliffguard::tuner {
namespace {

constexpr int kF = 8;

// A smooth function with interactions; higher is better.
double Truth(const float* x) {
  return std::exp(-2.0 * (x[0] - 0.3) * (x[0] - 0.3)) * (1.0 + x[1] * x[2]) + 0.5 * std::sin(3.0 * x[3]) -
         0.3 * std::abs(x[4] - x[5]);
}

std::vector<float> RandomRows(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> rows(n * kF);
  for (float& v : rows) v = u(rng);
  return rows;
}

// Fraction of held-out pairs (with distinct truth) ordered like the truth.
double PairwiseAccuracy(const std::vector<float>& rows, const std::vector<float>& pred) {
  const size_t n = pred.size();
  size_t good = 0, total = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      const double ti = Truth(&rows[i * kF]), tj = Truth(&rows[j * kF]);
      if (std::abs(ti - tj) < 1e-6) continue;
      ++total;
      good += (ti > tj) == (pred[i] > pred[j]);
    }
  return static_cast<double>(good) / total;
}

class CostModelObjectiveTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CostModelObjectiveTest, LearnsSyntheticRankingThroughSamples) {
  CostModelOptions opt;
  opt.objective = GetParam();
  auto model = CostModel::Create(opt);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  // Four "keys" with different time scales: targets are normalised per key.
  const size_t n_train = 600;
  const auto train = RandomRows(n_train, 1);
  for (size_t i = 0; i < n_train; ++i) {
    const uint64_t group = i % 4;
    const double scale = 10.0 * (1 + group * 7);
    const double time_us = scale / (0.2 + (Truth(&train[i * kF]) + 1.5) / 4.0);
    ASSERT_TRUE(model->AddSample(group, i, std::span<const float>(&train[i * kF], kF), time_us).ok());
  }
  ASSERT_EQ(model->num_samples(), n_train);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(model->Retrain().ok());
  const double train_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("train_ms", std::to_string(train_ms));
  EXPECT_TRUE(model->trained());
  EXPECT_EQ(model->num_features(), kF);

  const size_t n_test = 300;
  const auto test = RandomRows(n_test, 2);
  auto pred = model->Predict(test.data(), n_test, kF);
  ASSERT_TRUE(pred.ok()) << pred.status().ToString();
  const double acc = PairwiseAccuracy(test, *pred);
  EXPECT_GT(acc, 0.8) << GetParam();
  std::printf("[ %s ] pairwise accuracy %.3f, train %.1f ms on %zu rows\n", GetParam(), acc, train_ms, n_train);
}

TEST_P(CostModelObjectiveTest, SerializeRoundTripGivesIdenticalPredictions) {
  CostModelOptions opt;
  opt.objective = GetParam();
  auto model = CostModel::Create(opt);
  ASSERT_TRUE(model.ok());
  const size_t n = 200;
  const auto rows = RandomRows(n, 3);
  std::vector<float> targets(n);
  for (size_t i = 0; i < n; ++i) targets[i] = static_cast<float>(Truth(&rows[i * kF]));
  ASSERT_TRUE(model->Train(rows.data(), n, kF, targets).ok());
  auto bytes = model->Serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_GT(bytes->size(), 100u);

  CostModel other;
  ASSERT_TRUE(other.Deserialize(*bytes).ok());
  EXPECT_EQ(other.num_features(), kF);
  const auto test = RandomRows(500, 4);
  auto a = model->Predict(test.data(), 500, kF);
  auto b = other.Predict(test.data(), 500, kF);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

INSTANTIATE_TEST_SUITE_P(Objectives, CostModelObjectiveTest, ::testing::Values("rank:pairwise", "reg:squarederror"),
                         [](const auto& info) { return std::string(info.param[0] == 'r' && info.param[1] == 'a' ? "Pairwise" : "Regression"); });

TEST(CostModelTest, UntrainedPredictsZeros) {
  CostModel model;
  EXPECT_FALSE(model.trained());
  const auto rows = RandomRows(10, 5);
  auto p = model.Predict(rows.data(), 10, kF);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, std::vector<float>(10, 0.0f));
  EXPECT_EQ(model.Serialize().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(model.Retrain().code(), StatusCode::kFailedPrecondition);
}

TEST(CostModelTest, ErrorsAreStatuses) {
  CostModelOptions bad;
  bad.objective = "binary:logistic";
  auto m = CostModel::Create(bad);
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("binary:logistic"), std::string::npos);
  CostModelOptions zero;
  zero.num_rounds = 0;
  EXPECT_EQ(CostModel::Create(zero).status().code(), StatusCode::kInvalidArgument);

  CostModel model;
  const auto rows = RandomRows(50, 6);
  std::vector<float> targets(50, 1.0f);
  EXPECT_EQ(model.Train(rows.data(), 50, kF, std::span<const float>(targets).first(10)).code(),
            StatusCode::kInvalidArgument);
  const uint32_t groups[] = {20, 20};
  EXPECT_EQ(model.Train(rows.data(), 50, kF, targets, groups).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(model.Train(rows.data(), 50, kF, targets).ok());
  float out[5];
  EXPECT_EQ(model.Predict(rows.data(), 5, kF - 1, out).code(), StatusCode::kInvalidArgument);

  const uint8_t junk[] = {'n', 'o', 't', ' ', 'a', ' ', 'm', 'o', 'd', 'e', 'l'};
  EXPECT_EQ(model.Deserialize(junk).code(), StatusCode::kDataLoss);
  EXPECT_TRUE(model.trained());  // the earlier booster is kept

  std::vector<float> row(kF, 0.5f), narrow(kF - 1, 0.5f);
  ASSERT_TRUE(model.AddSample(1, 1, row, 10.0).ok());
  EXPECT_EQ(model.AddSample(1, 2, narrow, 10.0).code(), StatusCode::kInvalidArgument);
}

TEST(CostModelTest, SamplesDedupeAndFailuresScoreLowest) {
  CostModel model;
  std::vector<float> fast(kF, 0.0f), slow(kF, 1.0f), broken(kF, -1.0f);
  for (int rep = 0; rep < 3; ++rep) {  // repeated ids replace, not add
    ASSERT_TRUE(model.AddSample(7, 1, fast, 5.0).ok());
    ASSERT_TRUE(model.AddSample(7, 2, slow, 50.0).ok());
    ASSERT_TRUE(model.AddSample(7, 3, broken, 0.0).ok());
  }
  EXPECT_EQ(model.num_samples(), 3u);
  EXPECT_TRUE(model.HasSample(7, 2));
  EXPECT_FALSE(model.HasSample(8, 2));
  ASSERT_TRUE(model.Retrain().ok());
  std::vector<float> rows;
  for (const auto* r : {&fast, &slow, &broken}) rows.insert(rows.end(), r->begin(), r->end());
  auto p = model.Predict(rows.data(), 3, kF);
  ASSERT_TRUE(p.ok());
  EXPECT_GT((*p)[0], (*p)[1]);
  EXPECT_GT((*p)[1], (*p)[2]);
}

}  // namespace
}  // namespace cliffguard::tuner
