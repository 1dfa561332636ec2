#include "kernels/cuda/gemm_mma.h"

#include <cuda_runtime_api.h>

#include <array>
#include <limits>

#include <fmt/format.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_mma_launch.h"
#include "kernels/cuda/stream_workspace.h"

namespace cliffguard::cuda {
namespace {

enum MmaParam { kBm, kBn, kStages, kSplitK };
constexpr int32_t kTileValues[] = {64, 128};
constexpr int32_t kStageValues[] = {2, 3, 4};
constexpr int32_t kSplitValues[] = {1, 2, 4, 8, 16};
constexpr ParamSpec kMmaSpecs[] = {
    {"bm", kTileValues, 128, "rows of C per block (4 warps, each bm/2 x bn/2)"},
    {"bn", kTileValues, 128, "columns of C per block"},
    {"stages", kStageValues, 3, "shared-memory buffers of k = 32 in flight (cp.async pipeline depth)"},
    {"split_k", kSplitValues, 1, "blocks along k; above 1 their f32 partials are summed by a second kernel"},
};

// Grid rows (m tiles) are gridDim.y, at most 65535.
constexpr int64_t kMaxM = int64_t{65535} * 64;

Status MmaSupports(const KernelVariant& self, const OpKey& key, const DeviceInfo& device) {
  if (device.family < 8)
    return Unimplemented(fmt::format("{}: needs compute capability 8.0 or above (mma.sync with bf16, cp.async), "
                                     "the device has {}.{}",
                                     self.name, device.family, device.model));
  if (key.m() > kMaxM || key.n() > std::numeric_limits<int>::max() || key.k() > std::numeric_limits<int>::max())
    return InvalidArgument(
        fmt::format("{}: {} runs m <= {} and n, k that fit a 32-bit int", key.ToString(), self.name, kMaxM));
  return Status::Ok();
}

int64_t KTiles(const OpKey& key) { return (key.k() + kMmaTileK - 1) / kMmaTileK; }

int64_t Property(const DeviceInfo& d, std::string_view name) {
  for (const auto& [k, v] : d.properties)
    if (k == name) return v;
  return 0;
}

Status MmaCheck(const KernelVariant& self, const OpKey& key, const ParamValues& p, const DeviceInfo& device) {
  const size_t ws = MmaWorkspaceBytes(key.m(), key.n(), p[kSplitK]);
  if (ws > kMmaMaxWorkspaceBytes)
    return InvalidArgument(fmt::format("{}: split_k={} needs {} MiB of workspace for m={} n={}, over the {} MiB limit",
                                       self.name, p[kSplitK], ws >> 20, key.m(), key.n(), kMmaMaxWorkspaceBytes >> 20));
  const size_t smem = MmaSharedBytes(p[kBm], p[kBn], p[kStages], key.trans_a, key.trans_b);
  const int64_t limit = Property(device, "smem_per_block_optin");
  if (limit > 0 && int64_t(smem) > limit)
    return InvalidArgument(fmt::format("{}: bm={} bn={} stages={} take {} bytes of shared memory, the device allows {}",
                                       self.name, p[kBm], p[kBn], p[kStages], smem, limit));
  return Status::Ok();
}

// A tile no larger than the shape needs (64 where m or n is at most 64) and split-K
// while the tiles would leave SMs idle and each split keeps at least 4 k tiles.
void MmaFitDefaults(const KernelVariant&, const OpKey& key, const DeviceInfo& device, ParamValues& p) {
  p[kBm] = key.m() <= 64 ? 64 : 128;
  p[kBn] = key.n() <= 64 ? 64 : 128;
  const int64_t tiles = ((key.m() + p[kBm] - 1) / p[kBm]) * ((key.n() + p[kBn] - 1) / p[kBn]);
  int32_t split = 1;
  while (split < 16 && tiles * split < device.sm_count && KTiles(key) >= 4 * 2 * split &&
         MmaWorkspaceBytes(key.m(), key.n(), 2 * split) <= kMmaMaxWorkspaceBytes)
    split *= 2;
  p[kSplitK] = split;
}

// Splits that leave a block without a k tile, and 128-row or -column tiles over a
// dimension of at most 64, repeat what a smaller point runs.
bool MmaRedundant(const KernelVariant&, const OpKey& key, const ParamValues& p) {
  const int64_t k_tiles = KTiles(key);
  const int64_t per_split = (k_tiles + p[kSplitK] - 1) / p[kSplitK];
  return per_split * (p[kSplitK] - 1) >= k_tiles || (p[kBm] == 128 && key.m() <= 64) ||
         (p[kBn] == 128 && key.n() <= 64);
}

thread_local StreamWorkspaces t_workspaces;  // split-K partials, per stream

Status MmaEntry(const KernelVariant& self, const GemmArgs& a, const ParamValues& p) {
  MmaGemmLaunch l;
  l.type = a.dtype == DType::kBF16 ? MmaType::kBF16 : MmaType::kF16;
  l.bm = p[kBm];
  l.bn = p[kBn];
  l.stages = p[kStages];
  l.split = p[kSplitK];
  l.op = OperandsOf(a);
  if (l.split > 1) {
    const size_t bytes = MmaWorkspaceBytes(a.m, a.n, l.split);
    CG_ASSIGN_OR_RETURN(void* ws, t_workspaces.Get(a.stream, bytes, "split-K workspace"));
    l.workspace = static_cast<float*>(ws);
  }
  const int e = LaunchMmaGemm(l);
  if (e == 0) return Status::Ok();
  return Internal(fmt::format("{}: launch failed: {}", self.name, cudaGetErrorString(cudaError_t(e))));
}

}  // namespace

std::span<const KernelVariant> MmaGemmVariants() {
  auto variant = [](const char* name, DType dtype) {
    KernelVariant v{name, Backend::kCuda, OpKind::kGemm, dtype, 0, kMmaSpecs, &MmaSupports, &MmaCheck,
                    &MmaFitDefaults, {.gemm = &MmaEntry}, {.gemm = {1, 1}}};
    v.redundant = &MmaRedundant;
    return v;
  };
  static const auto* variants = new std::array<KernelVariant, 2>{
      variant("cuda_f16_gemm_mma", DType::kF16),
      variant("cuda_bf16_gemm_mma", DType::kBF16),
  };
  return *variants;
}

}  // namespace cliffguard::cuda
