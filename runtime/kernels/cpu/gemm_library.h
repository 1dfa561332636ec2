// GEMM kernel variants that call a BLAS library (internal): oneDNN's matmul
// (cpu_f32_gemm_onednn, gemm_onednn.cc) and OpenBLAS's cblas_sgemm
// (cpu_f32_gemm_openblas, gemm_openblas.cc). Each is built only when its library is
// found at configure time (CLIFFGUARD_WITH_ONEDNN, CLIFFGUARD_WITH_OPENBLAS; see
// cmake/CliffguardLibraries.cmake). They sit in CpuKernelVariants() after the
// project's own AVX-512/AVX2 variants and before the portable reference: the
// built-in default picks one only where its preferred_default() rule holds (measured
// per shape class); the tuner searches them like any variant.
//
// Both declare isa = kIsaAvx2: the libraries dispatch on the host themselves, and a
// host below AVX2 keeps the portable reference as its only variant.
//
// BLAS semantics as GemmArgs states them: beta == 0 never reads C (C may hold NaN);
// alpha == 0 never reads A or B (C = beta * C, done here without the library).
//
// Threads. cpu_f32_gemm_onednn: oneDNN runs on OpenMP (libgomp), under the rules
// every oneDNN variant shares (onednn_common.h, which gives the reasons). Each call
// sets the calling thread's OpenMP thread count (omp_set_num_threads, a per-thread
// setting) to the schedule's `threads` and restores it after; with threads = 1
// oneDNN runs on the calling thread and starts no OpenMP team. check() accepts
// threads > 1 only when the process environment has OMP_WAIT_POLICY=passive (or
// GOMP_SPINCOUNT=0), and says so otherwise; fit_defaults and candidates keep to
// threads = 1 then. In a child of fork(), a call with threads > 1 on a thread that
// ran any oneDNN variant (this one or cpu_f32_conv2d_onednn) on an OpenMP team
// before the fork returns kFailedPrecondition instead of hanging (threads = 1 still
// runs).
//
// cpu_f32_gemm_openblas: OpenBLAS's thread count is process-global
// (openblas_set_num_threads). The variant owns it: it is 1 whenever no call with
// threads > 1 runs. Calls with threads = 1 run concurrently (shared lock); a call
// with threads > 1 runs alone (exclusive lock) with the count set to `threads` and
// back to 1 after, so every call uses exactly its schedule's threads. Code elsewhere
// in the process must not change OpenBLAS's thread count while the variant runs.
// OpenBLAS's idle workers spin for 2^OPENBLAS_THREAD_TIMEOUT cycles (2^28 unless set)
// after it loads and after each threaded call and slow the threaded calls after it;
// the process should set OPENBLAS_THREAD_TIMEOUT=4 (the cliffguard command does), and
// the first call with threads > 1 logs a warning when it is unset or above 10.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cliffguard/kernel.h"
#include "kernels/cpu/gemm_driver.h"  // ScaleC
#include "kernels/cpu/gemm_params.h"  // kGemmThreadValues, ThreadsForWork
#include "kernels/cpu/gemv_params.h"  // kGemvPackedMaxM

namespace cliffguard::cpu {

// Library variants in this build (the macros are the runtime's own compile
// definitions: include this header from the runtime's sources only).
inline constexpr size_t kNumLibraryVariants = 0
#ifdef CLIFFGUARD_WITH_ONEDNN
                                              + 1
#endif
#ifdef CLIFFGUARD_WITH_OPENBLAS
                                              + 1
#endif
    ;

inline constexpr int32_t kLibraryBoolValues[] = {0, 1};

// Per-call `nn` keys of the small class on an AVX-512 host: the libraries' share of
// them (OnednnSmallSgemmFits, OpenblasTinyFits).
inline bool PerCallSmallNnOnAvx512(const OpKey& key, const DeviceInfo& device) {
  return !key.constant_weights && !key.trans_a && !key.trans_b && (device.isa & kIsaAvx512) != 0 &&
         ShapeClassOf(key) == ShapeClass::kSmall;
}

#ifdef CLIFFGUARD_WITH_ONEDNN
enum OnednnParam : int { kOnednnThreads = 0, kOnednnReorderB, kOnednnApi };
// The oneDNN entry point a schedule calls.
enum OnednnApi : int32_t { kOnednnMatmul = 0, kOnednnSgemm = 1 };
inline constexpr int32_t kOnednnApiValues[] = {kOnednnMatmul, kOnednnSgemm};
inline constexpr ParamSpec kOnednnSpecs[] = {
    {"threads", kGemmThreadValues, 1, "OpenMP threads oneDNN runs on (caller included); must be <= device threads"},
    {"reorder_b", kLibraryBoolValues, 0,
     "1 = B in oneDNN's preferred blocked layout (packed once for constant weights, else per call); 0 = B as stored"},
    {"api", kOnednnApiValues, kOnednnMatmul,
     "0 = the matmul primitive; 1 = dnnl_sgemm, which packs B itself on every call (needs reorder_b=0)"},
};
// fn.gemm, api = 0: oneDNN matmul. Primitives are cached per calling thread, keyed by
// shape, leading dimensions, beta and parameters (onednn::PrimitiveCache: at most 64
// entries, least recently used evicted): after its first call with a key the call
// allocates nothing in this variant (oneDNN's execute builds its own small argument
// map).
// reorder_b = 1 without packed_b reorders B per call into a thread_local buffer in
// the layout pack_weights writes, then runs like a packed call.
// api = 1: dnnl_sgemm (row-major), B as stored or as pack_weights copied it dense;
// oneDNN packs A and B into its own buffers inside the call (allocated there).
Status OnednnGemm(const KernelVariant& self, const GemmArgs& args, const ParamValues& params);
// check(): threads <= device.threads; threads > 1 only with passive OpenMP waiting;
// api = 1 only with reorder_b = 0.
Status OnednnCheck(const KernelVariant& v, const OpKey& key, const ParamValues& p, const DeviceInfo& device);
// fit_defaults(): threads from the shape's work (as the project's own variants),
// 1 without passive OpenMP waiting; reorder_b = 1 for constant weights (reordered
// once, by the plan), else 0; api = 1 where OnednnSgemmFits.
void OnednnFitDefaults(const KernelVariant& v, const OpKey& key, const DeviceInfo& device, ParamValues& p);
// dnnl_sgemm (api = 1), for per-call keys with A as stored on an AMD host (the first
// two cases on an Intel host too):
// - `nn` of the large class with n of at least kOnednnSgemmMinN, in place of the
//   matmul on B as stored. Measured on Zen 4, paired, per call (bench/RESULTS.md,
//   "per-call nn keys call dnnl_sgemm"): on the 86 rows this rule gives dnnl_sgemm
//   (serving set and drawn shapes, 1 and 2 threads) the matmul took 1.09x its time in
//   geometric mean (0.92-1.30x, above 1.0 on 79); at n of 48 and 64 it was
//   0.92-1.03x, ahead on 6 of 8 rows;
// - `nt` of the large class whose rows of B (k elements) are at most
//   kOnednnSgemmNtMaxRowBytes long. With longer rows the matmul was ahead (dnnl_sgemm
//   took 1.11x its time in geometric mean on one thread, 1.53x on two, k of 768 and
//   more; 1.14-1.40x at k = 512); up to 512 B, on 68 rows (37 shapes drawn with k of 16
//   to 128, 1 and 2 threads), the matmul took 1.07x dnnl_sgemm's time in geometric
//   mean (0.87-1.41x, above 1.0 on 53; bench/RESULTS.md, "per-call nt keys with short
//   rows of B call dnnl_sgemm"). On the Intel host the matmul took 1.30x and 1.26x
//   dnnl_sgemm's time (one and two threads) on 21 `nn` shapes with m above 64, and
//   1.07x and 1.08x on 6 `nt` shapes with k of 64 to 128. With longer rows dnnl_sgemm
//   took 1.36x the matmul's time at m of 17 to 64 (28 shapes, 1 and 2 threads), 1.14x
//   at 65 to 256 (13) and 1.02x at 257 to 511 (4), in geometric mean, but 0.95x from m =
//   kOnednnSgemmNtIntelMinM (9 shapes, 0.76-1.06x), where an Intel host calls it too
//   ("Intel Xeon ...: per-call keys call oneDNN") if n is at least
//   kOnednnSgemmNtIntelMinN. With fewer columns the matmul took 0.73-0.99x
//   dnnl_sgemm's time on 1 and 2 threads (n of 19 to 169, 6 drawn shapes with k of 258
//   to 3265), from n = 373 1.00-1.43x but for two rows of 0.94 and 0.96 (9 shapes;
//   "Intel Xeon ...: per-call `nt` keys with few columns call the matmul");
// - OnednnSkinnySgemmFits: decode steps of kOnednnSgemmMinM to 16 tokens, and
//   OnednnSmallSgemmFits: keys of the small class, each in place of the own packed
//   tile, where it is the built-in default too; OnednnSkinnyNtSgemmFits: `nt` decode
//   steps in place of the own small-m kernel, likewise.
inline constexpr int64_t kOnednnSgemmMinN = 65;
inline constexpr int64_t kOnednnSgemmNtMaxRowBytes = 512;
inline constexpr int64_t kOnednnSgemmNtIntelMinM = 512;
inline constexpr int64_t kOnednnSgemmNtIntelMinN = 256;
bool OnednnSgemmFits(const OpKey& key, const DeviceInfo& device);
// Skinny per-call `nn` keys (m from kOnednnSgemmMinM to 16, n > 64) with m*n*k above
// OnednnSkinnySgemmMinWork of the thread budget (one or two threads): on an AMD host
// those whose rows of B stay more than kOnednnSgemmAliasMarginBytes away from every
// multiple of kL1AliasBytes, on an Intel host those whose rows of B are longer than
// kOnednnSkinnySgemmIntelMinRowBytes; and on an Intel host, keys with n above
// kGemvTallMaxN (below it the tall kernels run them) whose rows of B are at most
// kOnednnSkinnySgemmIntelNarrowMaxRowBytes, whatever m*n*k, on a one-thread budget or
// where the own tile (GemmFittedThreads) and oneDNN both fit one thread.
// Measured on Zen 4, paired, per call (bench/RESULTS.md, "... decode steps call
// dnnl_sgemm"): on one thread, 76 rows of m = 5 to 16: on the 44 such rows the own
// packed tile took 1.11x dnnl_sgemm's time in geometric mean (0.93-1.51x, 1.0 or more
// on 36); on the 32 others 0.67-1.05x (0.88x; likely cause, not checked with
// counters: dnnl_sgemm's loads from rows a multiple of 4 KiB apart fall into a few
// cache sets). On two threads the own tile was ahead up to 2^24 (0.95x dnnl_sgemm's
// time on 20 shapes) and behind above it: 1.05x on the 29 shapes of the fitting
// sweeps (0.87-1.30x), 1.14x on 20 drawn afresh (1.03-1.39x; "... decode steps of 5
// to 16 tokens on two threads"). Below kOnednnSgemmMinM the own small-m kernels were
// ahead; budgets above two threads are not timed.
// On the Intel host, paired, per call, 22 shapes drawn with m of 5 to 16: the own
// tile took 1.22x and 1.17x dnnl_sgemm's time (one and two threads) in geometric mean
// on the 6 with rows of B above 32 KiB (n of 9365 to 13824; 0.91-1.29x), and 0.83x and
// 0.78x on the 16 with shorter rows (0.61-1.08x; bench/RESULTS.md, "Intel Xeon ...:
// decode steps with wide weights call dnnl_sgemm"). With narrow rows (decode
// attention's scores x V: n the head's width, k the context) the own tile, which
// reads B in 32-column panels, fell behind on one thread: on 20 shapes drawn with m of
// 5 to 16 and n of 16 to 4096, paired, operands line-aligned, two runs, dnnl_sgemm took
// 0.73-0.95x its time on all 18 rows with n of 61 to 413, 1.00-1.01x at 534 and
// 0.91-1.30x from 881 (above 1.0 on 18 of 20 rows); on two threads 0.78-2.12x up to
// 534 and 1.11-1.44x above (bench/RESULTS.md, "Intel Xeon ...: small-m nn keys with
// short rows"). Those draws had m*n*k above 2^21; below it (the one-thread bound of
// the rule before) the own tile fell behind as far: on 15 shapes drawn with m*n*k of
// 28K to 1.6M dnnl_sgemm took 0.53-0.86x its time, and held out, on 20 drawn afresh
// (m*n*k up to 2^21, n of 21 to 265), two runs with the rows reversed, the own tile
// took 1.38x the time of the new default in geometric mean (1.09-1.81x; bench/RESULTS.md,
// "Intel Xeon ...: small decode steps with short rows call dnnl_sgemm"). On a two-thread
// budget the own tile fits one thread on 8 of those 20 shapes; oneDNN on one thread
// took 0.62-0.90x its time there, and with the rule the own tile took 1.29x
// and 1.31x the new default's time (1.05-1.63x); where the own tile fits two, oneDNN on
// one took 0.28-1.21x its time (not changed).
inline constexpr int64_t kOnednnSgemmMinM = GemvMaxM(false) + 1;
inline constexpr int64_t kOnednnSgemmAliasMarginBytes = 128;
inline constexpr int64_t kOnednnSkinnySgemmIntelMinRowBytes = 32 << 10;
inline constexpr int64_t kOnednnSkinnySgemmIntelNarrowMaxRowBytes = 2 << 10;
// Rows of B up to kOnednnSkinnySgemmIntelMidMaxRowBytes count as narrow too where B is
// at most kOnednnSkinnySgemmIntelMidMaxBytes (the own tile then reads it in place). On
// the Intel host, 20 shapes drawn with rows of 2 to 3 KiB, one thread: dnnl_sgemm took
// 0.67-0.84x the own tile's time on the 8 with B of at most 1 MiB, 0.96-1.10x on the 12
// with more (bench/RESULTS.md, "Intel Xeon ...: the built-in default on two drawn sets
// after this day's rules"); held out on 14 shapes drawn there with B of at most 1 MiB,
// the own tile took 1.36x and 1.30x the new default's time in geometric mean
// (1.00-1.80x; "... decode steps with rows of 2 to 3 KiB and small weights call
// dnnl_sgemm").
inline constexpr int64_t kOnednnSkinnySgemmIntelMidMaxRowBytes = 3 << 10;
inline constexpr double kOnednnSkinnySgemmIntelMidMaxBytes = 1 << 20;
constexpr double OnednnSkinnySgemmMinWork(int threads) {
  return threads == 1 ? kSmallClassMaxWork : double(int64_t{1} << 24);
}
bool OnednnSkinnySgemmFits(const OpKey& key, const DeviceInfo& device);
// Skinny per-call `nt` keys (m from kOnednnSgemmMinM to kOnednnSkinnyNtMaxM, B
// transposed only) on an AMD AVX-512 host on a one-thread budget, where A's m x k fits
// kOnednnSkinnyNtMaxABytes, B kOnednnSkinnyNtMaxBBytes, and rows of B (k elements) are
// kOnednnSkinnyNtMinRowBytes or longer. There the own small-m kernel sums dot products
// along k, whose horizontal sums are a large share of a short k. Measured on Zen 4,
// paired, per call (bench/RESULTS.md, "per-call nt decode steps of 5 to 12 tokens on
// one thread call dnnl_sgemm"): in the fitting sweep dnnl_sgemm took 0.74-0.98x the
// own kernel's time inside the rule; with A larger (m = 16 at k = 768: 1.07-1.10x, k =
// 2048: 1.85-1.93x) or B above 10 MB (1.18-1.63x) the own kernel was ahead, and on two
// threads everywhere (0.98x or more). Two drawn sets bounded B (level from 4 to 9 MB:
// 0.93-1.06x), the rows of B (k below 128: 1.05-1.20x) and m (13 to 16: 0.92-1.22x,
// ahead on 5 of 6); a third, drawn after, checks the rule.
// On an Intel host of family 6 model kIntelEmeraldRapidsModel on a one-thread budget,
// per-call `nt` keys with m of kOnednnFewRowsNtMinM to kOnednnFewRowsNtMaxM and more
// than kGemvTallMaxN columns, whatever their size. There, paired, per call, 22 shapes
// drawn with m of 2 and 3 (n of 345 to 8699, k of 156 to 10313): dnnl_sgemm took
// 0.93x the own small-m kernel's time in geometric mean (0.85-1.09x, above 1.0 on 3;
// 0.85-0.94x at k of 156 to 925); no schedule of the own kernel closed it (nj = 4,
// order 1, prefetch 0, depth blocks: 1.01-1.17x its time). On two threads the own
// kernel was ahead (dnnl_sgemm 1.44x, 0.94-2.19x), and at m = 4 (1.62-1.71x, 4
// shapes). Held out, 16 shapes drawn with m of 2 and 3, two runs: the own kernel took
// 1.13x and 1.16x dnnl_sgemm's time in geometric mean (0.96-1.36x; bench/RESULTS.md,
// "Intel Xeon (family 6 model 207): per-call nt steps of 2 and 3 tokens call
// dnnl_sgemm on one thread").
inline constexpr int64_t kOnednnFewRowsNtMinM = 2;
inline constexpr int64_t kOnednnFewRowsNtMaxM = 3;
inline constexpr int64_t kOnednnSkinnyNtMaxM = 12;
inline constexpr int64_t kOnednnSkinnyNtMaxABytes = 32 << 10;
inline constexpr int64_t kOnednnSkinnyNtMaxBBytes = 4 << 20;
inline constexpr int64_t kOnednnSkinnyNtMinRowBytes = 512;
bool OnednnSkinnyNtSgemmFits(const OpKey& key, const DeviceInfo& device);
// Per-call `nn` keys of the small class (m and n above 16, m*n*k at most 2^21) on an
// AVX-512 host, where oneDNN's fitted threads (one, at this size) are at least the
// own rule's. Measured on Zen 4, paired, per call, 30 shapes drawn in the class
// (bench/RESULTS.md, "per-call small nn keys call dnnl_sgemm"): the own packed tile
// took 1.27x dnnl_sgemm's time on one thread in geometric mean, 1.05-1.53x, behind
// on all 59 rows of one- and two-thread budgets that the thread condition keeps (and
// 1.22x OpenBLAS's, 0.86-1.84x). With B transposed the own tile was level (1.00x).
// On the Intel host (12 shapes drawn, 23 such rows): 1.14x in geometric mean on both
// budgets, 0.93-1.26x (bench/RESULTS.md, "Intel Xeon ...: per-call keys call oneDNN").
// Below kOpenblasTinyMaxFlops OpenBLAS takes them instead where its core runs AVX-512
// kernels (OpenblasTinyFits; on an Intel host those with k of at most
// kOpenblasTinyIntelMaxK).
bool OnednnSmallSgemmFits(const OpKey& key, const DeviceInfo& device);
// Per-call `nt` keys of the small class on an Intel AVX-512 host with n of at most
// kOnednnSmallNtMatmulMaxN and k of kOnednnSmallNtMatmulMinK or more or m of
// kOnednnSmallNtMatmulMinM or more (every key of 1 MFLOP or more with such n), where
// oneDNN's fitted threads (one, at this size) are at least the own rule's: oneDNN's
// matmul on B as stored, in place of the own packed tile, which packs B per call.
// Measured on the Intel host, paired, per call, both budgets (bench/RESULTS.md, "Intel
// Xeon ...: small `nt` keys with few columns call the matmul"), with 1 MFLOP of work or
// more (the rule then): on 8 such shapes of a
// drawn set (16 rows) the matmul took 0.77-1.04x the own tile's time, and on 16 shapes drawn
// there before the rule 0.864x in geometric mean on each budget (0.64-1.08x); with n
// of 153 to 735 it was level or behind (0.96-1.38x), below 1 MFLOP mixed (0.79-1.08x;
// OpenBLAS ahead on the smallest). Held out, 16 shapes drawn in the rule: the own tile
// took 1.17x the matmul's time in geometric mean on each budget (0.81-1.53x; the
// matmul behind only at 1775 x 23 x 43). Below 1 MFLOP, on the Intel host of family 6
// model 207, paired, per call (bench/RESULTS.md, "Intel Xeon (family 6 model 207): small
// keys below 1 MFLOP call oneDNN"): on 39 shapes drawn with n of 17 to 128 and
// m above 16, the matmul took 0.776x the own tile's time in geometric mean on one thread
// with k of 48 or more or m of 64 or more (29 rows, 0.64-1.03x) and 0.804x on two (15
// rows), level elsewhere (1.00x and 1.02x, 0.83-1.13x, at k of 19 to 43 and m of 19 to
// 55). Held out, 16 shapes drawn in the rule, two runs: the own tile took 1.17x and 1.18x
// the matmul's time on one thread, 1.18x on two (0.92-1.52x; behind at 300 x 30 x 18).
inline constexpr int64_t kOnednnSmallNtMatmulMaxN = 128;
inline constexpr int64_t kOnednnSmallNtMatmulMinK = 48;
inline constexpr int64_t kOnednnSmallNtMatmulMinM = 64;
bool OnednnSmallNtMatmulFits(const OpKey& key, const DeviceInfo& device);
// Per-call keys of the large class on an AVX-512 host where oneDNN may use the thread
// budget (one thread, or passive OpenMP waiting). Their default by threads:
// - oneDNN where its fitted threads are at least the own rule's (OnednnThreadsSuffice;
//   ThreadsForWork, what OpenBLAS, the default there before, runs): on Zen 4, paired,
//   the serving set's 84 large rows (BERT, 7B-class, ResNet-50 as GEMM, both layouts,
//   1 and 2 threads) took 1.06-2.43x as long on OpenBLAS, and mid-size keys (2.6 to 33
//   MFLOP) 1.01-1.36x on one thread (bench/RESULTS.md, "... per-call large keys").
//   On the Intel host, paired, per call, 1 and 2 threads, OpenBLAS took 1.17x and
//   1.22x dnnl_sgemm's time in geometric mean on 21 `nn` shapes with m above 64
//   (0.99-1.61x), and 1.28x and 1.35x the time of the matmul on B as stored on 38 `nt`
//   shapes with rows of B above 512 B (0.88-1.87x; bench/RESULTS.md, "Intel Xeon ...:
//   per-call keys call oneDNN");
// - below that, the own packed tile (GemmPreferredDefault): below about 20 MFLOP on
//   two threads, where oneDNN fits one thread (kOnednnFlopsPerThread) and the own rule
//   two. On Zen 4, paired, 30 shapes drawn there (4.6 to 18 MFLOP), both layouts: the
//   fitted 8x32 took 0.82x OpenBLAS's two threads' time in geometric mean (0.59-1.12x,
//   faster on 51 of 60 rows), and 0.83x (nn) and 0.75x (nt) that of the better of
//   oneDNN's matmul and dnnl_sgemm on two threads (bench/RESULTS.md, "per-call
//   mid-size keys on two threads run the own tile"). On the Intel host, 18 shapes
//   drawn there: 0.69x OpenBLAS's time (0.51-0.98x, faster on all 36 rows) and 0.73x
//   that of oneDNN's fitted one thread; on 16 drawn after, OpenBLAS took 1.43x its
//   time (1.08-1.93x; "Intel Xeon ...: mid-size keys on two threads run the own tile");
// - the own packed tile for `nn` keys (neither operand transposed, n > 64) on an AMD
//   host with m up to kOwnTileAliasedRowsMaxM whose rows of B are a multiple of
//   kL1AliasBytes. As at m of 5 to 16 (OnednnSkinnySgemmFits), dnnl_sgemm loses there.
//   On Zen 4, paired, per call, k = 2048, n = 1024, 3072 and 4096 (rows of 4, 12 and
//   16 KiB), 1 and 2 threads: the fitted 8x32 took 0.74-0.82x dnnl_sgemm's time at m =
//   17, 0.81-0.96x at 20, 0.88-1.02x at 24 and 28, 0.94-1.04x at 32 and 0.96-1.07x at
//   40; with rows of 11.7 KiB (n = 3000) 1.05-1.27x. On 14 shapes drawn with m of 17 to
//   31, 0.76-1.01x on the 22 rows of such rows; rows 36 to 124 B off a multiple were
//   level (0.97-1.01x) and 100 B short of one behind (1.09-1.12x), so the margin of
//   the decode rule is not used here. With B in cache the two were level in geometric
//   mean (0.82-1.33x per shape; bench/RESULTS.md, "per-call nn keys with m of 17 to 31
//   and rows of B a multiple of 4 KiB run the own tile");
// - the own packed tile for `nn` keys (n > 64) on an Intel host with m up to
//   kOwnTileIntelMaxM, and up to kOwnTileIntelAliasedRowsMaxM where rows of B are a
//   multiple of kL1AliasBytes. On the Intel host, paired, per call, 1 and 2 threads,
//   the fitted 8x32 took 0.67x dnnl_sgemm's time in geometric mean on 34 rows with m
//   of 17 to 31 and such rows (0.53-0.76x), 0.81x on 20 with other rows (0.63-0.92x),
//   and 0.71-0.80x on 8 with m of 32 to 64 and such rows (0.65-1.01x); with other rows
//   dnnl_sgemm was level at m of 32 to 40 and ahead above (the tile took 1.17x its time
//   at 41 to 64; bench/RESULTS.md, "Intel Xeon ...: per-call keys call oneDNN").
//   Except on an Intel host of family 6 model kIntelEmeraldRapidsModel with one
//   thread, where `nn` keys with m of at most kOwnTileIntelMaxM and rows of B not a
//   multiple of kL1AliasBytes call dnnl_sgemm. On that host (Emerald Rapids class,
//   KVM, 2 cores), paired, per call, 30 shapes drawn with m of 17 to 31 (n of 69 to
//   3358, k of 94 to 11040): dnnl_sgemm took 0.78x the fitted 8x32's time in
//   geometric mean (0.61-1.05x, above 1.0 on one row), 0.52-0.74x with B in cache (6
//   shapes). With rows a multiple of 4 KiB the tile stayed ahead there (dnnl_sgemm
//   0.98-1.24x, 8 shapes, m of 17 to 56, one and two threads), and on two threads the
//   two were level (0.97x, 0.74-1.40x, 16 shapes), so those keep the tile, as model 167
//   keeps every key above. Held out, 16 shapes drawn in the rule, two runs: the tile
//   took 1.22x and 1.23x dnnl_sgemm's time in geometric mean (0.87-1.49x; behind only
//   at k of 93 and 134; "Intel Xeon (family 6 model 207): per-call nn keys with m of 17
//   to 31 call dnnl_sgemm on one thread");
// - the own packed tile on an Intel host for keys where its fitted blocking writes C
//   rows first (GemmDefaultTileRowsFirst: shallow depth, C beyond L2), `nt` keys and
//   `nn` keys with n above kOwnTileShallowNnMinN. There oneDNN, like the old order,
//   loses time writing C. On the Intel host, paired, per call, 1 and 2 threads, 22
//   shapes drawn (12 attention-score shapes of 512 to 4096 square by 32 to 128 deep,
//   10 with k of 16 to 256): on the 15 the order rule takes, the default (oneDNN) took
//   1.19-1.48x the tile's time in geometric mean per layout and thread count
//   (0.92-2.85x), the better library 1.15-1.33x; below 0.97x only `nn` at n of 429
//   to 512 (0.92-0.96x) and one row at 4096 x 2298 x 32 (0.93x). On 14 such shapes
//   drawn after, oneDNN took 1.43-1.52x the tile's time (1.04-2.79x), the better
//   library 1.23-1.36x (one row of 54 below 1.0x, at 0.95x; bench/RESULTS.md, "Intel
//   Xeon ...: per-call keys with shallow depth run the own tile").
// - the own packed tile on an Intel host with more than one thread for keys with A as
//   stored, k of at most kOwnTileShallowMaxK and m*n*k of at most
//   kOwnTileShallowThreadsMaxWork, where oneDNN fits two threads too. On the Intel
//   host, paired, per call, two threads, three drawn sets (k of 16 to 1024): at k up to
//   256 and m*n*k up to 2^27 the fitted 8x32 took 0.77x the time of the oneDNN default
//   in geometric mean, 0.46-0.98x on all 50 such rows (26 shapes); at k of 130 to 191
//   with m*n*k of 2^28 to 2^31 0.90-1.23x, and from k = 284 mixed (0.75-1.37x). Held
//   out, on 34 rows (19 shapes drawn in the rule) the old default took 1.29x and 1.30x
//   the new one's time in geometric mean, 1.03-1.82x (bench/RESULTS.md, "Intel Xeon
//   ...: shallow keys on two threads run the own tile"). Budgets above two threads are
//   not timed. On one thread, the keys with A as stored, k of at most
//   kOwnTileShallowOneThreadMaxK and n of kOwnTileShallowOneThreadMinN to
//   kOwnTileShallowOneThreadMaxN: on 24 shapes drawn there (seed 20261741), where oneDNN
//   was the default, the fitted 8x32 took 0.78x its time in geometric mean on 17 `nt`
//   rows (0.50-0.97x) and 0.87x on 19 `nn` rows (0.62-1.12x; above 1.0 on 3, at m of
//   119 to 132); with fewer columns it was mostly behind (1.07-1.19x on 4 `nt` rows
//   with n of 40 to 108 from other draws, 0.91x at n = 121), and with more columns in
//   `nt` held out level (1.05x in geometric mean, 0.76-1.40x on 14 rows; not taken).
//   Held out, 33 shapes drawn in the rule (59 rows), two runs: the old default took
//   1.10x and 1.13x the new one's time in geometric mean on `nn` (0.90-1.44x), 1.22x
//   and 1.24x on `nt` (0.88-1.95x; bench/RESULTS.md, "Intel Xeon ...: shallow keys with
//   128 to 1024 columns on one thread run the own tile"). On family 6 model
//   kIntelEmeraldRapidsModel, n of kOwnTileShallowOneThreadMinN or more: on three
//   draws with n above 1024 (k of 16 to 64), on the rows where oneDNN was the default,
//   the tile took 0.87x its time in geometric mean on `nn` (0.65-1.14x, 20 rows) and
//   0.91x on `nt` (0.54-1.26x, 27 rows). Held out, 14 shapes drawn there, two runs:
//   dnnl_sgemm took 1.33x and 1.37x the tile's time on `nn` (0.98-2.51x), 1.26x and
//   1.29x on `nt` (0.98-2.88x; bench/RESULTS.md, "Intel Xeon (family 6 model 207):
//   shallow keys with more than 1024 columns on one thread run the own tile").
// Without passive waiting OpenBLAS keeps them (not measured against the own tile).
inline constexpr int64_t kOwnTileShallowNnMinN = 512;
inline constexpr int64_t kOwnTileShallowMaxK = 256;
inline constexpr double kOwnTileShallowThreadsMaxWork = double(int64_t{1} << 27);
inline constexpr int64_t kOwnTileShallowOneThreadMaxK = 64;
inline constexpr int64_t kOwnTileShallowOneThreadMinN = 128;
inline constexpr int64_t kOwnTileShallowOneThreadMaxN = 1024;
inline constexpr int64_t kOwnTileAliasedRowsMaxM = 31;
inline constexpr int64_t kOwnTileIntelMaxM = 31;
inline constexpr int64_t kOwnTileIntelAliasedRowsMaxM = 64;
inline constexpr int kIntelEmeraldRapidsModel = 207;
// Where oneDNN takes per-call defaults at all: an AVX-512 host where it may use the
// thread budget (one thread, or passive OpenMP waiting; OnednnPreferredDefault).
bool OnednnMayTakeDefaults(const DeviceInfo& device);
bool PerCallLargeOnAvx512(const OpKey& key, const DeviceInfo& device);
bool OnednnThreadsSuffice(const OpKey& key, const DeviceInfo& device);
// Where PerCallLargeOnAvx512, the keys of the own packed tile (the cases above).
bool PerCallOwnTile(const OpKey& key, const DeviceInfo& device);
// preferred_default(), on an AVX-512 host where oneDNN may use the thread budget (one
// thread, or passive OpenMP waiting):
// - per-call keys where OnednnSkinnySgemmFits, OnednnSkinnyNtSgemmFits,
//   OnednnSmallSgemmFits or OnednnSmallNtMatmulFits;
// - per-call keys where PerCallLargeOnAvx512 and OnednnThreadsSuffice, and not
//   PerCallOwnTile;
// - constant-weights keys with m at least
// OnednnDefaultMinM, n > 16 and m*n*k > 2^21: the large class, and decode steps of 9
// to 16 tokens on one thread or with weights of at least 2^21 elements (8 MiB), of 16
// on more threads with smaller weights. Measured ahead of OpenBLAS and the own
// packed GEMM there (bench/RESULTS.md, "Built-in default per shape class"): on one
// thread 1.57x the own small-m kernels at m = 16; on two, 1.34x at m = 16, but behind
// on 768 x 768 (0.69-0.92x). Up to m = kGemvPackedMaxM the own small-m kernels on
// packed panels (cpu_f32_gemv_packed__*) stream the weights once with C in registers
// and measured 1.05-2.3x oneDNN at m = 1 to 8 on a Zen 4 host (bench/RESULTS.md,
// "packed panels for constant weights"). From m = 9 to 16 the own AVX-512 tiles take
// the key first where GemmPreferredDefault (gemm_params.h) holds, which leaves oneDNN
// m of 9 to 11 with large weights on one thread on an Intel host (none on AMD); above
// m = 16 they take the keys of GemmTileDefault (wide ones on an Intel host, small ones
// on more than one thread, and m up to 47 on an AMD host).
constexpr int64_t OnednnDefaultMinM(int threads, int64_t n, int64_t k) {
  return threads == 1 || double(n) * double(k) >= double(kLargeWeightsElements) ? kGemvPackedMaxM + 1 : 16;
}
bool OnednnPreferredDefault(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);
// candidates: every (threads, reorder_b, api) check() accepts, the fitted threads
// first, so the tuner measures each library schedule beside its own search.
std::vector<ParamValues> OnednnCandidates(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);
// Packed weights: reorder_b = 0 (either api): op(B) dense as the key stores it (k x n,
// or n x k with trans_b; leading dimension = row length). reorder_b = 1: the layout
// oneDNN prefers (weights format_tag::any) for this key and threads, queried from a
// primitive descriptor with dense A and C and beta = 0; calls with other leading
// dimensions or beta run on a primitive created for that same layout.
size_t OnednnPackedWeightsBytes(const KernelVariant& self, const OpKey& key, const ParamValues& params);
Status OnednnPackWeights(const KernelVariant& self, const OpKey& key, const ParamValues& params, const void* weights,
                         int64_t ld, void* dst);
#endif

#ifdef CLIFFGUARD_WITH_OPENBLAS
enum OpenblasParam : int { kOpenblasThreads = 0 };
inline constexpr ParamSpec kOpenblasSpecs[] = {
    {"threads", kGemmThreadValues, 1, "OpenBLAS threads (caller included); must be <= device threads"},
};
// fn.gemm: cblas_sgemm (CblasRowMajor). Leading dimensions above INT32_MAX are
// refused per call (kInvalidArgument): the library takes 32-bit ints.
Status OpenblasGemm(const KernelVariant& self, const GemmArgs& args, const ParamValues& params);
// supports(): m, n and k fit cblas_sgemm's 32-bit int, and OpenBLAS runs kernels of
// the host's vector ISA. An OpenBLAS older than the CPU does not recognise it and
// falls back to a generic core: Debian 12's 0.3.21 runs its SSE3 "Prescott"
// kernels on an AVX-512 Xeon of family 6 model 207, at 0.2x its "SkylakeX" kernels
// (bench/RESULTS.md). Such a build is declined (naming the core and the fix,
// OPENBLAS_CORETYPE; SetLibraryEnvironment in device.h sets it), so that it is
// neither the built-in default nor a candidate.
Status OpenblasSupports(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);
// The core OpenBLAS loaded (openblas_get_corename()) and the IsaBits its kernels
// need: kIsaAvx512 for SkylakeX, Cooperlake and SapphireRapids, kIsaAvx2 for
// Haswell, Zen and Excavator, kIsaScalar for every other (SSE or AVX only).
const char* OpenblasCore();
uint32_t OpenblasCoreIsa(const char* core);
// The OPENBLAS_CORETYPE whose kernels fit a host with `isa` ("SkylakeX" with
// AVX-512, "Haswell" with AVX2), nullptr below AVX2.
const char* OpenblasCoreTypeFor(uint32_t isa);
// supports()'s core rule: kUnimplemented, naming the core, the host's ISA and the
// OPENBLAS_CORETYPE to set, when `core` needs less than a host with `isa` has.
Status OpenblasCoreFits(const KernelVariant& v, const char* core, uint32_t isa);
Status OpenblasCheck(const KernelVariant& v, const OpKey& key, const ParamValues& p, const DeviceInfo& device);
void OpenblasFitDefaults(const KernelVariant& v, const OpKey& key, const DeviceInfo& device, ParamValues& p);
// preferred_default(): large keys (measured 1.00-1.28x the own packed default on an
// AVX2 host; on an AVX-512 host oneDNN and the own tiles, ahead of it in the table,
// take the ones they prefer: constant weights, and on AMD per-call keys by threads);
// and OpenblasTinyFits.
bool OpenblasPreferredDefault(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);
// The keys of OnednnSmallSgemmFits with less than kOpenblasTinyMaxFlops of work, where
// OpenBLAS's core runs AVX-512 kernels (as Cooperlake did on the Zen 4 host). There its
// one thread took 0.85-0.88x dnnl_sgemm's time in geometric mean in two sweeps of
// drawn shapes (20 shapes, 40 rows of one- and two-thread budgets, 0.72-1.02x;
// bench/RESULTS.md, "per-call small nn keys call dnnl_sgemm"); from 1 to 2 MFLOP the
// two were level, above 2 MFLOP dnnl_sgemm was ahead of OpenBLAS's one thread (which
// took 1.15-1.25x its time; OpenBLAS on two threads took 0.77-0.97x there, left to
// the tuner). On an Intel host only keys with k of at most kOpenblasTinyIntelMaxK: on the
// Intel Xeon of family 6 model 207, paired, per call, on drawn shapes of the class
// below 1 MFLOP, dnnl_sgemm on one thread took 0.906x OpenBLAS's time in geometric
// mean with k of 128 or more (18 rows, 0.79-1.05x; 0.893x on a two-thread budget, 14
// rows) and 1.073x below (30 rows, 0.90-1.23x; bench/RESULTS.md, "Intel Xeon (family 6
// model 207): small keys below 1 MFLOP call oneDNN").
// And on an Intel host, the per-call `nn` keys of OnednnSkinnySgemmFits where oneDNN
// takes defaults (OnednnMayTakeDefaults) with k of at most kOpenblasTinySkinnyMaxK
// and less than kOpenblasTinySkinnyMaxFlops of work (decode-size m of 5 to 16 with
// narrow rows of B). On the family 6 model 207 Xeon, paired, per call, on 24 shapes
// drawn with m of 5 to 16 below 130 kFLOP, OpenBLAS on one thread took 0.773x
// dnnl_sgemm's time in geometric mean on those keys (0.56-0.97x, 12 shapes on 1 and 2
// threads) and 1.097x on the others (0.91-1.34x; bench/RESULTS.md, "Intel Xeon (family
// 6 model 207): small keys below 1 MFLOP call oneDNN").
inline constexpr double kOpenblasTinyMaxFlops = 1e6;
inline constexpr int64_t kOpenblasTinyIntelMaxK = 127;
inline constexpr double kOpenblasTinySkinnyMaxFlops = 65536;
inline constexpr int64_t kOpenblasTinySkinnyMaxK = 63;
// And the `nt` keys of GemmShallowNtDecodeHolds (the own 8x32 tile's decode steps on
// an Intel host) with k of kOpenblasTinyNtMinK or more and less than
// kOpenblasTinyNtMaxFlops of work. On the family 6 model 207 Xeon, paired, per call,
// on 37 shapes drawn with m of 5 to 16: OpenBLAS on one thread took 0.848x the tile's
// time in geometric mean on those keys (26 shapes on 1 and 2 threads, 0.66-1.19x) and
// 1.291x on the others (k below 32, or from 119 kFLOP; 1.03-2.21x; bench/RESULTS.md,
// "Intel Xeon (family 6 model 207): small keys below 1 MFLOP call oneDNN").
inline constexpr int64_t kOpenblasTinyNtMinK = 32;
inline constexpr double kOpenblasTinyNtMaxFlops = 1e5;
bool OpenblasTinyFits(const OpKey& key, const DeviceInfo& device);
// candidates: ThreadCountCandidates, the fitted count first.
std::vector<ParamValues> OpenblasCandidates(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);
#endif


}  // namespace cliffguard::cpu
