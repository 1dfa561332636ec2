// cpu_f32_conv2d_onednn: oneDNN's convolution as a conv2d kernel variant (contracts
// in conv2d_library.h, the plumbing shared with the other oneDNN variants in
// onednn_common.h).
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/conv2d_library.h"
#include "kernels/cpu/onednn_common.h"

namespace cliffguard::cpu {
namespace {

using dnnl::memory;
using Dims = memory::dims;
using onednn::Check;
using onednn::SetHandle;

// Where the primitive's weights come from on a call.
enum WeightSource : uint8_t {
  kFromOhwi = 0,    // the call's filter, OHWI (also reorder_weights = 0 with packed weights: dense OHWI)
  kFromOihw = 1,    // the call's filter, OIHW
  kFromPacked = 2,  // reorder_weights = 1 with packed weights: already in the primitive's layout
};

// What a cached primitive was created for: every value that changes the primitive
// (or the reorder in front of it).
struct PrimKey {
  std::array<int64_t, OpKey::kMaxDims> dims;  // the conv2d key's dims
  int32_t threads;
  uint8_t algorithm;
  uint8_t reorder;  // the primitive reads the preferred layout (reorder_weights = 1)
  uint8_t source;   // WeightSource
  uint8_t bias;     // with bias
  friend bool operator==(const PrimKey&, const PrimKey&) = default;
};

struct PrimKeyHash {
  size_t operator()(const PrimKey& k) const {
    onednn::KeyHasher h;
    for (int64_t d : k.dims) h.Mix(uint64_t(d));
    h.Mix(uint64_t(uint32_t(k.threads)) | uint64_t(k.algorithm) << 32 | uint64_t(k.reorder) << 40 |
          uint64_t(k.source) << 48 | uint64_t(k.bias) << 56);
    return h.Value();
  }
};

struct CachedPrim {
  dnnl::convolution_forward prim;
  memory src, wei, bias, dst;
  // reorder_weights = 1 without packed weights: the call's filter -> preferred layout.
  onednn::PerCallReorder reorder;
  size_t packed_bytes = 0;
  const void* bound_wei = nullptr;  // the handle bound to `wei`
};

// Per calling thread: its stream, primitive cache and reorder buffer.
using Cache = onednn::PrimitiveCache<PrimKey, PrimKeyHash, CachedPrim>;

// Named views of a conv2d key's dims.
struct Shape {
  int64_t n, h, w, ic, oc, kh, kw, sh, sw, ph, pw, oh, ow;
  explicit Shape(const std::array<int64_t, OpKey::kMaxDims>& d)
      : n(d[0]), h(d[1]), w(d[2]), ic(d[3]), oc(d[4]), kh(d[5]), kw(d[6]), sh(d[7]), sw(d[8]), ph(d[9]),
        pw(d[10]), oh((h + 2 * ph - kh) / sh + 1), ow((w + 2 * pw - kw) / sw + 1) {}
};

memory::desc Activations(int64_t n, int64_t c, int64_t h, int64_t w) {
  return memory::desc(Dims{n, c, h, w}, memory::data_type::f32, memory::format_tag::nhwc);
}

// The filter as a call or pack_weights stores it: OHWI with `ld` floats between
// output channels (kh*kw*ic when dense), or dense OIHW.
memory::desc UserWeights(const Shape& s, WeightSource source, int64_t ld) {
  if (source == kFromOihw)
    return memory::desc(Dims{s.oc, s.ic, s.kh, s.kw}, memory::data_type::f32, memory::format_tag::oihw);
  return memory::desc(Dims{s.oc, s.ic, s.kh, s.kw}, memory::data_type::f32, Dims{ld, 1, s.kw * s.ic, s.ic});
}

dnnl::algorithm Algorithm(int32_t a) {
  return a == kOnednnConvDirect ? dnnl::algorithm::convolution_direct : dnnl::algorithm::convolution_auto;
}

// Throws dnnl::error when oneDNN has no implementation.
dnnl::convolution_forward::primitive_desc ConvPd(const Shape& s, int32_t algorithm, const memory::desc& wei,
                                                 bool bias) {
  const memory::desc src = Activations(s.n, s.ic, s.h, s.w), dst = Activations(s.n, s.oc, s.oh, s.ow);
  const Dims strides{s.sh, s.sw}, pad{s.ph, s.pw};
  const auto kind = dnnl::prop_kind::forward_inference;
  if (bias) {
    const memory::desc b(Dims{s.oc}, memory::data_type::f32, memory::format_tag::x);
    return {dnnl::convolution_forward::desc(kind, Algorithm(algorithm), src, wei, b, dst, strides, pad, pad),
            onednn::Engine()};
  }
  return {dnnl::convolution_forward::desc(kind, Algorithm(algorithm), src, wei, dst, strides, pad, pad),
          onednn::Engine()};
}

// The preferred layout of reorder_weights = 1 for this key: the weights layout
// oneDNN picks (format_tag::any) without bias, on `threads` OpenMP threads. Calls
// with bias run on a primitive created for that same layout. Throws dnnl::error.
memory::desc PreferredLayout(const Shape& s, int threads, int32_t algorithm) {
  onednn::OmpThreads omp(threads);
  const memory::desc any(Dims{s.oc, s.ic, s.kh, s.kw}, memory::data_type::f32, memory::format_tag::any);
  return ConvPd(s, algorithm, any, false).weights_desc();
}

std::unique_ptr<CachedPrim> CreatePrim(const PrimKey& pk) {
  onednn::OmpThreads omp(pk.threads);
  const Shape s(pk.dims);
  auto c = std::make_unique<CachedPrim>();
  const WeightSource source = WeightSource(pk.source);
  memory::desc w_md;
  if (pk.reorder) {
    w_md = PreferredLayout(s, pk.threads, pk.algorithm);
    c->packed_bytes = w_md.get_size();
  } else {
    w_md = UserWeights(s, source, s.kh * s.kw * s.ic);
  }
  const auto pd = ConvPd(s, pk.algorithm, w_md, pk.bias);
  c->prim = dnnl::convolution_forward(pd);
  c->src = onednn::Unbound(pd.src_desc());
  c->wei = onednn::Unbound(pd.weights_desc());
  c->dst = onednn::Unbound(pd.dst_desc());
  if (pk.bias) c->bias = onednn::Unbound(pd.bias_desc());
  if (pk.reorder && source != kFromPacked)  // per-call reorder from the call's filter
    c->reorder = onednn::PerCallReorder(UserWeights(s, source, s.kh * s.kw * s.ic), w_md);
  return c;
}

Status Run(const KernelVariant& self, const Conv2dArgs& args, const ParamValues& params) {
  const int threads = params[kOnednnConvThreads];
  const bool reorder = params[kOnednnConvReorderWeights] != 0;
  const bool packed = args.packed_weights != nullptr;
  PrimKey pk{};
  pk.dims = Conv2dKeyOf(args).dims;
  pk.threads = threads;
  pk.algorithm = uint8_t(params[kOnednnConvAlgorithm]);
  pk.reorder = reorder;
  pk.bias = args.bias != nullptr;
  // reorder_weights = 0 packs the filter as dense OHWI: a plain OHWI call.
  if (packed) pk.source = reorder ? kFromPacked : kFromOhwi;
  else pk.source = args.weight_layout == ConvWeightLayout::kOihw ? kFromOihw : kFromOhwi;
  const void* wei = packed ? args.packed_weights : args.weights;

  Cache& cache = Cache::ThisThread();
  CachedPrim& c = cache.Lookup(pk, [&] { return CreatePrim(pk); });
  const dnnl::stream& s = cache.stream();
  onednn::OmpThreads omp(threads);
  if (reorder && !packed) {
    void* scratch = cache.Scratch(c.packed_bytes);
    if (!scratch)
      return Internal(fmt::format("{}: cannot allocate {} bytes for the filter in the preferred layout", self.name,
                                  c.packed_bytes));
    CG_RETURN_IF_ERROR(c.reorder.Run(self, wei, scratch, s, "the filter", "the reordered filter"));
    wei = scratch;
  }
  CG_RETURN_IF_ERROR(Check(self, SetHandle(c.src, args.x, s), "binding x"));
  CG_RETURN_IF_ERROR(Check(self, onednn::Bind(c.wei, c.bound_wei, wei, s), "binding the filter"));
  CG_RETURN_IF_ERROR(Check(self, SetHandle(c.dst, args.y, s), "binding y"));
  if (pk.bias) CG_RETURN_IF_ERROR(Check(self, SetHandle(c.bias, args.bias, s), "binding the bias"));
  const dnnl_exec_arg_t exec_args[] = {{DNNL_ARG_SRC, c.src.get()},
                                       {DNNL_ARG_WEIGHTS, c.wei.get()},
                                       {DNNL_ARG_DST, c.dst.get()},
                                       {DNNL_ARG_BIAS, pk.bias ? c.bias.get() : nullptr}};
  CG_RETURN_IF_ERROR(
      Check(self, dnnl_primitive_execute(c.prim.get(), s.get(), pk.bias ? 4 : 3, exec_args), "convolution"));
  return Check(self, dnnl_stream_wait(s.get()), "stream wait");
}

}  // namespace

Status OnednnConv2d(const KernelVariant& self, const Conv2dArgs& args, const ParamValues& params) {
  if (args.dtype != DType::kF32)
    return Unimplemented(fmt::format("{}: runs f32, not {}", self.name, DTypeName(args.dtype)));
  CG_RETURN_IF_ERROR(onednn::AdmitTeam(self, params[kOnednnConvThreads]));
  return onednn::Guard(self, "conv2d", [&] { return Run(self, args, params); });
}

Status OnednnConv2dCheck(const KernelVariant& v, const OpKey& /*key*/, const ParamValues& p,
                         const DeviceInfo& device) {
  if (p[kOnednnConvReorderWeights] == 0)
    return InvalidArgument(fmt::format("{}: reorder_weights=0 runs oneDNN's reference kernel on a plain-layout "
                                       "filter (100x-10000x slower); use reorder_weights=1",
                                       v.name));
  return onednn::CheckThreads(v, p[kOnednnConvThreads], device);
}

void OnednnConv2dFitDefaults(const KernelVariant& /*v*/, const OpKey& key, const DeviceInfo& device,
                             ParamValues& p) {
  p[kOnednnConvThreads] = onednn::FittedThreads(key, device);
  p[kOnednnConvReorderWeights] = 1;
  p[kOnednnConvAlgorithm] = kOnednnConvAuto;
}

std::vector<ParamValues> OnednnConv2dCandidates(const KernelVariant& /*v*/, const OpKey& key,
                                                const DeviceInfo& device) {
  auto make = [](int32_t threads, int32_t reorder, int32_t algorithm) {
    ParamValues p{};
    p[kOnednnConvThreads] = threads;
    p[kOnednnConvReorderWeights] = reorder;
    p[kOnednnConvAlgorithm] = algorithm;
    return p;
  };
  const std::vector<int32_t> threads = onednn::ThreadCandidates(key, device);  // the fitted count first
  const int32_t fitted = threads.front();
  std::vector<ParamValues> out{make(fitted, 1, kOnednnConvAuto), make(fitted, 1, kOnednnConvDirect)};
  for (int32_t t : threads)
    if (t != fitted) out.push_back(make(t, 1, kOnednnConvAuto));
  return out;
}

size_t OnednnConv2dPackedWeightsBytes(const KernelVariant& /*self*/, const OpKey& key, const ParamValues& params) {
  const Shape s(key.dims);
  if (!params[kOnednnConvReorderWeights]) return size_t(s.oc * s.kh * s.kw * s.ic) * sizeof(float);
  try {
    return PreferredLayout(s, params[kOnednnConvThreads], params[kOnednnConvAlgorithm]).get_size();
  } catch (const dnnl::error&) {
    return 0;  // pack_weights then reports the error
  }
}

Status OnednnConv2dPackWeights(const KernelVariant& self, const OpKey& key, const ParamValues& params,
                               const void* weights, int64_t ld, void* dst) {
  const Shape s(key.dims);
  const int64_t row = s.kh * s.kw * s.ic;
  if (ld < row)
    return InvalidArgument(
        fmt::format("{}: weights ld={} must be >= kh*kw*ic={} for {}", self.name, ld, row, key.ToString()));
  if (!params[kOnednnConvReorderWeights]) {
    for (int64_t o = 0; o < s.oc; ++o)
      std::memcpy(static_cast<float*>(dst) + o * row, static_cast<const float*>(weights) + o * ld,
                  size_t(row) * sizeof(float));
    return Status::Ok();
  }
  return onednn::Guard(self, "pack_weights", [&] {
    onednn::Reorder(UserWeights(s, kFromOhwi, ld), weights,
                    PreferredLayout(s, params[kOnednnConvThreads], params[kOnednnConvAlgorithm]), dst,
                    Cache::ThisThread().stream());
    return Status::Ok();
  });
}

}  // namespace cliffguard::cpu
