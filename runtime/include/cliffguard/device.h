// Device identity: what a schedule was tuned on. A bundle applies only to the
// device whose fingerprint it carries.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cliffguard/status.h"

namespace cliffguard {

enum class Backend : uint8_t { kCpu = 0, kCuda = 1 };
const char* BackendName(Backend b);  // "cpu", "cuda"

// Cumulative x86 ISA levels as a bitmask (STYLE H5). A host at kIsaAvx512 also has
// kIsaAvx2 and kIsaScalar. kIsaAvx2 means AVX2 + FMA; kIsaAvx512 means F+BW+DQ+VL.
enum IsaBits : uint32_t {
  kIsaScalar = 1u << 0,
  kIsaAvx2 = 1u << 1,
  kIsaAvx512 = 1u << 2,
};
// The highest level in `mask`: "avx512", "avx2" or "scalar".
const char* IsaLevelName(uint32_t mask);

struct DeviceInfo {
  Backend backend = Backend::kCpu;
  std::string name;    // CPU brand string or GPU name
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", "NVIDIA"
  std::string arch;    // IsaLevelName(isa) on the CPU; "sm_90" on CUDA
  uint32_t isa = kIsaScalar;
  int family = 0, model = 0;
  int threads = 1;     // thread budget the runtime runs with (part of the identity)
  int64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;  // per core (l1d, l2), shared (l3)
  // Named integer properties in a fixed order; stored in bundles.
  std::vector<std::pair<std::string, int64_t>> properties;
  // Stable string derived from backend, vendor, family/model, arch, caches and
  // threads, e.g. "cpu-avx512-3f9a0c12d4e5b6a7". Equal fingerprints mean a bundle
  // tuned on one applies to the other.
  std::string fingerprint;
};

// The host CPU as probed once (cpuid), thread-safe, with the given thread budget.
// threads <= 0 takes CLIFFGUARD_THREADS from the environment, else the number of
// hardware threads available to the process.
DeviceInfo HostCpuDevice(int threads = 0);

// Recomputes `properties` and `fingerprint` from the other fields.
void FinalizeDeviceInfo(DeviceInfo& d);

// The thread budget `HostCpuDevice(0)` would use: CLIFFGUARD_THREADS when it is a
// valid budget, else AvailableCpus(). Use ResolveThreadBudget to refuse a bad value.
int DefaultThreadBudget();

// The CPUs this process may run on (its affinity mask).
int AvailableCpus();

inline constexpr int kMaxThreadBudget = 1024;

// The thread budget for a requested value: requested in [1, kMaxThreadBudget] as it
// is; 0 takes CLIFFGUARD_THREADS, else AvailableCpus(). A negative or too large
// request, or a CLIFFGUARD_THREADS that is not an integer in [1, kMaxThreadBudget]
// (e.g. "abc", "0", "-2", "5000"), is kInvalidArgument naming the value and the rule.
// `origin` names the setting in messages (e.g. "RuntimeOptions.threads").
StatusOr<int> ResolveThreadBudget(int requested, std::string_view origin);

}  // namespace cliffguard
