#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/gemm_mma_launch.h"

namespace cliffguard::cuda {
namespace {

constexpr int kBK = kMmaTileK;
constexpr int kPad = 8;        // elements added to each shared row: the 8 rows of an ldmatrix hit distinct banks
constexpr int kThreads = 128;  // 2 x 2 warps

// Shared-memory geometry of one stage: A and B tiles, each stored with its
// contiguous global dimension contiguous (A: k unless transposed; B: n unless stored
// n x k), rows padded by kPad.
template <int BM, int BN, bool TA, bool TB>
struct Geometry {
  static constexpr int kAPitch = TA ? BM + kPad : kBK + kPad;
  static constexpr int kBPitch = TB ? kBK + kPad : BN + kPad;
  static constexpr int kAElems = TA ? kBK * kAPitch : BM * kAPitch;
  static constexpr int kBElems = TB ? BN * kBPitch : kBK * kBPitch;
  static constexpr int kStageElems = kAElems + kBElems;
};

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; src_bytes = 0 writes zeros.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `pending` (0..2) committed groups are still in flight.
__device__ __forceinline__ void CpAsyncWait(int pending) {
  if (pending >= 2) {
    asm volatile("cp.async.wait_group 2;\n" ::);
  } else if (pending == 1) {
    asm volatile("cp.async.wait_group 1;\n" ::);
  } else {
    asm volatile("cp.async.wait_group 0;\n" ::);
  }
}

__device__ __forceinline__ void Ldmatrix4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(p)));
}
__device__ __forceinline__ void Ldmatrix4Trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(p)));
}

// d += a (16 x 16, row) * b (16 x 8, col), f32 accumulators.
template <typename T>
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void Mma<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void Mma<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// R rows x C chunks of 8 elements of a row-major global matrix (leading dimension
// ld) from (row0, col0) into shared memory (row pitch `pitch`); elements at or past
// (rows, cols) are zero. vec: whole chunks by cp.async (rows and the base 16-byte
// aligned, cols a multiple of 8); else element by element, synchronously.
template <int R, int C>
__device__ __forceinline__ void LoadTile(uint16_t* s, int pitch, const uint16_t* g, int64_t ld, int64_t row0,
                                         int64_t col0, int64_t rows, int64_t cols, bool vec) {
  static_assert(R * C % kThreads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int i = 0; i < R * C / kThreads; ++i) {
    const int idx = int(threadIdx.x) + i * kThreads;
    const int r = idx / C, c = (idx % C) * 8;
    const int64_t gr = row0 + r, gc = col0 + c;
    uint16_t* dst = s + r * pitch + c;
    if (vec) {
      const bool in = gr < rows && gc < cols;
      CpAsync16(dst, in ? g + gr * ld + gc : g, in ? 16 : 0);
    } else {
      alignas(16) uint16_t v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = gr < rows && gc + e < cols ? g[gr * ld + gc + e] : uint16_t(0);
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
    }
  }
}

// One block: a BM x BN tile of C over k tiles [blockIdx.z * tiles_per_split, ...).
// ws == nullptr: C = alpha acc + beta C; else the f32 partial tile goes to
// ws[blockIdx.z][m][n].
template <typename T, int BM, int BN, bool TA, bool TB>
__global__ void __launch_bounds__(kThreads)
    MmaGemmKernel(const uint16_t* __restrict__ a, int64_t lda, const uint16_t* __restrict__ b, int64_t ldb,
                  T* __restrict__ c, int64_t ldc, float* __restrict__ ws, int m, int n, int k, int stages,
                  int tiles_per_split, float alpha, float beta, bool vec) {
  using G = Geometry<BM, BN, TA, TB>;
  constexpr int WM = BM / 2, WN = BN / 2, MT = WM / 16, NT = WN / 8;
  extern __shared__ __align__(16) uint16_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = warp >> 1, wn = warp & 1;
  const int64_t m0 = int64_t(blockIdx.y) * BM, n0 = int64_t(blockIdx.x) * BN;
  const int k_tiles = (k + kBK - 1) / kBK;
  const int kt0 = int(blockIdx.z) * tiles_per_split;
  const int kt1 = min(k_tiles, kt0 + tiles_per_split);
  const int tiles = max(0, kt1 - kt0);
  const int64_t k_end = min(int64_t(k), int64_t(kt1) * kBK);

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  auto load = [&](int t, int stage) {
    uint16_t* sa = smem + stage * G::kStageElems;
    uint16_t* sb = sa + G::kAElems;
    const int64_t kb = int64_t(kt0 + t) * kBK;
    if constexpr (!TA) {
      LoadTile<BM, kBK / 8>(sa, G::kAPitch, a, lda, m0, kb, m, k_end, vec);
    } else {
      LoadTile<kBK, BM / 8>(sa, G::kAPitch, a, lda, kb, m0, k_end, m, vec);
    }
    if constexpr (TB) {
      LoadTile<BN, kBK / 8>(sb, G::kBPitch, b, ldb, n0, kb, n, k_end, vec);
    } else {
      LoadTile<kBK, BN / 8>(sb, G::kBPitch, b, ldb, kb, n0, k_end, n, vec);
    }
  };

  for (int s = 0; s < stages - 1; ++s) {
    if (s < tiles) load(s, s);
    CpAsyncCommit();
  }
  const int q = lane >> 3, r8 = lane & 7;
  for (int t = 0; t < tiles; ++t) {
    CpAsyncWait(stages - 2);
    __syncthreads();  // tile t is in; every warp is done with the stage refilled below
    const int next = t + stages - 1;
    if (next < tiles) load(next, next % stages);
    CpAsyncCommit();
    const uint16_t* sa = smem + (t % stages) * G::kStageElems;
    const uint16_t* sb = sa + G::kAElems;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t af[MT][4], bf[NT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int rb = wm * WM + mt * 16;
        if constexpr (!TA) {
          Ldmatrix4(af[mt], sa + (rb + (lane & 15)) * G::kAPitch + kk + (lane >> 4) * 8);
        } else {
          Ldmatrix4Trans(af[mt], sa + (kk + r8 + (q >> 1) * 8) * G::kAPitch + rb + (q & 1) * 8);
        }
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        const int cb = wn * WN + np * 16;
        uint32_t x[4];
        if constexpr (TB) {
          Ldmatrix4(x, sb + (cb + r8 + (q >> 1) * 8) * G::kBPitch + kk + (q & 1) * 8);
        } else {
          Ldmatrix4Trans(x, sb + (kk + r8 + (q & 1) * 8) * G::kBPitch + cb + (q >> 1) * 8);
        }
        bf[2 * np][0] = x[0];
        bf[2 * np][1] = x[1];
        bf[2 * np + 1][0] = x[2];
        bf[2 * np + 1][1] = x[3];
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) Mma<T>(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
    }
  }
  CpAsyncWait(0);

  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = m0 + wm * WM + mt * 16 + g + h * 8;
        if (row >= m) continue;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t col = n0 + wn * WN + nt * 8 + tq * 2 + e;
          if (col >= n) continue;
          const float v = acc[mt][nt][h * 2 + e];
          if (ws) {
            ws[(int64_t(blockIdx.z) * m + row) * n + col] = v;
          } else {
            T* out = c + row * ldc + col;
            *out = FromFloat<T>(beta != 0.0f ? alpha * v + beta * ToFloat(*out) : alpha * v);
          }
        }
      }
}

// C = alpha * (the sum of the split partials) + beta C.
template <typename T>
__global__ void SplitKSum(const float* __restrict__ ws, int split, T* __restrict__ c, int64_t ldc, int m, int n,
                          float alpha, float beta) {
  const int64_t total = int64_t(m) * n;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  float s = 0.0f;
  for (int z = 0; z < split; ++z) s += ws[z * total + i];
  T* out = c + (i / n) * ldc + i % n;
  *out = FromFloat<T>(beta != 0.0f ? alpha * s + beta * ToFloat(*out) : alpha * s);
}

template <typename T, int BM, int BN, bool TA, bool TB>
cudaError_t LaunchTyped(const MmaGemmLaunch& l) {
  const GemmOperands& o = l.op;
  using G = Geometry<BM, BN, TA, TB>;
  auto* kernel = &MmaGemmKernel<T, BM, BN, TA, TB>;
  const int smem = l.stages * G::kStageElems * int(sizeof(uint16_t));
  // Above 48 KiB a kernel must opt in, once per device; a serving thread stays on one
  // device (as with its cuBLAS handles), so once per thread and instantiation.
  thread_local int opted_in = 48 << 10;
  if (smem > opted_in) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    opted_in = smem;
  }
  const auto address = reinterpret_cast<uintptr_t>(o.a) | reinterpret_cast<uintptr_t>(o.b);
  const bool vec = address % 16 == 0 && o.lda % 8 == 0 && o.ldb % 8 == 0 && (TA ? o.m : o.k) % 8 == 0 &&
                   (TB ? o.k : o.n) % 8 == 0;
  const int k_tiles = int((o.k + kBK - 1) / kBK);
  const int per_split = (k_tiles + l.split - 1) / l.split;
  const dim3 grid(unsigned((o.n + BN - 1) / BN), unsigned((o.m + BM - 1) / BM), unsigned(l.split));
  auto* s = static_cast<cudaStream_t>(o.stream);
  T* c = static_cast<T*>(o.c);
  kernel<<<grid, kThreads, size_t(smem), s>>>(static_cast<const uint16_t*>(o.a), o.lda,
                                              static_cast<const uint16_t*>(o.b), o.ldb, c, o.ldc,
                                              l.split > 1 ? l.workspace : nullptr, int(o.m), int(o.n), int(o.k),
                                              l.stages, per_split, o.alpha, o.beta, vec);
  if (l.split > 1) {
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    const int64_t total = o.m * o.n;
    SplitKSum<T><<<unsigned((total + 255) / 256), 256, 0, s>>>(l.workspace, l.split, c, o.ldc, int(o.m), int(o.n),
                                                               o.alpha, o.beta);
  }
  return cudaGetLastError();
}

template <typename T, int BM, int BN>
cudaError_t LaunchLayout(const MmaGemmLaunch& l) {
  const GemmOperands& o = l.op;
  if (o.trans_a) return o.trans_b ? LaunchTyped<T, BM, BN, true, true>(l) : LaunchTyped<T, BM, BN, true, false>(l);
  return o.trans_b ? LaunchTyped<T, BM, BN, false, true>(l) : LaunchTyped<T, BM, BN, false, false>(l);
}

template <typename T>
cudaError_t LaunchTile(const MmaGemmLaunch& l) {
  if (l.bm == 128) return l.bn == 128 ? LaunchLayout<T, 128, 128>(l) : LaunchLayout<T, 128, 64>(l);
  return l.bn == 128 ? LaunchLayout<T, 64, 128>(l) : LaunchLayout<T, 64, 64>(l);
}

template <int BM, int BN>
size_t SharedBytes(int stages, bool ta, bool tb) {
  const int e = ta ? (tb ? Geometry<BM, BN, true, true>::kStageElems : Geometry<BM, BN, true, false>::kStageElems)
                   : (tb ? Geometry<BM, BN, false, true>::kStageElems : Geometry<BM, BN, false, false>::kStageElems);
  return size_t(stages) * size_t(e) * sizeof(uint16_t);
}

}  // namespace

size_t MmaSharedBytes(int bm, int bn, int stages, bool trans_a, bool trans_b) {
  if (bm == 128)
    return bn == 128 ? SharedBytes<128, 128>(stages, trans_a, trans_b) : SharedBytes<128, 64>(stages, trans_a, trans_b);
  return bn == 128 ? SharedBytes<64, 128>(stages, trans_a, trans_b) : SharedBytes<64, 64>(stages, trans_a, trans_b);
}

int LaunchMmaGemm(const MmaGemmLaunch& l) {
  if ((l.bm != 64 && l.bm != 128) || (l.bn != 64 && l.bn != 128) || l.stages < 2 || l.stages > 4 || l.split < 1 ||
      (l.split > 1 && l.workspace == nullptr))
    return int(cudaErrorInvalidValue);
  return int(l.type == MmaType::kBF16 ? LaunchTile<__nv_bfloat16>(l) : LaunchTile<__half>(l));
}

}  // namespace cliffguard::cuda
