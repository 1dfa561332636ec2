// The packed, cache-blocked fp32 GEMM driver shared by every CPU variant
// (GotoBLAS/BLIS loop structure; ISA-free: it reaches the ISA only through the
// variant's micro-kernel pointer).
//
//   for jc in N step nc            (par=0 splits N across threads)
//     for pc in K step kc          pack B[pc:+kc, jc:+nc] into nr-wide panels
//       for ic in M step mc        (par=1 splits M across threads)
//         pack A[ic:+mc, pc:+kc] into mr-tall panels
//         for jr in nc step nr     (par=2 splits these micro-panels)
//           for ir in mc step mr   micro-kernel on one mr x nr tile of C
//
// Thread-safety: reentrant. Scratch memory is owned by the calling thread
// (thread_local, 64-byte aligned, grown on demand and then reused), so after
// warm-up a call allocates nothing.
#pragma once

#include <cstdint>

#include "cliffguard/kernel.h"
#include "kernels/cpu/gemm_params.h"
#include "kernels/cpu/gemm_ukernel.h"

namespace cliffguard::cpu {

struct GemmBlocking {
  int64_t mc, kc, nc;  // rows of A, depth, columns of B per block
  int par;             // GemmPar
  int threads;         // threads requested (the pool may grant fewer)
  int unroll_k;        // micro-kernel k-loop unroll: 1, 2, 4, 8
  int prefetch;        // prefetch distance in k iterations, 0 = off
  bool pack_a;         // false: A read in place by the micro-kernel
  bool pack_b;         // false: B read in place (only when not transposed)
};

GemmBlocking BlockingFromParams(const ParamValues& p);

// Runs C = alpha * op(A) * op(B) + beta * C for validated args. mc % mr == 0 and
// nc % nr == 0; pack_b == false requires !args.trans_b. Returns kInternal only
// when scratch memory cannot be allocated.
Status GemmF32(const GemmArgs& args, const GemmBlocking& blk, UkernelFn ukernel, int mr, int nr);

}  // namespace cliffguard::cpu
