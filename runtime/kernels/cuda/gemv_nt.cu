#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/gemv_nt_launch.h"

namespace cliffguard::cuda {
namespace {

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// acc[j][r] += A[row0 + r][p .. p + V) . bv[j][0 .. V): one 16-byte step of every row.
template <typename T, int MT, int COLS>
__device__ __forceinline__ void AccumulateStep(const T* __restrict__ a, int64_t lda, int row0, int rows, int p,
                                               const T (&bv)[COLS][16 / sizeof(T)], float (&acc)[COLS][MT]) {
  constexpr int V = 16 / sizeof(T);
#pragma unroll
  for (int r = 0; r < MT; ++r) {
    if (r < rows) {
      alignas(16) T av[V];
      *reinterpret_cast<uint4*>(av) = __ldg(reinterpret_cast<const uint4*>(a + (row0 + r) * lda + p));
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float x = ToFloat(av[v]);
#pragma unroll
        for (int j = 0; j < COLS; ++j) acc[j][r] = fmaf(x, ToFloat(bv[j][v]), acc[j][r]);
      }
    }
  }
}

// The 16-byte step of B's columns col0 .. col0 + COLS at k offset p (zeros past `cols`).
template <typename T, int COLS>
__device__ __forceinline__ void LoadStep(const T* __restrict__ b, int64_t ldb, int64_t col0, int cols, int p,
                                         T (&bv)[COLS][16 / sizeof(T)]) {
#pragma unroll
  for (int j = 0; j < COLS; ++j)
    *reinterpret_cast<uint4*>(bv[j]) =
        j < cols ? __ldcs(reinterpret_cast<const uint4*>(b + (col0 + j) * ldb + p)) : make_uint4(0, 0, 0, 0);
}

// One warp per `COLS` consecutive output columns, MT rows of A per block row.
// VEC: 16-byte loads (k, lda, ldb multiples of 16 / sizeof(T), A and B aligned); the
// weights stream from memory, so several k steps' loads are issued before their
// FMAs (kUnroll) to keep enough bytes in flight per warp.
template <typename T, int MT, int COLS, bool VEC>
__global__ void GemvNtKernel(const T* __restrict__ a, int64_t lda, const T* __restrict__ b, int64_t ldb,
                             T* __restrict__ c, int64_t ldc, int m, int n, int k, float alpha, float beta) {
  const int lane = threadIdx.x & 31;
  const int64_t col0 = (int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5)) * COLS;
  const int row0 = blockIdx.y * MT;
  if (col0 >= n) return;
  float acc[COLS][MT];
#pragma unroll
  for (int j = 0; j < COLS; ++j)
#pragma unroll
    for (int r = 0; r < MT; ++r) acc[j][r] = 0.0f;
  const int rows = m - row0 < MT ? m - row0 : MT;
  const int cols = n - col0 < COLS ? int(n - col0) : COLS;
  if constexpr (VEC) {
    constexpr int V = 16 / sizeof(T);
    constexpr int kStep = 32 * V;
    constexpr int kUnroll = COLS * MT <= 8 ? 4 : 2;
    int p = lane * V;
    for (; p + (kUnroll - 1) * kStep < k; p += kUnroll * kStep) {
      alignas(16) T bv[kUnroll][COLS][V];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) LoadStep<T, COLS>(b, ldb, col0, cols, p + u * kStep, bv[u]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) AccumulateStep<T, MT, COLS>(a, lda, row0, rows, p + u * kStep, bv[u], acc);
    }
    for (; p < k; p += kStep) {
      alignas(16) T bv[COLS][V];
      LoadStep<T, COLS>(b, ldb, col0, cols, p, bv);
      AccumulateStep<T, MT, COLS>(a, lda, row0, rows, p, bv, acc);
    }
  } else {
    for (int p = lane; p < k; p += 32) {
      float bv[COLS];
#pragma unroll
      for (int j = 0; j < COLS; ++j) bv[j] = j < cols ? ToFloat(b[(col0 + j) * ldb + p]) : 0.0f;
#pragma unroll
      for (int r = 0; r < MT; ++r)
        if (r < rows) {
          const float x = ToFloat(a[(row0 + r) * lda + p]);
#pragma unroll
          for (int j = 0; j < COLS; ++j) acc[j][r] = fmaf(x, bv[j], acc[j][r]);
        }
    }
  }
#pragma unroll
  for (int j = 0; j < COLS; ++j)
#pragma unroll
    for (int r = 0; r < MT; ++r)
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[j][r] += __shfl_xor_sync(0xffffffffu, acc[j][r], off);
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < MT; ++r)
#pragma unroll
    for (int j = 0; j < COLS; ++j)
      if (r < rows && j < cols) {
        T* out = c + (row0 + r) * ldc + col0 + j;
        const float prior = beta != 0.0f ? beta * ToFloat(*out) : 0.0f;
        *out = FromFloat<T>(alpha * acc[j][r] + prior);
      }
}

template <typename T, int MT, int COLS>
cudaError_t LaunchTyped(const GemvNtLaunch& l) {
  const GemmOperands& o = l.op;
  constexpr int64_t V = 16 / sizeof(T);
  const bool vec = o.k % V == 0 && o.lda % V == 0 && o.ldb % V == 0 &&
                   (reinterpret_cast<uintptr_t>(o.a) | reinterpret_cast<uintptr_t>(o.b)) % 16 == 0;
  const int64_t cols_per_block = int64_t(l.warps) * COLS;
  const dim3 grid(unsigned((o.n + cols_per_block - 1) / cols_per_block), unsigned((o.m + MT - 1) / MT));
  const dim3 block(unsigned(32 * l.warps));
  auto* s = static_cast<cudaStream_t>(o.stream);
  const T* a = static_cast<const T*>(o.a);
  const T* b = static_cast<const T*>(o.b);
  T* c = static_cast<T*>(o.c);
  if (vec)
    GemvNtKernel<T, MT, COLS, true><<<grid, block, 0, s>>>(a, o.lda, b, o.ldb, c, o.ldc, int(o.m), int(o.n), int(o.k),
                                                           o.alpha, o.beta);
  else
    GemvNtKernel<T, MT, COLS, false><<<grid, block, 0, s>>>(a, o.lda, b, o.ldb, c, o.ldc, int(o.m), int(o.n), int(o.k),
                                                            o.alpha, o.beta);
  return cudaGetLastError();
}

template <typename T, int MT>
cudaError_t LaunchCols(const GemvNtLaunch& l) {
  switch (l.cols) {
    case 1: return LaunchTyped<T, MT, 1>(l);
    case 2: return LaunchTyped<T, MT, 2>(l);
    case 4: return LaunchTyped<T, MT, 4>(l);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t LaunchRows(const GemvNtLaunch& l) {
  switch (l.m_tile) {
    case 1: return LaunchCols<T, 1>(l);
    case 2: return LaunchCols<T, 2>(l);
    case 4: return LaunchCols<T, 4>(l);
    case 8: return LaunchCols<T, 8>(l);
    case 16: return LaunchCols<T, 16>(l);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int LaunchGemvNt(const GemvNtLaunch& l) {
  switch (l.type) {
    case GemvType::kF32: return int(LaunchRows<float>(l));
    case GemvType::kF16: return int(LaunchRows<__half>(l));
    case GemvType::kBF16: return int(LaunchRows<__nv_bfloat16>(l));
  }
  return int(cudaErrorInvalidValue);
}

}  // namespace cliffguard::cuda
