#include "kernels/cpu/cpu_kernels.h"

#include <algorithm>
#include <array>
#include <bit>

#include <fmt/format.h>

#include "kernels/cpu/gemm_driver.h"
#include "kernels/cpu/gemm_library.h"
#include "kernels/cpu/gemm_params.h"
#include "kernels/cpu/gemm_ukernel.h"
#include "kernels/cpu/gemv_kernel.h"
#include "kernels/cpu/gemv_params.h"
#include "kernels/cpu/variant_table.h"

namespace cliffguard::cpu {
namespace {

// fit_defaults reads B in place (pack_b = 0) when M has at most this many mr panels,
// B is at most kInPlaceBMaxBytes and its rows are shorter than kInPlaceBMaxRowBytes (a
// page); else B is packed per call. Read in place, a strip of nr columns per row at
// the row's stride: on Zen 4, per call, with m of 6 to 16, packing per call took
// 0.44-0.79x the time from memory where B was over 1 MiB or its rows a page or more
// (1.3 to 180 MiB), and in cache 0.44-1.3x; at 64 KiB to 1 MiB with shorter rows it
// took 0.90-1.33x from memory and 1.1-1.8x in cache (bench/RESULTS.md, "... B read in
// place"). Before, every B of such keys was read in place. Not measured on Intel.
constexpr int64_t kInPlaceBMaxPanels = 2;
constexpr int64_t kInPlaceBMaxBytes = 1 << 20;
constexpr int64_t kInPlaceBMaxRowBytes = 4 << 10;

// Every own CPU GEMM variant runs f32 only.
Status RequireF32(const KernelVariant& self, DType dtype) {
  if (dtype != DType::kF32) return Unimplemented(fmt::format("{}: runs f32, not {}", self.name, DTypeName(dtype)));
  return Status::Ok();
}

template <void (*kRows)(const GemvTask&)>
Status GemvEntry(const KernelVariant& self, const GemmArgs& args, const ParamValues& params) {
  CG_RETURN_IF_ERROR(RequireF32(self, args.dtype));
  return GemvF32(args, params, kRows);
}

template <void (*kPanels)(const GemvTask&)>
Status GemvPackedEntry(const KernelVariant& self, const GemmArgs& args, const ParamValues& params) {
  CG_RETURN_IF_ERROR(RequireF32(self, args.dtype));
  return GemvPackedF32(self, args, params, kPanels);
}

template <void (*kRows)(const GemvTask&), void (*kTall)(const GemvTask&)>
Status GemvTallEntry(const KernelVariant& self, const GemmArgs& args, const ParamValues& params) {
  CG_RETURN_IF_ERROR(RequireF32(self, args.dtype));
  return GemvTallF32(self, args, params, kRows, kTall);
}

template <UkernelFn kUkernel, PackRowsFn kPackRows, int MR, int NR>
Status GemmEntry(const KernelVariant& self, const GemmArgs& args, const ParamValues& params) {
  CG_RETURN_IF_ERROR(RequireF32(self, args.dtype));
  return GemmF32(args, BlockingFromParams(params), kUkernel, kPackRows, MR, NR);
}

size_t GemmPackedWeightsBytes(const KernelVariant& self, const OpKey& key, const ParamValues& /*params*/) {
  return static_cast<size_t>(PackedWeightsFloats(key.n(), key.k(), self.config.gemm.nr)) * sizeof(float);
}

Status GemmPackWeights(const KernelVariant& self, const OpKey& key, const ParamValues& params, const void* weights,
                       int64_t ld, void* dst) {
  if (key.dtype != DType::kF32)
    return Unimplemented(fmt::format("{}: packs f32 weights, not {}", self.name, DTypeName(key.dtype)));
  PackWeightsF32(static_cast<const float*>(weights), ld, key.trans_b, key.n(), key.k(), params[kParamKc],
                 self.config.gemm.nr, static_cast<float*>(dst));
  return Status::Ok();
}

// The own vector variants propose their fitted default per key (the GEMM variants
// more, or nothing, on compute-bound keys: GemmCandidates), so that the tuner
// measures it first: where a library is the built-in default (large keys), the
// search would otherwise find the own kernels' reasoned blocking only by chance
// within a small trial budget. The portable variant proposes nothing.
std::vector<ParamValues> OwnDefaultCandidates(const KernelVariant& v, const OpKey& key, const DeviceInfo& device) {
  if (v.isa == kIsaScalar) return {};
  return {VariantDefaultSchedule(v, key, device).params};
}

// The smallest kGemmKcValues value of at most max_kc that covers k with the A block
// and a B micro-panel within l2_budget bytes, else the largest that fits; 0: none.
int32_t DeepKcWithin(int mr, int nr, int64_t k, int32_t max_kc, int64_t l2_budget) {
  int32_t best = 0;
  for (const int32_t kc : kGemmKcValues) {
    const int64_t bytes = int64_t{kGemmDeepKPanels * mr + nr} * kc * int64_t{sizeof(float)};
    if (kc > max_kc || bytes > l2_budget) break;
    best = kc;
    if (kc >= k) break;
  }
  return best;
}

}  // namespace

int32_t GemmDeepKc(int mr, int nr, int64_t m, int64_t k, int64_t l2_bytes) {
  if (m >= kGemmOnePassMinM && k > kGemmDeepKMaxKc) {
    const int32_t one_pass = DeepKcWithin(mr, nr, k, kGemmOnePassMaxKc, l2_bytes / 2);
    if (one_pass >= k) return one_pass;
  }
  return DeepKcWithin(mr, nr, k, kGemmDeepKMaxKc, l2_bytes / 4);
}

std::vector<ParamValues> GemmCandidates(const KernelVariant& v, const OpKey& key, const DeviceInfo& device) {
  const bool compute_bound = key.m() >= kGemmComputeBoundMinM;
  const bool narrower_isa = (device.isa & ~((v.isa << 1) - 1)) != 0;
  if (compute_bound && narrower_isa) return {};
  std::vector<ParamValues> out = OwnDefaultCandidates(v, key, device);
  if (out.empty()) return out;
  if (std::min<int64_t>(key.k(), out[0][kParamKc]) <= kGemmRowsOrderMaxKc) {
    ParamValues other = out[0];
    other[kParamOrder] = other[kParamOrder] == kOrderRowsOfC ? kOrderPanelsOfB : kOrderRowsOfC;
    out.push_back(other);
  }
  if (!compute_bound) return out;
  const GemmConfig& tile = v.config.gemm;
  const int32_t kc = GemmDeepKc(tile.mr, tile.nr, key.m(), key.k(), device.l2_bytes);
  if (key.k() > GemmDefaultKc(tile.nr) && kc > GemmDefaultKc(tile.nr)) {
    ParamValues deep = out[0];
    deep[kParamMc] = kGemmDeepKPanels * tile.mr;
    deep[kParamKc] = kc;
    deep[kParamOrder] = GemmRowsOrderFits(key, kc, deep[kParamNc], device) ? kOrderRowsOfC : kOrderPanelsOfB;
    if (deep != out[0]) out.push_back(deep);
  }
  return out;
}

double WeightElements(const OpKey& key) {
  if (key.op == OpKind::kGemm) return double(key.n()) * double(key.k());
  return double(key.dims[4]) * double(key.dims[5]) * double(key.dims[6]) * double(key.dims[3]);
}

int32_t ThreadsForWork(const OpKey& key, const DeviceInfo& device) {
  return ThreadsWithin(key.Flops() / kFlopsPerThread, device);
}

int32_t GemmFittedThreads(const OpKey& key, const DeviceInfo& device, int nr) {
  if (key.m() > kGemvMaxM) return ThreadsForWork(key, device);
  const int32_t threads = std::max(ThreadsForWork(key, device), GemvThreads(key, device));
  return ThreadsWithin(double(std::min<int64_t>(threads, (key.n() + nr - 1) / nr)), device);
}

int32_t ThreadsWithin(double threads, const DeviceInfo& device) {
  const int64_t limit = std::max<int64_t>(1, std::min<double>(device.threads, std::max(1.0, threads)));
  int32_t out = 1;
  for (int32_t t : kGemmThreadValues)
    if (t <= limit) out = t;
  return out;
}

std::vector<int32_t> ThreadCountCandidates(const DeviceInfo& device, int32_t first) {
  std::vector<int32_t> out{first};
  const int32_t all = ThreadsWithin(device.threads, device);
  for (int32_t t : kGemmThreadValues)
    if (t <= all && (std::has_single_bit(static_cast<uint32_t>(t)) || t == all) && t != first) out.push_back(t);
  return out;
}


Status GemmCheck(const KernelVariant& v, const OpKey& key, const ParamValues& p, const DeviceInfo& device) {
  const GemmConfig& tile = v.config.gemm;
  if (p[kParamMc] % tile.mr != 0)
    return InvalidArgument(fmt::format("{}: mc={} must be a multiple of mr={}", v.name, p[kParamMc], tile.mr));
  if (p[kParamNc] % tile.nr != 0)
    return InvalidArgument(fmt::format("{}: nc={} must be a multiple of nr={}", v.name, p[kParamNc], tile.nr));
  if (p[kParamThreads] > device.threads)
    return InvalidArgument(
        fmt::format("{}: threads={} must be <= device threads={}", v.name, p[kParamThreads], device.threads));
  if (p[kParamPackB] == 0 && key.trans_b)
    return InvalidArgument(fmt::format("{}: pack_b=0 needs B not transposed (key {} has trans_b)", v.name,
                                       key.ToString()));
  return Status::Ok();
}

void GemmFitDefaults(const KernelVariant& v, const OpKey& key, const DeviceInfo& device, ParamValues& p) {
  const GemmConfig& tile = v.config.gemm;
  const int32_t threads = GemmFittedThreads(key, device, tile.nr);
  p[kParamThreads] = threads;
  const int64_t n_panels = (key.n() + tile.nr - 1) / tile.nr, m_panels = (key.m() + tile.mr - 1) / tile.mr;
  const bool n_short = n_panels < threads && m_panels > n_panels;
  const bool m_split_fits = key.m() >= key.n() && m_panels >= threads;
  const bool a_packed_once = m_split_fits && (key.constant_weights || device.vendor == kCpuVendorIntel);
  if (threads > 1 && (n_short || a_packed_once)) p[kParamPar] = kParM;
  if (key.trans_b) {
    p[kParamPackB] = 1;
  } else if (m_panels <= kInPlaceBMaxPanels && WeightElements(key) * DTypeSize(key.dtype) <= kInPlaceBMaxBytes &&
             key.n() * int64_t(DTypeSize(key.dtype)) < kInPlaceBMaxRowBytes) {
    p[kParamPackB] = 0;
  }
  if (tile == kGemmDeepKDefaultTile && GemmDeepKDefaultHolds(key, device))
    p[kParamKc] = std::max(p[kParamKc], GemmDeepKc(tile.mr, tile.nr, key.m(), key.k(), device.l2_bytes));
  if (GemmRowsOrderFits(key, p[kParamKc], p[kParamNc], device)) p[kParamOrder] = kOrderRowsOfC;
  if (GemmPanelPackFits(key, p, tile.nr)) p[kParamPackB] = kPackBPanels;
}

bool GemmPanelPackFits(const OpKey& key, const ParamValues& p, int nr) {
  if (key.constant_weights || p[kParamPackB] != kPackBBlocks || key.n() <= nr || key.k() < p[kParamKc]) return false;
  GemmBlocking panels = BlockingFromParams(p);
  panels.pack_b_panelwise = true;
  return PanelwiseBApplies(panels, key.m(), false);
}

bool GemmRowsOrderFits(const OpKey& key, int32_t kc, int32_t nc, const DeviceInfo& device) {
  if (device.vendor != kCpuVendorIntel || (device.isa & kIsaAvx512) == 0 || device.l2_bytes <= 0) return false;
  const double bytes = DTypeSize(key.dtype), depth = double(std::min<int64_t>(key.k(), kc));
  const double b_block = depth * double(std::min<int64_t>(key.n(), nc)) * bytes;
  const double c = double(key.m()) * double(key.n()) * bytes;
  return depth <= kGemmRowsOrderMaxKc && b_block <= double(device.l2_bytes) / 2 && c > double(device.l2_bytes);
}

bool GemmDefaultTileRowsFirst(const OpKey& key, const DeviceInfo& device) {
  return GemmRowsOrderFits(key, GemmDefaultKc(kGemmDefaultTile.nr), GemmDefaultNc(kGemmDefaultTile.nr), device);
}

bool GemmTileDefault(const OpKey& key, const DeviceInfo& device) {
  if (!key.constant_weights || (device.isa & kIsaAvx512) == 0 || key.m() <= kGemvMaxM) return false;
  const bool narrow_rows_first = key.n() >= kGemmRowsOrderDefaultMinN && key.k() <= kGemmRowsOrderDefaultMaxK &&
                                 GemmDefaultTileRowsFirst(key, device);
  return (device.vendor == kCpuVendorIntel && (key.n() >= kGemmWideDefaultMinN || narrow_rows_first)) ||
         (device.threads > 1 && key.Flops() < kGemmTileDefaultMaxFlops) || GemmLeastPaddingHolds(key, device);
}

bool GemmLeastPaddingHolds(const OpKey& key, const DeviceInfo& device) {
  return key.constant_weights && device.vendor == kCpuVendorAmd && (device.isa & kIsaAvx512) != 0 &&
         key.m() > kGemvMaxM && key.m() <= kGemmLeastPaddingMaxM && key.n() >= kGemmWideDefaultMinN;
}

bool GemmDeepKDefaultHolds(const OpKey& key, const DeviceInfo& device) {
  return key.constant_weights && device.vendor == kCpuVendorIntel && (device.isa & kIsaAvx512) != 0 &&
         device.l2_bytes > 0 && key.m() >= kGemmComputeBoundMinM && key.n() >= kGemmWideDefaultMinN &&
         key.k() > GemmDefaultKc(kGemmDeepKDefaultTile.nr) &&
         double(RoundUp(key.m(), kGemmDeepKDefaultTile.mr)) <=
             kGemmDeepKMaxPaddedRows * double(RoundUp(key.m(), kGemmDefaultTile.mr));
}

bool GemmShallowNtDecodeHolds(const OpKey& key, const DeviceInfo& device) {
  return !key.constant_weights && !key.trans_a && key.trans_b && device.vendor == kCpuVendorIntel &&
         (device.isa & kIsaAvx512) != 0 && key.m() >= kGemmShallowNtDecodeMinM && key.m() <= kGemvMaxM &&
         key.n() > kGemvTallMaxN && key.k() <= kGemmShallowNtDecodeMaxK;
}

bool GemmPreferredDefault(const KernelVariant& v, const OpKey& key, const DeviceInfo& device) {
  if (v.isa != kIsaAvx512 || (device.isa & kIsaAvx512) == 0) return false;
#ifdef CLIFFGUARD_WITH_OPENBLAS
  if (OpenblasTinyFits(key, device)) return false;
#endif
  if (GemmShallowNtDecodeHolds(key, device)) return v.config.gemm == kGemmDefaultTile;
#ifdef CLIFFGUARD_WITH_ONEDNN
  if (!key.constant_weights) return PerCallOwnTile(key, device);
#endif
  if (!key.constant_weights) return false;
  if (GemmLeastPaddingHolds(key, device)) return v.config.gemm.mr == GemmLeastPaddingRows(key.m());
  if (GemmDeepKDefaultHolds(key, device))
    return v.config.gemm == kGemmDeepKDefaultTile;
  if (GemmTileDefault(key, device)) return true;
  if (key.m() <= kGemvPackedMaxM || key.m() > kGemvMaxM || key.n() < v.config.gemm.nr) return false;
  if (device.vendor == kCpuVendorAmd && key.m() <= kGemmOnePanelMaxM)
    return v.config.gemm.mr == kGemmOnePanelMaxM;  // all of A in one micro-panel
  const bool big_weights = WeightElements(key) >= double(kLargeWeightsElements);
  return !(key.m() < kGemmSmallMTileMinM && big_weights && device.threads == 1);
}

std::span<const KernelVariant> CpuKernelVariants() {
  static constexpr auto kOwn = std::to_array<KernelVariant>({
#define CG_GEMV(isa, name, trans_b)                                                                                \
  {#name, Backend::kCpu, OpKind::kGemm, DType::kF32, isa, trans_b ? std::span<const ParamSpec>(kGemvNTSpecs)      \
                                                                  : std::span<const ParamSpec>(kGemvNNSpecs),     \
   &GemvSupports<trans_b>, &GemvCheck<trans_b>, &GemvFitDefaults<trans_b>, {.gemm = &GemvEntry<&name##_rows>}, {.gemm = {1, 1}}, \
   &OwnDefaultCandidates},
#define CG_GEMV_PACKED(isa, name, width)                                                                         \
  {#name, Backend::kCpu, OpKind::kGemm, DType::kF32, isa, kGemvPackedSpecs, &GemvPackedSupports, &GemvPackedCheck,  \
   &GemvPackedFitDefaults, {.gemm = &GemvPackedEntry<&name##_panels>}, {.gemm = {1, width}}, &OwnDefaultCandidates, \
   nullptr, &GemvPackedWeightsBytes, &GemvPackWeights, &GemvPackedPreferredDefault},
#define CG_GEMV_TALL(isa, name, nt_name)                                                                      \
  {#name, Backend::kCpu, OpKind::kGemm, DType::kF32, isa, kGemvTallSpecs, &GemvTallSupports, &GemvCheck<true>, \
   &GemvTallFitDefaults, {.gemm = &GemvTallEntry<&nt_name##_rows, &name##_tall>}, {.gemm = {1, 1}},          \
   &OwnDefaultCandidates, nullptr, &GemvTallWeightsBytes, &GemvTallPackWeights, &GemvTallPreferredDefault},
#include "kernels/cpu/gemv_f32.inc"
#define CG_KERNEL(isa, name, mr, nr)                                                                          \
  {#name, Backend::kCpu, OpKind::kGemm, DType::kF32, isa, GemmParamSet<mr, nr>::kSpecs, nullptr, &GemmCheck, \
   &GemmFitDefaults, {.gemm = &GemmEntry<&name##_ukernel, &name##_pack_rows, mr, nr>}, {.gemm = {mr, nr}},      \
   &GemmCandidates, nullptr,                                                                                   \
   &GemmPackedWeightsBytes, &GemmPackWeights, &GemmPreferredDefault},
#include "kernels/cpu/gemm_f32.inc"
  });
  // Library variants (gemm_library.h), built when their library is found.
  static constexpr std::array<KernelVariant, kNumLibraryVariants> kLibrary = {{
#ifdef CLIFFGUARD_WITH_ONEDNN
      {"cpu_f32_gemm_onednn", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaAvx2, kOnednnSpecs, nullptr,
       &OnednnCheck, &OnednnFitDefaults, {.gemm = &OnednnGemm}, {.gemm = {1, 1}}, &OnednnCandidates, nullptr,
       &OnednnPackedWeightsBytes, &OnednnPackWeights, &OnednnPreferredDefault},
#endif
#ifdef CLIFFGUARD_WITH_OPENBLAS
      {"cpu_f32_gemm_openblas", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaAvx2, kOpenblasSpecs,
       &OpenblasSupports, &OpenblasCheck, &OpenblasFitDefaults, {.gemm = &OpenblasGemm}, {.gemm = {1, 1}},
       &OpenblasCandidates, nullptr, nullptr, nullptr, &OpenblasPreferredDefault},
#endif
  }};
  static constexpr auto kVariants = BeforeLast(kOwn, kLibrary);
  return kVariants;
}

}  // namespace cliffguard::cpu
