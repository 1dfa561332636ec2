// The own GEMV-style CUDA kernel for decode GEMMs as kernel variants (internal):
// cuda_<dtype>_gemv_nt for f32, f16 and bf16, layout nt (weights stored n x k),
// m <= 16; parameters m_tile (rows of A per block row), cols (output columns per
// warp) and warps (per block). See gemv_nt_launch.h for the kernel.
#pragma once

#include <span>

#include "cliffguard/kernel.h"

namespace cliffguard::cuda {

inline constexpr int64_t kGemvMaxM = 16;

std::span<const KernelVariant> GemvNtVariants();

}  // namespace cliffguard::cuda
