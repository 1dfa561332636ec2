// The small-m GEMM row kernels, shared by every GEMV variant's translation unit. A
// TU includes a traits header (gemm_ukernel_avx512.h or _avx2.h) and then
// CG_DEFINE_GEMV_KERNEL(name, traits, trans_b). As in gemm_ukernel_impl.h, all of it
// has internal linkage except name##_rows, so no ISA's instantiation leaks into
// another's caller.
//
// nn (B is k x n): C rows stay in L1/L2 for a block of `block` columns while B
// streams through row by row; each step keeps KU rows of B and M*KU broadcast
// elements of A in registers, so a C element is loaded and stored once per KU rows
// (at m = 1 each row's vector goes straight into its FMA, and `unroll_k` 16 doubles
// KU on AVX-512).
// Or (`order` 1, m <= 4) a tile of C stays in registers for all of k while each row's
// columns of the tile are read whole, row after row (GemvNNWholeVectors wide).
// nt (B is n x k): a register tile of MI rows of A by NJ rows of B accumulates dot
// products along k (contiguous in both), then reduces horizontally; for each tile of
// NJ rows of B every group of MI rows of A passes, so B is read from memory once. The
// tile reads its rows side by side, or each whole in turn (`order`, gemv_params.h).
// With `kc` the passes go depth block by depth block, so that the later ones find the
// block's rows of B in L1, and each requests a share of the next block's rows.
// packed (either layout, constant weights): op(B) packed into panels of NV vectors'
// columns, each k rows of the panel contiguous (GemvPanelPack); the m x NV-vector
// tile of C stays in registers for all of k while its panel streams through once,
// so C is loaded and stored once per call and B is one sequential read per thread.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/gemm_ukernel_impl.h"
#include "kernels/cpu/gemv_kernel.h"

namespace cliffguard::cpu {
namespace {

template <class T>
inline constexpr int kVectorRegs = T::kWidth >= 16 ? 32 : 16;

// Rows of B per nn step: A's M * KU broadcasts, KU rows of B and a C vector in
// registers (one to spare); at M = 1 a row's vector goes straight into its FMA, so one
// register holds it. More rows per step keep more lines of B in flight (on Zen 4, the
// AVX2 variant at m = 1 took 1.20x the time with 4 rows as with 8, bench/RESULTS.md).
template <class T, int M>
constexpr int NNStepRows() {
  for (int ku : {8, 4, 3, 2})
    if (M * ku + (M == 1 ? 1 : ku) + 1 <= kVectorRegs<T> - 1) return ku;
  return 1;
}

template <class T>
CG_INLINE void ScaleRow(float* c, int64_t n, float beta) {
  using V = typename T::V;
  constexpr int W = T::kWidth;
  int64_t j = 0;
  if (beta == 0.0f) {
    for (; j + W <= n; j += W) T::Store(c + j, T::Zero());
    if (j < n) T::StoreN(c + j, T::Zero(), int(n - j));
    return;
  }
  if (beta == 1.0f) return;
  const V b = T::Set1(beta);
  for (; j + W <= n; j += W) T::Store(c + j, T::Mul(b, T::Load(c + j)));
  if (j < n) T::StoreN(c + j, T::Mul(b, T::LoadN(c + j, int(n - j))), int(n - j));
}

// Rows p0..p0+KU of B into C[0:M, jb:jb+w].
template <class T, int M, int KU>
CG_INLINE void NNStep(const GemvTask& t, int64_t p0, int64_t jb, int64_t w) {
  using V = typename T::V;
  constexpr int W = T::kWidth;
  V av[M][KU];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
    for (int u = 0; u < KU; ++u) av[i][u] = T::Set1(t.alpha * t.a[i * t.lda + p0 + u]);
  const float* brow[KU];
#pragma GCC unroll 8
  for (int u = 0; u < KU; ++u) brow[u] = t.b + (p0 + u) * t.ldb + jb;
  float* crow[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) crow[i] = t.c + i * t.ldc + jb;
  int64_t j = 0;
  if constexpr (M == 1) {  // each row's vector used once: loaded into its FMA, not held
    for (; j + W <= w; j += W) {
      V c = T::Load(crow[0] + j);
#pragma GCC unroll 16
      for (int u = 0; u < KU; ++u) c = T::Fma(av[0][u], T::Load(brow[u] + j), c);
      T::Store(crow[0] + j, c);
    }
  }
  for (; j + W <= w; j += W) {
    V bv[KU];
#pragma GCC unroll 8
    for (int u = 0; u < KU; ++u) bv[u] = T::Load(brow[u] + j);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      V c = T::Load(crow[i] + j);
#pragma GCC unroll 8
      for (int u = 0; u < KU; ++u) c = T::Fma(av[i][u], bv[u], c);
      T::Store(crow[i] + j, c);
    }
  }
  if (j < w) {
    const int n = int(w - j);
    V bv[KU];
#pragma GCC unroll 8
    for (int u = 0; u < KU; ++u) bv[u] = T::LoadN(brow[u] + j, n);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      V c = T::LoadN(crow[i] + j, n);
#pragma GCC unroll 8
      for (int u = 0; u < KU; ++u) c = T::Fma(av[i][u], bv[u], c);
      T::StoreN(crow[i] + j, c, n);
    }
  }
}

// acc[0:M][0:JV] += A[0:M, p] * the row of B at r (its last vector `tail` wide).
template <class T, int M, int JV>
CG_INLINE void NNWholeRow(const GemvTask& t, const float* r, int64_t p, int tail, typename T::V (&acc)[M][JV]) {
  using V = typename T::V;
  constexpr int W = T::kWidth;
  V a[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) a[i] = T::Bcast(t.a + i * t.lda + p);
#pragma GCC unroll 16
  for (int v = 0; v < JV; ++v) {
    const V bv = v < JV - 1 || tail == W ? T::Load(r + v * W) : T::LoadN(r + v * W, tail);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) acc[i][v] = T::Fma(a[i], bv, acc[i][v]);
  }
}

// C[0:M, jb:jb+w] with w in ((JV - 1) * W, JV * W]: the M x JV tile of C stays in
// registers for all of k while each row's w columns of B are read whole, row after
// row.
template <class T, int M, int JV>
void NNRowsWholeBlock(const GemvTask& t, int64_t jb, int64_t w) {
  using V = typename T::V;
  constexpr int W = T::kWidth;
  const int tail = int(w - (JV - 1) * W);
  V acc[M][JV];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < JV; ++v) acc[i][v] = T::Zero();
  for (int64_t p = 0; p < t.k; ++p) NNWholeRow<T, M, JV>(t, t.b + jb + p * t.ldb, p, tail, acc);
  const V alpha = T::Set1(t.alpha), beta = T::Set1(t.beta);
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    float* c = t.c + i * t.ldc + jb;
#pragma GCC unroll 16
    for (int v = 0; v < JV; ++v) {
      V r = T::Mul(alpha, acc[i][v]);
      const int n = v == JV - 1 ? tail : W;
      if (t.beta != 0.0f) r = T::Fma(beta, n == W ? T::Load(c + v * W) : T::LoadN(c + v * W, n), r);
      if (n == W) T::Store(c + v * W, r);
      else T::StoreN(c + v * W, r, n);
    }
  }
}

// The block of JV vectors for jv in [JV, SV].
template <class T, int M, int JV, int SV>
CG_INLINE void NNRowsWholeWidth(const GemvTask& t, int64_t jb, int64_t w, int jv) {
  if constexpr (JV < SV) {
    if (jv > JV) return NNRowsWholeWidth<T, M, JV + 1, SV>(t, jb, w, jv);
  }
  NNRowsWholeBlock<T, M, JV>(t, jb, w);
}

template <class T, int M>
void NNRowsWhole(const GemvTask& t) {
  constexpr int SV = GemvNNWholeVectors(kVectorRegs<T>, M);
  constexpr int W = T::kWidth;
  for (int64_t jb = t.j0; jb < t.j1; jb += SV * W) {
    const int64_t w = std::min<int64_t>(SV * W, t.j1 - jb);
    NNRowsWholeWidth<T, M, 1, SV>(t, jb, w, int((w + W - 1) / W));
  }
}

template <class T, int M, int KU>
void NNSteps(const GemvTask& t) {
  const int64_t nb = std::max<int64_t>(T::kWidth, t.block);
  for (int64_t jb = t.j0; jb < t.j1; jb += nb) {
    const int64_t w = std::min(nb, t.j1 - jb);
    for (int i = 0; i < M; ++i) ScaleRow<T>(t.c + i * t.ldc + jb, w, t.beta);
    int64_t p = 0;
    for (; p + KU <= t.k; p += KU) NNStep<T, M, KU>(t, p, jb, w);
    for (; p < t.k; ++p) NNStep<T, M, 1>(t, p, jb, w);
  }
}

template <class T, int M>
void NNRows(const GemvTask& t) {
  if constexpr (M <= 4) {
    if (t.rows_whole) return NNRowsWhole<T, M>(t);
  }
  if constexpr (M == 1 && T::kWidth >= 16) {
    if (t.step_rows == kGemvNNDeepStepRows) return NNSteps<T, M, kGemvNNDeepStepRows>(t);
  }
  NNSteps<T, M, NNStepRows<T, M>()>(t);
}

// C[i0:i0+MI, j:j+NJ] = alpha * (the lanes of acc summed) + beta * C (columns t.ldc_col apart).
template <class T, int MI, int NJ>
CG_INLINE void NTStore(const GemvTask& t, int i0, int64_t j, typename T::V (&acc)[MI][NJ]) {
#pragma GCC unroll 8
  for (int i = 0; i < MI; ++i) {
    float sums[NJ];
    if constexpr (NJ == 8) {
      T::Sum8(acc[i], sums);
    } else {
#pragma GCC unroll 8
      for (int q = 0; q < NJ; ++q) sums[q] = T::Sum(acc[i][q]);
    }
    float* c = t.c + (i0 + i) * t.ldc + j * t.ldc_col;
#pragma GCC unroll 8
    for (int q = 0; q < NJ; ++q) {
      float& cq = c[q * t.ldc_col];
      cq = t.beta == 0.0f ? t.alpha * sums[q] : t.alpha * sums[q] + t.beta * cq;
    }
  }
}

// A tile's sums up to depth p1: kept in part for the next depth block, or into C.
template <class T, int MI, int NJ, bool kBlocked>
CG_INLINE void NTFinish(const GemvTask& t, int i0, int64_t j, int64_t p1, typename T::V* part,
                        typename T::V (&acc)[MI][NJ]) {
  if (kBlocked && p1 < t.k) {
#pragma GCC unroll 8
    for (int i = 0; i < MI; ++i)
#pragma GCC unroll 8
      for (int q = 0; q < NJ; ++q) part[i * NJ + q] = acc[i][q];
    return;
  }
  NTStore<T, MI, NJ>(t, i0, j, acc);
}

// C[i0:i0+MI, j:j+NJ] from rows i0.. of A and rows j.. of B: at each k step the NJ
// rows side by side, or (t.rows_whole) each row whole before the next, so that rows
// stored one after another are read as one sequential stream.
// Depth blocks (t.kc): the tile covers k in [p0, p1) only, its partial sums carried
// between blocks in part (MI x NJ vectors, row by row), reduced after the last block;
// ahead: NJ rows (order 0) of which each vector step requests a line into L2, or nullptr.
template <class T, int MI, int NJ, bool kPrefetch, bool kBlocked>
CG_INLINE void NTTile(const GemvTask& t, int i0, int64_t j, int64_t p0, int64_t p1, typename T::V* part,
                      const float* const* ahead = nullptr) {
  using V = typename T::V;
  constexpr int W = T::kWidth;
  V acc[MI][NJ];
#pragma GCC unroll 8
  for (int i = 0; i < MI; ++i)
#pragma GCC unroll 8
    for (int q = 0; q < NJ; ++q) acc[i][q] = kBlocked && p0 > 0 ? part[i * NJ + q] : T::Zero();
  // Rows of A and B from depth p0 on; blocks of A packed as NTPackDepthBlocks lays them.
  const float* arow[MI];
  const float* a = kBlocked ? t.a + p0 / t.kc * t.m * t.kc : t.a;
#pragma GCC unroll 8
  for (int i = 0; i < MI; ++i) arow[i] = a + (i0 + i) * t.lda;
  const float* brow[NJ];
#pragma GCC unroll 8
  for (int q = 0; q < NJ; ++q) brow[q] = t.b + (j + q) * t.ldb + p0;
  const int64_t d = p1 - p0;
  if constexpr (!kBlocked) {  // depth blocks run order 0 only
    if (t.rows_whole) {
      // U partial sums per row of A over alternate vectors of k, so that a row's FMAs
      // do not all wait on one accumulator's latency.
      constexpr int U = MI >= 4 ? 1 : 4 / MI;
#pragma GCC unroll 8
      for (int q = 0; q < NJ; ++q) {
        int64_t p = 0;
        if constexpr (U > 1) {
          V sum[MI][U];
#pragma GCC unroll 8
          for (int i = 0; i < MI; ++i)
#pragma GCC unroll 4
            for (int u = 0; u < U; ++u) sum[i][u] = T::Zero();
          for (; p + U * W <= d; p += U * W)
#pragma GCC unroll 4
            for (int u = 0; u < U; ++u) {
              const V bv = T::Load(brow[q] + p + u * W);
#pragma GCC unroll 8
              for (int i = 0; i < MI; ++i) sum[i][u] = T::Fma(T::Load(arow[i] + p + u * W), bv, sum[i][u]);
            }
#pragma GCC unroll 8
          for (int i = 0; i < MI; ++i)
#pragma GCC unroll 4
            for (int u = 0; u < U; ++u) acc[i][q] = T::Add(acc[i][q], sum[i][u]);
        }
        for (; p + W <= d; p += W) {
          const V bv = T::Load(brow[q] + p);
#pragma GCC unroll 8
          for (int i = 0; i < MI; ++i) acc[i][q] = T::Fma(T::Load(arow[i] + p), bv, acc[i][q]);
        }
        if (p < d) {
          const int n = int(d - p);
          const V bv = T::LoadN(brow[q] + p, n);
#pragma GCC unroll 8
          for (int i = 0; i < MI; ++i) acc[i][q] = T::Fma(T::LoadN(arow[i] + p, n), bv, acc[i][q]);
        }
      }
      return NTFinish<T, MI, NJ, kBlocked>(t, i0, j, p1, part, acc);
    }
  }
  int64_t p = 0;
  const int64_t next = NJ * t.ldb;  // the next tile's rows of B (kPrefetch: requested into L2)
  for (; p + W <= d; p += W) {
    if constexpr (kPrefetch)
#pragma GCC unroll 8
      for (int q = 0; q < NJ; ++q) __builtin_prefetch(brow[q] + next + p, 0, 2);
    if constexpr (kBlocked)
      if (ahead != nullptr)
#pragma GCC unroll 8
        for (int q = 0; q < NJ; ++q) __builtin_prefetch(ahead[q] + p, 0, 2);
    V av[MI];
#pragma GCC unroll 8
    for (int i = 0; i < MI; ++i) av[i] = T::Load(arow[i] + p);
#pragma GCC unroll 8
    for (int q = 0; q < NJ; ++q) {
      const V bv = T::Load(brow[q] + p);
#pragma GCC unroll 8
      for (int i = 0; i < MI; ++i) acc[i][q] = T::Fma(av[i], bv, acc[i][q]);
    }
  }
  if (p < d) {
    const int n = int(d - p);
    V av[MI];
#pragma GCC unroll 8
    for (int i = 0; i < MI; ++i) av[i] = T::LoadN(arow[i] + p, n);
#pragma GCC unroll 8
    for (int q = 0; q < NJ; ++q) {
      const V bv = T::LoadN(brow[q] + p, n);
#pragma GCC unroll 8
      for (int i = 0; i < MI; ++i) acc[i][q] = T::Fma(av[i], bv, acc[i][q]);
    }
  }
  NTFinish<T, MI, NJ, kBlocked>(t, i0, j, p1, part, acc);
}

// The most rows of A a tile of NJ rows of B takes: MI * NJ accumulators, MI rows of
// A and one row of B in registers (one register to spare), at most kCap.
// In depth blocks (t.kc) up to 8 rows: with the block's rows of A and B in L1, fewer,
// longer passes (at m = 10, 6 + 4 rows rather than 4 + 4 + 2) took 0.86-1.03x the time
// of 4-row passes on four shapes of m = 10 to 16 on the Intel Xeon, each relative to
// the whole-depth kernel in its run (bench/RESULTS.md, "... small-m nt passes in depth blocks").
inline constexpr int kNTBlockMaxRows = 8;
template <class T, int NJ, int kCap = 4>
constexpr int NTMaxRows() {
  int mi = kCap;
  while (mi > 1 && mi * NJ + mi + 1 > kVectorRegs<T> - 1) --mi;
  return mi;
}

// A tile of r rows, 2 <= r <= R.
template <class T, int NJ, bool kPrefetch, bool kBlocked, int R>
CG_INLINE void NTRestOf(const GemvTask& t, int i, int r, int64_t j, int64_t p0, int64_t p1, typename T::V* part,
                        const float* const* ahead) {
  if constexpr (R >= 2) {
    if (r == R) return NTTile<T, R, NJ, kPrefetch, kBlocked>(t, i, j, p0, p1, part, ahead);
    NTRestOf<T, NJ, kPrefetch, kBlocked, R - 1>(t, i, r, j, p0, p1, part, ahead);
  }
}

// Rows [i, i+r) of C, r < MI, against the NJ rows of B at j: one tile.
template <class T, int NJ, bool kPrefetch, bool kBlocked, int kCap = 4>
CG_INLINE void NTRest(const GemvTask& t, int i, int r, int64_t j, int64_t p0, int64_t p1, typename T::V* part,
                      const float* const* ahead) {
  if (r == 1) return NTTile<T, 1, NJ, kPrefetch, kBlocked>(t, i, j, p0, p1, part, ahead);
  NTRestOf<T, NJ, kPrefetch, kBlocked, NTMaxRows<T, NJ, kCap>() - 1>(t, i, r, j, p0, p1, part, ahead);
}

// Columns [j, j+NJ) of C for every row, in groups of MI rows and one smaller tile
// for the rest: the NJ rows of B stay in L1/L2 while the row groups of A (in L2)
// pass, so B comes from memory once whatever m is, and m <= MI is a single pass.
// With t.prefetch_next_tile the second pass (its rows of B in cache) requests the
// next tile's, which memory would otherwise leave until that tile's first pass.
template <class T, int NJ, bool kPrefetch>
CG_INLINE void NTPasses(const GemvTask& t, int64_t j) {
  constexpr int MI = NTMaxRows<T, NJ>();
  const bool fetch_next = !kPrefetch && t.prefetch_next_tile;
  int i = 0;
  for (; i + MI <= t.m; i += MI) {
    if (fetch_next && i == MI) NTTile<T, MI, NJ, true, false>(t, i, j, 0, t.k, nullptr);
    else NTTile<T, MI, NJ, kPrefetch, false>(t, i, j, 0, t.k, nullptr);
  }
  if constexpr (MI > 1) {
    if (i < t.m) {
      if (fetch_next && i == MI) NTRest<T, NJ, true, false>(t, i, t.m - i, j, 0, t.k, nullptr, nullptr);
      else NTRest<T, NJ, kPrefetch, false>(t, i, t.m - i, j, 0, t.k, nullptr, nullptr);
    }
  }
}

// The same over depth [p0, p1) (t.kc), so that every pass after the first finds the
// block's rows of B in L1. With t.prefetch_next_tile each pass requests its share of
// the next block's rows (of this tile, or the next tile's first), so that memory
// streams while the block's later passes compute from L1.
template <class T, int NJ>
CG_INLINE void NTBlockPasses(const GemvTask& t, int64_t j, int64_t p0, int64_t p1, typename T::V* part) {
  constexpr int MI = NTMaxRows<T, NJ, kNTBlockMaxRows>();
  const int passes = (t.m + MI - 1) / MI;
  // Each pass requests its share of the next block's rows: pass r rows q with
  // q % passes == r; the other slots name the tile's own rows, already in L1.
  const float* next = t.b + j * t.ldb + p1;
  int64_t next_rows = NJ;
  if (p1 == t.k) {  // the next tile's first block
    next = t.b + (j + NJ) * t.ldb;
    next_rows = std::clamp<int64_t>(t.j1 - j - NJ, 0, NJ);
  }
  const float* own = t.b + j * t.ldb + p0;
  const float* share[NJ];
  const float* const* ahead = t.prefetch_next_tile ? share : nullptr;
  int i = 0;
  for (int pass = 0; i < t.m; i += MI, ++pass) {
#pragma GCC unroll 8
    for (int q = 0; q < NJ; ++q) share[q] = (q < next_rows && q % passes == pass ? next : own) + q * t.ldb;
    if (i + MI <= t.m) NTTile<T, MI, NJ, false, true>(t, i, j, p0, p1, part + i * NJ, ahead);
    else if constexpr (MI > 1)
      NTRest<T, NJ, false, true, kNTBlockMaxRows>(t, i, t.m - i, j, p0, p1, part + i * NJ, ahead);
  }
}

// part: kGemvMaxM x NJ vectors of scratch.
template <class T, int NJ, bool kPrefetch>
void NTColumnTile(const GemvTask& t, int64_t j, typename T::V* part) {
  if (t.kc == 0 || t.kc >= t.k) return NTPasses<T, NJ, kPrefetch>(t, j);
  for (int64_t p0 = 0; p0 < t.k; p0 += t.kc) NTBlockPasses<T, NJ>(t, j, p0, std::min(t.k, p0 + t.kc), part);
}

// The task's columns: NJ-wide tiles, then single columns.
template <class T, int NJ, bool kPrefetch>
void NTRowsOf(const GemvTask& t) {
  typename T::V part[kGemvMaxM * NJ] = {};  // depth blocks' partial sums, zeroed once per task
  int64_t j = t.j0;
  for (; j + NJ <= t.j1; j += NJ) NTColumnTile<T, NJ, kPrefetch>(t, j, part);
  for (; j < t.j1; ++j) NTColumnTile<T, 1, kPrefetch>(t, j, part);
}

// Tall tasks may prefetch (tile order 0) in every pass; the small-m ones in their
// second (t.prefetch_next_tile).
template <class T, int NJ>
void NTRows(const GemvTask& t) {
  if (t.prefetch) return NTRowsOf<T, NJ, true>(t);
  NTRowsOf<T, NJ, false>(t);
}

// The register tile for a block of NJ = t.block rows of B.
template <class T>
void NTDispatch(const GemvTask& t) {
  switch (t.block) {
    case 1: return NTRows<T, 1>(t);
    case 2: return NTRows<T, 2>(t);
    case 4: return NTRows<T, 4>(t);
    default: return NTRows<T, 8>(t);
  }
}

// Columns [j, j + w) of C, w <= NV vectors, from the panel at bp (k rows of NV
// vectors).
template <class T, int M, int NV>
CG_INLINE void PanelTile(const GemvTask& t, const float* const (&arow)[M], int64_t j, int64_t w, const float* bp) {
  using V = typename T::V;
  constexpr int W = T::kWidth, P = W * NV;
  const V alpha = T::Set1(t.alpha), beta = T::Set1(t.beta);
  V acc[M][NV];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = T::Zero();
  const int64_t ahead = int64_t{t.prefetch} * P;
#pragma GCC unroll 2
  for (int64_t p = 0; p < t.k; ++p, bp += P) {
    if (ahead != 0)
#pragma GCC unroll 4
      for (int l = 0; l < (P >= 16 ? P / 16 : 1); ++l) __builtin_prefetch(bp + ahead + l * 16, 0, 3);
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = T::Load(bp + v * W);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const V a = T::Bcast(arow[i] + p);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) T::FmaAcc(acc[i][v], a, bv[v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    float* c = t.c + i * t.ldc + j;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const int n = int(std::min<int64_t>(W, w - v * W));
      if (n <= 0) break;
      V r = T::Mul(alpha, acc[i][v]);
      if (t.beta != 0.0f) r = T::Fma(beta, n == W ? T::Load(c + v * W) : T::LoadN(c + v * W, n), r);
      if (n == W) T::Store(c + v * W, r);
      else T::StoreN(c + v * W, r, n);
    }
  }
}

// The last panel of n, narrower than NV vectors (its columns rounded up to a vector;
// GemvPanelPack): its own count of vectors. Out of line: the full panels' loop keeps the code it had.
template <class T, int M, int NV>
__attribute__((noinline)) void LastPanelTile(const GemvTask& t, const float* const (&arow)[M], int64_t j, int64_t w,
                             const float* bp) {
  if constexpr (NV > 1) {
    if ((w + T::kWidth - 1) / T::kWidth < NV) return LastPanelTile<T, M, NV - 1>(t, arow, j, w, bp);
  }
  PanelTile<T, M, NV>(t, arow, j, w, bp);
}

// Columns [t.j0, t.j1) of C (t.j0 on a panel boundary) from the panels at t.b.
template <class T, int M, int NV>
void PanelRows(const GemvTask& t) {
  constexpr int P = T::kWidth * NV;
  const float* arow[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) arow[i] = t.a + i * t.lda;
  for (int64_t j = t.j0; j < t.j1; j += P) {
    const float* bp = t.b + (j / P) * t.k * P;
    const int64_t w = std::min<int64_t>(P, t.j1 - j);
    if (w == P) PanelTile<T, M, NV>(t, arow, j, w, bp);
    else LastPanelTile<T, M, NV>(t, arow, j, w, bp);
  }
}

template <class T, int NV>
void PanelDispatchM(const GemvTask& t) {
  switch (t.m) {
    case 1: return PanelRows<T, 1, NV>(t);
    case 2: return PanelRows<T, 2, NV>(t);
    case 3: return PanelRows<T, 3, NV>(t);
    case 4: return PanelRows<T, 4, NV>(t);
    case 5: return PanelRows<T, 5, NV>(t);
    case 6: return PanelRows<T, 6, NV>(t);
    case 7: return PanelRows<T, 7, NV>(t);
    default: return PanelRows<T, 8, NV>(t);
  }
}

// t.block = NV, vectors per panel (1, 2 or 4).
template <class T>
void PanelDispatch(const GemvTask& t) {
  switch (t.block) {
    case 1: return PanelDispatchM<T, 1>(t);
    case 2: return PanelDispatchM<T, 2>(t);
    default: return PanelDispatchM<T, 4>(t);
  }
}

// Tall keys in broadcast form (gemv_kernel.h): rows [j, j+R) of C by its t.m columns
// (V vectors) in registers for all of k; at each k step one row of op(B) and R
// broadcast elements of A.
template <class T, int R, int V>
CG_INLINE void TallTile(const GemvTask& t, int64_t j) {
  using Vec = typename T::V;
  constexpr int W = T::kWidth;
  const int tail = t.m - (V - 1) * W;
  Vec acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) acc[r][v] = T::Zero();
  const float* arow[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) arow[r] = t.b + (j + r) * t.ldb;
  const auto mask = T::Mask(tail);
  const float* brow = t.a;
  const int64_t ld = t.lda;
  const auto step = [&](int64_t p) __attribute__((always_inline)) {
    Vec bv[V];
#pragma GCC unroll 2
    for (int v = 0; v + 1 < V; ++v) bv[v] = T::Load(brow + v * W);
    bv[V - 1] = T::LoadMasked(brow + (V - 1) * W, mask);
    brow += ld;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const Vec a = T::Bcast(arow[r] + p);
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) acc[r][v] = T::Fma(a, bv[v], acc[r][v]);
    }
  };
  // A line of each row of A per group of steps; with t.prefetch, the same line of
  // the next tile's rows requested into L2 first (the hardware prefetchers fall
  // behind on R slowly consumed streams, and start each tile's rows cold).
  constexpr int kLine = 16;
  const int64_t next = R * t.ldb;
  int64_t p = 0;
  for (; p + kLine <= t.k; p += kLine) {
    if (t.prefetch)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) __builtin_prefetch(arow[r] + next + p, 0, 2);
#pragma GCC unroll 16
    for (int u = 0; u < kLine; ++u) step(p + u);
  }
  for (; p < t.k; ++p) step(p);
  const Vec alpha = T::Set1(t.alpha), beta = T::Set1(t.beta);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* c = t.c + (j + r) * t.ldc_col;
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) {
      const int n = v + 1 < V ? W : tail;
      Vec x = T::Mul(alpha, acc[r][v]);
      if (t.beta != 0.0f) x = T::Fma(beta, T::LoadN(c + v * W, n), x);
      T::StoreN(c + v * W, x, n);
    }
  }
}

// The most rows of C a broadcast tile of V vectors takes: R * V accumulators, V
// vectors of op(B) and a broadcast (one register to spare), at most 8.
template <class T, int V>
constexpr int TallMaxRows() {
  int r = 8;
  while (r > 1 && r * V + V + 1 > kVectorRegs<T> - 1) r /= 2;
  return r;
}

// Rows [t.j0, t.j1) of C in tiles of R = min(t.block, TallMaxRows) rows, then
// smaller tiles for the rest.
template <class T, int V>
void TallRowsOfV(const GemvTask& t) {
  constexpr int RMax = TallMaxRows<T, V>();
  const int r = std::min(t.block, RMax);
  int64_t j = t.j0;
  if (r >= 8 && RMax >= 8)
    for (; j + 8 <= t.j1; j += 8) TallTile<T, (RMax >= 8 ? 8 : 1), V>(t, j);
  if (r >= 4 && RMax >= 4)
    for (; j + 4 <= t.j1; j += 4) TallTile<T, (RMax >= 4 ? 4 : 1), V>(t, j);
  if (r >= 2 && RMax >= 2)
    for (; j + 2 <= t.j1; j += 2) TallTile<T, (RMax >= 2 ? 2 : 1), V>(t, j);
  for (; j < t.j1; ++j) TallTile<T, 1, V>(t, j);
}

template <class T>
void TallDispatch(const GemvTask& t) {
  if (t.m <= T::kWidth) return TallRowsOfV<T, 1>(t);
  return TallRowsOfV<T, 2>(t);
}

template <class T>
void NNDispatch(const GemvTask& t) {
  switch (t.m) {
    case 1: return NNRows<T, 1>(t);
    case 2: return NNRows<T, 2>(t);
    case 3: return NNRows<T, 3>(t);
    case 4: return NNRows<T, 4>(t);
    case 5: return NNRows<T, 5>(t);
    case 6: return NNRows<T, 6>(t);
    case 7: return NNRows<T, 7>(t);
    case 8: return NNRows<T, 8>(t);
    case 9: return NNRows<T, 9>(t);
    case 10: return NNRows<T, 10>(t);
    case 11: return NNRows<T, 11>(t);
    case 12: return NNRows<T, 12>(t);
    case 13: return NNRows<T, 13>(t);
    case 14: return NNRows<T, 14>(t);
    case 15: return NNRows<T, 15>(t);
    default: return NNRows<T, 16>(t);
  }
}

}  // namespace
}  // namespace cliffguard::cpu

#define CG_DEFINE_GEMV_KERNEL(name, traits, trans_b)                          \
  namespace cliffguard::cpu {                                                 \
  void name##_rows(const GemvTask& task) {                                    \
    if constexpr (trans_b) NTDispatch<traits>(task);                          \
    else NNDispatch<traits>(task);                                            \
  }                                                                           \
  }

#define CG_DEFINE_GEMV_TALL_KERNEL(name, traits)                              \
  namespace cliffguard::cpu {                                                 \
  void name##_tall(const GemvTask& task) { TallDispatch<traits>(task); }     \
  }

#define CG_DEFINE_GEMV_PACKED_KERNEL(name, traits)                            \
  namespace cliffguard::cpu {                                                 \
  void name##_panels(const GemvTask& task) { PanelDispatch<traits>(task); }   \
  }
