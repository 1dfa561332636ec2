// libFuzzer target fuzz_miss_report: see FuzzMissReport in fuzz_bodies.h.
#include "fuzz_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cliffguard::fuzz::QuietLogs();
  cliffguard::fuzz::FuzzMissReport(data, size);
  return 0;
}
