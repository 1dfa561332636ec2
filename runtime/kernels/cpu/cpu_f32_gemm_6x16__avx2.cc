// cpu_f32_gemm_6x16__avx2: avx2 fp32 GEMM micro-kernel, 6x16 register tile.
#include "kernels/cpu/gemm_ukernel_avx2.h"

CG_DEFINE_GEMM_UKERNEL(cpu_f32_gemm_6x16__avx2, Avx2Traits, 6, 16)
