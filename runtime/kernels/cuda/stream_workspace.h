// Device scratch memory of one calling thread, one buffer per CUDA stream (internal).
// A buffer grows on demand and is then reused by every later call on its stream, so
// a call's workspace is never read by another stream's work in flight, and a steady
// serving loop allocates nothing. Freed with the owner (a thread_local).
#pragma once

#include <cstddef>
#include <vector>

#include "cliffguard/status.h"

namespace cliffguard::cuda {

class StreamWorkspaces {
 public:
  StreamWorkspaces() = default;
  StreamWorkspaces(const StreamWorkspaces&) = delete;
  StreamWorkspaces& operator=(const StreamWorkspaces&) = delete;
  ~StreamWorkspaces();

  // At least `bytes` of device memory for work enqueued on `stream` (a cudaStream_t;
  // null: the legacy default stream). Growing frees the old buffer (cudaFree waits
  // for the device, so no enqueued call still reads it). `what` names the buffer in
  // an allocation failure.
  StatusOr<void*> Get(void* stream, size_t bytes, const char* what);

 private:
  struct Buffer {
    void* stream;
    void* data;
    size_t bytes;
  };
  std::vector<Buffer> buffers_;
};

}  // namespace cliffguard::cuda
