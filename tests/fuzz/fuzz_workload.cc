// libFuzzer target fuzz_workload: see FuzzWorkload in fuzz_bodies_tuner.h.
#include "fuzz_bodies_tuner.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cliffguard::fuzz::QuietLogs();
  cliffguard::fuzz::FuzzWorkload(data, size);
  return 0;
}
