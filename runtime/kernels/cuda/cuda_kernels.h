// The CUDA backend (internal): device probing and the CUDA kernel inventory.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "kernels/cuda/gemm_operands.h"

namespace cliffguard::cuda {

// CUDA kernel variants compiled into this build: cuBLAS and cuBLASLt (cublas_gemm.h),
// then the own kernels (gemv_nt.h, gemm_mma.h).
std::span<const KernelVariant> CudaKernelVariants();

// A call's operands as the own kernels' launch structs take them.
inline GemmOperands OperandsOf(const GemmArgs& a) {
  return {a.trans_a, a.trans_b, a.m, a.n, a.k, a.lda, a.ldb, a.ldc, a.a, a.b, a.c, a.alpha, a.beta, a.stream};
}

struct CudaProbe {
  std::vector<DeviceInfo> devices;  // one per visible GPU, arch "sm_XY"
  std::string status;               // why none: "no CUDA driver (error 35)", ...
};
// Probes the visible GPUs once. Without a driver or a GPU: no devices and the reason.
const CudaProbe& ProbeCudaDevices();

// Launches a trivial kernel on device `index` and checks its result: proves the
// driver, the runtime and this build's device code work together.
bool CudaSmokeTest(int index, std::string* error);

}  // namespace cliffguard::cuda
