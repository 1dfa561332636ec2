// AVX-512 traits for the GEMM micro-kernel template. Include only from TUs in
// CG_AVX512_SRCS (compiled with -mavx512f/bw/dq/vl).
#pragma once

#include <immintrin.h>

#include "kernels/cpu/gemm_ukernel_impl.h"

namespace cliffguard::cpu {
namespace {

struct Avx512Traits {
  using V = __m512;
  static constexpr int kWidth = 16;
  static CG_INLINE __mmask16 Mask(int n) {
    return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
  }
  static CG_INLINE V Zero() { return _mm512_setzero_ps(); }
  static CG_INLINE V Set1(float x) { return _mm512_set1_ps(x); }
  static CG_INLINE V Load(const float* p) { return _mm512_loadu_ps(p); }
  static CG_INLINE V Bcast(const float* p) { return _mm512_set1_ps(*p); }
  static CG_INLINE V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static CG_INLINE void FmaAcc(V& acc, V a, V b) { acc = _mm512_fmadd_ps(a, b, acc); }
  // acc += a * b in acc's own register (the 231 form), for the GEMM tile: with the
  // intrinsic, GCC rotates the tile's accumulators through registers and spills some
  // inside the unrolled k loop. Pinned, the fitted 14x32 ran 1.16-1.24x and the
  // fitted 6x64 1.02-1.14x faster on constant weights (8x32 0.98-1.03x at m >= 128,
  // 1.12-1.19x faster at m <= 8). FmaAcc stays free: the small-m kernels fold the
  // broadcast of A into their FMAs and ran 1.15-1.6x slower pinned at m = 4 and 8.
  static CG_INLINE void FmaAccPinned(V& acc, V a, V b) { asm("vfmadd231ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b)); }
  static CG_INLINE V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static CG_INLINE V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static CG_INLINE void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static CG_INLINE V LoadN(const float* p, int n) { return _mm512_maskz_loadu_ps(Mask(n), p); }
  static CG_INLINE V LoadMasked(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
  static CG_INLINE void StoreN(float* p, V v, int n) { _mm512_mask_storeu_ps(p, Mask(n), v); }
  static CG_INLINE float Sum(V v) { return _mm512_reduce_add_ps(v); }
  // out[q] = the sum of v[q]'s lanes, q < 8: halves of pairs, then quarters, pairs
  // and neighbours, each step one shuffle pair and an add for two or four vectors.
  static CG_INLINE void Sum8(const V (&v)[8], float* out) {
    V x[4], w[2];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p)
      x[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p)
      w[p] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * p], x[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(x[2 * p], x[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    const V s = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const V r = _mm512_add_ps(s, _mm512_shuffle_ps(s, s, _MM_SHUFFLE(2, 3, 0, 1)));
    const V o = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0), r);
    _mm256_storeu_ps(out, _mm512_castps512_ps256(o));
  }
};

}  // namespace
}  // namespace cliffguard::cpu
