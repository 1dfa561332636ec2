// cpu_f32_conv2d_direct_16x6__avx2: avx2 fp32 direct conv2d, 16 output channels
// (2 ymm) x 6 output pixels per register tile.
#include "kernels/cpu/conv2d_direct_impl.h"
#include "kernels/cpu/gemm_ukernel_avx2.h"

CG_DEFINE_CONV2D_DIRECT_TILE(cpu_f32_conv2d_direct_16x6__avx2, Avx2Traits, 16, 6)
