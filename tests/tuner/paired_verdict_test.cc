// bench_serving --paired's verdict (bench/paired_verdict.h): tuned against default
// over the quiet rounds only.
#include "paired_verdict.h"

#include <vector>

#include <gtest/gtest.h>

namespace cliffguard::bench {
namespace {

TEST(PairedVerdictTest, BusyRoundsAreLeftOutAndTooFewQuietOnesAreNotJudged) {
  const std::vector<double> def(7, 1.0);
  const std::vector<double> slower = {1.10, 1.10, 1.10, 1.10, 1.10, 1.10, 1.10};
  const std::vector<double> quiet(7, 0.01), unknown(7, -1.0);
  for (const auto& waits : {quiet, unknown}) {  // -1 (not measured) counts as quiet
    const PairedVerdict v = JudgePaired(slower, def, waits, 0.10);
    EXPECT_TRUE(v.judged);
    EXPECT_EQ(v.quiet_rounds, 7u);
    EXPECT_NEAR(v.median, 1.10, 1e-12);
    EXPECT_TRUE(v.slower);
  }
  // 10% slower only in three busy rounds, level in the quiet ones: not slower.
  const std::vector<double> mixed = {1.10, 1.0, 1.10, 1.0, 1.10, 1.0, 1.0};
  const std::vector<double> busy3 = {0.3, 0.0, 0.3, 0.0, 0.3, 0.0, 0.0};
  PairedVerdict v = JudgePaired(mixed, def, busy3, 0.10);
  EXPECT_TRUE(v.judged);
  EXPECT_EQ(v.quiet_rounds, 4u);
  EXPECT_NEAR(v.median, 1.0, 1e-12);
  EXPECT_FALSE(v.slower);
  EXPECT_TRUE(JudgePaired(mixed, def, quiet, 0.10).slower == false);  // median 1.0 over all seven too
  EXPECT_TRUE(JudgePaired(mixed, def, busy3, 1.0).quiet_rounds == 7u);  // 1: no round is busy
  // Four busy rounds of seven: fewer than half quiet, not judged.
  v = JudgePaired(slower, def, {0.3, 0.3, 0.3, 0.3, 0.0, 0.0, 0.0}, 0.10);
  EXPECT_FALSE(v.judged);
  EXPECT_EQ(v.quiet_rounds, 3u);
  // At least three quiet rounds, whatever the round count.
  EXPECT_FALSE(JudgePaired({1.1, 1.1, 1.1, 1.1}, {1, 1, 1, 1}, {0.0, 0.0, 0.5, 0.5}, 0.10).judged);
  EXPECT_TRUE(JudgePaired({1.1, 1.1, 1.1, 1.1}, {1, 1, 1, 1}, {0.0, 0.0, 0.0, 0.5}, 0.10).judged);
}

TEST(PairedVerdictTest, SlowerBeyondTwoPercentAndTheSpread) {
  const std::vector<double> def(5, 1.0), quiet(5, 0.0);
  EXPECT_FALSE(JudgePaired({1.015, 1.015, 1.015, 1.015, 1.015}, def, quiet, 0.10).slower);  // within 2%
  EXPECT_TRUE(JudgePaired({1.03, 1.03, 1.03, 1.03, 1.03}, def, quiet, 0.10).slower);
  // 5% in the median round, but the rounds spread by more.
  const PairedVerdict v = JudgePaired({0.90, 0.95, 1.05, 1.15, 1.25}, def, quiet, 0.10);
  EXPECT_NEAR(v.spread, 0.10, 1e-12);
  EXPECT_FALSE(v.slower);
}

}  // namespace
}  // namespace cliffguard::bench
