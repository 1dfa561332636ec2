// The test binaries' main. The OpenBLAS variant declines an OpenBLAS that runs a
// core below the host's vector ISA (gemm_library.h): the tests run OpenBLAS on the
// host's core, as the cliffguard command does (device.h), so that its variant is
// tested on every host and bundles the command tuned load here as they do there.
// The OpenMP policy stays as the environment has it: the oneDNN tests check both.
#include <unistd.h>

#include <cstdio>

#include <gtest/gtest.h>

#include "cliffguard/device.h"

int main(int argc, char** argv) {
  if (cliffguard::SetOpenblasCoreEnvironment()) {
    ::execv("/proc/self/exe", argv);
    std::perror("re-exec with OPENBLAS_CORETYPE failed");
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
