# CPU kernel sources, split by the ISA flags they are compiled with (STYLE H11).
# Absolute paths (CMAKE_CURRENT_LIST_DIR). Each row of an inventory (gemm_f32.inc,
# gemv_f32.inc, conv2d_f32.inc) names its kernel's translation unit (<name>.cc) and
# its ISA: the lists below are read from the inventories, so adding a variant is its
# source file plus its row.
set(CG_CPU_KERNEL_SRCS
  ${CMAKE_CURRENT_LIST_DIR}/cpu_kernels.cc
  ${CMAKE_CURRENT_LIST_DIR}/conv2d_kernels.cc
  ${CMAKE_CURRENT_LIST_DIR}/conv2d_driver.cc
  ${CMAKE_CURRENT_LIST_DIR}/gemm_driver.cc
  ${CMAKE_CURRENT_LIST_DIR}/gemv_driver.cc
  ${CMAKE_CURRENT_LIST_DIR}/thread_pool.cc)
set(CG_AVX2_SRCS)
set(CG_AVX512_SRCS)
# Rows that name their translation unit: CG_KERNEL, CG_GEMV, CG_GEMV_PACKED, CG_GEMV_TALL,
# CG_CONV2D_DIRECT and CG_CONV2D_REF (CG_CONV2D_GEMM rows run a GEMM micro-kernel
# compiled from its own row and have none).
foreach(inventory gemm_f32.inc gemv_f32.inc conv2d_f32.inc)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/${inventory})
  file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/${inventory} cg_rows REGEX "^CG_(KERNEL|GEMV|GEMV_PACKED|GEMV_TALL|CONV2D_DIRECT|CONV2D_REF)\\(")
  foreach(row IN LISTS cg_rows)
    if(NOT row MATCHES "^CG_[A-Z0-9_]+\\(([A-Za-z0-9]+), *([a-z0-9_]+)[,)]")
      message(FATAL_ERROR "${inventory}: cannot read the row '${row}'")
    endif()
    set(cg_src ${CMAKE_CURRENT_LIST_DIR}/${CMAKE_MATCH_2}.cc)
    if(CMAKE_MATCH_1 STREQUAL "kIsaAvx512")
      list(APPEND CG_AVX512_SRCS ${cg_src})
    elseif(CMAKE_MATCH_1 STREQUAL "kIsaAvx2")
      list(APPEND CG_AVX2_SRCS ${cg_src})
    elseif(CMAKE_MATCH_1 STREQUAL "kIsaScalar")
      list(APPEND CG_CPU_KERNEL_SRCS ${cg_src})
    else()
      message(FATAL_ERROR "${inventory}: ISA '${CMAKE_MATCH_1}' of ${CMAKE_MATCH_2} has no source list here")
    endif()
  endforeach()
endforeach()

# Library variants (cmake/CliffguardLibraries.cmake decides which are built): no ISA
# flags of their own, the libraries dispatch inside.
if(CLIFFGUARD_WITH_ONEDNN)
  list(APPEND CG_CPU_KERNEL_SRCS ${CMAKE_CURRENT_LIST_DIR}/onednn_common.cc)
  list(APPEND CG_CPU_KERNEL_SRCS ${CMAKE_CURRENT_LIST_DIR}/gemm_onednn.cc)
  list(APPEND CG_CPU_KERNEL_SRCS ${CMAKE_CURRENT_LIST_DIR}/conv2d_onednn.cc)
endif()
if(CLIFFGUARD_WITH_OPENBLAS)
  list(APPEND CG_CPU_KERNEL_SRCS ${CMAKE_CURRENT_LIST_DIR}/gemm_openblas.cc)
endif()
