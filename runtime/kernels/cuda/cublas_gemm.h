// cuBLAS and cuBLASLt as CUDA GEMM kernel variants (internal).
//
// - cuda_<dtype>_gemm_cublas: cublasGemmEx with its own algorithm choice, what an
//   untuned stack runs; the built-in default on a miss. No parameters.
// - cuda_<dtype>_gemm_cublaslt: one cuBLASLt algorithm, named by its configuration
//   attributes (algorithm id, tile, stages, split-K, reduction scheme, CTA swizzle,
//   custom option, inner and cluster shape) and the cuBLAS version it was found
//   with: the `cublas` parameter accepts only the version loaded in this process,
//   so a stored schedule from another version is rejected as an entry. Its
//   candidates are the heuristic's results for the key.
//
// dtypes f32, f16, bf16: inputs and output in the dtype, f32 accumulation and f32
// alpha/beta (f32 computes in full f32, not TF32). Row-major operands as GemmArgs
// states, device pointers, the call enqueued on args.stream (null: the legacy
// default stream) of the calling thread's current device, never synchronised. Each
// calling thread keeps its cuBLAS handles, cuBLASLt descriptors per shape and
// algorithm, and a cuBLASLt workspace per stream, made on its first call with them;
// its handles belong to the device current at that first call (one device per
// serving thread, as with cuBLAS).
#pragma once

#include <span>
#include <string>

#include "cliffguard/kernel.h"

namespace cliffguard::cuda {

std::span<const KernelVariant> CublasGemmVariants();

// The cuBLAS version a cuBLASLt schedule's `cublas` parameter accepts (e.g. 130100
// for 13.1.0): the loaded library's once LoadCublasForDevices succeeded, else the
// version of the headers this build used.
int32_t LoadedCublasVersion();

// Loads cuBLAS (cublas_api.h) and makes its version the one the `cublas` parameter
// accepts. The device probe calls it when it finds a GPU, before any schedule for
// one is checked; false (and why in `error`) when the libraries cannot be loaded.
bool LoadCublasForDevices(std::string* error);

// Bytes of the cuBLASLt workspace per (thread, stream): the heuristic's limit.
inline constexpr size_t kCublasLtWorkspaceBytes = size_t{32} << 20;
// The pointer alignment the heuristic is told to assume (its candidates run on any
// operands aligned to it).
inline constexpr uint32_t kCublasLtMinAlignment = 16;

// Calls of a cuBLASLt schedule on this thread that ran cublasGemmEx instead: the
// algorithm does not run those arguments (cublasLtMatmulAlgoCheck refused the
// leading dimensions; warned once per shape) or an operand is not aligned to
// kCublasLtMinAlignment. A hit stays correct; this counts what it cost.
uint64_t CublasLtFallbacksOnThisThread();

}  // namespace cliffguard::cuda
