#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "commands.h"

namespace cliffguard::cli {

void AddDeviceCommand(CLI::App& app) {
  struct Opts {
    int threads = 0;
    bool json = false;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("device", "List every device this build runs on: identity, fingerprint, kernel variants");
  cmd->add_option("--threads", opts->threads, "CPU thread budget (0: CLIFFGUARD_THREADS or every CPU available)")
      ->capture_default_str();
  cmd->add_flag("--json", opts->json, "Print JSON");
  cmd->callback([opts] {
    auto budget = ResolveThreadBudget(opts->threads, "device --threads");
    ExitIfError(budget.status(), "device");
    const DeviceList all = ListDevices(*budget);
    if (opts->json) {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (const DeviceInfo& d : all.devices) {
        nlohmann::ordered_json props = nlohmann::ordered_json::object();
        for (const auto& [k, v] : d.properties) props[k] = v;
        list.push_back({{"spec", d.spec}, {"backend", BackendName(d.backend)}, {"name", d.name}, {"vendor", d.vendor},
                        {"arch", d.arch}, {"properties", props}, {"fingerprint", d.fingerprint}});
      }
      // The first device (the host CPU) at the top level, as before; every device in "devices".
      nlohmann::ordered_json j = list[0];
      j["affinity_cpus"] = AffinityCpus();
      if (const double limit = CgroupCpuLimit(); limit > 0) j["cgroup_cpu_limit"] = limit;
      j["devices"] = list;
      if (!all.cuda_status.empty()) j["cuda_status"] = all.cuda_status;
      fmt::print("{}\n", j.dump(2));
      return;
    }
    for (const DeviceInfo& d : all.devices) {
      fmt::print("device       {}\nbackend      {}\nname         {}\nvendor       {}\narch         {}\n", d.spec,
                 BackendName(d.backend), d.name, d.vendor, d.arch);
      if (d.backend == Backend::kCpu) {
        fmt::print("family/model {}/{}\nthreads      {}\n", d.family, d.model, d.threads);
        const double limit = CgroupCpuLimit();
        fmt::print("cpus         {} in the affinity mask{}\n", AffinityCpus(),
                   limit > 0 ? fmt::format(", cgroup CPU limit {:g}", limit) : std::string(", no cgroup CPU limit"));
        fmt::print("caches       L1d {} KiB, L2 {} KiB, L3 {} KiB\n", d.l1d_bytes >> 10, d.l2_bytes >> 10,
                   d.l3_bytes >> 10);
      } else {
        fmt::print("compute      {}.{}, {} SMs, {} MiB memory, L2 {} KiB\n", d.family, d.model, d.sm_count,
                   d.memory_bytes >> 20, d.l2_bytes >> 10);
        // CUDA encodes versions as 1000 * major + 10 * minor; cuBLAS as 10000 * major + 100 * minor + patch.
        auto prop = [&](std::string_view name) {
          for (const auto& [k, v] : d.properties)
            if (k == name) return v;
          return int64_t{0};
        };
        const int64_t drv = prop("driver_version"), rt = prop("runtime_version"), blas = prop("cublas_version");
        fmt::print("software     driver {}.{}, CUDA runtime {}.{}, cuBLAS {}.{}.{}\n", drv / 1000, drv % 1000 / 10,
                   rt / 1000, rt % 1000 / 10, blas / 10000, blas % 10000 / 100, blas % 100);
      }
      fmt::print("fingerprint  {}\n", d.fingerprint);
      if (!d.legacy_fingerprint.empty()) fmt::print("              (bundles of cliffguard 0.1: {})\n", d.legacy_fingerprint);
      fmt::print("kernels      ");
      int n = 0;
      for (const auto& v : AllKernelVariants()) {
        if (v.backend != d.backend) continue;
        const bool runs = VariantRunsOn(v, v.op, v.dtype, d).ok();
        fmt::print("{}{}{}", n++ ? ", " : "", v.name, runs ? "" : " (declined: ISA)");
      }
      fmt::print("{}\n\n", n ? "" : "none in this build");
    }
    if (!all.cuda_status.empty()) fmt::print("cuda         no GPU: {}\n", all.cuda_status);
  });
}

}  // namespace cliffguard::cli
