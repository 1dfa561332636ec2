// Tunable parameters of the CPU fp32 conv2d family, as data (STYLE H4/H10). Three
// parameter sets, one per algorithm of conv2d_f32.inc; each lists its parameters in
// the order of its enum below. Lists that depend on the register tile (oc_block,
// mc, nc) are multiples of it; the others are shared.
//
// Direct: 11 (oc_block) * 16 (ic_block) * 14 (rows) * 2 (loop) * 2 (pad_copy)
//   * 3 (par) * 7 (threads) = 413,952 schedules per variant and shape before
//   check() (which refuses blocks larger than the shape needs and threads above the
//   device's).
// GEMM-based (1x1, im2col): the GEMM family's mc, kc, nc, unroll_k, prefetch,
//   pack_a, plus m_block and threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>

#include "cliffguard/kernel.h"
#include "kernels/cpu/gemm_params.h"

namespace cliffguard::cpu {

// ---- Direct convolution (CG_CONV2D_DIRECT rows) ----
enum Conv2dDirectParam : int {
  kDirOcBlock = 0,
  kDirIcBlock,
  kDirRows,
  kDirLoop,
  kDirPadCopy,
  kDirPar,
  kDirThreads,
  kNumConv2dDirectParams,
};

// Values of the direct variants' `par`: what is split across threads.
enum Conv2dPar : int { kConvParRows = 0, kConvParOc = 1, kConvParBatch = 2 };
// Values of `loop`: which loop of a block is innermost.
enum Conv2dLoop : int { kLoopOcInner = 0, kLoopPixelsInner = 1 };

inline constexpr int32_t kConvOcBlockMultipliers[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64};
inline constexpr int32_t kConvIcBlockValues[] = {4,   8,   16,  32,  48,   64,   96,   128,
                                                 192, 256, 384, 512, 768, 1024, 2048, 4096};
inline constexpr int32_t kConvRowsValues[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256, 4096};
inline constexpr int32_t kConvLoopValues[] = {0, 1};
inline constexpr int32_t kConvParValues[] = {0, 1, 2};

template <int OCT>
struct Conv2dDirectParamSet {
  static constexpr auto Scaled() {
    struct Values {
      int32_t v[std::size(kConvOcBlockMultipliers)];
    } out{};
    for (size_t i = 0; i < std::size(kConvOcBlockMultipliers); ++i) out.v[i] = OCT * kConvOcBlockMultipliers[i];
    return out;
  }
  static constexpr auto kOcBlock = Scaled();
  static constexpr ParamSpec kSpecs[] = {
      {"oc_block", kOcBlock.v, 4 * OCT,
       "output channels per cache block (its packed filter kept in L2); a multiple of the oc tile"},
      {"ic_block", kConvIcBlockValues, 4096,
       "input channels per depth block; >= ic runs each filter row's kw*ic elements as one stream"},
      {"rows", kConvRowsValues, 4096, "output rows per block of a thread's rows (outermost loop)"},
      {"loop", kConvLoopValues, kLoopOcInner,
       "innermost loop of a block: 0 = oc tiles (input tile reused from L1), 1 = output pixels (filter tile reused)"},
      {"pad_copy", kGemmBoolValues, 0,
       "1 = copy each thread's input rows into a zero-padded buffer (tiles then span output rows); "
       "0 = read the input in place (border columns one at a time)"},
      {"par", kConvParValues, kConvParRows, "split across threads: 0 = output rows, 1 = oc tiles, 2 = images"},
      {"threads", kGemmThreadValues, 1, "threads used (caller included); must be <= device threads"},
  };
  static_assert(std::size(kSpecs) == kNumConv2dDirectParams);
};

// ---- GEMM-based convolution (CG_CONV2D_GEMM rows: 1x1 and im2col) ----
enum Conv2dGemmParam : int {
  kCgMc = 0,
  kCgKc,
  kCgNc,
  kCgUnrollK,
  kCgPrefetch,
  kCgPackA,
  kCgMBlock,
  kCgThreads,
  kNumConv2dGemmParams,
};

inline constexpr int32_t kConvMBlockValues[] = {16,  32,   48,   64,   96,   128,  192,  256,
                                                384, 512, 768, 1024, 2048, 4096, 8192, 16384};

template <int MR, int NR>
struct Conv2dGemmParamSet {
  using Gemm = GemmParamSet<MR, NR>;
  static constexpr ParamSpec kSpecs[] = {
      {"mc", Gemm::kMc.v, GemmDefaultMc(MR), "GEMM rows (output pixels) per cache block; a multiple of mr"},
      {"kc", kGemmKcValues, GemmDefaultKc(NR), "GEMM depth (filter elements) per cache block"},
      {"nc", Gemm::kNc.v, GemmDefaultNc(NR), "GEMM columns (output channels) per cache block; a multiple of nr"},
      {"unroll_k", kGemmUnrollValues, 4, "micro-kernel k-loop unroll factor"},
      {"prefetch", kGemmPrefetchValues, 0, "micro-kernel software prefetch distance in k iterations; 0 = off"},
      {"pack_a", kGemmBoolValues, 1, "1 = pack A blocks into mr-tall panels; 0 = micro-kernel reads A in place"},
      {"m_block", kConvMBlockValues, 256,
       "output pixels per GEMM call (rows gathered or im2col-expanded into a thread's scratch)"},
      {"threads", kGemmThreadValues, 1, "threads used (caller included); must be <= device threads"},
  };
  static_assert(std::size(kSpecs) == kNumConv2dGemmParams);
};

// ---- The portable reference ----
inline constexpr ParamSpec kConv2dRefSpecs[] = {
    {"threads", kGemmThreadValues, 1, "threads used (caller included); must be <= device threads"},
};

}  // namespace cliffguard::cpu
