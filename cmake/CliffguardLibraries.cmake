# Optional BLAS libraries, found once for the whole build: oneDNN (libdnnl-dev) and
# OpenBLAS (libopenblas-dev). The benchmarks use them as baselines when found; the
# runtime builds them as kernel variants (cpu_f32_gemm_onednn, cpu_f32_gemm_openblas)
# under CLIFFGUARD_LIBRARY_VARIANTS:
#   AUTO  each variant whose library is found (default)
#   ON    both; configuring fails when either library is missing
#   OFF   neither (e.g. ThreadSanitizer builds: libgomp's threads are not instrumented)
#
# Sets CG_HAVE_OPENBLAS (CG_OPENBLAS_LIB, CG_CBLAS_INCLUDE), CG_HAVE_ONEDNN
# (CG_DNNL_LIB, CG_DNNL_INCLUDE, CG_GOMP_LIB) and CLIFFGUARD_WITH_OPENBLAS /
# CLIFFGUARD_WITH_ONEDNN (the variants are built). oneDNN is linked directly: its
# CMake package needs the OpenCL development files.
set(CLIFFGUARD_LIBRARY_VARIANTS "AUTO" CACHE STRING "Build the oneDNN and OpenBLAS GEMM kernel variants: AUTO, ON or OFF")
set_property(CACHE CLIFFGUARD_LIBRARY_VARIANTS PROPERTY STRINGS AUTO ON OFF)

find_library(CG_OPENBLAS_LIB NAMES openblas)
find_path(CG_CBLAS_INCLUDE NAMES cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread)
set(CG_HAVE_OPENBLAS OFF)
if(CG_OPENBLAS_LIB AND CG_CBLAS_INCLUDE)
  set(CG_HAVE_OPENBLAS ON)
endif()

# oneDNN 2.x as Debian builds it runs on OpenMP (libgomp); the runtime calls
# omp_set_num_threads itself, so it links libgomp too (not libomp: one OpenMP
# runtime per process, the one oneDNN uses).
find_library(CG_DNNL_LIB NAMES dnnl)
find_path(CG_DNNL_INCLUDE NAMES oneapi/dnnl/dnnl.hpp)
set(CG_GOMP_LIB gomp)
set(CG_HAVE_ONEDNN OFF)
if(CG_DNNL_LIB AND CG_DNNL_INCLUDE)
  set(CG_HAVE_ONEDNN ON)
endif()

set(CLIFFGUARD_WITH_OPENBLAS OFF)
set(CLIFFGUARD_WITH_ONEDNN OFF)
if(CLIFFGUARD_LIBRARY_VARIANTS STREQUAL "ON")
  if(NOT CG_HAVE_OPENBLAS OR NOT CG_HAVE_ONEDNN)
    message(FATAL_ERROR "CLIFFGUARD_LIBRARY_VARIANTS=ON needs OpenBLAS (found: ${CG_HAVE_OPENBLAS}) and oneDNN "
                        "(found: ${CG_HAVE_ONEDNN}): install libopenblas-dev and libdnnl-dev (tools/deps)")
  endif()
  set(CLIFFGUARD_WITH_OPENBLAS ON)
  set(CLIFFGUARD_WITH_ONEDNN ON)
elseif(CLIFFGUARD_LIBRARY_VARIANTS STREQUAL "AUTO")
  set(CLIFFGUARD_WITH_OPENBLAS ${CG_HAVE_OPENBLAS})
  set(CLIFFGUARD_WITH_ONEDNN ${CG_HAVE_ONEDNN})
elseif(NOT CLIFFGUARD_LIBRARY_VARIANTS STREQUAL "OFF")
  message(FATAL_ERROR "CLIFFGUARD_LIBRARY_VARIANTS='${CLIFFGUARD_LIBRARY_VARIANTS}' is not AUTO, ON or OFF")
endif()
message(STATUS "cliffguard: library kernel variants: oneDNN ${CLIFFGUARD_WITH_ONEDNN}, OpenBLAS ${CLIFFGUARD_WITH_OPENBLAS}")
