// cpu_f32_conv2d_onednn: oneDNN's convolution as a conv2d kernel variant (contracts
// in conv2d_library.h).
#include <pthread.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/conv2d_library.h"
#include "kernels/cpu/gemm_library.h"  // OmpWaitsPassively, LibraryThreadCandidates

// The OpenMP runtime oneDNN runs on (libgomp, linked beside it). Declared here
// rather than through <omp.h>, which only some compilers ship.
extern "C" {
int omp_get_max_threads(void);
void omp_set_num_threads(int);
}

namespace cliffguard::cpu {
namespace {

using dnnl::memory;
using Dims = memory::dims;

constexpr size_t kMaxCachedPrimitives = 64;  // per calling thread

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
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    auto mix = [&h](uint64_t v) {
      h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      h *= 0xff51afd7ed558ccdULL;
    };
    for (int64_t d : k.dims) mix(uint64_t(d));
    mix(uint64_t(uint32_t(k.threads)) | uint64_t(k.algorithm) << 32 | uint64_t(k.reorder) << 40 |
        uint64_t(k.source) << 48 | uint64_t(k.bias) << 56);
    return size_t(h);
  }
};

struct CachedPrim {
  dnnl::convolution_forward prim;
  memory src, wei, bias, dst;
  // reorder_weights = 1 without packed weights: the call's filter -> preferred layout.
  dnnl::reorder reorder;
  memory user_w, packed_w;
  size_t packed_bytes = 0;
  const void* bound_wei = nullptr;  // the handle bound to `wei`
  uint64_t last_use = 0;
};

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

// Per calling thread: its stream, primitive cache and reorder buffer.
struct ThreadState {
  dnnl::stream stream;
  std::unordered_map<PrimKey, std::unique_ptr<CachedPrim>, PrimKeyHash> prims;
  uint64_t clock = 0;
  std::unique_ptr<void, AlignedFree> scratch;
  size_t scratch_bytes = 0;
};

thread_local bool t_started_team = false;  // this thread ran the variant on an OpenMP team
thread_local bool t_team_stale = false;    // ... and is now the copy of it in a child of fork()

void OnForkChild() {
  if (t_started_team) t_team_stale = true;
}

const dnnl::engine& Engine() {
  // Never destroyed: thread_local caches holding primitives may outlive statics.
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

ThreadState& State() {
  thread_local std::unique_ptr<ThreadState> state;
  if (!state) {
    state = std::make_unique<ThreadState>();
    state->stream = dnnl::stream(Engine());
    state->prims.reserve(kMaxCachedPrimitives + 1);
  }
  return *state;
}

// Sets the calling thread's OpenMP thread count for its scope.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : prev_(omp_get_max_threads()) {
    if (prev_ != threads) omp_set_num_threads(threads);
  }
  ~OmpThreads() {
    if (omp_get_max_threads() != prev_) omp_set_num_threads(prev_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int prev_;
};

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
            Engine()};
  }
  return {dnnl::convolution_forward::desc(kind, Algorithm(algorithm), src, wei, dst, strides, pad, pad), Engine()};
}

// The preferred layout of reorder_weights = 1 for this key: the weights layout
// oneDNN picks (format_tag::any) without bias, on `threads` OpenMP threads. Calls
// with bias run on a primitive created for that same layout. Throws dnnl::error.
memory::desc PreferredLayout(const Shape& s, int threads, int32_t algorithm) {
  OmpThreads omp(threads);
  const memory::desc any(Dims{s.oc, s.ic, s.kh, s.kw}, memory::data_type::f32, memory::format_tag::any);
  return ConvPd(s, algorithm, any, false).weights_desc();
}

// Exceptions stop here (STYLE H7).
template <typename F>
Status Guard(const KernelVariant& self, const char* what, F&& f) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    return Internal(fmt::format("{}: {}: oneDNN: {} (status {})", self.name, what, e.what(), int(e.status)));
  } catch (const std::exception& e) {
    return Internal(fmt::format("{}: {}: {}", self.name, what, e.what()));
  }
}

std::unique_ptr<CachedPrim> CreatePrim(const PrimKey& pk) {
  OmpThreads omp(pk.threads);
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
  c->src = memory(pd.src_desc(), Engine(), DNNL_MEMORY_NONE);
  c->wei = memory(pd.weights_desc(), Engine(), DNNL_MEMORY_NONE);
  c->dst = memory(pd.dst_desc(), Engine(), DNNL_MEMORY_NONE);
  if (pk.bias) c->bias = memory(pd.bias_desc(), Engine(), DNNL_MEMORY_NONE);
  if (pk.reorder && source != kFromPacked) {  // per-call reorder from the call's filter
    c->user_w = memory(UserWeights(s, source, s.kh * s.kw * s.ic), Engine(), DNNL_MEMORY_NONE);
    c->packed_w = memory(w_md, Engine(), DNNL_MEMORY_NONE);
    c->reorder = dnnl::reorder(c->user_w, c->packed_w);
  }
  return c;
}

// The cached primitive for `pk`, created on a miss (evicting the least recently
// used when the cache is full). Throws dnnl::error.
CachedPrim& Lookup(ThreadState& ts, const PrimKey& pk) {
  auto it = ts.prims.find(pk);
  if (it == ts.prims.end()) {
    if (ts.prims.size() >= kMaxCachedPrimitives) {
      auto oldest = ts.prims.begin();
      for (auto i = ts.prims.begin(); i != ts.prims.end(); ++i)
        if (i->second->last_use < oldest->second->last_use) oldest = i;
      ts.prims.erase(oldest);
    }
    it = ts.prims.emplace(pk, CreatePrim(pk)).first;
  }
  it->second->last_use = ++ts.clock;
  return *it->second;
}

Status Check(const KernelVariant& self, dnnl_status_t st, const char* what) {
  if (st == dnnl_success) return Status::Ok();
  return Internal(fmt::format("{}: oneDNN {} failed (status {})", self.name, what, int(st)));
}

dnnl_status_t SetHandle(const memory& mem, const void* ptr, const dnnl::stream& s) {
  return dnnl_memory_set_data_handle_v2(mem.get(), const_cast<void*>(ptr), s.get());
}

// Binds `ptr` to `mem` unless it is bound already (binding zero-fills the padding of
// blocked layouts, a write; packed weights shared by threads are bound once per
// thread).
dnnl_status_t Bind(const memory& mem, const void*& bound, const void* ptr, const dnnl::stream& s) {
  if (bound == ptr) return dnnl_success;
  const dnnl_status_t st = SetHandle(mem, ptr, s);
  if (st == dnnl_success) bound = ptr;
  return st;
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

  ThreadState& ts = State();
  CachedPrim& c = Lookup(ts, pk);
  const dnnl::stream& s = ts.stream;
  OmpThreads omp(threads);
  if (reorder && !packed) {
    if (ts.scratch_bytes < c.packed_bytes) {
      void* p = std::aligned_alloc(64, (c.packed_bytes + 63) / 64 * 64);
      if (!p)
        return Internal(
            fmt::format("{}: cannot allocate {} bytes for the filter in the preferred layout", self.name, c.packed_bytes));
      ts.scratch.reset(p);
      ts.scratch_bytes = c.packed_bytes;
    }
    CG_RETURN_IF_ERROR(Check(self, SetHandle(c.user_w, wei, s), "binding the filter"));
    // Bound on every call: binding zero-fills the layout's padding, which another
    // primitive's reorder into the same buffer may have written.
    CG_RETURN_IF_ERROR(Check(self, SetHandle(c.packed_w, ts.scratch.get(), s), "binding the reordered filter"));
    const dnnl_exec_arg_t reorder_args[] = {{DNNL_ARG_FROM, c.user_w.get()}, {DNNL_ARG_TO, c.packed_w.get()}};
    CG_RETURN_IF_ERROR(
        Check(self, dnnl_primitive_execute(c.reorder.get(), s.get(), 2, reorder_args), "reorder of the filter"));
    wei = ts.scratch.get();
  }
  CG_RETURN_IF_ERROR(Check(self, SetHandle(c.src, args.x, s), "binding x"));
  CG_RETURN_IF_ERROR(Check(self, Bind(c.wei, c.bound_wei, wei, s), "binding the filter"));
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
  const int threads = params[kOnednnConvThreads];
  if (threads > 1) {
    if (t_team_stale)
      return FailedPrecondition(fmt::format(
          "{}: threads={} on a thread that ran an OpenMP team before fork(): libgomp cannot start one in the "
          "child (it would wait forever); use threads=1 here",
          self.name, threads));
    static std::once_flag atfork;
    std::call_once(atfork, [] { ::pthread_atfork(nullptr, nullptr, &OnForkChild); });
    t_started_team = true;
  }
  return Guard(self, "conv2d", [&] { return Run(self, args, params); });
}

Status OnednnConv2dCheck(const KernelVariant& v, const OpKey& /*key*/, const ParamValues& p,
                         const DeviceInfo& device) {
  if (p[kOnednnConvThreads] > device.threads)
    return InvalidArgument(
        fmt::format("{}: threads={} must be <= device threads={}", v.name, p[kOnednnConvThreads], device.threads));
  if (p[kOnednnConvThreads] > 1 && !OmpWaitsPassively())
    return FailedPrecondition(fmt::format(
        "{}: threads={} needs OMP_WAIT_POLICY=passive (or GOMP_SPINCOUNT=0) in the process environment: idle "
        "OpenMP workers otherwise spin and starve cliffguard's own thread pool",
        v.name, p[kOnednnConvThreads]));
  return Status::Ok();
}

void OnednnConv2dFitDefaults(const KernelVariant& /*v*/, const OpKey& key, const DeviceInfo& device,
                             ParamValues& p) {
  p[kOnednnConvThreads] = OmpWaitsPassively() ? ThreadsForWork(key, device) : 1;
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
  const std::vector<int32_t> threads = LibraryThreadCandidates(key, device);  // the fitted count first
  const int32_t fitted = OmpWaitsPassively() ? threads.front() : 1;
  std::vector<ParamValues> out{make(fitted, 1, kOnednnConvAuto), make(fitted, 1, kOnednnConvDirect)};
  for (int32_t t : threads)
    if (t != fitted && (t == 1 || OmpWaitsPassively())) out.push_back(make(t, 1, kOnednnConvAuto));
  out.push_back(make(fitted, 0, kOnednnConvAuto));
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
  return Guard(self, "pack_weights", [&] {
    const memory::desc preferred = PreferredLayout(s, params[kOnednnConvThreads], params[kOnednnConvAlgorithm]);
    memory from(UserWeights(s, kFromOhwi, ld), Engine(), const_cast<void*>(weights));
    memory to(preferred, Engine(), dst);
    dnnl::stream& st = State().stream;
    dnnl::reorder(from, to).execute(st, from, to);
    st.wait();
    return Status::Ok();
  });
}

}  // namespace cliffguard::cpu
