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
//   next_a, next_a_lines: with prefetch == 0, then that many lines of the walk
//   *next_a (the source of the A block the driver packs next), which the call
//   advances past them (0 lines: none, and the k loop is the one without it).
//
// A walk over the cache lines of a rectangle: rows of row_lines lines, `stride`
// bytes apart; `line` is the next line, row_left the lines left in its row.
struct UkLines {
  const char* line = nullptr;
  int64_t row_left = 0, row_lines = 0, stride = 0;
  // The line after `line`: the next in its row, else the first of the next row.
  const char* Step() {
    const char* at = line;
    line += 64;
    if (--row_left == 0) {
      line += stride - row_lines * 64;
      row_left = row_lines;
    }
    return at;
  }
};

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
  UkLines* next_a;
  int64_t next_a_lines;
};

using UkernelFn = void (*)(const UkArgs&);

// Rows of B as stored into a panel of the variant's nr columns, in its ISA (the
// driver packs B not transposed with it): dst[p * nr + j] = src[p * ld + j] for
// p < rows, j < n, and 0 for n <= j < nr; 1 <= n <= nr, src readable for n floats
// a row.
using PackRowsFn = void (*)(float* dst, const float* src, int64_t ld, int64_t rows, int n);

#define CG_KERNEL(isa, name, mr, nr)          \
  void name##_ukernel(const UkArgs& args);   \
  void name##_pack_rows(float* dst, const float* src, int64_t ld, int64_t rows, int n);
#include "kernels/cpu/gemm_f32.inc"

}  // namespace cliffguard::cpu
