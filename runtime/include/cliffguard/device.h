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

enum class Backend : uint8_t {
#define CG_BACKEND(e, name) e,
#include "cliffguard/defs/backends.inc"
};
const char* BackendName(Backend b);  // "cpu", "cuda"

// Cumulative x86 ISA levels as a bitmask (STYLE H5), one row each in
// defs/isa_levels.inc. A host at kIsaAvx512 also has kIsaAvx2 and kIsaScalar.
enum IsaBits : uint32_t {
#define CG_ISA(e, bit, name, meaning) e = 1u << bit,
#include "cliffguard/defs/isa_levels.inc"
};
// The highest level in `mask`: "avx512", "avx2" or "scalar".
const char* IsaLevelName(uint32_t mask);

// The CPU vendors (cpuid's vendor string) that rules measured per vendor name.
inline constexpr std::string_view kCpuVendorIntel = "GenuineIntel";
inline constexpr std::string_view kCpuVendorAmd = "AuthenticAMD";

struct DeviceInfo {
  Backend backend = Backend::kCpu;
  std::string spec;    // how it is selected: "cpu", "cuda:0"
  std::string name;    // CPU brand string or GPU name
  std::string vendor;  // kCpuVendorIntel, kCpuVendorAmd, "NVIDIA"
  std::string arch;    // IsaLevelName(isa) on the CPU; "sm_90" on CUDA
  uint32_t isa = kIsaScalar;  // CPU features (IsaBits); 0 on CUDA
  int family = 0, model = 0;  // CPU family/model; CUDA compute capability major/minor
  // CPU: the thread budget kernels run with (part of the identity). CUDA: 1 (one
  // host thread launches; the GPU's parallelism is sm_count).
  int threads = 1;
  int sm_count = 0;    // CUDA: streaming multiprocessors; 0 on the CPU
  int64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;  // per core (l1d, l2), shared (l3)
  int64_t memory_bytes = 0;  // CUDA: global memory; 0 on the CPU
  // Named integer properties in a fixed order; stored in bundles.
  std::vector<std::pair<std::string, int64_t>> properties;
  // Stable string derived from what identifies the hardware (backend, vendor, name,
  // family/model, caches; SM count and memory on CUDA) and the thread budget, e.g.
  // "cpu-t2-3f9a0c12d4e5b6a7" or "cuda-sm_90-0c9d...". ISA feature bits are not part
  // of it: a build that probes one more feature keeps matching existing bundles, and
  // each entry is checked for the features its kernel needs. Equal fingerprints mean
  // a bundle tuned on one applies to the other.
  std::string fingerprint;
  // The fingerprint of cliffguard 0.1 bundles (its basis included the ISA level);
  // such bundles still apply. Empty on CUDA.
  std::string legacy_fingerprint;
};

// The host CPU as probed once (cpuid), thread-safe, with the given thread budget.
// threads <= 0 takes CLIFFGUARD_THREADS from the environment, else the number of
// hardware threads available to the process.
DeviceInfo HostCpuDevice(int threads = 0);

// Recomputes `properties`, `fingerprint` and `legacy_fingerprint` from the other fields.
void FinalizeDeviceInfo(DeviceInfo& d);

// What `device` is in a bundle's terms: whether a bundle whose device fingerprint is
// `fingerprint` was tuned on it.
inline bool FingerprintMatches(const DeviceInfo& device, std::string_view fingerprint) {
  return fingerprint == device.fingerprint || (!device.legacy_fingerprint.empty() && fingerprint == device.legacy_fingerprint);
}

// Every device this build runs on: the host CPU with the given thread budget, then
// each visible CUDA GPU (builds with CUDA). `cuda_status` says why there are no GPUs
// ("not built with CUDA", "no CUDA driver (error 35)", ...) or is empty.
struct DeviceList {
  std::vector<DeviceInfo> devices;
  std::string cuda_status;
};
DeviceList ListDevices(int cpu_threads = 0);

// The device a spec names: "" or "cpu" is the host CPU with `threads`
// (ResolveThreadBudget's rule); "cuda:N" is visible GPU N. An unknown spec or a GPU
// that is not there is kInvalidArgument / kNotFound naming the spec and the devices
// that exist.
StatusOr<DeviceInfo> ProbeDevice(std::string_view spec, int threads = 0);

// The thread budget `HostCpuDevice(0)` would use: CLIFFGUARD_THREADS when it is a
// valid budget, else AvailableCpus(). Use ResolveThreadBudget to refuse a bad value.
int DefaultThreadBudget();

// The CPUs this process may use: its affinity mask, capped by its cgroup's CPU
// bandwidth limit rounded up (a container limited to 2.5 CPUs on a 64-CPU host may
// use 3). Without the cap a pool of one thread per host CPU runs under the quota,
// and calls stall for the rest of each scheduling period once it is spent (50 ms
// stalls and 1.15-1.4x the mean time, measured with 2 threads under a 1-CPU quota).
int AvailableCpus();

// The CPUs of the affinity mask alone (sched_getaffinity).
int AffinityCpus();

// The CPU bandwidth limit, in CPUs (quota / period), of this process's cgroup: the
// lowest over its cgroup and the cgroup's ancestors, in cgroup v2 (`cpu.max`) and
// in the v1 `cpu` controller (`cpu.cfs_quota_us` / `cpu.cfs_period_us`), found
// through /proc/self/cgroup and /proc/self/mountinfo. 0 when there is none (no
// limit set, no cgroup file system, or files that do not parse). `root` prefixes
// every path read (tests; "" on a running system).
double CgroupCpuLimit(std::string_view root = {});

inline constexpr int kMaxThreadBudget = 1024;

// The thread budget for a requested value: requested in [1, kMaxThreadBudget] as it
// is; 0 takes CLIFFGUARD_THREADS, else AvailableCpus(). A negative or too large
// request, or a CLIFFGUARD_THREADS that is not an integer in [1, kMaxThreadBudget]
// (e.g. "abc", "0", "-2", "5000"), is kInvalidArgument naming the value and the rule.
// `origin` names the setting in messages (e.g. "RuntimeOptions.threads").
StatusOr<int> ResolveThreadBudget(int requested, std::string_view origin);

// The environment the CPU libraries read when they load (README, "Library
// schedules"). The libraries read it only then: call these first in main() and
// re-execute the binary when one returns true (the cliffguard command and the
// benchmarks do; the second time they return false), or set the variables in the
// service's environment. Each returns true when it set a variable.
//
// Idle library threads must sleep, not spin, or they take the core that the next
// call's threads need. Sets what is unset of OMP_WAIT_POLICY=passive (oneDNN's
// OpenMP workers; left alone when GOMP_SPINCOUNT is set), which oneDNN schedules
// with threads > 1 require, and OPENBLAS_THREAD_TIMEOUT=kQuietOpenblasThreadTimeout
// (OpenBLAS's workers otherwise yield in a loop for 2^28 cycles after it loads and
// after every threaded call).
bool SetQuietLibraryThreadEnvironment();
// OPENBLAS_CORETYPE=SkylakeX (AVX-512 host) or Haswell (AVX2 host) when the loaded
// OpenBLAS runs a core below the host's vector ISA: an OpenBLAS older than the CPU
// falls back to its SSE3 kernels, and the OpenBLAS variant declines such a build.
// False in a build without the OpenBLAS variant.
bool SetOpenblasCoreEnvironment();
// Both of the above (the cliffguard command's environment).
bool SetLibraryEnvironment();

// The OPENBLAS_THREAD_TIMEOUT set above (log2 of the idle spin in cycles), and the
// largest value under which the OpenBLAS variant does not warn (2^10 cycles: well
// under a microsecond).
inline constexpr int kQuietOpenblasThreadTimeout = 4;
inline constexpr int kMaxQuietOpenblasThreadTimeout = 10;

}  // namespace cliffguard
