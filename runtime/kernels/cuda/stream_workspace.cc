#include "kernels/cuda/stream_workspace.h"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

namespace cliffguard::cuda {

StreamWorkspaces::~StreamWorkspaces() {
  for (const Buffer& b : buffers_) cudaFree(b.data);
}

StatusOr<void*> StreamWorkspaces::Get(void* stream, size_t bytes, const char* what) {
  Buffer* slot = nullptr;
  for (Buffer& b : buffers_)
    if (b.stream == stream) slot = &b;
  if (slot && slot->bytes >= bytes) return slot->data;
  if (!slot) slot = &buffers_.emplace_back(Buffer{stream, nullptr, 0});
  cudaFree(slot->data);
  slot->data = nullptr;
  slot->bytes = 0;
  if (cudaError_t e = cudaMalloc(&slot->data, bytes); e != cudaSuccess) {
    cudaGetLastError();
    slot->data = nullptr;
    return Internal(fmt::format("cudaMalloc of the {} MiB {} failed: {}", (bytes + (1 << 20) - 1) >> 20, what,
                                cudaGetErrorString(e)));
  }
  slot->bytes = bytes;
  return slot->data;
}

}  // namespace cliffguard::cuda
