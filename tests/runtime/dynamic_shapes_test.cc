// Dynamic shapes: buckets and nearest-key fallback, the lookup order, the policy,
// and how every call is counted and reported by what served it.
#include <cstdlib>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cliffguard/runtime.h"
#include "test_bundles.h"

namespace cliffguard {
namespace {

using testing::HostBundle;
using testing::Problem;

const KernelVariant& Scalar() {
  for (const auto& v : AllKernelVariants())
    if (v.isa == kIsaScalar) return v;
  ADD_FAILURE() << "no scalar variant";
  std::abort();
}

// The family under test: weights n x k (nt), n=40, k=24. Its entries run the
// portable scalar variant, so that a call they serve is told apart from the
// built-in default by its schedule.
OpKey Fam(int64_t m) { return OpKey::Gemm(m, 40, 24, false, true); }

BundleEntry ScalarEntry(const DeviceInfo& d, const OpKey& key, int64_t lo = 0, int64_t hi = 0) {
  BundleEntry e;
  e.key = key;
  e.schedule = ToNamed(VariantDefaultSchedule(Scalar(), key, d));
  e.tuned_us = 10;
  e.default_us = 20;
  e.bucket_lo = lo;
  e.bucket_hi = hi;
  return e;
}

// Entries m=16 with bucket [9, 16] and m=128 without one.
BundleSpec FamilyBundle(const DeviceInfo& d) {
  BundleSpec spec = HostBundle(d, {});
  spec.entries.push_back(ScalarEntry(d, Fam(16), 9, 16));
  spec.entries.push_back(ScalarEntry(d, Fam(128)));
  return spec;
}

std::unique_ptr<Runtime> Make(std::optional<FallbackPolicy> policy) {
  RuntimeOptions o;
  o.warn_on_miss = false;
  o.fallback = policy;
  auto rt = Runtime::Create(o);
  EXPECT_TRUE(rt.ok()) << rt.status().ToString();
  return std::move(*rt);
}

const MissRecord& RecordOf(const MissReport& rep, const OpKey& key) {
  for (const auto& r : rep.records)
    if (r.key == key) return r;
  ADD_FAILURE() << "no record for " << key.ToString();
  static MissRecord none;
  return none;
}

TEST(DynamicShapes, LookupOrderIsExactBucketNearestThenDefaults) {
  auto rt = Make(std::nullopt);  // default policy: nearest
  Runtime& r = *rt;
  ASSERT_TRUE(r.LoadBundleBuffer(SerializeBundle(FamilyBundle(r.device())), "fam").ok());
  struct Case {
    OpKey key;
    ServedBy by;
    OpKey from;
  };
  const Case cases[] = {
      {Fam(16), ServedBy::kExact, Fam(16)},
      {Fam(9), ServedBy::kBucket, Fam(16)},
      {Fam(13), ServedBy::kBucket, Fam(16)},
      {Fam(100), ServedBy::kNearest, Fam(128)},
      {Fam(8), ServedBy::kNearest, Fam(16)},   // outside the bucket: nearest (log2 distance)
      {Fam(3), ServedBy::kBuiltinDefault, OpKey{}},  // nearest is 16: beyond kNearestMaxRatio
      {OpKey::Gemm(16, 41, 24, false, true), ServedBy::kBuiltinDefault, OpKey{}},  // another family
      {OpKey::Gemm(16, 40, 24, true, true), ServedBy::kBuiltinDefault, OpKey{}},   // another layout
  };
  for (const Case& c : cases) {
    auto res = r.Resolve(c.key);
    ASSERT_TRUE(res.ok()) << c.key.ToString();
    EXPECT_EQ(res->served_by, c.by) << c.key.ToString();
    EXPECT_EQ(res->hit, c.by == ServedBy::kExact);
    if (ServedByTunedKey(c.by)) {
      EXPECT_EQ(res->served_from, c.from) << c.key.ToString();
      EXPECT_EQ(res->schedule.variant, &Scalar()) << c.key.ToString();
    }
    Problem p(c.key);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(r.Gemm(p.args).ok()) << c.key.ToString();
    EXPECT_LT(p.MaxError(), 1e-4) << c.key.ToString();
  }
  for (const KeyStats& s : r.Stats()) {
    uint64_t total = 0;
    for (uint64_t n : s.served) total += n;
    EXPECT_EQ(total, 3u) << s.key.ToString();
    EXPECT_EQ(s.hits, s.served[0]);
    EXPECT_EQ(s.misses, 3u - s.hits);
  }
  const MissReport rep = r.GetMissReport();
  EXPECT_EQ(rep.served[int(ServedBy::kExact)], 3u);
  EXPECT_EQ(rep.served[int(ServedBy::kBucket)], 6u);
  EXPECT_EQ(rep.served[int(ServedBy::kNearest)], 6u);
  EXPECT_EQ(rep.served[int(ServedBy::kBuiltinDefault)], 9u);
  EXPECT_EQ(rep.misses, 21u);
  const MissRecord& b = RecordOf(rep, Fam(13));
  EXPECT_EQ(b.served_by, ServedBy::kBucket);
  EXPECT_EQ(b.served_from, Fam(16).ToString());
  EXPECT_EQ(b.bucket_lo, 9);
  EXPECT_EQ(b.bucket_hi, 16);
  EXPECT_EQ(b.served_calls[int(ServedBy::kBucket)], 3u);
  EXPECT_EQ(b.expected_gain_us, 0);  // it already ran a tuned schedule
  EXPECT_GT(RecordOf(rep, OpKey::Gemm(16, 41, 24, false, true)).expected_gain_us, 0);
  ASSERT_EQ(rep.buckets.size(), 1u);
  EXPECT_EQ(rep.buckets[0].key, Fam(16));
  EXPECT_EQ(rep.buckets[0].keys, 2u);
  EXPECT_EQ(rep.buckets[0].calls, 6u);
  EXPECT_EQ(rep.buckets[0].lo, 9);
  // The default-served keys are recommended as buckets of their own families.
  ASSERT_EQ(rep.recommended_buckets.size(), 3u);
  for (const auto& rb : rep.recommended_buckets) {
    const bool own = KeyFamily(rb.key) == KeyFamily(Fam(1));
    EXPECT_EQ(rb.lo, own ? 3 : 9) << rb.key.ToString();
    EXPECT_EQ(rb.hi, own ? 4 : 16) << rb.key.ToString();
    EXPECT_EQ(rb.calls, 3u);
  }
}

TEST(DynamicShapes, PolicyLimitsHowFarAMissLooks) {
  const OpKey in_bucket = Fam(12), outside = Fam(100);
  for (FallbackPolicy p : {FallbackPolicy::kExact, FallbackPolicy::kBucket, FallbackPolicy::kNearest}) {
    auto rt = Make(p);
    ASSERT_TRUE(rt->LoadBundleBuffer(SerializeBundle(FamilyBundle(rt->device())), "fam").ok());
    auto a = rt->Resolve(in_bucket), b = rt->Resolve(outside);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->served_by, p == FallbackPolicy::kExact ? ServedBy::kBuiltinDefault : ServedBy::kBucket);
    EXPECT_EQ(b->served_by, p == FallbackPolicy::kNearest ? ServedBy::kNearest : ServedBy::kBuiltinDefault);
  }
}

TEST(DynamicShapes, PolicyComesFromTheEnvironmentAndBadValuesAreRefused) {
  ::setenv("CLIFFGUARD_FALLBACK", "bucket", 1);
  {
    auto rt = Make(std::nullopt);
    ASSERT_TRUE(rt->LoadBundleBuffer(SerializeBundle(FamilyBundle(rt->device())), "fam").ok());
    EXPECT_EQ(rt->Resolve(Fam(100))->served_by, ServedBy::kBuiltinDefault);  // no nearest
    EXPECT_EQ(rt->Resolve(Fam(10))->served_by, ServedBy::kBucket);
  }
  {
    auto rt = Make(FallbackPolicy::kNearest);  // the option wins over the environment
    ASSERT_TRUE(rt->LoadBundleBuffer(SerializeBundle(FamilyBundle(rt->device())), "fam").ok());
    EXPECT_EQ(rt->Resolve(Fam(100))->served_by, ServedBy::kNearest);
  }
  ::setenv("CLIFFGUARD_FALLBACK", "closest", 1);
  auto bad = Runtime::Create({});
  ::unsetenv("CLIFFGUARD_FALLBACK");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'closest'"), std::string::npos) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("exact, bucket, nearest"), std::string::npos);
}

TEST(DynamicShapes, NearestBreaksTiesUpwardAndSkipsSchedulesInvalidForTheKey) {
  auto rt = Make(FallbackPolicy::kNearest);
  Runtime& r = *rt;
  BundleSpec spec = HostBundle(r.device(), {});
  spec.entries.push_back(ScalarEntry(r.device(), Fam(4)));
  spec.entries.push_back(ScalarEntry(r.device(), Fam(16)));
  ASSERT_TRUE(r.LoadBundleBuffer(SerializeBundle(spec), "tie").ok());
  EXPECT_EQ(r.Resolve(Fam(8))->served_from, Fam(16));  // log2 distance 1 from both
  EXPECT_EQ(r.Resolve(Fam(7))->served_from, Fam(4));
  EXPECT_EQ(r.Resolve(Fam(32))->served_from, Fam(16));  // a factor of kNearestMaxRatio: still near
  EXPECT_EQ(r.Resolve(Fam(33))->served_by, ServedBy::kBuiltinDefault);
  EXPECT_EQ(r.Resolve(Fam(2))->served_from, Fam(4));
  EXPECT_EQ(r.Resolve(Fam(1))->served_by, ServedBy::kBuiltinDefault);

  // A schedule whose variant declines the missed key is not a candidate.
  const KernelVariant* narrow = nullptr;
  const OpKey small = Fam(16), large = Fam(32);  // within kNearestMaxRatio
  for (const auto& v : AllKernelVariants()) {
    const Schedule s = VariantDefaultSchedule(v, small, r.device());
    if (CheckSchedule(s, small, r.device()).ok() && !CheckSchedule(s, large, r.device()).ok()) narrow = &v;
  }
  if (!narrow) GTEST_SKIP() << "every variant of this build runs both m=16 and m=32";
  BundleSpec only_small = HostBundle(r.device(), {});
  BundleEntry e = ScalarEntry(r.device(), small);
  e.schedule = ToNamed(VariantDefaultSchedule(*narrow, small, r.device()));
  only_small.entries.push_back(e);
  ASSERT_TRUE(r.ReplaceBundles({}).ok());
  ASSERT_TRUE(r.LoadBundleBuffer(SerializeBundle(only_small), "narrow").ok());
  auto res = r.Resolve(large);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->served_by, ServedBy::kBuiltinDefault) << narrow->name;
  Problem p(large);
  ASSERT_TRUE(r.Gemm(p.args).ok());
  EXPECT_LT(p.MaxError(), 1e-3);
}

TEST(DynamicShapes, BundleDefaultComesAfterTheFamily) {
  auto rt = Make(FallbackPolicy::kNearest);
  Runtime& r = *rt;
  BundleSpec spec = FamilyBundle(r.device());
  spec.defaults.push_back({OpKind::kGemm, DType::kF32, ToNamed(VariantDefaultSchedule(Scalar(), Fam(5), r.device())),
                           ShapeClass::kSkinny});
  ASSERT_TRUE(r.LoadBundleBuffer(SerializeBundle(spec), "d").ok());
  EXPECT_EQ(r.Resolve(Fam(8))->served_by, ServedBy::kNearest);
  EXPECT_EQ(r.Resolve(Fam(5))->served_by, ServedBy::kBundleDefault);  // 16 is beyond kNearestMaxRatio
  EXPECT_EQ(r.Resolve(OpKey::Gemm(5, 41, 24, false, true))->served_by, ServedBy::kBundleDefault);
}

TEST(DynamicShapes, RepeatedApproximateCallsAreCountedExactlyAcrossThreads) {
  auto rt = Make(FallbackPolicy::kNearest);
  Runtime& r = *rt;
  ASSERT_TRUE(r.LoadBundleBuffer(SerializeBundle(FamilyBundle(r.device())), "fam").ok());
  constexpr int kThreads = 4, kCalls = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Problem bucket(Fam(10 + t)), nearest(Fam(200));
      for (int i = 0; i < kCalls; ++i) {
        ASSERT_TRUE(r.Gemm(bucket.args).ok());
        ASSERT_TRUE(r.Gemm(nearest.args).ok());
      }
    });
  for (auto& t : threads) t.join();
  const MissReport rep = r.GetMissReport();
  EXPECT_EQ(rep.served[int(ServedBy::kBucket)], uint64_t(kThreads * kCalls));
  EXPECT_EQ(rep.served[int(ServedBy::kNearest)], uint64_t(kThreads * kCalls));
  EXPECT_EQ(RecordOf(rep, Fam(200)).count, uint64_t(kThreads * kCalls));
  EXPECT_GT(rep.served_us[int(ServedBy::kBucket)], 0);  // sampled, but measured
  ASSERT_EQ(rep.buckets.size(), 1u);
  EXPECT_EQ(rep.buckets[0].keys, uint64_t(kThreads));
  EXPECT_EQ(rep.buckets[0].calls, uint64_t(kThreads * kCalls));
}

TEST(DynamicShapes, PlansUseBucketsIncludingConstantWeightOnes) {
  auto rt = Make(FallbackPolicy::kNearest);
  Runtime& r = *rt;
  BundleSpec spec = HostBundle(r.device(), {});
  OpKey cw = Fam(16);
  cw.constant_weights = true;
  spec.entries.push_back(ScalarEntry(r.device(), cw, 9, 16));
  ASSERT_TRUE(r.LoadBundleBuffer(SerializeBundle(spec), "cw").ok());
  Problem p(Fam(11));
  auto plan = r.PlanGemm(p.key, p.b.data(), p.key.k());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_FALSE(plan->hit());
  EXPECT_EQ(plan->served_by(), ServedBy::kBucket);
  EXPECT_EQ(plan->schedule().variant, &Scalar());
  ASSERT_TRUE(plan->Run(p.a.data(), p.key.k(), p.c.data(), p.key.n()).ok());
  EXPECT_LT(p.MaxError(), 1e-4);
  // A per-call plan of the family without constant weights does not use it.
  auto per_call = r.PlanGemm(Fam(11));
  ASSERT_TRUE(per_call.ok());
  EXPECT_EQ(per_call->served_by(), ServedBy::kBuiltinDefault);
  const MissReport rep = r.GetMissReport();
  OpKey cw11 = Fam(11);
  cw11.constant_weights = true;
  EXPECT_EQ(RecordOf(rep, cw11).served_calls[int(ServedBy::kBucket)], 1u);
}

TEST(DynamicShapes, BucketsRoundTripAndBadOnesAreRejectedAsEntries) {
  auto rt = Make(FallbackPolicy::kNearest);
  const DeviceInfo& d = rt->device();
  BundleSpec spec = FamilyBundle(d);
  spec.entries.push_back(ScalarEntry(d, Fam(64), 65, 128));  // does not hold its own m
  auto parsed = ParseBundle(SerializeBundle(spec));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->entries[0].bucket_lo, 9);
  EXPECT_EQ(parsed->entries[0].bucket_hi, 16);
  EXPECT_FALSE(parsed->entries[1].has_bucket());
  auto json = BundleFromJson(BundleToJson(*parsed));
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ(json->entries[0].bucket_lo, 9);
  EXPECT_EQ(json->entries[2].bucket_hi, 128);

  auto rep = rt->LoadBundleBuffer(SerializeBundle(spec), "bad bucket");
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->entries_loaded, 2u);
  ASSERT_EQ(rep->rejected.size(), 1u);
  EXPECT_EQ(rep->rejected[0].reason, EntryRejection::kBadParameter);
  EXPECT_NE(rep->rejected[0].message.find("bucket [65, 128]"), std::string::npos) << rep->rejected[0].message;
  EXPECT_NE(rep->rejected[0].message.find("m=64"), std::string::npos);
}

TEST(DynamicShapes, ReportRoundTripsServedKindsAndReadsOlderReports) {
  auto rt = Make(FallbackPolicy::kNearest);
  Runtime& r = *rt;
  ASSERT_TRUE(r.LoadBundleBuffer(SerializeBundle(FamilyBundle(r.device())), "fam").ok());
  for (int64_t m : {12, 16, 90, 200, 201}) {
    Problem p(Fam(m));
    ASSERT_TRUE(r.Gemm(p.args).ok());
  }
  Problem other(OpKey::Gemm(300, 41, 24, false, true));
  ASSERT_TRUE(r.Gemm(other.args).ok());
  const MissReport rep = r.GetMissReport();
  auto back = MissReportFromJson(MissReportToJson(rep));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(MissReportToJson(*back), MissReportToJson(rep));
  for (int i = 0; i < kNumServedBy; ++i) EXPECT_EQ(back->served[i], rep.served[i]);
  ASSERT_EQ(back->recommended_buckets.size(), 1u);
  EXPECT_EQ(back->recommended_buckets[0].key, OpKey::Gemm(300, 41, 24, false, true));
  EXPECT_EQ(back->recommended_buckets[0].lo, 257);
  EXPECT_EQ(back->recommended_buckets[0].hi, 512);

  // A report written before served kinds: its misses ran a default.
  const std::string old = R"({"schema_version": 1, "device": {"fingerprint": "cpu-x"}, "calls": 5, "hits": 2,
    "misses": 3, "records": [{"key": "gemm f32 nn m=3 n=4 k=5", "kind": "shape_miss", "count": 3,
    "first_seen": 1, "last_seen": 2, "fallback_us_total": 30}]})";
  auto o = MissReportFromJson(old);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->records[0].served_by, ServedBy::kBuiltinDefault);
  EXPECT_EQ(o->served[int(ServedBy::kBuiltinDefault)], 3u);
  EXPECT_EQ(o->served[int(ServedBy::kExact)], 2u);
  EXPECT_TRUE(o->recommended_buckets.empty());

  // The report with the first `from` after `after` replaced by `to` is refused with `message`.
  MissReport split = rep;  // a record served by two kinds, as after a reload: written with its split
  MissRecord& s0 = split.records[0];
  const int kind2 = s0.served_by == ServedBy::kBuiltinDefault ? int(ServedBy::kBundleDefault) : int(ServedBy::kBuiltinDefault);
  s0.served_calls[kind2] += 1;
  s0.served_us[kind2] += 1.5;
  s0.count += 1;
  s0.fallback_us_total += 1.5;
  ++split.misses;
  ++split.calls;
  const std::string json = MissReportToJson(split);
  ASSERT_NE(json.find("\"served\": {\""), std::string::npos) << json;
  ASSERT_TRUE(MissReportFromJson(json).ok());
  auto refused_with = [&](const std::string& after, const std::string& from, const std::string& to,
                          const std::string& message) {
    std::string bad = json;
    const size_t at = bad.find(from, bad.find(after));
    ASSERT_NE(at, std::string::npos) << from;
    bad.replace(at, from.size(), to);
    auto refused = MissReportFromJson(bad);
    ASSERT_FALSE(refused.ok()) << to;
    EXPECT_NE(refused.status().message().find(message), std::string::npos) << refused.status().ToString();
  };
  // Per-kind calls must add up to the record's count.
  refused_with("\"records\"", "\"calls\": 1,", "\"calls\": 7,", "calls in total but count is");
  // A bucket's range is required: without it the report would be written back with
  // a range [0, 0] that no reader accepts.
  refused_with("\"buckets\"", "\"range\"", "\"ranee\"", "buckets[0].range is missing");
}

TEST(DynamicShapes, RecommendationsGroupMissesIntoPowerOfTwoRanges) {
  auto rec = [](int64_t m, double us, ServedBy by = ServedBy::kBuiltinDefault) {
    MissRecord r;
    r.key = Fam(m);
    r.count = 2;
    r.served_by = by;
    r.served_calls[int(by)] = 2;
    r.served_us[int(by)] = us;
    r.expected_gain_us = ServedByTunedKey(by) ? 0 : us / 2;  // as priced at a 2x speed-up
    return r;
  };
  const auto out = RecommendBuckets({rec(3, 5), rec(4, 9), rec(1, 1), rec(100, 50), rec(70, 60),
                                     rec(120, 1000, ServedBy::kNearest)});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].key, Fam(70));  // (64, 128]: 110 us by default; the nearest-served key adds nothing
  EXPECT_EQ(out[0].lo, 65);
  EXPECT_EQ(out[0].hi, 128);
  EXPECT_EQ(out[0].keys, 2u);
  EXPECT_DOUBLE_EQ(out[0].expected_gain_us, 55);
  EXPECT_EQ(out[1].key, Fam(4));
  EXPECT_EQ(out[1].lo, 3);
  EXPECT_EQ(out[1].hi, 4);
  EXPECT_EQ(out[2].lo, 1);
  EXPECT_EQ(out[2].hi, 1);
}

}  // namespace
}  // namespace cliffguard
