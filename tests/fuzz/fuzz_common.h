// Helpers shared by the libFuzzer targets: quiet logging, and a path holding the
// input for entry points that only read files (a memfd: no disk I/O per run).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "cliffguard/log.h"

namespace cliffguard::fuzz {

inline void QuietLogs() {
  static const bool once = [] {
    SetLogLevel(LogLevel::kOff);
    return true;
  }();
  (void)once;
}

// The input as a readable file for the duration of the object.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) {
    fd_ = ::memfd_create("cg_fuzz", MFD_CLOEXEC);
    if (fd_ < 0) __builtin_trap();
    size_t off = 0;
    while (off < size) {
      const ssize_t n = ::write(fd_, data + off, size - off);
      if (n <= 0) __builtin_trap();
      off += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace cliffguard::fuzz

// A property the code under test promises broke: crash so libFuzzer keeps the input.
// The regression replay tests define CG_FUZZ_CHECK as a gtest expectation instead.
#ifndef CG_FUZZ_CHECK
#define CG_FUZZ_CHECK(cond)                                                     \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "CG_FUZZ_CHECK failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      __builtin_trap();                                                         \
    }                                                                           \
  } while (0)
#endif
