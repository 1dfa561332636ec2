#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "commands.h"
#ifdef CLIFFGUARD_WITH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace cliffguard::cli {

void AddDeviceCommand(CLI::App& app) {
  struct Opts {
    int threads = 0;
    bool json = false;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("device", "Print the probed device identity and its fingerprint");
  cmd->add_option("--threads", opts->threads, "Thread budget (0: CLIFFGUARD_THREADS or all hardware threads)")
      ->check(CLI::Range(0, 1024));
  cmd->add_flag("--json", opts->json, "Print JSON");
  cmd->callback([opts] {
    const DeviceInfo d = HostCpuDevice(opts->threads);
    if (opts->json) {
      nlohmann::ordered_json props = nlohmann::ordered_json::object();
      for (const auto& [k, v] : d.properties) props[k] = v;
      nlohmann::ordered_json j{{"backend", BackendName(d.backend)}, {"name", d.name},       {"vendor", d.vendor},
                               {"arch", d.arch},                   {"properties", props}, {"fingerprint", d.fingerprint}};
      fmt::print("{}\n", j.dump(2));
      return;
    }
    fmt::print("backend      {}\nname         {}\nvendor       {}\narch         {}\n", BackendName(d.backend), d.name,
               d.vendor, d.arch);
    fmt::print("family/model {}/{}\nthreads      {}\n", d.family, d.model, d.threads);
    fmt::print("caches       L1d {} KiB, L2 {} KiB, L3 {} KiB\n", d.l1d_bytes >> 10, d.l2_bytes >> 10, d.l3_bytes >> 10);
    fmt::print("fingerprint  {}\n", d.fingerprint);
    fmt::print("kernels      ");
    int n = 0;
    for (const auto& v : AllKernelVariants()) {
      if (v.backend != d.backend) continue;
      const bool runs = (v.isa & d.isa) == v.isa;
      fmt::print("{}{}{}", n++ ? ", " : "", v.name, runs ? "" : " (declined: ISA)");
    }
    fmt::print("\n");
#ifdef CLIFFGUARD_WITH_CUDA
    const auto& cuda = cuda::ProbeCudaDevices();
    if (cuda.devices.empty()) fmt::print("cuda         none ({})\n", cuda.status);
    for (const auto& g : cuda.devices) fmt::print("cuda         {} {} ({})\n", g.name, g.arch, g.fingerprint);
#endif
  });
}

}  // namespace cliffguard::cli
