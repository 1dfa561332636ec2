// Every device this build runs on, and the device a spec ("cpu", "cuda:0") names.
#include <charconv>

#include <fmt/format.h>

#include "cliffguard/device.h"
#ifdef CLIFFGUARD_WITH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace cliffguard {

DeviceList ListDevices(int cpu_threads) {
  DeviceList out;
  out.devices.push_back(HostCpuDevice(cpu_threads));
#ifdef CLIFFGUARD_WITH_CUDA
  const auto& probe = cuda::ProbeCudaDevices();
  out.devices.insert(out.devices.end(), probe.devices.begin(), probe.devices.end());
  if (probe.devices.empty()) out.cuda_status = probe.status;
#else
  out.cuda_status = "this build has no CUDA backend";
#endif
  return out;
}

StatusOr<DeviceInfo> ProbeDevice(std::string_view spec, int threads) {
  if (spec.empty() || spec == "cpu") {
    CG_ASSIGN_OR_RETURN(const int budget, ResolveThreadBudget(threads, "threads"));
    return HostCpuDevice(budget);
  }
  if (spec.starts_with("cuda:")) {
    const std::string_view num = spec.substr(5);
    int index = -1;
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    if (ec != std::errc() || p != num.data() + num.size() || index < 0)
      return InvalidArgument(fmt::format("device '{}': the GPU index must be a non-negative integer (cuda:0)", spec));
    const DeviceList all = ListDevices();
    int seen = 0;
    for (const DeviceInfo& d : all.devices) {
      if (d.backend != Backend::kCuda) continue;
      if (seen++ == index) return d;
    }
    return NotFound(fmt::format("device '{}': {} CUDA device(s) visible{}", spec, seen,
                                all.cuda_status.empty() ? "" : fmt::format(" ({})", all.cuda_status)));
  }
  return InvalidArgument(fmt::format("device '{}' is not one of: cpu, cuda:N", spec));
}

}  // namespace cliffguard
