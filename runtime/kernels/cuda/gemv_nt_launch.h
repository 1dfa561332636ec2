// C++17 boundary of the own GEMV-style kernel for decode GEMMs (gemv_nt.cu): C = alpha
// * A B^T + beta * C with A m x k (m <= 16), B stored n x k (nt), C m x n, all
// row-major, f32 accumulation. Each warp reduces `cols` output columns over all of
// k (B's rows are read once, 16 bytes per lane per load where aligned), m_tile rows
// of A per block row (A is read through L1), `warps` warps per block.
#pragma once

#include <cstdint>

#include "kernels/cuda/gemm_operands.h"

namespace cliffguard::cuda {

enum class GemvType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

struct GemvNtLaunch {
  GemvType type = GemvType::kF32;
  int m_tile = 1, cols = 1, warps = 4;  // m_tile in {1, 2, 4, 8, 16}, cols in {1, 2, 4}
  GemmOperands op;                      // layout nt
};

// Enqueues the kernel; returns the cudaError_t of the launch (0: success).
int LaunchGemvNt(const GemvNtLaunch& l);

}  // namespace cliffguard::cuda
