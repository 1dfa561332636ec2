// cpu_f32_gemm_4x24__avx2: avx2 fp32 GEMM micro-kernel, 4x24 register tile.
#include "kernels/cpu/gemm_ukernel_avx2.h"

CG_DEFINE_GEMM_UKERNEL(cpu_f32_gemm_4x24__avx2, Avx2Traits, 4, 24)
