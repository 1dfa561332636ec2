// Tunable parameters of the CPU fp32 small-m GEMM family (gemv_f32.inc), as data.
#pragma once

#include <cstdint>

#include "cliffguard/kernel.h"
#include "kernels/cpu/gemm_params.h"
#include "kernels/cpu/gemv_kernel.h"

namespace cliffguard::cpu {

// Indices in ParamValues (declaration order of the kSpecs below).
// kGemvOrder is the nn and nt variants' third parameter, kGemvPrefetch the packed ones';
// kGemvUnrollK the nn variants' fourth, kGemvNTPrefetch the nt ones'; kGemvNTKc the nt ones' fifth.
enum GemvParam : int {
  kGemvThreads = 0,
  kGemvBlock = 1,
  kGemvOrder = 2,
  kGemvPrefetch = 2,
  kGemvUnrollK = 3,
  kGemvNTPrefetch = 3,
  kGemvNTKc = 4
};

// The largest m these variants run, by layout of B (measured, bench/RESULTS.md): nt
// tiles keep B in L1/L2 while every row group of A passes, and beat the packed path
// up to m = 16 (but at k of at most 64 on an Intel host: GemmShallowNtDecodeHolds);
// nn keeps m rows of C in L1, whose rows alias in L1 sets once many rows are ldc
// apart, so beyond m = 4 the packed path is kept.
constexpr int64_t GemvMaxM(bool trans_b) { return trans_b ? 16 : 4; }

inline constexpr int32_t kGemvNbValues[] = {64, 128, 256, 512, 1024, 2048, 4096};
inline constexpr int32_t kGemvNjValues[] = {1, 2, 4, 8};
// nt depth blocks: 0 = all of k at once.
inline constexpr int32_t kGemvNTKcValues[] = {0, 128, 256, 512, 1024, 2048};

// nn `order` values: 0 steps of rows, 1 a tile of C in registers (threads split n),
// 2 the same tile with threads splitting k, 3 steps of rows with threads splitting k.
enum GemvNNOrder : int32_t { kGemvNNSteps = 0, kGemvNNTile = 1, kGemvNNTileSplitK = 2, kGemvNNStepsSplitK = 3 };
inline constexpr int32_t kGemvNNOrderValues[] = {kGemvNNSteps, kGemvNNTile, kGemvNNTileSplitK, kGemvNNStepsSplitK};
constexpr bool GemvNNSplitsK(int32_t order) { return order == kGemvNNTileSplitK || order == kGemvNNStepsSplitK; }
constexpr bool GemvNNTiles(int32_t order) { return order == kGemvNNTile || order == kGemvNNTileSplitK; }
inline constexpr int32_t kGemvUnrollKValues[] = {8, kGemvNNDeepStepRows};
inline constexpr ParamSpec kGemvNNSpecs[] = {
    {"threads", kGemmThreadValues, 1, "threads (caller included), each a contiguous range of n; <= device threads"},
    {"nb", kGemvNbValues, 1024, "columns of C per block, kept in L1/L2 while all k rows of B stream through"},
    {"order", kGemvNNOrderValues, 0, "0 = steps of several rows of B, C reloaded per step; 1 (m <= 4) = a tile of C in registers for all of k, each row's columns read whole (nb unused); 2 = as 1, threads splitting k (each a contiguous run of rows; partial sums added by the caller); 3 = as 0, threads splitting k"},
    {"unroll_k", kGemvUnrollKValues, 8, "rows of B per step (orders 0 and 3; unused by 1 and 2): 8, or as many as the registers hold with m rows of A; 16 (m = 1, AVX-512) keeps more rows in flight"},
};
inline constexpr ParamSpec kGemvNTSpecs[] = {
    {"threads", kGemmThreadValues, 1, "threads (caller included), each a contiguous range of n; <= device threads"},
    {"nj", kGemvNjValues, 4, "rows of B (columns of C) per register tile; rows of A per tile: at most 4, as many as the registers hold"},
    {"order", kGemmBoolValues, 0, "0 = a tile's rows of B read side by side at each k step; 1 = each row whole, then the next (one sequential stream where rows are stored one after another)"},
    {"prefetch", kGemmBoolValues, 0, "1 = where m takes more than one pass of a tile's rows of A over its rows of B, the second pass (those rows then in cache) requests the next tile's rows of B into L2 (order 0); 0 = none"},
    {"kc", kGemvNTKcValues, 0, "depth (k elements) per block (order 0): every row group of A passes over a block of the tile's rows of B before the next block, so passes after the first read it from L1; partial sums kept between blocks; 0 = all of k at once"},
};
// The fitted `prefetch` (nt): 1 on Intel CPUs. With a tile's rows of B in cache after
// the first row group's pass, the later passes left memory idle; the second now
// fetches the next tile's rows. On the Intel Xeon (family 6 model 167), one set of
// operand copies per shape, 10 shapes with m of 5 to 16, one and two threads, two
// runs each way: 0.917x the time in geometric mean (0.72-1.13x). Held out, 14 drawn
// shapes: without it the kernel took 1.15x the time on one thread and 1.18x on two
// (0.96-1.41x; attention scores with k of 64 to 96 1.20-1.24x, where dnnl_sgemm had
// been up to 1.11x faster; k of 3319 and more level). bench/RESULTS.md, "Intel Xeon
// ...: small-m nt passes prefetch the next rows of B". AMD keeps 0 (not measured).
// m <= 4 (one pass) is unaffected.
constexpr int32_t GemvNTDefaultPrefetch(bool intel) { return intel ? 1 : 0; }
// The fitted `kc` (nt): kGemvNTDefaultKc on Intel AVX-512 hosts where m takes more
// than one pass (m >= 5) and the rows a whole-depth tile reads, m of A and 4 of B, are
// over kGemvNTBlockMinBytes (2/3 of the 48 KiB L1d): each later pass then read its
// rows of B from L2, not L1, and memory sat idle while the later passes ran. On the
// Intel Xeon (family 6 model 167), per call, one and two threads, 16 drawn shapes
// with m of 4 to 14: blocks of 256 took 0.51-1.00x the time on the 16 rows over the
// bound (0.691x in geometric mean) and 0.86-1.39x on the 12 with m >= 5 under it
// (1.15-1.39x at k of 399 to 563, whose rows stay in L1 whole). Held out (16 shapes
// drawn in the rule, two runs): the old default took 1.34-1.41x the time on one
// thread and 1.31-1.36x on two. At m of 1 to 4 (one pass): 0.88-1.06x, not changed.
// bench/RESULTS.md, "Intel Xeon ...: small-m nt passes in depth blocks". AMD and AVX2
// keep 0 (not measured).
inline constexpr int32_t kGemvNTDefaultKc = 256;
inline constexpr int64_t kGemvNTBlockMinBytes = 32 << 10;
constexpr int32_t GemvNTDefaultKc(bool intel, bool avx512, int64_t m, int64_t k) {
  return intel && avx512 && m >= 5 && (m + 4) * k * 4 > kGemvNTBlockMinBytes ? kGemvNTDefaultKc : 0;
}
// The fitted `order` (nt): 1 on AMD CPUs where rows of B (k elements) are at most
// GemvRowsWholeMaxBytes(m, threads) long. On Zen 4, with B from memory, rows side by
// side defeat the hardware prefetchers when a tile's rows share a few pages: reading
// each row whole took 1.1-2.6x less time at m = 1 and 2 with rows of 256 B to 3 KiB;
// with B in cache (L2, L3) it took up to 1.4x more. Longer rows at m = 1, AVX-512 and
// AVX2: 1.08-1.44x less time on one thread up to 12 KiB (k = 3072; 0.82-0.98x at 14
// and 16 KiB) and 1.05-1.36x on two up to 8 KiB (0.92-1.07x from 9 to 12 KiB);
// 1.03-1.52x on 12 rows drawn after; in cache 0.81-1.23x. At m = 2 rows of 4 to 7 KiB
// read 0.92-1.61x faster from memory but took 1.6x the time in cache, and at m = 4
// (1.7-1.9x faster up to 2 KiB) up to 1.9x, so m = 2 keeps 3 KiB and m > 2 keeps 0
// (the tuner may choose 1). Budgets above two threads take the two-thread bound (not
// timed). bench/RESULTS.md, "... the rows of an nt tile read whole" and "... nt rows
// read whole at m = 1 up to 12 KiB". Intel hosts keep 0: on the Intel Xeon (family 6
// model 167), operands line-aligned, 14 shapes drawn with m of 1 and 2 and k of 64 to
// 2813, two runs, order 1 took 1.01x the time of 0 on one thread in geometric mean
// (0.77-1.16x) and 1.05x on two (0.66-1.35x; "Intel Xeon ...: small-m nn keys with
// short rows").
constexpr int64_t GemvRowsWholeMaxBytes(int64_t m, int32_t threads) {
  return m == 1 ? (threads == 1 ? 12 << 10 : 8 << 10) : m == 2 ? 3 << 10 : 0;
}
// The fitted `order` (nn) when rows of B are up to this many bytes: where all of n
// fits one register tile (GemvNNWholeVectors), 1 on one thread and 2 (threads split k)
// on more; else 1 where a thread's columns fit the tile. The tile of C then stays in
// registers for all of k and B is read row after row. On Zen 4 it took 1.4-2.6x less
// time than before from memory at n = 32 to 256 (decode attention's scores x V has n =
// the head's width); two threads splitting such short rows by n took up to 2.8x the
// time of one, and with a thread's share of 2 KiB rows (n = 512 on 2 threads) order 1
// took 1.2x more (bench/RESULTS.md, "... nn tiles of C kept in registers"). On the
// Intel Xeon (family 6 model 167), operands line-aligned, two runs of 10 drawn shapes
// with n of 40 to 224 (m of 1 to 4, k of 1997 to 7653): on two threads order 2 took
// 0.47-0.72x the time of the steps split by n, on one thread order 1 took 0.60-1.06x
// where n fits the tile ("Intel Xeon ...: small-m nn keys with short rows").
inline constexpr int64_t kGemvNNRowsWholeMaxBytes = 1 << 10;
// The fitted `order` (nn) elsewhere, with more than one thread: 3 (steps of rows,
// threads splitting k, nb the widest) where a thread's share of a row of B split by n
// would be at most this many bytes. Split by n, each thread reads short pieces of every
// row; split by k, each reads one contiguous run of rows. On Zen 4 on two threads, B
// from memory, m = 1, 2 and 4 and n = 320 to 4096, the steps split by n took
// 1.18-1.70x the time of the same steps split by k in geometric mean per m and run
// (0.93-2.80x per shape; below 1.0 only at m = 2 and 4 with k <= 1024); 1.22x on 24
// drawn shapes (0.95-1.69x). With longer shares (n = 5120 to 11008) the gain was mixed
// (0.8-1.4x). bench/RESULTS.md, "... nn steps with threads splitting k". On the Intel
// Xeon, in the runs above, order 3 took 0.64-0.98x the time of order 0 at n of 402 to
// 2026; where the threads' columns of C share cache lines (n = 46: rows of 184 B), the
// steps split by n, which store C every step, took 6.7-7.1x the time of the new
// default (4 x 46 x 7821).
inline constexpr int64_t kGemvNNSplitKMaxThreadRowBytes = 8 << 10;
// The fitted `unroll_k` (nn, m = 1, AVX-512) on AMD CPUs: 16 where the steps run rows
// of B of these many bytes whose length is not a multiple of 4 KiB. More rows per step
// keep more lines of B in flight. On Zen 4, B from memory, one and two threads, 16
// rows took 0.79-0.96x the time of 8 at n = 512 to 2500 in the fitting sweeps (2 of 37
// rows level) and 0.82-1.01x (0.89 and 0.94 in geometric mean on one and two threads)
// on 16 shapes drawn in that band; below it they were level, above it level or slower
// (up to 1.1x at n = 3188); where a row is a multiple of 4 KiB (n = 1024, 2048, 3072,
// 4096), whose 16 rows then share one set of the 8-way L1, mostly slower (up to 1.25x).
// Intel hosts keep 8 (not measured there). bench/RESULTS.md,
// "... sixteen rows of B per step at m = 1".
inline constexpr int64_t kGemvNNDeepStepsMinRowBytes = 2 << 10;
inline constexpr int64_t kGemvNNDeepStepsMaxRowBytes = 10 << 10;

// The fitted `nb` (nn steps) on Intel hosts: a thread's whole rows of C, in one block,
// where m is at most this and its columns fit the widest block (4096), however many
// bytes its m rows of C take (elsewhere: where they fit in 32 KiB). Each row of B is
// then read in one run of up to 16 KiB instead of 4 KiB pieces. On the Intel Xeon
// (family 6 model 167), one thread, B from memory, the rows of a shape on one set of
// operand copies: at m = 3 and 4 and n of 2056 to 3527, 14 drawn shapes, two runs,
// nb = 4096 took 0.79-0.89x the time of the former 1024 on all 9 shapes the rule
// changes (the other 5 ran 4096 already); with a thread's columns above 4096 at m = 3
// and 4 (n of 6061 to 15487 on one thread) 1024 was level or ahead, except at 4264
// columns (0.88-0.92x; not taken). Held out, the old blocks took 1.19x the time on one
// thread (1.12-1.27x, 8 shapes) and 1.03x on two (0.93-1.09x, 6 shapes). bench/RESULTS.md,
// "Intel Xeon ...: small-m nn steps read whole rows of B". AMD hosts are not measured.
inline constexpr int64_t kGemvNNWholeRowsIntelMaxM = 4;

// The packed variants (CG_GEMV_PACKED rows): constant-weights keys with m at most
// this, either layout of B (measured ahead of oneDNN up to m = 8, bench/RESULTS.md).
inline constexpr int64_t kGemvPackedMaxM = 8;
inline constexpr int32_t kGemvNvValues[] = {1, 2, 4};
inline constexpr ParamSpec kGemvPackedSpecs[] = {
    {"threads", kGemmThreadValues, 1, "threads (caller included), each a contiguous range of panels; <= device threads"},
    {"nv", kGemvNvValues, 4, "vectors per panel of packed B: the panel's columns of C stay in registers for all of k"},
    {"prefetch", kGemmPrefetchValues, 0, "software prefetch distance of the panel stream, in k rows of the panel; 0 = off"},
};
// The register tile of a packed call: m rows by nv vectors of accumulators, nv
// vectors of B and a broadcast of A (one register to spare).
constexpr bool GemvPackedTileFits(int64_t m, int32_t nv, int vector_regs) { return m * nv + nv + 2 <= vector_regs; }
// The largest m fitted with nv = 4 (where the tile fits): from huge pages nv = 4
// read m = 5 1.17-1.37x slower than nv = 2 and m = 6 no faster, where at m = 4 it
// was up to 1.08x faster (bench/RESULTS.md, "... weights in huge pages").
inline constexpr int64_t kGemvPackedWideMaxM = 4;
// The fitted prefetch distance (k rows) by CPU vendor and m: 4 on Intel at m >= 2,
// where the panel stream with it reads 1.15-1.28x faster at m = 2-8 (bench/RESULTS.md,
// "... a prefetched panel stream at small m"); 0 at m = 1, where it read 5-9% slower
// from weights in huge pages ("... weights in huge pages"); 0 elsewhere (AMD Zen 4: the
// same distance measured about 15% slower at m = 4).
constexpr int32_t GemvPackedDefaultPrefetch(bool intel, int64_t m) { return intel && m >= 2 ? 4 : 0; }
// The narrowest panel a key's m must fit with (supports()): with one vector of B per
// m broadcasts of A a call reads A more than B, and measured behind the in-place
// kernels on AVX2 at m = 8 (bench/RESULTS.md). So AVX2 runs m <= 6, AVX-512 m <= 8.
inline constexpr int32_t kGemvPackedMinNv = 2;

// The bytes of B each thread of a small-m default streams at least (fit_defaults), so
// that a second thread starts at 128 KiB. On the 2-core Xeon, with the weights from
// memory, a second thread took 1.61-2.07x less time from 256 KiB to 1 MiB of weights,
// 1.37-1.45x at 128 KiB and 1.07x at 64 KiB (bench/RESULTS.md, "... shapes never tuned
// before"); the rule was 1 MiB before.
inline constexpr double kGemvBytesPerThread = 64 << 10;
// Threads for a small-m key: each streams at least kGemvBytesPerThread of B, within the budget.
int32_t GemvThreads(const OpKey& key, const DeviceInfo& device);

// check(): threads <= device.threads; nn: unroll_k 16 only at m = 1 on AVX-512.
template <bool kTransB>
Status GemvCheck(const KernelVariant& v, const OpKey& key, const ParamValues& p, const DeviceInfo& device);
// supports(): m <= GemvMaxM(kTransB) and B in the variant's layout (kTransB: B stored n x k).
template <bool kTransB>
Status GemvSupports(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);
// fit_defaults(): threads from the bytes of B (each thread streams at least kGemvBytesPerThread);
// nt: nj from m and the registers (one pass over B for m <= 4, 8 accumulators or more), order by
// GemvRowsWholeMaxBytes; nn: nb, the widest block whose m rows
// of C fit in 16 KiB (a thread's whole rows where they fit in 32 KiB, or on Intel by
// kGemvNNWholeRowsIntelMaxM; the widest where threads split k); order and
// unroll_k by the rules above (kGemvNNRowsWholeMaxBytes, kGemvNNSplitKMaxThreadRowBytes, kGemvNNDeepSteps*RowBytes).
template <bool kTransB>
void GemvFitDefaults(const KernelVariant& v, const OpKey& key, const DeviceInfo& device, ParamValues& p);

// Runs one call for validated args with the variant's row kernel.
Status GemvF32(const GemmArgs& args, const ParamValues& p, void (*rows)(const GemvTask&));

// The tall variants (CG_GEMV_TALL rows): keys with at most kGemvTallMaxN columns of C
// and A as stored, at any m (gemv_kernel.h, tall tasks). Parameter indices: the nt
// variants' kGemvThreads and kGemvBlock (`mj`), then kGemvTallFormParam and
// kGemvTallPrefetchParam.
inline constexpr int64_t kGemvTallMaxN = GemvMaxM(true);
enum GemvTallForm : int32_t { kGemvTallDot = 0, kGemvTallBroadcast = 1 };
inline constexpr int kGemvTallFormParam = 2;
inline constexpr int32_t kGemvTallFormValues[] = {kGemvTallDot, kGemvTallBroadcast};
inline constexpr ParamSpec kGemvTallSpecs[] = {
    {"threads", kGemmThreadValues, 1, "threads (caller included), each a contiguous range of m; <= device threads"},
    {"mj", kGemvNjValues, 8, "rows of A (of C) per register tile; form 0: columns of C per tile at most 4, as many as the registers hold; form 1: all n, at most as many rows as the registers hold"},
    {"form", kGemvTallFormValues, 0, "0 = dot products along k (op(B)^T as n rows of k, read in place where B is stored n x k); 1 = broadcasts of A times rows of op(B) (k rows of n, read in place where B is stored k x n)"},
    {"prefetch", kGemmBoolValues, 1, "1 = each step of a line requests the same line of the next tile's rows of A into L2; 0 = off"},
};
inline constexpr int kGemvTallPrefetchParam = 3;
// The fitted form: broadcasts from kGemvTallBroadcastMinN columns, and from
// kGemvTallNarrowBroadcastMinN where B is passed per call stored k x n (which the
// dot form would transpose per call) or k is at most kGemvTallShallowDepthPerColumn
// per column of C; dot products elsewhere. On the Intel host (family
// 6 model 167), paired, A from memory, 16 drawn shapes (n of 1 to 16, m of 73 to
// 6793), both layouts, 1 and 2 threads: the other form took 1.25-1.34x the fitted
// one's time in geometric mean per layout and thread count (0.83-2.37x; below 1.0 on
// 6 of 64 rows, all at n of 6 and 8 with A of at most 190 KiB). Dot products compute n
// columns per k vector (with the operands in cache the broadcasts took 1.16-2.99x their
// time at n of 1 to 6, and 1.08-1.19x at n = 8, k = 256); from 8 columns they read
// op(B)^T from L2 at every step where it is over L1, and a broadcast tile reads one
// row of op(B) per k step. Per call `nn` at m of 6 to 700 and n of 3 to 6
// (6 shapes), with its transposition the dot form took 1.03-1.56x the broadcasts'
// time; at n of 1 and 2 (4 shapes) the broadcasts took 0.98-1.16x its time. At
// shallow depths, where a dot product is a few vectors and a horizontal sum per column
// of C: with k <= 8n and n of 3 to 7 (7 drawn shapes, k of 9 to 41) the dot form took
// 0.97-1.71x the broadcasts' time (1.44-1.71x at n of 6 and 7 with k of 9 to 16); at n
// <= 2 (6 shapes, k of 9 to 38) and at 948 x 3 x 60 it took less than they
// (bench/RESULTS.md, "... keys with at most 16 columns of C run the tall kernels").
inline constexpr int64_t kGemvTallBroadcastMinN = 8;
inline constexpr int64_t kGemvTallNarrowBroadcastMinN = 3;
inline constexpr int64_t kGemvTallShallowDepthPerColumn = 8;
inline int32_t GemvTallDefaultForm(const OpKey& key) {
  const bool in_place_rows = !key.trans_b && !key.constant_weights;
  const bool shallow = key.k() <= kGemvTallShallowDepthPerColumn * key.n();
  const bool narrow_broadcast = key.n() >= kGemvTallNarrowBroadcastMinN && (in_place_rows || shallow);
  return key.n() >= kGemvTallBroadcastMinN || narrow_broadcast ? kGemvTallBroadcast : kGemvTallDot;
}
// supports(): n <= kGemvTallMaxN and A not transposed.
Status GemvTallSupports(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);
// check(): the nt variants' (GemvCheck<true>: threads <= device.threads).
// fit_defaults(): threads from the bytes of A (each thread streams at least
// kGemvBytesPerThread); mj 8; form GemvTallDefaultForm; prefetch 1 from n = 2. On the
// Intel host, paired, A from memory, on the 16 fitting shapes of GemvTallDefaultForm:
// without it the broadcast form took 1.39-1.42x the time in geometric mean on 1 and 2
// threads (1.02-1.82x), the dot form 1.10-1.12x (0.96-1.35x; 0.96-0.97x at n = 1).
void GemvTallFitDefaults(const KernelVariant& v, const OpKey& key, const DeviceInfo& device, ParamValues& p);
// Constant weights, in the layout of the form: op(B)^T as n rows of k (dot), op(B)
// as k rows of n (broadcast), dense. A call without them reads B in place where it
// is stored so, else gathers that layout into the calling thread's scratch first.
size_t GemvTallWeightsBytes(const KernelVariant& v, const OpKey& key, const ParamValues& p);
Status GemvTallPackWeights(const KernelVariant& v, const OpKey& key, const ParamValues& p, const void* weights,
                           int64_t ld, void* dst);
// preferred_default(): every key it supports with m beyond the small-m variants of
// its layout (GemvMaxM), per call or constant weights, ahead of the packed tiles
// (which compute n in panels of 16 or 32 columns: at n = 1, 32 columns' work) and the
// libraries. On the Intel host, on the 16 fitting shapes above, the 8x32 tile (the
// default before) took 2.14-2.75x the tall default's time in geometric mean per layout
// and thread count (1.54-5.21x), the better of oneDNN (matmul, dnnl_sgemm) and
// OpenBLAS 1.21-1.57x per call (0.92-3.37x) and 1.22-1.65x against the tall kernel
// from packed weights (0.90-3.61x). On 16 shapes drawn after (n of 1 to 16, m of 5 to
// 8192): the old default 1.94-2.17x per call and 2.07-2.28x from packed weights, the
// better library 1.15-1.30x and 1.17-1.36x (0.73-2.99x; below 0.9x only at a depth of
// 16, which the shallow clause of GemvTallDefaultForm, fitted after, gives the
// broadcasts) (bench/RESULTS.md, as above).
bool GemvTallPreferredDefault(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);
// Runs one call for validated args: the nt row kernel (dot form) or the tall one.
Status GemvTallF32(const KernelVariant& v, const GemmArgs& args, const ParamValues& p, void (*rows)(const GemvTask&),
                   void (*tall)(const GemvTask&));

// The packed variants. config.gemm.nr is the vector width in floats (16 AVX-512, 8
// AVX2); a panel is nr * nv columns.
// supports(): constant-weights keys (PlanGemm with weights: the tuner and the plan
// pack B outside the calls) with m <= kGemvPackedMaxM whose tile fits with
// kGemvPackedMinNv, and n of at least one vector, either layout.
Status GemvPackedSupports(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);
// check(): threads <= device.threads; the m x nv tile fits the registers (AVX2: nv = 4
// only for m <= 2).
Status GemvPackedCheck(const KernelVariant& v, const OpKey& key, const ParamValues& p, const DeviceInfo& device);
// fit_defaults(): threads as the other small-m variants (each thread streams at
// least kGemvBytesPerThread of B); nv the widest whose tile fits and that n fills (at most 2
// above kGemvPackedWideMaxM); prefetch
// GemvPackedDefaultPrefetch of the device's vendor and the key's m.
void GemvPackedFitDefaults(const KernelVariant& v, const OpKey& key, const DeviceInfo& device, ParamValues& p);
// preferred_default(): on AMD Zen 4 (family 25 with AVX-512, which it runs on 256-bit
// units), the AVX2 packed kernel takes constant-weights keys with m = 1, ahead of the
// AVX-512 one: the AVX-512 kernel took 1.07-1.08x its time in geometric mean over the
// six decode layers of 768 to 11008 columns, both layouts, 1 and 2 threads, in two
// paired runs (46 of 48 rows above 1.0), and 1.04-1.07x with panels as narrow (nv = 2).
// At m = 2 the two were level, and at m = 4 the AVX2 tile (nv = 2) took 1.1-1.9x the
// AVX-512 one's time (bench/RESULTS.md, "AMD EPYC (Zen 4): the serving table rerun").
// With the AVX2 accumulators in registers ("... a small-m kernel's accumulators on
// the stack"), the AVX-512 kernel took 1.01-1.14x its time at m = 1 from memory, and
// 0.85-0.90x with the weights in L3 (a loop over one buffer, not the serving case).
bool GemvPackedPreferredDefault(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);
// The packed weights: n rounded up to a vector by k floats, whatever nv (the last
// panel is only as wide as its columns; GemvPanelPack).
size_t GemvPackedWeightsBytes(const KernelVariant& v, const OpKey& key, const ParamValues& p);
Status GemvPackWeights(const KernelVariant& v, const OpKey& key, const ParamValues& p, const void* weights, int64_t ld,
                       void* dst);
// Runs one call: from args.packed_b, or (a call without packed weights) from op(B)
// packed into the calling thread's scratch first.
Status GemvPackedF32(const KernelVariant& v, const GemmArgs& args, const ParamValues& p,
                     void (*panels)(const GemvTask&));

}  // namespace cliffguard::cpu
