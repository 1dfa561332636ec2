#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#include "cliffguard/kernel.h"

namespace cliffguard {

float* AllocateWeights(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  if (bytes < kHugePageBytes) return static_cast<float*>(std::aligned_alloc(64, rounded));
  void* p = nullptr;
  if (posix_memalign(&p, kHugePageBytes, rounded) != 0) return nullptr;
  // Advice only: where THP is off, or the range cannot take it, the pages stay base pages.
  (void)madvise(p, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
  return static_cast<float*>(p);
}

}  // namespace cliffguard
