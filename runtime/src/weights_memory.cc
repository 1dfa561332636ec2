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
  const size_t huge = bytes / kHugePageBytes * kHugePageBytes;
  (void)madvise(p, huge, MADV_HUGEPAGE);
  // Heap memory that earlier blocks touched keeps its base pages under the advice; dropping
  // them lets the first write fault the range in afresh, in huge pages.
  (void)madvise(p, huge, MADV_DONTNEED);
  return static_cast<float*>(p);
}

}  // namespace cliffguard
