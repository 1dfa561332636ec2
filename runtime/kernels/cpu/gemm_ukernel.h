// The contract between the GEMM driver (ISA-free) and the micro-kernels (one
// translation unit per variant, compiled with that variant's ISA flags).
#pragma once

#include <cstdint>

namespace cliffguard::cpu {

// One register tile: C[0:m, 0:n] = alpha * A * B + beta * C over a depth of kc.
//   A element (i, p) is a[i * a_rs + p * a_ks], i < m. Packed A panels have
//     a_rs == 1 and a_ks == mr (the micro-kernel's fast path); A read in place has
//     a_rs == lda, a_ks == 1 (not transposed) or a_rs == 1, a_ks == lda.
//   B element (p, j) is b[p * b_ks + j]; all nr columns are readable (packed panels
//     are zero padded), only the first n are stored.
//   beta == 0: C is not read. m <= mr, n <= nr, m, n, kc >= 1.
//   unroll_k: k-loop unroll (1, 2, 4 or 8); prefetch: distance in k iterations of
//   software prefetches of A and B (0 = off).
//   next_b, next_b_lines: cache lines (64 bytes each, from next_b on) of the B panel
//   the driver runs next, prefetched into L2 spread over this call's k loop, so that
//   a panel of constant weights cold in memory arrives while the one before it is in
//   use (0 lines: none).
struct UkArgs {
  const float* a;
  int64_t a_rs, a_ks;
  const float* b;
  int64_t b_ks;
  float* c;
  int64_t ldc;
  int64_t kc;
  int m, n;
  float alpha, beta;
  int unroll_k, prefetch;
  const char* next_b;
  int64_t next_b_lines;
};

using UkernelFn = void (*)(const UkArgs&);

#define CG_KERNEL(isa, name, mr, nr) void name##_ukernel(const UkArgs& args);
#include "kernels/cpu/gemm_f32.inc"

}  // namespace cliffguard::cpu
