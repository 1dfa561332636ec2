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
  static CG_INLINE V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static CG_INLINE void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static CG_INLINE V LoadN(const float* p, int n) { return _mm512_maskz_loadu_ps(Mask(n), p); }
  static CG_INLINE void StoreN(float* p, V v, int n) { _mm512_mask_storeu_ps(p, Mask(n), v); }
};

}  // namespace
}  // namespace cliffguard::cpu
