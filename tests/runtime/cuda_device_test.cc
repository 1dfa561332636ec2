// The CUDA backend's probe and smoke test; skipped where the build has no CUDA or
// the machine has no GPU.
#include <gtest/gtest.h>

#ifdef CLIFFGUARD_WITH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace cliffguard {
namespace {

TEST(CudaDevice, ProbeAndSmokeTest) {
#ifndef CLIFFGUARD_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  const auto& probe = cuda::ProbeCudaDevices();
  if (probe.devices.empty()) GTEST_SKIP() << "no GPU here: " << probe.status;
  for (size_t i = 0; i < probe.devices.size(); ++i) {
    const DeviceInfo& d = probe.devices[i];
    EXPECT_EQ(d.backend, Backend::kCuda);
    EXPECT_EQ(d.arch.rfind("sm_", 0), 0u) << d.arch;
    EXPECT_EQ(d.fingerprint.rfind("cuda-sm_", 0), 0u) << d.fingerprint;
    std::string err;
    EXPECT_TRUE(cuda::CudaSmokeTest(int(i), &err)) << err;
  }
#endif
}

}  // namespace
}  // namespace cliffguard
