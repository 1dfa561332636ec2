// Correctness of the CPU fp32 conv2d kernel family. One gtest suite per variant of
// runtime/kernels/cpu/conv2d_f32.inc, named like the variant (STYLE H1/H2); suites
// skip on hosts without the variant's ISA (STYLE H5).
#include <algorithm>
#include <array>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "cliffguard/kernel.h"
#include "kernels/cpu/conv2d_direct_impl.h"
#include "kernels/cpu/conv2d_driver.h"
#include "kernels/cpu/conv2d_kernels.h"
#include "runtime/conv2d_tester.h"
#include "runtime/kernel_test_util.h"

namespace cliffguard {
namespace {

using testing::Conv2dTester;
using testing::Host;
using testing::RandomSchedule;
using testing::TwoThreads;

// Keys in the order of OpKey::Conv2d: n, h, w, ic, oc, kh, kw, sh, sw, ph, pw.
using Dims = std::array<int64_t, 11>;
OpKey KeyOf(const Dims& d) { return OpKey::Conv2d(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10]); }

// Awkward shapes: 1x1, 3x3, 7x7, 5x3; strides 1-3; padding 0-3 (windows wholly in
// the padding included); odd sizes; channel counts off the tiles; batch 1 and 3.
const std::vector<Dims>& AwkwardShapes() {
  static const std::vector<Dims> shapes = {
      {1, 7, 7, 5, 3, 1, 1, 1, 1, 0, 0},      {3, 13, 9, 17, 33, 1, 1, 2, 2, 0, 0},
      {1, 17, 13, 33, 20, 1, 1, 3, 1, 0, 0},  {1, 5, 6, 3, 5, 1, 1, 1, 1, 1, 1},
      {1, 7, 7, 3, 17, 3, 3, 1, 1, 1, 1},     {3, 13, 13, 5, 33, 3, 3, 2, 2, 1, 1},
      {1, 17, 11, 17, 5, 3, 3, 3, 3, 0, 0},   {2, 8, 9, 1, 1, 3, 3, 1, 2, 1, 0},
      {1, 17, 17, 3, 20, 7, 7, 2, 2, 3, 3},   {1, 13, 7, 5, 17, 7, 7, 1, 1, 3, 3},
      {1, 13, 17, 17, 9, 5, 3, 2, 1, 2, 1},   {3, 7, 13, 3, 33, 5, 3, 3, 2, 0, 1},
      {1, 5, 5, 2, 3, 3, 3, 1, 1, 3, 3},      {1, 9, 9, 70, 40, 3, 3, 1, 1, 1, 1},
      {1, 3, 20, 4, 70, 3, 1, 1, 1, 1, 0},    {1, 2, 2, 3, 7, 5, 5, 1, 1, 2, 2},
  };
  return shapes;
}

// A schedule of `v` for `key`: the fitted defaults with some parameters replaced
// (those `v` lacks ignored); threads clipped to the host.
Schedule With(const KernelVariant& v, const OpKey& key, const std::vector<std::pair<std::string, int32_t>>& named) {
  Schedule s = VariantDefaultSchedule(v, key, Host());
  for (const auto& [name, value] : named) {
    const int i = v.ParamIndex(name);
    if (i >= 0) s.params[i] = value;
  }
  const int t = v.ParamIndex("threads");
  if (t >= 0) s.params[t] = std::min<int32_t>(s.params[t], Host().threads);
  return s;
}

// Small blocks: every shape crosses oc, ic, row and GEMM block boundaries.
Schedule SmallBlocks(const KernelVariant& v, const OpKey& key, int variant) {
  const Conv2dConfig& t = v.config.conv2d;
  return With(v, key,
              {{"oc_block", t.oc_tile}, {"ic_block", variant % 2 ? 4 : 16}, {"rows", 1 + variant % 3},
               {"loop", variant % 2}, {"pad_copy", (variant / 2) % 2}, {"mc", t.ow_tile}, {"kc", 16},
               {"nc", t.oc_tile}, {"m_block", 16}, {"unroll_k", 2}, {"prefetch", variant % 2 ? 2 : 0},
               {"pack_a", (variant / 2) % 2}});
}

// Whether the schedule passes CheckSchedule on the host (adds a failure if not).
bool Accepted(const Schedule& s, const OpKey& key) {
  const Status st = CheckSchedule(s, key, Host());
  EXPECT_TRUE(st.ok()) << key.ToString() << ": " << st.ToString();
  return st.ok();
}

bool Supports(const KernelVariant& v, const OpKey& key) { return VariantSupports(v, key, Host()).ok(); }

void Shapes(const KernelVariant& v) {
  int i = 0;
  for (const Dims& d : AwkwardShapes()) {
    const OpKey key = KeyOf(d);
    if (!Supports(v, key)) continue;
    for (int variant = 0; variant < 3; ++variant, ++i) {
      const Schedule s = variant == 0 ? VariantDefaultSchedule(v, key, Host()) : SmallBlocks(v, key, i);
      if (!Accepted(s, key)) return;
      Conv2dTester t;
      t.key(key).layout(i % 2 ? ConvWeightLayout::kOihw : ConvWeightLayout::kOhwi).bias(i % 3 != 1).seed(i);
      if (!t.Test(s)) return;
    }
  }
}

// Packed weights (pack_weights, then packed_weights set) give exactly the per-call
// result, from either layout, with and without bias.
void PackedWeights(const KernelVariant& v) {
  int i = 0;
  for (const Dims& d : AwkwardShapes()) {
    const OpKey key = KeyOf(d);
    if (!Supports(v, key)) continue;
    const Schedule s = i % 2 ? VariantDefaultSchedule(v, key, Host()) : SmallBlocks(v, key, i);
    if (!Accepted(s, key)) return;
    for (auto layout : {ConvWeightLayout::kOhwi, ConvWeightLayout::kOihw}) {
      Conv2dTester t;
      t.key(key).layout(layout).bias(i % 2 == 0).seed(100 + i);
      std::vector<float> per_call, packed;
      if (!t.Test(s, &per_call)) return;
      if (!t.packed_weights(true).Test(s, &packed)) return;
      ASSERT_EQ(per_call.size(), packed.size());
      for (size_t j = 0; j < per_call.size(); ++j)
        ASSERT_EQ(per_call[j], packed[j]) << s.ToString() << " on " << t.Describe() << ": element " << j;
    }
    ++i;
  }
}

void RandomSchedules(const KernelVariant& v) {
  std::mt19937 rng(20240611u + v.config.conv2d.oc_tile * 131 + v.config.conv2d.ow_tile);
  const std::vector<Dims> shapes = {{1, 11, 13, 19, 37, 3, 3, 1, 1, 1, 1},
                                    {2, 9, 10, 6, 21, 1, 1, 2, 2, 0, 0},
                                    {1, 15, 9, 40, 18, 3, 3, 2, 1, 1, 1},
                                    {1, 12, 12, 3, 70, 5, 5, 2, 2, 2, 2},
                                    {3, 6, 7, 9, 13, 3, 2, 1, 1, 0, 1}};
  int i = 0;
  for (const Dims& d : shapes) {
    const OpKey key = KeyOf(d);
    if (!Supports(v, key)) continue;
    for (int draw = 0; draw < 10; ++draw, ++i) {
      Conv2dTester t;
      t.key(key).layout(i % 2 ? ConvWeightLayout::kOihw : ConvWeightLayout::kOhwi).bias(i % 3 != 0);
      t.packed_weights(i % 4 == 3).seed(i);
      if (!t.Test(RandomSchedule(v, key, rng))) return;
    }
  }
}

// Every value of every parameter that check() accepts for the key, the others at
// their fitted defaults.
void EveryParamValue(const KernelVariant& v) {
  const std::vector<Dims> shapes = {{1, 6, 7, 96, 80, 3, 3, 1, 1, 1, 1}, {1, 9, 8, 40, 72, 1, 1, 2, 1, 0, 0}};
  int i = 0, tested = 0;
  for (const Dims& d : shapes) {
    const OpKey key = KeyOf(d);
    if (!Supports(v, key)) continue;
    const Schedule base = VariantDefaultSchedule(v, key, Host());
    for (size_t p = 0; p < v.params.size(); ++p)
      for (int32_t value : v.params[p].values) {
        Schedule s = base;
        s.params[p] = value;
        if (!CheckSchedule(s, key, Host()).ok()) continue;
        Conv2dTester t;
        t.key(key).bias(i % 2 == 0).layout(i % 3 ? ConvWeightLayout::kOhwi : ConvWeightLayout::kOihw);
        t.packed_weights(i % 4 == 1).seed(i++);
        ++tested;
        if (!t.Test(s)) return;
      }
  }
  EXPECT_GT(tested, 0);
}

// Several application threads calling at once (the pool serves one call at a time:
// the others run on their callers alone).
void ConcurrentCallers(const KernelVariant& v) {
  const std::vector<Dims> shapes = {{2, 9, 11, 13, 21, 3, 3, 1, 1, 1, 1}, {1, 12, 10, 24, 17, 1, 1, 1, 1, 0, 0}};
  std::vector<std::thread> threads;
  for (int c = 0; c < 3; ++c)
    threads.emplace_back([&v, &shapes, c] {
      for (int i = 0; i < 4; ++i) {
        const OpKey key = KeyOf(shapes[(c + i) % shapes.size()]);
        if (!Supports(v, key)) continue;
        Conv2dTester t;
        t.key(key).bias(true).packed_weights(i % 2 == 1).seed(c * 10 + i);
        if (!t.Test(With(v, key, {{"threads", TwoThreads()}}))) return;
      }
    });
  for (auto& t : threads) t.join();
}

// Every `par` and loop order on the host's threads (1 and 2) and on 3, 5 and 7, batch 1
// and 3.
void Threads(const KernelVariant& v) {
  const std::vector<Dims> shapes = {{3, 10, 11, 7, 40, 3, 3, 1, 1, 1, 1}, {1, 9, 9, 16, 50, 1, 1, 2, 2, 0, 0},
                                    {1, 4, 30, 5, 9, 3, 3, 1, 2, 1, 1}};
  int i = 0;
  for (const Dims& d : shapes) {
    const OpKey key = KeyOf(d);
    if (!Supports(v, key)) continue;
    for (int threads = 1; threads <= TwoThreads(); ++threads)
      for (int par = 0; par < 3; ++par)
        for (int loop = 0; loop < 2; ++loop, ++i) {
          const Schedule s = With(v, key,
                                  {{"threads", threads},
                                   {"par", par},
                                   {"loop", loop},
                                   {"pad_copy", i % 2},
                                   {"rows", 1 + i % 4},
                                   {"oc_block", v.config.conv2d.oc_tile * (1 + i % 2)},
                                   {"m_block", 16 << (i % 3)}});
          if (!Accepted(s, key)) return;
          Conv2dTester t;
          t.key(key).bias(i % 2 == 0).packed_weights(i % 3 == 0).seed(i);
          if (!t.Test(s)) return;
        }
    // Counts that are not powers of two, more than this host has (a budget of 6 or 12).
    const int ti = v.ParamIndex("threads");
    if (ti < 0) continue;
    DeviceInfo wide = Host();
    wide.threads = 8;
    for (int threads : {3, 5, 7})
      for (int par = 0; par < 3; ++par, ++i) {
        Schedule s = With(v, key, {{"par", par}, {"loop", i % 2}});
        s.params[ti] = threads;
        const Status st = CheckSchedule(s, key, wide);
        ASSERT_TRUE(st.ok()) << key.ToString() << ": " << st.ToString();
        Conv2dTester t;
        t.key(key).bias(i % 2 == 0).packed_weights(i % 3 == 0).seed(i);
        if (!t.Test(s)) return;
      }
  }
}

// Random small valid keys (kernels larger than the input, pads past the kernel,
// strides past the kernel): the fitted defaults run every key the variant supports.
void RandomKeys(const KernelVariant& v) {
  std::mt19937 rng(777u + v.config.conv2d.oc_tile);
  auto draw = [&](int lo, int hi) { return static_cast<int64_t>(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  int tested = 0;
  for (int i = 0; i < 400 && tested < 24; ++i) {
    Dims d = {draw(1, 2), draw(1, 12), draw(1, 12), draw(1, 20), draw(1, 40), 1, 1,
              draw(1, 4), draw(1, 4), draw(0, 4), draw(0, 4)};
    if (i % 2) {
      d[9] = d[10] = 0;  // 1x1 without padding (what 1x1 variants run)
    } else {
      d[5] = draw(1, std::min<int64_t>(7, d[1] + 2 * d[9]));
      d[6] = draw(1, std::min<int64_t>(7, d[2] + 2 * d[10]));
    }
    const OpKey key = KeyOf(d);
    if (!key.Validate().ok() || !Supports(v, key)) continue;
    ++tested;
    const Schedule s = VariantDefaultSchedule(v, key, Host());
    if (!Accepted(s, key)) return;
    Conv2dTester t;
    t.key(key).bias(i % 2 == 0).layout(i % 3 ? ConvWeightLayout::kOhwi : ConvWeightLayout::kOihw).seed(i);
    if (!t.Test(s)) return;
  }
  EXPECT_EQ(tested, 24);
}

// The ResNet-18 layers at batch 1 (SAME padding) and a few others.
std::vector<OpKey> DefaultKeys() {
  struct L {
    int hw, ic, oc, k, s;
  };
  const L layers[] = {{224, 3, 64, 7, 2},   {56, 64, 64, 3, 1},   {56, 64, 64, 1, 1},   {56, 64, 128, 3, 2},
                      {56, 64, 128, 1, 2},  {28, 128, 128, 3, 1}, {28, 128, 256, 3, 2}, {28, 128, 256, 1, 2},
                      {14, 256, 256, 3, 1}, {14, 256, 512, 3, 2}, {14, 256, 512, 1, 2}, {7, 512, 512, 3, 1}};
  std::vector<OpKey> keys;
  for (const L& l : layers)
    for (int64_t n : {1, 8})
      keys.push_back(OpKey::Conv2d(n, l.hw, l.hw, l.ic, l.oc, l.k, l.k, l.s, l.s, (l.k - 1) / 2, (l.k - 1) / 2));
  for (const Dims& d : AwkwardShapes()) keys.push_back(KeyOf(d));
  keys.push_back(OpKey::Conv2d(1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0));
  keys.push_back(OpKey::Conv2d(1, 1000, 3, 9000, 2, 1, 3, 1, 1, 0, 0));
  keys.push_back(OpKey::Conv2d(64, 300, 300, 1, 3000, 11, 11, 4, 4, 5, 5));
  return keys;
}

// fit_defaults' schedule passes CheckSchedule for every default key and thread
// budget, and runs on a small key.
void DefaultSchedules(const KernelVariant& v) {
  for (const OpKey& key : DefaultKeys()) {
    if (!Supports(v, key)) continue;
    for (int threads : {1, 2, 3, 64}) {
      DeviceInfo d = Host();
      d.threads = threads;
      const Schedule s = VariantDefaultSchedule(v, key, d);
      const Status st = CheckSchedule(s, key, d);
      EXPECT_TRUE(st.ok()) << key.ToString() << " threads=" << threads << ": " << st.ToString();
      if (!v.candidates) continue;
      const std::vector<ParamValues> cands = v.candidates(v, key, d);
      ASSERT_FALSE(cands.empty()) << key.ToString();
      EXPECT_EQ(cands.front(), s.params) << key.ToString() << ": the first candidate is the fitted default";
      for (const ParamValues& p : cands) {
        const Status cs = CheckSchedule(Schedule{&v, p}, key, d);
        EXPECT_TRUE(cs.ok()) << key.ToString() << " threads=" << threads << ": " << cs.ToString();
      }
    }
  }
  const OpKey small = OpKey::Conv2d(1, 14, 14, 32, 48, 1, 1, 1, 1, 0, 0);
  Conv2dTester t;
  t.key(small).bias(true);
  t.Test(VariantDefaultSchedule(v, small, Host()));
}

#define CG_CONV2D_TESTS(name)         \
  TEST(name, Shapes) {                \
    CG_REQUIRE_VARIANT(v, #name);     \
    Shapes(*v);                       \
  }                                   \
  TEST(name, PackedWeights) {         \
    CG_REQUIRE_VARIANT(v, #name);     \
    PackedWeights(*v);                \
  }                                   \
  TEST(name, RandomSchedules) {       \
    CG_REQUIRE_VARIANT(v, #name);     \
    RandomSchedules(*v);              \
  }                                   \
  TEST(name, Threads) {               \
    CG_REQUIRE_VARIANT(v, #name);     \
    Threads(*v);                      \
  }                                   \
  TEST(name, RandomKeys) {            \
    CG_REQUIRE_VARIANT(v, #name);     \
    RandomKeys(*v);                   \
  }                                   \
  TEST(name, DefaultSchedules) {      \
    CG_REQUIRE_VARIANT(v, #name);     \
    DefaultSchedules(*v);             \
  }                                   \
  TEST(name, EveryParamValue) {       \
    CG_REQUIRE_VARIANT(v, #name);     \
    EveryParamValue(*v);              \
  }                                   \
  TEST(name, ConcurrentCallers) {     \
    CG_REQUIRE_VARIANT(v, #name);     \
    ConcurrentCallers(*v);            \
  }
#define CG_CONV2D_GEMM(isa, name, algo, gemm, mr, nr) CG_CONV2D_TESTS(name)
#define CG_CONV2D_DIRECT(isa, name, oc_tile, ow_tile) CG_CONV2D_TESTS(name)
#define CG_CONV2D_REF(isa, name) CG_CONV2D_TESTS(name)
#include "kernels/cpu/conv2d_f32.inc"

// ---- The AVX-512 direct tile's shape on any host ---------------------------------------
// cpu_f32_conv2d_direct_64x6__avx512 with its register tile template instantiated
// over portable 16-lane vectors: the driver, the 64 x 6 tile table (1-4 vectors,
// masked tails) and the parameter rules of that variant run here even where the
// host lacks AVX-512 (the AVX-512 vector traits are the GEMM family's, tested by
// its suites on AVX-512 hosts).
struct Lanes16Traits {
  struct V {
    float f[16];
  };
  static constexpr int kWidth = 16;
  static V Zero() { return Set1(0.0f); }
  static V Set1(float x) {
    V v;
    for (float& f : v.f) f = x;
    return v;
  }
  static V Load(const float* p) { return LoadN(p, 16); }
  static V Bcast(const float* p) { return Set1(*p); }
  static V Fma(V a, V b, V c) {
    for (int i = 0; i < 16; ++i) c.f[i] = std::fma(a.f[i], b.f[i], c.f[i]);
    return c;
  }
  static void FmaAcc(V& acc, V a, V b) { acc = Fma(a, b, acc); }
  static V Mul(V a, V b) {
    for (int i = 0; i < 16; ++i) a.f[i] *= b.f[i];
    return a;
  }
  static void Store(float* p, V v) { StoreN(p, v, 16); }
  static V LoadN(const float* p, int n) {
    V v = Set1(0.0f);
    for (int i = 0; i < n; ++i) v.f[i] = p[i];
    return v;
  }
  static void StoreN(float* p, V v, int n) {
    for (int i = 0; i < n; ++i) p[i] = v.f[i];
  }
};

void Lanes16Tile(const cpu::ConvTileArgs& a) { cpu::RunDirectTile<Lanes16Traits, 64, 6>(a); }

Status Lanes16Entry(const KernelVariant& self, const Conv2dArgs& args, const ParamValues& params) {
  return cpu::DirectConvF32(args, params, &Lanes16Tile, self.config.conv2d.oc_tile, self.config.conv2d.ow_tile);
}

const KernelVariant& Lanes16Variant() {
  static const KernelVariant v = [] {
    KernelVariant out = *FindKernelVariant("cpu_f32_conv2d_direct_64x6__avx512");
    out.name = "cpu_f32_conv2d_direct_64x6__lanes16";
    out.isa = kIsaScalar;
    out.fn.conv2d = &Lanes16Entry;
    return out;
  }();
  return v;
}

TEST(cpu_f32_conv2d_direct_64x6__lanes16, Shapes) { Shapes(Lanes16Variant()); }
TEST(cpu_f32_conv2d_direct_64x6__lanes16, PackedWeights) { PackedWeights(Lanes16Variant()); }
TEST(cpu_f32_conv2d_direct_64x6__lanes16, RandomSchedules) { RandomSchedules(Lanes16Variant()); }
TEST(cpu_f32_conv2d_direct_64x6__lanes16, Threads) { Threads(Lanes16Variant()); }
TEST(cpu_f32_conv2d_direct_64x6__lanes16, RandomKeys) { RandomKeys(Lanes16Variant()); }
TEST(cpu_f32_conv2d_direct_64x6__lanes16, EveryParamValue) { EveryParamValue(Lanes16Variant()); }
TEST(cpu_f32_conv2d_direct_64x6__lanes16, DefaultSchedules) { DefaultSchedules(Lanes16Variant()); }

// ---- The table ----------------------------------------------------------------------

TEST(CpuConv2dTable, InventoryIsConsistent) {
  const auto all = cpu::CpuConv2dVariants();
  std::vector<std::string> rows;
#define CG_CONV2D_GEMM(isa, name, algo, gemm, mr, nr) rows.push_back(#name);
#define CG_CONV2D_DIRECT(isa, name, oc_tile, ow_tile) rows.push_back(#name);
#define CG_CONV2D_REF(isa, name) rows.push_back(#name);
#include "kernels/cpu/conv2d_f32.inc"
  // The library variants this build has (conv2d_library.h) sit before the portable one.
  std::set<std::string> library;
  for (const char* name : {"cpu_f32_conv2d_onednn"})
    if (FindKernelVariant(name)) library.insert(name), rows.insert(rows.end() - 1, name);
  ASSERT_EQ(all.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(all[i].name, rows[i]);
  for (size_t i = 1; i < all.size(); ++i)
    EXPECT_LE(all[i].isa, all[i - 1].isa) << all[i].name << ": table not in dispatch preference order";
  EXPECT_EQ(all.back().isa, static_cast<uint32_t>(kIsaScalar));
  for (const auto& v : all) {
    EXPECT_EQ(v.op, OpKind::kConv2d) << v.name;
    ASSERT_NE(FindKernelVariant(v.name), nullptr) << v.name;
    EXPECT_TRUE((v.pack_weights == nullptr) == (v.packed_weights_bytes == nullptr)) << v.name;
    if (library.count(v.name)) continue;
    EXPECT_NE(v.pack_weights, nullptr) << v.name;
    EXPECT_GE(v.ParamIndex("threads"), 0) << v.name;
    const std::string tile = std::to_string(v.config.conv2d.oc_tile) + "x" + std::to_string(v.config.conv2d.ow_tile);
    if (v.isa != kIsaScalar) EXPECT_NE(std::string(v.name).find("_" + tile + "__"), std::string::npos) << v.name;
    testing::ExpectParamSpecsValid(v);
    const int ocb = v.ParamIndex("oc_block");
    if (ocb >= 0)
      for (int32_t b : v.params[ocb].values) EXPECT_EQ(b % v.config.conv2d.oc_tile, 0) << v.name;
  }
}

TEST(CpuConv2dTable, ReferenceSupportsEveryValidKey) {
  const KernelVariant* ref = FindKernelVariant("cpu_f32_conv2d_ref__scalar");
  ASSERT_NE(ref, nullptr);
  std::mt19937 rng(99);
  auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int valid = 0;
  for (int i = 0; i < 2000; ++i) {
    const int64_t big = i % 2 ? 5000 : 12;
    const OpKey key = OpKey::Conv2d(draw(1, 9), draw(1, big), draw(1, big), draw(1, big), draw(1, big), draw(1, 13),
                                    draw(1, 13), draw(1, 9), draw(1, 9), draw(0, 7), draw(0, 7));
    if (!key.Validate().ok()) continue;
    ++valid;
    EXPECT_TRUE(VariantSupports(*ref, key, Host()).ok()) << key.ToString();
    const auto s = DefaultSchedule(key, Host());
    ASSERT_TRUE(s.ok()) << key.ToString() << ": " << s.status().ToString();
    EXPECT_TRUE(CheckSchedule(*s, key, Host()).ok()) << s->ToString() << " on " << key.ToString();
  }
  EXPECT_GT(valid, 500);
}

// Callers walk every variant with keys of any op: a gemm key leaves a conv2d
// variant's declared defaults as they are and is refused by check().
TEST(CpuConv2dTable, ForeignKeysAreHarmless) {
  const OpKey gemm = OpKey::Gemm(16, 64, 32);
  for (const auto& v : cpu::CpuConv2dVariants()) {
    if (std::string(v.name) == "cpu_f32_conv2d_onednn") continue;  // conv2d_library.h's rules
    const Schedule s = VariantDefaultSchedule(v, gemm, Host());
    EXPECT_EQ(s, Schedule::Defaults(v)) << v.name;
    if (v.candidates) EXPECT_TRUE(v.candidates(v, gemm, Host()).empty()) << v.name;
    EXPECT_FALSE(CheckSchedule(s, gemm, Host()).ok()) << v.name;
  }
}

TEST(CpuConv2dTable, OneByOneDeclinesOtherKeys) {
  for (const char* name : {"cpu_f32_conv2d_1x1_16x6__avx2", "cpu_f32_conv2d_1x1_32x8__avx512"}) {
    const KernelVariant* v = FindKernelVariant(name);
    ASSERT_NE(v, nullptr) << name;
    if ((v->isa & Host().isa) != v->isa) continue;
    const Status k3 = VariantSupports(*v, OpKey::Conv2d(1, 8, 8, 4, 4, 3, 3, 1, 1, 1, 1), Host());
    EXPECT_EQ(k3.code(), StatusCode::kUnimplemented);
    EXPECT_NE(k3.message().find("3x3"), std::string::npos) << k3.ToString();
    const Status padded = VariantSupports(*v, OpKey::Conv2d(1, 8, 8, 4, 4, 1, 1, 1, 1, 1, 0), Host());
    EXPECT_EQ(padded.code(), StatusCode::kUnimplemented);
    EXPECT_NE(padded.message().find("padding 1x0"), std::string::npos) << padded.ToString();
    EXPECT_TRUE(VariantSupports(*v, OpKey::Conv2d(1, 8, 8, 4, 4, 1, 1, 3, 2, 0, 0), Host()).ok());
  }
}

TEST(CpuConv2dTable, CheckNamesValueAndRule) {
  const KernelVariant* v = FindKernelVariant("cpu_f32_conv2d_direct_16x6__avx2");
  ASSERT_NE(v, nullptr);
  DeviceInfo d = Host();
  d.isa |= kIsaAvx2;  // the rules, not the host, are under test
  d.threads = 2;
  const OpKey key = OpKey::Conv2d(1, 14, 14, 20, 40, 3, 3, 1, 1, 1, 1);
  auto message = [&](std::vector<std::pair<std::string, int64_t>> named) {
    Schedule s = VariantDefaultSchedule(*v, key, d);
    for (const auto& [name, value] : named) s.params[v->ParamIndex(name)] = static_cast<int32_t>(value);
    const Status st = CheckSchedule(s, key, d);
    EXPECT_FALSE(st.ok());
    return st.message();
  };
  EXPECT_NE(message({{"threads", 4}}).find("threads=4 must be <= device threads=2"), std::string::npos);
  // Blocks beyond their extent are valid (the kernel clamps them) and redundant:
  // the search skips them, bundles may use them.
  for (const auto& [name, value] : std::vector<std::pair<std::string, int32_t>>{
           {"oc_block", 64}, {"ic_block", 48}, {"rows", 24}, {"ic_block", 4096}, {"rows", 4096}}) {
    Schedule s = VariantDefaultSchedule(*v, key, d);
    s.params[v->ParamIndex(name)] = value;
    EXPECT_TRUE(CheckSchedule(s, key, d).ok()) << name << "=" << value;
    ASSERT_NE(v->redundant, nullptr);
    EXPECT_TRUE(v->redundant(*v, key, s.params)) << name << "=" << value;
  }
  EXPECT_FALSE(v->redundant(*v, key, VariantDefaultSchedule(*v, key, d).params));
  EXPECT_TRUE(CheckSchedule(Schedule::Defaults(*v), key, d).ok());
}

TEST(CpuConv2dTable, DefaultScheduleResolvesAndRuns) {
  for (const Dims& d : AwkwardShapes()) {
    const OpKey key = KeyOf(d);
    const auto s = DefaultSchedule(key, Host());
    ASSERT_TRUE(s.ok()) << key.ToString() << ": " << s.status().ToString();
    EXPECT_EQ(s->variant->op, OpKind::kConv2d);
    Conv2dTester t;
    t.key(key).bias(true);
    if (!t.Test(*s)) return;
  }
}

}  // namespace
}  // namespace cliffguard
