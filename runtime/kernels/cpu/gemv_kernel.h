// The contract between the small-m GEMM driver (gemv_driver.cc, ISA-free) and the
// per-ISA row kernels (one translation unit per row of gemv_f32.inc).
#pragma once

#include <cstdint>

#include "kernels/cpu/thread_scratch.h"  // RoundUp

namespace cliffguard::cpu {

// C[0:m, j0:j1] = alpha * A * op(B)[:, j0:j1] + beta * C[0:m, j0:j1].
//   A is m x k row-major (lda >= k); B is k x n (ldb >= n) or, for the nt kernels,
//   n x k (ldb >= k); beta == 0: C is not read. 1 <= m <= kGemvMaxM (16).
//   block: nn kernels: columns of C per block, kept in L1/L2 while all of k streams
//   through; nt kernels: rows of B (columns of C) per register tile (1, 2, 4, 8);
//   packed kernels: vectors per panel (1, 2, 4).
//   Packed kernels (m <= kGemvPackedMaxM): b holds op(B) as GemvPanelPack lays it
//   (ldb unused) and j0 is a multiple of the panel width.
//   C's element (i, j) is at c + i * ldc + j * ldc_col (ldc_col 1 but in tall tasks).
// Tall tasks (CG_GEMV_TALL rows; n <= 16 columns of C, any m) run in the transposed
// frame, C^T = op(B)^T A^T: the task's m is the key's n, its j range rows of the key's
// C, b the key's A (rows of k, ldb its lda), and C is written transposed (ldc 1,
// ldc_col the key's ldc). Dot form (the nt kernels): a holds op(B)^T as n rows of k.
// Broadcast form (name_tall kernels): a holds op(B) as k rows of n (element (i, p) of
// op(B)^T at a + p * lda + i), block is the rows of C per register tile.
struct GemvTask {
  int m;
  int64_t k;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  float alpha, beta;
  int64_t j0, j1;
  int block;
  int prefetch = 0;  // software prefetch (0 = off): packed panels, its distance in k rows; tall tasks, 1 = on
  bool rows_whole = false;  // `order` 1: each row of B (nt) or of a C tile's columns (nn) read whole
  int step_rows = 0;  // nn steps at m = 1 (`unroll_k`): kGemvNNDeepStepRows, else as the registers allow
  bool prefetch_next_tile = false;  // nt `prefetch` 1: a tile's second pass requests the next tile's rows of B
  // nt `kc`: depth per block of the row groups' passes, a multiple of the vector width;
  // 0 (or >= k) = all of k at once. Below k, A holds op(A) as NTPackDepthBlocks lays it
  // and lda == kc.
  int64_t kc = 0;
  int64_t ldc_col = 1;  // tall tasks only
};

// Rows of B per nn step at m = 1 with `unroll_k` 16 (AVX-512): each row's vector goes
// straight into its FMA, so the step holds 16 broadcasts of A and one vector of C.
inline constexpr int kGemvNNDeepStepRows = 16;

// op(A) (m x k rows, leading dimension lda) in depth blocks of kc for an nt task with
// kc < k: block b (depth [b * kc, min(k, (b + 1) * kc))) at dst + b * m * kc, its row
// i at + i * kc, so that the rows a block's passes read lie together in L1 rather than
// lda apart (rows 16 KiB apart share L1's sets). dst holds NTDepthBlockFloats floats.
inline int64_t NTDepthBlockFloats(int64_t m, int64_t k, int64_t kc) { return (k + kc - 1) / kc * m * kc; }
void NTPackDepthBlocks(const float* a, int64_t lda, int64_t m, int64_t k, int64_t kc, float* dst);

// The most rows of A (m) a task has (GemvMaxM in gemv_params.h: by layout of B).
inline constexpr int64_t kGemvMaxM = 16;

using GemvRowsFn = void (*)(const GemvTask& task);

// The vectors of C an nn rows-whole tile holds (`order` 1): m x that many
// accumulators, m broadcasts of A and a vector of B within `vector_regs` registers
// (two to spare: AVX2's partial loads take a mask register), at most 16.
constexpr int GemvNNWholeVectors(int vector_regs, int64_t m) {
  const int64_t v = (vector_regs - 3 - m) / m;
  return v < 1 ? 1 : v > 16 ? 16 : static_cast<int>(v);
}

#define CG_GEMV(isa, name, trans_b) void name##_rows(const GemvTask& task);
#define CG_GEMV_PACKED(isa, name, width) void name##_panels(const GemvTask& task);
#define CG_GEMV_TALL(isa, name, nt_name) void name##_tall(const GemvTask& task);
#include "kernels/cpu/gemv_f32.inc"

// op(B) (k x n; as stored: n x k rows when trans_b, else k x n, leading dimension
// ld) into ceil(n / panel) panels of `panel` columns (a multiple of `width`, the
// vector width): panel q holds columns [q * panel, (q + 1) * panel) as k rows of
// `panel` floats at dst + q * k * panel; the last panel, when n is not a multiple of
// `panel`, is only as wide as its columns rounded up to `width`, columns past n zero.
// Padding that last panel to `panel` streamed up to 1.6x the weights' bytes (n = 80
// in panels of 64).
// dst holds GemvPanelFloats(n, k, width) floats.
inline int64_t GemvPanelFloats(int64_t n, int64_t k, int64_t width) { return RoundUp(n, width) * k; }
void GemvPanelPack(const float* b, int64_t ld, bool trans_b, int64_t n, int64_t k, int64_t panel, int64_t width,
                   float* dst);

}  // namespace cliffguard::cpu
