// Bundle writer: the bundle default rule, spec assembly, merging, and a written
// bundle loading into the runtime with hits.
#include "cliffguard/tuner/bundle_writer.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cliffguard/runtime.h"

namespace cliffguard::tuner {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / fmt::format("cg_{}_{}", ::getpid(), name)).string();
}

TEST(BundleDefaultRuleTest, GeometricMeanOfRelativeSpeedOverShapesValidForAll) {
  // Shapes x candidates. c0 is best on shape 0 but invalid on shape 2; c1 is 90%
  // everywhere; c2 is 100%, 50%, 100%.
  std::vector<std::vector<double>> times = {{10, 11.1, 10}, {20, 22.2, 40}, {0, 33.3, 30}};
  std::vector<double> best = {10, 20, 30};
  double score = 0;
  auto w = ChooseBundleDefault(times, best, &score);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(*w, 1u);  // geomean 0.9 beats c2's (1 * 0.5 * 1)^(1/3) = 0.79
  EXPECT_NEAR(score, 0.9, 1e-3);
  times[2][1] = -1;  // c1 failed on shape 2
  w = ChooseBundleDefault(times, best, &score);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(*w, 2u);
  times[2][2] = 0;
  EXPECT_FALSE(ChooseBundleDefault(times, best).has_value());
  EXPECT_FALSE(ChooseBundleDefault({}, {}).has_value());
}

KeyOutcome Outcome(const OpKey& key, const DeviceInfo& device, double tuned_us, bool has_best = true) {
  KeyOutcome o;
  o.key = key;
  o.has_best = has_best;
  auto s = DefaultSchedule(key, device);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (s.ok()) o.best = *s;
  o.tuned_us = tuned_us;
  o.default_us = 2 * tuned_us;
  o.trials = 16;
  o.tuned_at = 1764489600;
  o.provenance = "strategy=random seed=1 trials=16";
  return o;
}

TEST(BundleWriterTest, SpecHasVerifiedEntriesOnlySortedAndLoadsWithHits) {
  auto rt = Runtime::Create();
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  const DeviceInfo& device = (*rt)->device();
  const OpKey k1 = OpKey::Gemm(128, 768, 768), k2 = OpKey::Gemm(16, 3072, 768), k3 = OpKey::Gemm(3, 5, 7);
  std::vector<KeyOutcome> outs = {Outcome(k1, device, 100), Outcome(k2, device, 50), Outcome(k3, device, 1, false)};
  BundleOpDefault d;
  d.schedule = ToNamed(outs[0].best);
  BundleSpec spec = MakeBundleSpec(device, outs, {d}, {'{', '}'}, 1764489601);
  ASSERT_EQ(spec.entries.size(), 2u);  // k3 has no verified schedule
  EXPECT_LT(spec.entries[0].key.ToString(), spec.entries[1].key.ToString());
  EXPECT_EQ(spec.cost_model_format, "xgboost-json");
  EXPECT_EQ(spec.device.fingerprint, device.fingerprint);

  const std::string path = TempPath("writer.cgb");
  ASSERT_TRUE(WriteBundleFile(path, spec).ok());
  auto report = (*rt)->LoadBundleFile(path);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->device_match) << report->device_rule;
  EXPECT_EQ(report->entries_loaded, 2u);
  for (const OpKey& k : {k1, k2}) {
    auto r = (*rt)->Resolve(k);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->hit) << k.ToString();
  }
  auto miss = (*rt)->Resolve(k3);
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->hit);
  std::remove(path.c_str());
}

TEST(BundleWriterTest, MergeKeepsFasterEntryAndRefusesMixedDevices) {
  const DeviceInfo device = HostCpuDevice();
  const OpKey k1 = OpKey::Gemm(128, 768, 768), k2 = OpKey::Gemm(16, 3072, 768), k3 = OpKey::Gemm(64, 64, 64);
  std::vector<KeyOutcome> a = {Outcome(k1, device, 100), Outcome(k2, device, 50)};
  std::vector<KeyOutcome> b = {Outcome(k1, device, 80), Outcome(k2, device, 60), Outcome(k3, device, 5)};
  std::vector<BundleSpec> specs = {MakeBundleSpec(device, a, {}, {}, 1), MakeBundleSpec(device, b, {}, {'x'}, 2)};
  std::vector<std::string> names = {"a.cgb", "b.cgb"};
  auto m = MergeBundles(specs, names, 3);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->entries.size(), 3u);
  for (const auto& e : m->entries) {
    if (e.key == k1) EXPECT_DOUBLE_EQ(e.tuned_us, 80);
    if (e.key == k2) EXPECT_DOUBLE_EQ(e.tuned_us, 50);
  }
  EXPECT_EQ(m->cost_model.size(), 1u);

  specs[1].device.fingerprint = "cpu-avx2-t2-0000000000000000";
  auto mixed = MergeBundles(specs, names, 3);
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(mixed.status().message().find("a.cgb: " + device.fingerprint), std::string::npos) << mixed.status().message();
  EXPECT_NE(mixed.status().message().find("b.cgb: cpu-avx2-t2-0000000000000000"), std::string::npos);
  EXPECT_FALSE(MergeBundles({}, {}, 0).ok());
}

}  // namespace
}  // namespace cliffguard::tuner
