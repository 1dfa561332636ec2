// File input and output with the checks untrusted paths need: whole-file reads with
// size and type checks, and atomic writes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cliffguard/status.h"

namespace cliffguard {

// Reads a whole regular file of at most max_bytes (default: 2 GiB). Refuses, naming
// the path and the rule: a missing or unreadable path, a directory, a FIFO or device,
// a file over max_bytes (before reading it), an empty file.
StatusOr<std::vector<uint8_t>> ReadFileBytes(const std::string& path, int64_t max_bytes = int64_t{1} << 31);

// As ReadFileBytes, but the first head_bytes are read and given to check_head before
// the rest: a file whose header is wrong is refused (with check_head's error) without
// being read whole. check_head may be nullptr.
using HeadCheck = Status (*)(const std::string& path, std::span<const uint8_t> head);
StatusOr<std::vector<uint8_t>> ReadFileBytesChecked(const std::string& path, int64_t max_bytes, size_t head_bytes,
                                                    HeadCheck check_head);

// Writes atomically: an unnamed file in the same directory (O_TMPFILE), fsync, then
// a name, a rename and an fsync of the directory, so a crash while writing leaves
// nothing behind and a completed write survives a power loss. Where the
// filesystem has no O_TMPFILE, a named temporary (mkstemp) instead, which a crash can
// leave. On any failure (disk full, permissions) the destination is untouched and no
// temporary remains. An existing destination that is not a regular file is never
// replaced.
Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace cliffguard
