// cpu_f32_gemv_tall__avx512: avx512 fp32 GEMM with n <= 16 columns of C in broadcast form, A read once in place.
#include "kernels/cpu/gemm_ukernel_avx512.h"
#include "kernels/cpu/gemv_impl.h"

CG_DEFINE_GEMV_TALL_KERNEL(cpu_f32_gemv_tall__avx512, Avx512Traits)
