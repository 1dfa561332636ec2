// The CPU kernel inventory (internal). Rows come from gemv_f32.inc and gemm_f32.inc
// (STYLE H1), and from gemm_library.h.
#pragma once

#include <span>

#include "cliffguard/kernel.h"

namespace cliffguard::cpu {

// Every CPU kernel variant compiled into this build, fastest ISA first, then the
// library variants this build has (gemm_library.h), the portable variant last.
// Variants the host cannot run are listed too; they decline through
// VariantSupports (ISA check) and are never executed.
std::span<const KernelVariant> CpuKernelVariants();

}  // namespace cliffguard::cpu
