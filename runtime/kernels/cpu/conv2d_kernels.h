// The CPU conv2d kernel inventory (internal): every conv2d variant compiled into
// this build, fastest ISA first, the library variants this build has, the portable
// variant last. Variants the host cannot run are listed too; they decline through
// VariantSupports (ISA check) and are never executed.
#pragma once

#include <span>

#include "cliffguard/kernel.h"

namespace cliffguard::cpu {

std::span<const KernelVariant> CpuConv2dVariants();

}  // namespace cliffguard::cpu
