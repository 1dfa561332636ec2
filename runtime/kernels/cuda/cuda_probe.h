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

}  // namespace cliffguard::cuda
