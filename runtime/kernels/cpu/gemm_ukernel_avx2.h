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
  // acc += a * b in acc's own register. As an intrinsic, GCC rotates the
  // accumulators through registers (the 132/213 forms) and spills some of them
  // inside the unrolled k loop: measured 59 against 91 GFLOP/s for the 6x16 tile.
  static CG_INLINE void FmaAcc(V& acc, V a, V b) { asm("vfmadd231ps %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b)); }
  static CG_INLINE V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static CG_INLINE void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static CG_INLINE V LoadN(const float* p, int n) { return _mm256_maskload_ps(p, Mask(n)); }
  static CG_INLINE void StoreN(float* p, V v, int n) { _mm256_maskstore_ps(p, Mask(n), v); }
};

}  // namespace
}  // namespace cliffguard::cpu
