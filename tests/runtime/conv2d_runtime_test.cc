// conv2d through the runtime: per-call Conv2d and Conv2dPlan against the double
// reference, hits and misses counted and reported like GEMM's, bundles with conv2d
// entries, refusals of what is not supported, and the conv2d shape shorthand.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cliffguard/bundle.h"
#include "cliffguard/miss_report.h"
#include "cliffguard/runtime.h"
#include "runtime/conv2d_tester.h"
#include "runtime/test_bundles.h"

namespace cliffguard {
namespace {

using testing::Conv2dSizesOf;
using testing::RandomFloats;

// Operands of one conv2d key and the double reference of its output.
struct ConvProblem {
  OpKey key;
  std::vector<float> x, w_ohwi, w_oihw, bias, y;
  std::vector<double> ref, bound;
  explicit ConvProblem(const OpKey& k) : key(k) {
    const testing::Conv2dSizes sz = Conv2dSizesOf(k);
    x = RandomFloats(sz.x, 11);
    w_ohwi = RandomFloats(sz.w, 12);
    w_oihw = testing::OihwFromOhwi(k, w_ohwi);
    bias = RandomFloats(size_t(k.dims[4]), 13);
    y.assign(sz.y, std::nanf(""));
    testing::ReferenceConv2d(k, x.data(), w_ohwi.data(), bias.data(), ref, bound);
  }
  Conv2dArgs Args(ConvWeightLayout layout = ConvWeightLayout::kOhwi) {
    return DenseConv2dArgs(key, x.data(), layout == ConvWeightLayout::kOhwi ? w_ohwi.data() : w_oihw.data(),
                           bias.data(), y.data(), layout);
  }
  // Every output within the reference's tolerance.
  bool Correct() const {
    for (size_t i = 0; i < y.size(); ++i)
      if (!(std::fabs(double(y[i]) - ref[i]) <= testing::Conv2dTolerance(key, bound[i]))) {
        ADD_FAILURE() << key.ToString() << ": y[" << i << "] = " << y[i] << ", reference " << ref[i];
        return false;
      }
    return true;
  }
};

const OpKey kTuned = OpKey::Conv2d(1, 9, 11, 5, 17, 3, 3, 1, 1, 1, 1);
const OpKey kUntuned = OpKey::Conv2d(2, 8, 7, 6, 9, 3, 3, 2, 2, 1, 1);

std::unique_ptr<Runtime> RuntimeWith(const std::vector<OpKey>& keys) {
  RuntimeOptions o;
  o.warn_on_miss = false;
  auto rt = Runtime::Create(o);
  EXPECT_TRUE(rt.ok()) << rt.status().ToString();
  if (!keys.empty()) {
    auto rep = (*rt)->LoadBundleBuffer(SerializeBundle(testing::HostBundle((*rt)->device(), keys)), "conv.cgb");
    EXPECT_TRUE(rep.ok()) << rep.status().ToString();
    EXPECT_TRUE(rep.ok() && rep->rejected.empty());
    EXPECT_EQ(rep.ok() ? rep->entries_loaded : 0u, keys.size());
  }
  return std::move(rt).value();
}

const KeyStats* StatsOf(const std::vector<KeyStats>& stats, const OpKey& key) {
  for (const auto& s : stats)
    if (s.key == key) return &s;
  return nullptr;
}

TEST(Conv2dRuntimeTest, PerCallHitsAndMissesAreCorrectAndCounted) {
  auto rt = RuntimeWith({kTuned});
  for (ConvWeightLayout layout : {ConvWeightLayout::kOhwi, ConvWeightLayout::kOihw}) {
    for (const OpKey& key : {kTuned, kUntuned}) {
      ConvProblem p(key);
      ASSERT_TRUE(rt->Conv2d(p.Args(layout)).ok()) << key.ToString();
      EXPECT_TRUE(p.Correct()) << ConvWeightLayoutName(layout);
    }
  }
  const auto stats = rt->Stats();
  const KeyStats* hit = StatsOf(stats, kTuned);
  const KeyStats* miss = StatsOf(stats, kUntuned);
  ASSERT_TRUE(hit && miss);
  EXPECT_EQ(hit->hits, 2u);
  EXPECT_EQ(hit->misses, 0u);
  EXPECT_EQ(miss->hits, 0u);
  EXPECT_EQ(miss->misses, 2u);
  EXPECT_EQ(miss->served[static_cast<int>(ServedBy::kBuiltinDefault)], 2u);
  const MissReport report = rt->GetMissReport();
  ASSERT_EQ(report.records.size(), 1u);
  EXPECT_EQ(report.records[0].key, kUntuned);
  EXPECT_EQ(report.records[0].kind, MissKind::kShapeMiss);
  EXPECT_EQ(report.records[0].count, 2u);
  EXPECT_GT(report.records[0].fallback_us_total, 0.0);
}

// Each op's misses are priced by its own op's entries, in the records and in the
// recommended buckets alike: here conv2d's entry measured 3x its default, gemm's 1x.
TEST(Conv2dRuntimeTest, EachOpsMissesArePricedByItsOwnOpsEntries) {
  RuntimeOptions o;
  o.warn_on_miss = false;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok());
  const OpKey gemm_tuned = OpKey::Gemm(64, 48, 32), gemm_missed = OpKey::Gemm(24, 48, 32);
  BundleSpec spec = testing::HostBundle((*rt)->device(), {kTuned}, 10, 30);
  spec.entries.push_back(testing::HostBundle((*rt)->device(), {gemm_tuned}, 10, 10).entries[0]);
  ASSERT_TRUE((*rt)->LoadBundleBuffer(SerializeBundle(spec), "mixed.cgb").ok());
  ConvProblem conv(kUntuned);
  testing::Problem gemm(gemm_missed);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*rt)->Conv2d(conv.Args()).ok());
    ASSERT_TRUE((*rt)->Gemm(gemm.args).ok());
  }
  const MissReport rep = (*rt)->GetMissReport();
  ASSERT_EQ(rep.records.size(), 2u);
  EXPECT_EQ(rep.records[0].key, kUntuned);  // ranked by expected gain
  EXPECT_NEAR(rep.records[0].expected_gain_us, rep.records[0].fallback_us_total * 2 / 3, 1e-6);
  EXPECT_EQ(rep.records[1].key, gemm_missed);
  EXPECT_EQ(rep.records[1].expected_gain_us, 0.0);
  ASSERT_EQ(rep.recommended_buckets.size(), 2u);
  EXPECT_EQ(rep.recommended_buckets[0].key, kUntuned);
  EXPECT_DOUBLE_EQ(rep.recommended_buckets[0].expected_gain_us, rep.records[0].expected_gain_us);
  EXPECT_EQ(rep.recommended_buckets[1].key, gemm_missed);
  EXPECT_EQ(rep.recommended_buckets[1].expected_gain_us, 0.0);
  // The same report read back from its file gives the same recommendations.
  auto back = MissReportFromJson(MissReportToJson(rep));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto again = RecommendBuckets(back->records);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_DOUBLE_EQ(again[0].expected_gain_us, rep.recommended_buckets[0].expected_gain_us);
}

TEST(Conv2dRuntimeTest, PlansPackTheFilterOnceAndHitOnEitherKey) {
  OpKey constant = kTuned;
  constant.constant_weights = true;
  // A bundle tuned with constant weights, and one tuned per call: both are hits for a plan.
  for (const OpKey& tuned : {constant, kTuned}) {
    auto rt = RuntimeWith({tuned});
    for (ConvWeightLayout layout : {ConvWeightLayout::kOhwi, ConvWeightLayout::kOihw}) {
      ConvProblem p(kTuned);
      auto plan = rt->PlanConv2d(kTuned, layout == ConvWeightLayout::kOhwi ? p.w_ohwi.data() : p.w_oihw.data(),
                                 layout, p.bias.data());
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      EXPECT_TRUE(plan->hit()) << tuned.ToString();
      EXPECT_TRUE(plan->key().constant_weights);
      EXPECT_GE(plan->weights_bytes(), p.w_ohwi.size() * sizeof(float));
      // The caller's filter may change or go once the plan exists.
      std::fill(p.w_ohwi.begin(), p.w_ohwi.end(), std::nanf(""));
      std::fill(p.w_oihw.begin(), p.w_oihw.end(), std::nanf(""));
      ASSERT_TRUE(plan->Run(p.x.data(), p.y.data()).ok());
      EXPECT_TRUE(p.Correct()) << ConvWeightLayoutName(layout);
    }
    const auto stats = rt->Stats();
    const KeyStats* s = StatsOf(stats, tuned);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->hits, 2u);
  }
}

TEST(Conv2dRuntimeTest, AMissedPlanIsRecordedUnderItsConstantWeightsKey) {
  auto rt = RuntimeWith({});
  ConvProblem p(kUntuned);
  auto plan = rt->PlanConv2d(kUntuned, p.w_ohwi.data(), ConvWeightLayout::kOhwi, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_FALSE(plan->hit());
  EXPECT_EQ(plan->served_by(), ServedBy::kBuiltinDefault);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(plan->Run(p.x.data(), p.y.data()).ok());
  std::vector<double> ref, bound;
  testing::ReferenceConv2d(kUntuned, p.x.data(), p.w_ohwi.data(), nullptr, ref, bound);
  for (size_t i = 0; i < p.y.size(); ++i) ASSERT_NEAR(p.y[i], ref[i], testing::Conv2dTolerance(kUntuned, bound[i]));
  const MissReport report = rt->GetMissReport();
  ASSERT_EQ(report.records.size(), 1u);
  EXPECT_TRUE(report.records[0].key.constant_weights);
  EXPECT_EQ(report.records[0].count, 3u);
  EXPECT_EQ(report.misses, 3u);
}

TEST(Conv2dRuntimeTest, UnsupportedOrBadCallsAreRefusedAndNotCounted) {
  auto rt = RuntimeWith({});
  ConvProblem p(kTuned);
  struct Case {
    const char* what;
    void (*edit)(Conv2dArgs&);
    StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"dilation", [](Conv2dArgs& a) { a.dilation_h = 2; }, StatusCode::kUnimplemented, "dilation 2x1"},
      {"groups", [](Conv2dArgs& a) { a.groups = 5; }, StatusCode::kUnimplemented, "groups=5"},
      {"null x", [](Conv2dArgs& a) { a.x = nullptr; }, StatusCode::kInvalidArgument, "pointer x is null"},
      {"null weights", [](Conv2dArgs& a) { a.weights = nullptr; }, StatusCode::kInvalidArgument, "pointer weights"},
      {"layout", [](Conv2dArgs& a) { a.weight_layout = static_cast<ConvWeightLayout>(7); },
       StatusCode::kInvalidArgument, "weight layout 7"},
      {"kernel over input", [](Conv2dArgs& a) { a.kh = 12; }, StatusCode::kInvalidArgument, "larger than the padded"},
      {"zero channels", [](Conv2dArgs& a) { a.ic = 0; }, StatusCode::kInvalidArgument, "ic=0"},
      {"packed per call", [](Conv2dArgs& a) { a.packed_weights = a.weights; }, StatusCode::kInvalidArgument,
       "Conv2dPlan"},
  };
  for (const Case& c : cases) {
    Conv2dArgs a = p.Args();
    c.edit(a);
    const Status st = rt->Conv2d(a);
    EXPECT_EQ(st.code(), c.code) << c.what << ": " << st.ToString();
    EXPECT_NE(st.message().find(c.message), std::string::npos) << c.what << ": " << st.message();
  }
  EXPECT_TRUE(rt->Stats().empty());
  EXPECT_EQ(rt->PlanConv2d(OpKey::Gemm(4, 4, 4), p.w_ohwi.data(), ConvWeightLayout::kOhwi).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(rt->PlanConv2d(kTuned, nullptr, ConvWeightLayout::kOhwi).status().code(), StatusCode::kInvalidArgument);
  Conv2dPlan empty;
  EXPECT_EQ(empty.Run(p.x.data(), p.y.data()).code(), StatusCode::kInvalidState);
}

TEST(Conv2dRuntimeTest, BundlesWithConv2dEntriesRoundTrip) {
  const DeviceInfo host = HostCpuDevice();
  OpKey constant = kUntuned;
  constant.constant_weights = true;
  const BundleSpec spec = testing::HostBundle(host, {kTuned, constant, OpKey::Gemm(8, 16, 32)});
  auto parsed = ParseBundle(SerializeBundle(spec));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->entries.size(), 3u);
  EXPECT_EQ(parsed->entries[0].key, kTuned);
  EXPECT_EQ(parsed->entries[1].key, constant);
  EXPECT_EQ(parsed->entries[0].schedule, spec.entries[0].schedule);
  auto from_json = BundleFromJson(BundleToJson(*parsed));
  ASSERT_TRUE(from_json.ok()) << from_json.status().ToString();
  EXPECT_EQ(SerializeBundle(*from_json), SerializeBundle(*parsed));
  const ResolvedBundle resolved = ResolveBundle(*parsed, host);
  EXPECT_TRUE(resolved.rejected.empty());
  EXPECT_EQ(resolved.entries.size(), 3u);
}

TEST(Conv2dRuntimeTest, AConvEntryWithAGemmVariantIsRejectedAsAnEntry) {
  const DeviceInfo host = HostCpuDevice();
  BundleSpec spec = testing::HostBundle(host, {kTuned});
  spec.entries[0].schedule = ToNamed(*DefaultSchedule(OpKey::Gemm(8, 8, 8), host));
  auto rt = RuntimeWith({});
  auto rep = rt->LoadBundleBuffer(SerializeBundle(spec), "mixed.cgb");
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->rejected.size(), 1u);
  EXPECT_NE(rep->rejected[0].message.find("runs gemm, not conv2d"), std::string::npos) << rep->rejected[0].message;
}

TEST(Conv2dRuntimeTest, ShapeShorthand) {
  auto k = ParseShape("1,56,56,64,128,3,2");
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(*k, OpKey::Conv2d(1, 56, 56, 64, 128, 3, 3, 2, 2, 1, 1));
  k = ParseShape(" 3, 7, 9, 3, 8, 7, 2, 3 ");
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(*k, OpKey::Conv2d(3, 7, 9, 3, 8, 7, 7, 2, 2, 3, 3));
  EXPECT_EQ(ParseShape(k->ToString()).value(), *k);
  auto bad = ParseShape("1,56,56,64,x,3,1");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("OC='x' is not an integer"), std::string::npos) << bad.status().message();
  bad = ParseShape("1,4,4,8,8,7,1,0");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("larger than the padded input"), std::string::npos) << bad.status().message();
  bad = ParseShape("1,2,3,4,5");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("N,H,W,IC,OC,K,S[,P]"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace cliffguard
