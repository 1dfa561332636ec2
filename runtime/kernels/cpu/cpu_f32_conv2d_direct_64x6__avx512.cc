// cpu_f32_conv2d_direct_64x6__avx512: avx512 fp32 direct conv2d, 64 output channels
// (4 zmm) x 6 output pixels per register tile.
#include "kernels/cpu/conv2d_direct_impl.h"
#include "kernels/cpu/gemm_ukernel_avx512.h"

CG_DEFINE_CONV2D_DIRECT_TILE(cpu_f32_conv2d_direct_64x6__avx512, Avx512Traits, 64, 6)
