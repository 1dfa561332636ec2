// Shape buckets: the spec grammar, representatives per family, what a miss report
// contributes, and the tuner's check of a bucket at its ends with scripted times
// (shipped, refused as slower beyond the noise, refused as failing or invalid at an
// end), the "bucket" log records and their replay on resume.
#include "cliffguard/tuner/buckets.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cliffguard/bundle.h"
#include "cliffguard/tuner/tuner.h"
#include "cliffguard/tuner/tuning_log.h"

namespace cliffguard::tuner {
namespace {

std::string TempPath(const std::string& name) {
  auto p = (std::filesystem::temp_directory_path() / fmt::format("cg_bk_{}_{}", ::getpid(), name)).string();
  std::remove(p.c_str());
  return p;
}

TEST(BucketSpecTest, ListsAndPowersOfTwo) {
  struct Case {
    std::string spec;
    std::vector<int64_t> ends;
  } cases[] = {
      {"m:1,2,4,8,16", {1, 2, 4, 8, 16}},
      {" m : 3, 7 ,100 ", {3, 7, 100}},
      {"m:5", {5}},
      {"m:2147483648", {int64_t{1} << 31}},
      {"m:pow2:16", {1, 2, 4, 8, 16}},
      {"m:pow2:12", {1, 2, 4, 8, 12}},
      {"m:pow2:1", {1}},
      {"m:pow2:2", {1, 2}},
  };
  for (const auto& c : cases) {
    auto ends = ParseBucketEnds(c.spec);
    ASSERT_TRUE(ends.ok()) << c.spec << ": " << ends.status().ToString();
    EXPECT_EQ(*ends, c.ends) << c.spec;
  }
  auto p = ParseBucketEnds("m:pow2:2147483648");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->size(), 32u);
  EXPECT_EQ(p->back(), int64_t{1} << 31);
  auto conv = ParseBucketEnds("n:1,4", OpKind::kConv2d);  // conv2d varies its batch n
  ASSERT_TRUE(conv.ok()) << conv.status().ToString();
  EXPECT_EQ(*conv, (std::vector<int64_t>{1, 4}));
}

TEST(BucketSpecTest, BadSpecsNameTheTextAndTheRule) {
  struct Case {
    std::string spec, expect;
  } cases[] = {
      {"", "must be m:E1,E2"},
      {"1,2,4", "must be m:E1,E2"},
      {"n:1,2", "dimension 'n' is not the varying dimension of gemm ('m')"},
      {"m:", "end '' is not an integer"},
      {"m:1,,4", "end '' is not an integer"},
      {"m:1,x", "end 'x' is not an integer"},
      {"m:1.5", "end '1.5' is not an integer"},
      {"m:0,4", "end 0 must be in [1, 2^31]"},
      {"m:-2", "end -2 must be in [1, 2^31]"},
      {"m:2147483649", "end 2147483649 must be in [1, 2^31]"},
      {"m:4,2", "end 2 after 4: the ends must be strictly increasing"},
      {"m:4,4", "strictly increasing"},
      {"m:pow2", "pow2 needs its bound"},
      {"m:pow2:0", "pow2 bound '0' must be an integer in [1, 2^31]"},
      {"m:pow2:x", "pow2 bound 'x'"},
      {"m:pow2:4294967296", "pow2 bound '4294967296'"},
      {"m:pow3:8", "'pow3' is not a form of ends"},
  };
  for (const auto& c : cases) {
    auto ends = ParseBucketEnds(c.spec);
    ASSERT_FALSE(ends.ok()) << "'" << c.spec << "' was accepted";
    EXPECT_EQ(ends.status().code(), StatusCode::kInvalidArgument) << c.spec;
    const std::string msg = ends.status().message();
    EXPECT_NE(msg.find(fmt::format("'{}'", c.spec)), std::string::npos) << c.spec << " -> " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.spec << " -> " << msg;
  }
}

TEST(BucketTargetsTest, OneTargetPerFamilyAndRangeAtTheLargestGivenValue) {
  const OpKey a12 = OpKey::Gemm(12, 768, 768), a10 = OpKey::Gemm(10, 768, 768), a3 = OpKey::Gemm(3, 768, 768);
  const OpKey a300 = OpKey::Gemm(300, 768, 768);
  OpKey b2 = OpKey::Gemm(2, 768, 768, false, true);  // another layout: another family
  OpKey c16 = OpKey::Gemm(16, 768, 768);
  c16.constant_weights = true;                       // constant weights: another family too
  const BucketPlan plan = BucketTargets({a12, a10, a3, b2, a300, c16, a300}, {1, 2, 4, 8, 16});
  EXPECT_EQ(plan.exact_keys, (std::vector<OpKey>{a300}));
  ASSERT_EQ(plan.targets.size(), 15u);  // three families, five ranges each
  const int64_t lo[] = {1, 2, 3, 5, 9}, hi[] = {1, 2, 4, 8, 16};
  const int64_t rep_a[] = {1, 2, 3, 8, 12}, rep_b[] = {1, 2, 4, 8, 16}, rep_c[] = {1, 2, 4, 8, 16};
  for (int r = 0; r < 5; ++r) {
    const BucketTarget &ta = plan.targets[r], &tb = plan.targets[5 + r], &tc = plan.targets[10 + r];
    for (const BucketTarget* t : {&ta, &tb, &tc}) {
      EXPECT_EQ(t->lo, lo[r]);
      EXPECT_EQ(t->hi, hi[r]);
      EXPECT_TRUE(CheckBucket(t->key, t->lo, t->hi).ok()) << t->key.ToString();
    }
    EXPECT_EQ(ta.key, WithVaryingDim(a12, rep_a[r]));
    EXPECT_EQ(tb.key, WithVaryingDim(b2, rep_b[r]));
    EXPECT_EQ(tc.key, WithVaryingDim(c16, rep_c[r]));
    EXPECT_TRUE(tc.key.constant_weights);
  }
  EXPECT_EQ(BucketTargets({a12}, {}).exact_keys, (std::vector<OpKey>{a12}));
  EXPECT_TRUE(BucketTargets({a12}, {}).targets.empty());
}

TEST(BucketTargetsTest, AReportGivesItsTopRecommendedBucketsElseItsTopKeys) {
  MissReport rep;
  for (int i = 0; i < 4; ++i) {
    MissRecord m;
    m.key = OpKey::Gemm(3 + i, 64, 32);
    rep.records.push_back(m);
  }
  rep.records[1].key.dtype = DType::kF16;
  auto f32_gemm = [](const OpKey& k) { return k.op == OpKind::kGemm && k.dtype == DType::kF32; };
  ReportSelection old = SelectFromReport(rep, 2, f32_gemm);
  EXPECT_TRUE(old.buckets.empty());
  EXPECT_EQ(old.keys, (std::vector<OpKey>{rep.records[0].key, rep.records[2].key}));
  EXPECT_EQ(old.skipped, (std::vector<OpKey>{rep.records[1].key}));

  auto rec = [](int64_t m, int64_t lo, int64_t hi, double gain) {
    BucketRecommendation b;
    b.key = OpKey::Gemm(m, 64, 32);
    b.lo = lo;
    b.hi = hi;
    b.expected_gain_us = gain;
    return b;
  };
  rep.recommended_buckets = {rec(3, 3, 4, 10), rec(7, 5, 8, 30), rec(12, 9, 16, 20), rec(30, 17, 32, 5)};
  rep.recommended_buckets[1].key.dtype = DType::kF16;
  ReportSelection sel = SelectFromReport(rep, 2, f32_gemm);
  EXPECT_TRUE(sel.keys.empty());  // buckets replace the exact keys
  ASSERT_EQ(sel.buckets.size(), 2u);
  EXPECT_EQ(sel.buckets[0].key, OpKey::Gemm(12, 64, 32));  // by expected gain, the f16 one skipped
  EXPECT_EQ(sel.buckets[0].lo, 9);
  EXPECT_EQ(sel.buckets[0].hi, 16);
  EXPECT_EQ(sel.buckets[1].key, OpKey::Gemm(3, 64, 32));
  EXPECT_EQ(sel.skipped.size(), 1u);
}

// ---- the tuner's bucket check, with scripted times ----

// Test variants that run nothing (the measurer below is scripted). Each proposes
// its four algorithms per key, so they are the trials of a 4-trial run.
constexpr int32_t kAlgoValues[] = {0, 1, 2, 3};
constexpr ParamSpec kAlgoParams[] = {{"algo", kAlgoValues, 0, "algorithm id (test)"}};
std::vector<ParamValues> ProposeAll(const KernelVariant&, const OpKey&, const DeviceInfo&) {
  std::vector<ParamValues> out;
  for (int32_t a : kAlgoValues) {
    ParamValues p{};
    p[0] = a;
    out.push_back(p);
  }
  return out;
}
Status UpToM12(const KernelVariant&, const OpKey& key, const DeviceInfo&) {
  return key.m() <= 12 ? Status::Ok() : InvalidArgument(fmt::format("m={} > 12: this test variant runs m <= 12", key.m()));
}
const KernelVariant kAnyM = {"test_f32_gemm_anym__scalar", Backend::kCpu, OpKind::kGemm, DType::kF32,
                             kIsaScalar, kAlgoParams, nullptr, nullptr, nullptr, {.gemm = nullptr},
                             {.gemm = {1, 1}}, &ProposeAll};
const KernelVariant kSmallM = {"test_f32_gemm_smallm__scalar", Backend::kCpu, OpKind::kGemm, DType::kF32,
                               kIsaScalar, kAlgoParams, &UpToM12, nullptr, nullptr, {.gemm = nullptr},
                               {.gemm = {1, 1}}, &ProposeAll};

// The test variant and every built-in one (so the built-in defaults of the log
// resolve on resume).
std::vector<const KernelVariant*> WithBuiltins(const KernelVariant* v) {
  std::vector<const KernelVariant*> out = {v};
  for (const KernelVariant& b : AllKernelVariants()) out.push_back(&b);
  return out;
}

// At a tuned key: the default 100 us, a test variant 60 + algo us (algo 0 wins),
// +7 us when interleaved. At an end key (its m in end_us or end_fails): the default
// end_default_us, anything else end_us[m] or a wrong result. Interleaved results
// have six rounds at their time, or end_rounds_us.
class ScriptedMeasurer final : public Measurer {
 public:
  explicit ScriptedMeasurer(DeviceInfo device) : device_(std::move(device)) {}
  const DeviceInfo& device() const override { return device_; }
  StatusOr<std::vector<MeasureResult>> Measure(const OpKey& key, std::span<const Schedule> schedules,
                                               const ResultCallback& on_result) override {
    auto out = Times(key, schedules, false);
    for (size_t i = 0; i < out.size(); ++i)
      if (on_result) on_result(i, out[i]);
    return out;
  }
  StatusOr<std::vector<MeasureResult>> MeasureInterleaved(const OpKey& key, std::span<const Schedule> schedules) override {
    interleaved_keys.push_back(key);
    auto out = Times(key, schedules, true);
    if (auto w = end_cpu_wait.find(key.m()); w != end_cpu_wait.end())
      for (auto& r : out) r.cpu_wait = w->second;
    return out;
  }
  std::map<int64_t, double> end_us;
  std::set<int64_t> end_fails;
  double end_default_us = 50;
  std::vector<double> end_rounds_us;  // given: the entry's six interleaved rounds at the end key m=16
  std::map<int64_t, double> end_cpu_wait;  // the cpu_wait of every interleaved result at an end key (by m)
  std::vector<OpKey> interleaved_keys;

 private:
  std::vector<MeasureResult> Times(const OpKey& key, std::span<const Schedule> schedules, bool interleaved) const {
    const Schedule def = *DefaultSchedule(key, device_);
    const bool end = end_us.count(key.m()) || end_fails.count(key.m());
    std::vector<MeasureResult> out;
    for (const Schedule& s : schedules) {
      MeasureResult r;
      r.key = key;
      r.schedule = s;
      r.ok = true;
      if (end && s == def) {
        r.median_us = end_default_us;
      } else if (end && end_fails.count(key.m())) {
        r.ok = false;
        r.error = "wrong result: max rel error 3.0e-01 > tol 1.0e-05 (scripted)";
      } else if (end) {
        r.median_us = end_us.at(key.m());
      } else {
        const bool test_variant = s.variant == &kAnyM || s.variant == &kSmallM;
        r.median_us = (s == def ? 100 : test_variant ? 60 + s.params[0] : 90) + (interleaved ? 7 : 0);
      }
      if (interleaved && r.ok) r.round_us.assign(6, r.median_us);
      if (interleaved && key.m() == 16 && !end_rounds_us.empty() && !(s == def) && r.ok) r.round_us = end_rounds_us;
      out.push_back(r);
    }
    return out;
  }
  DeviceInfo device_;
};

TunerOptions BucketOptions(std::vector<BucketTarget> buckets, const KernelVariant* variant, const std::string& log,
                           Measurer* measurer) {
  TunerOptions o;
  o.buckets = std::move(buckets);
  o.strategy = "random";
  o.trials = 4;
  o.batch_size = 4;
  o.log_path = log;
  o.tie_tolerance = 0;  // a lone leader: no tie group
  o.variant_leaders = 0;
  o.bundle_default = false;
  o.variants = WithBuiltins(variant);
  o.measurer = measurer;
  return o;
}

const BundleEntry* EntryOf(const TuneResult& res, const OpKey& key) {
  for (const auto& e : res.bundle.entries)
    if (e.key == key) return &e;
  return nullptr;
}

std::vector<LogRecord> BucketRecords(const std::string& log) {
  auto contents = ReadTuningLog(log);
  EXPECT_TRUE(contents.ok()) << contents.status().ToString();
  std::vector<LogRecord> out;
  if (contents.ok())
    for (const auto& r : contents->records)
      if (r.kind == RecordKind::kBucket) out.push_back(r);
  return out;
}

TEST(TuneBucketTest, ABucketThatHoldsAtBothEndsShipsWithTheEntry) {
  const std::string log = TempPath("ship.jsonl");
  const OpKey a = OpKey::Gemm(12, 64, 32), b = OpKey::Gemm(8, 48, 32);
  ScriptedMeasurer fake(HostCpuDevice());
  fake.end_us = {{9, 50.5}, {16, 49}, {5, 50}};  // 50.5 us: within 2% of the ends' default (50 us)
  TunerOptions o = BucketOptions({{a, 9, 16}, {b, 5, 8}}, &kAnyM, log, &fake);  // no plain keys
  std::set<std::string> phases;
  o.progress = [&](const TuneProgress& p) { phases.insert(p.phase); };
  auto res = Tune(o);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_TRUE(phases.count("bucket"));
  ASSERT_EQ(res->summaries.size(), 2u);
  for (const auto& [key, lo, hi] : {std::tuple{a, 9, 16}, std::tuple{b, 5, 8}}) {
    const KeySummary& s = res->summaries[key == a ? 0 : 1];
    EXPECT_EQ(s.key, key);
    EXPECT_EQ(s.bucket_lo, lo) << s.note;
    EXPECT_EQ(s.bucket_hi, hi) << s.note;
    EXPECT_FALSE(s.default_shipped);
    const BundleEntry* e = EntryOf(*res, key);
    ASSERT_NE(e, nullptr) << key.ToString();
    EXPECT_EQ(e->bucket_lo, lo);
    EXPECT_EQ(e->bucket_hi, hi);
    EXPECT_EQ(e->schedule.variant, "test_f32_gemm_anym__scalar");
  }
  // The bucket travels through the bundle's bytes.
  auto parsed = ParseBundle(SerializeBundle(res->bundle));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  for (const auto& e : parsed->entries) EXPECT_TRUE(e.has_bucket()) << e.key.ToString();

  // Each end other than the key's own m: the entry's schedule and the end's default,
  // interleaved, logged as "bucket" records of the end key. b's hi is its own m.
  const std::vector<LogRecord> recs = BucketRecords(log);
  ASSERT_EQ(recs.size(), 6u);
  std::multiset<std::string> keys;
  for (const auto& r : recs) {
    keys.insert(r.key.ToString());
    EXPECT_EQ(r.trial, -1);
    EXPECT_TRUE(r.ok);
  }
  EXPECT_EQ(keys.count(OpKey::Gemm(9, 64, 32).ToString()), 2u);
  EXPECT_EQ(keys.count(OpKey::Gemm(16, 64, 32).ToString()), 2u);
  EXPECT_EQ(keys.count(OpKey::Gemm(5, 48, 32).ToString()), 2u);
  EXPECT_EQ(recs[0].schedule, EntryOf(*res, a)->schedule);
  EXPECT_EQ(recs[1].schedule, ToNamed(*DefaultSchedule(OpKey::Gemm(9, 64, 32), HostCpuDevice())));
  std::remove(log.c_str());
}

TEST(TuneBucketTest, ABucketSlowerThanAnEndsDefaultBeyondTheNoiseIsRefused) {
  const OpKey a = OpKey::Gemm(12, 64, 32);
  struct Case {
    double hi_us;
    std::vector<double> rounds_us;
    bool ships;
  } cases[] = {
      {60, {}, false},    // the default 17% faster in every round
      {50.9, {}, true},   // 1.8%: not beyond confirm_min_gain (3%)
      {51.5, {}, true},   // 2.9%: nor this
      {52, {}, false},    // 3.8%
      {60, {60, 60, 60, 60, 40, 40}, true},  // the default faster in 4 of 6 rounds only: within the noise
  };
  for (const Case& c : cases) {
    const std::string what = fmt::format("at m=16 {} us, rounds {}", c.hi_us, fmt::join(c.rounds_us, ", "));
    const std::string log = TempPath("slow.jsonl");
    ScriptedMeasurer fake(HostCpuDevice());
    fake.end_us = {{9, 45}, {16, c.hi_us}};
    fake.end_rounds_us = c.rounds_us;
    auto res = Tune(BucketOptions({{a, 9, 16}}, &kAnyM, log, &fake));
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    const KeySummary& s = res->summaries[0];
    const BundleEntry* e = EntryOf(*res, a);
    ASSERT_NE(e, nullptr) << what;  // the entry ships either way
    EXPECT_EQ(e->schedule.variant, "test_f32_gemm_anym__scalar") << what;
    EXPECT_EQ(e->has_bucket(), c.ships) << what << ": " << s.note;
    EXPECT_EQ(s.bucket_hi, c.ships ? 16 : 0) << what;
    if (!c.ships) {
      EXPECT_EQ(e->bucket_lo, 0) << what;
      EXPECT_NE(s.note.find("bucket [9, 16] refused"), std::string::npos) << s.note;
      EXPECT_NE(s.note.find("at m=16"), std::string::npos) << s.note;
      EXPECT_NE(s.note.find(fmt::format("{:.3g} us", c.hi_us)), std::string::npos) << s.note;
      EXPECT_NE(s.note.find("the default 50 us"), std::string::npos) << s.note;
    } else {
      EXPECT_EQ(s.note.find("refused"), std::string::npos) << s.note;
    }
    EXPECT_EQ(BucketRecords(log).size(), 4u) << what;
    std::remove(log.c_str());
  }
}

// An end measured on a busy host in every try refuses the bucket (the entry ships
// without it); every try is logged.
TEST(TuneBucketTest, ABucketCheckedOnlyOnABusyHostIsRefused) {
  const OpKey a = OpKey::Gemm(12, 64, 32);
  for (const double wait : {0.02, 0.35}) {
    const std::string log = TempPath("busy_bucket.jsonl");
    ScriptedMeasurer fake(HostCpuDevice());
    fake.end_us = {{9, 45}, {16, 45}};
    fake.end_cpu_wait = {{16, wait}};
    TunerOptions o = BucketOptions({{a, 9, 16}}, &kAnyM, log, &fake);
    o.cpu_wait_pause_s = 0;
    auto res = Tune(o);
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    const KeySummary& s = res->summaries[0];
    const BundleEntry* e = EntryOf(*res, a);
    ASSERT_NE(e, nullptr);
    const bool busy = wait > o.max_cpu_wait;
    EXPECT_EQ(e->has_bucket(), !busy) << s.note;
    EXPECT_EQ(BucketRecords(log).size(), busy ? 2u + 2u * 3u : 4u) << wait;
    if (busy) {
      EXPECT_NE(s.note.find("bucket [9, 16] refused: at m=16: the host was busy in all 3 tries"), std::string::npos)
          << s.note;
    }
    std::remove(log.c_str());
  }
}

TEST(TuneBucketTest, ABucketWhoseWinnerFailsAtAnEndIsRefused) {
  const std::string log = TempPath("fail.jsonl");
  const OpKey a = OpKey::Gemm(12, 64, 32);
  ScriptedMeasurer fake(HostCpuDevice());
  fake.end_fails = {9};
  fake.end_us = {{16, 40}};
  auto res = Tune(BucketOptions({{a, 9, 16}}, &kAnyM, log, &fake));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  const KeySummary& s = res->summaries[0];
  ASSERT_EQ(res->bundle.entries.size(), 1u);
  EXPECT_FALSE(res->bundle.entries[0].has_bucket());
  EXPECT_EQ(s.bucket_hi, 0);
  EXPECT_NE(s.note.find("bucket [9, 16] refused: the entry's schedule fails at m=9: wrong result"), std::string::npos)
      << s.note;
  // The first failing end decides: m=16 is not measured.
  const std::vector<LogRecord> recs = BucketRecords(log);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_FALSE(recs[0].ok);
  EXPECT_EQ(recs[0].key, OpKey::Gemm(9, 64, 32));
  std::remove(log.c_str());
}

TEST(TuneBucketTest, ABucketWhoseWinnerIsInvalidAtAnEndIsRefusedUnmeasured) {
  const std::string log = TempPath("invalid.jsonl");
  const OpKey a = OpKey::Gemm(12, 64, 32);
  ScriptedMeasurer fake(HostCpuDevice());
  fake.end_us = {{9, 40}, {16, 40}};
  auto res = Tune(BucketOptions({{a, 9, 16}}, &kSmallM, log, &fake));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  const KeySummary& s = res->summaries[0];
  ASSERT_EQ(res->bundle.entries.size(), 1u);
  EXPECT_EQ(res->bundle.entries[0].schedule.variant, "test_f32_gemm_smallm__scalar");
  EXPECT_FALSE(res->bundle.entries[0].has_bucket());
  EXPECT_NE(s.note.find("bucket [9, 16] refused: the entry's schedule is not valid at m=16"), std::string::npos)
      << s.note;
  EXPECT_NE(s.note.find("m=16 > 12"), std::string::npos) << s.note;
  EXPECT_EQ(BucketRecords(log).size(), 2u);  // m=9 was checked first and held
  std::remove(log.c_str());
}

TEST(TuneBucketTest, ResumeReplaysBucketRecordsAndChecksTheBucketAgain) {
  const std::string log = TempPath("resume.jsonl");
  const OpKey a = OpKey::Gemm(12, 64, 32);
  ScriptedMeasurer fake(HostCpuDevice());
  fake.end_us = {{9, 50}, {16, 50}};
  TunerOptions o = BucketOptions({{a, 9, 16}}, &kAnyM, log, &fake);
  auto first = Tune(o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(BucketRecords(log).size(), 4u);
  o.resume = true;
  auto res = Tune(o);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  const KeySummary& s = res->summaries[0];
  EXPECT_EQ(s.resumed, 4);  // the bucket records are not trials
  EXPECT_EQ(s.trials, 4);
  EXPECT_EQ(s.bucket_lo, 9);
  EXPECT_EQ(s.bucket_hi, 16);
  // Nothing but the confirmation (2) and the bucket check (2 ends x 2) is measured
  // again: the trials and the default come from the log.
  EXPECT_EQ(res->measurements, 6);
  auto contents = ReadTuningLog(log);
  ASSERT_TRUE(contents.ok()) << contents.status().ToString();
  int trials = 0, defaults = 0, buckets = 0;
  for (const auto& r : contents->records) {
    trials += r.kind == RecordKind::kTrial;
    defaults += r.kind == RecordKind::kDefault;
    buckets += r.kind == RecordKind::kBucket;
  }
  EXPECT_EQ(trials, 4);
  EXPECT_EQ(defaults, 1);
  EXPECT_EQ(buckets, 8);
  std::remove(log.c_str());
}

TEST(TuneBucketTest, BadBucketsAreRefusedNamingTheRule) {
  const std::string log = TempPath("bad.jsonl");
  const OpKey a = OpKey::Gemm(12, 64, 32);
  ScriptedMeasurer fake(HostCpuDevice());
  struct Case {
    std::vector<BucketTarget> buckets;
    std::string expect;
  } cases[] = {
      {{{a, 13, 16}}, "must satisfy 1 <= lo <= m=12 <= hi <= 2^31"},
      {{{a, 9, 11}}, "bucket [9, 11]"},
      {{{a, 0, 16}}, "1 <= lo"},
      {{{a, 9, (int64_t{1} << 31) + 1}}, "<= 2^31"},
      {{{a, 0, 0}}, "is no range"},
      {{{a, 9, 16}, {a, 9, 32}}, "has two bucket ranges, [9, 16] and [9, 32]"},
      {{{a, 9, 16}, {OpKey::Gemm(20, 64, 32), 16, 32}}, "overlaps bucket [9, 16]"},
  };
  for (const auto& c : cases) {
    auto res = Tune(BucketOptions(c.buckets, &kAnyM, log, &fake));
    ASSERT_FALSE(res.ok()) << c.expect;
    EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(res.status().message().find(c.expect), std::string::npos) << res.status().message();
  }
  // The same target twice, and ranges of other families, are fine.
  auto ok = Tune(BucketOptions({{a, 9, 16}, {a, 9, 16}, {OpKey::Gemm(12, 64, 48), 9, 16}}, &kAnyM, log, &fake));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->summaries.size(), 2u);
  std::remove(log.c_str());
}

}  // namespace
}  // namespace cliffguard::tuner
