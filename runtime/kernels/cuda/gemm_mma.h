// The own tensor-core GEMM as kernel variants (internal): cuda_<dtype>_gemm_mma for
// f16 and bf16 (f32 accumulation), every transpose layout, any shape, on devices of
// compute capability 8.0 and above. Parameters: bm and bn (the block's tile of C, 4
// warps of bm/2 x bn/2), stages (shared-memory pipeline depth) and split_k (blocks
// along k, summed by a second kernel through a workspace the calling thread keeps per
// stream). See gemm_mma_launch.h for the kernel.
#pragma once

#include <span>

#include "cliffguard/kernel.h"

namespace cliffguard::cuda {

// The most workspace a split-K schedule may take (split x m x n floats).
inline constexpr size_t kMmaMaxWorkspaceBytes = size_t{256} << 20;

std::span<const KernelVariant> MmaGemmVariants();

}  // namespace cliffguard::cuda
