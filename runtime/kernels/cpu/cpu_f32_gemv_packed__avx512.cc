// cpu_f32_gemv_packed__avx512: avx512 fp32 small-m GEMM (m <= 8) on constant weights packed into panels, either layout.
#include "kernels/cpu/gemm_ukernel_avx512.h"
#include "kernels/cpu/gemv_impl.h"

CG_DEFINE_GEMV_PACKED_KERNEL(cpu_f32_gemv_packed__avx512, Avx512Traits)
