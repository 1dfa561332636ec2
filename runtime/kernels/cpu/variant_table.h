// Building the CPU kernel tables (internal): CpuKernelVariants() (cpu_kernels.cc)
// and CpuConv2dVariants() (conv2d_kernels.cc) order each table as STYLE H3 asks:
// the project's own variants, then the library variants, then the portable one.
#pragma once

#include <array>
#include <cstddef>

#include "cliffguard/kernel.h"

namespace cliffguard::cpu {

// `own` (an inventory, its portable variant last) with `library` inserted before
// its last row.
template <size_t N, size_t L>
constexpr std::array<KernelVariant, N + L> BeforeLast(const std::array<KernelVariant, N>& own,
                                                      const std::array<KernelVariant, L>& library) {
  static_assert(N >= 1);
  std::array<KernelVariant, N + L> out{};
  for (size_t i = 0; i + 1 < N; ++i) out[i] = own[i];
  for (size_t i = 0; i < L; ++i) out[N - 1 + i] = library[i];
  out[N + L - 1] = own[N - 1];
  return out;
}

}  // namespace cliffguard::cpu
