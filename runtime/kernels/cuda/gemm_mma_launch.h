// C++17 boundary of the own tensor-core GEMM (gemm_mma.cu): C = alpha op(A) op(B) +
// beta C, row-major, f16 or bf16 inputs and output, f32 accumulation, any of the four
// transpose layouts. A block of 4 warps (2 x 2) computes a bm x bn tile of C with
// mma.sync m16n8k16, its operands staged through `stages` shared-memory buffers of
// k = 32 (cp.async 16-byte copies where rows are aligned, element copies otherwise,
// read into fragments with ldmatrix). split > 1 splits k across blocks: each writes
// its f32 partial tile to `workspace` (split x m x n floats), and a second kernel sums
// them into C.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/gemm_operands.h"

namespace cliffguard::cuda {

enum class MmaType : int { kF16 = 1, kBF16 = 2 };

struct MmaGemmLaunch {
  MmaType type = MmaType::kF16;
  int bm = 128, bn = 128, stages = 3, split = 1;  // bm, bn in {64, 128}; stages in {2, 3, 4}
  GemmOperands op;
  float* workspace = nullptr;  // split > 1: MmaWorkspaceBytes(m, n, split) bytes on the device
};

inline constexpr int kMmaTileK = 32;

// Bytes of shared memory a block of this tile and pipeline depth takes.
size_t MmaSharedBytes(int bm, int bn, int stages, bool trans_a, bool trans_b);

inline size_t MmaWorkspaceBytes(int64_t m, int64_t n, int split) {
  return split > 1 ? size_t(split) * size_t(m) * size_t(n) * sizeof(float) : 0;
}

// Enqueues the kernel (and the split-K sum); returns the cudaError_t of the launch
// (0: success).
int LaunchMmaGemm(const MmaGemmLaunch& l);

}  // namespace cliffguard::cuda
