#include "kernels/cpu/conv2d_kernels.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/conv2d_driver.h"
#include "kernels/cpu/conv2d_library.h"
#include "kernels/cpu/conv2d_params.h"
#include "kernels/cpu/gemm_params.h"
#include "kernels/cpu/gemm_ukernel.h"
#include "kernels/cpu/variant_table.h"

namespace cliffguard::cpu {
namespace {

// L2 size assumed when the device does not report one (bytes).
constexpr int64_t kDefaultL2Bytes = 512 << 10;

struct Dims {
  int64_t n, h, w, ic, oc, kh, kw, sh, sw, ph, pw, oh, ow;
  static Dims Of(const OpKey& key) {
    const Conv2dOutput o = Conv2dOutputDims(key);
    const auto& d = key.dims;
    return {d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], o.oh, o.ow};
  }
};

int64_t CeilDiv(int64_t x, int64_t m) { return (x + m - 1) / m; }

// The smallest value of `p` that covers `extent` (blocks clip to the extent, so
// every larger value runs the same schedule), or its largest value.
int32_t Covering(const ParamSpec& p, int64_t extent) {
  for (int32_t v : p.values)
    if (v >= extent) return v;
  return p.values.back();
}

// The largest value of `p` that is <= limit, or its smallest value.
int32_t LargestAtMost(const ParamSpec& p, int64_t limit) {
  int32_t out = p.values.front();
  for (int32_t v : p.values)
    if (v <= limit) out = v;
  return out;
}

Status CheckThreads(const KernelVariant& v, const ParamValues& p, int index, const DeviceInfo& device) {
  if (p[index] > device.threads)
    return InvalidArgument(
        fmt::format("{}: threads={} must be <= device threads={}", v.name, p[index], device.threads));
  return Status::Ok();
}

// Whether a block parameter is larger than the first value that covers the key's
// extent (the kernel clamps it to the extent: it runs as that value does).
bool BeyondCovering(const KernelVariant& v, const ParamValues& p, int index, int64_t extent) {
  return p[index] > Covering(v.params[index], extent);
}

// fit_defaults may be asked about any key (callers walk every variant): only
// valid conv2d keys are fitted, others keep the declared defaults.
bool FittableKey(const OpKey& key) { return key.op == OpKind::kConv2d && key.Validate().ok(); }

Status CheckF32(const KernelVariant& self, const Conv2dArgs& args) {
  if (args.dtype != DType::kF32)
    return Unimplemented(fmt::format("{}: runs f32, not {}", self.name, DTypeName(args.dtype)));
  return Status::Ok();
}

int64_t L2Bytes(const DeviceInfo& device) { return device.l2_bytes > 0 ? device.l2_bytes : kDefaultL2Bytes; }

// ---- Direct ----

template <ConvTileFn kTile>
Status DirectEntry(const KernelVariant& self, const Conv2dArgs& args, const ParamValues& params) {
  CG_RETURN_IF_ERROR(CheckF32(self, args));
  const Conv2dConfig& t = self.config.conv2d;
  return DirectConvF32(args, params, kTile, t.oc_tile, t.ow_tile);
}

Status DirectCheck(const KernelVariant& v, const OpKey& key, const ParamValues& p, const DeviceInfo& device) {
  if (!FittableKey(key)) return InvalidArgument(fmt::format("{}: {} is not a valid conv2d key", v.name, key.ToString()));
  return CheckThreads(v, p, kDirThreads, device);
}

// Blocks beyond the extent they block (oc rounded up to the oc tile, ic, output rows).
bool DirectRedundant(const KernelVariant& v, const OpKey& key, const ParamValues& p) {
  if (!FittableKey(key)) return false;
  const Dims d = Dims::Of(key);
  const int oct = v.config.conv2d.oc_tile;
  return BeyondCovering(v, p, kDirOcBlock, CeilDiv(d.oc, oct) * oct) || BeyondCovering(v, p, kDirIcBlock, d.ic) ||
         BeyondCovering(v, p, kDirRows, d.oh);
}

// The value of `p` for blocks of an extent whose blocks hold at most `limit`
// units: balanced blocks (7 = 4 + 3 rather than 6 + 1) when a listed value covers
// one, else the largest listed value within the limit.
int32_t BalancedBlock(const ParamSpec& p, int64_t extent, int64_t limit) {
  limit = std::max<int64_t>(1, limit);
  const int64_t blocks = CeilDiv(extent, limit), target = CeilDiv(extent, blocks);
  const int32_t cover = Covering(p, target);
  return cover <= limit || cover == Covering(p, extent) ? std::min(cover, Covering(p, extent))
                                                        : LargestAtMost(p, limit);
}

// Defaults, from sweeps of the ResNet-18 layers on the AVX2 host (flat within
// noise around them): the filter depth in blocks whose oc tile filter fits half
// the L2; oc blocks whose filter fits the L2; row blocks whose input window fits
// half the L2; oc tiles innermost; pad_copy for padded keys with narrow outputs
// (tiles then run on across rows); threads from the shape's work, split over
// output rows unless there are few of them.
void DirectFitDefaults(const KernelVariant& v, const OpKey& key, const DeviceInfo& device, ParamValues& p) {
  if (!FittableKey(key)) return;
  const Dims d = Dims::Of(key);
  const int oct = v.config.conv2d.oc_tile, owt = v.config.conv2d.ow_tile;
  const int64_t tiles = CeilDiv(d.oc, oct);
  const int64_t l2 = L2Bytes(device);
  const int64_t per_channel = d.kh * d.kw * int64_t{sizeof(float)};  // filter bytes per input channel and lane
  p[kDirIcBlock] = BalancedBlock(v.params[kDirIcBlock], d.ic, l2 / 2 / (per_channel * oct));
  const int64_t icb = std::min<int64_t>(p[kDirIcBlock], d.ic);
  const int64_t ocb_tiles = std::clamp<int64_t>(l2 / (per_channel * icb * oct), 1, tiles);
  p[kDirOcBlock] = BalancedBlock(v.params[kDirOcBlock], tiles * oct, ocb_tiles * oct);
  const int64_t row_bytes = (d.w + 2 * d.pw) * d.ic * int64_t{sizeof(float)};
  const int64_t window_rows = l2 / 2 / std::max<int64_t>(1, row_bytes);
  p[kDirRows] = BalancedBlock(v.params[kDirRows], d.oh, (window_rows - d.kh) / d.sh + 1);
  p[kDirLoop] = kLoopOcInner;
  p[kDirPadCopy] = (d.ph > 0 || d.pw > 0) && d.ow < 3 * owt ? 1 : 0;
  const int32_t threads = ThreadsForWork(key, device);
  p[kDirThreads] = threads;
  p[kDirPar] = kConvParRows;
  if (threads > 1 && d.oh < 4 * threads) {
    if (tiles >= 2 * threads) {
      p[kDirPar] = kConvParOc;
    } else if (d.n >= threads) {
      p[kDirPar] = kConvParBatch;
    }
  }
}

// Proposals beside the tuner's search: the fitted defaults, then each of them with
// one choice flipped (loop order, pad copy, half or double the oc block, other
// thread splits, other thread counts); only those check() accepts, no duplicates.
std::vector<ParamValues> DirectCandidates(const KernelVariant& v, const OpKey& key, const DeviceInfo& device) {
  if (!FittableKey(key)) return {};
  ParamValues base{};
  for (size_t i = 0; i < v.params.size(); ++i) base[i] = v.params[i].default_value;
  DirectFitDefaults(v, key, device, base);
  std::vector<ParamValues> out;
  auto add = [&](ParamValues p) {
    if (std::find(out.begin(), out.end(), p) != out.end()) return;
    Schedule s{&v, p};
    if (CheckSchedule(s, key, device).ok()) out.push_back(p);
  };
  add(base);
  auto with = [&](int index, int32_t value) {
    ParamValues p = base;
    p[index] = value;
    add(p);
  };
  with(kDirLoop, 1 - base[kDirLoop]);
  with(kDirPadCopy, 1 - base[kDirPadCopy]);
  const auto& ocb = v.params[kDirOcBlock].values;
  const auto at = std::find(ocb.begin(), ocb.end(), base[kDirOcBlock]);
  if (at != ocb.begin()) with(kDirOcBlock, *(at - 1));
  if (at + 1 < ocb.end()) with(kDirOcBlock, *(at + 1));
  for (int32_t par : kConvParValues) with(kDirPar, par);
  for (int32_t t : ThreadCountCandidates(device, base[kDirThreads])) with(kDirThreads, t);
  return out;
}

size_t DirectPackedBytes(const KernelVariant& self, const OpKey& key, const ParamValues& /*params*/) {
  return static_cast<size_t>(DirectPackedFloats(key, self.config.conv2d.oc_tile)) * sizeof(float);
}

Status DirectPackWeights(const KernelVariant& self, const OpKey& key, const ParamValues& /*params*/,
                         const void* weights, int64_t ld, void* dst) {
  if (key.dtype != DType::kF32)
    return Unimplemented(fmt::format("{}: packs f32 weights, not {}", self.name, DTypeName(key.dtype)));
  const int oct = self.config.conv2d.oc_tile;
  PackDirectWeights(static_cast<const float*>(weights), ld, ConvWeightLayout::kOhwi, key, oct, 0,
                    CeilDiv(key.dims[4], oct), static_cast<float*>(dst));
  return Status::Ok();
}

// ---- GEMM-based (1x1, im2col) ----

template <UkernelFn kUkernel, PackRowsFn kPackRows, int MR, int NR>
Status GemmConvEntry(const KernelVariant& self, const Conv2dArgs& args, const ParamValues& params) {
  CG_RETURN_IF_ERROR(CheckF32(self, args));
  return GemmConvF32(args, params, kUkernel, kPackRows, MR, NR);
}

enum GemmConvAlgo { k1x1, kIm2col };

template <GemmConvAlgo kAlgo>
Status GemmConvSupports(const KernelVariant& v, const OpKey& key, const DeviceInfo& /*device*/) {
  if (kAlgo != k1x1) return Status::Ok();
  const Dims d = Dims::Of(key);
  if (d.kh != 1 || d.kw != 1)
    return Unimplemented(fmt::format("{}: filter {}x{} is not 1x1 (this variant runs 1x1 filters only)", v.name,
                                     d.kh, d.kw));
  if (d.ph != 0 || d.pw != 0)
    return Unimplemented(
        fmt::format("{}: padding {}x{} is not 0 (this variant runs 1x1 filters without padding)", v.name, d.ph, d.pw));
  return Status::Ok();
}

Status GemmConvCheck(const KernelVariant& v, const OpKey& /*key*/, const ParamValues& p, const DeviceInfo& device) {
  const Conv2dConfig& t = v.config.conv2d;  // oc_tile = nr, ow_tile = mr
  if (p[kCgMc] % t.ow_tile != 0)
    return InvalidArgument(fmt::format("{}: mc={} must be a multiple of mr={}", v.name, p[kCgMc], t.ow_tile));
  if (p[kCgNc] % t.oc_tile != 0)
    return InvalidArgument(fmt::format("{}: nc={} must be a multiple of nr={}", v.name, p[kCgNc], t.oc_tile));
  return CheckThreads(v, p, kCgThreads, device);
}

// Defaults: the GEMM family's blocking; m_block so that a block of im2col rows
// fits in half the L2 (a 1x1 key without stride or padding reads its rows in
// place: long blocks); threads from the shape's work.
void GemmConvFitDefaults(const KernelVariant& v, const OpKey& key, const DeviceInfo& device, ParamValues& p) {
  if (!FittableKey(key)) return;
  const Dims d = Dims::Of(key);
  const int64_t k = d.kh * d.kw * d.ic;
  const bool dense = d.kh == 1 && d.kw == 1 && d.sh == 1 && d.sw == 1 && d.ph == 0 && d.pw == 0;
  const int64_t rows = dense ? 4096 : L2Bytes(device) / 2 / (k * int64_t{sizeof(float)});
  p[kCgMBlock] = LargestAtMost(v.params[kCgMBlock], rows);
  p[kCgThreads] = ThreadsForWork(key, device);
}

size_t GemmConvPackedBytes(const KernelVariant& self, const OpKey& key, const ParamValues& /*params*/) {
  return static_cast<size_t>(GemmConvPackedFloats(key, self.config.conv2d.oc_tile)) * sizeof(float);
}

Status GemmConvPack(const KernelVariant& self, const OpKey& key, const ParamValues& params, const void* weights,
                    int64_t ld, void* dst) {
  if (key.dtype != DType::kF32)
    return Unimplemented(fmt::format("{}: packs f32 weights, not {}", self.name, DTypeName(key.dtype)));
  GemmConvPackWeights(static_cast<const float*>(weights), ld, key, params[kCgKc], self.config.conv2d.oc_tile,
                      static_cast<float*>(dst));
  return Status::Ok();
}

// ---- The portable reference ----

Status RefCheck(const KernelVariant& v, const OpKey& /*key*/, const ParamValues& p, const DeviceInfo& device) {
  return CheckThreads(v, p, 0, device);
}

void RefFitDefaults(const KernelVariant& /*v*/, const OpKey& key, const DeviceInfo& device, ParamValues& p) {
  if (!FittableKey(key)) return;
  p[0] = ThreadsForWork(key, device);
}

size_t RefPackedBytes(const KernelVariant& /*self*/, const OpKey& key, const ParamValues& /*params*/) {
  const Dims d = Dims::Of(key);
  return static_cast<size_t>(d.oc * d.kh * d.kw * d.ic) * sizeof(float);
}

Status RefPack(const KernelVariant& self, const OpKey& key, const ParamValues& /*params*/, const void* weights,
               int64_t ld, void* dst) {
  if (key.dtype != DType::kF32)
    return Unimplemented(fmt::format("{}: packs f32 weights, not {}", self.name, DTypeName(key.dtype)));
  const Dims d = Dims::Of(key);
  const int64_t k = d.kh * d.kw * d.ic;
  for (int64_t o = 0; o < d.oc; ++o)
    std::memcpy(static_cast<float*>(dst) + o * k, static_cast<const float*>(weights) + o * ld, k * sizeof(float));
  return Status::Ok();
}

}  // namespace

std::span<const KernelVariant> CpuConv2dVariants() {
  static constexpr auto kOwn = std::to_array<KernelVariant>({
#define CG_CONV2D_GEMM(isa, name, algo, gemm, mr, nr)                                                        \
  {#name, Backend::kCpu, OpKind::kConv2d, DType::kF32, isa, Conv2dGemmParamSet<mr, nr>::kSpecs,              \
   &GemmConvSupports<algo>, &GemmConvCheck, &GemmConvFitDefaults,                                           \
   {.conv2d = &GemmConvEntry<&gemm##_ukernel, &gemm##_pack_rows, mr, nr>}, {.conv2d = {nr, mr}}, nullptr,    \
   nullptr, &GemmConvPackedBytes, &GemmConvPack},
#define CG_CONV2D_DIRECT(isa, name, oc_tile, ow_tile)                                                        \
  {#name, Backend::kCpu, OpKind::kConv2d, DType::kF32, isa, Conv2dDirectParamSet<oc_tile>::kSpecs, nullptr, \
   &DirectCheck, &DirectFitDefaults, {.conv2d = &DirectEntry<&name##_tile>}, {.conv2d = {oc_tile, ow_tile}}, \
   &DirectCandidates, nullptr, &DirectPackedBytes, &DirectPackWeights, 0, &DirectRedundant},
#define CG_CONV2D_REF(isa, name)                                                                              \
  {#name, Backend::kCpu, OpKind::kConv2d, DType::kF32, isa, kConv2dRefSpecs, nullptr, &RefCheck,            \
   &RefFitDefaults, {.conv2d = &name##_run}, {.conv2d = {1, 1}}, nullptr, nullptr, &RefPackedBytes, &RefPack},
#include "kernels/cpu/conv2d_f32.inc"
  });
  // Library variants (conv2d_library.h), built when their library is found.
  static constexpr auto kVariants = BeforeLast(kOwn, kConv2dLibraryVariants);
  return kVariants;
}

}  // namespace cliffguard::cpu
