// The fp32 GEMM micro-kernel template, shared by every variant's translation unit.
// A variant's TU includes a traits header (gemm_ukernel_avx512.h, ..._avx2.h, or
// uses ScalarTraits below) and then CG_DEFINE_GEMM_UKERNEL(name, traits, mr, nr).
//
// Everything here lives in an anonymous namespace on purpose: each TU is compiled
// with different -m flags, and internal linkage guarantees that the linker never
// merges an AVX-512 instantiation into an AVX2 or scalar caller (ODR hazard).
// Only name##_ukernel (declared in gemm_ukernel.h) has external linkage.
//
// Design: broadcast-A / vector-B outer products. Per k step the tile loads NR/W
// vectors of B and broadcasts M elements of A into M*NR/W FMAs. The accumulators
// stay in registers: M * NR/W + NR/W + 1 <= register count. Rows below mr (edge
// tiles) are separate instantiations so that they cost only their own rows;
// columns below nr are handled with masked loads/stores of C.
#pragma once

#include <cstdint>
#include <utility>

#include "kernels/cpu/gemm_ukernel.h"

#define CG_INLINE inline __attribute__((always_inline))

namespace cliffguard::cpu {
namespace {

// Portable traits: one float per "vector".
struct ScalarTraits {
  using V = float;
  static constexpr int kWidth = 1;
  static CG_INLINE V Zero() { return 0.0f; }
  static CG_INLINE V Set1(float x) { return x; }
  static CG_INLINE V Load(const float* p) { return *p; }
  static CG_INLINE V Bcast(const float* p) { return *p; }
  static CG_INLINE V Fma(V a, V b, V c) { return a * b + c; }
  static CG_INLINE void FmaAcc(V& acc, V a, V b) { acc = a * b + acc; }
  static CG_INLINE void FmaAccPinned(V& acc, V a, V b) { FmaAcc(acc, a, b); }
  static CG_INLINE V Mul(V a, V b) { return a * b; }
  static CG_INLINE V Add(V a, V b) { return a + b; }
  static CG_INLINE void Store(float* p, V v) { *p = v; }
  static CG_INLINE V LoadN(const float* p, int n) { return n > 0 ? *p : 0.0f; }
  static CG_INLINE void StoreN(float* p, V v, int n) {
    if (n > 0) *p = v;
  }
  static CG_INLINE float Sum(V v) { return v; }
  static CG_INLINE void Sum8(const V (&v)[8], float* out) {
    for (int q = 0; q < 8; ++q) out[q] = v[q];
  }
};

template <class T, int M, int NV, bool kPacked>
CG_INLINE void Step(typename T::V (&acc)[M][NV], const float* a, int64_t a_rs, const float* b) {
  using V = typename T::V;
  V bv[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) bv[v] = T::Load(b + v * T::kWidth);
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
    const V av = T::Bcast(a + (kPacked ? i : i * a_rs));
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) T::FmaAccPinned(acc[i][v], av, bv[v]);
  }
}

// UkArgs::next_b: spread over the loop's k groups, one line every `every` groups
// when the panel has fewer lines than the loop has groups, else `per` lines each
// group (a burst of the lines left at the end of the loop stalled the next call:
// kc = 1024 with unroll_k = 4 ran 1.12-1.14x slower than with 2).
struct SpreadPrefetch {
  const char* line;
  int64_t left, every, per, count;
  CG_INLINE SpreadPrefetch(const UkArgs& p, int64_t groups)
      : line(p.next_b),
        left(p.next_b_lines),
        every(left > 0 && groups > left ? groups / left : 1),
        per(groups > 0 && left > groups ? (left + groups - 1) / groups : 1),
        count(every) {}
  CG_INLINE void Tick() {
    if (left > 0 && --count == 0) {
      for (int64_t i = 0; i < per && left > 0; ++i, --left, line += 64) __builtin_prefetch(line, 0, 2);
      count = every;
    }
  }
  CG_INLINE void Rest() {
    for (; left > 0; --left, line += 64) __builtin_prefetch(line, 0, 2);
  }
};

// The same pace over the next B panel's lines and then UkArgs::next_a's, in a k loop
// of its own: with this in SpreadPrefetch, calls without A lines ran 1.00-1.10x
// slower (bench/RESULTS.md, "the next A block's source prefetched").
struct SpreadPrefetchWalk {
  const char* line;
  int64_t left, every, per, count;
  int64_t b_left;
  UkLines* a;
  CG_INLINE SpreadPrefetchWalk(const UkArgs& p, int64_t groups)
      : line(p.next_b),
        left(p.next_b_lines + p.next_a_lines),
        every(left > 0 && groups > left ? groups / left : 1),
        per(groups > 0 && left > groups ? (left + groups - 1) / groups : 1),
        count(every),
        b_left(p.next_b_lines),
        a(p.next_a) {}
  CG_INLINE const char* Next() {
    --left;
    if (b_left > 0) {
      --b_left;
      const char* at = line;
      line += 64;
      return at;
    }
    return a->Step();
  }
  CG_INLINE void Tick() {
    if (left > 0 && --count == 0) {
      for (int64_t i = 0; i < per && left > 0; ++i) __builtin_prefetch(Next(), 0, 2);
      count = every;
    }
  }
  CG_INLINE void Rest() {
    while (left > 0) __builtin_prefetch(Next(), 0, 2);
  }
};

// The k loop without software prefetch of A and B: whole groups of U steps, `next`
// paced once per group, and its rest after them.
template <class T, int M, int NV, int U, bool kPacked, class Next>
CG_INLINE void GroupLoop(typename T::V (&acc)[M][NV], const float*& a, const float*& b, int64_t& k, int64_t a_rs,
                         int64_t a_ks, int64_t b_ks, Next& next) {
  for (; k >= U; k -= U) {
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) Step<T, M, NV, kPacked>(acc, a + u * a_ks, a_rs, b + u * b_ks);
    next.Tick();
    a += U * a_ks;
    b += U * b_ks;
  }
  next.Rest();
}

template <class T, int MR, int M, int NV, int U, bool kPacked>
void Tile(const UkArgs& p) {
  using V = typename T::V;
  constexpr int W = T::kWidth;
  constexpr int kBLines = (NV * W * 4 + 63) / 64;  // cache lines of B per k step
  V acc[M][NV];
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v] = T::Zero();

  constexpr int kCLines = (NV * W * 4 + 63) / 64;
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
    for (int l = 0; l < kCLines; ++l) __builtin_prefetch(p.c + i * p.ldc + l * 16, 1, 3);

  const float* a = p.a;
  const float* b = p.b;
  const int64_t a_rs = kPacked ? 1 : p.a_rs;
  const int64_t a_ks = kPacked ? MR : p.a_ks;
  const int64_t b_ks = p.b_ks;
  const int64_t pf = p.prefetch;
  int64_t k = p.kc;
  if (pf == 0 && p.next_a_lines > 0) {
    SpreadPrefetchWalk next(p, k / U);
    GroupLoop<T, M, NV, U, kPacked>(acc, a, b, k, a_rs, a_ks, b_ks, next);
  } else if (pf == 0) {
    SpreadPrefetch next(p, k / U);
    GroupLoop<T, M, NV, U, kPacked>(acc, a, b, k, a_rs, a_ks, b_ks, next);
  } else {
    SpreadPrefetch next(p, k / U);
    for (; k >= U; k -= U) {
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) {
#pragma GCC unroll 4
        for (int l = 0; l < kBLines; ++l) __builtin_prefetch(b + (pf + u) * b_ks + l * 16, 0, 3);
        if (kPacked) __builtin_prefetch(a + (pf + u) * a_ks, 0, 3);
        Step<T, M, NV, kPacked>(acc, a + u * a_ks, a_rs, b + u * b_ks);
      }
      next.Tick();
      a += U * a_ks;
      b += U * b_ks;
    }
    next.Rest();
  }
  for (; k > 0; --k) {
    Step<T, M, NV, kPacked>(acc, a, a_rs, b);
    a += a_ks;
    b += b_ks;
  }

  float* c = p.c;
  const int64_t ldc = p.ldc;
  const V alpha = T::Set1(p.alpha);
  if (p.n == NV * W) {
    if (p.beta == 0.0f) {
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) T::Store(c + i * ldc + v * W, T::Mul(acc[i][v], alpha));
    } else {
      const V beta = T::Set1(p.beta);
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
          float* cp = c + i * ldc + v * W;
          T::Store(cp, T::Fma(beta, T::Load(cp), T::Mul(acc[i][v], alpha)));
        }
    }
  } else {
    const V beta = T::Set1(p.beta);
    const bool read_c = p.beta != 0.0f;
    // Fully unrolled (no break): a runtime index into acc would keep it in memory.
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        const int cnt = p.n - v * W;
        if (cnt > 0) {
          float* cp = c + i * ldc + v * W;
          V r = T::Mul(acc[i][v], alpha);
          if (read_c) r = T::Fma(beta, T::LoadN(cp, cnt), r);
          T::StoreN(cp, r, cnt);
        }
      }
  }
}

// Function table indexed by ((unroll_index * 2 + packed) * MR + m - 1).
template <class T, int MR, int NV, class Seq>
struct TileTable;
template <class T, int MR, int NV, int... Ms>
struct TileTable<T, MR, NV, std::integer_sequence<int, Ms...>> {
  static constexpr UkernelFn kFns[] = {
      &Tile<T, MR, Ms + 1, NV, 1, false>..., &Tile<T, MR, Ms + 1, NV, 1, true>...,
      &Tile<T, MR, Ms + 1, NV, 2, false>..., &Tile<T, MR, Ms + 1, NV, 2, true>...,
      &Tile<T, MR, Ms + 1, NV, 4, false>..., &Tile<T, MR, Ms + 1, NV, 4, true>...,
      &Tile<T, MR, Ms + 1, NV, 8, false>..., &Tile<T, MR, Ms + 1, NV, 8, true>...,
  };
};

template <class T, int MR, int NR>
CG_INLINE void RunUkernel(const UkArgs& p) {
  static_assert(NR % T::kWidth == 0, "nr must be a multiple of the vector width");
  using Table = TileTable<T, MR, NR / T::kWidth, std::make_integer_sequence<int, MR>>;
  const int u = p.unroll_k >= 8 ? 3 : p.unroll_k >= 4 ? 2 : p.unroll_k >= 2 ? 1 : 0;
  const int packed = (p.a_rs == 1 && p.a_ks == MR) ? 1 : 0;
  Table::kFns[(u * 2 + packed) * MR + p.m - 1](p);
}

// PackRowsFn: whole vectors, the last ones of a short row masked (zeros past n).
template <class T, int NR>
CG_INLINE void PackRows(float* __restrict dst, const float* __restrict src, int64_t ld, int64_t rows, int n) {
  constexpr int W = T::kWidth, NV = NR / W;
  if (n == NR) {
    for (int64_t p = 0; p < rows; ++p)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) T::Store(dst + p * NR + v * W, T::Load(src + p * ld + v * W));
    return;
  }
  for (int64_t p = 0; p < rows; ++p)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) T::Store(dst + p * NR + v * W, T::LoadN(src + p * ld + v * W, n - v * W));
}

}  // namespace
}  // namespace cliffguard::cpu

// Defines the variant's micro-kernel and row-packing entry points (external linkage).
#define CG_DEFINE_GEMM_UKERNEL(name, traits, mr, nr)                                                  \
  namespace cliffguard::cpu {                                                                         \
  void name##_ukernel(const UkArgs& args) { RunUkernel<traits, mr, nr>(args); }                       \
  void name##_pack_rows(float* dst, const float* src, int64_t ld, int64_t rows, int n) {              \
    PackRows<traits, nr>(dst, src, ld, rows, n);                                                      \
  }                                                                                                   \
  }
