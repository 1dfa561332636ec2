// C++17 boundary of the own GEMV-style kernel for decode GEMMs (gemv_nt.cu): C = alpha
// * A B^T + beta * C with A m x k (m <= 16), B stored n x k (nt), C m x n, all
// row-major, f32 accumulation. Each warp reduces `cols` output columns over all of
// k (B's rows are read once, 16 bytes per lane per load where aligned), m_tile rows
// of A per block row (A is read through L1), `warps` warps per block.
#pragma once

#include <cstdint>

namespace cliffguard::cuda {

enum class GemvType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

struct GemvNtLaunch {
  GemvType type = GemvType::kF32;
  int m_tile = 1, cols = 1, warps = 4;  // m_tile in {1, 2, 4, 8, 16}, cols in {1, 2, 4}
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  float alpha = 1.0f, beta = 0.0f;
  void* stream = nullptr;
};

// Enqueues the kernel; returns the cudaError_t of the launch (0: success).
int LaunchGemvNt(const GemvNtLaunch& l);

}  // namespace cliffguard::cuda
