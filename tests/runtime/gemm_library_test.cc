// Correctness of the library GEMM variants (runtime/kernels/cpu/gemm_library.h):
// cpu_f32_gemm_onednn and cpu_f32_gemm_openblas against the double-precision
// reference of GemmTester. One suite per variant, named like it (STYLE H2); the
// suites skip when this build lacks the library (CLIFFGUARD_LIBRARY_VARIANTS, or
// libdnnl-dev / libopenblas-dev not found at configure time).

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cliffguard/kernel.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm_library.h"
#include "runtime/gemm_tester.h"
#include "runtime/kernel_test_util.h"

namespace cliffguard {
namespace {

using testing::GemmTester;
using testing::Host;
using testing::TwoThreads;
using testing::With;

// Every layout, awkward sizes, padded leading dimensions, threads 1 and 2, each
// value of the variant's other parameters.
void Shapes(const KernelVariant& v, const std::vector<std::pair<std::string, int64_t>>& extra) {
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1},   {1, 7, 17},    {7, 17, 33},  {17, 1, 129},
                                                      {33, 129, 7}, {129, 33, 17}, {1, 129, 129}, {64, 64, 64}};
  uint32_t seed = 0;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (const auto& sh : shapes)
        for (int pad = 0; pad < 2; ++pad) {
          auto named = extra;
          named.push_back({"threads", ++seed % 2 ? 1 : TwoThreads()});
          GemmTester t;
          t.shape(sh[0], sh[1], sh[2]).trans_a(ta).trans_b(tb).beta(seed % 3 ? 0.0f : 1.0f).nan_c(seed % 3).seed(seed);
          if (pad) t.lda_pad(3).ldb_pad(5).ldc_pad(7);
          if (!t.Test(With(v, named))) return;
        }
}

void AlphaBeta(const KernelVariant& v, const std::vector<std::pair<std::string, int64_t>>& extra) {
  auto named = extra;
  named.push_back({"threads", TwoThreads()});
  const Schedule s = With(v, named);
  for (float alpha : {0.0f, 1.0f, -0.5f, 2.5f})
    for (float beta : {0.0f, 1.0f, -0.5f, 2.5f}) {
      GemmTester t;
      t.shape(37, 45, 29).lda_pad(2).ldb_pad(1).ldc_pad(3).alpha(alpha).beta(beta).nan_c(beta == 0.0f);
      if (!t.Test(s)) return;
      t.trans_a(true).trans_b(true);
      if (!t.Test(s)) return;
    }
}

// alpha == 0 reads neither A nor B (both NaN here): C = beta * C.
void AlphaZeroReadsNeitherAnorB(const KernelVariant& v) {
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  const int64_t m = 5, n = 6, k = 7;
  std::vector<float> a(m * k, kNaN), b(k * n, kNaN), c(m * n, 2.0f);
  GemmArgs args = DenseGemmArgs(OpKey::Gemm(m, n, k), a.data(), b.data(), c.data(), 0.0f, 0.5f);
  ASSERT_TRUE(RunGemm(Schedule::Defaults(v), args).ok());
  for (float x : c) ASSERT_EQ(x, 1.0f);
  std::fill(c.begin(), c.end(), kNaN);
  args.beta = 0.0f;
  ASSERT_TRUE(RunGemm(Schedule::Defaults(v), args).ok());
  for (float x : c) ASSERT_EQ(x, 0.0f);
}

void DefaultSchedules(const KernelVariant& v) {
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {16, 768, 96}, {255, 17, 300}, {128, 96, 384}}) {
    const OpKey key = OpKey::Gemm(m, n, k);
    for (int threads : {1, 3, 64}) {
      DeviceInfo d = Host();
      d.threads = threads;
      const Status st = CheckSchedule(VariantDefaultSchedule(v, key, d), key, d);
      EXPECT_TRUE(st.ok()) << key.ToString() << " threads=" << threads << ": " << st.ToString();
      ASSERT_NE(v.candidates, nullptr);
      for (const ParamValues& p : v.candidates(v, key, d)) {
        Schedule s{&v, p};
        EXPECT_TRUE(CheckSchedule(s, key, d).ok()) << s.ToString();
      }
    }
    GemmTester t;
    t.shape(m, n, k).beta(0.0f).nan_c(true);
    if (!t.Test(VariantDefaultSchedule(v, key, Host()))) return;
  }
}

void CheckNamesThreads(const KernelVariant& v) {
  DeviceInfo d = Host();
  d.threads = 2;
  Schedule s = With(v, {{"threads", 4}});
  const Status st = CheckSchedule(s, OpKey::Gemm(8, 8, 8), d);
  EXPECT_EQ(st.message(), std::string(v.name) + ": threads=4 must be <= device threads=2");
}

// Several serving threads call the same variant at once.
void ConcurrentCallers(const KernelVariant& v, const std::vector<std::vector<std::pair<std::string, int64_t>>>& extras) {
  std::vector<std::thread> threads;
  for (int c = 0; c < 3; ++c)
    threads.emplace_back([&v, &extras, c] {
      for (int r = 0; r < 6; ++r) {
        auto named = extras[size_t(c + r) % extras.size()];
        named.push_back({"threads", (c + r) % 2 ? TwoThreads() : 1});
        GemmTester t;
        t.shape(45 + c, 71 + r, 67).trans_b(r % 3 == 0).beta(r % 2 ? 1.0f : 0.0f).nan_c(r % 2 == 0).seed(c * 100 + r);
        if (!t.Test(With(v, named))) return;
      }
    });
  for (auto& t : threads) t.join();
}

// ---- cpu_f32_gemm_onednn ----

// Each way of reading B: the matmul primitive on B as stored and reordered, and dnnl_sgemm.
const std::vector<std::vector<std::pair<std::string, int64_t>>> kReorders = {
    {{"reorder_b", 0}}, {{"reorder_b", 1}}, {{"api", 1}}};

TEST(cpu_f32_gemm_onednn, Shapes) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_onednn", OpKind::kGemm);
  for (const auto& extra : kReorders) Shapes(*v, extra);
}

TEST(cpu_f32_gemm_onednn, AlphaBeta) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_onednn", OpKind::kGemm);
  for (const auto& extra : kReorders) AlphaBeta(*v, extra);
}

TEST(cpu_f32_gemm_onednn, AlphaZeroReadsNeitherAnorB) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_onednn", OpKind::kGemm);
  AlphaZeroReadsNeitherAnorB(*v);
}

TEST(cpu_f32_gemm_onednn, DefaultSchedules) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_onednn", OpKind::kGemm);
  DefaultSchedules(*v);
}

TEST(cpu_f32_gemm_onednn, CheckNamesValueAndRule) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_onednn", OpKind::kGemm);
  CheckNamesThreads(*v);
  const Status st = CheckSchedule(With(*v, {{"api", 1}, {"reorder_b", 1}}), OpKey::Gemm(8, 8, 8), Host());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "cpu_f32_gemm_onednn: reorder_b=1 needs api=0 (api=1, dnnl_sgemm, reads B as stored)");
}

// threads > 1 only when idle OpenMP workers sleep (they would starve cliffguard's
// own pool): the environment of this process decides which way the check goes.
TEST(cpu_f32_gemm_onednn, ThreadsNeedPassiveOpenMpWaiting) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_onednn", OpKind::kGemm);
  const bool passive = testing::OmpWaitsPassively();
  DeviceInfo d = Host();
  d.threads = 4;
  const OpKey key = OpKey::Gemm(512, 512, 512);
  const Status st = CheckSchedule(With(*v, {{"threads", 2}}), key, d);
  if (passive) {
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(VariantDefaultSchedule(*v, key, d).params[0], 4);
    // Waking the OpenMP team costs more than the own pool's worker: about a thread per
    // kOnednnFlopsPerThread of work, where the own kernels' rule gives one per 2 MFLOP.
    const OpKey small = OpKey::Gemm(160, 384, 100);  // 12.3 MFLOP
    EXPECT_EQ(VariantDefaultSchedule(*v, small, d).params[0], 1);
    EXPECT_EQ(cpu::ThreadsForWork(small, d), 4);
    // 25.2 MFLOP: 2.5 threads, and 0.67 more for 0.5 MiB of weights (kOnednnWeightBytesPerThread).
    EXPECT_EQ(VariantDefaultSchedule(*v, OpKey::Gemm(96, 512, 256), d).params[0], 3);
    EXPECT_EQ(VariantDefaultSchedule(*v, OpKey::Gemm(96, 512, 192), d).params[0], 2);  // 18.9 MFLOP, 0.375 MiB
    // The weights count too: reading them takes time. 12.6 MFLOP and 1.5 MiB: 1.3 + 2.
    EXPECT_EQ(VariantDefaultSchedule(*v, OpKey::Gemm(16, 512, 768), d).params[0], 3);
    EXPECT_EQ(v->candidates(*v, small, d).front()[0], 1);
  } else {
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(st.message().find("OMP_WAIT_POLICY=passive"), std::string::npos) << st.message();
    EXPECT_EQ(VariantDefaultSchedule(*v, key, d).params[0], 1);
    for (const ParamValues& p : v->candidates(*v, key, d)) EXPECT_EQ(p[0], 1);
  }
  EXPECT_TRUE(CheckSchedule(With(*v, {{"threads", 1}, {"reorder_b", 1}}), key, d).ok());
}

// Constant weights: packed once (dense for reorder_b = 0 and for dnnl_sgemm, oneDNN's
// layout for reorder_b = 1), then every call reads only the packed copy, with any
// leading dimensions of A and C.
TEST(cpu_f32_gemm_onednn, PackedWeights) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_onednn", OpKind::kGemm);
  ASSERT_NE(v->pack_weights, nullptr);
  ASSERT_NE(v->packed_weights_bytes, nullptr);
  uint32_t seed = 0;
  for (const auto& extra : kReorders)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (const auto& sh : std::vector<std::array<int64_t, 3>>{{1, 17, 33}, {7, 129, 17}, {33, 7, 129}, {64, 64, 64}}) {
          auto named = extra;
          named.push_back({"threads", ++seed % 2 ? 1 : TwoThreads()});
          const Schedule s = With(*v, named);
          EXPECT_GE(v->packed_weights_bytes(*v, OpKey::Gemm(sh[0], sh[1], sh[2], ta, tb), s.params),
                    size_t(sh[1] * sh[2]) * sizeof(float));
          GemmTester t;
          t.shape(sh[0], sh[1], sh[2]).trans_a(ta).trans_b(tb).packed_weights(true).seed(seed);
          if (seed % 2) t.lda_pad(2).ldb_pad(3).ldc_pad(1).beta(-0.5f).alpha(2.0f);
          else t.beta(0.0f).nan_c(true);
          if (!t.Test(s)) return;
        }
}

TEST(cpu_f32_gemm_onednn, ConcurrentCallers) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_onednn", OpKind::kGemm);
  ConcurrentCallers(*v, kReorders);
}

// More shapes than the per-thread primitive cache holds: evictions, then every
// shape again, still correct.
TEST(cpu_f32_gemm_onednn, PrimitiveCacheEvicts) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_onednn", OpKind::kGemm);
  const Schedule s = With(*v, {{"threads", 1}});
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t m = 1; m <= 80; ++m)
      if (!GemmTester().shape(m, 9, 5).beta(m % 2 ? 1.0f : 0.0f).seed(uint32_t(m)).Test(s)) return;
}

// libgomp cannot start an OpenMP team in a child of fork() on a thread that had
// one: such a call returns an error instead of hanging; threads = 1 still runs.
TEST(cpu_f32_gemm_onednn, ThreadsInAChildOfForkFailCleanly) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_onednn", OpKind::kGemm);
  if (Host().threads < 2) GTEST_SKIP() << "needs 2 threads, the host budget is " << Host().threads;
  const Schedule two = With(*v, {{"threads", 2}}), one = With(*v, {{"threads", 1}});
  const GemmTester tester = GemmTester().shape(96, 80, 64).beta(0.5f);
  ASSERT_TRUE(tester.Test(two));  // the parent's thread now has an OpenMP team
  testing::ExpectChildOfForkSucceeds([&] { return testing::GemmRefusedAfterForkOneRuns(two, one); },
                                     "it hung starting an OpenMP team");
  EXPECT_TRUE(tester.Test(two));
}

// ---- cpu_f32_gemm_openblas ----

const std::vector<std::vector<std::pair<std::string, int64_t>>> kNoExtra = {{}};

TEST(cpu_f32_gemm_openblas, Shapes) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_openblas", OpKind::kGemm);
  Shapes(*v, {});
}

TEST(cpu_f32_gemm_openblas, AlphaBeta) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_openblas", OpKind::kGemm);
  AlphaBeta(*v, {});
}

TEST(cpu_f32_gemm_openblas, AlphaZeroReadsNeitherAnorB) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_openblas", OpKind::kGemm);
  AlphaZeroReadsNeitherAnorB(*v);
}

TEST(cpu_f32_gemm_openblas, DefaultSchedules) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_openblas", OpKind::kGemm);
  DefaultSchedules(*v);
}

TEST(cpu_f32_gemm_openblas, CheckNamesValueAndRule) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_openblas", OpKind::kGemm);
  CheckNamesThreads(*v);
  EXPECT_EQ(v->pack_weights, nullptr);  // constant weights run from a dense copy
  const Status st = VariantSupports(*v, OpKey::Gemm(int64_t{1} << 31, 1, 1), Host());
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("32-bit"), std::string::npos) << st.message();
}

#ifdef CLIFFGUARD_WITH_OPENBLAS
// An OpenBLAS whose core needs less than the host has (an OpenBLAS older than the
// CPU runs its SSE3 fallback) is declined, naming the core and OPENBLAS_CORETYPE.
TEST(cpu_f32_gemm_openblas, DeclinesACoreBelowTheHostsVectorIsa) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_openblas", OpKind::kGemm);
  const uint32_t avx2 = kIsaScalar | kIsaAvx2, avx512 = avx2 | kIsaAvx512;
  EXPECT_EQ(cpu::OpenblasCoreIsa("SkylakeX"), uint32_t{kIsaAvx512});
  EXPECT_EQ(cpu::OpenblasCoreIsa("SAPPHIRERAPIDS"), uint32_t{kIsaAvx512});
  EXPECT_EQ(cpu::OpenblasCoreIsa("Zen"), uint32_t{kIsaAvx2});
  EXPECT_EQ(cpu::OpenblasCoreIsa("Prescott"), uint32_t{kIsaScalar});
  EXPECT_EQ(cpu::OpenblasCoreIsa(nullptr), uint32_t{kIsaScalar});
  EXPECT_STREQ(cpu::OpenblasCoreTypeFor(avx512), "SkylakeX");
  EXPECT_STREQ(cpu::OpenblasCoreTypeFor(avx2), "Haswell");
  EXPECT_EQ(cpu::OpenblasCoreTypeFor(kIsaScalar), nullptr);
  for (const auto& [core, isa, fits] : std::vector<std::tuple<const char*, uint32_t, bool>>{
           {"SkylakeX", avx512, true}, {"Cooperlake", avx512, true}, {"Haswell", avx2, true},
           {"SkylakeX", avx2, true}, {"Prescott", kIsaScalar, true}, {"Haswell", avx512, false},
           {"Prescott", avx512, false}, {"Sandybridge", avx2, false}}) {
    const Status st = cpu::OpenblasCoreFits(*v, core, isa);
    EXPECT_EQ(st.ok(), fits) << core << " on " << IsaLevelName(isa) << ": " << st.ToString();
    if (fits) continue;
    EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
    EXPECT_NE(st.message().find(core), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(fmt::format("OPENBLAS_CORETYPE={}", cpu::OpenblasCoreTypeFor(isa))), std::string::npos)
        << st.message();
  }
  // This process runs the host's core (test_main.cc sets it as the command does).
  EXPECT_TRUE(cpu::OpenblasCoreFits(*v, cpu::OpenblasCore(), Host().isa).ok()) << cpu::OpenblasCore();
}
#endif

TEST(cpu_f32_gemm_openblas, ConcurrentCallers) {
  CG_REQUIRE_LIBRARY_VARIANT(v, "cpu_f32_gemm_openblas", OpKind::kGemm);
  ConcurrentCallers(*v, kNoExtra);
}

// ---- Their place in the table ----

// Per-call `nn` keys of the small class on an AVX-512 host below 1 MFLOP (on an Intel
// host with k below 128), where OpenBLAS's core runs AVX-512 kernels: OpenBLAS
// (OpenblasTinyFits), written out here from its rule.
bool TinyOpenblasRuleHolds(const OpKey& key, const DeviceInfo& d) {
#ifdef CLIFFGUARD_WITH_OPENBLAS
  return !key.constant_weights && !key.trans_a && !key.trans_b && (d.isa & kIsaAvx512) &&
         ShapeClassOf(key) == ShapeClass::kSmall && 2.0 * key.m() * key.n() * key.k() < 1e6 &&
         (d.vendor != "GenuineIntel" || key.k() < 128) && (cpu::OpenblasCoreIsa(cpu::OpenblasCore()) & kIsaAvx512);
#else
  return false;
#endif
}

// The others of those keys where oneDNN's fitted threads are at least the own rule's:
// dnnl_sgemm (OnednnSmallSgemmFits), written out here from its rule.
bool SmallSgemmRuleHolds(const OpKey& key, const DeviceInfo& d) {
  const KernelVariant* v = FindKernelVariant("cpu_f32_gemm_onednn");
  return v && !key.constant_weights && !key.trans_a && !key.trans_b && (d.isa & kIsaAvx512) &&
         (d.threads == 1 || testing::OmpWaitsPassively()) &&
         ShapeClassOf(key) == ShapeClass::kSmall && !TinyOpenblasRuleHolds(key, d) &&
         VariantDefaultSchedule(*v, key, d).params[v->ParamIndex("threads")] >= cpu::ThreadsForWork(key, d);
}

// Small `nt` keys on an Intel AVX-512 host with n of at most 128 and k of 48 or more or
// m of 64 or more, where oneDNN's fitted threads are at least the own rule's: oneDNN's
// matmul (OnednnSmallNtMatmulFits), written out here from its rule.
bool SmallNtMatmulRuleHolds(const OpKey& key, const DeviceInfo& d) {
  const KernelVariant* v = FindKernelVariant("cpu_f32_gemm_onednn");
  return v && !key.constant_weights && !key.trans_a && key.trans_b && d.vendor == "GenuineIntel" &&
         (d.isa & kIsaAvx512) && (d.threads == 1 || testing::OmpWaitsPassively()) &&
         ShapeClassOf(key) == ShapeClass::kSmall && key.n() <= 128 &&
         (key.k() >= 48 || key.m() >= 64) &&
         VariantDefaultSchedule(*v, key, d).params[v->ParamIndex("threads")] >= cpu::ThreadsForWork(key, d);
}

// After the project's own variants, before the portable reference; the built-in
// default of skinny and small keys is a library variant only where a measured rule
// says so (for these keys: SmallSgemmRuleHolds, TinyOpenblasRuleHolds and
// SmallNtMatmulRuleHolds).
TEST(CpuGemmTable, LibraryVariantsSitBeforeTheReference) {
  const auto all = cpu::CpuKernelVariants();
  std::vector<size_t> library;
  for (size_t i = 0; i < all.size(); ++i)
    if (std::string(all[i].name) == "cpu_f32_gemm_onednn" || std::string(all[i].name) == "cpu_f32_gemm_openblas")
      library.push_back(i);
  if (library.empty()) GTEST_SKIP() << "this build has no library variants";
  EXPECT_EQ(library.back() + 1, all.size() - 1);
  EXPECT_STREQ(all.back().name, "cpu_f32_gemm_4x4__scalar");
  for (size_t i = 0; i < library.size(); ++i) EXPECT_EQ(library[i], library[0] + i);
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {1, 768, 768}, {64, 64, 64}, {33, 1, 7}})
    for (int t = 0; t < 8; ++t) {
      OpKey key = OpKey::Gemm(m, n, k, t & 1, (t >> 1) & 1);
      key.constant_weights = (t >> 2) != 0;
      auto s = DefaultSchedule(key, Host());
      ASSERT_TRUE(s.ok());
      if (SmallSgemmRuleHolds(key, Host()) || TinyOpenblasRuleHolds(key, Host()) ||
          SmallNtMatmulRuleHolds(key, Host()))
        continue;
      for (size_t i : library) EXPECT_STRNE(s->variant->name, all[i].name) << s->ToString();
    }
}

// The host, the host with one thread, and the host seen as AVX2-only, each as an
// AMD CPU and as Intel CPUs of family 6 models 167 and 207 (EmeraldRapids: rules of
// its own): the devices the built-in default rules are checked on.
std::vector<DeviceInfo> RuleDevices() {
  std::vector<DeviceInfo> base{Host(), HostCpuDevice(1), Host()};
  base.back().isa &= ~uint32_t{kIsaAvx512};
  std::vector<DeviceInfo> devices;
  for (const int model : {167, 207})
    for (DeviceInfo d : base) {
      d.vendor = "GenuineIntel";
      d.family = 6;
      d.model = model;
      devices.push_back(d);
    }
  for (DeviceInfo d : base) {
    d.vendor = "AuthenticAMD";
    devices.push_back(d);
  }
  return devices;
}

// Calls check(key, device, default schedule) for every rule device, shape and layout
// (A and B each as stored or transposed), with per-call and constant weights; each key
// must be of class `cls` and have a default schedule.
template <class Check>
void ForEveryRuleKey(std::span<const std::array<int64_t, 3>> shapes, ShapeClass cls, Check check) {
  for (const DeviceInfo& d : RuleDevices())
    for (const auto& [m, n, k] : shapes)
      for (int t = 0; t < 8; ++t) {
        OpKey key = OpKey::Gemm(m, n, k, t & 1, (t >> 1) & 1);
        key.constant_weights = (t >> 2) != 0;
        ASSERT_EQ(ShapeClassOf(key), cls) << key.ToString();
        auto s = DefaultSchedule(key, d);
        ASSERT_TRUE(s.ok()) << s.status().ToString();
        SCOPED_TRACE(fmt::format("{} on {} {} (isa {}, {} threads)", key.ToString(), d.vendor, d.fingerprint, d.isa,
                                 d.threads));
        check(key, d, *s);
      }
}

// Where the fitted 8x32 writes C rows first on an Intel AVX-512 host: its first
// depth block min(k, 384) at most 256 deep, that depth by min(n, 2048) columns of B
// within half of L2, and C beyond L2, written out here from GemmRowsOrderFits.
bool RowsFirstHolds(const OpKey& key, const DeviceInfo& d) {
  if (d.vendor != "GenuineIntel" || !(d.isa & kIsaAvx512) || d.l2_bytes <= 0) return false;
  const int64_t depth = std::min<int64_t>(key.k(), 384);
  return depth <= 256 && depth * std::min<int64_t>(key.n(), 2048) * 4 <= d.l2_bytes / 2 &&
         key.m() * key.n() * 4 > d.l2_bytes;
}

// The own tiles' share of the large class (GemmTileDefault): constant weights, m
// above 16, on an AVX-512 host, with n of 512 or more on an Intel host (256 or more
// with k of at most 96 where RowsFirstHolds), or with less than 80 MFLOP of work on
// more than one thread.
bool TileRuleHolds(const OpKey& key, const DeviceInfo& d) {
  if (!key.constant_weights || !(d.isa & kIsaAvx512) || key.m() <= 16) return false;
  const bool narrow_rows_first = key.n() >= 256 && key.k() <= 96 && RowsFirstHolds(key, d);
  return (d.vendor == "GenuineIntel" && (key.n() >= 512 || narrow_rows_first)) || (d.threads > 1 && key.Flops() < 80e6);
}

// Its deep-k share (GemmDeepKDefaultHolds): constant weights on an Intel AVX-512
// host whose L2 size is known, m of 64 or more, n of 512 or more and k above 384,
// where the 14x32 computes at most 1.06x the rows of the 8x32 (m padded to 14 and to
// 8), run the 14x32 tile with the deep-k depth block (GemmDeepKc) and the declared mc.
bool DeepKRuleHolds(const OpKey& key, const DeviceInfo& d) {
  const int64_t rows14 = (key.m() + 13) / 14 * 14, rows8 = (key.m() + 7) / 8 * 8;
  return key.constant_weights && d.vendor == "GenuineIntel" && (d.isa & kIsaAvx512) && d.l2_bytes > 0 &&
         key.m() >= 64 && key.n() >= 512 && key.k() > 384 && rows14 * 100 <= rows8 * 106;
}

// Its AMD share by m (GemmLeastPaddingHolds): constant weights, m of 17 to 47 and n of
// 512 or more on an AMD AVX-512 host, on any thread budget, run the tile of 14, 8 or 6
// rows that pads m least (more rows on ties), written out here for the m of the test's
// shapes; nullptr elsewhere.
const char* LeastPaddingTile(const OpKey& key, const DeviceInfo& d) {
  static const std::map<int64_t, const char*> kTileOfM = {
      {17, "cpu_f32_gemm_6x64__avx512"},  {20, "cpu_f32_gemm_8x32__avx512"}, {24, "cpu_f32_gemm_8x32__avx512"},
      {25, "cpu_f32_gemm_14x32__avx512"}, {29, "cpu_f32_gemm_6x64__avx512"}, {31, "cpu_f32_gemm_8x32__avx512"},
      {32, "cpu_f32_gemm_8x32__avx512"},  {40, "cpu_f32_gemm_8x32__avx512"}, {41, "cpu_f32_gemm_14x32__avx512"},
      {47, "cpu_f32_gemm_8x32__avx512"}};
  if (!key.constant_weights || !(d.isa & kIsaAvx512) || d.vendor != "AuthenticAMD" || key.m() <= 16 ||
      key.m() > 47 || key.n() < 512)
    return nullptr;
  return kTileOfM.at(key.m());
}

// Per-call weights of a large key on an AVX-512 host where oneDNN may use the
// thread budget (one thread, or passive OpenMP waiting): 1 where oneDNN's fitted
// threads are at least the own rule's (ThreadsForWork), 0 where they are fewer, -1
// for every other key and host.
int PerCallOnednnThreadsSuffice(const OpKey& key, const DeviceInfo& d) {
  const KernelVariant* v = FindKernelVariant("cpu_f32_gemm_onednn");
  if (!v || key.constant_weights || !(d.isa & kIsaAvx512) || !(d.threads == 1 || testing::OmpWaitsPassively()) ||
      ShapeClassOf(key) != ShapeClass::kLarge)
    return -1;
  return VariantDefaultSchedule(*v, key, d).params[v->ParamIndex("threads")] >= cpu::ThreadsForWork(key, d);
}

// An Intel CPU of family 6 model 207 (kIntelEmeraldRapidsModel), whose rules differ
// from model 167's.
bool EmeraldRapids(const DeviceInfo& d) { return d.vendor == "GenuineIntel" && d.family == 6 && d.model == 207; }

// Per-call `nn` keys of that kind (PerCallOnednnThreadsSuffice not -1) with n > 64:
// on an AMD host those with m of at most 31 and rows of B (n floats) a multiple of 4
// KiB, on an Intel host those with m of at most 31, or 64 with such rows (but on
// family 6 model 207 with one thread m of at most 31 only with such rows), run the own
// 8x32 tile (PerCallOwnTile), written out here from its rule.
bool OwnTileNnHolds(const OpKey& key, const DeviceInfo& d) {
  if (PerCallOnednnThreadsSuffice(key, d) == -1 || key.trans_a || key.trans_b || key.n() <= 64) return false;
  const bool aliased = key.n() * 4 % 4096 == 0;
  if (d.vendor == "AuthenticAMD") return key.m() <= 31 && aliased;
  if (EmeraldRapids(d) && d.threads == 1 && key.m() <= 31) return aliased;
  return key.m() <= 31 || (key.m() <= 64 && aliased);
}

// Per-call keys on an Intel host where PerCallOnednnThreadsSuffice, A not transposed,
// and either RowsFirstHolds with B transposed or n above 512, or more than one thread
// with k of at most 256 and m*n*k of at most 2^27, or one thread with k of at most 64
// and n of 128 to 1024 (of 128 or more on family 6 model 207), run the own 8x32 tile,
// written out here from its rule.
bool ShallowOwnTileHolds(const OpKey& key, const DeviceInfo& d) {
  if (PerCallOnednnThreadsSuffice(key, d) != 1 || key.trans_a) return false;
  const bool intel = d.vendor == "GenuineIntel";
  const bool shallow_threads =
      intel && d.threads > 1 && key.k() <= 256 && key.m() * key.n() * key.k() <= (int64_t{1} << 27);
  const bool shallow_one_thread =
      intel && d.threads == 1 && key.k() <= 64 && key.n() >= 128 && (key.n() <= 1024 || EmeraldRapids(d));
  return ((key.trans_b || key.n() > 512) && RowsFirstHolds(key, d)) || shallow_threads || shallow_one_thread;
}

// oneDNN's device and weights condition: AVX-512 and the thread budget usable (one
// thread, or passive OpenMP waiting); constant weights, or per-call weights where
// PerCallOnednnThreadsSuffice and not OwnTileNnHolds.
bool OnednnRuleHolds(const OpKey& key, const DeviceInfo& d) {
  if (!(d.isa & kIsaAvx512) || !(d.threads == 1 || testing::OmpWaitsPassively())) return false;
  return key.constant_weights ||
         (PerCallOnednnThreadsSuffice(key, d) == 1 && !OwnTileNnHolds(key, d) && !ShallowOwnTileHolds(key, d));
}

// The measured rule for large keys (cpu_kernels.cc, gemm_params.h, gemm_library.h):
// the own tile of LeastPaddingTile where it names one; the 14x32 with deep k where
// DeepKRuleHolds; the own 8x32 tile for wide
// constant-weights keys on an Intel AVX-512 host and for those of less than 80 MFLOP
// on more than one thread; else
// oneDNN's matmul on an AVX-512 host where it may use the thread budget, with its
// weights reordered once for constant-weights keys, and as stored for per-call keys
// where it runs as many threads as the own rule (through dnnl_sgemm where neither
// operand is transposed and n > 64, or only B is, with k <= 128 or, on an Intel host,
// m >= 512 and n >= 256); the own 8x32 tile for the per-call keys where OwnTileNnHolds or
// ShallowOwnTileHolds and those whose oneDNN threads are fewer; OpenBLAS for every
// other large key.
// Checked on the host, the same host seen as AVX2-only and with one thread, each as an
// Intel and as an AMD CPU, on wide and narrow keys (ctest runs it again with passive
// OpenMP waiting: library_rules_with_passive_openmp).
TEST(CpuGemmTable, TheBuiltInDefaultOfLargeKeysFollowsTheMeasuredRule) {
  const bool onednn = FindKernelVariant("cpu_f32_gemm_onednn") != nullptr;
  const bool openblas = FindKernelVariant("cpu_f32_gemm_openblas") != nullptr;
  if (!onednn && !openblas) GTEST_SKIP() << "this build has no library variants";
  const std::array<int64_t, 3> shapes[] = {{128, 768, 768}, {17, 512, 4096}, {2048, 4096, 1024}, {3136, 511, 64},
                                           {196, 256, 2304},  {500, 77, 128},  {40, 113, 2374},    {25, 1161, 1469},
                                           {2000, 64, 256},  {20, 4096, 1024}, {29, 2048, 768},   {31, 600, 4000},
                                           {41, 512, 1000},  {47, 3072, 3072}, {20, 511, 4096},   {48, 4096, 4096},
                                           {31, 1024, 2000}, {32, 1024, 2048}, {24, 1056, 1000},  {24, 1025, 1000},
                                           {64, 1000, 1000}, {64, 1024, 1000}, {65, 1024, 1000},  {60, 64, 1000},
                                           {60, 65, 1000},   {511, 300, 300},  {512, 300, 300},
                                           {3136, 513, 64},  {1024, 1024, 256}, {1024, 1024, 257}, {1024, 1025, 256},
                                           {513, 1024, 64},  {511, 1024, 64},   {3136, 256, 64},   {3136, 255, 64},
                                           {2048, 256, 64},  {2049, 256, 64},   {3136, 256, 96},   {3136, 256, 97},
                                           {600, 256, 700},  {600, 255, 700},   {4000, 100, 1000},
                                           {66, 512, 385},   {63, 512, 1000},   {66, 511, 1000},   {66, 512, 384},
                                           {64, 512, 1000},  {128, 4096, 4096}, {112, 4096, 4096}, {141, 1024, 1000},
                                           {157, 1024, 1000}, {1024, 1024, 1500}, {3000, 5000, 600},
                                           {579, 537, 33},   {92, 519, 256},    {92, 519, 257},    {512, 1024, 256},
                                           {512, 1025, 256}, {1039, 4380, 139}, {623, 458, 64},
                                           {623, 458, 65},   {623, 127, 64},    {623, 128, 64},    {623, 1024, 64},
                                           {623, 1025, 64},  {40, 2000, 48},   {300, 1500, 30}};
  ForEveryRuleKey(shapes, ShapeClass::kLarge, [&](const OpKey& key, const DeviceInfo& d, const Schedule& s) {
    if (const char* tile = LeastPaddingTile(key, d)) {
      EXPECT_STREQ(s.variant->name, tile) << s.ToString();
      return;
    }
    if (DeepKRuleHolds(key, d)) {
      EXPECT_STREQ(s.variant->name, "cpu_f32_gemm_14x32__avx512") << s.ToString();
      EXPECT_EQ(s.params[s.variant->ParamIndex("kc")], cpu::GemmDeepKc(14, 32, key.m(), key.k(), d.l2_bytes))
          << s.ToString();
      EXPECT_GT(s.params[s.variant->ParamIndex("kc")], 384) << s.ToString();
      EXPECT_EQ(s.params[s.variant->ParamIndex("mc")], 112) << s.ToString();
      return;
    }
    if (TileRuleHolds(key, d) ||
        (onednn &&
         (PerCallOnednnThreadsSuffice(key, d) == 0 || OwnTileNnHolds(key, d) || ShallowOwnTileHolds(key, d)))) {
      EXPECT_STREQ(s.variant->name, "cpu_f32_gemm_8x32__avx512") << s.ToString();
      return;
    }
    const bool want_onednn = onednn && OnednnRuleHolds(key, d);
    const char* want = want_onednn ? "cpu_f32_gemm_onednn" : openblas ? "cpu_f32_gemm_openblas" : nullptr;
    if (!want) return;  // oneDNN only, and not preferred here: the own kernels
    EXPECT_STREQ(s.variant->name, want) << s.ToString();
    if (!want_onednn) return;
    EXPECT_EQ(s.params[s.variant->ParamIndex("reorder_b")], key.constant_weights ? 1 : 0) << s.ToString();
    // dnnl_sgemm: per-call nn with n > 64, and per-call nt with rows of B (k floats) of
    // at most 512 B or, on an Intel host, m of 512 or more and n of 256 or more.
    const bool intel_wide = d.vendor == "GenuineIntel" && key.m() >= 512 && key.n() >= 256;
    const bool sgemm = !key.constant_weights && !key.trans_a &&
                       ((!key.trans_b && key.n() > 64) || (key.trans_b && (key.k() <= 128 || intel_wide)));
    EXPECT_EQ(s.params[s.variant->ParamIndex("api")], sgemm ? 1 : 0) << s.ToString();
  });
}

// The threads of a variant's default schedule for the key (0: no such variant).
int FittedThreads(const char* variant, const OpKey& key, const DeviceInfo& d) {
  const KernelVariant* v = FindKernelVariant(variant);
  return v ? VariantDefaultSchedule(*v, key, d).params[v->ParamIndex("threads")] : 0;
}

// Per-call `nn` decode steps of 5 to 16 tokens on an AVX-512 host: dnnl_sgemm
// (OnednnSkinnySgemmFits) on an Intel host where n is above 16 and rows of B are at
// most 2 KiB (3 KiB where B is at most 1 MiB), whatever the work, with one thread, or
// with two where the own 8x32 tile and oneDNN both fit one; else, with m*n*k above
// 2^21 on a one-thread budget, above 2^24 on two (with passive OpenMP waiting), and
// n > 64, on an AMD host where rows of B are more than 128 B from every multiple of
// 4 KiB, on an Intel host where they are longer than 32 KiB, written out here from its
// rule.
bool SkinnySgemmRuleHolds(const OpKey& key, const DeviceInfo& d) {
  if (!(d.isa & kIsaAvx512) || d.threads > 2 || key.constant_weights || key.trans_a || key.trans_b ||
      (d.threads == 2 && !testing::OmpWaitsPassively()))
    return false;
  const int64_t row_bytes = key.n() * 4, min_work = int64_t{1} << (d.threads == 1 ? 21 : 24);
  if (key.m() < 5 || key.m() > 16) return false;
  const bool narrow = row_bytes <= 2048 || (row_bytes <= 3072 && key.n() * key.k() * 4 <= (1 << 20));
  if (d.vendor == "GenuineIntel" && key.n() > 16 && narrow &&
      (d.threads == 1 || (FittedThreads("cpu_f32_gemm_8x32__avx512", key, d) == 1 &&
                          FittedThreads("cpu_f32_gemm_onednn", key, d) == 1)))
    return true;
  if (key.m() * key.n() * key.k() <= min_work) return false;
  if (key.n() <= 64) return false;
  if (d.vendor == "GenuineIntel") return row_bytes > 32768;
  return row_bytes % 4096 > 128 && row_bytes % 4096 < 4096 - 128;
}

// Where OpenBLAS's core runs AVX-512 kernels, on an Intel host: the keys of
// SkinnySgemmRuleHolds with k of at most 63 and m*n*k below 2^15, and per-call `nt`
// decode steps of 5 to 16 tokens (A as stored) with n above 16, k of 32 to 64 and
// less than 100 kFLOP: OpenBLAS on one thread (OpenblasTinyFits), written out here
// from its rule.
bool TinySkinnyOpenblasRuleHolds(const OpKey& key, const DeviceInfo& d) {
#ifdef CLIFFGUARD_WITH_OPENBLAS
  if (d.vendor != "GenuineIntel" || !(cpu::OpenblasCoreIsa(cpu::OpenblasCore()) & kIsaAvx512)) return false;
  const double flops = 2.0 * key.m() * key.n() * key.k();
  if (!key.trans_b) return key.k() <= 63 && flops < 65536 && SkinnySgemmRuleHolds(key, d);
  return (d.isa & kIsaAvx512) && !key.constant_weights && !key.trans_a && key.m() >= 5 && key.m() <= 16 &&
         key.n() > 16 && key.k() >= 32 && key.k() <= 64 && flops < 1e5;
#else
  return false;
#endif
}

// Per-call `nt` decode steps (A as stored) of 5 to 16 tokens with n above 16 and k of
// at most 64 on an Intel AVX-512 host run the own 8x32 tile (GemmShallowNtDecodeHolds),
// on any thread budget, with or without the library variants, except that OpenBLAS
// takes those with k of 32 or more and less than 100 kFLOP where its core runs
// AVX-512 kernels (OpenblasTinyFits); other per-call `nt` decode keys do not (`nn`
// ones of 5 to 16 tokens run the tile or oneDNN by other rules). Written out here from
// its rule.
TEST(CpuGemmTable, ShallowNtDecodeStepsRunTheOwnTile) {
  const std::array<int64_t, 3> shapes[] = {{12, 1303, 64}, {12, 1303, 65}, {5, 600, 30},  {4, 600, 30},
                                           {16, 17, 30},   {16, 16, 30},   {9, 11567, 34}, {16, 4592, 16},
                                           {16, 17, 32},   {12, 64, 64},   {12, 66, 64}};  // OpenBLAS's k and work
  int own = 0, openblas = 0;
  ForEveryRuleKey(shapes, ShapeClass::kSkinny, [&](const OpKey& key, const DeviceInfo& d, const Schedule& s) {
    const bool holds = !key.constant_weights && !key.trans_a && key.trans_b && d.vendor == "GenuineIntel" &&
                       (d.isa & kIsaAvx512) && key.m() >= 5 && key.n() > 16 && key.k() <= 64;
    const bool tiny = TinySkinnyOpenblasRuleHolds(key, d);
    own += holds && !tiny;
    openblas += tiny;
    if (tiny) {
      EXPECT_STREQ(s.variant->name, "cpu_f32_gemm_openblas") << s.ToString();
      EXPECT_EQ(s.params[s.variant->ParamIndex("threads")], 1) << s.ToString();
    } else if (holds) {
      EXPECT_STREQ(s.variant->name, "cpu_f32_gemm_8x32__avx512") << s.ToString();
    } else if (!key.constant_weights && key.trans_b) {
      EXPECT_STRNE(s.variant->name, "cpu_f32_gemm_8x32__avx512") << s.ToString();
    }
  });
  if (Host().isa & kIsaAvx512) EXPECT_GT(own, 0);
#ifdef CLIFFGUARD_WITH_OPENBLAS
  if ((Host().isa & kIsaAvx512) && (cpu::OpenblasCoreIsa(cpu::OpenblasCore()) & kIsaAvx512)) EXPECT_GT(openblas, 0);
#endif
}

// Per-call `nt` decode steps of 5 to 12 tokens on an AMD AVX-512 host on one thread,
// A (m x k) of at most 32 KiB, B of at most 4 MiB, k of at least 128, and of 2 and 3
// tokens with n above 16 on an Intel host of family 6 model 207 on one thread:
// dnnl_sgemm (OnednnSkinnyNtSgemmFits), written out here from its rule.
bool SkinnyNtSgemmRuleHolds(const OpKey& key, const DeviceInfo& d) {
  if (!(d.isa & kIsaAvx512) || d.threads != 1 || key.constant_weights || key.trans_a || !key.trans_b) return false;
  if (EmeraldRapids(d)) return key.m() >= 2 && key.m() <= 3 && key.n() > 16;
  if (d.vendor != "AuthenticAMD") return false;
  return key.m() >= 5 && key.m() <= 12 && key.m() * key.k() * 4 <= 32768 && key.n() * key.k() * 4 <= 4194304 &&
         key.k() >= 128;
}

// Decode steps: oneDNN (weights reordered once) where the same rule holds and m is
// at least 9 (one thread, or weights of 2^21 elements and more) or 16 (more threads,
// smaller weights), except that on an AVX-512 host constant weights with m of 9 to 16
// and n of a panel or more run the packed 8x32 tile (oneDNN keeps m of 9 to 11 with
// weights of 2^21 elements and more on one thread), on an AMD host m of 9 to 14 the
// packed 14x32 tile, whatever the weights and threads; the own kernels below, with
// per-call weights, for weights narrower than 17 columns and for little work
// (m*n*k <= 2^21). Constant weights with m <= 8 (AVX2: 6) and n of a vector or more
// run the small-m kernels on packed panels, on every host with AVX2. Per-call keys:
// dnnl_sgemm where SkinnySgemmRuleHolds (nn) or SkinnyNtSgemmRuleHolds (nt), but
// OpenBLAS on one thread where TinySkinnyOpenblasRuleHolds.
TEST(CpuGemmTable, TheBuiltInDefaultOfDecodeKeysFollowsTheMeasuredRule) {
  const bool onednn = FindKernelVariant("cpu_f32_gemm_onednn") != nullptr;
  if (!onednn) GTEST_SKIP() << "this build has no oneDNN variant";
  struct Case {
    int64_t m, n, k;
    int min_threads, max_threads;  // the thread budgets that give it to oneDNN (0, 0: none)
  };
  const Case cases[] = {{1, 4096, 4096, 0, 0},   {3, 4096, 4096, 0, 0}, {4, 768, 768, 0, 0},
                        {8, 4096, 4096, 0, 0},   {4, 768, 3072, 0, 0},  {9, 4096, 4096, 1, 1},
                        {9, 768, 768, 0, 0},     {15, 2048, 1023, 0, 0}, {16, 768, 768, 0, 0},
                        {16, 11008, 4096, 0, 0}, {16, 16, 4096, 0, 0},  {8, 64, 64, 0, 0},
                        {12, 2784, 360, 0, 0},   {16, 2048, 1024, 0, 0}, {10, 1000, 3000, 1, 1},
                        {7, 992, 1024, 0, 0},    {6, 1624, 3058, 0, 0},  {7, 512, 2368, 0, 0},
                        {8, 2000, 1048, 0, 0},   {8, 2000, 1049, 0, 0},  // either side of 2^24
                        {11, 768, 523, 0, 0},    {8, 768, 1024, 0, 0},  {8, 768, 1025, 0, 0},  // A of 32 KiB
                        {5, 2048, 512, 0, 0},    {5, 2049, 512, 0, 0},  {12, 256, 512, 0, 0},  // B of 4 MiB
                        {13, 256, 512, 0, 0},
                        {12, 600, 128, 0, 0},    {12, 600, 127, 0, 0},  // rows of B of 512 B
                        {12, 8192, 4096, 0, 0},  {12, 8193, 4096, 0, 0},  // rows of B of 32 KiB
                        {12, 64, 4096, 0, 0},    {9, 80, 4096, 0, 0},     {12, 32, 8192, 0, 0},
                        {12, 512, 4096, 0, 0},   {12, 513, 4096, 0, 0},  // rows of B of 2 KiB
                        {6, 35, 4245, 0, 0},     {10, 53, 184, 0, 0},   {14, 27, 74, 0, 0},  // m*n*k below 2^21
                        {7, 717, 342, 0, 0},     {7, 768, 341, 0, 0},   {7, 768, 342, 0, 0},  // B either side of 1 MiB
                        {6, 769, 300, 0, 0},  // rows of B over 3 KiB
                        {2, 345, 676, 0, 0},     {3, 79, 76, 0, 0},     {3, 16, 4096, 0, 0},
                        {2, 17, 4096, 0, 0},  // 2 and 3 tokens, n either side of the tall kernels
                        {14, 27, 63, 0, 0},      {8, 26, 64, 0, 0},     {10, 103, 31, 0, 0},
                        {10, 104, 32, 0, 0}};  // OpenBLAS's k and work
  int nt_sgemm = 0, tiny = 0;
  for (const DeviceInfo& d : RuleDevices())
    for (const Case& c : cases)
      for (bool trans_b : {false, true})
        for (bool constant : {false, true}) {
          OpKey key = OpKey::Gemm(c.m, c.n, c.k, false, trans_b);
          key.constant_weights = constant;
          ASSERT_EQ(ShapeClassOf(key), ShapeClass::kSkinny);
          auto s = DefaultSchedule(key, d);
          ASSERT_TRUE(s.ok());
          SCOPED_TRACE(fmt::format("{} on {} (isa {}, {} threads)", key.ToString(), d.fingerprint, d.isa, d.threads));
          const bool one_panel = constant && d.vendor == "AuthenticAMD" && (d.isa & kIsaAvx512) && c.m > 8 &&
                                 c.m <= 14 && c.n >= 32;
          const bool want_onednn = !one_panel && c.min_threads <= d.threads && d.threads <= c.max_threads &&
                                   OnednnRuleHolds(key, d);
          const bool want_openblas = TinySkinnyOpenblasRuleHolds(key, d);
          const bool want_sgemm =
              (SkinnySgemmRuleHolds(key, d) && !want_openblas) || SkinnyNtSgemmRuleHolds(key, d);
          nt_sgemm += SkinnyNtSgemmRuleHolds(key, d);
          tiny += want_openblas;
          if (want_openblas) {
            EXPECT_STREQ(s->variant->name, "cpu_f32_gemm_openblas") << s->ToString();
            EXPECT_EQ(s->params[s->variant->ParamIndex("threads")], 1) << s->ToString();
          } else if (want_onednn || want_sgemm) {
            EXPECT_STREQ(s->variant->name, "cpu_f32_gemm_onednn") << s->ToString();
            EXPECT_EQ(s->params[s->variant->ParamIndex("reorder_b")], want_onednn ? 1 : 0) << s->ToString();
            EXPECT_EQ(s->params[s->variant->ParamIndex("api")], want_sgemm ? 1 : 0) << s->ToString();
          } else {
            EXPECT_EQ(std::string_view(s->variant->name).find("_onednn"), std::string_view::npos) << s->ToString();
            EXPECT_EQ(std::string_view(s->variant->name).find("_openblas"), std::string_view::npos) << s->ToString();
          }
          const bool tile = constant && (d.isa & kIsaAvx512) && c.m > 8 && c.m <= 16 && c.n >= 32 && !want_onednn;
          const char* want_tile = one_panel ? "cpu_f32_gemm_14x32__avx512" : "cpu_f32_gemm_8x32__avx512";
          if (tile && FindKernelVariant(want_tile)) EXPECT_STREQ(s->variant->name, want_tile) << s->ToString();
          const int64_t packed_max_m = (d.isa & kIsaAvx512) ? 8 : 6;  // kGemvPackedMinNv's tile in the registers
          const bool packed_panels = constant && c.m <= packed_max_m && c.n >= 16 && (d.isa & kIsaAvx2);
          EXPECT_EQ(std::string_view(s->variant->name).starts_with("cpu_f32_gemv_packed__"), packed_panels)
              << s->ToString();
        }
  if ((Host().isa & kIsaAvx512) != 0) EXPECT_GT(nt_sgemm, 0);  // the AMD view of the host's one-thread budget
#ifdef CLIFFGUARD_WITH_OPENBLAS
  if ((Host().isa & kIsaAvx512) != 0 && (cpu::OpenblasCoreIsa(cpu::OpenblasCore()) & kIsaAvx512))
    EXPECT_GT(tiny, 0);  // the Intel view of the host's one-thread budget
#endif
}

// Small keys (m and n above 16, m*n*k at most 2^21): OpenBLAS on one thread where
// TinyOpenblasRuleHolds, dnnl_sgemm on oneDNN's fitted threads where
// SmallSgemmRuleHolds, oneDNN's matmul where SmallNtMatmulRuleHolds, else an own
// kernel. Checked on the rule devices (and, under ctest's passive rerun, with oneDNN's
// threads usable) on keys either side of 1 MFLOP, of the thread condition (128 x 128
// x 128: 4.2 MFLOP, two own threads on a budget of two), of the matmul's k and m and of
// OpenBLAS's k on Intel.
TEST(CpuGemmTable, TheBuiltInDefaultOfSmallKeysFollowsTheMeasuredRule) {
  const bool onednn = FindKernelVariant("cpu_f32_gemm_onednn") != nullptr;
  if (!onednn) GTEST_SKIP() << "this build has no oneDNN variant";
  const std::array<int64_t, 3> shapes[] = {{49, 64, 64},   {196, 60, 128}, {30, 100, 90},   {17, 17, 17},
                                           {128, 128, 128}, {120, 48, 200}, {61, 64, 128}, {62, 64, 128},  // 0.999, 1.016 MFLOP
                                           {40, 64, 47},    {40, 64, 48},   {63, 64, 32},  {64, 64, 32},   // k and m bounds
                                           {40, 64, 127},   {40, 64, 128}};  // OpenBLAS's k bound on Intel
  int sgemm = 0, matmul = 0;
  ForEveryRuleKey(shapes, ShapeClass::kSmall, [&](const OpKey& key, const DeviceInfo& d, const Schedule& s) {
    if (TinyOpenblasRuleHolds(key, d)) {
      EXPECT_STREQ(s.variant->name, "cpu_f32_gemm_openblas") << s.ToString();
      EXPECT_EQ(s.params[s.variant->ParamIndex("threads")], 1) << s.ToString();
    } else if (const bool sg = SmallSgemmRuleHolds(key, d); sg || SmallNtMatmulRuleHolds(key, d)) {
      ++(sg ? sgemm : matmul);
      EXPECT_STREQ(s.variant->name, "cpu_f32_gemm_onednn") << s.ToString();
      EXPECT_EQ(s.params[s.variant->ParamIndex("api")], sg ? 1 : 0) << s.ToString();  // dnnl_sgemm, else the matmul
      EXPECT_EQ(s.params[s.variant->ParamIndex("reorder_b")], 0) << s.ToString();
      EXPECT_EQ(s.params[s.variant->ParamIndex("threads")], 1) << s.ToString();
    } else {
      EXPECT_EQ(std::string_view(s.variant->name).find("_onednn"), std::string_view::npos) << s.ToString();
      EXPECT_EQ(std::string_view(s.variant->name).find("_openblas"), std::string_view::npos) << s.ToString();
    }
  });
  if ((Host().isa & kIsaAvx512) != 0) EXPECT_GT(sgemm, 0);  // the host's one-thread budget
  if ((Host().isa & kIsaAvx512) != 0) EXPECT_GT(matmul, 0);  // the Intel view of the host
}

}  // namespace
}  // namespace cliffguard
