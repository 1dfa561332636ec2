# CPU kernel sources, split by the ISA flags they are compiled with (STYLE H11).
# Absolute paths (CMAKE_CURRENT_LIST_DIR). One micro-kernel TU per row of gemm_f32.inc.
set(CG_CPU_KERNEL_SRCS
  ${CMAKE_CURRENT_LIST_DIR}/cpu_kernels.cc
  ${CMAKE_CURRENT_LIST_DIR}/gemm_driver.cc
  ${CMAKE_CURRENT_LIST_DIR}/thread_pool.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu_f32_gemm_4x4__scalar.cc)
set(CG_AVX2_SRCS
  ${CMAKE_CURRENT_LIST_DIR}/cpu_f32_gemm_6x16__avx2.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu_f32_gemm_4x24__avx2.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu_f32_gemm_8x8__avx2.cc)
set(CG_AVX512_SRCS
  ${CMAKE_CURRENT_LIST_DIR}/cpu_f32_gemm_14x32__avx512.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu_f32_gemm_6x64__avx512.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu_f32_gemm_8x32__avx512.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu_f32_gemm_16x16__avx512.cc)
