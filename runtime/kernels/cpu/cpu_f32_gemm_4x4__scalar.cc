// cpu_f32_gemm_4x4__scalar: Portable (no ISA flags) fp32 GEMM micro-kernel, 4x4 register tile.
#include "kernels/cpu/gemm_ukernel_impl.h"

CG_DEFINE_GEMM_UKERNEL(cpu_f32_gemm_4x4__scalar, ScalarTraits, 4, 4)
