// libFuzzer target fuzz_bundle_load: see FuzzBundleLoad in fuzz_bodies.h.
#include "fuzz_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cliffguard::fuzz::QuietLogs();
  cliffguard::fuzz::FuzzBundleLoad(data, size);
  return 0;
}
