#include "cliffguard/tuner/features.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

namespace cliffguard::tuner {
namespace {

enum Known { kMc, kKc, kNc, kPar, kThreads, kUnrollK, kPrefetch, kPackA, kPackB, kNumKnown };
constexpr std::array<const char*, kNumKnown> kKnownNames = {"mc", "kc", "nc", "par", "threads",
                                                            "unroll_k", "prefetch", "pack_a", "pack_b"};

double CeilDiv(double a, double b) { return std::ceil(a / b); }
double Log2(double x) { return x > 0 ? std::log2(x) : -1.0; }
// Fraction of the last tile of size t over a dimension d that is padding.
double PadFrac(double d, double t) { return t > 0 ? (CeilDiv(d, t) * t - d) / t : 0.0; }
double Imbalance(double items, double threads) {
  if (items <= 0 || threads <= 0) return 0;
  return 1.0 - items / (threads * CeilDiv(items, threads));
}

// The feature list: name and value, in row order. Locals are computed in Extract.
#define CG_FEATURES(X)                                                                 \
  X(mc, raw[kMc]) X(kc, raw[kKc]) X(nc, raw[kNc]) X(par, raw[kPar]) X(threads, raw[kThreads]) \
  X(unroll_k, raw[kUnrollK]) X(prefetch, raw[kPrefetch]) X(pack_a, raw[kPackA])        \
  X(pack_b, raw[kPackB])                                                               \
  X(log2_mc, Log2(raw[kMc])) X(log2_kc, Log2(raw[kKc])) X(log2_nc, Log2(raw[kNc]))     \
  X(log2_threads, Log2(raw[kThreads])) X(log2_unroll_k, Log2(raw[kUnrollK]))          \
  X(p0, gen[0]) X(p1, gen[1]) X(p2, gen[2]) X(p3, gen[3]) X(p4, gen[4])               \
  X(p5, gen[5]) X(p6, gen[6]) X(p7, gen[7]) X(p8, gen[8]) X(p9, gen[9])               \
  X(mr, mr) X(nr, nr) X(log2_mr, Log2(mr)) X(log2_nr, Log2(nr)) X(mr_x_nr, mr * nr)   \
  X(isa_level, isa_level) X(backend, backend) X(num_params, num_params)               \
  X(m, m) X(n, n) X(k, k) X(log2_m, Log2(m)) X(log2_n, Log2(n)) X(log2_k, Log2(k))    \
  X(log2_flops, Log2(2 * m * n * k)) X(trans_a, trans_a) X(trans_b, trans_b)          \
  X(log2_mc_eff, Log2(mc_e)) X(log2_kc_eff, Log2(kc_e)) X(log2_nc_eff, Log2(nc_e))    \
  X(tiles_m, tiles_m) X(tiles_n, tiles_n) X(tiles_k, tiles_k)                         \
  X(tiles_mr, CeilDiv(m, mr)) X(tiles_nr, CeilDiv(n, nr))                             \
  X(micro_per_block, CeilDiv(mc_e, mr) * CeilDiv(nc_e, nr))                           \
  X(log2_micro_tiles, Log2(CeilDiv(m, mr) * CeilDiv(n, nr)))                          \
  X(pad_mr, PadFrac(m, mr)) X(pad_nr, PadFrac(n, nr)) X(pad_mc, PadFrac(m, mc_e))     \
  X(pad_nc, PadFrac(n, nc_e)) X(pad_kc, PadFrac(k, kc_e))                             \
  X(pad_work, 1.0 - (m * n) / (CeilDiv(m, mr) * mr * CeilDiv(n, nr) * nr))            \
  X(ws_a_over_l1, ws_a / l1) X(ws_a_over_l2, ws_a / l2) X(ws_a_over_l3, ws_a / l3)    \
  X(ws_b_over_l1, ws_b / l1) X(ws_b_over_l2, ws_b / l2) X(ws_b_over_l3, ws_b / l3)    \
  X(ws_micro_over_l1, ws_u / l1) X(ws_micro_over_l2, ws_u / l2)                       \
  X(ws_micro_over_l3, ws_u / l3) X(log2_ws_a, Log2(ws_a)) X(log2_ws_b, Log2(ws_b))    \
  X(log2_ws_micro, Log2(ws_u))                                                        \
  X(ai_op, 2 * m * n * k / (es * (m * k + k * n + m * n)))                            \
  X(ai_block, 2 * mc_e * nc_e * kc_e / (es * (mc_e * kc_e + kc_e * nc_e + mc_e * nc_e))) \
  X(ai_micro, 2 * mr * nr / (es * (mr + nr)))                                         \
  X(threads_eff, thr) X(threads_over_device, thr / dev_threads)                       \
  X(par_items, par_items) X(par_items_per_thread, par_items / thr)                    \
  X(par_imbalance, Imbalance(par_items, thr)) X(par_idle_threads, std::max(0.0, thr - par_items)) \
  X(ic_items_per_thread, it_ic / thr) X(ic_imbalance, Imbalance(it_ic, thr))          \
  X(jc_items_per_thread, it_jc / thr) X(jc_imbalance, Imbalance(it_jc, thr))          \
  X(ic_jc_items_per_thread, it_2d / thr) X(ic_jc_imbalance, Imbalance(it_2d, thr))    \
  X(jr_items_per_thread, it_jr / thr) X(jr_imbalance, Imbalance(it_jr, thr))          \
  X(k_iters_per_unroll, kc_e / std::max(1.0, raw[kUnrollK]))                          \
  X(flops_per_thread_log2, Log2(2 * m * n * k / std::min(thr, std::max(1.0, par_items)))) \
  X(op, op) X(conv_kh, ckh) X(conv_kw, ckw) X(conv_stride, cstride) X(conv_pad, cpad)  \
  X(conv_log2_ic, Log2(cic)) X(conv_log2_oc, Log2(coc)) X(conv_log2_ohw, Log2(coh * cow)) \
  X(conv_ow, cow) X(conv_oc_tile, oc_tile) X(conv_ow_tile, ow_tile)                  \
  X(conv_pad_oc_tile, PadFrac(coc, oc_tile)) X(conv_pad_ow_tile, PadFrac(cow, ow_tile)) \
  X(conv_ws_filter_over_l2, cic * ckh * ckw * oc_tile * es / l2)                    \
  X(conv_ws_rows_over_l2, ckh * (cw + 2 * cpad) * cic * es / l2)

#define CG_FEATURE_NAME(name, expr) #name,
constexpr std::string_view kNames[] = {CG_FEATURES(CG_FEATURE_NAME)};
#undef CG_FEATURE_NAME
constexpr int kNumFeatures = static_cast<int>(std::size(kNames));

struct ParamMap {
  const KernelVariant* variant = nullptr;
  const ParamSpec* params = nullptr;
  const char* name = nullptr;
  std::array<int, kNumKnown> idx{};
};

const ParamMap& MapFor(const KernelVariant* v) {
  thread_local std::array<ParamMap, 8> cache{};
  thread_local unsigned next = 0;
  for (const ParamMap& pm : cache)
    if (pm.variant == v && pm.params == v->params.data() && pm.name == v->name) return pm;
  ParamMap& pm = cache[next++ % cache.size()];
  pm.variant = v;
  pm.params = v->params.data();
  pm.name = v->name;
  for (int i = 0; i < kNumKnown; ++i) pm.idx[i] = v->ParamIndex(kKnownNames[i]);
  return pm;
}

}  // namespace

int NumFeatures() { return kNumFeatures; }
std::span<const std::string_view> FeatureNames() { return kNames; }

void ExtractFeatures(const OpKey& key, const Schedule& schedule, const DeviceInfo& device, float* out) {
  const KernelVariant* v = schedule.variant;
  if (!v) {
    std::fill(out, out + kNumFeatures, -1.0f);
    return;
  }
  const ParamMap& pm = MapFor(v);
  std::array<double, kNumKnown> raw;
  for (int i = 0; i < kNumKnown; ++i) raw[i] = pm.idx[i] >= 0 ? schedule.params[pm.idx[i]] : -1.0;
  std::array<double, kMaxParams> gen;
  for (int i = 0; i < kMaxParams; ++i) gen[i] = i < static_cast<int>(v->params.size()) ? schedule.params[i] : -1.0;

  // The register tile of a GEMM kernel (KernelConfig); 1 x 1 for other families.
  const GemmConfig tile = v->op == OpKind::kGemm ? v->config.gemm : GemmConfig{};
  const double mr = std::max(1, tile.mr), nr = std::max(1, tile.nr);
  const double isa_level = v->isa ? std::bit_width(v->isa) - 1 : 0;  // index of the highest IsaBits level
  const double backend = static_cast<double>(v->backend);
  const double num_params = static_cast<double>(v->params.size());
  const bool conv = key.op == OpKind::kConv2d, valid = key.Validate().ok();
  const GemmView g = valid ? GemmViewOf(key) : GemmView{key.dims[0], key.dims[1], key.dims[2]};
  const double m = static_cast<double>(std::max<int64_t>(1, g.m));
  const double n = static_cast<double>(std::max<int64_t>(1, g.n));
  const double k = static_cast<double>(std::max<int64_t>(1, g.k));
  // conv2d's own geometry (-1 for other ops) and its kernel's register tile.
  const double op = static_cast<double>(key.op);
  const Conv2dOutput co = conv && valid ? Conv2dOutputDims(key) : Conv2dOutput{-1, -1};
  const double ckh = conv ? key.dims[5] : -1, ckw = conv ? key.dims[6] : -1, cstride = conv ? key.dims[7] : -1,
               cpad = conv ? key.dims[9] : -1, cic = conv ? key.dims[3] : -1, coc = conv ? key.dims[4] : -1,
               cw = conv ? key.dims[2] : -1, coh = double(co.oh), cow = double(co.ow);
  const double oc_tile = v->op == OpKind::kConv2d ? std::max(1, v->config.conv2d.oc_tile) : 1.0;
  const double ow_tile = v->op == OpKind::kConv2d ? std::max(1, v->config.conv2d.ow_tile) : 1.0;
  const double trans_a = key.trans_a, trans_b = key.trans_b;
  const double es = static_cast<double>(DTypeSize(key.dtype));

  const double m_pad = CeilDiv(m, mr) * mr, n_pad = CeilDiv(n, nr) * nr;
  const double mc_e = raw[kMc] > 0 ? std::min(raw[kMc], m_pad) : m_pad;
  const double kc_e = raw[kKc] > 0 ? std::min(raw[kKc], k) : k;
  const double nc_e = raw[kNc] > 0 ? std::min(raw[kNc], n_pad) : n_pad;
  const double tiles_m = CeilDiv(m, mc_e), tiles_n = CeilDiv(n, nc_e), tiles_k = CeilDiv(k, kc_e);

  const double l1 = device.l1d_bytes > 0 ? static_cast<double>(device.l1d_bytes) : 32768.0;
  const double l2 = device.l2_bytes > 0 ? static_cast<double>(device.l2_bytes) : 1048576.0;
  const double l3 = device.l3_bytes > 0 ? static_cast<double>(device.l3_bytes) : 33554432.0;
  const double ws_a = mc_e * kc_e * es, ws_b = kc_e * nc_e * es, ws_u = kc_e * (mr + nr) * es;

  const double thr = raw[kThreads] > 0 ? raw[kThreads] : 1.0;
  const double dev_threads = std::max(1, device.threads);
  const double it_ic = tiles_m, it_jc = tiles_n, it_2d = tiles_m * tiles_n, it_jr = CeilDiv(nc_e, nr);
  const int par = raw[kPar] >= 0 ? static_cast<int>(raw[kPar]) : 0;
  const double par_items = par == 0 ? it_jc : par == 1 ? it_ic : par == 2 ? it_jr : it_2d;

  int i = 0;
#define CG_FEATURE_VALUE(name, expr) out[i++] = static_cast<float>(expr);
  CG_FEATURES(CG_FEATURE_VALUE)
#undef CG_FEATURE_VALUE
}

std::vector<float> ExtractFeatures(const OpKey& key, const Schedule& schedule, const DeviceInfo& device) {
  std::vector<float> row(kNumFeatures);
  ExtractFeatures(key, schedule, device, row.data());
  return row;
}

}  // namespace cliffguard::tuner
