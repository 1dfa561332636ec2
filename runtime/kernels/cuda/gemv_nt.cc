#include "kernels/cuda/gemv_nt.h"

#include <cuda_runtime_api.h>

#include <array>
#include <limits>

#include <fmt/format.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemv_nt_launch.h"

namespace cliffguard::cuda {
namespace {

enum GemvParam { kMTile, kCols, kWarps };
constexpr int32_t kMTiles[] = {1, 2, 4, 8, 16};
constexpr int32_t kColsValues[] = {1, 2, 4};
constexpr int32_t kWarpsValues[] = {2, 4, 8};
constexpr ParamSpec kGemvSpecs[] = {
    {"m_tile", kMTiles, 1, "rows of A per block row (the grid has ceil(m / m_tile) block rows)"},
    {"cols", kColsValues, 2, "output columns per warp (rows of B it streams together)"},
    {"warps", kWarpsValues, 4, "warps per block"},
};

Status GemvSupports(const KernelVariant& self, const OpKey& key, const DeviceInfo&) {
  if (key.trans_a || !key.trans_b)
    return InvalidArgument(fmt::format("{}: {} runs layout nt only (A m x k, weights stored n x k)", key.ToString(),
                                       self.name));
  if (key.m() > kGemvMaxM)
    return InvalidArgument(fmt::format("{}: {} runs m <= {}", key.ToString(), self.name, kGemvMaxM));
  if (key.n() > std::numeric_limits<int>::max() || key.k() > std::numeric_limits<int>::max())
    return InvalidArgument(fmt::format("{}: {} takes n and k that fit a 32-bit int", key.ToString(), self.name));
  return Status::Ok();
}

int32_t TileFor(int64_t m) {
  for (int32_t t : kMTiles)
    if (t >= m) return t;
  return kMTiles[std::size(kMTiles) - 1];
}

void GemvFitDefaults(const KernelVariant&, const OpKey& key, const DeviceInfo&, ParamValues& p) {
  p[kMTile] = TileFor(key.m());
}

// A row tile of twice what m needs runs the same grid as the tile that covers m.
bool GemvRedundant(const KernelVariant&, const OpKey& key, const ParamValues& p) { return p[kMTile] > TileFor(key.m()); }

Status GemvEntry(const KernelVariant& self, const GemmArgs& a, const ParamValues& p) {
  if (a.lda > std::numeric_limits<int>::max() || a.ldb > std::numeric_limits<int>::max())
    return InvalidArgument(fmt::format("{}: lda={} ldb={} must fit a 32-bit int", self.name, a.lda, a.ldb));
  GemvNtLaunch l;
  l.type = a.dtype == DType::kF16 ? GemvType::kF16 : a.dtype == DType::kBF16 ? GemvType::kBF16 : GemvType::kF32;
  l.m_tile = p[kMTile];
  l.cols = p[kCols];
  l.warps = p[kWarps];
  l.op = OperandsOf(a);
  const int e = LaunchGemvNt(l);
  if (e == 0) return Status::Ok();
  return Internal(fmt::format("{}: launch failed: {}", self.name, cudaGetErrorString(cudaError_t(e))));
}

}  // namespace

std::span<const KernelVariant> GemvNtVariants() {
  auto variant = [](const char* name, DType dtype) {
    KernelVariant v{name, Backend::kCuda, OpKind::kGemm, dtype, 0, kGemvSpecs, &GemvSupports, nullptr,
                    &GemvFitDefaults, {.gemm = &GemvEntry}, {.gemm = {1, 1}}};
    v.redundant = &GemvRedundant;
    return v;
  };
  static const auto* variants = new std::array<KernelVariant, 3>{
      variant("cuda_f32_gemv_nt", DType::kF32),
      variant("cuda_f16_gemv_nt", DType::kF16),
      variant("cuda_bf16_gemv_nt", DType::kBF16),
  };
  return *variants;
}

}  // namespace cliffguard::cuda
