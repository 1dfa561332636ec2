// Correctness of the library conv2d variants (runtime/kernels/cpu/conv2d_library.h)
// against a double-precision reference: awkward shapes (1x1, 3x3, 5x5, 7x7, strides
// 1 and 2, padding 0 to 3, odd sizes, channels that are not multiples of 8, batch 1
// to 3), both filter layouts, bias null or not, the filter packed ahead (a plan) or
// read per call, threads 1 and 2. One instantiation per variant, named like it
// (STYLE H2); the tests skip when this build lacks the variant (libdnnl-dev not
// found at configure time, or CLIFFGUARD_LIBRARY_VARIANTS=OFF).

#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cliffguard/kernel.h"
#include "kernels/cpu/conv2d_kernels.h"
#include "runtime/conv2d_tester.h"
#include "runtime/kernel_test_util.h"

namespace cliffguard {
namespace {

using testing::Host;
using testing::TwoThreads;
using testing::With;

// n, h, w, ic, oc, kh, kw, stride_h, stride_w, pad_h, pad_w
using ConvShape = std::array<int64_t, 11>;

OpKey KeyOf(const ConvShape& s) {
  return OpKey::Conv2d(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10]);
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

// One conv2d case checked against a double-precision reference. x and the filter
// are uniform in [-1, 1); y starts as NaN (the variant must write every element) and
// is followed by sentinels that must survive. With packed(true) the filter goes
// through the variant's pack_weights (OHWI with `ld_pad` extra floats between output
// channels, as a plan converts it) and the call's own filter is NaN. The error bound
// scales with the reduction length K = kh*kw*ic: |y - ref| <= 4 (K + 2) eps (sum |x w|
// + |bias|).
class ConvCase {
 public:
  explicit ConvCase(const ConvShape& s) : s_(s) {}
  ConvCase& layout(ConvWeightLayout v) { layout_ = v; return *this; }
  ConvCase& bias(bool v) { bias_ = v; return *this; }
  ConvCase& packed(bool v) { packed_ = v; return *this; }
  ConvCase& ld_pad(int64_t v) { ld_pad_ = v; return *this; }
  ConvCase& seed(uint32_t v) { seed_ = v; return *this; }

  std::string Describe(const Schedule& sched) const {
    return fmt::format("{} {} bias={}{} | {}", KeyOf(s_).ToString(), ConvWeightLayoutName(layout_), bias_,
                       packed_ ? fmt::format(" packed (ld pad {})", ld_pad_) : "", sched.ToString());
  }

  // Runs the schedule and compares; false (after a gtest failure naming the case and
  // the first bad element) on a mismatch or an error.
  bool Test(const Schedule& sched) const {
    const float kNaN = std::numeric_limits<float>::quiet_NaN();
    const float kSentinel = -12345.0f;
    constexpr int64_t kGuard = 19;
    const OpKey key = KeyOf(s_);
    const auto [n, h, w, ic, oc, kh, kw, sh, sw, ph, pw] = s_;
    const Conv2dOutput out = Conv2dOutputDims(key);
    const int64_t row = kh * kw * ic;
    std::mt19937 rng(seed_);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n * h * w * ic)), ohwi(static_cast<size_t>(oc * row)),
        b(static_cast<size_t>(oc));
    for (auto& v : x) v = dist(rng);
    for (auto& v : ohwi) v = dist(rng);
    for (auto& v : b) v = dist(rng);
    std::vector<float> wei = ohwi;  // the call's filter, in `layout_`
    if (layout_ == ConvWeightLayout::kOihw)
      for (int64_t o = 0; o < oc; ++o)
        for (int64_t c = 0; c < ic; ++c)
          for (int64_t ry = 0; ry < kh; ++ry)
            for (int64_t rx = 0; rx < kw; ++rx)
              wei[size_t(((o * ic + c) * kh + ry) * kw + rx)] = ohwi[size_t(o * row + (ry * kw + rx) * ic + c)];
    const size_t y_size = size_t(n * out.oh * out.ow * oc);
    std::vector<float> y(y_size + kGuard, kSentinel);
    std::fill(y.begin(), y.begin() + y_size, kNaN);

    Conv2dArgs args = DenseConv2dArgs(key, x.data(), wei.data(), bias_ ? b.data() : nullptr, y.data(), layout_);
    std::unique_ptr<void, AlignedFree> packed;
    const KernelVariant& v = *sched.variant;
    if (packed_) {
      if (!v.pack_weights || !v.packed_weights_bytes) {
        ADD_FAILURE() << v.name << " has no pack_weights";
        return false;
      }
      const size_t bytes = v.packed_weights_bytes(v, key, sched.params);
      if (bytes < size_t(oc * row) * sizeof(float)) {
        ADD_FAILURE() << Describe(sched) << ": packed_weights_bytes " << bytes << " < the filter's "
                      << oc * row * 4;
        return false;
      }
      packed.reset(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
      const int64_t ld = row + ld_pad_;
      std::vector<float> src(size_t(oc * ld), kNaN);
      for (int64_t o = 0; o < oc; ++o) std::copy_n(&ohwi[size_t(o * row)], row, &src[size_t(o * ld)]);
      const Status st = v.pack_weights(v, key, sched.params, src.data(), ld, packed.get());
      if (!st.ok()) {
        ADD_FAILURE() << Describe(sched) << ": pack_weights: " << st.ToString();
        return false;
      }
      std::fill(wei.begin(), wei.end(), kNaN);  // a call that reads it fails
      args.packed_weights = packed.get();
    }
    const Status st = RunConv2d(sched, args);
    if (!st.ok()) {
      ADD_FAILURE() << Describe(sched) << ": " << st.ToString();
      return false;
    }

    // Winograd (convolution_auto may pick it) rounds more than a direct sum: a bound
    // linear in the reduction length, not the direct kernels' square root.
    const double eps = std::numeric_limits<float>::epsilon();
    std::vector<double> ref, mag;
    testing::ReferenceConv2d(key, x.data(), ohwi.data(), bias_ ? b.data() : nullptr, ref, mag);
    for (size_t at = 0; at < ref.size(); ++at) {
      const double got = y[at], tol = 4.0 * double(row + 2) * eps * mag[at] + 1e-30;
      if (!(std::fabs(got - ref[at]) <= tol)) {
        const int64_t o = int64_t(at) % oc, pix = int64_t(at) / oc;
        ADD_FAILURE() << Describe(sched) << ": y[" << pix / (out.oh * out.ow) << "][" << pix / out.ow % out.oh << "]["
                      << pix % out.ow << "][" << o << "] = " << got << ", reference " << ref[at] << " (bound " << tol
                      << ")";
        return false;
      }
    }
    for (int64_t g = 0; g < kGuard; ++g)
      if (y[y_size + size_t(g)] != kSentinel) {
        ADD_FAILURE() << Describe(sched) << ": wrote " << g << " elements past y";
        return false;
      }
    return true;
  }

 private:
  ConvShape s_;
  ConvWeightLayout layout_ = ConvWeightLayout::kOhwi;
  bool bias_ = false;
  bool packed_ = false;
  int64_t ld_pad_ = 0;
  uint32_t seed_ = 1;
};

const std::vector<ConvShape> kShapes = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0},     // the smallest
    {1, 7, 5, 3, 5, 1, 1, 1, 1, 0, 0},     // 1x1
    {1, 10, 9, 7, 33, 1, 1, 2, 2, 0, 0},   // 1x1, stride 2 (a ResNet shortcut)
    {3, 9, 11, 13, 17, 3, 3, 1, 1, 1, 1},  // 3x3 SAME, batch 3
    {1, 13, 13, 5, 9, 3, 3, 2, 2, 1, 1},   // 3x3, stride 2
    {3, 8, 8, 12, 20, 3, 3, 1, 1, 0, 0},   // 3x3 VALID
    {1, 6, 7, 16, 24, 3, 3, 2, 1, 1, 0},   // different strides and pads per axis
    {2, 5, 5, 9, 11, 5, 5, 1, 1, 2, 2},    // 5x5
    {1, 17, 15, 3, 10, 7, 7, 2, 2, 3, 3},  // 7x7, stride 2, pad 3 (ResNet's stem, smaller)
    {1, 3, 3, 4, 6, 7, 7, 1, 1, 3, 3},     // kernel larger than the input
    {1, 12, 12, 64, 64, 3, 3, 1, 1, 1, 1}, // channels in full vectors
};

class Conv2dLibrary : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    std::string missing;
    v_ = testing::RunnableLibraryVariant(GetParam(), OpKind::kConv2d, missing);
    if (v_ == nullptr) GTEST_SKIP() << missing;
  }
  const KernelVariant& V() const { return *v_; }

 private:
  const KernelVariant* v_ = nullptr;
};

// Every shape with each filter layout, bias or none, reorder_weights 0 and 1, packed
// or per call; algorithm and threads alternate.
TEST_P(Conv2dLibrary, Shapes) {
  uint32_t seed = 0;
  for (const ConvShape& s : kShapes)
    for (int layout = 0; layout < 2; ++layout)
      for (int bias = 0; bias < 2; ++bias)
        for (int reorder = 0; reorder < 2; ++reorder)
          for (int packed = 0; packed < 2; ++packed) {
            ++seed;
            const Schedule sched = With(V(), {{"threads", seed % 3 ? 1 : TwoThreads()},
                                              {"reorder_weights", reorder},
                                              {"algorithm", (seed / 2) % 2}});
            ConvCase c(s);
            c.layout(ConvWeightLayout(layout)).bias(bias).packed(packed).ld_pad(seed % 4 == 1 ? 3 : 0).seed(seed);
            ASSERT_TRUE(c.Test(sched));
          }
}

// Both algorithms on ResNet-like channel counts, with and without bias.
TEST_P(Conv2dLibrary, Algorithms) {
  for (int algorithm = 0; algorithm < 2; ++algorithm)
    for (const ConvShape& s : std::vector<ConvShape>{{1, 14, 14, 32, 48, 3, 3, 1, 1, 1, 1},
                                                     {1, 15, 15, 24, 40, 3, 3, 2, 2, 1, 1},
                                                     {1, 14, 14, 32, 64, 1, 1, 2, 2, 0, 0}})
      for (int packed = 0; packed < 2; ++packed) {
        const Schedule sched = With(V(), {{"algorithm", algorithm}, {"reorder_weights", 1}});
        ASSERT_TRUE(ConvCase(s).bias(packed).packed(packed).seed(uint32_t(algorithm * 7 + packed)).Test(sched));
      }
}

// The same thread calls one schedule with the filter per call, then packed, then per
// call again: the cached primitive and the reorder buffer stay consistent.
TEST_P(Conv2dLibrary, PackedAndPerCallInterleaved) {
  const ConvShape s{1, 11, 11, 6, 10, 3, 3, 1, 1, 1, 1};
  for (int reorder = 0; reorder < 2; ++reorder) {
    const Schedule sched = With(V(), {{"reorder_weights", reorder}});
    for (int r = 0; r < 6; ++r)
      ASSERT_TRUE(ConvCase(s).packed(r % 2).layout(ConvWeightLayout(r / 2 % 2)).bias(r % 3 == 0).seed(uint32_t(r))
                      .Test(sched));
  }
}

TEST_P(Conv2dLibrary, PackedWeightsBytes) {
  ASSERT_NE(V().pack_weights, nullptr);
  ASSERT_NE(V().packed_weights_bytes, nullptr);
  for (const ConvShape& s : kShapes) {
    const OpKey key = KeyOf(s);
    const size_t dense = size_t(s[4] * s[5] * s[6] * s[3]) * sizeof(float);
    EXPECT_EQ(V().packed_weights_bytes(V(), key, With(V(), {{"reorder_weights", 0}}).params), dense);
    EXPECT_GE(V().packed_weights_bytes(V(), key, With(V(), {{"reorder_weights", 1}}).params), dense);
  }
  // A filter stride below kh*kw*ic is refused, naming the value and the rule.
  const OpKey key = KeyOf({1, 5, 5, 3, 4, 3, 3, 1, 1, 1, 1});
  std::vector<float> wei(4 * 27), dst(4096);
  const Status st = V().pack_weights(V(), key, Schedule::Defaults(V()).params, wei.data(), 26, dst.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("ld=26 must be >= kh*kw*ic=27"), std::string::npos) << st.message();
}

// Defaults and candidates pass CheckSchedule on any thread budget; defaults reorder
// the filter; the default runs correctly on the host.
TEST_P(Conv2dLibrary, DefaultSchedulesAndCandidates) {
  for (const ConvShape& s : std::vector<ConvShape>{{1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0},
                                                   {1, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3},
                                                   {1, 56, 56, 64, 64, 3, 3, 1, 1, 1, 1},
                                                   {1, 7, 7, 512, 512, 3, 3, 1, 1, 1, 1}}) {
    const OpKey key = KeyOf(s);
    for (int threads : {1, 2, 3, 64}) {
      DeviceInfo d = Host();
      d.threads = threads;
      const Schedule def = VariantDefaultSchedule(V(), key, d);
      const Status st = CheckSchedule(def, key, d);
      EXPECT_TRUE(st.ok()) << key.ToString() << " threads=" << threads << ": " << st.ToString();
      EXPECT_EQ(def.params[V().ParamIndex("reorder_weights")], 1) << def.ToString();
      ASSERT_NE(V().candidates, nullptr);
      const std::vector<ParamValues> cands = V().candidates(V(), key, d);
      ASSERT_FALSE(cands.empty());
      EXPECT_EQ(cands.front()[V().ParamIndex("reorder_weights")], 1);
      for (size_t i = 0; i < cands.size(); ++i) {
        const Schedule c{&V(), cands[i]};
        EXPECT_TRUE(CheckSchedule(c, key, d).ok()) << c.ToString();
        for (size_t j = 0; j < i; ++j) EXPECT_NE(cands[i], cands[j]) << "duplicate candidate " << c.ToString();
      }
    }
  }
  const ConvShape small{2, 9, 9, 5, 7, 3, 3, 1, 1, 1, 1};
  ASSERT_TRUE(ConvCase(small).bias(true).Test(VariantDefaultSchedule(V(), KeyOf(small), Host())));
  ASSERT_TRUE(ConvCase(small).packed(true).Test(VariantDefaultSchedule(V(), KeyOf(small), Host())));
}

TEST_P(Conv2dLibrary, CheckNamesValueAndRule) {
  DeviceInfo d = Host();
  d.threads = 2;
  const Status st = CheckSchedule(With(V(), {{"threads", 4}}), KeyOf({1, 8, 8, 8, 8, 3, 3, 1, 1, 1, 1}), d);
  EXPECT_EQ(st.message(), std::string(V().name) + ": threads=4 must be <= device threads=2");
}

// threads > 1 only when idle OpenMP workers sleep (they would starve cliffguard's
// own pool): the environment of this process decides which way the check goes.
TEST_P(Conv2dLibrary, ThreadsNeedPassiveOpenMpWaiting) {
  const bool passive = testing::OmpWaitsPassively();
  DeviceInfo d = Host();
  d.threads = 4;
  const OpKey key = KeyOf({1, 56, 56, 64, 64, 3, 3, 1, 1, 1, 1});
  const int threads = V().ParamIndex("threads");
  const Status st = CheckSchedule(With(V(), {{"threads", 2}}), key, d);
  if (passive) {
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(VariantDefaultSchedule(V(), key, d).params[threads], 4);
  } else {
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(st.message().find("OMP_WAIT_POLICY=passive"), std::string::npos) << st.message();
    EXPECT_EQ(VariantDefaultSchedule(V(), key, d).params[threads], 1);
    for (const ParamValues& p : V().candidates(V(), key, d)) EXPECT_EQ(p[threads], 1);
  }
  EXPECT_TRUE(CheckSchedule(With(V(), {{"threads", 1}}), key, d).ok());
}

// Several serving threads call the variant at once, some sharing one packed filter
// (a plan run from several threads).
TEST_P(Conv2dLibrary, ConcurrentCallers) {
  const ConvShape shared{1, 10, 10, 12, 20, 3, 3, 1, 1, 1, 1};
  const Schedule shared_sched = With(V(), {{"reorder_weights", 1}});
  const OpKey shared_key = KeyOf(shared);
  std::vector<float> ohwi(size_t(20 * 9 * 12)), x(size_t(10 * 10 * 12));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : ohwi) v = dist(rng);
  for (auto& v : x) v = dist(rng);
  const size_t bytes = V().packed_weights_bytes(V(), shared_key, shared_sched.params);
  std::unique_ptr<void, AlignedFree> packed(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  ASSERT_TRUE(V().pack_weights(V(), shared_key, shared_sched.params, ohwi.data(), 9 * 12, packed.get()).ok());
  std::vector<float> expect(10 * 10 * 20);
  Conv2dArgs a = DenseConv2dArgs(shared_key, x.data(), ohwi.data(), nullptr, expect.data());
  ASSERT_TRUE(RunConv2d(shared_sched, a).ok());

  std::vector<std::thread> threads;
  for (int c = 0; c < 3; ++c)
    threads.emplace_back([&, c] {
      std::vector<float> y(expect.size());
      for (int r = 0; r < 8; ++r) {
        const Schedule sched = With(V(), {{"threads", (c + r) % 2 ? TwoThreads() : 1}, {"reorder_weights", r % 2}});
        if (!ConvCase({1 + r % 2, 7 + c, 9 + r, 3 + c, 5 + r, 3, 3, 1 + r % 2, 1, 1, 1})
                 .packed(r % 3 == 0)
                 .bias(r % 2)
                 .seed(uint32_t(c * 100 + r))
                 .Test(sched))
          return;
        Conv2dArgs args = DenseConv2dArgs(shared_key, x.data(), nullptr, nullptr, y.data());
        args.packed_weights = packed.get();
        const Status st = RunConv2d(shared_sched, args);
        if (!st.ok()) return ADD_FAILURE() << st.ToString();
        if (y != expect) return ADD_FAILURE() << "shared packed filter: thread " << c << " differs";
      }
    });
  for (auto& t : threads) t.join();
}

// More primitives than the per-thread cache holds (64): evictions, then every shape
// again, still correct.
TEST_P(Conv2dLibrary, PrimitiveCacheEvicts) {
  const Schedule sched = With(V(), {{"threads", 1}, {"reorder_weights", 0}});
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t h = 1; h <= 70; ++h)
      ASSERT_TRUE(ConvCase({1, h, 3, 2, 3, 1, 1, 1, 1, 0, 0}).bias(h % 2).seed(uint32_t(h)).Test(sched));
}

// Not f32: refused by the kernel itself (VariantSupports refuses it earlier).
TEST_P(Conv2dLibrary, RefusesOtherDtypes) {
  const OpKey key = OpKey::Conv2d(1, 4, 4, 2, 2, 1, 1, 1, 1, 0, 0, DType::kF16);
  EXPECT_FALSE(VariantSupports(V(), key, Host()).ok());
  std::vector<float> buf(64);
  Conv2dArgs args = DenseConv2dArgs(key, buf.data(), buf.data(), nullptr, buf.data());
  EXPECT_EQ(RunConv2d(Schedule::Defaults(V()), args).code(), StatusCode::kUnimplemented);
}

// libgomp cannot start an OpenMP team in a child of fork() on a thread that had
// one: such a call returns an error instead of hanging; threads = 1 still runs.
TEST_P(Conv2dLibrary, ThreadsInAChildOfForkFailCleanly) {
  if (Host().threads < 2) GTEST_SKIP() << "needs 2 threads, the host budget is " << Host().threads;
  const Schedule two = With(V(), {{"threads", 2}}), one = With(V(), {{"threads", 1}});
  const ConvShape s{1, 16, 16, 8, 8, 3, 3, 1, 1, 1, 1};
  ASSERT_TRUE(ConvCase(s).Test(two));  // the parent's thread now has an OpenMP team
  testing::ExpectChildOfForkSucceeds([&] { return testing::Conv2dRefusedAfterForkOneRuns(two, one); },
                                     "it hung starting an OpenMP team");
  EXPECT_TRUE(ConvCase(s).Test(two));
}

INSTANTIATE_TEST_SUITE_P(Variants, Conv2dLibrary, ::testing::Values("cpu_f32_conv2d_onednn"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// The fork rule holds across the oneDNN variants (one tracker, onednn_common.h): in
// a child of fork(), a thread that ran the other variant on an OpenMP team before
// the fork is refused threads > 1 too instead of hanging, and threads = 1 runs. A
// fresh thread each, on which only the other variant ran a team.
class OnednnVariants : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string missing;
    conv_ = testing::RunnableLibraryVariant("cpu_f32_conv2d_onednn", OpKind::kConv2d, missing);
    if (conv_ != nullptr) gemm_ = testing::RunnableLibraryVariant("cpu_f32_gemm_onednn", OpKind::kGemm, missing);
    if (gemm_ == nullptr) GTEST_SKIP() << missing;
    if (Host().threads < 2) GTEST_SKIP() << "needs 2 threads, the host budget is " << Host().threads;
  }

  const KernelVariant* conv_ = nullptr;
  const KernelVariant* gemm_ = nullptr;
};

TEST_F(OnednnVariants, GemmTeamBeforeForkRefusesConv2dThreads) {
  const Schedule gemm_two = With(*gemm_, {{"threads", 2}});
  const Schedule two = With(*conv_, {{"threads", 2}}), one = With(*conv_, {{"threads", 1}});
  std::thread([&] {
    std::vector<float> a(64 * 64, 1.0f), b(64 * 64, 1.0f), c(64 * 64);
    ASSERT_TRUE(RunGemm(gemm_two, DenseGemmArgs(OpKey::Gemm(64, 64, 64), a.data(), b.data(), c.data())).ok());
    testing::ExpectChildOfForkSucceeds([&] { return testing::Conv2dRefusedAfterForkOneRuns(two, one); },
                                       "conv2d hung starting an OpenMP team after the GEMM's");
  }).join();
}

TEST_F(OnednnVariants, Conv2dTeamBeforeForkRefusesGemmThreads) {
  const Schedule conv_two = With(*conv_, {{"threads", 2}});
  const Schedule two = With(*gemm_, {{"threads", 2}}), one = With(*gemm_, {{"threads", 1}});
  std::thread([&] {
    ASSERT_TRUE(ConvCase({1, 16, 16, 8, 8, 3, 3, 1, 1, 1, 1}).Test(conv_two));
    testing::ExpectChildOfForkSucceeds([&] { return testing::GemmRefusedAfterForkOneRuns(two, one); },
                                       "the GEMM hung starting an OpenMP team after conv2d's");
  }).join();
}

// After the project's own variants, before the portable one: the library variants
// of this build sit together, second to last.
TEST(Conv2dLibraryTable, LibraryVariantsSitBeforeThePortableVariant) {
  const auto all = cpu::CpuConv2dVariants();
  std::vector<size_t> library;
  for (size_t i = 0; i < all.size(); ++i)
    if (std::string(all[i].name) == "cpu_f32_conv2d_onednn") library.push_back(i);
  if (library.empty()) GTEST_SKIP() << "this build has no library conv2d variants in CpuConv2dVariants()";
  EXPECT_EQ(library.back() + 1, all.size() - 1);
  for (size_t i = 0; i < library.size(); ++i) EXPECT_EQ(library[i], library[0] + i);
}

}  // namespace
}  // namespace cliffguard
