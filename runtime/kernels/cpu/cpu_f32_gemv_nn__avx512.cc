// cpu_f32_gemv_nn__avx512: avx512 fp32 small-m GEMM (m <= 16), B stored k x n, read once in place.
#include "kernels/cpu/gemm_ukernel_avx512.h"
#include "kernels/cpu/gemv_impl.h"

CG_DEFINE_GEMV_KERNEL(cpu_f32_gemv_nn__avx512, Avx512Traits, false)
