// Scratch memory of the CPU drivers (internal): gemm_driver.cc and
// conv2d_driver.cc pack operands into buffers owned by the calling thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace cliffguard::cpu {

inline constexpr int64_t kAlignFloats = 16;  // 64 bytes

constexpr int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
constexpr int64_t CeilDiv(int64_t x, int64_t m) { return (x + m - 1) / m; }

// Grow-only, 64-byte aligned scratch owned by one thread (declare it
// thread_local): Get() returns at least `floats` floats, reallocating (contents
// lost) only when the buffer is shorter; nullptr when allocation fails. After
// warm-up it allocates nothing. Not thread-safe.
class ThreadScratch {
 public:
  ThreadScratch() = default;
  ThreadScratch(const ThreadScratch&) = delete;
  ThreadScratch& operator=(const ThreadScratch&) = delete;
  ~ThreadScratch() { std::free(p_); }

  float* Get(int64_t floats) {
    if (floats > cap_) {
      std::free(p_);
      const size_t bytes = static_cast<size_t>(RoundUp(floats, kAlignFloats)) * sizeof(float);
      p_ = static_cast<float*>(std::aligned_alloc(64, bytes));
      cap_ = p_ ? floats : 0;
    }
    return p_;
  }

 private:
  float* p_ = nullptr;
  int64_t cap_ = 0;
};

}  // namespace cliffguard::cpu
