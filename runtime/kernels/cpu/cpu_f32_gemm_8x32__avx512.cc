// cpu_f32_gemm_8x32__avx512: avx512 fp32 GEMM micro-kernel, 8x32 register tile.
#include "kernels/cpu/gemm_ukernel_avx512.h"

CG_DEFINE_GEMM_UKERNEL(cpu_f32_gemm_8x32__avx512, Avx512Traits, 8, 32)
