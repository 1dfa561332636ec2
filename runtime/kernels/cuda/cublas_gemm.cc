#include "kernels/cuda/cublas_gemm.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "cliffguard/detail/logging.h"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/stream_workspace.h"

namespace cliffguard::cuda {
namespace {

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS's first
// operand is B as stored, its second A, its output C^T (n x m, ldc).
struct ColumnMajorCall {
  cublasOperation_t op_first, op_second;
  int64_t rows_first, cols_first, rows_second, cols_second;  // the stored matrices, column-major
};
ColumnMajorCall ToColumnMajor(const GemmArgs& a) {
  ColumnMajorCall c;
  c.op_first = a.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  c.op_second = a.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  c.rows_first = a.trans_b ? a.k : a.n;
  c.cols_first = a.trans_b ? a.n : a.k;
  c.rows_second = a.trans_a ? a.m : a.k;
  c.cols_second = a.trans_a ? a.k : a.m;
  return c;
}

cudaDataType_t CudaType(DType d) {
  switch (d) {
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// The loaded libraries; only called once ThreadState has loaded them.
const CublasApi& Api() { return *LoadCublas(); }

Status BlasError(const char* what, cublasStatus_t s) {
  return Internal(fmt::format("{} failed: {} ({})", what, Api().cublasGetStatusString(s), int(s)));
}

bool FitsInt(int64_t v) { return v <= std::numeric_limits<int>::max(); }

// ---- cuBLASLt schedules: parameters in the order of LtSpecs() ----
enum LtParam { kAlgoId, kTile, kStages, kSplitK, kReduction, kSwizzle, kCustom, kInnerShape, kClusterShape, kCublas };

template <int32_t kFirst, int32_t kCount>
constexpr std::array<int32_t, kCount> Range() {
  std::array<int32_t, kCount> r{};
  for (int32_t i = 0; i < kCount; ++i) r[i] = kFirst + i;
  return r;
}
// Value ranges cover the enums of cuBLAS 12-13 (tiles < 640, stages < 40, cluster
// shapes < 53, inner shapes < 6) with room; the search reaches only the heuristic's
// points (CublasLtRedundant), so the ranges bound what a stored schedule may name.
constexpr auto kAlgoIds = Range<0, 128>();
constexpr auto kTiles = Range<0, 1024>();
constexpr auto kStagesValues = Range<0, 64>();
constexpr auto kSplitValues = Range<1, 64>();
constexpr auto kReductionValues = Range<0, 8>();
constexpr auto kSwizzleValues = Range<0, 8>();
constexpr auto kCustomValues = Range<0, 64>();
constexpr auto kInnerShapes = Range<0, 16>();
constexpr auto kClusterShapes = Range<0, 64>();

struct LtAttr {
  cublasLtMatmulAlgoConfigAttributes_t attr;
  size_t bytes;  // the attribute's width in cuBLASLt's ABI
};
constexpr LtAttr kLtAttrs[kCublas] = {
    {CUBLASLT_ALGO_CONFIG_ID, 4},          {CUBLASLT_ALGO_CONFIG_TILE_ID, 4},
    {CUBLASLT_ALGO_CONFIG_STAGES_ID, 4},   {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 4},
    {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, 4}, {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 4},
    {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, 4}, {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, 2},
    {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, 2},
};

// The `cublas` parameter's one value: the headers' version until the library is
// loaded (LoadCublasForDevices), then the loaded library's.
int32_t& VersionValue() {
  static int32_t v = CUBLAS_VERSION;
  return v;
}

std::vector<ParamSpec>& LtSpecs() {
  static std::vector<ParamSpec>* specs = new std::vector<ParamSpec>{
      {"algo_id", kAlgoIds, 0, "cuBLASLt algorithm id (CUBLASLT_ALGO_CONFIG_ID)"},
      {"tile", kTiles, 0, "cublasLtMatmulTile_t: the CTA tile"},
      {"stages", kStagesValues, 0, "cublasLtMatmulStages_t: shared-memory pipeline stages"},
      {"splitk", kSplitValues, 1, "split-K factor (1: none)"},
      {"reduction", kReductionValues, 0, "cublasLtReductionScheme_t of a split-K algorithm"},
      {"swizzle", kSwizzleValues, 0, "CTA swizzling"},
      {"custom", kCustomValues, 0, "the algorithm's custom option"},
      {"inner_shape", kInnerShapes, 0, "cublasLtMatmulInnerShape_t"},
      {"cluster_shape", kClusterShapes, 0, "cublasLtClusterShape_t (sm_90 thread-block clusters)"},
      {"cublas", std::span<const int32_t>(&VersionValue(), 1), VersionValue(),
       "the cuBLAS version the algorithm was found with; only the loaded version runs it"},
  };
  return *specs;
}

// The problem as cuBLASLt describes it: the matmul descriptor and the layouts.
struct LtProblem {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  LtProblem() = default;
  LtProblem(const LtProblem&) = delete;
  LtProblem& operator=(const LtProblem&) = delete;
  LtProblem(LtProblem&& o) noexcept { *this = std::move(o); }
  LtProblem& operator=(LtProblem&& o) noexcept {
    std::swap(desc, o.desc);
    std::swap(first, o.first);
    std::swap(second, o.second);
    std::swap(out, o.out);
    return *this;
  }
  ~LtProblem() {
    if (desc) Api().cublasLtMatmulDescDestroy(desc);
    if (first) Api().cublasLtMatrixLayoutDestroy(first);
    if (second) Api().cublasLtMatrixLayoutDestroy(second);
    if (out) Api().cublasLtMatrixLayoutDestroy(out);
  }
};

Status MakeProblem(const GemmArgs& a, LtProblem& p) {
  const ColumnMajorCall c = ToColumnMajor(a);
  const cudaDataType_t t = CudaType(a.dtype);
  cublasStatus_t s = Api().cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = Api().cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &c.op_first, sizeof c.op_first);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = Api().cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &c.op_second, sizeof c.op_second);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = Api().cublasLtMatrixLayoutCreate(&p.first, t, uint64_t(c.rows_first), uint64_t(c.cols_first), a.ldb);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = Api().cublasLtMatrixLayoutCreate(&p.second, t, uint64_t(c.rows_second), uint64_t(c.cols_second), a.lda);
  if (s == CUBLAS_STATUS_SUCCESS) s = Api().cublasLtMatrixLayoutCreate(&p.out, t, uint64_t(a.n), uint64_t(a.m), a.ldc);
  return s == CUBLAS_STATUS_SUCCESS ? Status::Ok() : BlasError("cuBLASLt descriptor setup", s);
}

// What identifies a cached cuBLASLt call: shape, layout, leading dimensions, schedule.
struct LtCallKey {
  int64_t m, n, k, lda, ldb, ldc;
  int32_t dtype, trans_a, trans_b;
  ParamValues params;
  bool operator==(const LtCallKey&) const = default;
};

struct LtPlan {
  LtCallKey key;
  LtProblem problem;
  cublasLtMatmulAlgo_t algo;
  size_t workspace_bytes = 0;
  bool fallback = false;  // the algorithm does not run these arguments: cublasGemmEx does
};

// One calling thread's cuBLAS state (see the header).
struct ThreadState {
  uint64_t fallbacks = 0;
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  StreamWorkspaces workspaces;  // the cuBLASLt workspace per stream
  std::vector<LtPlan> plans;
  static constexpr size_t kMaxPlans = 256;

  static Status Loaded() {
    std::string error;
    if (!LoadCublas(&error)) return FailedPrecondition(fmt::format("cuBLAS: {}", error));
    return Status::Ok();
  }
  ~ThreadState() {
    plans.clear();
    if (lt) Api().cublasLtDestroy(lt);
    if (blas) Api().cublasDestroy_v2(blas);
  }
  // The handles exist only once the libraries loaded: a hit checks one pointer.
  template <typename Handle, typename CreateFn>
  static StatusOr<Handle> Made(Handle& h, CreateFn create, const char* what) {
    if (!h) {
      CG_RETURN_IF_ERROR(Loaded());
      if (cublasStatus_t s = create(&h); s != CUBLAS_STATUS_SUCCESS) {
        h = nullptr;
        return BlasError(what, s);
      }
    }
    return h;
  }
  StatusOr<cublasHandle_t> Blas() {
    return Made(blas, [](cublasHandle_t* h) { return Api().cublasCreate_v2(h); }, "cublasCreate");
  }
  StatusOr<cublasLtHandle_t> Lt() {
    return Made(lt, [](cublasLtHandle_t* h) { return Api().cublasLtCreate(h); }, "cublasLtCreate");
  }
};
thread_local ThreadState t_state;

Status CublasGemm(const KernelVariant&, const GemmArgs& a, const ParamValues&) {
  if (!FitsInt(a.lda) || !FitsInt(a.ldb) || !FitsInt(a.ldc))
    return InvalidArgument(fmt::format("gemm on cuBLAS: lda={} ldb={} ldc={} must fit a 32-bit int", a.lda, a.ldb, a.ldc));
  CG_ASSIGN_OR_RETURN(cublasHandle_t h, t_state.Blas());
  cublasStatus_t s = Api().cublasSetStream_v2(h, static_cast<cudaStream_t>(a.stream));
  if (s != CUBLAS_STATUS_SUCCESS) return BlasError("cublasSetStream", s);
  const ColumnMajorCall c = ToColumnMajor(a);
  const cudaDataType_t t = CudaType(a.dtype);
  s = Api().cublasGemmEx(h, c.op_first, c.op_second, int(a.n), int(a.m), int(a.k), &a.alpha, a.b, t, int(a.ldb), a.a, t,
                   int(a.lda), &a.beta, a.c, t, int(a.ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return s == CUBLAS_STATUS_SUCCESS ? Status::Ok() : BlasError("cublasGemmEx", s);
}

Status CublasSupports(const KernelVariant&, const OpKey& key, const DeviceInfo&) {
  if (!FitsInt(key.m()) || !FitsInt(key.n()) || !FitsInt(key.k()))
    return InvalidArgument(fmt::format("{}: cuBLAS takes m, n and k that fit a 32-bit int", key.ToString()));
  return Status::Ok();
}

Status InitAlgo(cublasLtHandle_t lt, DType dtype, const ParamValues& p, cublasLtMatmulAlgo_t& algo) {
  const cudaDataType_t t = CudaType(dtype);
  cublasStatus_t s = Api().cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, t, t, t, t, p[kAlgoId], &algo);
  if (s != CUBLAS_STATUS_SUCCESS) return BlasError(fmt::format("cublasLtMatmulAlgoInit(algo_id={})", p[kAlgoId]).c_str(), s);
  for (int i = kTile; i < kCublas; ++i) {
    const uint32_t v32 = static_cast<uint32_t>(p[i]);
    const uint16_t v16 = static_cast<uint16_t>(p[i]);
    const void* v = kLtAttrs[i].bytes == 2 ? static_cast<const void*>(&v16) : static_cast<const void*>(&v32);
    s = Api().cublasLtMatmulAlgoConfigSetAttribute(&algo, kLtAttrs[i].attr, v, kLtAttrs[i].bytes);
    if (s != CUBLAS_STATUS_SUCCESS && p[i] != (i == kSplitK ? 1 : 0))
      return BlasError(fmt::format("cuBLASLt algorithm attribute {}={}", LtSpecs()[size_t(i)].name, p[i]).c_str(), s);
  }
  return Status::Ok();
}

StatusOr<LtPlan*> FindOrMakePlan(cublasLtHandle_t lt, const GemmArgs& a, const ParamValues& p) {
  const LtCallKey key{a.m, a.n, a.k, a.lda, a.ldb, a.ldc, int32_t(a.dtype), a.trans_a, a.trans_b, p};
  for (LtPlan& plan : t_state.plans)
    if (plan.key == key) return &plan;
  LtPlan plan;
  plan.key = key;
  CG_RETURN_IF_ERROR(MakeProblem(a, plan.problem));
  CG_RETURN_IF_ERROR(InitAlgo(lt, a.dtype, p, plan.algo));
  cublasLtMatmulHeuristicResult_t check{};
  const LtProblem& q = plan.problem;
  cublasStatus_t s = Api().cublasLtMatmulAlgoCheck(lt, q.desc, q.first, q.second, q.out, q.out, &plan.algo, &check);
  if (s != CUBLAS_STATUS_SUCCESS || check.workspaceSize > kCublasLtWorkspaceBytes) {
    plan.fallback = true;
    logging::Warn("cuBLASLt algorithm algo_id={} tile={} stages={} splitk={} does not run gemm m={} n={} k={} "
                  "lda={} ldb={} ldc={} ({}): these calls run cublasGemmEx",
                  p[kAlgoId], p[kTile], p[kStages], p[kSplitK], a.m, a.n, a.k, a.lda, a.ldb, a.ldc,
                  s != CUBLAS_STATUS_SUCCESS ? Api().cublasGetStatusString(s)
                                             : fmt::format("needs {} bytes of workspace", check.workspaceSize).c_str());
  }
  plan.workspace_bytes = check.workspaceSize;
  if (t_state.plans.size() >= ThreadState::kMaxPlans) t_state.plans.clear();
  t_state.plans.push_back(std::move(plan));
  return &t_state.plans.back();
}

Status CublasLtGemm(const KernelVariant& self, const GemmArgs& a, const ParamValues& p) {
  CG_ASSIGN_OR_RETURN(cublasLtHandle_t lt, t_state.Lt());
  CG_ASSIGN_OR_RETURN(LtPlan * plan, FindOrMakePlan(lt, a, p));
  const auto address = reinterpret_cast<uintptr_t>(a.a) | reinterpret_cast<uintptr_t>(a.b) |
                       reinterpret_cast<uintptr_t>(a.c);
  if (plan->fallback || address % kCublasLtMinAlignment != 0) {
    ++t_state.fallbacks;
    return CublasGemm(self, a, p);
  }
  CG_ASSIGN_OR_RETURN(void* ws,
                      t_state.workspaces.Get(a.stream, kCublasLtWorkspaceBytes, "cuBLASLt workspace"));
  const LtProblem& q = plan->problem;
  const cublasStatus_t s = Api().cublasLtMatmul(lt, q.desc, &a.alpha, a.b, q.first, a.a, q.second, &a.beta, a.c, q.out, a.c,
                                          q.out, &plan->algo, ws, plan->workspace_bytes,
                                          static_cast<cudaStream_t>(a.stream));
  return s == CUBLAS_STATUS_SUCCESS ? Status::Ok() : BlasError("cublasLtMatmul", s);
}

// The heuristic's algorithms for the key (dense operands), as parameter values.
std::vector<ParamValues> CublasLtCandidates(const KernelVariant& self, const OpKey& key, const DeviceInfo&) {
  std::vector<ParamValues> out;
  auto lt = t_state.Lt();
  if (!lt.ok()) return out;
  const GemmArgs a = DenseGemmArgs(key, nullptr, nullptr, nullptr);
  LtProblem q;
  if (!MakeProblem(a, q).ok()) return out;
  cublasLtMatmulPreference_t pref = nullptr;
  if (Api().cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return out;
  const uint64_t ws = kCublasLtWorkspaceBytes;
  Api().cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  const uint32_t align = kCublasLtMinAlignment;
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    Api().cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align);
  std::array<cublasLtMatmulHeuristicResult_t, 32> results{};
  int found = 0;
  const cublasStatus_t s = Api().cublasLtMatmulAlgoGetHeuristic(*lt, q.desc, q.first, q.second, q.out, q.out, pref,
                                                          int(results.size()), results.data(), &found);
  Api().cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS) return out;
  for (int r = 0; r < found; ++r) {
    if (results[size_t(r)].state != CUBLAS_STATUS_SUCCESS) continue;
    ParamValues p{};
    bool representable = true;
    for (int i = 0; i < kCublas; ++i) {
      uint32_t v32 = 0;
      uint16_t v16 = 0;
      void* v = kLtAttrs[i].bytes == 2 ? static_cast<void*>(&v16) : static_cast<void*>(&v32);
      size_t written = 0;
      if (Api().cublasLtMatmulAlgoConfigGetAttribute(&results[size_t(r)].algo, kLtAttrs[i].attr, v, kLtAttrs[i].bytes,
                                               &written) != CUBLAS_STATUS_SUCCESS)
        v32 = v16 = (i == kSplitK ? 1 : 0);
      p[size_t(i)] = kLtAttrs[i].bytes == 2 ? int32_t(v16) : int32_t(v32);
      const ParamSpec& spec = self.params[size_t(i)];
      if (p[size_t(i)] < spec.values.front() || p[size_t(i)] > spec.values.back()) representable = false;
    }
    p[kCublas] = VersionValue();
    if (representable && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

// The search measures only the heuristic's algorithms for a key: any other point is
// redundant (most of the declared ranges do not form a valid configuration).
bool CublasLtRedundant(const KernelVariant& self, const OpKey& key, const ParamValues& p) {
  static std::mutex mu;
  static std::vector<std::pair<OpKey, std::vector<ParamValues>>>* known =
      new std::vector<std::pair<OpKey, std::vector<ParamValues>>>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = std::find_if(known->begin(), known->end(), [&](const auto& e) { return e.first == key; });
  if (it == known->end()) {
    if (known->size() >= 1024) known->clear();
    known->emplace_back(key, CublasLtCandidates(self, key, DeviceInfo{}));
    it = known->end() - 1;
  }
  return std::find(it->second.begin(), it->second.end(), p) == it->second.end();
}

}  // namespace

int32_t LoadedCublasVersion() { return VersionValue(); }

bool LoadCublasForDevices(std::string* error) {
  const CublasApi* api = LoadCublas(error);
  if (!api) return false;
  const auto loaded = static_cast<int32_t>(api->cublasLtGetVersion());
  if (loaded != VersionValue()) {
    VersionValue() = loaded;
    LtSpecs()[kCublas].default_value = loaded;
  }
  return true;
}

uint64_t CublasLtFallbacksOnThisThread() { return t_state.fallbacks; }

std::span<const KernelVariant> CublasGemmVariants() {
  // cublasGemmEx is the built-in default of every shape class; cuBLASLt only tuned.
  auto variant = [](const char* name, DType dtype, bool lt) {
    KernelVariant v{name, Backend::kCuda, OpKind::kGemm, dtype, 0, {}, &CublasSupports, nullptr, nullptr,
                    {.gemm = &CublasGemm}, {.gemm = {1, 1}}};
    if (lt) {
      v.params = LtSpecs();
      v.fn.gemm = &CublasLtGemm;
      v.candidates = &CublasLtCandidates;
      v.redundant = &CublasLtRedundant;
      v.candidates_only = true;
    } else {
      v.preferred_default = [](const KernelVariant&, const OpKey&, const DeviceInfo&) { return true; };
    }
    return v;
  };
  static const auto* variants = new std::array<KernelVariant, 6>{
      variant("cuda_f32_gemm_cublas", DType::kF32, false),   variant("cuda_f32_gemm_cublaslt", DType::kF32, true),
      variant("cuda_f16_gemm_cublas", DType::kF16, false),   variant("cuda_f16_gemm_cublaslt", DType::kF16, true),
      variant("cuda_bf16_gemm_cublas", DType::kBF16, false), variant("cuda_bf16_gemm_cublaslt", DType::kBF16, true),
  };
  return *variants;
}

}  // namespace cliffguard::cuda
