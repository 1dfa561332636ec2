// conv2d kernel variants that call a library (internal): oneDNN's convolution
// (cpu_f32_conv2d_onednn, conv2d_onednn.cc), built only when oneDNN is found at
// configure time (CLIFFGUARD_WITH_ONEDNN). They sit in CpuConv2dVariants() after
// the project's own variants and before the portable one.
#pragma once

#include <array>
#include <cstddef>

#include "cliffguard/kernel.h"

namespace cliffguard::cpu {

// Library conv2d variants in this build (the macros are the runtime's own compile
// definitions: include this header from the runtime's sources only).
inline constexpr size_t kNumConv2dLibraryVariants = 0;

}  // namespace cliffguard::cpu
