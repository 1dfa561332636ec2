// GEMM's measurement harness on a CUDA device (builds with CUDA): inputs rounded to
// the key's dtype and their double-precision reference on the host, operands in
// device memory, the L2 flushed before every timed call, the call timed with CUDA
// events on the harness's stream. A sticky CUDA error (the context is lost) ends the
// worker process at once: the measurer reports that candidate as failed and
// measures the rest in a fresh worker.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "cliffguard/detail/half.h"
#include "harness.h"

namespace cliffguard::tuner {
namespace {

// Rounds values to the dtype in place and returns their stored bytes.
std::vector<uint8_t> Store(DType d, std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * DTypeSize(d));
  for (size_t i = 0; i < v.size(); ++i) v[i] = detail::StoreAs(d, v[i], out.data() + i * DTypeSize(d));
  return out;
}

std::vector<float> Load(DType d, const std::vector<uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / DTypeSize(d));
  for (size_t i = 0; i < out.size(); ++i) out[i] = detail::LoadAs(d, bytes.data() + i * DTypeSize(d));
  return out;
}

// The error allowed beyond options.tolerance: rounding of the output to the dtype
// (relative 2^-8 for bf16, 2^-11 for f16), twice over.
double OutputRounding(DType d) { return d == DType::kBF16 ? 8e-3 : d == DType::kF16 ? 1e-3 : 0.0; }

class CudaGemmHarness final : public OpHarness {
 public:
  CudaGemmHarness(const OpKey& key, const MeasureOptions& opt) : key_(key), opt_(opt) {
    std::mt19937_64 rng(opt.data_seed ^ key.Hash());  // the reference's sample
    std::vector<float> a(size_t(key.m() * key.k())), b(size_t(key.k() * key.n()));
    FillUniform(OperandStream(opt.data_seed, key, 0), a);
    FillUniform(OperandStream(opt.data_seed, key, 1), b);
    a_bytes_ = Store(key.dtype, a);
    b_bytes_ = Store(key.dtype, b);
    ref_ = MakeGemmReference(key, a.data(), b.data(), opt, rng);
  }
  ~CudaGemmHarness() override {
    for (void* p : {d_a_, d_b_, d_c_, flush_})
      if (p) cudaFree(p);
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  const OpKey& key() const override { return key_; }

  void Arm(const DeviceInfo& device) override {
    int index = 0;
    std::sscanf(device.spec.c_str(), "cuda:%d", &index);
    c_bytes_ = size_t(key_.m() * key_.n()) * DTypeSize(key_.dtype);
    flush_bytes_ = size_t(std::max<int64_t>(2 * device.l2_bytes, int64_t{8} << 20));
    Must(cudaSetDevice(index), "cudaSetDevice");
    Must(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    Must(cudaEventCreate(&start_), "cudaEventCreate");
    Must(cudaEventCreate(&stop_), "cudaEventCreate");
    Must(cudaMalloc(&d_a_, a_bytes_.size()), "cudaMalloc(a)");
    Must(cudaMalloc(&d_b_, b_bytes_.size()), "cudaMalloc(b)");
    Must(cudaMalloc(&d_c_, c_bytes_), "cudaMalloc(c)");
    Must(cudaMalloc(&flush_, flush_bytes_), "cudaMalloc(L2 flush buffer)");
    Must(cudaMemcpy(d_a_, a_bytes_.data(), a_bytes_.size(), cudaMemcpyHostToDevice), "cudaMemcpy(a)");
    Must(cudaMemcpy(d_b_, b_bytes_.data(), b_bytes_.size(), cudaMemcpyHostToDevice), "cudaMemcpy(b)");
  }

  std::string Check(const Schedule& s) override {
    // All-ones bytes are NaN in f32, f16 and bf16: an output the kernel skips fails.
    if (std::string e = Error(cudaMemsetAsync(d_c_, 0xff, c_bytes_, stream_)); !e.empty()) return e;
    if (Status st = RunGemm(s, Args()); !st.ok()) return fmt::format("kernel failed: {}", st.ToString());
    if (std::string e = Error(cudaStreamSynchronize(stream_)); !e.empty()) return e;
    std::vector<uint8_t> c(c_bytes_);
    if (std::string e = Error(cudaMemcpy(c.data(), d_c_, c_bytes_, cudaMemcpyDeviceToHost)); !e.empty()) return e;
    const std::vector<float> out = Load(key_.dtype, c);
    const WorstError w = FindWorstError(out.data(), ref_.checked, ref_.ref, ref_.scale);
    const double tol = opt_.tolerance + OutputRounding(key_.dtype);
    if (w.error > tol)
      return fmt::format("wrong result: max rel error {} > tol {:.1e} at ({},{}) of {} checked", ErrorText(w), tol,
                         w.where / key_.n(), w.where % key_.n(), ref_.checked.size());
    return "";
  }

  Status Run(const Schedule& s) override {
    CG_RETURN_IF_ERROR(RunGemm(s, Args()));
    if (std::string e = Error(cudaStreamSynchronize(stream_)); !e.empty()) return Internal(e);
    return Status::Ok();
  }

  StatusOr<double> TimeOne(const Schedule& s) override {
    // The flush writes a buffer twice the L2 before the timed region: every call
    // starts with its operands in device memory, as a serving call on fresh
    // activations does.
    if (std::string e = Error(cudaMemsetAsync(flush_, int(++flushes_ & 0xff), flush_bytes_, stream_)); !e.empty())
      return Internal(e);
    cudaEventRecord(start_, stream_);
    CG_RETURN_IF_ERROR(RunGemm(s, Args()));
    cudaEventRecord(stop_, stream_);
    if (std::string e = Error(cudaEventSynchronize(stop_)); !e.empty()) return Internal(e);
    float ms = 0;
    if (std::string e = Error(cudaEventElapsedTime(&ms, start_, stop_)); !e.empty()) return Internal(e);
    return double(ms) * 1000.0;
  }

 private:
  GemmArgs Args() const {
    GemmArgs g = DenseGemmArgs(key_, d_a_, d_b_, d_c_);
    g.stream = stream_;
    return g;
  }
  // "" on success; the error text otherwise. A sticky error ends the process.
  static std::string Error(cudaError_t e) {
    if (e == cudaSuccess) return "";
    std::string text = fmt::format("CUDA error {} ({}): {}", int(e), cudaGetErrorName(e), cudaGetErrorString(e));
    cudaGetLastError();
    if (cudaDeviceSynchronize() != cudaSuccess || cudaGetLastError() != cudaSuccess) {
      std::fprintf(stderr, "measure-worker: %s; the CUDA context is lost, the worker ends\n", text.c_str());
      std::fflush(stderr);
      _exit(4);
    }
    return text;
  }
  static void Must(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return;
    std::fprintf(stderr, "measure-worker: %s failed: %s\n", what, cudaGetErrorString(e));
    std::fflush(stderr);
    _exit(4);
  }

  OpKey key_;
  MeasureOptions opt_;
  std::vector<uint8_t> a_bytes_, b_bytes_;
  GemmReference ref_;
  size_t c_bytes_ = 0, flush_bytes_ = 0;
  void *d_a_ = nullptr, *d_b_ = nullptr, *d_c_ = nullptr, *flush_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  uint64_t flushes_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<OpHarness>> MakeCudaGemmHarness(const OpKey& key, const MeasureOptions& options,
                                                         const DeviceInfo& device) {
  if (key.dtype != DType::kF32 && key.dtype != DType::kF16 && key.dtype != DType::kBF16)
    return Unimplemented(fmt::format("measurer: {} on {}: gemm runs f32, f16 and bf16 there", key.ToString(),
                                     device.spec));
  return std::unique_ptr<OpHarness>(new CudaGemmHarness(key, options));
}

}  // namespace cliffguard::tuner
