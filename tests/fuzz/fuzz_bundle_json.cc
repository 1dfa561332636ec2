// libFuzzer target fuzz_bundle_json: see FuzzBundleJson in fuzz_bodies.h.
#include "fuzz_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cliffguard::fuzz::QuietLogs();
  cliffguard::fuzz::FuzzBundleJson(data, size);
  return 0;
}
