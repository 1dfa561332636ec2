// AVX2+FMA traits for the GEMM micro-kernel template. Include only from TUs in
// CG_AVX2_SRCS (compiled with -mavx2 -mfma).
#pragma once

#include <immintrin.h>

#include "kernels/cpu/gemm_ukernel_impl.h"

namespace cliffguard::cpu {
namespace {

struct Avx2Traits {
  using V = __m256;
  static constexpr int kWidth = 8;
  static CG_INLINE __m256i Mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static CG_INLINE V Zero() { return _mm256_setzero_ps(); }
  static CG_INLINE V Set1(float x) { return _mm256_set1_ps(x); }
  static CG_INLINE V Load(const float* p) { return _mm256_loadu_ps(p); }
  static CG_INLINE V Bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static CG_INLINE V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static CG_INLINE void FmaAcc(V& acc, V a, V b) { acc = _mm256_fmadd_ps(a, b, acc); }
  // acc += a * b in acc's own register, for the GEMM tile. As an intrinsic, GCC
  // rotates the accumulators through registers (the 132/213 forms) and spills some of
  // them inside the unrolled k loop: measured 59 against 91 GFLOP/s for the 6x16 tile.
  // FmaAcc stays free, as on AVX-512: pinned, the small-m packed kernel kept its
  // accumulators on the stack and stored them every k step.
  static CG_INLINE void FmaAccPinned(V& acc, V a, V b) { asm("vfmadd231ps %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b)); }
  static CG_INLINE V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static CG_INLINE V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static CG_INLINE void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static CG_INLINE V LoadN(const float* p, int n) { return _mm256_maskload_ps(p, Mask(n)); }
  static CG_INLINE V LoadMasked(const float* p, __m256i mask) { return _mm256_maskload_ps(p, mask); }
  static CG_INLINE void StoreN(float* p, V v, int n) { _mm256_maskstore_ps(p, Mask(n), v); }
  static CG_INLINE float Sum(V v) {  // in registers: halves, then pairs, then the last two
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  // out[q] = the sum of v[q]'s lanes, q < 8: halves of pairs, then pairs, then
  // neighbours, each step one shuffle pair and an add for two or four vectors.
  static CG_INLINE void Sum8(const V (&v)[8], float* out) {
    V x[4], w[2];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p)
      x[p] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x20),
                           _mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x31));
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p)
      w[p] = _mm256_add_ps(_mm256_shuffle_ps(x[2 * p], x[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm256_shuffle_ps(x[2 * p], x[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    const V s = _mm256_add_ps(_mm256_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm256_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
    _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
};

}  // namespace
}  // namespace cliffguard::cpu
