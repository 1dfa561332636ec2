// C++17 boundary between the CUDA translation units (nvcc) and the C++20 runtime.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cliffguard::cuda {

struct GpuProps {
  std::string name;
  int major = 0, minor = 0;
  int sm_count = 0;
  int64_t global_mem_bytes = 0;
  int64_t l2_bytes = 0;
  int64_t smem_per_block_optin = 0;
  int driver_version = 0, runtime_version = 0;  // e.g. 13000 for 13.0
};

// Visible GPUs; on failure, none and `status` says why (e.g. error 35: no driver).
std::vector<GpuProps> QueryGpus(std::string* status);

// Launches a trivial kernel on GPU `index` and checks its output.
bool RunSmokeKernel(int index, std::string* error);

// Two CUDA events (start, stop) on the calling thread's current device, for timing
// work on a stream without blocking the host. nullptr when they cannot be made.
void* NewEventPair();
// Enqueues event `which` (0: start, 1: stop) on `stream`; false on a CUDA error.
bool RecordEventOf(void* pair, int which, void* stream);
// Whether the stop event has completed: 1 and the time between the two events in
// `us`; 0 while it has not (cudaEventQuery: never waits); -1 on a CUDA error.
int PollElapsedMicroseconds(void* pair, double* us);

}  // namespace cliffguard::cuda
