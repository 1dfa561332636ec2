#include "cliffguard/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "cliffguard/op_key.h"

namespace cliffguard {

StatusOr<std::vector<uint8_t>> ReadFileBytesChecked(const std::string& path, int64_t max_bytes, size_t head_bytes,
                                                    HeadCheck check_head) {
  // O_NONBLOCK: opening a FIFO must not block; the file type is checked next.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return IoError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return IoError(fmt::format("cannot stat '{}': {}", path, std::strerror(err)));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(fmt::format("'{}' is a directory, not a file", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(fmt::format("'{}' is not a regular file", path));
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    return InvalidArgument(fmt::format("'{}' is {} bytes, over the limit of {}", path, int64_t(st.st_size), max_bytes));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  // With a head check, only the head is allocated and read until it passes.
  std::vector<uint8_t> data(check_head ? std::min(head_bytes, size) : size);
  size_t done = 0;
  while (done < size) {
    if (done == data.size()) {
      if (Status h = check_head(path, {data.data(), done}); !h.ok()) {
        ::close(fd);
        return h;
      }
      data.resize(size);
    }
    const ssize_t n = ::read(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return IoError(fmt::format("cannot read '{}': {}", path, std::strerror(err)));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  data.resize(done);
  if (data.empty()) return DataLoss(fmt::format("'{}' is empty", path));
  return data;
}

StatusOr<std::vector<uint8_t>> ReadFileBytes(const std::string& path, int64_t max_bytes) {
  return ReadFileBytesChecked(path, max_bytes, 0, nullptr);
}

namespace {

// Gives the unnamed file `fd` (O_TMPFILE) a fresh name beside `path`. AT_EMPTY_PATH
// needs CAP_DAC_READ_SEARCH; /proc/self/fd works without it.
StatusOr<std::string> NameUnnamedFile(int fd, const std::string& path) {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  uint64_t r = MixHash64(static_cast<uint64_t>(::getpid()) ^
                         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  const std::string proc = fmt::format("/proc/self/fd/{}", fd);
  for (int attempt = 0; attempt < 64; ++attempt) {
    std::string name = path + ".tmp.";
    for (int i = 0; i < 6; ++i, r /= 36) name += kChars[r % 36];
    r = MixHash64(r + attempt + 1);
    if (::linkat(fd, "", AT_FDCWD, name.c_str(), AT_EMPTY_PATH) == 0) return name;
    if (errno == EEXIST) continue;
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) return name;
    if (errno != EEXIST) return IoError(fmt::format("cannot name a temporary file beside '{}': {}", path, std::strerror(errno)));
  }
  return IoError(fmt::format("cannot name a temporary file beside '{}': 64 names taken", path));
}

}  // namespace

Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> bytes) {
  if (path.empty()) return InvalidArgument("output path is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return InvalidArgument(fmt::format("'{}' is a directory, not a file", path));
    // Renaming over a device node or FIFO would replace it: refuse.
    if (!S_ISREG(st.st_mode)) return InvalidArgument(fmt::format("'{}' exists and is not a regular file", path));
  }
  // Preferred: an unnamed file (O_TMPFILE) that gets a name only once it is complete
  // and on disk, so a crash while writing leaves nothing behind. Filesystems without
  // O_TMPFILE get a named temporary (mkstemp), which a crash can leave.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  const bool unnamed = fd >= 0;
  std::string tmp;  // the temporary's name; empty while the file is unnamed
  if (!unnamed) {
    tmp = path + ".tmp.XXXXXX";  // mkstemp's template
    fd = ::mkstemp(tmp.data());
  }
  if (fd < 0) return IoError(fmt::format("cannot create a temporary file beside '{}': {}", path, std::strerror(errno)));
  auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    if (!tmp.empty()) ::unlink(tmp.c_str());
    return IoError(fmt::format("cannot {} the temporary file beside '{}': {}; '{}' is unchanged", what, path,
                               std::strerror(err), path));
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("write");
    done += static_cast<size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) return fail("chmod");
  if (::fsync(fd) != 0) return fail("fsync");
  if (unnamed) {
    auto name = NameUnnamedFile(fd, path);
    if (!name.ok()) {
      ::close(fd);
      return name.status();
    }
    tmp = *name;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return IoError(fmt::format("cannot close '{}': {}; '{}' is unchanged", tmp, std::strerror(err), path));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return IoError(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(err)));
  }
  // The rename is durable once the directory entry is: a power loss after this
  // returns cannot bring the old file back.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || ::fsync(dfd) != 0) {
    const int err = errno;
    if (dfd >= 0) ::close(dfd);
    return IoError(fmt::format("'{}' is written but its directory '{}' could not be synced: {}", path, dir,
                               std::strerror(err)));
  }
  ::close(dfd);
  return Status::Ok();
}

}  // namespace cliffguard
