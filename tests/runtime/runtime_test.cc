#include <atomic>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cliffguard/runtime.h"
#include "test_bundles.h"

namespace cliffguard {
namespace {

using testing::HostBundle;
using testing::Problem;
using testing::TempFile;

RuntimeOptions Quiet() {
  RuntimeOptions o;
  o.warn_on_miss = false;
  return o;
}

TEST(Runtime, HitsAndMissesAreCountedAndComputeCorrectly) {
  auto rt = Runtime::Create(Quiet());
  ASSERT_TRUE(rt.ok());
  Runtime& r = **rt;
  const OpKey tuned = OpKey::Gemm(33, 47, 19), untuned = OpKey::Gemm(17, 5, 64, true, true);
  ASSERT_TRUE(r.LoadBundleBuffer(SerializeBundle(HostBundle(r.device(), {tuned})), "t").ok());
  Problem p1(tuned), p2(untuned);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(r.Gemm(p1.args).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(r.Gemm(p2.args).ok());
  EXPECT_LT(p1.MaxError(), 1e-3);
  EXPECT_LT(p2.MaxError(), 1e-3);
  auto stats = r.Stats();
  ASSERT_EQ(stats.size(), 2u);
  for (const auto& s : stats) {
    if (s.key == tuned) {
      EXPECT_EQ(s.hits, 5u);
      EXPECT_EQ(s.misses, 0u);
    } else {
      EXPECT_EQ(s.key, untuned);
      EXPECT_EQ(s.hits, 0u);
      EXPECT_EQ(s.misses, 3u);
    }
  }
  const MissReport rep = r.GetMissReport();
  EXPECT_EQ(rep.calls, 8u);
  EXPECT_EQ(rep.hits, 5u);
  ASSERT_EQ(rep.records.size(), 1u);
  EXPECT_EQ(rep.records[0].key, untuned);
  EXPECT_EQ(rep.records[0].kind, MissKind::kShapeMiss);
  EXPECT_EQ(rep.records[0].count, 3u);
  EXPECT_GT(rep.records[0].fallback_us_total, 0);
  EXPECT_LE(rep.records[0].first_seen, rep.records[0].last_seen);
  EXPECT_DOUBLE_EQ(rep.expected_speedup, 2.0);  // default_us / tuned_us of the loaded entry
  EXPECT_NEAR(rep.records[0].expected_gain_us, rep.records[0].fallback_us_total / 2, 1e-6);
}

TEST(Runtime, MissKindsFollowWhatIsLoaded) {
  auto rt = Runtime::Create(Quiet());
  ASSERT_TRUE(rt.ok());
  Runtime& r = **rt;
  Problem p(OpKey::Gemm(3, 4, 5));
  ASSERT_TRUE(r.Gemm(p.args).ok());
  EXPECT_EQ(r.GetMissReport().records.at(0).kind, MissKind::kDeviceMiss);
  ASSERT_TRUE(r.LoadBundleBuffer(SerializeBundle(HostBundle(r.device(), {OpKey::Gemm(9, 9, 9)})), "t").ok());
  ASSERT_TRUE(r.Gemm(p.args).ok());
  auto rep = r.GetMissReport();
  EXPECT_EQ(rep.records.at(0).kind, MissKind::kShapeMiss);
  EXPECT_EQ(rep.records.at(0).count, 2u);
}

TEST(Runtime, BundleDefaultIsTheFallbackWhenValid) {
  auto rt = Runtime::Create(Quiet());
  ASSERT_TRUE(rt.ok());
  Runtime& r = **rt;
  BundleSpec spec = HostBundle(r.device(), {OpKey::Gemm(64, 64, 64)});
  // The portable variant as the bundle default: distinguishable from the built-in default.
  const KernelVariant* scalar = nullptr;
  for (const auto& v : AllKernelVariants())
    if (v.isa == kIsaScalar && v.op == OpKind::kGemm) scalar = &v;
  ASSERT_NE(scalar, nullptr);
  // A default for skinny shapes (min(m, n) <= 16), the class of the missed key below.
  spec.defaults.push_back({OpKind::kGemm, DType::kF32, ToNamed(VariantDefaultSchedule(*scalar, OpKey::Gemm(5, 6, 7), r.device())),
                           ShapeClass::kSkinny});
  ASSERT_TRUE(r.LoadBundleBuffer(SerializeBundle(spec), "d").ok());
  auto res = r.Resolve(OpKey::Gemm(5, 6, 7));
  ASSERT_TRUE(res.ok());
  EXPECT_FALSE(res->hit);
  EXPECT_EQ(res->fallback, "bundle default");
  EXPECT_EQ(res->schedule.variant, scalar);
  Problem p(OpKey::Gemm(5, 6, 7));
  ASSERT_TRUE(r.Gemm(p.args).ok());
  EXPECT_LT(p.MaxError(), 1e-4);
}

TEST(Runtime, FasterEntryWinsAcrossBundlesAndReplaceSwapsEverything) {
  auto rt = Runtime::Create(Quiet());
  ASSERT_TRUE(rt.ok());
  Runtime& r = **rt;
  const OpKey k = OpKey::Gemm(20, 20, 20);
  BundleSpec slow = HostBundle(r.device(), {k}, 50, 60), fast = HostBundle(r.device(), {k}, 5, 60);
  TempFile fs("slow.cgb"), ff("fast.cgb");
  ASSERT_TRUE(WriteBundleFile(fs.path, slow).ok());
  ASSERT_TRUE(WriteBundleFile(ff.path, fast).ok());
  ASSERT_TRUE(r.LoadBundleFile(fs.path).ok());
  ASSERT_TRUE(r.LoadBundleFile(ff.path).ok());
  EXPECT_EQ(r.LoadReports().size(), 2u);
  EXPECT_DOUBLE_EQ(r.GetMissReport().expected_speedup, 12.0);
  auto reps = r.ReplaceBundles({fs.path});
  ASSERT_TRUE(reps.ok());
  EXPECT_EQ(r.LoadReports().size(), 1u);
  EXPECT_DOUBLE_EQ(r.GetMissReport().expected_speedup, 60.0 / 50.0);
  // A failing replace changes nothing.
  EXPECT_FALSE(r.ReplaceBundles({ff.path, "/no/such/file.cgb"}).ok());
  EXPECT_EQ(r.LoadReports().size(), 1u);
  r.UnloadAll();
  EXPECT_EQ(r.Resolve(k)->miss_kind, MissKind::kDeviceMiss);
}

TEST(Runtime, InvalidArgumentsNameTheValueAndTheRule) {
  auto rt = Runtime::Create(Quiet());
  ASSERT_TRUE(rt.ok());
  Problem p(OpKey::Gemm(4, 4, 4));
  GemmArgs a = p.args;
  a.m = 0;
  Status st = (*rt)->Gemm(a);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("m=0 must be >= 1"), std::string::npos) << st.message();
  a = p.args;
  a.k = -5;
  EXPECT_NE((*rt)->Gemm(a).message().find("k=-5"), std::string::npos);
  a = p.args;
  a.lda = 2;
  st = (*rt)->Gemm(a);
  EXPECT_NE(st.message().find("lda=2 must be >= 4"), std::string::npos) << st.message();
  a = p.args;
  a.c = nullptr;
  EXPECT_NE((*rt)->Gemm(a).message().find("pointer c is null"), std::string::npos);
  a = p.args;
  a.m = a.n = int64_t{1} << 31;
  a.lda = a.ldb = a.ldc = int64_t{1} << 31;
  EXPECT_EQ((*rt)->Gemm(a).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*rt)->Stats().empty());  // invalid calls are not dispatched, so not counted
  EXPECT_EQ(Runtime::Create({.threads = -1}).status().code(), StatusCode::kInvalidArgument);
}

TEST(Runtime, PlansCountAndComputeLikePerCallDispatch) {
  auto rt = Runtime::Create(Quiet());
  ASSERT_TRUE(rt.ok());
  Runtime& r = **rt;
  const OpKey hit = OpKey::Gemm(31, 17, 9, true, false), miss = OpKey::Gemm(7, 7, 7);
  ASSERT_TRUE(r.LoadBundleBuffer(SerializeBundle(HostBundle(r.device(), {hit})), "p").ok());
  auto ph = r.PlanGemm(hit);
  auto pm = r.PlanGemm(miss);
  ASSERT_TRUE(ph.ok() && pm.ok());
  EXPECT_TRUE(ph->hit());
  EXPECT_FALSE(pm->hit());
  Problem a(hit), b(miss);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(ph->Run(a.a.data(), a.args.lda, a.b.data(), a.args.ldb, a.c.data(), a.args.ldc).ok());
    ASSERT_TRUE(pm->Run(b.a.data(), b.args.lda, b.b.data(), b.args.ldb, b.c.data(), b.args.ldc).ok());
  }
  EXPECT_LT(a.MaxError(), 1e-4);
  EXPECT_LT(b.MaxError(), 1e-4);
  ASSERT_TRUE(r.Gemm(a.args).ok());
  uint64_t hits = 0, misses = 0;
  for (const auto& s : r.Stats()) {
    if (s.key == hit) hits = s.hits;
    if (s.key == miss) misses = s.misses;
  }
  EXPECT_EQ(hits, 5u);
  EXPECT_EQ(misses, 4u);
  GemmPlan empty;
  EXPECT_EQ(empty.Run(a.a.data(), 1, a.b.data(), 1, a.c.data(), 1).code(), StatusCode::kInvalidState);
  GemmPlan moved = std::move(*ph);
  EXPECT_EQ(ph->Run(a.a.data(), a.args.lda, a.b.data(), a.args.ldb, a.c.data(), a.args.ldc).code(), StatusCode::kInvalidState);
  EXPECT_EQ(moved.Run(a.a.data(), 1, a.b.data(), a.args.ldb, a.c.data(), a.args.ldc).code(), StatusCode::kInvalidArgument);
}

OpKey WithConstantWeights(OpKey k) {
  k.constant_weights = true;
  return k;
}

// B of a problem in a separate buffer with a padded leading dimension, as a model
// would hold its weights.
std::vector<float> PaddedWeights(const Problem& p, int64_t pad, int64_t& ldb) {
  const int64_t rows = p.key.trans_b ? p.key.n() : p.key.k(), cols = p.key.trans_b ? p.key.k() : p.key.n();
  ldb = cols + pad;
  std::vector<float> w(size_t(rows * ldb), std::nanf(""));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) w[size_t(i * ldb + j)] = p.b[size_t(i * cols + j)];
  return w;
}

TEST(Runtime, ConstantWeightPlansHoldTheirWeightsAndCountLikeOtherPlans) {
  auto rt = Runtime::Create(Quiet());
  ASSERT_TRUE(rt.ok());
  Runtime& r = **rt;
  // Tuned with constant weights: a packed-panel schedule, and a small-m one that
  // reads B as stored (the plan keeps a dense copy). Tuned per call only: served
  // by that entry. Not tuned: a miss, recorded under the constant-weights key.
  const OpKey packed = WithConstantWeights(OpKey::Gemm(33, 70, 129));
  const OpKey small_m = WithConstantWeights(OpKey::Gemm(5, 257, 64, false, true));
  const OpKey per_call = OpKey::Gemm(20, 40, 300, true, true);
  const OpKey missed = OpKey::Gemm(9, 31, 77, false, true);
  ASSERT_TRUE(r.LoadBundleBuffer(SerializeBundle(HostBundle(r.device(), {packed, small_m, per_call})), "cw").ok());
  struct Case {
    OpKey key;
    bool hit;
    OpKey counted;
  };
  const Case cases[] = {{packed, true, packed},
                        {small_m, true, small_m},
                        {WithConstantWeights(per_call), true, per_call},
                        {WithConstantWeights(missed), false, WithConstantWeights(missed)}};
  for (const Case& c : cases) {
    OpKey plain = c.key;
    plain.constant_weights = false;
    Problem p(plain, 3);
    int64_t ldb = 0;
    std::vector<float> w = PaddedWeights(p, 3, ldb);
    auto plan = r.PlanGemm(plain, w.data(), ldb);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    w.assign(w.size(), std::nanf(""));  // the plan owns its copy
    EXPECT_EQ(plan->hit(), c.hit) << c.key.ToString();
    EXPECT_EQ(plan->key(), c.key);
    EXPECT_TRUE(plan->has_weights());
    EXPECT_GE(plan->weights_bytes(), size_t(plain.n() * plain.k()) * sizeof(float));
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(plan->Run(p.a.data(), p.args.lda, p.c.data(), p.args.ldc).ok());
    EXPECT_LT(p.MaxError(), 1e-4) << c.key.ToString() << " " << plan->schedule().ToString();
    EXPECT_EQ(plan->Run(p.a.data(), p.args.lda, p.b.data(), p.args.ldb, p.c.data(), p.args.ldc).code(),
              StatusCode::kInvalidState);
    EXPECT_EQ(plan->Run(p.a.data(), p.args.lda, nullptr, p.args.ldc).code(), StatusCode::kInvalidArgument);
  }
  for (const Case& c : cases) {
    uint64_t hits = 0, misses = 0;
    for (const auto& s : r.Stats())
      if (s.key == c.counted) hits += s.hits, misses += s.misses;
    EXPECT_EQ(c.hit ? hits : misses, 3u) << c.counted.ToString();
  }
  const MissReport report = r.GetMissReport();
  ASSERT_EQ(report.records.size(), 1u);
  EXPECT_EQ(report.records[0].key, WithConstantWeights(missed));

  // A per-call GEMM never uses an entry tuned for constant weights.
  OpKey plain_packed = packed;
  plain_packed.constant_weights = false;
  Problem p(plain_packed);
  ASSERT_TRUE(r.Gemm(p.args).ok());
  auto res = r.Resolve(plain_packed);
  ASSERT_TRUE(res.ok());
  EXPECT_FALSE(res->hit);

  // Plans without weights need B; constant-weight keys need their weights.
  auto no_w = r.PlanGemm(plain_packed);
  ASSERT_TRUE(no_w.ok());
  EXPECT_FALSE(no_w->has_weights());
  EXPECT_EQ(no_w->Run(p.a.data(), p.args.lda, p.c.data(), p.args.ldc).code(), StatusCode::kInvalidState);
  EXPECT_EQ(r.PlanGemm(packed).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.PlanGemm(plain_packed, nullptr, 70).status().code(), StatusCode::kInvalidArgument);
  auto bad_ld = r.PlanGemm(plain_packed, p.b.data(), 69);
  EXPECT_EQ(bad_ld.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_ld.status().message().find("ldb=69"), std::string::npos) << bad_ld.status().ToString();
}

TEST(Runtime, ConcurrentDispatchCountsExactlyWhileReloading) {
  auto rt = Runtime::Create(Quiet());
  ASSERT_TRUE(rt.ok());
  Runtime& r = **rt;
  const std::vector<OpKey> tuned = {OpKey::Gemm(4, 8, 8), OpKey::Gemm(8, 8, 8)};
  const std::vector<OpKey> all = {tuned[0], tuned[1], OpKey::Gemm(5, 8, 8), OpKey::Gemm(6, 8, 8)};
  const auto bundle = SerializeBundle(HostBundle(r.device(), tuned));
  ASSERT_TRUE(r.LoadBundleBuffer(bundle, "b").ok());
  constexpr int kThreads = 3, kCalls = 20000;
  std::atomic<bool> stop{false};
  std::thread reloader([&] {
    int i = 0;
    while (!stop.load()) {
      if (i++ % 2) r.UnloadAll();
      (void)r.LoadBundleBuffer(bundle, "b");
    }
  });
  std::vector<std::thread> ts;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      std::vector<Problem> ps;
      for (const auto& k : all) ps.emplace_back(k, uint32_t(t));
      for (int i = 0; i < kCalls; ++i)
        if (!r.Gemm(ps[size_t(i) % ps.size()].args).ok()) failures++;
    });
  }
  for (auto& t : ts) t.join();
  stop = true;
  reloader.join();
  EXPECT_EQ(failures.load(), 0);
  uint64_t total = 0;
  for (const auto& s : r.Stats()) {
    EXPECT_EQ(s.hits + s.misses, uint64_t(kThreads * kCalls / all.size())) << s.key.ToString();
    total += s.hits + s.misses;
  }
  EXPECT_EQ(total, uint64_t(kThreads * kCalls));
  const MissReport rep = r.GetMissReport();
  EXPECT_EQ(rep.calls, total);
}

TEST(Runtime, MissReportJsonRoundTripsAndIsWrittenAtExit) {
  TempFile f("report.json");
  {
    RuntimeOptions o = Quiet();
    o.miss_report_path = f.path;
    auto rt = Runtime::Create(o);
    ASSERT_TRUE(rt.ok());
    Problem p(OpKey::Gemm(2, 3, 4));
    for (int i = 0; i < 7; ++i) ASSERT_TRUE((*rt)->Gemm(p.args).ok());
  }
  auto bytes = ReadFileBytes(f.path);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto rep = MissReportFromJson(std::string(bytes->begin(), bytes->end()));
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->records.size(), 1u);
  EXPECT_EQ(rep->records[0].count, 7u);
  EXPECT_EQ(rep->records[0].key, OpKey::Gemm(2, 3, 4));
  EXPECT_EQ(MissReportToJson(*rep), MissReportToJson(*MissReportFromJson(MissReportToJson(*rep))));
  EXPECT_FALSE(MissReportFromJson("{}").ok());
  EXPECT_FALSE(MissReportFromJson("[1,2]").ok());
  std::string tampered = MissReportToJson(*rep);
  tampered.replace(tampered.find("\"count\": 7"), 10, "\"count\": 6");
  auto bad = MissReportFromJson(tampered);
  ASSERT_FALSE(bad.ok());
  // The records' counts no longer add up to the report's misses.
  EXPECT_NE(bad.status().message().find("records count 6 in total but 'misses' is 7"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace cliffguard

namespace cliffguard {
namespace {

TEST(Runtime, HugeLeadingDimensionsAreRefusedNotOverflowed) {
  auto rt = Runtime::Create(Quiet());
  ASSERT_TRUE(rt.ok());
  float x[4] = {};
  GemmArgs g;
  g.m = g.n = g.k = 2;
  g.a = g.b = x;
  g.c = x;
  g.lda = g.ldb = 2;
  g.ldc = int64_t{1} << 62;
  Status st = (*rt)->Gemm(g);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("ldc="), std::string::npos) << st.message();
  g.ldc = 2;
  g.lda = INT64_MAX;
  EXPECT_NE((*rt)->Gemm(g).message().find("lda="), std::string::npos);
}

TEST(Runtime, ManyShortLivedRuntimesOnOneThread) {
  for (int i = 0; i < 200; ++i) {
    auto rt = Runtime::Create(Quiet());
    ASSERT_TRUE(rt.ok());
    float x[1] = {1}, c[1] = {0};
    ASSERT_TRUE((*rt)->Gemm(DenseGemmArgs(OpKey::Gemm(1, 1, 1), x, x, c)).ok());
    EXPECT_EQ((*rt)->Stats().at(0).misses, 1u);
  }
}

}  // namespace
}  // namespace cliffguard
