#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_probe.h"

namespace cliffguard::cuda {
namespace {

__global__ void IotaKernel(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 3 + 1;
}

std::string Describe(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (error " + std::to_string(int(e)) + "): " + cudaGetErrorString(e);
}

}  // namespace

std::vector<GpuProps> QueryGpus(std::string* status) {
  std::vector<GpuProps> out;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    *status = Describe(err);
    cudaGetLastError();  // clear the sticky error
    return out;
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    GpuProps g;
    g.name = prop.name;
    g.major = prop.major;
    g.minor = prop.minor;
    g.sm_count = prop.multiProcessorCount;
    g.global_mem_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    g.l2_bytes = prop.l2CacheSize;
    g.smem_per_block_optin = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
    g.driver_version = driver;
    g.runtime_version = runtime;
    out.push_back(g);
  }
  *status = count == 0 ? "no CUDA device" : "ok";
  return out;
}

bool RunSmokeKernel(int index, std::string* error) {
  auto fail = [&](cudaError_t e) {
    if (error) *error = Describe(e);
    return false;
  };
  cudaError_t e = cudaSetDevice(index);
  if (e != cudaSuccess) return fail(e);
  constexpr int n = 1000;
  int* d = nullptr;
  if ((e = cudaMalloc(&d, n * sizeof(int))) != cudaSuccess) return fail(e);
  IotaKernel<<<(n + 255) / 256, 256>>>(d, n);
  int h[n];
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess) return fail(e);
  for (int i = 0; i < n; ++i) {
    if (h[i] != i * 3 + 1) {
      if (error) *error = "kernel result mismatch at " + std::to_string(i);
      return false;
    }
  }
  return true;
}

void* NewEventPair() {
  auto* pair = new cudaEvent_t[2]{};
  if (cudaEventCreate(&pair[0]) != cudaSuccess || cudaEventCreate(&pair[1]) != cudaSuccess) {
    cudaGetLastError();
    if (pair[0]) cudaEventDestroy(pair[0]);
    delete[] pair;
    return nullptr;
  }
  return pair;
}

bool RecordEventOf(void* pair, int which, void* stream) {
  auto* events = static_cast<cudaEvent_t*>(pair);
  if (cudaEventRecord(events[which], static_cast<cudaStream_t>(stream)) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

int PollElapsedMicroseconds(void* pair, double* us) {
  auto* events = static_cast<cudaEvent_t*>(pair);
  const cudaError_t q = cudaEventQuery(events[1]);
  if (q == cudaErrorNotReady) return 0;
  float ms = 0;
  if (q != cudaSuccess || cudaEventElapsedTime(&ms, events[0], events[1]) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  *us = double(ms) * 1000.0;
  return 1;
}

}  // namespace cliffguard::cuda
