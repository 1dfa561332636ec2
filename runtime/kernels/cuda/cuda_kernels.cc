#include "kernels/cuda/cuda_kernels.h"

#include <fmt/format.h>

#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/cuda_probe.h"
#include "kernels/cuda/gemm_mma.h"
#include "kernels/cuda/gemv_nt.h"

namespace cliffguard::cuda {
namespace {

CudaProbe ProbeOnce() {
  CudaProbe p;
  int index = 0;
  const std::vector<GpuProps> gpus = QueryGpus(&p.status);
  if (!gpus.empty()) {
    std::string error;
    if (!LoadCublasForDevices(&error)) p.status = fmt::format("GPUs found, but {}", error);
  }
  for (const GpuProps& g : gpus) {
    DeviceInfo d;
    d.backend = Backend::kCuda;
    d.spec = "cuda:" + std::to_string(index++);
    d.name = g.name;
    d.vendor = "NVIDIA";
    d.arch = "sm_" + std::to_string(g.major) + std::to_string(g.minor);
    d.isa = 0;
    d.family = g.major;
    d.model = g.minor;
    d.threads = 1;
    d.sm_count = g.sm_count;
    d.l2_bytes = g.l2_bytes;
    d.memory_bytes = g.global_mem_bytes;
    d.properties = {{"sm_count", g.sm_count},
                    {"global_mem_bytes", g.global_mem_bytes},
                    {"l2_bytes", g.l2_bytes},
                    {"smem_per_block_optin", g.smem_per_block_optin},
                    {"compute_capability", g.major * 10 + g.minor},
                    {"driver_version", g.driver_version},
                    {"runtime_version", g.runtime_version},
                    {"cublas_version", LoadedCublasVersion()}};
    FinalizeDeviceInfo(d);
    p.devices.push_back(d);
  }
  return p;
}

}  // namespace

std::span<const KernelVariant> CudaKernelVariants() {
  static const std::vector<KernelVariant>* all = [] {
    auto* v = new std::vector<KernelVariant>();
    for (auto part : {CublasGemmVariants(), GemvNtVariants(), MmaGemmVariants()})
      v->insert(v->end(), part.begin(), part.end());
    return v;
  }();
  return *all;
}

const CudaProbe& ProbeCudaDevices() {
  static const CudaProbe* probe = new CudaProbe(ProbeOnce());  // never destroyed: used at exit
  return *probe;
}

bool CudaSmokeTest(int index, std::string* error) { return RunSmokeKernel(index, error); }

}  // namespace cliffguard::cuda
