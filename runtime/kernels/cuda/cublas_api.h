// cuBLAS and cuBLASLt loaded at first use (dlopen), not linked: the two libraries
// are over 500 MB and add about a quarter second to every process start, which a
// CPU-only process (a serving binary, each `cliffguard` command, each measurement
// worker) must not pay. Internal.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>

namespace cliffguard::cuda {

#define CG_CUBLAS_FUNCTIONS(X) \
  X(cublasCreate_v2)           \
  X(cublasDestroy_v2)          \
  X(cublasSetStream_v2)        \
  X(cublasGemmEx)              \
  X(cublasGetStatusString)

#define CG_CUBLASLT_FUNCTIONS(X)           \
  X(cublasLtCreate)                        \
  X(cublasLtDestroy)                       \
  X(cublasLtGetVersion)                    \
  X(cublasLtMatmul)                        \
  X(cublasLtMatmulAlgoCheck)               \
  X(cublasLtMatmulAlgoConfigGetAttribute)  \
  X(cublasLtMatmulAlgoConfigSetAttribute)  \
  X(cublasLtMatmulAlgoGetHeuristic)        \
  X(cublasLtMatmulAlgoInit)                \
  X(cublasLtMatmulDescCreate)              \
  X(cublasLtMatmulDescDestroy)             \
  X(cublasLtMatmulDescSetAttribute)        \
  X(cublasLtMatmulPreferenceCreate)        \
  X(cublasLtMatmulPreferenceDestroy)       \
  X(cublasLtMatmulPreferenceSetAttribute)  \
  X(cublasLtMatrixLayoutCreate)            \
  X(cublasLtMatrixLayoutDestroy)

// Each function's pointer type; cublasGemmEx's is the C API's signature (C++ also
// sees an overload taking cudaDataType for the compute type).
#define CG_CUBLAS_FN_TYPE(name) using CublasFnOf_##name = decltype(&::name);
CG_CUBLASLT_FUNCTIONS(CG_CUBLAS_FN_TYPE)
using CublasFnOf_cublasCreate_v2 = decltype(&::cublasCreate_v2);
using CublasFnOf_cublasDestroy_v2 = decltype(&::cublasDestroy_v2);
using CublasFnOf_cublasSetStream_v2 = decltype(&::cublasSetStream_v2);
using CublasFnOf_cublasGetStatusString = decltype(&::cublasGetStatusString);
using CublasFnOf_cublasGemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                   const void*, const void*, cudaDataType, int, const void*,
                                                   cudaDataType, int, const void*, void*, cudaDataType, int,
                                                   cublasComputeType_t, cublasGemmAlgo_t);
#undef CG_CUBLAS_FN_TYPE

// The functions this build calls, resolved from libcublas.so.N and libcublasLt.so.N
// (N: the major version of the headers built against).
struct CublasApi {
#define CG_CUBLAS_MEMBER(name) CublasFnOf_##name name = nullptr;
  CG_CUBLAS_FUNCTIONS(CG_CUBLAS_MEMBER)
  CG_CUBLASLT_FUNCTIONS(CG_CUBLAS_MEMBER)
#undef CG_CUBLAS_MEMBER
};

// Loads both libraries once (thread-safe). nullptr when they cannot be loaded, and
// `error` (when given) says why: the library or the symbol not found.
const CublasApi* LoadCublas(std::string* error = nullptr);

}  // namespace cliffguard::cuda
