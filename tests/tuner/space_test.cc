// SearchSpace and features on a fake kernel table (no real kernels needed).
#include "cliffguard/tuner/space.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "cliffguard/tuner/features.h"

namespace cliffguard::tuner {
namespace {

constexpr int32_t kMcA[] = {4, 6, 8, 12, 16};
constexpr int32_t kKcA[] = {16, 32, 64};
constexpr int32_t kThreadsA[] = {1, 2, 3, 4};
constexpr int32_t kMcB[] = {8, 16, 24};
constexpr int32_t kKcB[] = {32, 64};
constexpr int32_t kUnrollB[] = {1, 2, 4};
constexpr int32_t kUnsorted[] = {4, 2};

const ParamSpec kParamsA[] = {{"mc", kMcA, 8, "rows of A per block"},
                              {"kc", kKcA, 32, "depth per block"},
                              {"threads", kThreadsA, 1, "worker threads"}};
const ParamSpec kParamsB[] = {{"mc", kMcB, 16, "rows of A per block"},
                              {"kc", kKcB, 64, "depth per block"},
                              {"unroll_k", kUnrollB, 2, "k unroll"}};
const ParamSpec kParamsBad[] = {{"mc", kUnsorted, 4, "unsorted"}};

// mc % mr == 0, threads <= device threads, mc * kc <= 512.
Status CheckA(const KernelVariant& v, const OpKey&, const ParamValues& p, const DeviceInfo& d) {
  if (p[0] % v.config.gemm.mr != 0) return InvalidArgument("mc % mr");
  if (p[2] > d.threads) return InvalidArgument("threads");
  if (p[0] * p[1] > 512) return InvalidArgument("mc*kc");
  return Status::Ok();
}

const KernelVariant kVariants[] = {
    {"fake_gemm_4x8__a", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kParamsA, nullptr, CheckA, nullptr, {.gemm = nullptr}, {.gemm = {4, 8}}},
    {"fake_gemm_8x8__b", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kParamsB, nullptr, nullptr, nullptr, {.gemm = nullptr}, {.gemm = {8, 8}}},
    {"fake_gemm_8x8__avx512", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaAvx512, kParamsB, nullptr, nullptr, nullptr, {.gemm = nullptr}, {.gemm = {8, 8}}},
    {"fake_gemm_1x1__noparams", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, {}, nullptr, nullptr, nullptr, {.gemm = nullptr}, {.gemm = {1, 1}}},
};
const KernelVariant kBad = {"fake_bad", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kParamsBad, nullptr, nullptr, nullptr, {.gemm = nullptr}, {.gemm = {1, 1}}};

DeviceInfo TestDevice() {
  DeviceInfo d;
  d.backend = Backend::kCpu;
  d.name = "test cpu";
  d.arch = "avx2";
  d.isa = kIsaScalar | kIsaAvx2;
  d.threads = 2;
  d.l1d_bytes = 32 << 10;
  d.l2_bytes = 1 << 20;
  d.l3_bytes = 32 << 20;
  d.fingerprint = "cpu-test";
  return d;
}

std::vector<const KernelVariant*> AllFakes() { return {&kVariants[0], &kVariants[1], &kVariants[2], &kVariants[3]}; }

SearchSpace MakeSpace(const OpKey& key = OpKey::Gemm(10, 20, 30)) {
  auto vs = AllFakes();
  auto s = SearchSpace::Create(key, TestDevice(), vs);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// Every valid schedule by brute force, through the public CheckSchedule.
std::set<std::string> BruteForceValid(const OpKey& key) {
  std::set<std::string> out;
  for (const KernelVariant* v : AllFakes()) {
    std::vector<size_t> idx(v->params.size(), 0);
    while (true) {
      Schedule s{v, {}};
      for (size_t i = 0; i < idx.size(); ++i) s.params[i] = v->params[i].values[idx[i]];
      if (CheckSchedule(s, key, TestDevice()).ok()) out.insert(s.ToString());
      size_t i = 0;
      for (; i < idx.size(); ++i) {
        if (++idx[i] < v->params[i].values.size()) break;
        idx[i] = 0;
      }
      if (i == idx.size()) break;
    }
  }
  return out;
}

TEST(SearchSpaceTest, SizeCountsVariantsAndDeclines) {
  SearchSpace s = MakeSpace();
  EXPECT_EQ(s.num_variants(), 3);
  ASSERT_EQ(s.declined().size(), 1u);
  EXPECT_NE(s.declined()[0].find("fake_gemm_8x8__avx512"), std::string::npos);
  EXPECT_EQ(s.size(), 5u * 3 * 4 + 3 * 2 * 3 + 1);
  EXPECT_EQ(s.variant_size(0), 60u);
  EXPECT_EQ(s.variant_size(2), 1u);
  const auto valid = BruteForceValid(s.key());
  EXPECT_DOUBLE_EQ(s.valid_fraction(), static_cast<double>(valid.size()) / s.size());
}

TEST(SearchSpaceTest, IdAndScheduleRoundTrip) {
  SearchSpace s = MakeSpace();
  for (uint64_t id = 0; id < s.size(); ++id) {
    const Knobs k = s.FromId(id);
    EXPECT_EQ(s.Id(k), id);
    const Schedule sch = s.ToSchedule(k);
    auto back = s.FromSchedule(sch);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, k);
    EXPECT_EQ(s.IsValid(k), CheckSchedule(sch, s.key(), s.device()).ok()) << sch.ToString();
  }
}

TEST(SearchSpaceTest, GridOrderVisitsEveryPointOnceAndSpreadsPrefix) {
  SearchSpace s = MakeSpace();
  std::set<uint64_t> seen;
  std::set<int> variants_in_prefix;
  for (uint64_t i = 0; i < s.size(); ++i) {
    const uint64_t id = s.GridId(i);
    ASSERT_LT(id, s.size());
    EXPECT_TRUE(seen.insert(id).second) << "grid id " << id << " repeated at " << i;
    if (i < 12) variants_in_prefix.insert(s.FromId(id).variant);
  }
  EXPECT_EQ(seen.size(), s.size());
  EXPECT_GE(variants_in_prefix.size(), 2u);  // a short prefix is not one corner
}

TEST(SearchSpaceTest, EnumerationYieldsExactlyTheValidSchedules) {
  SearchSpace s = MakeSpace();
  std::set<std::string> from_grid;
  for (uint64_t i = 0; i < s.size(); ++i) {
    const Knobs k = s.FromId(s.GridId(i));
    if (s.IsValid(k)) from_grid.insert(s.ToSchedule(k).ToString());
  }
  EXPECT_EQ(from_grid, BruteForceValid(s.key()));
  EXPECT_FALSE(from_grid.empty());
}

TEST(SearchSpaceTest, SampleValidIsValidAndCoversTheValidSet) {
  SearchSpace s = MakeSpace();
  std::mt19937_64 rng(7);
  std::map<uint64_t, int> hits;
  const int n = 8000;
  for (int i = 0; i < n; ++i) {
    auto k = s.SampleValid(rng);
    ASSERT_TRUE(k.has_value());
    ASSERT_TRUE(CheckSchedule(s.ToSchedule(*k), s.key(), s.device()).ok()) << s.ToSchedule(*k).ToString();
    ++hits[s.Id(*k)];
  }
  const size_t n_valid = BruteForceValid(s.key()).size();
  EXPECT_EQ(hits.size(), n_valid);
  const double expected = static_cast<double>(n) / n_valid;
  for (const auto& [id, c] : hits) EXPECT_GT(c, expected * 0.5) << "point " << id << " under-sampled";
}

TEST(SearchSpaceTest, NeighboursAreValidAndNear) {
  SearchSpace s = MakeSpace();
  std::mt19937_64 rng(3);
  int switched = 0, total = 0;
  for (uint64_t id = 0; id < s.size(); ++id) {
    const Knobs k = s.FromId(id);
    if (!s.IsValid(k)) continue;
    for (int t = 0; t < 40; ++t) {
      auto nb = s.Neighbour(k, rng, 0.1);
      if (!nb) continue;
      ++total;
      EXPECT_FALSE(*nb == k);
      EXPECT_TRUE(CheckSchedule(s.ToSchedule(*nb), s.key(), s.device()).ok());
      if (nb->variant != k.variant) ++switched;
      else EXPECT_LE(KnobDistance(*nb, k), 2);
    }
  }
  EXPECT_GT(total, 100);
  EXPECT_GT(switched, 0);
}

TEST(SearchSpaceTest, SwitchVariantKeepsNearestValues) {
  SearchSpace s = MakeSpace();
  auto a = s.FromSchedule(Schedule{&kVariants[0], {12, 64, 2}});
  ASSERT_TRUE(a.ok());
  const Schedule b = s.ToSchedule(s.SwitchVariant(*a, 1));
  EXPECT_EQ(b.variant, &kVariants[1]);
  EXPECT_EQ(b.params[0], 8);   // |12-8| == |16-12|: the lower wins
  EXPECT_EQ(b.params[1], 64);
  EXPECT_EQ(b.params[2], 2);   // unroll_k absent in A: default
}

TEST(SearchSpaceTest, FromScheduleRejectsForeignVariantsAndValues) {
  SearchSpace s = MakeSpace();
  EXPECT_EQ(s.FromSchedule(Schedule{&kVariants[2], {8, 32, 1}}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.FromSchedule(Schedule{&kVariants[0], {5, 32, 1}}).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.FromSchedule(Schedule{&kVariants[0], {4, 32, 1, 9}}).status().code(), StatusCode::kInvalidArgument);
}

TEST(SearchSpaceTest, CreateErrors) {
  const DeviceInfo d = TestDevice();
  const KernelVariant* only_avx512[] = {&kVariants[2]};
  auto none = SearchSpace::Create(OpKey::Gemm(8, 8, 8), d, only_avx512);
  EXPECT_EQ(none.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(none.status().message().find("avx512"), std::string::npos) << none.status().message();
  const KernelVariant* bad[] = {&kBad};
  EXPECT_EQ(SearchSpace::Create(OpKey::Gemm(8, 8, 8), d, bad).status().code(), StatusCode::kInvalidArgument);
  const KernelVariant* null_variant[] = {nullptr};
  EXPECT_EQ(SearchSpace::Create(OpKey::Gemm(8, 8, 8), d, null_variant).status().code(), StatusCode::kInvalidArgument);
  auto vs = AllFakes();
  EXPECT_FALSE(SearchSpace::Create(OpKey::Gemm(0, 8, 8), d, vs).ok());
  const KernelVariant* conv_only[] = {&kVariants[0]};
  EXPECT_EQ(SearchSpace::Create(OpKey::Conv2d(1, 8, 8, 4, 4, 3, 3, 1, 1, 1, 1), d, conv_only).status().code(),
            StatusCode::kUnimplemented);
}

// The default variant list (this build's kernels) on the host, when any supports it.
TEST(SearchSpaceTest, DefaultVariantsOnHost) {
  const OpKey key = OpKey::Gemm(64, 768, 768);
  const DeviceInfo host = HostCpuDevice(2);
  auto s = SearchSpace::Create(key, host);
  if (!s.ok()) GTEST_SKIP() << s.status().ToString();
  EXPECT_GT(s->size(), 0u);
  EXPECT_GT(s->valid_fraction(), 0.0);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 300; ++i) {
    auto k = s->SampleValid(rng);
    ASSERT_TRUE(k.has_value());
    const Schedule sch = s->ToSchedule(*k);
    ASSERT_TRUE(CheckSchedule(sch, key, host).ok()) << sch.ToString();
    EXPECT_EQ(ExtractFeatures(key, sch, host).size(), static_cast<size_t>(NumFeatures()));
  }
  for (const KernelVariant* v : s->variants()) {
    const Schedule def = VariantDefaultSchedule(*v, key, host);
    auto k = s->FromSchedule(def);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    EXPECT_EQ(s->IsValid(*k), CheckSchedule(def, key, host).ok()) << def.ToString();
  }
}

// The library variants this build has (oneDNN, OpenBLAS) are searched like the
// project's own, and propose their schedules per key (KernelVariant::candidates).
TEST(SearchSpaceTest, LibraryVariantsAreCandidates) {
  const OpKey key = OpKey::Gemm(16, 768, 768, false, true);
  const DeviceInfo host = HostCpuDevice(2);
  int found = 0;
  for (const char* name : {"cpu_f32_gemm_onednn", "cpu_f32_gemm_openblas"}) {
    const KernelVariant* v = FindKernelVariant(name);
    if (!v || !VariantSupports(*v, key, host).ok()) continue;
    ++found;
    auto s = SearchSpace::Create(key, host);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_NE(std::find(s->variants().begin(), s->variants().end(), v), s->variants().end()) << name;
    ASSERT_NE(v->candidates, nullptr) << name;
    const auto proposals = v->candidates(*v, key, host);
    EXPECT_FALSE(proposals.empty()) << name;
    for (const ParamValues& p : proposals) {
      const Schedule sch{v, p};
      EXPECT_TRUE(CheckSchedule(sch, key, host).ok()) << sch.ToString();
      auto k = s->FromSchedule(sch);
      ASSERT_TRUE(k.ok()) << k.status().ToString();
      EXPECT_TRUE(s->IsValid(*k)) << sch.ToString();
    }
  }
  if (found == 0) GTEST_SKIP() << "this build has no library variants";
}

TEST(FeaturesTest, FixedLengthNamedAndDerived) {
  const int nf = NumFeatures();
  ASSERT_EQ(static_cast<size_t>(nf), FeatureNames().size());
  std::set<std::string_view> names(FeatureNames().begin(), FeatureNames().end());
  EXPECT_EQ(names.size(), FeatureNames().size()) << "feature names must be unique";
  auto at = [&](const std::vector<float>& f, std::string_view name) {
    const auto it = std::find(FeatureNames().begin(), FeatureNames().end(), name);
    EXPECT_NE(it, FeatureNames().end()) << name;
    return f[it - FeatureNames().begin()];
  };
  const OpKey key = OpKey::Gemm(10, 20, 30);
  const DeviceInfo d = TestDevice();
  const auto f = ExtractFeatures(key, Schedule{&kVariants[0], {8, 16, 2}}, d);
  ASSERT_EQ(f.size(), static_cast<size_t>(nf));
  EXPECT_EQ(at(f, "mc"), 8);
  EXPECT_EQ(at(f, "log2_kc"), 4);
  EXPECT_EQ(at(f, "nc"), -1);        // the variant has no nc
  EXPECT_EQ(at(f, "unroll_k"), -1);
  EXPECT_EQ(at(f, "mr"), 4);
  EXPECT_EQ(at(f, "m"), 10);
  EXPECT_FLOAT_EQ(at(f, "pad_mr"), 0.5f);    // m=10, mr=4: last tile 2 of 4 rows padding
  EXPECT_FLOAT_EQ(at(f, "pad_nr"), 0.5f);    // n=20, nr=8
  EXPECT_FLOAT_EQ(at(f, "tiles_m"), 2);      // ceil(10/8)
  EXPECT_FLOAT_EQ(at(f, "tiles_k"), 2);      // ceil(30/16)
  EXPECT_FLOAT_EQ(at(f, "ws_a_over_l1"), 8.0f * 16 * 4 / (32 << 10));
  EXPECT_FLOAT_EQ(at(f, "threads_eff"), 2);
  EXPECT_FLOAT_EQ(at(f, "par_imbalance"), 0.5f);  // no par: jc, 1 N block on 2 threads
  EXPECT_FLOAT_EQ(at(f, "ic_imbalance"), 0);       // 2 mc blocks on 2 threads
  for (float x : f) EXPECT_TRUE(std::isfinite(x));
  const auto none = ExtractFeatures(key, Schedule{}, d);
  EXPECT_TRUE(std::all_of(none.begin(), none.end(), [](float x) { return x == -1; }));
}

}  // namespace
}  // namespace cliffguard::tuner
