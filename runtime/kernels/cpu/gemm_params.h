// Tunable parameters of the CPU fp32 GEMM family, as data (STYLE H4/H10). Every
// variant declares the same parameters in the same order (GemmParam below); mc
// and nc lists are per variant (multiples of its mr / nr), the
// others are shared. The tuner builds its search space from these lists:
// 14 * 16 * 14 (mc, kc, nc) * 3 (par) * 28 (threads) * 4 (unroll_k) * 5 (prefetch)
// * 2 * 3 * 2 (pack_a, pack_b, order) = 63e6 schedules per variant and shape before
// the threads <= device.threads constraint (4.5e6 on a 2-thread device).
#pragma once

#include <cstdint>
#include <vector>

#include "cliffguard/kernel.h"
#include "kernels/cpu/thread_scratch.h"

namespace cliffguard::cpu {

// Indices of the family's tunable parameters in ParamValues (declaration order of
// GemmParamSet::kSpecs).
enum GemmParam : int {
  kParamMc = 0,
  kParamKc,
  kParamNc,
  kParamPar,
  kParamThreads,
  kParamUnrollK,
  kParamPrefetch,
  kParamPackA,
  kParamPackB,
  kParamOrder,
  kNumGemmParams,
};

// Values of `par`: which loop is split across threads.
enum GemmPar : int { kParN = 0, kParM = 1, kParMicroPanels = 2 };
// Values of `order`: the loop over a block's micro-tiles. Panels of B outer (BLIS's
// jr, then ir): each B micro-panel stays in L1 for every A panel of the block, and
// C is written a column strip of mc rows at a time. Rows of C outer: each A panel
// stays in L1 for every B micro-panel of the block (read from L2), and C is written
// an mr-row panel at a time, left to right.
enum GemmOrder : int { kOrderPanelsOfB = 0, kOrderRowsOfC = 1 };
// Values of `pack_b`. In place: the micro-kernel reads B (not transposed) where it is
// stored. Blocks: each kc x nc block of B is packed into nr-wide panels before any
// micro-kernel runs on it, and reused by every row block of A. Panels: where all of
// op(A) is one row block (m <= mc) of an N split, panels of B first and no software
// prefetch, each panel is packed just before its micro-kernel calls, which prefetch
// the next panel's source into L2 meanwhile (reading B overlaps the arithmetic, and
// the packed B is one panel, not a block); elsewhere as blocks.
enum GemmPackB : int { kPackBInPlace = 0, kPackBBlocks = 1, kPackBPanels = 2 };

// Multipliers of mr (for mc) and nr (for nc).
inline constexpr int32_t kGemmBlockMultipliers[] = {1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64};
inline constexpr int32_t kGemmNcMultipliers[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128};
inline constexpr int32_t kGemmKcValues[] = {16,  32,  48,  64,  96,  128, 160,  192,
                                            256, 320, 384, 512, 768, 1024, 1536, 2048};
inline constexpr int32_t kGemmParValues[] = {0, 1, 2};
// Thread counts: every count to 8, then steps of at most a quarter, so a default
// within a budget of 6, 12 or 24 CPUs runs on all of them (powers of two alone left
// a third of such a machine idle), up to the thread pool's 256.
inline constexpr int32_t kGemmThreadValues[] = {1,  2,  3,  4,  5,  6,  7,  8,   10,  12,  14,  16,  20,  24,
                                                28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256};
inline constexpr int32_t kGemmUnrollValues[] = {1, 2, 4, 8};
inline constexpr int32_t kGemmPrefetchValues[] = {0, 2, 4, 8, 16};
inline constexpr int32_t kGemmBoolValues[] = {0, 1};
inline constexpr int32_t kGemmPackBValues[] = {kPackBInPlace, kPackBBlocks, kPackBPanels};
// Rows of an operand a multiple of this many bytes apart fall into the same few sets
// of the L1 (each way of the 8-way 32 KiB and 12-way 48 KiB L1s spans 4 KiB), so the
// rules that read many such rows at once treat these strides apart.
inline constexpr int64_t kL1AliasBytes = 4096;

// Declared defaults (fit_defaults then sets threads, par and pack_b per shape),
// from --explore runs of bench_gemm on the AVX-512 host: A block 8 micro-panels
// (mc x 384 floats, 72-192 KiB, in L2), kc = 384 (fewer passes over C than 256:
// +3-8% at 1024^3..2048^3), B block 64 micro-panels.
constexpr int32_t GemmDefaultMc(int mr) { return mr * 8; }
constexpr int32_t GemmDefaultKc(int /*nr*/) { return 384; }
constexpr int32_t GemmDefaultNc(int nr) { return nr * 64; }

template <int MR, int NR>
struct GemmParamSet {
  static constexpr auto Scaled(int32_t unit, const int32_t (&mult)[14]) {
    struct Values {
      int32_t v[14];
    } out{};
    for (int i = 0; i < 14; ++i) out.v[i] = unit * mult[i];
    return out;
  }
  static constexpr auto kMc = Scaled(MR, kGemmBlockMultipliers);
  static constexpr auto kNc = Scaled(NR, kGemmNcMultipliers);
  static constexpr ParamSpec kSpecs[] = {
      {"mc", kMc.v, GemmDefaultMc(MR), "rows of op(A) per cache block (packed A block kept in L2); a multiple of mr"},
      {"kc", kGemmKcValues, GemmDefaultKc(NR), "depth (k elements) per cache block; the A block mc x kc stays in L2"},
      {"nc", kNc.v, GemmDefaultNc(NR), "columns of op(B) per cache block (packed B block); a multiple of nr"},
      {"par", kGemmParValues, 0, "loop split across threads: 0 = jc (N blocks), 1 = ic (M blocks), 2 = jr (micro-panels)"},
      {"threads", kGemmThreadValues, 1, "threads used (caller included); must be <= device threads"},
      {"unroll_k", kGemmUnrollValues, 4, "micro-kernel k-loop unroll factor (k iterations per loop trip)"},
      {"prefetch", kGemmPrefetchValues, 0, "software prefetch distance of A and B in k iterations; 0 = off"},
      {"pack_a", kGemmBoolValues, 1, "1 = pack A blocks into mr-tall panels; 0 = micro-kernel reads A in place"},
      {"pack_b", kGemmPackBValues, kPackBBlocks,
       "1 = pack B blocks into nr-wide panels; 2 = pack each panel as it is used (one row block of A; else 1); "
       "0 = read B in place (needs B not transposed)"},
      {"order", kGemmBoolValues, kOrderPanelsOfB,
       "micro-tiles of a block: 0 = each B micro-panel against every A panel; 1 = each A panel against every B "
       "micro-panel (C written row panel by row panel)"},
  };
};

// Work per thread below which fit_defaults does not add threads (flops), for the own
// kernels and OpenBLAS (oneDNN: kOnednnFlopsPerThread). Measured on
// a 2-core AVX2 host with idle library workers asleep (bench/RESULTS.md, "Threads of
// the built-in default"): a second thread gains 1.5-1.8x from about 4 MFLOP (own
// kernels and OpenBLAS alike) and breaks even near 0.5 MFLOP; 2 MFLOP is ~30 us on
// one core. On a busy host a worker can wait a scheduler tick: tuned entries, which
// are measured, decide there.
inline constexpr double kFlopsPerThread = 2e6;

// Elements of the op's weights (gemm: k x n; conv2d: the filter, oc x kh x kw x ic),
// and the count from which the CPU default rules treat them as large (8 MiB of f32).
double WeightElements(const OpKey& key);
inline constexpr int64_t kLargeWeightsElements = int64_t{1} << 21;

// The largest of kGemmThreadValues within the device budget and `threads` (at least 1).
int32_t ThreadsWithin(double threads, const DeviceInfo& device);
// Thread counts the tuner measures first for a variant whose search is over threads
// alone (the libraries) or that proposes other counts (conv2d direct): `first` (the
// fitted count), the powers of two below the budget and the largest count within it.
std::vector<int32_t> ThreadCountCandidates(const DeviceInfo& device, int32_t first);
// The threads a call of this key gets by default (the own GEMM, GEMV and conv2d
// variants, and OpenBLAS): ThreadsWithin one per kFlopsPerThread of the shape's work.
int32_t ThreadsForWork(const OpKey& key, const DeviceInfo& device);
// The threads the own packed tiles of nr columns fit to a key (GemmFitDefaults):
// ThreadsForWork, and at m <= kGemvMaxM at least the small-m kernels' (GemvThreads) but
// at most the key's panels of nr columns: a decode step's threads split the weights'
// columns; splitting its few rows, each thread read all of B. On the Intel host, per
// call, 11 shapes drawn with m of 9 to 16 and n of 17 to 32 on a two-thread budget:
// the M split took 1.8-2.1x the time of the same tile on one thread on 10 (0.88x on
// the 11th, with 141 KiB of weights); held out, on 9 shapes this changes (with the
// oneDNN rule of OnednnSkinnySgemmFits), the old default took 2.5x the new one's time
// (1.25-4.05x; bench/RESULTS.md, "Intel Xeon ...: decode steps' threads split the
// weights' columns").
int32_t GemmFittedThreads(const OpKey& key, const DeviceInfo& device, int nr);

// candidates(): what the tuner measures first for a key, beside the search. Every
// vector variant proposes its fitted default, the tile variants (after it) also in
// the other `order` where its first depth block is at most kGemmRowsOrderMaxKc deep;
// on compute-bound keys (m of at least kGemmComputeBoundMinM) whose k is deeper than
// the declared kc, the variants of the host's widest ISA also propose the deep-k
// blocking (mc = kGemmDeepKPanels mr, kc from GemmDeepKc: fewer passes over C), and
// those of a narrower ISA propose nothing (half the FMA width; none of them won such
// a key in four serving-table tunings).
// Measured on the Intel AVX-512 host (bench/RESULTS.md, "Large `nn` at the FMA
// peak"): the 14x32 tile with mc = 56 and kc = 1024 took 0.92-1.00x the time of its
// fitted blocking and 0.78-1.04x oneDNN's on seven constant-weights keys with m of
// 32 to 2048 and k of 1024 to 4096; one pass over C (kc covering k up to 2048) took
// 0.93-0.99x the time of kc = 1024 at m of 784 to 2048 and k of 1100 to 2048,
// 0.98-1.00x at m = 512, 1.00x at m = 384 and 1.02-1.07x at m of 64 to 256
// ("One pass over C").
inline constexpr int64_t kGemmComputeBoundMinM = 64;
inline constexpr int32_t kGemmDeepKPanels = 4;
inline constexpr int32_t kGemmDeepKMaxKc = 1024;
inline constexpr int64_t kGemmOnePassMinM = 512;
inline constexpr int32_t kGemmOnePassMaxKc = 2048;
// The deep-k blocking's kc for an m-row key of depth k on an mr x nr tile: the
// smallest kGemmKcValues value that covers k, else the largest, at most
// kGemmDeepKMaxKc, with the A block (kGemmDeepKPanels mr rows) and one B micro-panel
// (nr columns) of that depth within a quarter of L2. With m of at least
// kGemmOnePassMinM and k beyond kGemmDeepKMaxKc: the smallest value that covers k
// (one pass over C), at most kGemmOnePassMaxKc, with both within half of L2, where
// one fits. 0 when no list value fits (or L2 is unknown).
int32_t GemmDeepKc(int mr, int nr, int64_t m, int64_t k, int64_t l2_bytes);
std::vector<ParamValues> GemmCandidates(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);

// The fitted `order` on an Intel AVX-512 host: rows of C outer where the key's first
// depth block (min(k, kc)) is at most kGemmRowsOrderMaxKc deep, its B block (that
// depth by min(n, nc) columns) fits in half of L2, and C does not fit in L2. There
// writing C dominates, and a strip of mc rows spreads each B panel's stores over mc
// pages. On the Intel Xeon (family 6 model 167, L2 2 MiB), constant weights from
// memory, the fitted 8x32, 1 and 2 threads, the same binary with each order in
// alternate runs (bench/RESULTS.md, "... rows of C outer at shallow depth"): panels of
// B took 2.4-3.1x the time at k = 16, 1.7-2.3x at 32, 0.95-1.7x at 48 to 96, 1.0-1.2x
// at 128 and 0.97-1.04x at 256 on keys the rule takes; with the B block beyond half
// of L2, rows of C took up to 1.2x more (8x32), up to 2.2x (6x64), and from a depth
// of 320 up to 1.9x; with C within L2 (44 x 3072 x 128) 1.4x. On 8 shapes drawn after
// (the rule's keys among 20), panels of B took 1.23x the time in geometric mean on one
// thread (0.98-1.77x) and 1.24x on two (0.95-2.00x). AMD hosts keep panels of B (not
// measured there); the tile variants propose both orders to the tuner
// (GemmCandidates) where the first depth block is at most kGemmRowsOrderMaxKc deep.
inline constexpr int32_t kGemmRowsOrderMaxKc = 256;
bool GemmRowsOrderFits(const OpKey& key, int32_t kc, int32_t nc, const DeviceInfo& device);

// check(): mc % mr, nc % nr, threads <= device.threads, pack_b=0 only without trans_b.
Status GemmCheck(const KernelVariant& v, const OpKey& key, const ParamValues& p, const DeviceInfo& device);
// fit_defaults(): threads from the shape's work and the device budget, and for keys
// with m <= kGemvMaxM at least as many as the small-m variants take for streaming the
// weights (kGemvBytesPerThread: a second thread took 1.30-1.88x less time at m = 10-16
// from 128 KiB of weights; bench/RESULTS.md, "... shapes never tuned before"); par = 1
// (M split) when N has fewer nr panels than threads, or for constant weights when m is
// at least n with a panel of M per thread (an N split packs all of A on every thread;
// on packed weights the M split shares B without a barrier: on Zen 4, 2 threads,
// 0.72-1.00x the time of the N split at m >= n, 29 of 30 rows below 0.98, geometric
// mean 0.87; at m < n 0.86-1.27x; bench/RESULTS.md, "the own tiles for mid-size keys
// on more threads"), and likewise per call on an Intel host, where each thread of the
// M split packs B, the smaller operand at m >= n (2 threads, 9 shapes with k of 2 to
// 128: 0.47-0.97x the time of the N split; held out on 16 drawn rows the N split took
// 1.20x its time, 0.95-1.76x; "Intel Xeon ...: per-call own tiles on two threads split
// M"); pack_b = 0 for short M (B is then streamed once, packing it
// would cost more than it saves) unless B is transposed; kc from GemmDeepKc on
// kGemmDeepKDefaultTile where GemmDeepKDefaultHolds; order by GemmRowsOrderFits.
void GemmFitDefaults(const KernelVariant& v, const OpKey& key, const DeviceInfo& device, ParamValues& p);
// pack_b = kPackBPanels in the fitted schedule of per-call keys where the driver
// packs panel by panel with it (PanelwiseBApplies: all of A one row block of an N
// split, panels of B first, no software prefetch), with more than one panel of B and
// at least one full depth block deep (kc).
bool GemmPanelPackFits(const OpKey& key, const ParamValues& p, int nr);
// preferred_default(): for the AVX-512 tiles of an AVX-512 host (the first in the
// table, 8x32, takes them), constant-weights keys
// - with m above kGemvPackedMaxM and at most kGemvMaxM, and n of a panel or more,
//   except, on an Intel host, m below kGemmSmallMTileMinM with weights of 2^21
//   elements and more on one thread (oneDNN's there). Measured on the Intel host
//   (bench/RESULTS.md, "Constant weights with m of 9 to 16"): the fitted 8x32 on
//   packed weights took 0.33-1.00x the time of the default it replaced (the
//   dot-product GEMV or oneDNN), and 0.94-0.98x oneDNN's speed at 9 x 4096 x 4096 and
//   10 x 3072 x 768 on one thread.
//   On an AMD host, m up to kGemmOnePanelMaxM runs on the tile of that many rows
//   (14x32), whatever the weights and threads: all of A is one micro-panel, so each
//   packed panel of B is read once, where the 8x32 makes a second pass for the rows
//   past 8, mostly padding. On Zen 4, paired, weights from memory, 1 and 2 threads
//   (bench/RESULTS.md, "... constant weights with m of 9 to 14 on the 14-row tile"):
//   the 14x32 took 0.59-0.83x the 8x32's time at m = 9, 0.75-0.96x at 10, 0.87-0.91x
//   at 11 and 0.90-0.99x at 12 to 14, and 1.15-1.40x at 15 and 16 (which keep the
//   8x32); against oneDNN, which had m of 9 to 11 with large weights on one thread,
//   0.66-0.78x its time there;
// - and those above kGemvMaxM that GemmTileDefault gives the own tiles, on the tile
//   of GemmLeastPaddingRows where GemmLeastPaddingHolds, on the deep-k tile where
//   GemmDeepKDefaultHolds;
// and per-call keys of PerCallOwnTile (gemm_library.h; built with oneDNN).
inline constexpr int64_t kGemmSmallMTileMinM = 12;
inline constexpr int64_t kGemmOnePanelMaxM = 14;
bool GemmPreferredDefault(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);
// Constant-weights keys with m above kGemvMaxM that default to the own tiles, ahead
// of oneDNN's matmul, on an AVX-512 host:
// - wide keys, n of at least kGemmWideDefaultMinN, on an Intel host. The fitted 8x32
//   on packed weights against oneDNN (weights reordered once), paired, on the BERT, 7B
//   and ResNet-50 serving shapes with n >= 512 (m of 32 to 384), both layouts, 1 and 2
//   threads (bench/RESULTS.md, "the own fitted default against oneDNN"): on the Intel
//   Xeon 0.99-1.34x oneDNN's speed, 65 of 68 rows above 1.0; on AMD Zen 4 (AVX-512 on
//   256-bit units) 0.94-1.16x, 18 of 68, where oneDNN stays the default. ResNet-50's
//   narrower layers (n of 64 to 256) ran at 0.49-0.96x on the Intel host and keep
//   oneDNN.
// - keys with n of at least kGemmRowsOrderDefaultMinN and k of at most
//   kGemmRowsOrderDefaultMaxK on an Intel host where the fitted 8x32 writes C rows
//   first (GemmRowsOrderFits: C beyond L2). On the Intel host, paired, weights from
//   memory, 1 and 2 threads, oneDNN's matmul (weights reordered once) took 1.01-1.56x
//   the tile's time on 6 drawn shapes with n of 256 to 472 and k of 32 to 86, and
//   0.98-1.15x at k of 128 to 178 (3 shapes); at n of 64 and 128 (5 shapes)
//   0.89-1.11x. On 12 drawn after, 1.17-1.88x at k of 19 to 64 (8 shapes) and
//   0.79-1.12x at 128 and 147 (4), which set the bound on k; on 8 drawn after that (k
//   of 25 to 91) 1.27-1.42x in geometric mean per layout and thread count
//   (0.97-2.04x; bench/RESULTS.md, "Intel Xeon ...: constant weights with n of 256 to
//   511 and shallow depth run the own tile").
// - keys of less than kGemmTileDefaultMaxFlops with a thread budget of more than one.
//   oneDNN wakes its passive OpenMP team per call; below 20 MFLOP (less the weights'
//   share) its fitted default runs one thread (kOnednnFlopsPerThread), the own tiles
//   two from 4 MFLOP (kFlopsPerThread). On
//   Zen 4, 2 threads, paired, 56 shapes of 2.7 to 231 MFLOP (24 drawn at random), both
//   layouts: the 84 rows whose default this changed took 0.47-1.21x the time of the
//   oneDNN default, geometric mean 0.71 (the slower ones: 60 x 39 x 3648, 1.06-1.21x);
//   from 101 to 231 MFLOP the fitted tile took 0.93-1.11x oneDNN's time
//   (bench/RESULTS.md, "the own tiles for mid-size keys on more threads"). Not timed
//   on an Intel host, where oneDNN's second thread cost more (2.07x the time of one
//   at 6.1 MFLOP, 1.35x at 12.3).
// - keys of GemmLeastPaddingHolds (below).
inline constexpr int64_t kGemmWideDefaultMinN = 512;
inline constexpr int64_t kGemmRowsOrderDefaultMinN = 256;
inline constexpr int64_t kGemmRowsOrderDefaultMaxK = 96;
// The tile that takes the own tiles' defaults (the 8x32, first among the AVX-512
// tiles).
inline constexpr GemmConfig kGemmDefaultTile{8, 32};
// GemmRowsOrderFits for that tile's fitted blocking (kc and nc): the order its default
// schedule runs, which the rule above and PerCallOwnTile (gemm_library.h) decide on.
bool GemmDefaultTileRowsFirst(const OpKey& key, const DeviceInfo& device);
inline constexpr double kGemmTileDefaultMaxFlops = 80e6;
bool GemmTileDefault(const OpKey& key, const DeviceInfo& device);

// Constant-weights keys with m above kGemvMaxM and at most kGemmLeastPaddingMaxM and n
// of at least kGemmWideDefaultMinN, on an AMD AVX-512 host, run the AVX-512 tile of
// kGemmLeastPaddingTileRows that pads m least (more rows on ties: fewer passes), on any
// thread budget. With m within one mc block every micro-panel of A reuses the B
// micro-panel from L1, so among the own tiles the time follows the padded rows. On Zen
// 4, paired, weights from memory, 1 and 2 threads, against oneDNN (weights reordered
// once; the default before on one thread and above 80 MFLOP): that tile took
// 0.77-0.90x its time at m = 17 (the 6x64, 18 rows; the 8x32 pads to 24 and took
// 0.97-1.14x), 0.79-0.91x at 25 (the 14x32) and 0.77-1.02x over m = 17 to 47; on 14
// shapes drawn after, both layouts, oneDNN took 1.02-1.21x its time on one thread
// (1.07x in geometric mean) and 1.02-1.55x on two. With the weights in cache the two
// were level (oneDNN 0.92-1.05x, 0.99x in geometric mean on 8 shapes); serving reads
// weights from memory (bench/RESULTS.md, "... constant weights with m of 17 to 47 on
// the tile that pads m least"). Narrower keys keep oneDNN on one thread: at n = 64 and
// 128 the tile took 0.95-1.19x its time, at 256 and 384 0.90-1.02x. The 16x16 (half
// the width) is not among the tiles. m of 9 to 16 keep the rule above: with m within
// one micro-panel the passes over B count, and the 14x32 took 0.87-0.93x the 6x64's
// time at m = 9 and 10 though it pads more.
inline constexpr int kGemmLeastPaddingTileRows[] = {14, 8, 6};
inline constexpr int64_t kGemmLeastPaddingMaxM = 47;
constexpr int GemmLeastPaddingRows(int64_t m) {
  int best = kGemmLeastPaddingTileRows[0];
  for (int mr : kGemmLeastPaddingTileRows)
    if (RoundUp(m, mr) < RoundUp(m, best)) best = mr;
  return best;
}
bool GemmLeastPaddingHolds(const OpKey& key, const DeviceInfo& device);

// Wide constant-weights keys of GemmTileDefault on an Intel AVX-512 host whose L2 size
// is known (n of at least kGemmWideDefaultMinN) that are compute-bound (m of at least
// kGemmComputeBoundMinM) and deeper than the declared kc run kGemmDeepKDefaultTile
// with the deep-k depth block: kc from GemmDeepKc, mc as declared (8 micro-panels).
// Below k each depth block reads and writes all of C once more, and the 14x32 loads
// fewer operands per FMA than the 8x32. On the Intel Xeon (family 6 model 167),
// paired, weights from memory, both layouts, 1 and 2 threads (bench/RESULTS.md, "...
// wide constant weights deeper than 384 run the 14x32 with deep k"): on 12 drawn
// shapes with m of 66 to 2483 and k of 417 to 4962 it took 0.93-0.96x the fitted
// 8x32's time in geometric mean per layout and thread count (0.77-1.08x); with 4
// micro-panels of A 0.96-1.00x, the 8x32 and 6x64 with deep k 1.01-1.07x; on 16
// drawn after, the old default took 1.06-1.07x its time (0.98-1.17x) and the better
// of oneDNN and OpenBLAS 1.06-1.09x (0.97-1.30x). AMD hosts keep the 8x32 (not
// measured there). Keys whose m the 14x32 pads to more than kGemmDeepKMaxPaddedRows
// times the rows the 8x32 computes keep the 8x32 too: on the BERT and 7B serving
// shapes at m = 128 (1.09x the rows) the 8x32 took 0.963x the 14x32's time in
// geometric mean (0.92-1.10x), at m = 71 (1.17x) 0.93-1.01x, at 141 and 144 (1.07x)
// 0.98-1.02x, where at m = 73, 75 and 157 (1.05x) and from 256 the 14x32 was level
// or ahead (bench/RESULTS.md, "... the rows the 14x32 pads").
inline constexpr GemmConfig kGemmDeepKDefaultTile{14, 32};
inline constexpr double kGemmDeepKMaxPaddedRows = 1.06;
bool GemmDeepKDefaultHolds(const OpKey& key, const DeviceInfo& device);

// Per-call `nt` decode steps (A as stored, B transposed) of kGemmShallowNtDecodeMinM
// to kGemvMaxM tokens with n above kGemvTallMaxN and k of at most
// kGemmShallowNtDecodeMaxK, on an Intel AVX-512 host, run kGemmDefaultTile (which packs
// B per call) in place of the small-m `nt` kernel, whose dot products along so short a
// k are mostly horizontal sums. On the Intel Xeon (family 6 model 167), paired, per
// call, 24 shapes drawn with m of 5 to 16, n of 17 to 12288 and k of 16 to 256, 1 and 2
// threads: the fitted 8x32 took 0.53-0.98x the small-m kernel's time on all 24 rows
// with k up to 57, and 1.14-2.00x on all 24 from k = 71. At m of 1 to 4 (20 shapes) it
// was mostly behind (0.83-0.98x only at m = 3 and 4 with k up to 37). Held out, 24
// shapes drawn in the rule, two runs: the small-m kernel took 1.40x and 1.41x the
// tile's time in geometric mean on one thread, 1.38x and 1.36x on two (0.97-2.58x;
// bench/RESULTS.md, "Intel Xeon ...: shallow `nt` decode steps run the own tile").
// AMD hosts keep the small-m kernel (not measured there). The smallest of these keys
// call OpenBLAS instead where it is built (OpenblasTinyFits, gemm_library.h).
inline constexpr int64_t kGemmShallowNtDecodeMinM = 5;
inline constexpr int64_t kGemmShallowNtDecodeMaxK = 64;
bool GemmShallowNtDecodeHolds(const OpKey& key, const DeviceInfo& device);

}  // namespace cliffguard::cpu
