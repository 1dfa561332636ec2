// cpu_f32_gemm_6x64__avx512: avx512 fp32 GEMM micro-kernel, 6x64 register tile.
#include "kernels/cpu/gemm_ukernel_avx512.h"

CG_DEFINE_GEMM_UKERNEL(cpu_f32_gemm_6x64__avx512, Avx512Traits, 6, 64)
