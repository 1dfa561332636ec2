// cpu_f32_gemm_onednn: oneDNN's matmul and dnnl_sgemm as a kernel variant (contracts
// in gemm_library.h, the plumbing shared with the other oneDNN variants in
// onednn_common.h).
#include <cstdint>
#include <cstring>
#include <memory>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/gemm_library.h"
#include "kernels/cpu/onednn_common.h"

namespace cliffguard::cpu {
namespace {

using dnnl::memory;
using Dims = memory::dims;
using onednn::Check;

// What a cached primitive was created for: every value that changes the primitive.
struct PrimKey {
  int64_t m, n, k, lda, ldb, ldc;  // ldb = 0 when B is packed (the packed layout fixes it)
  uint32_t beta_bits;
  int32_t threads;
  uint8_t trans_a, trans_b;
  uint8_t reorder_b;  // B in the packed layout (reordered per call or packed ahead)
  uint8_t scaled;     // alpha != 1: a runtime output scale
  friend bool operator==(const PrimKey&, const PrimKey&) = default;
};

struct PrimKeyHash {
  size_t operator()(const PrimKey& k) const {
    onednn::KeyHasher h;
    h.Mix(uint64_t(k.m));
    h.Mix(uint64_t(k.n));
    h.Mix(uint64_t(k.k));
    h.Mix(uint64_t(k.lda));
    h.Mix(uint64_t(k.ldb));
    h.Mix(uint64_t(k.ldc));
    h.Mix(k.beta_bits);
    h.Mix(uint64_t(k.threads) | uint64_t(k.trans_a) << 32 | uint64_t(k.trans_b) << 40 | uint64_t(k.reorder_b) << 48 |
          uint64_t(k.scaled) << 56);
    return h.Value();
  }
};

struct CachedPrim {
  dnnl::matmul prim;
  memory src, wei, dst, scale;
  float alpha = 1.0f;  // `scale` reads it
  // reorder_b = 1 without packed weights: user B (the call's ldb) -> packed layout.
  onednn::PerCallReorder reorder_b;
  size_t packed_bytes = 0;
  const void* bound_wei = nullptr;  // the handle bound to `wei`
};

// Per calling thread: its stream, primitive cache and reorder buffer.
using Cache = onednn::PrimitiveCache<PrimKey, PrimKeyHash, CachedPrim>;

// Row-major strides of a rows x cols operand stored with leading dimension ld, or
// of its transpose (stored cols x rows).
memory::desc Strided(int64_t rows, int64_t cols, bool trans, int64_t ld) {
  return memory::desc(Dims{rows, cols}, memory::data_type::f32, trans ? Dims{1, ld} : Dims{ld, 1});
}

int64_t DenseLdb(const OpKey& key) { return key.trans_b ? key.k() : key.n(); }

dnnl::matmul::primitive_desc MatmulPd(const memory::desc& a, const memory::desc& b, const memory::desc& c,
                                      bool scaled, float beta) {
  dnnl::primitive_attr attr;
  if (scaled) attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, onednn::Engine());
}

// The packed layout of reorder_b = 1 for this key: the weights layout oneDNN picks
// (format_tag::any) with dense A and C, beta = 0, on `threads` OpenMP threads.
// Throws dnnl::error.
memory::desc PackedLayout(const OpKey& key, int threads) {
  onednn::OmpThreads omp(threads);
  const int64_t m = key.m(), n = key.n(), k = key.k();
  const memory::desc b(Dims{k, n}, memory::data_type::f32, memory::format_tag::any);
  return MatmulPd(Strided(m, k, key.trans_a, key.trans_a ? m : k), b, Strided(m, n, false, n), false, 0.0f)
      .weights_desc();
}

std::unique_ptr<CachedPrim> CreatePrim(const PrimKey& pk, const OpKey& key, float beta) {
  onednn::OmpThreads omp(pk.threads);
  auto c = std::make_unique<CachedPrim>();
  const memory::desc a_md = Strided(pk.m, pk.k, pk.trans_a, pk.lda);
  const memory::desc c_md = Strided(pk.m, pk.n, false, pk.ldc);
  memory::desc b_md;
  if (pk.reorder_b) {
    b_md = PackedLayout(key, pk.threads);
    c->packed_bytes = b_md.get_size();
  } else {
    b_md = Strided(pk.k, pk.n, pk.trans_b, pk.ldb);
  }
  const auto pd = MatmulPd(a_md, b_md, c_md, pk.scaled, beta);
  c->prim = dnnl::matmul(pd);
  c->src = onednn::Unbound(pd.src_desc());
  c->wei = onednn::Unbound(pd.weights_desc());
  c->dst = onednn::Unbound(pd.dst_desc());
  if (pk.scaled) c->scale = memory(memory::desc(Dims{1}, memory::data_type::f32, Dims{1}), onednn::Engine(), &c->alpha);
  if (pk.reorder_b && pk.ldb != 0)  // per-call reorder from the call's B
    c->reorder_b = onednn::PerCallReorder(Strided(pk.k, pk.n, pk.trans_b, pk.ldb), b_md);
  return c;
}

Status Run(const KernelVariant& self, const GemmArgs& args, const ParamValues& params) {
  const int threads = params[kOnednnThreads];
  const bool reorder_b = params[kOnednnReorderB] != 0;
  const bool packed = args.packed_b != nullptr;
  PrimKey pk{};
  pk.m = args.m;
  pk.n = args.n;
  pk.k = args.k;
  pk.lda = args.lda;
  pk.ldc = args.ldc;
  std::memcpy(&pk.beta_bits, &args.beta, sizeof pk.beta_bits);
  pk.threads = threads;
  pk.trans_a = args.trans_a;
  pk.trans_b = args.trans_b;
  pk.reorder_b = reorder_b;
  pk.scaled = args.alpha != 1.0f;
  const OpKey key = GemmKeyOf(args);
  // reorder_b = 0 packs B dense: a plain call with that leading dimension.
  const void* b = packed && !reorder_b ? args.packed_b : args.b;
  pk.ldb = packed ? (reorder_b ? 0 : DenseLdb(key)) : args.ldb;

  Cache& cache = Cache::ThisThread();
  CachedPrim& c = cache.Lookup(pk, [&] { return CreatePrim(pk, key, args.beta); });
  const dnnl::stream& s = cache.stream();
  onednn::OmpThreads omp(threads);
  const void* wei = b;
  if (reorder_b && packed) {
    wei = args.packed_b;
  } else if (reorder_b) {
    void* scratch = cache.Scratch(c.packed_bytes);
    if (!scratch)
      return Internal(
          fmt::format("{}: cannot allocate {} bytes for B in the packed layout", self.name, c.packed_bytes));
    CG_RETURN_IF_ERROR(c.reorder_b.Run(self, b, scratch, s, "B", "packed B"));
    wei = scratch;
  }
  CG_RETURN_IF_ERROR(Check(self, onednn::SetHandle(c.src, args.a, s), "binding A"));
  CG_RETURN_IF_ERROR(Check(self, onednn::Bind(c.wei, c.bound_wei, wei, s), "binding B"));
  CG_RETURN_IF_ERROR(Check(self, onednn::SetHandle(c.dst, args.c, s), "binding C"));
  c.alpha = args.alpha;
  dnnl_exec_arg_t exec_args[] = {{DNNL_ARG_SRC, c.src.get()},
                                 {DNNL_ARG_WEIGHTS, c.wei.get()},
                                 {DNNL_ARG_DST, c.dst.get()},
                                 {DNNL_ARG_ATTR_OUTPUT_SCALES, c.scale ? c.scale.get() : nullptr}};
  const int nargs = pk.scaled ? 4 : 3;
  CG_RETURN_IF_ERROR(Check(self, dnnl_primitive_execute(c.prim.get(), s.get(), nargs, exec_args), "matmul"));
  return Check(self, dnnl_stream_wait(s.get()), "stream wait");
}

// api = 1: B as stored, or the dense copy pack_weights made.
Status RunSgemm(const KernelVariant& self, const GemmArgs& args, int threads) {
  const bool packed = args.packed_b != nullptr;
  const float* b = static_cast<const float*>(packed ? args.packed_b : args.b);
  const int64_t ldb = packed ? DenseLdb(GemmKeyOf(args)) : args.ldb;
  onednn::OmpThreads omp(threads);
  return Check(self,
               dnnl_sgemm(args.trans_a ? 'T' : 'N', args.trans_b ? 'T' : 'N', args.m, args.n, args.k, args.alpha,
                          static_cast<const float*>(args.a), args.lda, b, ldb, args.beta, static_cast<float*>(args.c),
                          args.ldc),
               "dnnl_sgemm");
}

// What every `nn` dnnl_sgemm rule needs: a per-call `nn` key with n > 64.
bool PerCallNn(const OpKey& key) {
  return !key.constant_weights && !key.trans_a && !key.trans_b && key.n() >= kOnednnSgemmMinN;
}

// The bytes of a row of B as stored: n elements, or k with B transposed (what every
// dnnl_sgemm row rule bounds).
int64_t RowBytesOfB(const OpKey& key) { return (key.trans_b ? key.k() : key.n()) * int64_t(DTypeSize(key.dtype)); }

// Where an `nn` key's rows of B end within a kL1AliasBytes stride: 0 for rows a
// multiple of it, which dnnl_sgemm reads slowly (the decode and aliased-rows rules).
int64_t RowAliasOffset(const OpKey& key) { return RowBytesOfB(key) % kL1AliasBytes; }

// An Intel host of family 6 model kIntelEmeraldRapidsModel on a one-thread budget,
// whose own rules differ (PerCallOwnTile, OnednnSkinnyNtSgemmFits).
bool EmeraldRapidsOneThread(const DeviceInfo& device) {
  return device.vendor == kCpuVendorIntel && device.family == 6 && device.model == kIntelEmeraldRapidsModel &&
         device.threads == 1;
}

// The `nt` dnnl_sgemm rule: a per-call large key with only B transposed, rows of B
// up to kOnednnSgemmNtMaxRowBytes, or on an Intel host m of kOnednnSgemmNtIntelMinM
// or more and n of kOnednnSgemmNtIntelMinN or more.
bool PerCallNtSgemm(const OpKey& key, const DeviceInfo& device) {
  const bool intel_wide = device.vendor == kCpuVendorIntel && key.m() >= kOnednnSgemmNtIntelMinM &&
                          key.n() >= kOnednnSgemmNtIntelMinN;
  return !key.constant_weights && !key.trans_a && key.trans_b && ShapeClassOf(key) == ShapeClass::kLarge &&
         (RowBytesOfB(key) <= kOnednnSgemmNtMaxRowBytes || intel_wide);
}

}  // namespace

Status OnednnGemm(const KernelVariant& self, const GemmArgs& args, const ParamValues& params) {
  if (args.dtype != DType::kF32)
    return Unimplemented(fmt::format("{}: runs f32, not {}", self.name, DTypeName(args.dtype)));
  if (args.alpha == 0.0f) {
    ScaleC(args);
    return Status::Ok();
  }
  CG_RETURN_IF_ERROR(onednn::AdmitTeam(self, params[kOnednnThreads]));
  if (params[kOnednnApi] == kOnednnSgemm) return RunSgemm(self, args, params[kOnednnThreads]);
  return onednn::Guard(self, "gemm", [&] { return Run(self, args, params); });
}

Status OnednnCheck(const KernelVariant& v, const OpKey& /*key*/, const ParamValues& p, const DeviceInfo& device) {
  if (p[kOnednnApi] == kOnednnSgemm && p[kOnednnReorderB])
    return InvalidArgument(fmt::format("{}: reorder_b=1 needs api=0 (api=1, dnnl_sgemm, reads B as stored)", v.name));
  return onednn::CheckThreads(v, p[kOnednnThreads], device);
}

void OnednnFitDefaults(const KernelVariant& /*v*/, const OpKey& key, const DeviceInfo& device, ParamValues& p) {
  p[kOnednnThreads] = onednn::FittedThreads(key, device);
  p[kOnednnReorderB] = key.constant_weights ? 1 : 0;
  p[kOnednnApi] = OnednnSgemmFits(key, device) ? kOnednnSgemm : kOnednnMatmul;
}

bool OnednnSmallSgemmFits(const OpKey& key, const DeviceInfo& device) {
#ifdef CLIFFGUARD_WITH_OPENBLAS
  if (OpenblasTinyFits(key, device)) return false;
#endif
  return PerCallSmallNnOnAvx512(key, device) && OnednnThreadsSuffice(key, device);
}

bool OnednnSmallNtMatmulFits(const OpKey& key, const DeviceInfo& device) {
  return !key.constant_weights && !key.trans_a && key.trans_b && device.vendor == kCpuVendorIntel &&
         (device.isa & kIsaAvx512) != 0 && ShapeClassOf(key) == ShapeClass::kSmall &&
         key.n() <= kOnednnSmallNtMatmulMaxN &&
         (key.k() >= kOnednnSmallNtMatmulMinK || key.m() >= kOnednnSmallNtMatmulMinM) &&
         OnednnThreadsSuffice(key, device);
}

bool OnednnSgemmFits(const OpKey& key, const DeviceInfo& device) {
  return OnednnSmallSgemmFits(key, device) || PerCallNtSgemm(key, device) || OnednnSkinnyNtSgemmFits(key, device) ||
         (PerCallNn(key) && ShapeClassOf(key) == ShapeClass::kLarge) || OnednnSkinnySgemmFits(key, device);
}

bool OnednnSkinnySgemmFits(const OpKey& key, const DeviceInfo& device) {
  if (key.constant_weights || key.trans_a || key.trans_b || device.threads > 2 || key.m() < kOnednnSgemmMinM ||
      ShapeClassOf(key) != ShapeClass::kSkinny)
    return false;
  const int64_t row_bytes = RowBytesOfB(key);
  const bool narrow = row_bytes <= kOnednnSkinnySgemmIntelNarrowMaxRowBytes ||
                      (row_bytes <= kOnednnSkinnySgemmIntelMidMaxRowBytes &&
                       WeightElements(key) * double(DTypeSize(key.dtype)) <= kOnednnSkinnySgemmIntelMidMaxBytes);
  if (device.vendor == kCpuVendorIntel && key.n() > kGemvTallMaxN && narrow &&
      (device.threads == 1 || (GemmFittedThreads(key, device, kGemmDefaultTile.nr) == 1 &&
                               onednn::FittedThreads(key, device) == 1)))
    return true;
  if (double(key.m()) * double(key.n()) * double(key.k()) <= OnednnSkinnySgemmMinWork(device.threads)) return false;
  if (!PerCallNn(key)) return false;
  if (device.vendor == kCpuVendorIntel) return RowBytesOfB(key) > kOnednnSkinnySgemmIntelMinRowBytes;
  if (device.vendor != kCpuVendorAmd) return false;
  const int64_t r = RowAliasOffset(key);
  return r > kOnednnSgemmAliasMarginBytes && r < kL1AliasBytes - kOnednnSgemmAliasMarginBytes;
}

bool OnednnSkinnyNtSgemmFits(const OpKey& key, const DeviceInfo& device) {
  if (key.constant_weights || key.trans_a || !key.trans_b || (device.isa & kIsaAvx512) == 0) return false;
  if (EmeraldRapidsOneThread(device))
    return key.m() >= kOnednnFewRowsNtMinM && key.m() <= kOnednnFewRowsNtMaxM && key.n() > kGemvTallMaxN;
  const int64_t bytes = DTypeSize(key.dtype);
  return device.vendor == kCpuVendorAmd && device.threads == 1 && key.m() >= kOnednnSgemmMinM &&
         key.m() <= kOnednnSkinnyNtMaxM && key.m() * key.k() * bytes <= kOnednnSkinnyNtMaxABytes &&
         key.n() * key.k() * bytes <= kOnednnSkinnyNtMaxBBytes && RowBytesOfB(key) >= kOnednnSkinnyNtMinRowBytes;
}

bool PerCallLargeOnAvx512(const OpKey& key, const DeviceInfo& device) {
  return !key.constant_weights && OnednnMayTakeDefaults(device) && ShapeClassOf(key) == ShapeClass::kLarge;
}

bool OnednnThreadsSuffice(const OpKey& key, const DeviceInfo& device) {
  return onednn::FittedThreads(key, device) >= ThreadsForWork(key, device);
}

bool PerCallOwnTile(const OpKey& key, const DeviceInfo& device) {
  if (!PerCallLargeOnAvx512(key, device)) return false;
  if (!OnednnThreadsSuffice(key, device)) return true;
  if (!key.trans_a && (key.trans_b || key.n() > kOwnTileShallowNnMinN) && GemmDefaultTileRowsFirst(key, device))
    return true;
  const bool emerald_one_thread = EmeraldRapidsOneThread(device);
  if (device.vendor == kCpuVendorIntel && !key.trans_a) {
    const double work = double(key.m()) * double(key.n()) * double(key.k());
    if (device.threads > 1 && key.k() <= kOwnTileShallowMaxK && work <= kOwnTileShallowThreadsMaxWork) return true;
    if (device.threads == 1 && key.k() <= kOwnTileShallowOneThreadMaxK && key.n() >= kOwnTileShallowOneThreadMinN &&
        (key.n() <= kOwnTileShallowOneThreadMaxN || emerald_one_thread))
      return true;
  }
  if (!PerCallNn(key)) return false;
  if (device.vendor == kCpuVendorAmd) return key.m() <= kOwnTileAliasedRowsMaxM && RowAliasOffset(key) == 0;
  if (emerald_one_thread && key.m() <= kOwnTileIntelMaxM && RowAliasOffset(key) != 0) return false;
  return key.m() <= kOwnTileIntelMaxM || (key.m() <= kOwnTileIntelAliasedRowsMaxM && RowAliasOffset(key) == 0);
}

bool OnednnMayTakeDefaults(const DeviceInfo& device) {
  return (device.isa & kIsaAvx512) != 0 && (device.threads == 1 || onednn::OmpWaitsPassively());
}

bool OnednnPreferredDefault(const KernelVariant& /*v*/, const OpKey& key, const DeviceInfo& device) {
  if (!OnednnMayTakeDefaults(device)) return false;
#ifdef CLIFFGUARD_WITH_OPENBLAS
  if (OpenblasTinyFits(key, device)) return false;
#endif
  if (!key.constant_weights)
    return OnednnSkinnySgemmFits(key, device) || OnednnSkinnyNtSgemmFits(key, device) ||
           OnednnSmallSgemmFits(key, device) || OnednnSmallNtMatmulFits(key, device) ||
           (PerCallLargeOnAvx512(key, device) && !PerCallOwnTile(key, device));
  if (GemmTileDefault(key, device)) return false;  // the own tiles' (gemm_params.h)
  const GemmView g = GemmViewOf(key);
  return g.m >= OnednnDefaultMinM(device.threads, g.n, g.k) && g.n > 16 &&
         double(g.m) * double(g.n) * double(g.k) > kSmallClassMaxWork;
}

std::vector<ParamValues> OnednnCandidates(const KernelVariant& /*v*/, const OpKey& key, const DeviceInfo& device) {
  std::vector<ParamValues> out;
  for (int32_t threads : onednn::ThreadCandidates(key, device))
    for (int32_t api : kOnednnApiValues)
      for (int32_t reorder_b : kLibraryBoolValues) {
        if (api == kOnednnSgemm && reorder_b) continue;
        ParamValues p{};
        p[kOnednnThreads] = threads;
        p[kOnednnReorderB] = reorder_b;
        p[kOnednnApi] = api;
        out.push_back(p);
      }
  return out;
}

size_t OnednnPackedWeightsBytes(const KernelVariant& /*self*/, const OpKey& key, const ParamValues& params) {
  if (!params[kOnednnReorderB]) return size_t(key.k()) * size_t(key.n()) * sizeof(float);
  try {
    return PackedLayout(key, params[kOnednnThreads]).get_size();
  } catch (const dnnl::error&) {
    return 0;  // pack_weights then reports the error
  }
}

Status OnednnPackWeights(const KernelVariant& self, const OpKey& key, const ParamValues& params, const void* weights,
                         int64_t ld, void* dst) {
  const int64_t rows = key.trans_b ? key.n() : key.k(), cols = key.trans_b ? key.k() : key.n();
  if (ld < cols) return InvalidArgument(fmt::format("{}: weights ld={} must be >= {} for {}", self.name, ld, cols,
                                                    key.ToString()));
  if (!params[kOnednnReorderB]) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<float*>(dst) + r * cols, static_cast<const float*>(weights) + r * ld,
                  size_t(cols) * sizeof(float));
    return Status::Ok();
  }
  return onednn::Guard(self, "pack_weights", [&] {
    onednn::Reorder(Strided(key.k(), key.n(), key.trans_b, ld), weights, PackedLayout(key, params[kOnednnThreads]), dst,
                    Cache::ThisThread().stream());
    return Status::Ok();
  });
}

}  // namespace cliffguard::cpu
