// Correctness of the CPU fp32 GEMM kernel family. One gtest suite per variant of
// runtime/kernels/cpu/gemm_f32.inc, named like the variant (STYLE H1/H2); suites
// skip on hosts without the variant's ISA (STYLE H5).

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "cliffguard/kernel.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm_driver.h"
#include "kernels/cpu/gemm_params.h"
#include "kernels/cpu/gemm_ukernel_impl.h"
#include "kernels/cpu/gemv_params.h"
#include "runtime/gemm_tester.h"
#include "runtime/kernel_test_util.h"

namespace cliffguard {
namespace {

using testing::GemmTester;
using testing::Host;
using testing::RandomSchedule;
using testing::TwoThreads;

// The declared defaults with some parameters replaced; threads clipped to the host.
Schedule With(const KernelVariant& v, const std::vector<std::pair<std::string, int64_t>>& named) {
  Schedule out = testing::With(v, named);
  const int t = v.ParamIndex("threads");
  out.params[t] = std::min<int32_t>(out.params[t], Host().threads);
  return out;
}

std::vector<int64_t> Unique(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  v.erase(std::remove_if(v.begin(), v.end(), [](int64_t x) { return x < 1; }), v.end());
  return v;
}

void EdgeShapes(const KernelVariant& v) {
  const int64_t mr = v.config.gemm.mr, nr = v.config.gemm.nr;
  // Small blocks so that every shape crosses mc, nc and kc boundaries (k % kc != 0).
  const Schedule small = With(v, {{"mc", 2 * mr}, {"kc", 16}, {"nc", 2 * nr}, {"unroll_k", 4}, {"prefetch", 4}});
  const Schedule small_rows = With(
      v, {{"mc", 2 * mr}, {"kc", 16}, {"nc", 2 * nr}, {"unroll_k", 4}, {"prefetch", 4}, {"order", cpu::kOrderRowsOfC}});
  const Schedule in_place =
      With(v, {{"mc", mr}, {"kc", 32}, {"nc", nr}, {"unroll_k", 8}, {"prefetch", 0}, {"pack_a", 0}, {"pack_b", 0}});
  for (int64_t m : Unique({1, mr - 1, mr, mr + 1, 2 * mr + 3, 17, 31}))
    for (int64_t n : Unique({1, nr - 1, nr, nr + 1, 2 * nr + 5, 61}))
      for (int64_t k : {1, 17, 35}) {
        GemmTester t;
        t.shape(m, n, k).seed(static_cast<uint32_t>(m * 10007 + n * 101 + k));
        if (!t.Test(small)) return;
        if (!t.Test(small_rows)) return;
        if (k == 35 && !t.Test(in_place)) return;
      }
  GemmTester().shape(127, 127, 61).beta(2.5f).Test(small);
  GemmTester().shape(61, 127, 127).ldc_pad(1).Test(in_place);
  // A packed in depth steps of 32 (a block of kc = 192, then one of 19) with full
  // panels and an edge panel of two rows (the pairs after the groups of four) or three.
  const Schedule deep = With(v, {{"mc", 4 * mr}, {"kc", 192}, {"nc", 2 * nr}});
  GemmTester().shape(3 * mr + 2, nr + 7, 211).lda_pad(5).Test(deep);
  GemmTester().shape(3 * mr + 3, nr + 7, 211).trans_b(true).Test(deep);
}

void Transposes(const KernelVariant& v) {
  const int64_t mr = v.config.gemm.mr, nr = v.config.gemm.nr;
  const std::vector<std::array<int64_t, 3>> shapes = {{31, 61, 17}, {mr + 1, nr + 3, 33}, {1, 127, 5}};
  int i = 0;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (const auto& sh : shapes)
        for (int pad = 0; pad < 2; ++pad)
          for (int pack = 0; pack < 4; ++pack) {
            const int pack_a = pack & 1, pack_b = pack >> 1;
            if (tb && !pack_b) continue;  // B read in place needs B not transposed
            const int par = i % 3, order = (i++ / 3) % 2;
            const Schedule s = With(v, {{"mc", 2 * mr}, {"kc", 16}, {"nc", 2 * nr}, {"par", par},
                                        {"threads", TwoThreads()}, {"pack_a", pack_a}, {"pack_b", pack_b},
                                        {"order", order}});
            GemmTester t;
            t.shape(sh[0], sh[1], sh[2]).trans_a(ta).trans_b(tb).beta(-0.5f).seed(i);
            if (pad) t.lda_pad(3).ldb_pad(5).ldc_pad(7);
            if (!t.Test(s)) return;
          }
}

// B packed panel by panel (pack_b = 2) where all of A is one row block of an N split:
// several depth and column blocks (the source of the next block's first panel is
// prefetched), edge panels, both layouts, one and two threads, beta, padded
// leading dimensions; and where it does not apply (more rows than mc, an M split,
// rows of C first), which packs B blocks instead.
void PanelPackedB(const KernelVariant& v) {
  const int64_t mr = v.config.gemm.mr, nr = v.config.gemm.nr;
  const auto panels = [&](int64_t mc, int par, int order, int threads) {
    return With(v, {{"mc", mc}, {"kc", 16}, {"nc", 2 * nr}, {"par", par}, {"threads", threads}, {"prefetch", 0},
                    {"pack_b", cpu::kPackBPanels}, {"order", order}});
  };
  const Schedule one = panels(3 * mr, cpu::kParN, cpu::kOrderPanelsOfB, 1);
  const Schedule two = panels(3 * mr, cpu::kParN, cpu::kOrderPanelsOfB, TwoThreads());
  int i = 0;
  for (int64_t m : Unique({1, mr - 1, mr + 1, 2 * mr + 3}))
    for (int64_t n : Unique({1, nr - 1, nr + 1, 2 * nr + 5, 5 * nr + 3}))
      for (int64_t k : {1, 17, 35})
        for (int tb = 0; tb < 2; ++tb) {
          GemmTester t;
          t.shape(m, n, k).trans_b(tb).trans_a(i % 3 == 0).beta(i % 2 ? 0.0f : -0.5f).nan_c(i % 2).seed(i);
          if (i++ % 4 == 1) t.lda_pad(3).ldb_pad(5).ldc_pad(7);
          if (!t.Test(one) || !t.Test(two)) return;
        }
  for (int tb = 0; tb < 2; ++tb) {
    GemmTester t;
    t.shape(3 * mr + 1, 3 * nr + 2, 37).trans_b(tb).beta(1.0f);
    if (!t.Test(panels(mr, cpu::kParN, cpu::kOrderPanelsOfB, 1))) return;
    if (!t.Test(panels(3 * mr + mr, cpu::kParM, cpu::kOrderPanelsOfB, TwoThreads()))) return;
    if (!t.Test(panels(3 * mr + mr, cpu::kParN, cpu::kOrderRowsOfC, TwoThreads()))) return;
  }
}

void AlphaBeta(const KernelVariant& v) {
  const Schedule s = With(v, {{"kc", 16}, {"threads", TwoThreads()}});
  for (float alpha : {0.0f, 1.0f, -0.5f, 2.5f})
    for (float beta : {0.0f, 1.0f, -0.5f, 2.5f}) {
      GemmTester t;
      t.shape(37, 45, 29).lda_pad(2).ldb_pad(1).ldc_pad(3).alpha(alpha).beta(beta).nan_c(beta == 0.0f);
      if (!t.Test(s)) return;
      t.trans_a(true).trans_b(true);
      if (!t.Test(s)) return;
    }
}

void RandomSchedules(const KernelVariant& v) {
  std::mt19937 rng(20240611u + v.config.gemm.mr * 131 + v.config.gemm.nr);
  const std::vector<std::array<int64_t, 3>> shapes = {{61, 67, 131}, {1, 100, 300}, {130, 33, 17}, {29, 257, 64}};
  for (int i = 0; i < 64; ++i) {
    const auto& sh = shapes[i % shapes.size()];
    const bool ta = rng() & 1, tb = rng() & 1;
    GemmTester t;
    t.shape(sh[0], sh[1], sh[2]).trans_a(ta).trans_b(tb).beta(i % 2 ? 0.0f : 1.0f).nan_c(i % 2).seed(i);
    if (!t.Test(RandomSchedule(v, t.Key(), rng))) return;
  }
}

// B packed ahead (pack_weights) under drawn schedules: every depth block size
// against k (kc below, equal to and above k, with remainders), every par and
// thread count, both layouts of B, padded leading dimensions, alpha and beta.
void PackedWeights(const KernelVariant& v) {
  std::mt19937 rng(7001u + v.config.gemm.mr * 31 + v.config.gemm.nr);
  const std::vector<std::array<int64_t, 3>> shapes = {
      {1, 1, 1}, {5, 67, 131}, {1, 100, 300}, {130, 33, 17}, {29, 257, 64}, {64, 96, 385}};
  for (int i = 0; i < 48; ++i) {
    const auto& sh = shapes[i % shapes.size()];
    GemmTester t;
    t.shape(sh[0], sh[1], sh[2]).trans_a(rng() & 1).trans_b(rng() & 1).packed_weights(true).seed(i);
    t.beta(i % 3 == 0 ? 0.0f : 0.5f).nan_c(i % 3 == 0).alpha(i % 5 == 0 ? -1.5f : 1.0f);
    if (i % 4 == 1) t.lda_pad(3).ldb_pad(5).ldc_pad(2);
    if (!t.Test(RandomSchedule(v, t.Key(), rng))) return;
  }
}

struct ShapeLine {
  int64_t m, n, k;
  bool ta, tb;
};

std::vector<ShapeLine> ShapesFromData() {
  std::vector<ShapeLine> out;
  std::ifstream in(std::string(CG_TEST_DATA_DIR) + "/gemm_shapes.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    ShapeLine s{0, 0, 0, false, false};
    int ta = 0, tb = 0;
    ss >> s.m >> s.n >> s.k;
    if (ss >> ta >> tb) {
      s.ta = ta;
      s.tb = tb;
    }
    out.push_back(s);
  }
  return out;
}

void DefaultSchedules(const KernelVariant& v) {
  const auto shapes = ShapesFromData();
  ASSERT_GE(shapes.size(), 10u) << "tests/data/gemm_shapes.txt missing or short";
  for (const auto& sh : shapes) {
    const OpKey key = OpKey::Gemm(sh.m, sh.n, sh.k, sh.ta, sh.tb);
    // Valid for any thread budget, not just this host's.
    for (int threads : {1, 3, 64}) {
      DeviceInfo d = Host();
      d.threads = threads;
      const Schedule s = VariantDefaultSchedule(v, key, d);
      const Status st = CheckSchedule(s, key, d);
      EXPECT_TRUE(st.ok()) << key.ToString() << " threads=" << threads << ": " << st.ToString();
    }
    const Schedule s = VariantDefaultSchedule(v, key, Host());
    GemmTester t;
    t.shape(sh.m, sh.n, sh.k).trans_a(sh.ta).trans_b(sh.tb).beta(0.0f).nan_c(true);
    if (!t.Test(s)) return;
  }
}

void ConcurrentCallers(const KernelVariant& v) {
  const int callers = 3;
  std::vector<std::thread> threads;
  for (int c = 0; c < callers; ++c) {
    threads.emplace_back([&v, c] {
      for (int r = 0; r < 4; ++r) {
        const int par = (c + r) % 3;
        const Schedule s = With(v, {{"mc", 2 * v.config.gemm.mr}, {"kc", 32}, {"nc", 2 * v.config.gemm.nr}, {"par", par},
                                    {"threads", TwoThreads()}});
        GemmTester t;
        t.shape(45 + c, 71 + r, 67).beta(r % 2 ? 1.0f : 0.0f).seed(c * 100 + r);
        if (!t.Test(s)) return;
      }
    });
  }
  for (auto& t : threads) t.join();
}

// Thread counts that are not powers of two (a budget of 6 or 12 CPUs runs them), more
// threads than this host has: every split, both layouts of B, B packed ahead, and
// rows or panels fewer than the threads.
void OddThreadCounts(const KernelVariant& v) {
  const int64_t mr = v.config.gemm.mr, nr = v.config.gemm.nr;
  const std::vector<std::array<int64_t, 3>> shapes = {{37, 131, 29}, {3 * mr + 1, 5 * nr + 3, 64}, {mr - 1, 7 * nr, 17}};
  int i = 0;
  for (int threads : {3, 5, 7})
    for (int par = 0; par < 3; ++par)
      for (const auto& sh : shapes) {
        const Schedule s = testing::With(
            v, {{"mc", 2 * mr}, {"kc", 16}, {"nc", 2 * nr}, {"par", par}, {"threads", threads}});
        GemmTester t;
        t.shape(sh[0], sh[1], sh[2]).trans_b(i % 2).packed_weights(i % 3 == 0).beta(i % 2 ? 0.5f : 0.0f).seed(++i);
        if (!t.Test(s)) return;
      }
}

#define CG_KERNEL(isa, name, mr, nr)        \
  TEST(name, OddThreadCounts) {             \
    CG_REQUIRE_VARIANT(v, #name);           \
    OddThreadCounts(*v);                    \
  }                                         \
  TEST(name, EdgeShapes) {                  \
    CG_REQUIRE_VARIANT(v, #name);           \
    EdgeShapes(*v);                         \
  }                                         \
  TEST(name, Transposes) {                  \
    CG_REQUIRE_VARIANT(v, #name);           \
    Transposes(*v);                         \
  }                                         \
  TEST(name, PanelPackedB) {                \
    CG_REQUIRE_VARIANT(v, #name);           \
    PanelPackedB(*v);                       \
  }                                         \
  TEST(name, AlphaBeta) {                   \
    CG_REQUIRE_VARIANT(v, #name);           \
    AlphaBeta(*v);                          \
  }                                         \
  TEST(name, RandomSchedules) {             \
    CG_REQUIRE_VARIANT(v, #name);           \
    RandomSchedules(*v);                    \
  }                                         \
  TEST(name, DefaultSchedules) {            \
    CG_REQUIRE_VARIANT(v, #name);           \
    DefaultSchedules(*v);                   \
  }                                         \
  TEST(name, ConcurrentCallers) {           \
    CG_REQUIRE_VARIANT(v, #name);           \
    ConcurrentCallers(*v);                  \
  }                                         \
  TEST(name, PackedWeights) {               \
    CG_REQUIRE_VARIANT(v, #name);           \
    PackedWeights(*v);                      \
  }
#include "kernels/cpu/gemm_f32.inc"

// ---- Small-m variants (gemv_f32.inc) ------------------------------------------------

// The variant's layout of B (the one its supports() accepts).
bool GemvTransB(const KernelVariant& v) { return VariantSupports(v, OpKey::Gemm(1, 8, 8, false, true), Host()).ok(); }

// nt variants also take `prefetch` (nt_prefetch; nn variants have none).
Schedule GemvWith(const KernelVariant& v, int threads, int block, int order = 0, int nt_prefetch = 0) {
  if (GemvTransB(v))
    return With(v, {{"threads", threads}, {"nj", block}, {"order", order}, {"prefetch", nt_prefetch}});
  return With(v, {{"threads", threads}, {"nb", block}, {"order", order}});
}

void GemvShapes(const KernelVariant& v) {
  const bool tb = GemvTransB(v);
  int seed = 0;
  for (int64_t m = 1; m <= cpu::GemvMaxM(tb); ++m)
    for (int64_t n : {1, 7, 16, 17, 33, 100})
      for (int64_t k : {1, 5, 8, 17, 64, 131})
        for (int ta = 0; ta < 2; ++ta) {
          const int block = tb ? std::vector<int>{1, 2, 4, 8}[size_t(seed % 4)] : std::vector<int>{64, 128}[size_t(seed % 2)];
          GemmTester t;
          t.shape(m, n, k).trans_a(ta).trans_b(tb).seed(uint32_t(++seed));
          if (seed % 3 == 0) t.lda_pad(3).ldb_pad(5).ldc_pad(2);
          if (!t.Test(GemvWith(v, seed % 2 ? TwoThreads() : 1, block, 0, seed / 2 % 2))) return;
        }
  EXPECT_FALSE(VariantSupports(v, OpKey::Gemm(cpu::GemvMaxM(tb) + 1, 8, 8, false, tb), Host()).ok());
  EXPECT_FALSE(VariantSupports(v, OpKey::Gemm(1, 8, 8, false, !tb), Host()).ok());
}

void GemvAlphaBetaAndBlocks(const KernelVariant& v) {
  const bool tb = GemvTransB(v);
  for (float alpha : {0.0f, 1.0f, -0.5f})
    for (float beta : {0.0f, 1.0f, 2.5f}) {
      GemmTester t;
      t.shape(3, 150, 70).trans_b(tb).ldc_pad(3).alpha(alpha).beta(beta).nan_c(beta == 0.0f);
      if (!t.Test(GemvWith(v, TwoThreads(), tb ? 4 : 64))) return;
    }
  for (int32_t block : v.params[1].values)
    for (int64_t m : {int64_t{1}, int64_t{3}, cpu::GemvMaxM(tb)}) {
      GemmTester t;
      t.shape(m, 300, 257).trans_b(tb).beta(0.5f).seed(uint32_t(block + m));
      if (!t.Test(GemvWith(v, TwoThreads(), block))) return;
    }
}

// v's default schedule for key on the host seen as a `vendor` CPU with `threads` threads.
Schedule DefaultOn(const KernelVariant& v, std::string_view vendor, int threads, const OpKey& key) {
  DeviceInfo d = Host();
  d.vendor = std::string(vendor);
  d.threads = threads;
  return VariantDefaultSchedule(v, key, d);
}

// nt defaults prefetch the next tile's rows of B in a tile's second pass on Intel CPUs;
// not on AMD CPUs.
TEST(CpuGemmTable, NtSecondPassesPrefetchOnIntel) {
  for (const char* name : {"cpu_f32_gemv_nt__avx2", "cpu_f32_gemv_nt__avx512"}) {
    CG_REQUIRE_VARIANT(v, name);
    for (int64_t m : {1, 5, 16}) {
      const OpKey key = OpKey::Gemm(m, 4096, 96, false, true);
      EXPECT_EQ(DefaultOn(*v, kCpuVendorIntel, 1, key).params[cpu::kGemvNTPrefetch], 1) << name << " m=" << m;
      EXPECT_EQ(DefaultOn(*v, kCpuVendorAmd, 2, key).params[cpu::kGemvNTPrefetch], 0) << name << " m=" << m;
    }
  }
}

// nt defaults pass in depth blocks of 256 on Intel AVX-512 hosts where m takes more
// than one pass and the rows a whole-depth tile reads (m of A, 4 of B) are over
// 32 KiB; all of k at once elsewhere (m <= 4, rows within the bound, AMD, AVX2).
TEST(CpuGemmTable, NtPassesRunInDepthBlocksOnIntel) {
  CG_REQUIRE_VARIANT(v, "cpu_f32_gemv_nt__avx512");
  const auto kc = [&](std::string_view vendor, int threads, int64_t m, int64_t k) {
    return DefaultOn(*v, vendor, threads, OpKey::Gemm(m, 4096, k, false, true)).params[cpu::kGemvNTKc];
  };
  for (int threads : {1, 2}) {
    EXPECT_EQ(kc(kCpuVendorIntel, threads, 5, 1200), 256);  // 9 rows of 4800 bytes
    EXPECT_EQ(kc(kCpuVendorIntel, threads, 5, 910), 0);     // 9 x 3640 = 32760 bytes
    EXPECT_EQ(kc(kCpuVendorIntel, threads, 5, 911), 256);
    EXPECT_EQ(kc(kCpuVendorIntel, threads, 16, 409), 0);    // 20 x 1636 = 32720 bytes
    EXPECT_EQ(kc(kCpuVendorIntel, threads, 16, 410), 256);
    EXPECT_EQ(kc(kCpuVendorIntel, threads, 16, 11008), 256);
    EXPECT_EQ(kc(kCpuVendorIntel, threads, 4, 11008), 0);   // one pass
    EXPECT_EQ(kc(kCpuVendorAmd, threads, 16, 4096), 0);
  }
  CG_REQUIRE_VARIANT(avx2, "cpu_f32_gemv_nt__avx2");
  EXPECT_EQ(DefaultOn(*avx2, kCpuVendorIntel, 1, OpKey::Gemm(16, 4096, 4096, false, true)).params[cpu::kGemvNTKc], 0);
}

// nt defaults read each row of a tile whole on AMD CPUs at m = 1 with rows of up to 12
// KiB on one thread (8 KiB on more) and at m = 2 up to 3 KiB; side by side elsewhere.
TEST(CpuGemmTable, NtTilesReadShortRowsWholeOnAmd) {
  CG_REQUIRE_VARIANT(v, "cpu_f32_gemv_nt__avx2");
  const auto order = [&](std::string_view vendor, int threads, int64_t m, int64_t k) {
    return DefaultOn(*v, vendor, threads, OpKey::Gemm(m, 4096, k, false, true)).params[cpu::kGemvOrder];
  };
  EXPECT_EQ(order(kCpuVendorAmd, 1, 1, 64), 1);
  EXPECT_EQ(order(kCpuVendorAmd, 1, 1, 3072), 1);  // 12 KiB rows
  EXPECT_EQ(order(kCpuVendorAmd, 1, 1, 3073), 0);
  EXPECT_EQ(order(kCpuVendorAmd, 2, 1, 2048), 1);  // 8 KiB rows
  EXPECT_EQ(order(kCpuVendorAmd, 2, 1, 2049), 0);
  EXPECT_EQ(order(kCpuVendorAmd, 8, 1, 2049), 0);
  EXPECT_EQ(order(kCpuVendorAmd, 2, 2, 768), 1);  // 3 KiB rows
  EXPECT_EQ(order(kCpuVendorAmd, 1, 2, 769), 0);
  EXPECT_EQ(order(kCpuVendorAmd, 1, 3, 128), 0);
  EXPECT_EQ(order(kCpuVendorIntel, 1, 1, 64), 0);
}

// nn defaults keep a tile of C in registers for all of k where rows of B are up to
// 1 KiB and a thread's columns fit the tile (AVX2, m = 1: 12 vectors), on AMD and
// Intel CPUs alike; with more threads than one they split k where all of n fits it.
TEST(CpuGemmTable, NnTilesOfCStayInRegisters) {
  for (std::string_view vendor : {kCpuVendorAmd, kCpuVendorIntel}) {
    SCOPED_TRACE(vendor);
    CG_REQUIRE_VARIANT(v, "cpu_f32_gemv_nn__avx2");
    const auto order = [&](int64_t m, int64_t n) {
      return DefaultOn(*v, vendor, 1, OpKey::Gemm(m, n, 2048)).params[cpu::kGemvOrder];
    };
    EXPECT_EQ(order(1, 64), 1);
    EXPECT_EQ(order(1, 96), 1);
    EXPECT_EQ(order(1, 97), 0);  // 13 vectors
    EXPECT_EQ(order(4, 16), 1);  // 2 vectors of 4 rows
    EXPECT_EQ(order(4, 17), 0);
    CG_REQUIRE_VARIANT(w, "cpu_f32_gemv_nn__avx512");
    EXPECT_EQ(DefaultOn(*w, vendor, 1, OpKey::Gemm(1, 256, 2048)).params[cpu::kGemvOrder], 1);  // 1 KiB rows
    EXPECT_EQ(DefaultOn(*w, vendor, 1, OpKey::Gemm(1, 257, 2048)).params[cpu::kGemvOrder], 0);
    EXPECT_EQ(DefaultOn(*w, vendor, 2, OpKey::Gemm(4, 80, 2048)).params[cpu::kGemvOrder], cpu::kGemvNNTileSplitK);
    // 2 KiB rows on 2 threads: steps, threads splitting k (next test)
    EXPECT_EQ(DefaultOn(*w, vendor, 2, OpKey::Gemm(1, 512, 2048)).params[cpu::kGemvOrder], cpu::kGemvNNStepsSplitK);
    // More threads: they split k where all of n fits the tile, else n with the tile per
    // thread.
    const Schedule by_k = DefaultOn(*w, vendor, 8, OpKey::Gemm(1, 256, 2048));
    EXPECT_EQ(by_k.params[cpu::kGemvThreads], 8);
    EXPECT_EQ(by_k.params[cpu::kGemvOrder], cpu::kGemvNNTileSplitK);
    const Schedule by_n = DefaultOn(*w, vendor, 8, OpKey::Gemm(4, 128, 2048));  // a tile of 6 vectors at m = 4
    EXPECT_EQ(by_n.params[cpu::kGemvThreads], 8);
    EXPECT_EQ(by_n.params[cpu::kGemvOrder], cpu::kGemvNNTile);
  }
}

// Other nn defaults with more than one thread, on AMD and Intel CPUs: steps with
// threads splitting k, nb the widest, where a thread's share of a row split by n would
// be at most kGemvNNSplitKMaxThreadRowBytes; else steps split by n. One thread: steps
// split by n.
TEST(CpuGemmTable, NnStepsSplitK) {
  CG_REQUIRE_VARIANT(v, "cpu_f32_gemv_nn__avx512");
  const int64_t max_cols = cpu::kGemvNNSplitKMaxThreadRowBytes / 4;
  for (std::string_view vendor : {kCpuVendorAmd, kCpuVendorIntel})
    for (int64_t m : {1, 4}) {
      SCOPED_TRACE(fmt::format("{} m={}", vendor, m));
      const auto fit = [&](int threads, int64_t n) { return DefaultOn(*v, vendor, threads, OpKey::Gemm(m, n, 2048)); };
      const Schedule s = fit(2, 768);
      EXPECT_EQ(s.params[cpu::kGemvThreads], 2);
      EXPECT_EQ(s.params[cpu::kGemvOrder], cpu::kGemvNNStepsSplitK);
      EXPECT_EQ(s.params[cpu::kGemvBlock], std::end(cpu::kGemvNbValues)[-1]);
      EXPECT_EQ(fit(2, 2 * max_cols).params[cpu::kGemvOrder], cpu::kGemvNNStepsSplitK);
      EXPECT_EQ(fit(2, 2 * max_cols + 1).params[cpu::kGemvOrder], cpu::kGemvNNSteps);
      EXPECT_EQ(fit(8, 8 * max_cols).params[cpu::kGemvOrder], cpu::kGemvNNStepsSplitK);
      EXPECT_EQ(fit(1, 768).params[cpu::kGemvOrder], cpu::kGemvNNSteps);
    }
}

// nn steps' nb: the widest block whose m rows of C fit in 16 KiB, or a thread's whole
// rows where they fit in 32 KiB; on Intel CPUs also where m <= kGemvNNWholeRowsIntelMaxM
// and a thread's columns fit the widest block (rows of B read in one run).
TEST(CpuGemmTable, NnStepsReadWholeRowsOnIntel) {
  CG_REQUIRE_VARIANT(v, "cpu_f32_gemv_nn__avx512");
  const int32_t widest = std::end(cpu::kGemvNbValues)[-1];
  const auto nb = [&](std::string_view vendor, int threads, int64_t m, int64_t n) {
    const Schedule s = DefaultOn(*v, vendor, threads, OpKey::Gemm(m, n, 2048));
    EXPECT_EQ(s.params[cpu::kGemvOrder], cpu::kGemvNNSteps) << vendor << " m=" << m << " n=" << n;
    return s.params[cpu::kGemvBlock];
  };
  const int64_t max_m = cpu::kGemvNNWholeRowsIntelMaxM;
  for (int64_t m = 3; m <= max_m; ++m) {
    SCOPED_TRACE(fmt::format("m={}", m));
    EXPECT_EQ(nb(kCpuVendorIntel, 1, m, 3000), widest);  // 36-47 KiB of C: whole rows
    EXPECT_EQ(nb(kCpuVendorIntel, 1, m, widest), widest);
    EXPECT_EQ(nb(kCpuVendorIntel, 1, m, widest + 1), 1024);  // 16 KiB of C
    EXPECT_EQ(nb(kCpuVendorIntel, 2, m, 6000), widest);     // 3000 columns a thread
    EXPECT_EQ(nb(kCpuVendorAmd, 1, m, 3000), 1024);
  }
  EXPECT_EQ(nb(kCpuVendorIntel, 1, max_m + 1, 3000), 512);  // 16 KiB of C
  EXPECT_EQ(nb(kCpuVendorIntel, 1, 2, 4000), widest);       // 31 KiB of C: whole rows on either vendor
  EXPECT_EQ(nb(kCpuVendorAmd, 1, 2, 4000), widest);
}

// nn steps at m = 1 on AMD CPUs: 16 rows of B per step on AVX-512 where rows are of
// kGemvNNDeepStepsMinRowBytes to kGemvNNDeepStepsMaxRowBytes and not a multiple of
// 4 KiB; else 8 (m > 1, an Intel CPU, the AVX2 variant).
TEST(CpuGemmTable, NnDeepStepsOnAmd) {
  CG_REQUIRE_VARIANT(v, "cpu_f32_gemv_nn__avx512");
  std::string_view vendor = kCpuVendorAmd;
  const auto unroll_k = [&](const KernelVariant& var, int threads, int64_t m, int64_t n) {
    return DefaultOn(var, vendor, threads, OpKey::Gemm(m, n, 2048)).params[cpu::kGemvUnrollK];
  };
  const int64_t min_n = cpu::kGemvNNDeepStepsMinRowBytes / 4, max_n = cpu::kGemvNNDeepStepsMaxRowBytes / 4;
  for (int threads : {1, 2}) {
    EXPECT_EQ(unroll_k(*v, threads, 1, 768), 16) << threads;
    EXPECT_EQ(unroll_k(*v, threads, 1, 1000), 16) << threads;
    EXPECT_EQ(unroll_k(*v, threads, 1, 1024), 8) << threads;  // 4 KiB rows
    EXPECT_EQ(unroll_k(*v, threads, 1, 2048), 8) << threads;  // 8 KiB rows
    EXPECT_EQ(unroll_k(*v, threads, 1, min_n), 16) << threads;
    EXPECT_EQ(unroll_k(*v, threads, 1, min_n - 1), 8) << threads;
    EXPECT_EQ(unroll_k(*v, threads, 1, max_n), 16) << threads;
    EXPECT_EQ(unroll_k(*v, threads, 1, max_n + 1), 8) << threads;
    EXPECT_EQ(unroll_k(*v, threads, 2, 768), 8) << threads;
  }
  vendor = kCpuVendorIntel;
  EXPECT_EQ(unroll_k(*v, 1, 1, 768), 8);
  vendor = kCpuVendorAmd;
  CG_REQUIRE_VARIANT(w, "cpu_f32_gemv_nn__avx2");
  EXPECT_EQ(unroll_k(*w, 1, 1, 768), 8);
}

// A small-m default takes a thread per kGemvBytesPerThread of B (a second one from
// 128 KiB), within the budget.
void GemvDefaultThreads(const KernelVariant& v, bool constant_weights) {
  const bool tb = GemvTransB(v) || constant_weights;
  DeviceInfo d = Host();
  d.threads = 8;
  const auto threads = [&](int64_t n, int64_t k) {
    OpKey key = OpKey::Gemm(1, n, k, false, tb);
    key.constant_weights = constant_weights;
    return VariantDefaultSchedule(v, key, d).params[cpu::kGemvThreads];
  };
  EXPECT_EQ(threads(128, 128), 1);   // 64 KiB
  EXPECT_EQ(threads(256, 128), 2);   // 128 KiB
  EXPECT_EQ(threads(512, 256), 8);   // 512 KiB
  EXPECT_EQ(threads(4096, 64), 8);   // 1 MiB: 16 by the bytes, 8 by the budget
  d.threads = 2;
  EXPECT_EQ(threads(4096, 64), 2);
}

void GemvDefaults(const KernelVariant& v) {
  GemvDefaultThreads(v, false);
  const bool tb = GemvTransB(v);
  for (const auto& sh : ShapesFromData()) {
    if (sh.m > cpu::GemvMaxM(tb)) continue;
    const OpKey key = OpKey::Gemm(sh.m, sh.n, sh.k, sh.ta, tb);
    for (int threads : {1, 3, 64}) {
      DeviceInfo d = Host();
      d.threads = threads;
      EXPECT_TRUE(CheckSchedule(VariantDefaultSchedule(v, key, d), key, d).ok()) << key.ToString();
    }
    GemmTester t;
    t.shape(sh.m, sh.n, sh.k).trans_a(sh.ta).trans_b(tb).beta(0.0f).nan_c(true);
    if (!t.Test(VariantDefaultSchedule(v, key, Host()))) return;
  }
}

void GemvConcurrentCallers(const KernelVariant& v) {
  std::vector<std::thread> threads;
  for (int c = 0; c < 3; ++c)
    threads.emplace_back([&v, c] {
      for (int r = 0; r < 4; ++r) {
        GemmTester t;
        t.shape(std::min<int64_t>(1 + c + r, cpu::GemvMaxM(GemvTransB(v))), 301 + r, 129).trans_b(GemvTransB(v)).beta(r % 2 ? 1.0f : 0.0f).seed(c * 100 + r);
        if (!t.Test(GemvWith(v, TwoThreads(), GemvTransB(v) ? 8 : 256))) return;
      }
    });
  for (auto& t : threads) t.join();
}

// 3, 5 and 7 threads (more than this host has), n ranges shorter than a block; nn
// also with threads splitting k (orders 2 and 3; more than two slices are summed by
// the threads), k of fewer rows than threads.
void GemvOddThreadCounts(const KernelVariant& v) {
  const bool tb = GemvTransB(v);
  int seed = 0;
  for (int threads : {3, 5, 7})
    for (int64_t n : {5, 67, 301})
      for (int64_t m : {int64_t{1}, cpu::GemvMaxM(tb)})
        for (int order : {0, 1, 2, 3}) {
          if (tb && order >= 2) continue;
          GemmTester t;
          t.shape(m, n, seed % 4 == 0 ? 4 : 129).trans_b(tb).beta(seed % 2 ? 1.0f : 0.0f).seed(++seed);
          if (!t.Test(GemvWith(v, threads, tb ? 4 : 64, order, seed % 3 == 0))) return;
        }
}

// Every order. nt: a tile's rows read side by side (0) or each whole in turn (1, with
// 4 / m partial sums per row), every nj, m from 1 to 16, k with and without whole
// chain steps and a partial vector. nn: steps of rows (0), a tile of C in registers
// for all of k (1), the same with threads splitting k (2; k = 1 leaves a thread no
// rows), steps with threads splitting k (3), n across the tile's widths (a partial
// vector, several tiles). Padded rows.
void GemvOrders(const KernelVariant& v) {
  const bool tb = GemvTransB(v);
  int seed = 0;
  const std::vector<int> blocks = tb ? std::vector<int>{1, 2, 4, 8} : std::vector<int>{64};
  const std::vector<int64_t> ms = tb ? std::vector<int64_t>{1, 2, 3, 4, 16} : std::vector<int64_t>{1, 2, 3, 4};
  const std::vector<int64_t> ns = tb ? std::vector<int64_t>{0} : std::vector<int64_t>{1, 15, 17, 100, 129, 200, 301};
  for (int order = 0; order < (tb ? 2 : 4); ++order)
    for (int block : blocks)
      for (int64_t m : ms)
        for (int64_t n : ns)
          for (int64_t k : {1, 15, 64, 100, 129}) {
            GemmTester t;
            t.shape(m, tb ? 2 * block + 3 : n, k).trans_b(tb).lda_pad(seed % 3).ldb_pad(seed % 2 * 5);
            t.beta(seed % 2 ? 0.5f : 0.0f).alpha(seed % 5 == 0 ? -1.5f : 1.0f).seed(++seed);
            if (!t.Test(GemvWith(v, TwoThreads(), block, order))) return;
          }
}

// unroll_k 16 (nn, m = 1, AVX-512): steps of 16 rows of B, threads splitting n or k,
// n across whole and partial vectors and blocks, k with and without whole steps,
// padded rows, alpha and beta; check() rejects it at m > 1 and on AVX2.
void GemvDeepSteps(const KernelVariant& v) {
  if (GemvTransB(v)) return;
  const Schedule deep = With(v, {{"unroll_k", cpu::kGemvNNDeepStepRows}});
  const OpKey m1 = OpKey::Gemm(1, 300, 100), m2 = OpKey::Gemm(2, 300, 100);
  if (!(v.isa & kIsaAvx512)) {
    const Status st = CheckSchedule(deep, m1, Host());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("unroll_k=16 runs m = 1 on AVX-512 only"), std::string::npos) << st.message();
    return;
  }
  EXPECT_TRUE(CheckSchedule(deep, m1, Host()).ok());
  const Status st = CheckSchedule(deep, m2, Host());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("unroll_k=16 runs m = 1 on AVX-512 only (m=2)"), std::string::npos) << st.message();
  int seed = 0;
  for (int order : {0, 3})
    for (int nb : {64, 4096})
      for (int64_t n : {1, 15, 17, 300, 771})
        for (int64_t k : {1, 15, 16, 17, 100, 257}) {
          GemmTester t;
          t.shape(1, n, k).lda_pad(seed % 3).ldb_pad(seed % 2 * 5).beta(seed % 2 ? 0.5f : 0.0f);
          t.alpha(seed % 5 == 0 ? -1.5f : 1.0f).nan_c(seed % 2 == 0).seed(uint32_t(++seed));
          const int threads = seed % 3 == 0 ? 3 : TwoThreads();
          if (!t.Test(With(v, {{"threads", threads}, {"nb", nb}, {"order", order}, {"unroll_k", 16}}))) return;
        }
}

// nt depth blocks (`kc`): blocks of 128 and 256 over k of one block and a vector more,
// a partial last block and a partial vector, several blocks; m of one pass (1, 4) and
// several (5, 16; the passes share out the next block's rows), every nj with tiles and
// single columns after them, prefetch on and off, 1 to 3 threads, A stored transposed,
// padded rows, alpha and beta. kc at or above k runs all of k. check() rejects blocks
// with `order` 1 (rows read whole).
void GemvDepthBlocks(const KernelVariant& v) {
  if (!GemvTransB(v)) GTEST_SKIP() << v.name << " runs B stored k x n, which has no depth blocks";
  const OpKey key = OpKey::Gemm(8, 300, 1000, false, true);
  const Status st = CheckSchedule(With(v, {{"order", 1}, {"kc", 256}}), key, Host());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("kc=256 runs order 0 only (order=1)"), std::string::npos) << st.message();
  EXPECT_TRUE(CheckSchedule(With(v, {{"order", 1}, {"kc", 0}}), key, Host()).ok());
  int seed = 0;
  for (int kc : {128, 256})
    for (int nj : {1, 2, 4, 8})
      for (int64_t m : {1, 4, 5, 16})
        for (int64_t k : {129, 256, 300, 700}) {
          ++seed;
          GemmTester t;
          t.shape(m, 3 * nj + 2 + seed % 7, k).trans_b(true).trans_a(seed % 5 == 0);
          t.lda_pad(seed % 3).ldb_pad(seed % 2 * 5).beta(seed % 2 ? 0.5f : 0.0f).alpha(seed % 3 == 0 ? -1.5f : 1.0f);
          t.nan_c(seed % 2 == 0).seed(uint32_t(seed));
          const Schedule s = With(v, {{"threads", 1 + seed % 3}, {"nj", nj}, {"prefetch", seed / 2 % 2}, {"kc", kc}});
          if (!t.Test(s)) return;
        }
}

#define CG_GEMV(isa, name, trans_b)         \
  TEST(name, DepthBlocks) {                 \
    CG_REQUIRE_VARIANT(v, #name);           \
    GemvDepthBlocks(*v);                    \
  }                                         \
  TEST(name, DeepSteps) {                   \
    CG_REQUIRE_VARIANT(v, #name);           \
    GemvDeepSteps(*v);                      \
  }                                         \
  TEST(name, Orders) {                      \
    CG_REQUIRE_VARIANT(v, #name);           \
    GemvOrders(*v);                         \
  }                                         \
  TEST(name, OddThreadCounts) {             \
    CG_REQUIRE_VARIANT(v, #name);           \
    GemvOddThreadCounts(*v);                \
  }                                         \
  TEST(name, Shapes) {                      \
    CG_REQUIRE_VARIANT(v, #name);           \
    GemvShapes(*v);                         \
  }                                         \
  TEST(name, AlphaBetaAndBlocks) {          \
    CG_REQUIRE_VARIANT(v, #name);           \
    GemvAlphaBetaAndBlocks(*v);             \
  }                                         \
  TEST(name, DefaultSchedules) {            \
    CG_REQUIRE_VARIANT(v, #name);           \
    GemvDefaults(*v);                       \
  }                                         \
  TEST(name, ConcurrentCallers) {           \
    CG_REQUIRE_VARIANT(v, #name);           \
    GemvConcurrentCallers(*v);              \
  }
#include "kernels/cpu/gemv_f32.inc"

// ---- Small-m variants on packed panels (CG_GEMV_PACKED rows) ------------------------

Schedule PackedWith(const KernelVariant& v, int threads, int nv, int prefetch = 0) {
  return With(v, {{"threads", threads}, {"nv", nv}, {"prefetch", prefetch}});
}

// Every m, both layouts and transposed A, every nv whose tile fits, n around the panel
// widths; from packed weights (the plan's way) and, every third case, from B as
// stored (the call packs into scratch first).
void GemvPackedShapes(const KernelVariant& v) {
  const int64_t w = v.config.gemm.nr;
  int seed = 0;
  for (int64_t m = 1; m <= cpu::kGemvPackedMaxM; ++m)
    for (int64_t n : {w, w + 1, 2 * w - 1, 3 * w, 4 * w, 4 * w + 3, 9 * w + 5})
      for (int64_t k : {1, 5, 17, 131})
        for (int tab = 0; tab < 4; ++tab) {
          const bool ta = tab & 1, tb = tab >> 1;
          for (int32_t nv : cpu::kGemvNvValues) {
            GemmTester t;
            t.shape(m, n, k).trans_a(ta).trans_b(tb).packed_weights(++seed % 3 != 0).seed(uint32_t(seed));
            if (seed % 4 == 0) t.lda_pad(3).ldb_pad(5).ldc_pad(2);
            const Schedule s = PackedWith(v, seed % 2 ? TwoThreads() : 1, nv,
                                          cpu::kGemmPrefetchValues[seed % std::size(cpu::kGemmPrefetchValues)]);
            if (!CheckSchedule(s, t.Key(), Host()).ok() && seed % 3 != 0) continue;  // tile over the registers
            if (!t.Test(s)) return;
          }
        }
}

void GemvPackedAlphaBeta(const KernelVariant& v) {
  for (float alpha : {0.0f, 1.0f, -0.5f})
    for (float beta : {0.0f, 1.0f, 2.5f})
      for (int tb = 0; tb < 2; ++tb) {
        GemmTester t;
        t.shape(3, 150, 70).trans_b(tb).ldc_pad(3).alpha(alpha).beta(beta).nan_c(beta == 0.0f).packed_weights(true);
        if (!t.Test(VariantDefaultSchedule(v, t.Key(), Host()))) return;
      }
}

// The rules: constant-weights keys only, m <= kGemvPackedMaxM, n of a vector or more;
// a tile over the registers is refused naming nv, m and the register count; the
// fitted default passes check() on every budget and runs.
void GemvPackedRules(const KernelVariant& v) {
  GemvDefaultThreads(v, true);
  OpKey key = OpKey::Gemm(4, 768, 768, false, true);
  EXPECT_EQ(VariantSupports(v, key, Host()).code(), StatusCode::kUnimplemented);
  key.constant_weights = true;
  EXPECT_TRUE(VariantSupports(v, key, Host()).ok());
  OpKey wide = OpKey::Gemm(cpu::kGemvPackedMaxM + 1, 768, 768);
  wide.constant_weights = true;
  EXPECT_EQ(VariantSupports(v, wide, Host()).code(), StatusCode::kUnimplemented);
  // The largest m whose tile fits with kGemvPackedMinNv: 8 with 32 registers, 6 with 16.
  const int64_t max_m = (v.isa & kIsaAvx512) ? 8 : 6;
  for (int64_t m : {max_m, max_m + 1}) {
    OpKey k = OpKey::Gemm(m, 768, 768, false, true);
    k.constant_weights = true;
    EXPECT_EQ(VariantSupports(v, k, Host()).ok(), m == max_m) << k.ToString();
  }
  OpKey narrow = OpKey::Gemm(2, v.config.gemm.nr - 1, 768);
  narrow.constant_weights = true;
  EXPECT_EQ(VariantSupports(v, narrow, Host()).code(), StatusCode::kUnimplemented);
  const int regs = (v.isa & kIsaAvx512) ? 32 : 16;
  OpKey big_m = OpKey::Gemm(max_m, 768, 768);
  big_m.constant_weights = true;
  const Schedule over = PackedWith(v, 1, 4);
  const Status st = CheckSchedule(over, big_m, Host());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(fmt::format("nv=4 with m={} needs {} vector registers, the ISA has {}", max_m,
                                          max_m * 4 + 6, regs)),
            std::string::npos)
      << st.message();
  // Packed weights hold n rounded up to a vector, whatever nv: the last panel is only
  // as wide as its columns (5 vectors in panels of 4: 4 + 1, not 8).
  const int64_t vw = v.config.gemm.nr;
  for (int64_t n : {5 * vw, 5 * vw - 3, 4 * vw})
    for (int32_t nv : cpu::kGemvNvValues) {
      OpKey lean = OpKey::Gemm(2, n, 64, false, true);
      lean.constant_weights = true;
      EXPECT_EQ(v.packed_weights_bytes(v, lean, PackedWith(v, 1, nv).params),
                size_t(cpu::RoundUp(n, vw) * 64 * int64_t{sizeof(float)}))
          << "n=" << n << " nv=" << nv;
    }
  // The fitted prefetch follows the vendor (measured on Intel, slower on AMD) and m
  // (slower at m = 1 from huge pages).
  for (const char* vendor : {"GenuineIntel", "AuthenticAMD"})
    for (int64_t m : {1, 4}) {
      DeviceInfo d = Host();
      d.vendor = vendor;
      OpKey km = key;
      km.dims[0] = m;
      EXPECT_EQ(VariantDefaultSchedule(v, km, d).params[cpu::kGemvPrefetch],
                cpu::GemvPackedDefaultPrefetch(d.vendor == "GenuineIntel", m))
          << vendor << " m=" << m;
    }
  EXPECT_GT(cpu::GemvPackedDefaultPrefetch(true, 2), 0);
  EXPECT_EQ(cpu::GemvPackedDefaultPrefetch(true, 1), 0);
  EXPECT_EQ(cpu::GemvPackedDefaultPrefetch(false, 4), 0);
  // nv: the widest tile that fits, but at most 2 above kGemvPackedWideMaxM.
  for (int64_t m = 1; m <= max_m; ++m) {
    OpKey km = OpKey::Gemm(m, 4096, 768, false, true);
    km.constant_weights = true;
    int32_t widest = 1;
    for (int32_t nv : cpu::kGemvNvValues)
      if (cpu::GemvPackedTileFits(m, nv, regs)) widest = nv;
    EXPECT_EQ(VariantDefaultSchedule(v, km, Host()).params[cpu::kGemvBlock],
              m > cpu::kGemvPackedWideMaxM ? std::min(widest, 2) : widest)
        << "m=" << m;
  }
  for (const auto& sh : ShapesFromData()) {
    OpKey k = OpKey::Gemm(sh.m, sh.n, sh.k, sh.ta, sh.tb);
    k.constant_weights = true;
    if (!VariantSupports(v, k, Host()).ok()) continue;
    for (int threads : {1, 3, 64}) {
      DeviceInfo d = Host();
      d.threads = threads;
      EXPECT_TRUE(CheckSchedule(VariantDefaultSchedule(v, k, d), k, d).ok()) << k.ToString();
    }
    GemmTester t;
    t.shape(sh.m, sh.n, sh.k).trans_a(sh.ta).trans_b(sh.tb).packed_weights(true).nan_c(true);
    if (!t.Test(VariantDefaultSchedule(v, t.Key(), Host()))) return;
  }
}

// 3, 5 and 7 threads (more than this host has) over fewer or more panels than threads.
void GemvPackedOddThreadCounts(const KernelVariant& v) {
  const int64_t w = v.config.gemm.nr;
  int seed = 0;
  for (int threads : {3, 5, 7})
    for (int64_t n : {2 * w + 1, 9 * w + 5})
      for (int64_t m : {int64_t{1}, int64_t{4}, int64_t{cpu::kGemvPackedMaxM}}) {
        GemmTester t;
        t.shape(m, n, 75).trans_b(seed % 2).packed_weights(true).beta(0.5f).seed(++seed);
        if (!t.Test(testing::With(v, {{"threads", threads}}))) return;
      }
}

#define CG_GEMV_PACKED(isa, name, width) \
  TEST(name, OddThreadCounts) {          \
    CG_REQUIRE_VARIANT(v, #name);        \
    GemvPackedOddThreadCounts(*v);       \
  }                                      \
  TEST(name, Shapes) {                   \
    CG_REQUIRE_VARIANT(v, #name);        \
    GemvPackedShapes(*v);                \
  }                                      \
  TEST(name, AlphaBeta) {                \
    CG_REQUIRE_VARIANT(v, #name);        \
    GemvPackedAlphaBeta(*v);             \
  }                                      \
  TEST(name, Rules) {                    \
    CG_REQUIRE_VARIANT(v, #name);        \
    GemvPackedRules(*v);                 \
  }
#include "kernels/cpu/gemv_f32.inc"

// ---- Tall variants (CG_GEMV_TALL rows): n <= 16 columns of C, any m ------------------

Schedule TallWith(const KernelVariant& v, int threads, int mj, int form, int prefetch = 1) {
  return With(v, {{"threads", threads}, {"mj", mj}, {"form", form}, {"prefetch", prefetch}});
}

// Every n up to kGemvTallMaxN (AVX2: one and two vectors), m across the tiles of 8, 4,
// 2 and 1 rows and the 16-row thread units, k from 1 to past a vector; both forms, both
// layouts of B, every mj, with and without prefetch, from B as stored and from packed
// weights; padded rows.
void GemvTallShapes(const KernelVariant& v) {
  int seed = 0;
  for (int64_t n = 1; n <= cpu::kGemvTallMaxN; ++n)
    for (int64_t m : {1, 7, 15, 33, 61})
      for (int64_t k : {1, 5, 16, 17, 70})
        for (int form : cpu::kGemvTallFormValues) {
          const int mj = cpu::kGemvNjValues[size_t(seed % 4)];
          GemmTester t;
          t.shape(m, n, k).trans_b(seed % 2).packed_weights(seed % 3 == 1).seed(uint32_t(++seed));
          if (seed % 4 == 0) t.lda_pad(3).ldb_pad(5).ldc_pad(2);
          if (!t.Test(TallWith(v, seed % 5 == 0 ? 3 : TwoThreads(), mj, form, seed % 7 == 0 ? 0 : 1))) return;
        }
}

// alpha and beta (beta 0 never reads C), both forms and layouts; what supports() declines.
void GemvTallAlphaBetaAndRules(const KernelVariant& v) {
  for (float alpha : {0.0f, 1.0f, -0.5f})
    for (float beta : {0.0f, 1.0f, 2.5f})
      for (int form : cpu::kGemvTallFormValues)
        for (int tb = 0; tb < 2; ++tb) {
          GemmTester t;
          t.shape(150, 9, 70).trans_b(tb).ldc_pad(3).alpha(alpha).beta(beta).nan_c(beta == 0.0f);
          if (!t.Test(TallWith(v, TwoThreads(), 8, form))) return;
        }
  const Status wide = VariantSupports(v, OpKey::Gemm(100, cpu::kGemvTallMaxN + 1, 64), Host());
  EXPECT_EQ(wide.code(), StatusCode::kUnimplemented);
  EXPECT_NE(wide.message().find("n=17 is over 16"), std::string::npos) << wide.message();
  const Status ta = VariantSupports(v, OpKey::Gemm(100, 8, 64, true, false), Host());
  EXPECT_EQ(ta.code(), StatusCode::kUnimplemented);
  EXPECT_NE(ta.message().find("runs A stored m x k"), std::string::npos) << ta.message();
  EXPECT_TRUE(VariantSupports(v, OpKey::Gemm(100000, 16, 64, false, true), Host()).ok());
  // The fitted defaults pass check() on every budget and run, per call and packed.
  for (const auto& sh : ShapesFromData()) {
    if (sh.ta) continue;
    for (int64_t n : {int64_t{1}, int64_t{4}, cpu::kGemvTallMaxN})
      for (int tb = 0; tb < 2; ++tb) {
        OpKey key = OpKey::Gemm(sh.m, n, sh.k, false, tb);
        for (int threads : {1, 3, 64}) {
          DeviceInfo d = Host();
          d.threads = threads;
          EXPECT_TRUE(CheckSchedule(VariantDefaultSchedule(v, key, d), key, d).ok()) << key.ToString();
        }
        GemmTester t;
        t.shape(sh.m, n, sh.k).trans_b(tb).packed_weights(tb == 1).beta(0.0f).nan_c(true);
        if (!t.Test(VariantDefaultSchedule(v, t.Key(), Host()))) return;
      }
  }
}

void GemvTallConcurrentCallers(const KernelVariant& v) {
  std::vector<std::thread> threads;
  for (int c = 0; c < 3; ++c)
    threads.emplace_back([&v, c] {
      for (int r = 0; r < 4; ++r) {
        GemmTester t;
        t.shape(301 + r, 1 + c * 5 + r, 129).trans_b(r % 2).beta(r % 2 ? 1.0f : 0.0f).seed(c * 100 + r);
        if (!t.Test(TallWith(v, TwoThreads(), 8, (c + r) % 2))) return;
      }
    });
  for (auto& t : threads) t.join();
}

// The built-in default of keys with n <= kGemvTallMaxN: the tall kernel of the host's
// widest ISA wherever m is beyond the small-m variants of the layout (nt: m > 16, nn:
// m > 4), per call and with constant weights, on either vendor and any budget; the
// broadcast form from kGemvTallBroadcastMinN = 8 columns, and from 3 where B is
// passed per call stored k x n or k is at most 8 per column, dot products elsewhere;
// the next tile's rows prefetched from n = 2. A transposed A, n = 17 and the small-m
// keys keep their variants.
TEST(CpuGemmTable, TallKeysDefaultToTheTallKernel) {
  for (const bool avx512 : {true, false}) {
    DeviceInfo d = Host();
    d.isa = kIsaScalar | kIsaAvx2 | (avx512 ? kIsaAvx512 : 0);
    d.arch = avx512 ? "avx512" : "avx2";
    const std::string tall = avx512 ? "cpu_f32_gemv_tall__avx512" : "cpu_f32_gemv_tall__avx2";
    for (const char* vendor : {"GenuineIntel", "AuthenticAMD"})
      for (int threads : {1, 2})
        for (bool constant : {false, true})
          for (bool trans_b : {false, true})
            for (int64_t n : {1, 2, 3, 7, 8, 16})
              for (int64_t m : {5, 16, 17, 100, 5000}) {
                d.vendor = vendor;
                d.threads = threads;
                OpKey key = OpKey::Gemm(m, n, 777, false, trans_b);
                key.constant_weights = constant;
                auto s = DefaultSchedule(key, d);
                ASSERT_TRUE(s.ok()) << s.status().ToString();
                const bool small_m = m <= (trans_b ? 16 : 4);
                EXPECT_EQ(s->variant->name == tall, !small_m) << vendor << " " << key.ToString() << ": " << s->ToString();
                const bool in_place_rows = !trans_b && !constant;
                if (small_m) continue;
                EXPECT_EQ(s->params[s->variant->ParamIndex("form")], n >= (in_place_rows ? 3 : 8) ? 1 : 0)
                    << s->ToString();
                EXPECT_EQ(s->params[s->variant->ParamIndex("prefetch")], n > 1 ? 1 : 0) << s->ToString();
              }
    for (const OpKey& key : {OpKey::Gemm(100, 17, 777), OpKey::Gemm(100, 8, 777, true, false)}) {
      auto s = DefaultSchedule(key, d);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      EXPECT_NE(s->variant->name, tall) << key.ToString();
    }
    // Shallow keys (B n x k, or packed): broadcasts from n = 3 where k <= 8n.
    struct Shallow {
      int64_t n, k;
      int form;
    };
    for (const Shallow& c : {Shallow{2, 16, 0}, Shallow{3, 24, 1}, Shallow{3, 25, 0}, Shallow{7, 56, 1}, Shallow{7, 57, 0}})
      for (bool constant : {false, true}) {
        OpKey key = OpKey::Gemm(1000, c.n, c.k, false, !constant);
        key.constant_weights = constant;
        auto s = DefaultSchedule(key, d);
        ASSERT_TRUE(s.ok()) << s.status().ToString();
        ASSERT_EQ(s->variant->name, tall) << key.ToString();
        EXPECT_EQ(s->params[s->variant->ParamIndex("form")], c.form) << key.ToString();
      }
  }
}

#define CG_GEMV_TALL(isa, name, nt_name)   \
  TEST(name, Shapes) {                     \
    CG_REQUIRE_VARIANT(v, #name);          \
    GemvTallShapes(*v);                    \
  }                                        \
  TEST(name, AlphaBetaAndRules) {          \
    CG_REQUIRE_VARIANT(v, #name);          \
    GemvTallAlphaBetaAndRules(*v);         \
  }                                        \
  TEST(name, ConcurrentCallers) {          \
    CG_REQUIRE_VARIANT(v, #name);          \
    GemvTallConcurrentCallers(*v);         \
  }
#include "kernels/cpu/gemv_f32.inc"

// ---- The table itself ------------------------------------------------------------

TEST(CpuGemmTable, InventoryIsConsistent) {
  const auto all = cpu::CpuKernelVariants();
  // One variant per row of the inventories, in their order: the small-m rows first.
  std::vector<std::string> rows;
  size_t num_gemv = 0;
#define CG_GEMV(isa, name, trans_b) rows.push_back(#name), ++num_gemv;
#define CG_GEMV_PACKED(isa, name, width) rows.push_back(#name), ++num_gemv;
#define CG_GEMV_TALL(isa, name, nt_name) rows.push_back(#name), ++num_gemv;
#include "kernels/cpu/gemv_f32.inc"
#define CG_KERNEL(isa, name, mr, nr) rows.push_back(#name);
#include "kernels/cpu/gemm_f32.inc"
  // The library variants this build has (gemm_library.h) sit before the portable reference.
  std::set<std::string> library;
  for (const char* name : {"cpu_f32_gemm_onednn", "cpu_f32_gemm_openblas"})
    if (FindKernelVariant(name)) library.insert(name), rows.insert(rows.end() - 1, name);
  ASSERT_EQ(all.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(all[i].name, rows[i]);
  std::set<std::string> names;
  for (const auto& v : all) {
    EXPECT_TRUE(names.insert(v.name).second) << v.name;
    ASSERT_NE(FindKernelVariant(v.name), nullptr) << v.name;
    testing::ExpectParamSpecsValid(v);
  }
  // Each inventory in dispatch preference order: fastest ISA first.
  for (size_t i = 1; i < all.size(); ++i)
    if (i != num_gemv) EXPECT_LE(all[i].isa, all[i - 1].isa) << all[i].name << ": table not in dispatch preference order";
  std::vector<KernelVariant> variants;  // the project's own packed GEMM variants
  for (const auto& v : all.subspan(num_gemv))
    if (!library.count(v.name)) variants.push_back(v);
  const std::vector<std::string> param_names = {"mc",       "kc",       "nc",     "par",    "threads",
                                                "unroll_k", "prefetch", "pack_a", "pack_b", "order"};
  for (const auto& v : variants) {
    EXPECT_NE(std::string(v.name).find(std::to_string(v.config.gemm.mr) + "x" + std::to_string(v.config.gemm.nr) + "__"), std::string::npos)
        << v.name;
    ASSERT_EQ(v.params.size(), param_names.size());
    double space = 1;
    for (size_t i = 0; i < v.params.size(); ++i) {
      EXPECT_EQ(v.params[i].name, param_names[i]);
      space *= v.params[i].values.size();
    }
    EXPECT_GE(space, 1e6) << v.name;
    for (int32_t mc : v.params[0].values) EXPECT_EQ(mc % v.config.gemm.mr, 0) << v.name;
    for (int32_t nc : v.params[2].values) EXPECT_EQ(nc % v.config.gemm.nr, 0) << v.name;
  }
  EXPECT_EQ(variants.back().isa, static_cast<uint32_t>(kIsaScalar));
}

TEST(CpuGemmTable, CheckNamesValueAndRule) {
  const KernelVariant* v = FindKernelVariant("cpu_f32_gemm_14x32__avx512");
  ASSERT_NE(v, nullptr);
  DeviceInfo d = Host();
  d.threads = 2;
  const OpKey key = OpKey::Gemm(64, 64, 64);
  ParamValues p = VariantDefaultSchedule(*v, key, d).params;
  p[cpu::kParamMc] = 100;
  Status st = v->check(*v, key, p, d);
  EXPECT_EQ(st.message(), "cpu_f32_gemm_14x32__avx512: mc=100 must be a multiple of mr=14");
  p = VariantDefaultSchedule(*v, key, d).params;
  p[cpu::kParamThreads] = 4;
  st = v->check(*v, key, p, d);
  EXPECT_EQ(st.message(), "cpu_f32_gemm_14x32__avx512: threads=4 must be <= device threads=2");
  p = VariantDefaultSchedule(*v, key, d).params;
  p[cpu::kParamPackB] = 0;
  const OpKey nt = OpKey::Gemm(64, 64, 64, false, true);
  st = v->check(*v, nt, p, d);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("pack_b=0"), std::string::npos) << st.message();
  // Values outside the declared lists are caught by CheckSchedule before check().
  Schedule s = VariantDefaultSchedule(*v, key, d);
  s.params[cpu::kParamKc] = 100;
  EXPECT_EQ(CheckSchedule(s, key, d).code(), StatusCode::kOutOfRange);
}

TEST(CpuGemmTable, DefaultScheduleResolvesAndRuns) {
  for (const auto& sh : ShapesFromData()) {
    const OpKey key = OpKey::Gemm(sh.m, sh.n, sh.k, sh.ta, sh.tb);
    auto s = DefaultSchedule(key, Host());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->variant->backend, Backend::kCpu);
    EXPECT_TRUE(CheckSchedule(*s, key, Host()).ok());
  }
  // A scalar-only host resolves to the portable variant.
  DeviceInfo scalar = Host();
  scalar.isa = kIsaScalar;
  scalar.arch = "scalar";
  const OpKey key = OpKey::Gemm(33, 65, 17);
  auto s = DefaultSchedule(key, scalar);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_STREQ(s->variant->name, "cpu_f32_gemm_4x4__scalar");
  GemmTester().shape(33, 65, 17).beta(1.0f).Test(*s);
}

// A budget that is not a power of two is used whole where the work asks for it (a
// budget of 6 ran 4 threads), the candidates the tuner measures first stay few: the
// fitted count, the powers of two below the budget and the budget.
TEST(CpuGemmTable, ThreadCountsUseABudgetThatIsNotAPowerOfTwo) {
  DeviceInfo d = Host();
  const auto within = [&](int budget, double wanted) {
    d.threads = budget;
    return cpu::ThreadsWithin(wanted, d);
  };
  EXPECT_EQ(within(6, 100), 6);
  EXPECT_EQ(within(12, 100), 12);
  EXPECT_EQ(within(9, 100), 8);
  EXPECT_EQ(within(13, 100), 12);
  EXPECT_EQ(within(1024, 1e9), 256);  // the thread pool's most
  EXPECT_EQ(within(6, 2.5), 2);       // the work's count, rounded down
  EXPECT_EQ(within(6, 0.3), 1);
  for (int budget = 1; budget <= 256; ++budget)  // at least 80% of any budget
    EXPECT_GE(within(budget, 1e9), 0.8 * budget) << budget;
  d.threads = 6;
  EXPECT_EQ(cpu::ThreadCountCandidates(d, 3), (std::vector<int32_t>{3, 1, 2, 4, 6}));
  d.threads = 13;
  EXPECT_EQ(cpu::ThreadCountCandidates(d, 12), (std::vector<int32_t>{12, 1, 2, 4, 8}));
  d.threads = 2;
  EXPECT_EQ(cpu::ThreadCountCandidates(d, 2), (std::vector<int32_t>{2, 1}));
  CG_REQUIRE_VARIANT(v, "cpu_f32_gemm_6x16__avx2");
  d.threads = 6;
  EXPECT_EQ(VariantDefaultSchedule(*v, OpKey::Gemm(512, 512, 512), d).params[cpu::kParamThreads], 6);
}

// Per-call B is read in place only where M has at most two mr panels, B is at most
// 1 MiB and its rows are shorter than a page; else it is packed per call.
TEST(CpuGemmTable, PerCallBIsReadInPlaceOnlyWhenSmall) {
  CG_REQUIRE_VARIANT(v, "cpu_f32_gemm_6x16__avx2");
  const auto pack_b = [&](int64_t m, int64_t n, int64_t k, bool tb) {
    return VariantDefaultSchedule(*v, OpKey::Gemm(m, n, k, false, tb), Host()).params[cpu::kParamPackB];
  };
  EXPECT_EQ(pack_b(12, 64, 64, false), 0);
  EXPECT_EQ(pack_b(12, 512, 512, false), 0);    // 1 MiB, rows of 2 KiB
  EXPECT_EQ(pack_b(12, 512, 513, false), 2);    // over 1 MiB, a full depth block: panel by panel
  EXPECT_EQ(pack_b(12, 1024, 64, false), 1);    // rows of 4 KiB, shallower than a depth block
  EXPECT_EQ(pack_b(12, 4096, 4096, false), 2);
  EXPECT_EQ(pack_b(13, 64, 64, false), 1);      // three panels of M
  EXPECT_EQ(pack_b(12, 64, 64, true), 1);       // B stored n x k is always packed
}

// Per-call keys pack B panel by panel as each is used (GemmPanelPackFits) where all of
// A is one row block, with more than one panel of B, at least a depth block deep;
// else B blocks are packed (or B read in place).
TEST(CpuGemmTable, PerCallBIsPackedPanelByPanelWhereAIsOneRowBlock) {
  CG_REQUIRE_VARIANT(v, "cpu_f32_gemm_8x32__avx512");
  const auto pack_b = [&](int64_t m, int64_t n, int64_t k, bool tb, bool constant = false) {
    OpKey key = OpKey::Gemm(m, n, k, false, tb);
    key.constant_weights = constant;
    return VariantDefaultSchedule(*v, key, Host()).params[cpu::kParamPackB];
  };
  EXPECT_EQ(pack_b(24, 69, 6681, false), cpu::kPackBPanels);
  EXPECT_EQ(pack_b(64, 300, 384, false), cpu::kPackBPanels);  // mc = 64 rows, k = kc
  EXPECT_EQ(pack_b(50, 7230, 400, true), cpu::kPackBPanels);
  EXPECT_EQ(pack_b(50, 7230, 90, true), cpu::kPackBBlocks);  // shallower than a depth block
  EXPECT_EQ(pack_b(65, 300, 1000, true), cpu::kPackBBlocks);  // two row blocks
  EXPECT_EQ(pack_b(24, 32, 6681, true), cpu::kPackBBlocks);   // one panel
  EXPECT_NE(pack_b(24, 69, 6681, true, true), cpu::kPackBPanels);  // constant weights are packed ahead
}

// The own tiles' threads on keys with m <= kGemvMaxM: at least the small-m variants'
// (a thread per kGemvBytesPerThread of weights), at most the key's panels of N (split
// by rows, every thread would read all of B); above, the work alone decides.
TEST(CpuGemmTable, DecodeSizeKeysThreadByTheirWeights) {
  CG_REQUIRE_VARIANT(v, "cpu_f32_gemm_6x16__avx2");
  DeviceInfo d = Host();
  d.threads = 8;
  const auto threads = [&](int64_t m, int64_t n, int64_t k) {
    return VariantDefaultSchedule(*v, OpKey::Gemm(m, n, k), d).params[cpu::kParamThreads];
  };
  EXPECT_EQ(threads(16, 256, 128), 2);  // 1 MFLOP, 128 KiB of weights
  EXPECT_EQ(threads(16, 512, 256), 8);  // 4.2 MFLOP, 512 KiB
  EXPECT_EQ(threads(16, 64, 64), 1);    // 16 KiB
  EXPECT_EQ(threads(12, 16, 8192), 1);  // 512 KiB in one panel of 16 columns
  EXPECT_EQ(threads(12, 40, 8192), 3);  // three panels
  EXPECT_EQ(threads(17, 256, 128), 1);  // 1.1 MFLOP: the work alone
  EXPECT_EQ(threads(17, 512, 256), 2);  // 4.5 MFLOP
}

// The own tiles' split on several threads: M (par = 1) when N has fewer panels than
// threads, or for constant weights (per-call keys too on an Intel host) when m >= n
// with a panel of M per thread (an N split would pack all of A on every thread); else
// N (par = 0).
TEST(CpuGemmTable, SeveralThreadsSplitMWhereNWouldRepackA) {
  CG_REQUIRE_VARIANT(v, "cpu_f32_gemm_6x16__avx2");
  DeviceInfo d = Host();
  d.threads = 2;
  d.vendor = "AuthenticAMD";
  const auto par = [&](int64_t m, int64_t n, int64_t k, bool constant) {
    OpKey key = OpKey::Gemm(m, n, k, false, true);
    key.constant_weights = constant;
    const Schedule s = VariantDefaultSchedule(*v, key, d);
    EXPECT_EQ(s.params[cpu::kParamThreads], 2) << key.ToString();
    return s.params[cpu::kParamPar];
  };
  EXPECT_EQ(par(500, 77, 128, true), cpu::kParM);
  EXPECT_EQ(par(500, 77, 128, false), cpu::kParN);   // per-call weights on AMD: B packed per thread's N range
  EXPECT_EQ(par(256, 256, 256, true), cpu::kParM);   // m = n
  EXPECT_EQ(par(64, 512, 256, true), cpu::kParN);    // m < n
  EXPECT_EQ(par(1000, 16, 256, false), cpu::kParM);  // one N panel for two threads
  // On an Intel host per-call keys split M too where m >= n (each thread packs B).
  d.vendor = "GenuineIntel";
  EXPECT_EQ(par(500, 77, 128, false), cpu::kParM);
  EXPECT_EQ(par(256, 256, 256, false), cpu::kParM);
  EXPECT_EQ(par(255, 256, 256, false), cpu::kParN);  // m < n
  EXPECT_EQ(par(64, 512, 256, false), cpu::kParN);
}

// One token with constant weights on AMD Zen 4 (family 25 with AVX-512): the AVX2
// packed kernel is the default; on Intel, on another AMD family and from m = 2, the
// AVX-512 one. Per-call weights keep the in-place kernels.
TEST(CpuGemmTable, ZenFourDecodesOneTokenOnTheAvx2PackedKernel) {
  DeviceInfo d = Host();
  d.isa = kIsaScalar | kIsaAvx2 | kIsaAvx512;
  d.arch = "avx512";
  struct Case {
    const char* vendor;
    int family;
    int64_t m;
    const char* want;
  };
  const Case cases[] = {{"AuthenticAMD", 25, 1, "cpu_f32_gemv_packed__avx2"},
                        {"AuthenticAMD", 25, 2, "cpu_f32_gemv_packed__avx512"},
                        {"AuthenticAMD", 26, 1, "cpu_f32_gemv_packed__avx512"},
                        {"GenuineIntel", 6, 1, "cpu_f32_gemv_packed__avx512"}};
  for (const Case& c : cases)
    for (bool trans_b : {false, true}) {
      d.vendor = c.vendor;
      d.family = c.family;
      OpKey key = OpKey::Gemm(c.m, 4096, 4096, false, trans_b);
      key.constant_weights = true;
      auto s = DefaultSchedule(key, d);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      EXPECT_STREQ(s->variant->name, c.want) << c.vendor << " family " << c.family << " " << key.ToString();
      EXPECT_EQ(s->params[s->variant->ParamIndex("nv")], 4) << s->ToString();
    }
  d.vendor = "AuthenticAMD";
  d.family = 25;
  auto s = DefaultSchedule(OpKey::Gemm(1, 4096, 4096), d);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(std::string_view(s->variant->name).starts_with("cpu_f32_gemv_packed__")) << s->ToString();
}


// What the own vector variants propose to the tuner per key: the fitted default
// first; on a compute-bound key deeper than the declared kc (384), the variants of
// the host's widest ISA also the deep-k blocking (4 micro-panels of A), and those of
// a narrower ISA nothing; the portable variant nothing. The 14x32's fitted blocking
// is itself deep on the wide constant-weights keys of GemmDeepKDefaultHolds, with
// its declared mc. An Intel AVX-512 host with 2 MiB of L2 (the rule reads the
// device, not this machine).
TEST(CpuGemmTable, OwnVariantsProposeFittedThenDeepK) {
  DeviceInfo d = Host();
  d.isa = kIsaScalar | kIsaAvx2 | kIsaAvx512;
  d.arch = "avx512";
  d.vendor = "GenuineIntel";
  d.l2_bytes = int64_t{2} << 20;
  struct Case {
    OpKey key;
    bool compute_bound;
  };
  auto constant = [](OpKey key) {
    key.constant_weights = true;
    return key;
  };
  const Case cases[] = {{constant(OpKey::Gemm(112, 768, 3072)), true},
                        {constant(OpKey::Gemm(2048, 1024, 1500, false, true)), true},
                        {constant(OpKey::Gemm(66, 512, 385)), true},
                        {OpKey::Gemm(128, 768, 3072), true},
                        {OpKey::Gemm(1024, 1024, 1024, false, true), true},
                        {OpKey::Gemm(128, 768, 256), true},
                        {OpKey::Gemm(2048, 2048, 64), true},
                        {OpKey::Gemm(1536, 1000, 2000, false, true), true},
                        {OpKey::Gemm(16, 4096, 4096), false},
                        {OpKey::Gemm(4, 4096, 4096, false, true), false}};
  int deep = 0, silent = 0, deep_fitted = 0;
  for (const Case& c : cases) {
    for (const KernelVariant& v : cpu::CpuKernelVariants()) {
      if (v.op != OpKind::kGemm || !v.candidates || !VariantSupports(v, c.key, d).ok()) continue;
      const std::string_view name = v.name;
      if (name.find("_onednn") != name.npos || name.find("_openblas") != name.npos) continue;
      const bool tile = name.find("_gemv_") == name.npos;
      const auto proposals = v.candidates(v, c.key, d);
      if (v.isa == kIsaScalar || (tile && c.compute_bound && v.isa != kIsaAvx512)) {
        EXPECT_TRUE(proposals.empty()) << v.name << " " << c.key.ToString();
        silent += v.isa != kIsaScalar;
        continue;
      }
      ASSERT_FALSE(proposals.empty()) << v.name;
      const Schedule fitted = VariantDefaultSchedule(v, c.key, d);
      EXPECT_EQ(Schedule({&v, proposals[0]}).ToString(), fitted.ToString());
      const int mr = tile ? v.config.gemm.mr : 1, nr = tile ? v.config.gemm.nr : 1;
      const bool deep_default =
          tile && v.config.gemm == cpu::kGemmDeepKDefaultTile && cpu::GemmDeepKDefaultHolds(c.key, d);
      EXPECT_EQ(deep_default, c.key.constant_weights && mr == 14 && nr == 32) << v.name << " " << c.key.ToString();
      if (deep_default) {
        EXPECT_EQ(fitted.params[cpu::kParamKc], cpu::GemmDeepKc(mr, nr, c.key.m(), c.key.k(), d.l2_bytes));
        EXPECT_EQ(fitted.params[cpu::kParamMc], cpu::GemmDefaultMc(mr));
      } else if (tile) {
        EXPECT_EQ(fitted.params[cpu::kParamKc], cpu::GemmDefaultKc(nr)) << v.name << " " << c.key.ToString();
      }
      const bool deeper = tile && c.compute_bound && c.key.k() > cpu::GemmDefaultKc(nr);
      const bool shallow =
          tile && std::min<int64_t>(c.key.k(), fitted.params[cpu::kParamKc]) <= cpu::kGemmRowsOrderMaxKc;
      ASSERT_EQ(proposals.size(), 1u + shallow + deeper) << v.name << " " << c.key.ToString();
      for (const ParamValues& p : proposals) EXPECT_TRUE(CheckSchedule({&v, p}, c.key, d).ok()) << v.name;
      if (shallow)  // the fitted schedule in the other loop order
        for (int i = 0; i < cpu::kNumGemmParams; ++i)
          EXPECT_EQ(proposals[1][i] != fitted.params[i], i == cpu::kParamOrder) << v.name << " param " << i;
      if (!deeper) continue;
      const ParamValues& p = proposals.back();
      EXPECT_EQ(p[cpu::kParamMc], cpu::kGemmDeepKPanels * mr) << v.name;
      EXPECT_EQ(p[cpu::kParamKc], cpu::GemmDeepKc(mr, nr, c.key.m(), c.key.k(), d.l2_bytes)) << v.name;
      EXPECT_GT(p[cpu::kParamKc], cpu::GemmDefaultKc(nr)) << v.name;
      const bool one_pass = p[cpu::kParamKc] > cpu::kGemmDeepKMaxKc;
      EXPECT_EQ(one_pass, c.key.m() >= cpu::kGemmOnePassMinM && c.key.k() > cpu::kGemmDeepKMaxKc) << v.name;
      if (one_pass) EXPECT_GE(p[cpu::kParamKc], c.key.k()) << v.name;
      EXPECT_LE(int64_t{cpu::kGemmDeepKPanels * mr + nr} * p[cpu::kParamKc] * 4, d.l2_bytes / (one_pass ? 2 : 4))
          << v.name;
      for (int i = 0; i < cpu::kNumGemmParams; ++i)
        if (i != cpu::kParamMc && i != cpu::kParamKc) EXPECT_EQ(p[i], fitted.params[i]) << v.name << " param " << i;
      ++deep;
      deep_fitted += deep_default;
    }
  }
  if (deep == 0) GTEST_SKIP() << "this build has no AVX-512 GEMM variants";
  EXPECT_GT(silent, 0);
  EXPECT_EQ(deep_fitted, 3);
}

// The fitted loop order (GemmRowsOrderFits): rows of C outer on an Intel AVX-512 host
// where the first depth block is at most kGemmRowsOrderMaxKc deep, its B block fits in
// half of L2 and C does not fit in L2; panels of B everywhere else.
TEST(CpuGemmTable, RowsOfCOrderFollowsTheMeasuredRule) {
  DeviceInfo intel = Host();
  intel.isa = kIsaScalar | kIsaAvx2 | kIsaAvx512;
  intel.vendor = kCpuVendorIntel;
  intel.l2_bytes = int64_t{2} << 20;
  DeviceInfo amd = intel, no_l2 = intel, avx2 = intel;
  amd.vendor = kCpuVendorAmd;
  no_l2.l2_bytes = 0;
  avx2.isa = kIsaScalar | kIsaAvx2;
  struct Case {
    int64_t m, n, k;
    int32_t kc;
    bool rows;
  };
  const Case cases[] = {
      {2634, 2048, 16, 384, true},   {1568, 2048, 128, 384, true},  // B block 1 MiB, half of L2
      {1568, 2048, 129, 384, false},                                 // beyond half
      {2662, 512, 256, 384, true},   {2662, 512, 257, 384, false},  // first block deeper than 256
      {2662, 512, 400, 384, false},  {2662, 512, 400, 128, true},   // first block kc deep
      {256, 2048, 64, 384, false},                                   // C 2 MiB, within L2
      {257, 2048, 64, 384, true},    {44, 3072, 128, 384, false},
  };
  for (const Case& c : cases) {
    for (const bool tb : {false, true}) {
      const OpKey key = OpKey::Gemm(c.m, c.n, c.k, false, tb);
      EXPECT_EQ(cpu::GemmRowsOrderFits(key, c.kc, 2048, intel), c.rows) << key.ToString() << " kc=" << c.kc;
      for (const DeviceInfo* d : {&amd, &no_l2, &avx2}) EXPECT_FALSE(cpu::GemmRowsOrderFits(key, c.kc, 2048, *d));
    }
  }
  const KernelVariant* v = FindKernelVariant("cpu_f32_gemm_8x32__avx512");
  if (v == nullptr) GTEST_SKIP() << "this build has no AVX-512 GEMM variants";
  OpKey shallow = OpKey::Gemm(2634, 2048, 16), deep = OpKey::Gemm(2634, 2048, 384);
  shallow.constant_weights = deep.constant_weights = true;
  EXPECT_EQ(VariantDefaultSchedule(*v, shallow, intel).params[cpu::kParamOrder], cpu::kOrderRowsOfC);
  EXPECT_EQ(VariantDefaultSchedule(*v, shallow, amd).params[cpu::kParamOrder], cpu::kOrderPanelsOfB);
  EXPECT_EQ(VariantDefaultSchedule(*v, deep, intel).params[cpu::kParamOrder], cpu::kOrderPanelsOfB);
}

// The next B panel's prefetch (and then, for SpreadPrefetchWalk, the next A block's
// source) is spread over the micro-kernel's k loop: after one tick per k group every
// line is issued, however many lines there are against the loop's groups (kc = 1024
// at unroll_k = 4 has 256 groups and, on 4 A panels, 512 lines per call: issuing the
// rest at once after the loop stalled the next call), and the A walk is left where
// the next call goes on.
TEST(CpuGemmTable, NextPanelPrefetchIsSpreadOverTheWholeLoop) {
  for (const int64_t groups : {1, 7, 96, 256, 512})
    for (const int64_t lines : {0, 1, 5, 96, 255, 256, 257, 512, 2048})
      for (const int64_t a_lines : {0, 3, 300}) {
        std::vector<char> panel(size_t(lines + 1) * 64), source(size_t(a_lines + 64) * 64 * 2);
        int64_t total = 0;
        cpu::UkLines walk = cpu::RectangleWalk(source.data(), a_lines + 1, 5 * 64, 2 * 5 * 64, total);
        cpu::UkLines expect = walk;
        for (int64_t i = 0; i < a_lines; ++i) expect.Step();
        cpu::UkArgs args{};
        args.next_b = panel.data();
        args.next_b_lines = lines;
        args.next_a = &walk;
        args.next_a_lines = a_lines;
        const std::string what = fmt::format("{} + {} lines over {} groups", lines, a_lines, groups);
        cpu::SpreadPrefetchWalk spread(args, groups);
        for (int64_t g = 0; g < groups; ++g) spread.Tick();
        EXPECT_EQ(spread.left, 0) << what;
        EXPECT_EQ(spread.line, panel.data() + lines * 64) << what;
        EXPECT_EQ(walk.line, expect.line) << what;
        EXPECT_EQ(walk.row_left, expect.row_left) << what;
        if (a_lines > 0) continue;
        cpu::SpreadPrefetch b_only(args, groups);
        for (int64_t g = 0; g < groups; ++g) b_only.Tick();
        EXPECT_EQ(b_only.left, 0) << what;
        EXPECT_EQ(b_only.line, panel.data() + lines * 64) << what;
      }
}

// The walk over a block's source visits every line of each row, rows in order, and
// at most one line past a row's end; aligned rows take exactly their lines.
TEST(CpuGemmTable, RectangleWalkCoversEveryRowInOrder) {
  alignas(64) static char mem[64 * 1024];
  for (const int64_t offset : {0, 4, 60})
    for (const int64_t row_bytes : {4, 60, 64, 68, 224, 4096})
      for (const int64_t stride : {row_bytes, int64_t{4100}, int64_t{8192}})
        for (const int64_t rows : {0, 1, 3, 7}) {
          const char* first = mem + offset;
          int64_t lines = -1;
          cpu::UkLines walk = cpu::RectangleWalk(first, rows, row_bytes, stride, lines);
          const std::string what = fmt::format("offset {} row {} B stride {} B rows {}", offset, row_bytes, stride, rows);
          ASSERT_EQ(lines, rows * walk.row_lines) << what;
          for (int64_t r = 0; r < rows; ++r) {
            const uintptr_t lo = reinterpret_cast<uintptr_t>(first + r * stride) / 64;
            const uintptr_t hi = (reinterpret_cast<uintptr_t>(first + r * stride) + row_bytes - 1) / 64;
            for (int64_t i = 0; i < walk.row_lines; ++i)
              ASSERT_EQ(reinterpret_cast<uintptr_t>(walk.Step()) / 64, lo + i) << what << " row " << r << " line " << i;
            EXPECT_GE(lo + walk.row_lines - 1, hi) << what << " row " << r;
            EXPECT_LE(lo + walk.row_lines - 1, hi + 1) << what << " row " << r;
          }
          if (offset == 0 && stride % 64 == 0) EXPECT_EQ(lines, rows * ((row_bytes + 63) / 64)) << what;
        }
}

// The deep-k depth: the smallest listed kc that covers k, else the deepest the
// quarter of L2 holds (and at most kGemmDeepKMaxKc); for m of at least
// kGemmOnePassMinM and k beyond that, one pass over C (a kc that covers k, at most
// kGemmOnePassMaxKc) within half of L2 where one fits; 0 without room or L2.
TEST(CpuGemmTable, DeepKcCoversKWithinItsShareOfL2) {
  const int64_t two_mib = int64_t{2} << 20;
  EXPECT_EQ(cpu::GemmDeepKc(14, 32, 1024, 1024, two_mib), 1024);
  EXPECT_EQ(cpu::GemmDeepKc(14, 32, 1024, 4096, two_mib), 1024);  // no kc covers 4096
  EXPECT_EQ(cpu::GemmDeepKc(14, 32, 128, 4096, two_mib), 1024);
  EXPECT_EQ(cpu::GemmDeepKc(14, 32, 1024, 500, two_mib), 512);
  EXPECT_EQ(cpu::GemmDeepKc(14, 32, 128, 1100, two_mib / 2), 512);  // (56 + 32) x 768 x 4 B > 256 KiB
  EXPECT_EQ(cpu::GemmDeepKc(14, 32, 1000, 1100, two_mib), 1536);     // one pass: 528 KiB <= 1 MiB
  EXPECT_EQ(cpu::GemmDeepKc(14, 32, 511, 1100, two_mib), 1024);      // below kGemmOnePassMinM
  EXPECT_EQ(cpu::GemmDeepKc(14, 32, 2048, 2048, two_mib), 2048);     // 704 KiB <= 1 MiB
  EXPECT_EQ(cpu::GemmDeepKc(14, 32, 2048, 2048, two_mib / 2), 512);  // 704 KiB > 512 KiB: a quarter's kc
  EXPECT_EQ(cpu::GemmDeepKc(14, 32, 1024, 4096, 0), 0);
  EXPECT_EQ(cpu::GemmDeepKc(6, 64, 1024, 300, two_mib), 320);
}

// A serving process may run kernels on several threads and then fork (pre-forked
// workers): the child has none of the parent's pool threads and must not wait for
// them. The child reports through its exit status; an alarm turns a hang into a
// failure.
TEST(CpuGemmThreads, SeveralThreadsWorkInAChildOfFork) {
  if (Host().threads < 2) GTEST_SKIP() << "needs 2 threads, the host budget is " << Host().threads;
  const OpKey key = OpKey::Gemm(96, 80, 64);
  auto s = DefaultSchedule(key, Host());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Schedule two = *s;
  two.params[s->variant->ParamIndex("threads")] = 2;
  ASSERT_TRUE(CheckSchedule(two, key, Host()).ok());
  const GemmTester tester = GemmTester().shape(96, 80, 64).beta(0.5f);
  ASSERT_TRUE(tester.Test(two));  // starts the parent's pool workers
  testing::ExpectChildOfForkSucceeds(
      [&] {
        bool ok = true;
        for (int i = 0; i < 3; ++i) ok = ok && tester.Test(two);
        return ok;
      },
      "it hung waiting for the parent's pool threads");
  EXPECT_TRUE(tester.Test(two));  // and the parent's pool still works
}

// The system's THP mode ("always", "madvise" or "never"; empty when unknown).
std::string ThpMode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const size_t l = line.find('['), r = line.find(']');
  return l == std::string::npos || r == std::string::npos ? "" : line.substr(l + 1, r - l - 1);
}

// The THPeligible field of the mapping that holds `p` in /proc/self/smaps (-1 when
// the kernel does not report it).
int ThpEligible(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) {
      inside = lo <= at && at < hi;
    } else if (inside && line.starts_with("THPeligible:")) {
      return std::atoi(line.c_str() + 12);
    }
  }
  return -1;
}

// Weights from 2 MiB up are aligned to a huge page and advised over their whole huge
// pages (the tail stays in base pages); smaller ones are 64-byte aligned as before.
TEST(WeightsMemory, HugePageAlignedAndAdvisedFromTwoMiB) {
  std::unique_ptr<float, decltype(&std::free)> small(AllocateWeights(1000), &std::free);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.get()) % 64, 0u);
  const size_t bytes = 2 * kHugePageBytes + kHugePageBytes / 2;
  std::unique_ptr<float, decltype(&std::free)> big(AllocateWeights(bytes), &std::free);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.get()) % kHugePageBytes, 0u);
  std::memset(big.get(), 1, bytes);  // all of it writable
  const char* base = reinterpret_cast<const char*>(big.get());
  const std::string mode = ThpMode();
  if (mode != "madvise" && mode != "always") GTEST_SKIP() << "THP mode '" << mode << "': no huge pages to advise";
  const int head = ThpEligible(base), tail = ThpEligible(base + 2 * kHugePageBytes);
  if (head < 0) GTEST_SKIP() << "the kernel's smaps has no THPeligible field";
  EXPECT_EQ(head, 1) << "the whole huge pages of the weights are not advised";
  EXPECT_EQ(ThpEligible(base + 2 * kHugePageBytes - 64), 1);
  if (mode == "madvise") EXPECT_EQ(tail, 0) << "the short tail was advised as well";
}

// Weights in memory the heap hands back after another block wrote it: once glibc has
// raised its mmap and trim thresholds (it does so itself when a large block is freed),
// such a block comes from the heap with its pages still resident in base pages, and
// advice alone left them so. The whole huge pages must be unpopulated until written,
// so that the first write faults them in as huge pages.
TEST(WeightsMemory, ReusedHeapMemoryIsFaultedInAfresh) {
#ifndef __GLIBC__
  GTEST_SKIP() << "the heap's thresholds are set through glibc's mallopt";
#else
  const size_t bytes = 4 * kHugePageBytes, page = size_t(sysconf(_SC_PAGESIZE));
  (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);  // a no-op under the sanitizers' allocators
  (void)mallopt(M_TRIM_THRESHOLD, 64 << 20);
  void* touched = std::malloc(bytes + 2 * kHugePageBytes);
  ASSERT_NE(touched, nullptr);
  std::memset(touched, 1, bytes + 2 * kHugePageBytes);
  asm volatile("" : : "r"(touched) : "memory");  // the writes are not dead stores
  std::free(touched);
  std::unique_ptr<float, decltype(&std::free)> w(AllocateWeights(bytes), &std::free);
  (void)mallopt(M_MMAP_THRESHOLD, 128 << 10);  // glibc's defaults
  (void)mallopt(M_TRIM_THRESHOLD, 128 << 10);
  ASSERT_NE(w, nullptr);
  std::vector<unsigned char> resident(bytes / page);
  ASSERT_EQ(mincore(w.get(), bytes, resident.data()), 0) << std::strerror(errno);
  EXPECT_EQ(std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; }), 0)
      << "pages of the weights were resident before their first write";
  std::memset(w.get(), 2, bytes);  // all of it writable
#endif
}

}  // namespace
}  // namespace cliffguard
