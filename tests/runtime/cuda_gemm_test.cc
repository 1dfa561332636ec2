// The CUDA GEMM variants (cuBLAS default, cuBLASLt algorithms). The table, the
// schedule and bundle rules run everywhere the build has CUDA; calls on a GPU skip
// where there is none.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "cliffguard/bundle.h"
#include "cliffguard/detail/half.h"
#include "cliffguard/kernel.h"
#include "cliffguard/miss_report.h"
#include "cliffguard/runtime.h"

#ifdef CLIFFGUARD_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace cliffguard {
namespace {

#ifndef CLIFFGUARD_WITH_CUDA
TEST(CudaGemm, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#else

constexpr DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// A CUDA device as the probe describes one, for rules that need no GPU.
DeviceInfo FakeGpu(int driver_version = 13000, int sm_count = 132) {
  DeviceInfo d;
  d.backend = Backend::kCuda;
  d.spec = "cuda:0";
  d.name = "NVIDIA H200";
  d.vendor = "NVIDIA";
  d.arch = "sm_90";
  d.isa = 0;
  d.family = 9;
  d.sm_count = sm_count;
  d.l2_bytes = 60 << 20;
  d.memory_bytes = int64_t{141} << 30;
  d.properties = {{"sm_count", sm_count},
                  {"l2_bytes", d.l2_bytes},
                  {"driver_version", driver_version},
                  {"cublas_version", cuda::LoadedCublasVersion()}};
  FinalizeDeviceInfo(d);
  return d;
}

std::string Name(DType d, const char* lib) { return fmt::format("cuda_{}_gemm_{}", DTypeName(d), lib); }

TEST(CudaGemm, EachDtypeHasTheCublasDefaultAndCublasLtAlgorithms) {
  for (DType d : kDtypes) {
    for (const char* lib : {"cublas", "cublaslt"}) {
      const KernelVariant* v = FindKernelVariant(Name(d, lib));
      ASSERT_NE(v, nullptr) << Name(d, lib);
      EXPECT_EQ(v->backend, Backend::kCuda);
      EXPECT_EQ(v->op, OpKind::kGemm);
      EXPECT_EQ(v->dtype, d);
    }
    const KernelVariant* lt = FindKernelVariant(Name(d, "cublaslt"));
    const int version = lt->ParamIndex("cublas");
    ASSERT_GE(version, 0);
    ASSERT_EQ(lt->params[size_t(version)].values.size(), 1u);
    EXPECT_EQ(lt->params[size_t(version)].values[0], cuda::LoadedCublasVersion());
    EXPECT_GT(cuda::LoadedCublasVersion(), 10000);
  }
}

TEST(CudaGemm, TheDefaultOnAGpuIsCublasForEveryLayoutAndShapeClass) {
  const DeviceInfo gpu = FakeGpu();
  for (DType d : kDtypes)
    for (int layout = 0; layout < 4; ++layout)
      for (auto [m, n, k] : {std::array<int64_t, 3>{1, 4096, 4096}, {16, 11008, 4096}, {2048, 4096, 4096}, {3, 5, 7}}) {
        const OpKey key = OpKey::Gemm(m, n, k, layout & 1, layout & 2, d);
        auto s = DefaultSchedule(key, gpu);
        ASSERT_TRUE(s.ok()) << key.ToString() << ": " << s.status().ToString();
        EXPECT_EQ(s->variant->name, Name(d, "cublas")) << key.ToString();
      }
  EXPECT_FALSE(DefaultSchedule(OpKey::Gemm(8, 8, 8, false, false, DType::kI8), gpu).ok());
  // And a CPU never runs them.
  const auto cpu = DefaultSchedule(OpKey::Gemm(64, 64, 64, false, false, DType::kF32), HostCpuDevice(1));
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->variant->backend, Backend::kCpu);
  EXPECT_FALSE(VariantSupports(*FindKernelVariant("cuda_f32_gemm_cublas"), OpKey::Gemm(4, 4, 4), HostCpuDevice(1)).ok());
}

TEST(CudaGemm, ACublasLtScheduleOfAnotherCublasVersionIsRefusedNamingIt) {
  const int32_t here = cuda::LoadedCublasVersion();
  auto ok = Schedule::FromNamed("cuda_bf16_gemm_cublaslt", {{"algo_id", 66}, {"tile", 20}, {"stages", 8}, {"cublas", here}});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto other = Schedule::FromNamed("cuda_bf16_gemm_cublaslt", {{"algo_id", 66}, {"cublas", here - 100}});
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(other.status().message().find("cublas"), std::string::npos) << other.status().message();
  EXPECT_NE(other.status().message().find(std::to_string(here - 100)), std::string::npos) << other.status().message();
  // An attribute outside its declared range is refused the same way.
  EXPECT_EQ(Schedule::FromNamed("cuda_f32_gemm_cublaslt", {{"tile", 4096}}).status().code(), StatusCode::kOutOfRange);
}

TEST(CudaGemm, BundleEntriesForAGpuRoundTripAndAnotherCublasVersionIsRejectedAsAnEntry) {
  const int32_t here = cuda::LoadedCublasVersion();
  BundleSpec spec;
  spec.device = FakeGpu();
  spec.created_at = 1;
  auto entry = [](OpKey key, std::string variant, std::vector<std::pair<std::string, int64_t>> params) {
    BundleEntry e;
    e.key = key;
    e.schedule = {std::move(variant), std::move(params)};
    e.tuned_us = 10;
    e.default_us = 12;
    e.trials = 8;
    return e;
  };
  spec.entries = {
      entry(OpKey::Gemm(16, 4096, 4096, false, true, DType::kBF16), "cuda_bf16_gemm_cublaslt",
            {{"algo_id", 66}, {"tile", 20}, {"stages", 8}, {"splitk", 4}, {"reduction", 1}, {"cublas", here}}),
      entry(OpKey::Gemm(1, 4096, 4096, false, true, DType::kF16), "cuda_f16_gemm_cublaslt",
            {{"algo_id", 66}, {"cublas", here + 1}}),
      entry(OpKey::Gemm(128, 3072, 768, false, false, DType::kF32), "cuda_f32_gemm_cublas", {}),
      entry(OpKey::Gemm(64, 64, 64, false, false, DType::kF32), "cpu_f32_gemm_4x4__scalar", {}),
  };
  auto back = ParseBundle(SerializeBundle(spec));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->entries.size(), spec.entries.size());
  for (size_t i = 0; i < spec.entries.size(); ++i) {
    EXPECT_EQ(back->entries[i].key, spec.entries[i].key);
    EXPECT_EQ(back->entries[i].schedule, spec.entries[i].schedule);
  }
  EXPECT_EQ(back->device.fingerprint, spec.device.fingerprint);
  auto json = BundleFromJson(BundleToJson(*back));
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ(SerializeBundle(*json), SerializeBundle(*back));

  const ResolvedBundle r = ResolveBundle(*back, spec.device);
  ASSERT_EQ(r.entries.size(), 2u);
  EXPECT_STREQ(r.entries[0].schedule.variant->name, "cuda_bf16_gemm_cublaslt");
  EXPECT_EQ(r.entries[0].schedule.params[size_t(r.entries[0].schedule.variant->ParamIndex("splitk"))], 4);
  EXPECT_STREQ(r.entries[1].schedule.variant->name, "cuda_f32_gemm_cublas");
  ASSERT_EQ(r.rejected.size(), 2u);
  EXPECT_EQ(r.rejected[0].reason, EntryRejection::kBadParameter);
  EXPECT_NE(r.rejected[0].message.find(std::to_string(here + 1)), std::string::npos) << r.rejected[0].message;
  EXPECT_EQ(r.rejected[1].reason, EntryRejection::kUnsupported) << r.rejected[1].message;
}

TEST(CudaGemm, TheOwnGemvKernelTakesDecodeShapesOfLayoutNtOnly) {
  const DeviceInfo gpu = FakeGpu();
  for (DType d : kDtypes) {
    const KernelVariant* v = FindKernelVariant(fmt::format("cuda_{}_gemv_nt", DTypeName(d)));
    ASSERT_NE(v, nullptr);
    EXPECT_TRUE(VariantSupports(*v, OpKey::Gemm(16, 4096, 4096, false, true, d), gpu).ok());
    EXPECT_TRUE(VariantSupports(*v, OpKey::Gemm(1, 11008, 4096, false, true, d), gpu).ok());
    for (const OpKey& declined : {OpKey::Gemm(17, 4096, 4096, false, true, d), OpKey::Gemm(1, 4096, 4096, false, false, d),
                                  OpKey::Gemm(1, 4096, 4096, true, true, d)}) {
      const Status st = VariantSupports(*v, declined, gpu);
      EXPECT_FALSE(st.ok()) << declined.ToString();
      EXPECT_NE(st.message().find(declined.ToString()), std::string::npos) << st.message();
    }
    // Its default row tile covers m; a larger one is redundant for the search.
    const OpKey key = OpKey::Gemm(3, 4096, 4096, false, true, d);
    const Schedule def = VariantDefaultSchedule(*v, key, gpu);
    EXPECT_EQ(def.params[size_t(v->ParamIndex("m_tile"))], 4);
    EXPECT_FALSE(v->redundant(*v, key, def.params));
    ParamValues bigger = def.params;
    bigger[size_t(v->ParamIndex("m_tile"))] = 8;
    EXPECT_TRUE(v->redundant(*v, key, bigger));
    // cuBLAS stays the default of decode shapes.
    EXPECT_EQ(DefaultSchedule(key, gpu)->variant->name, Name(d, "cublas"));
  }
}

TEST(CudaGemm, TheOwnTensorCoreKernelTakesF16AndBf16InEveryLayoutOnAmpereAndLater) {
  const DeviceInfo gpu = FakeGpu();
  EXPECT_EQ(FindKernelVariant("cuda_f32_gemm_mma"), nullptr);
  for (DType d : {DType::kF16, DType::kBF16}) {
    const KernelVariant* v = FindKernelVariant(Name(d, "mma"));
    ASSERT_NE(v, nullptr);
    for (int layout = 0; layout < 4; ++layout)
      for (auto [m, n, k] : {std::array<int64_t, 3>{1, 1, 1}, {333, 4096, 11008}, {2048, 3072, 768}}) {
        const OpKey key = OpKey::Gemm(m, n, k, layout & 1, layout & 2, d);
        EXPECT_TRUE(VariantSupports(*v, key, gpu).ok()) << key.ToString();
        // Its fitted defaults pass the check and are a point the search visits.
        const Schedule def = VariantDefaultSchedule(*v, key, gpu);
        EXPECT_TRUE(CheckSchedule(def, key, gpu).ok()) << def.ToString();
        EXPECT_FALSE(v->redundant(*v, key, def.params)) << def.ToString();
        // cuBLAS stays the default.
        EXPECT_EQ(DefaultSchedule(key, gpu)->variant->name, Name(d, "cublas"));
      }
    DeviceInfo turing = FakeGpu();
    turing.family = 7;
    turing.model = 5;
    const Status old = VariantSupports(*v, OpKey::Gemm(64, 64, 64, false, false, d), turing);
    EXPECT_FALSE(old.ok());
    EXPECT_NE(old.message().find("7.5"), std::string::npos) << old.message();

    // Split-K while the tiles leave SMs idle: 1 x 32 tiles of 64 x 128 on 132 SMs.
    const OpKey decode = OpKey::Gemm(16, 4096, 4096, false, true, d);
    const Schedule fitted = VariantDefaultSchedule(*v, decode, gpu);
    EXPECT_EQ(fitted.params[size_t(v->ParamIndex("bm"))], 64);
    EXPECT_EQ(fitted.params[size_t(v->ParamIndex("bn"))], 128);
    EXPECT_EQ(fitted.params[size_t(v->ParamIndex("split_k"))], 8);
    EXPECT_EQ(VariantDefaultSchedule(*v, OpKey::Gemm(2048, 4096, 4096, false, true, d), gpu)
                  .params[size_t(v->ParamIndex("split_k"))],
              1);

    // A split that leaves a block without a k tile, or a 128 tile over 64 rows, is
    // redundant; an over-large workspace or shared memory is refused, naming why.
    const OpKey shallow = OpKey::Gemm(64, 64, 64, false, false, d);  // 2 k tiles
    auto with = [&](int32_t bm, int32_t bn, int32_t stages, int32_t split) {
      auto s = Schedule::FromNamed(v->name, {{"bm", bm}, {"bn", bn}, {"stages", stages}, {"split_k", split}});
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      return *s;
    };
    EXPECT_FALSE(v->redundant(*v, shallow, with(64, 64, 2, 2).params));
    EXPECT_TRUE(v->redundant(*v, shallow, with(64, 64, 2, 4).params));
    EXPECT_TRUE(v->redundant(*v, shallow, with(128, 64, 2, 1).params));
    const Status big = CheckSchedule(with(128, 128, 3, 16), OpKey::Gemm(8192, 8192, 4096, false, false, d), gpu);
    EXPECT_FALSE(big.ok());
    EXPECT_NE(big.message().find("split_k=16"), std::string::npos) << big.message();
    DeviceInfo small_smem = FakeGpu();
    small_smem.properties.emplace_back("smem_per_block_optin", 48 << 10);
    const Status smem = CheckSchedule(with(128, 128, 4, 1), shallow, small_smem);
    EXPECT_FALSE(smem.ok());
    EXPECT_NE(smem.message().find("shared memory"), std::string::npos) << smem.message();
    EXPECT_TRUE(CheckSchedule(with(64, 64, 2, 1), shallow, small_smem).ok());
  }
}

// cuBLAS is loaded at first use, not linked (a CPU-only process never maps it); where
// the toolkit's libraries are installed, every function this build calls resolves.
TEST(CudaGemm, CublasLoadsOnDemandWithEveryFunctionThisBuildCalls) {
  std::string error;
  const cuda::CublasApi* api = cuda::LoadCublas(&error);
  if (!api) {
    EXPECT_NE(error.find("libcublas"), std::string::npos) << error;
    GTEST_SKIP() << "cuBLAS is not installed here: " << error;
  }
  EXPECT_EQ(int(api->cublasLtGetVersion() / 10000), CUBLAS_VER_MAJOR);
  EXPECT_NE(api->cublasGemmEx, nullptr);
  EXPECT_STREQ(api->cublasGetStatusString(CUBLAS_STATUS_SUCCESS), "success");
}

// The host stores and loads the device tests and the GPU harness fill buffers with.
TEST(CudaGemm, HostStoresRoundFloatDtypesToNearestEven) {
  uint8_t buf[4];
  EXPECT_EQ(detail::StoreAs(DType::kF32, 0.1f, buf), 0.1f);
  EXPECT_EQ(detail::LoadAs(DType::kF32, buf), 0.1f);
  // bf16 keeps 8 significand bits: 1 + 2^-9 is a tie, rounded to even (1); 1 + 3 * 2^-9 rounds up.
  EXPECT_EQ(detail::StoreAs(DType::kBF16, 1.0f + 0x1p-9f, buf), 1.0f);
  EXPECT_EQ(detail::LoadAs(DType::kBF16, buf), 1.0f);
  EXPECT_EQ(detail::StoreAs(DType::kBF16, 1.0f + 3 * 0x1p-9f, buf), 1.0f + 0x1p-7f);
  // f16 keeps 11: 1 + 2^-12 ties to 1; its largest finite value survives; 1e5 overflows.
  EXPECT_EQ(detail::StoreAs(DType::kF16, 1.0f + 0x1p-12f, buf), 1.0f);
  EXPECT_EQ(detail::StoreAs(DType::kF16, 65504.0f, buf), 65504.0f);
  EXPECT_EQ(detail::LoadAs(DType::kF16, buf), 65504.0f);
  EXPECT_TRUE(std::isinf(detail::StoreAs(DType::kF16, 1e5f, buf)));
  EXPECT_TRUE(std::isnan(detail::StoreAs(DType::kBF16, std::nanf(""), buf)));
}

TEST(CudaGemm, TheFingerprintIsTheHardwareNotTheDriverOrLibraryVersions) {
  EXPECT_EQ(FakeGpu(13000).fingerprint, FakeGpu(12080).fingerprint);
  EXPECT_NE(FakeGpu(13000, 132).fingerprint, FakeGpu(13000, 114).fingerprint);
  EXPECT_EQ(FakeGpu().fingerprint.rfind("cuda-sm_90-", 0), 0u) << FakeGpu().fingerprint;
}

// ---- on a GPU ----

bool HaveGpu() { return !cuda::ProbeCudaDevices().devices.empty(); }

// Random values in [-1, 1] rounded to the dtype: the float values and their bytes.
struct Operand {
  std::vector<float> values;
  std::vector<uint8_t> bytes;
};
Operand MakeOperand(DType d, size_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Operand o;
  o.values.resize(count);
  o.bytes.resize(count * DTypeSize(d));
  for (size_t i = 0; i < count; ++i) o.values[i] = detail::StoreAs(d, u(rng), o.bytes.data() + i * DTypeSize(d));
  return o;
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
};

// One GEMM on the GPU with padded leading dimensions, alpha = 1.5 and beta = 0.5,
// through `run`, checked element by element against a double-precision reference
// (relative to the sum of |products|; f16/bf16 allow the output's rounding).
// `pad`: elements added to each leading dimension (a, b, c).
template <typename RunFn>
void CheckOnGpu(const OpKey& key, std::array<int64_t, 3> pad, RunFn&& run) {
  SCOPED_TRACE(key.ToString());
  const DType d = key.dtype;
  const int64_t m = key.m(), n = key.n(), k = key.k();
  const int64_t lda = (key.trans_a ? m : k) + pad[0], ldb = (key.trans_b ? k : n) + pad[1], ldc = n + pad[2];
  const int64_t a_rows = key.trans_a ? k : m, b_rows = key.trans_b ? n : k;
  std::mt19937_64 rng(key.Hash());
  const Operand a = MakeOperand(d, size_t(a_rows * lda), rng), b = MakeOperand(d, size_t(b_rows * ldb), rng),
                c = MakeOperand(d, size_t(m * ldc), rng);
  DeviceBuffer da(a.bytes.size()), db(b.bytes.size()), dc(c.bytes.size());
  ASSERT_EQ(cudaMemcpy(da.p, a.bytes.data(), a.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db.p, b.bytes.data(), b.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dc.p, c.bytes.data(), c.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  GemmArgs g;
  g.dtype = d;
  g.trans_a = key.trans_a;
  g.trans_b = key.trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = 1.5f;
  g.beta = 0.5f;
  g.a = da.p;
  g.lda = lda;
  g.b = db.p;
  g.ldb = ldb;
  g.c = dc.p;
  g.ldc = ldc;
  g.stream = stream;
  const Status st = run(g);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  std::vector<uint8_t> out(c.bytes.size());
  ASSERT_EQ(cudaMemcpy(out.data(), dc.p, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  const double tol = d == DType::kF32 ? 1e-5 : d == DType::kF16 ? 2e-3 : 1e-2;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = key.trans_a ? a.values[size_t(p * lda + i)] : a.values[size_t(i * lda + p)];
        const double bv = key.trans_b ? b.values[size_t(j * ldb + p)] : b.values[size_t(p * ldb + j)];
        sum += av * bv;
        mag += std::abs(av * bv);
      }
      const double cv = c.values[size_t(i * ldc + j)];
      const double want = 1.5 * sum + 0.5 * cv, scale = 1.5 * mag + 0.5 * std::abs(cv) + 1e-30;
      const double got = detail::LoadAs(d, out.data() + size_t(i * ldc + j) * DTypeSize(d));
      ASSERT_LE(std::abs(got - want) / scale, tol) << "at (" << i << "," << j << "): " << got << " vs " << want;
    }
  // The padding columns of C are untouched.
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = n; j < ldc; ++j) {
      const size_t at = size_t(i * ldc + j) * DTypeSize(d);
      ASSERT_EQ(std::memcmp(out.data() + at, c.bytes.data() + at, DTypeSize(d)), 0) << "padding (" << i << "," << j << ")";
    }
}

TEST(CudaGemm, TheRuntimeServesEveryDtypeAndLayoutOnAGpuAndCountsTheMisses) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here: " << cuda::ProbeCudaDevices().status;
  RuntimeOptions o;
  o.device = "cuda:0";
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  int calls = 0;
  for (DType d : kDtypes)
    for (int layout = 0; layout < 4; ++layout)
      for (auto [m, n, k] : {std::array<int64_t, 3>{1, 1, 1}, {1, 67, 129}, {7, 13, 33}, {65, 48, 96}}) {
        CheckOnGpu(OpKey::Gemm(m, n, k, layout & 1, layout & 2, d), {3, 5, 2},
                   [&](const GemmArgs& g) { return (*rt)->Gemm(g); });
        ++calls;
      }
  uint64_t misses = 0, hits = 0;
  for (const KeyStats& s : (*rt)->Stats()) {
    misses += s.misses;
    hits += s.hits;
  }
  EXPECT_EQ(misses, uint64_t(calls));
  EXPECT_EQ(hits, 0u);
}

// A miss on a GPU is timed by events read on a later miss, never by waiting: after
// three calls of one key (the stream drained between them) the report counts all
// three and has the time of the completed measurements.
TEST(CudaGemm, MissesOnAGpuArePricedByTheGpuTimeWithoutWaiting) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here: " << cuda::ProbeCudaDevices().status;
  RuntimeOptions o;
  o.device = "cuda:0";
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  const OpKey key = OpKey::Gemm(512, 512, 512, false, false, DType::kF32);
  const size_t bytes = 512 * 512 * 4;
  DeviceBuffer a(bytes), b(bytes), c(bytes);
  ASSERT_EQ(cudaMemset(a.p, 0, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(b.p, 0, bytes), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  GemmArgs g = DenseGemmArgs(key, a.p, b.p, c.p);
  g.stream = stream;
  for (int call = 0; call < 3; ++call) {
    ASSERT_TRUE((*rt)->Gemm(g).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  cudaStreamDestroy(stream);
  const MissReport rep = (*rt)->GetMissReport();
  ASSERT_EQ(rep.records.size(), 1u);
  EXPECT_EQ(rep.records[0].count, 3u);
  EXPECT_STREQ(rep.records[0].fallback.substr(0, 20).c_str(), "cuda_f32_gemm_cublas");
  // Two measurements completed (the first and second calls), standing for two calls.
  EXPECT_GT(rep.records[0].fallback_us_total, 0.0);
}

// Every schedule of the own GEMV kernel on awkward decode shapes, both load paths:
// 16-byte loads (aligned rows, k a multiple of the vector) and element loads.
TEST(CudaGemm, EveryGemvScheduleIsCorrect) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here: " << cuda::ProbeCudaDevices().status;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const DeviceInfo gpu = cuda::ProbeCudaDevices().devices[0];
  for (DType d : kDtypes) {
    const KernelVariant& v = *FindKernelVariant(fmt::format("cuda_{}_gemv_nt", DTypeName(d)));
    for (auto [m, n, k] : {std::array<int64_t, 3>{1, 37, 128}, {3, 1000, 64}, {16, 129, 200}, {5, 64, 4096}, {1, 1, 1}}) {
      const OpKey key = OpKey::Gemm(m, n, k, false, true, d);
      for (int32_t mt : {1, 2, 4, 8, 16})
        for (int32_t cols : {1, 2, 4})
          for (int32_t warps : {2, 4, 8}) {
            auto s = Schedule::FromNamed(v.name, {{"m_tile", mt}, {"cols", cols}, {"warps", warps}});
            ASSERT_TRUE(s.ok()) << s.status().ToString();
            ASSERT_TRUE(CheckSchedule(*s, key, gpu).ok()) << s->ToString();
            for (std::array<int64_t, 3> pad : {std::array<int64_t, 3>{8, 8, 8}, {3, 5, 2}}) {
              SCOPED_TRACE(s->ToString());
              CheckOnGpu(key, pad, [&](const GemmArgs& g) { return RunGemm(*s, g); });
            }
          }
    }
  }
}

// The own tensor-core kernel: every tile and pipeline depth without split-K, and
// split-K on one tile, in every layout, on shapes off the tiles; aligned rows (16-byte
// cp.async copies) and odd leading dimensions (element copies).
TEST(CudaGemm, EveryMmaScheduleIsCorrect) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here: " << cuda::ProbeCudaDevices().status;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const DeviceInfo gpu = cuda::ProbeCudaDevices().devices[0];
  for (DType d : {DType::kF16, DType::kBF16}) {
    const KernelVariant& v = *FindKernelVariant(Name(d, "mma"));
    std::vector<Schedule> schedules;
    for (int32_t bm : {64, 128})
      for (int32_t bn : {64, 128})
        for (int32_t stages : {2, 3, 4})
          schedules.push_back(
              *Schedule::FromNamed(v.name, {{"bm", bm}, {"bn", bn}, {"stages", stages}, {"split_k", 1}}));
    for (int32_t split : {2, 4, 16})
      schedules.push_back(*Schedule::FromNamed(v.name, {{"bm", 64}, {"bn", 64}, {"stages", 3}, {"split_k", split}}));
    for (int layout = 0; layout < 4; ++layout)
      for (auto [m, n, k] :
           {std::array<int64_t, 3>{1, 1, 1}, {17, 33, 40}, {64, 128, 256}, {130, 70, 1000}, {5, 200, 37}}) {
        const OpKey key = OpKey::Gemm(m, n, k, layout & 1, layout & 2, d);
        for (const Schedule& s : schedules) {
          ASSERT_TRUE(CheckSchedule(s, key, gpu).ok()) << s.ToString();
          for (std::array<int64_t, 3> pad : {std::array<int64_t, 3>{8, 8, 8}, {3, 5, 2}}) {
            SCOPED_TRACE(s.ToString());
            CheckOnGpu(key, pad, [&](const GemmArgs& g) { return RunGemm(s, g); });
          }
        }
      }
  }
}

TEST(CudaGemm, EveryCublasLtHeuristicAlgorithmIsCorrect) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here: " << cuda::ProbeCudaDevices().status;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const DeviceInfo gpu = cuda::ProbeCudaDevices().devices[0];
  for (DType d : kDtypes)
    for (const OpKey& key : {OpKey::Gemm(16, 256, 512, false, true, d), OpKey::Gemm(33, 96, 200, true, false, d)}) {
      const KernelVariant& v = *FindKernelVariant(Name(d, "cublaslt"));
      const std::vector<ParamValues> found = v.candidates(v, key, gpu);
      EXPECT_FALSE(found.empty()) << key.ToString();
      for (const ParamValues& p : found) {
        Schedule s;
        s.variant = &v;
        s.params = p;
        ASSERT_TRUE(CheckSchedule(s, key, gpu).ok()) << s.ToString();
        EXPECT_FALSE(v.redundant(v, key, p)) << s.ToString();
        // Rows aligned to 16 bytes: the algorithm itself runs.
        const uint64_t before = cuda::CublasLtFallbacksOnThisThread();
        CheckOnGpu(key, {8, 8, 8}, [&](const GemmArgs& g) { return RunGemm(s, g); });
        EXPECT_EQ(cuda::CublasLtFallbacksOnThisThread(), before) << s.ToString();
      }
      // Odd leading dimensions: correct whether the algorithm runs them or, where
      // cublasLtMatmulAlgoCheck refuses them, cublasGemmEx does.
      if (!found.empty() && d != DType::kF32) {
        Schedule s;
        s.variant = &v;
        s.params = found[0];
        CheckOnGpu(key, {3, 5, 1}, [&](const GemmArgs& g) { return RunGemm(s, g); });
      }
    }
}
#endif

}  // namespace
}  // namespace cliffguard
