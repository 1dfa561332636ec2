// The packed, cache-blocked fp32 GEMM driver shared by every CPU variant
// (GotoBLAS/BLIS loop structure; ISA-free: it reaches the ISA only through the
// variant's micro-kernel pointer).
//
//   for jc in N step nc            (par=0 splits N across threads)
//     for pc in K step kc          pack B[pc:+kc, jc:+nc] into nr-wide panels
//       for ic in M step mc        (par=1 splits M across threads)
//         pack A[ic:+mc, pc:+kc] into mr-tall panels
//         for jr in nc step nr     (par=2 splits these micro-panels)
//           for ir in mc step mr   micro-kernel on one mr x nr tile of C
//
// With pack_b = kPackBPanels and all of A one row block (see GemmPackB), B is packed
// in the jr loop instead, one panel just before its micro-kernel calls.
//
// Thread-safety: reentrant. Scratch memory is owned by the calling thread
// (thread_local, 64-byte aligned, grown on demand and then reused), so after
// warm-up a call allocates nothing.
#pragma once

#include <cstdint>

#include "cliffguard/kernel.h"
#include "kernels/cpu/gemm_params.h"
#include "kernels/cpu/gemm_ukernel.h"

namespace cliffguard::cpu {

struct GemmBlocking {
  int64_t mc, kc, nc;  // rows of A, depth, columns of B per block
  int par;             // GemmPar
  int threads;         // threads requested (the pool may grant fewer)
  int unroll_k;        // micro-kernel k-loop unroll: 1, 2, 4, 8
  int prefetch;        // prefetch distance in k iterations, 0 = off
  bool pack_a;         // false: A read in place by the micro-kernel
  bool pack_b;         // false: B read in place (only when not transposed)
  int order = 0;       // GemmOrder: the loop over a block's micro-tiles
  // With B packed ahead (GemmArgs::packed_b): each next B panel is prefetched into L2
  // while the one before it runs, for weights that come from memory cold, as a
  // layer's do between calls (bench/RESULTS.md: own schedules 1.06-1.35x faster against oneDNN on 1 and 2 threads). Off
  // for B packed within the call, already in cache (measured 1-4% slower with it).
  bool prefetch_next = false;
  // The source of the A block packed next is prefetched into L2, spread over the
  // micro-kernel calls of the block before it (UkArgs::next_a), where A is packed,
  // `prefetch` is 0 and n is at most kNextASourceMaxN: there A is most of a call's
  // traffic, and a cold A's pack stalled every block.
  bool prefetch_next_a = false;
  bool pack_b_panelwise = false;  // pack_b = kPackBPanels; GemmF32 keeps it where it applies
};

// The widest n whose GEMMs prefetch the next A block's source. Measured on the Intel
// host (bench/RESULTS.md, "the next A block's source prefetched"), same binary with
// and without, 8x32, 14x32 and 6x64 tiles: m of 3136 to 12544 with n of 32 to 128
// took 0.74-0.95x the time in median on 1 and 2 threads (rows 0.67-1.08); at n of
// 256 and beyond, medians of 0.96-1.04 (128 x 4096 x 1024: 1.04, the A lines then
// taking slots in the weights' stream).
inline constexpr int64_t kNextASourceMaxN = 128;

// prefetch_next is on: the GEMM family's calls with packed_b are constant weights;
// so is prefetch_next_a, which GemmF32 keeps where its conditions hold.
GemmBlocking BlockingFromParams(const ParamValues& p);

// Where pack_b_panelwise packs B panel by panel (elsewhere it packs blocks): B packed
// within the call (not packed ahead), all of op(A) one row block (m <= mc) of an N
// split, panels of B first, no software prefetch.
bool PanelwiseBApplies(const GemmBlocking& blk, int64_t m, bool packed_ahead);

// Runs C = alpha * op(A) * op(B) + beta * C for validated args. mc % mr == 0 and
// nc % nr == 0; pack_b == false requires !args.trans_b; pack_rows packs B as stored. With args.packed_b (laid out
// by PackWeightsF32 for the same kc and nr) B is read from there and pack_b is moot.
// Returns kInternal only when scratch memory cannot be allocated.
Status GemmF32(const GemmArgs& args, const GemmBlocking& blk, UkernelFn ukernel, PackRowsFn pack_rows, int mr,
               int nr);

// Constant weights packed ahead of calls: all of op(B) in the panels the driver
// packs per call, so that no call packs B. For depth blocks of kc (the schedule's,
// clipped to k) and nr-wide panels Q (zero padded to nr), block (pc, Q) starts at
// pc * RoundUp(n, nr) + Q * nr * kcb; element (p, j) of a panel at [p * nr + j].
// Independent of mc, nc, par and threads.
int64_t PackedWeightsFloats(int64_t n, int64_t k, int nr);

// A walk over the cache lines of `rows` rows of `row_bytes` bytes, `stride` bytes
// apart from `first` on, every line of each row in order (a row that may not start
// on a line spans one line more); `lines` is the walk's length.
UkLines RectangleWalk(const void* first, int64_t rows, int64_t row_bytes, int64_t stride, int64_t& lines);

// C = beta * C (beta == 0: C is not read): a call with alpha == 0, which reads
// neither A nor B (BLAS semantics). Every CPU GEMM variant uses it.
void ScaleC(const GemmArgs& args);
void PackWeightsF32(const float* b, int64_t ldb, bool trans_b, int64_t n, int64_t k, int64_t kc, int nr, float* dst);

}  // namespace cliffguard::cpu
