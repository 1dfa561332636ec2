// cpu_f32_gemv_packed__avx2: avx2 fp32 small-m GEMM (m <= 8) on constant weights packed into panels, either layout.
#include "kernels/cpu/gemm_ukernel_avx2.h"
#include "kernels/cpu/gemv_impl.h"

CG_DEFINE_GEMV_PACKED_KERNEL(cpu_f32_gemv_packed__avx2, Avx2Traits)
