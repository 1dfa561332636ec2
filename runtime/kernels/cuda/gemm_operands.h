// The operands of one row-major GEMM call as the CUDA kernels' C++17 launch
// boundaries take them (GemmArgs without the C++20 headers): C = alpha op(A) op(B) +
// beta C on device pointers, enqueued on `stream`.
#pragma once

#include <cstdint>

namespace cliffguard::cuda {

struct GemmOperands {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  float alpha = 1.0f, beta = 0.0f;
  void* stream = nullptr;  // cudaStream_t
};

}  // namespace cliffguard::cuda
