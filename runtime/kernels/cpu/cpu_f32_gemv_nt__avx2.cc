// cpu_f32_gemv_nt__avx2: avx2 fp32 small-m GEMM (m <= 16), B stored n x k, read once in place.
#include "kernels/cpu/gemm_ukernel_avx2.h"
#include "kernels/cpu/gemv_impl.h"

CG_DEFINE_GEMV_KERNEL(cpu_f32_gemv_nt__avx2, Avx2Traits, true)
