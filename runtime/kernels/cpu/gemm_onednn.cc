// cpu_f32_gemm_onednn: oneDNN matmul as a kernel variant (contracts in gemm_library.h).
#include <pthread.h>
#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/gemm_library.h"

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
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    auto mix = [&h](uint64_t v) {
      h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      h *= 0xff51afd7ed558ccdULL;
    };
    mix(uint64_t(k.m));
    mix(uint64_t(k.n));
    mix(uint64_t(k.k));
    mix(uint64_t(k.lda));
    mix(uint64_t(k.ldb));
    mix(uint64_t(k.ldc));
    mix(k.beta_bits);
    mix(uint64_t(k.threads) | uint64_t(k.trans_a) << 32 | uint64_t(k.trans_b) << 40 | uint64_t(k.reorder_b) << 48 |
        uint64_t(k.scaled) << 56);
    return size_t(h);
  }
};

struct CachedPrim {
  dnnl::matmul prim;
  memory src, wei, dst, scale;
  float alpha = 1.0f;  // `scale` reads it
  // reorder_b = 1 without packed weights: user B (the call's ldb) -> packed layout.
  dnnl::reorder reorder_b;
  memory user_b, packed_b;
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

thread_local bool t_started_team = false;  // this thread ran oneDNN on an OpenMP team
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
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, Engine());
}

// The packed layout of reorder_b = 1 for this key: the weights layout oneDNN picks
// (format_tag::any) with dense A and C, beta = 0, on `threads` OpenMP threads.
// Throws dnnl::error.
memory::desc PackedLayout(const OpKey& key, int threads) {
  OmpThreads omp(threads);
  const int64_t m = key.m(), n = key.n(), k = key.k();
  const memory::desc b(Dims{k, n}, memory::data_type::f32, memory::format_tag::any);
  return MatmulPd(Strided(m, k, key.trans_a, key.trans_a ? m : k), b, Strided(m, n, false, n), false, 0.0f)
      .weights_desc();
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

std::unique_ptr<CachedPrim> CreatePrim(const PrimKey& pk, const OpKey& key, float beta) {
  OmpThreads omp(pk.threads);
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
  c->src = memory(pd.src_desc(), Engine(), DNNL_MEMORY_NONE);
  c->wei = memory(pd.weights_desc(), Engine(), DNNL_MEMORY_NONE);
  c->dst = memory(pd.dst_desc(), Engine(), DNNL_MEMORY_NONE);
  if (pk.scaled) c->scale = memory(memory::desc(Dims{1}, memory::data_type::f32, Dims{1}), Engine(), &c->alpha);
  if (pk.reorder_b && pk.ldb != 0) {  // per-call reorder from the call's B
    c->user_b = memory(Strided(pk.k, pk.n, pk.trans_b, pk.ldb), Engine(), DNNL_MEMORY_NONE);
    c->packed_b = memory(b_md, Engine(), DNNL_MEMORY_NONE);
    c->reorder_b = dnnl::reorder(c->user_b, c->packed_b);
  }
  return c;
}

// The cached primitive for `pk`, created on a miss (evicting the least recently
// used when the cache is full). Throws dnnl::error.
CachedPrim& Lookup(ThreadState& ts, const PrimKey& pk, const OpKey& key, float beta) {
  auto it = ts.prims.find(pk);
  if (it == ts.prims.end()) {
    if (ts.prims.size() >= kMaxCachedPrimitives) {
      auto oldest = ts.prims.begin();
      for (auto i = ts.prims.begin(); i != ts.prims.end(); ++i)
        if (i->second->last_use < oldest->second->last_use) oldest = i;
      ts.prims.erase(oldest);
    }
    it = ts.prims.emplace(pk, CreatePrim(pk, key, beta)).first;
  }
  it->second->last_use = ++ts.clock;
  return *it->second;
}

Status Check(const KernelVariant& self, dnnl_status_t st, const char* what) {
  if (st == dnnl_success) return Status::Ok();
  return Internal(fmt::format("{}: oneDNN {} failed (status {})", self.name, what, int(st)));
}

// Binds `ptr` to `mem` unless it is bound already (binding zero-fills the padding of
// blocked layouts, a write; a packed buffer is bound once per thread).
dnnl_status_t Bind(const memory& mem, const void*& bound, const void* ptr, const dnnl::stream& s) {
  if (bound == ptr) return dnnl_success;
  const dnnl_status_t st = dnnl_memory_set_data_handle_v2(mem.get(), const_cast<void*>(ptr), s.get());
  if (st == dnnl_success) bound = ptr;
  return st;
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

  ThreadState& ts = State();
  CachedPrim& c = Lookup(ts, pk, key, args.beta);
  const dnnl::stream& s = ts.stream;
  OmpThreads omp(threads);
  const void* wei = b;
  if (reorder_b && packed) {
    wei = args.packed_b;
  } else if (reorder_b) {
    if (ts.scratch_bytes < c.packed_bytes) {
      void* p = std::aligned_alloc(64, (c.packed_bytes + 63) / 64 * 64);
      if (!p) return Internal(fmt::format("{}: cannot allocate {} bytes for B in the packed layout", self.name, c.packed_bytes));
      ts.scratch.reset(p);
      ts.scratch_bytes = c.packed_bytes;
    }
    CG_RETURN_IF_ERROR(Check(self, dnnl_memory_set_data_handle_v2(c.user_b.get(), const_cast<void*>(b), s.get()),
                             "binding B"));
    // Bound on every call: binding zero-fills the layout's padding, which another
    // primitive's reorder into the same buffer may have written.
    CG_RETURN_IF_ERROR(Check(self, dnnl_memory_set_data_handle_v2(c.packed_b.get(), ts.scratch.get(), s.get()),
                             "binding packed B"));
    const dnnl_exec_arg_t reorder_args[] = {{DNNL_ARG_FROM, c.user_b.get()}, {DNNL_ARG_TO, c.packed_b.get()}};
    CG_RETURN_IF_ERROR(Check(self, dnnl_primitive_execute(c.reorder_b.get(), s.get(), 2, reorder_args), "reorder of B"));
    wei = ts.scratch.get();
  }
  CG_RETURN_IF_ERROR(Check(self, dnnl_memory_set_data_handle_v2(c.src.get(), const_cast<void*>(args.a), s.get()),
                           "binding A"));
  CG_RETURN_IF_ERROR(Check(self, Bind(c.wei, c.bound_wei, wei, s), "binding B"));
  CG_RETURN_IF_ERROR(Check(self, dnnl_memory_set_data_handle_v2(c.dst.get(), args.c, s.get()), "binding C"));
  c.alpha = args.alpha;
  dnnl_exec_arg_t exec_args[] = {{DNNL_ARG_SRC, c.src.get()},
                                 {DNNL_ARG_WEIGHTS, c.wei.get()},
                                 {DNNL_ARG_DST, c.dst.get()},
                                 {DNNL_ARG_ATTR_OUTPUT_SCALES, c.scale ? c.scale.get() : nullptr}};
  const int nargs = pk.scaled ? 4 : 3;
  CG_RETURN_IF_ERROR(Check(self, dnnl_primitive_execute(c.prim.get(), s.get(), nargs, exec_args), "matmul"));
  return Check(self, dnnl_stream_wait(s.get()), "stream wait");
}

}  // namespace

Status OnednnGemm(const KernelVariant& self, const GemmArgs& args, const ParamValues& params) {
  if (args.dtype != DType::kF32)
    return Unimplemented(fmt::format("{}: runs f32, not {}", self.name, DTypeName(args.dtype)));
  if (args.alpha == 0.0f) {
    ScaleC(args);
    return Status::Ok();
  }
  const int threads = params[kOnednnThreads];
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
  return Guard(self, "gemm", [&] { return Run(self, args, params); });
}

bool OmpWaitsPassively() {
  static const bool passive = [] {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    return (policy && ::strcasecmp(policy, "passive") == 0) || (spin && std::strcmp(spin, "0") == 0);
  }();
  return passive;
}

Status OnednnCheck(const KernelVariant& v, const OpKey& /*key*/, const ParamValues& p, const DeviceInfo& device) {
  if (p[kOnednnThreads] > device.threads)
    return InvalidArgument(
        fmt::format("{}: threads={} must be <= device threads={}", v.name, p[kOnednnThreads], device.threads));
  if (p[kOnednnThreads] > 1 && !OmpWaitsPassively())
    return FailedPrecondition(fmt::format(
        "{}: threads={} needs OMP_WAIT_POLICY=passive (or GOMP_SPINCOUNT=0) in the process environment: idle "
        "OpenMP workers otherwise spin and starve cliffguard's own thread pool",
        v.name, p[kOnednnThreads]));
  return Status::Ok();
}

void OnednnFitDefaults(const KernelVariant& /*v*/, const OpKey& key, const DeviceInfo& device, ParamValues& p) {
  p[kOnednnThreads] = OmpWaitsPassively() ? ThreadsForWork(key, device) : 1;
}

std::vector<ParamValues> OnednnCandidates(const KernelVariant& /*v*/, const OpKey& key, const DeviceInfo& device) {
  std::vector<ParamValues> out;
  for (int32_t threads : LibraryThreadCandidates(key, device))
    for (int32_t reorder_b : kLibraryBoolValues) {
      if (threads > 1 && !OmpWaitsPassively()) continue;
      ParamValues p{};
      p[kOnednnThreads] = threads;
      p[kOnednnReorderB] = reorder_b;
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
  return Guard(self, "pack_weights", [&] {
    const memory::desc packed = PackedLayout(key, params[kOnednnThreads]);
    memory from(Strided(key.k(), key.n(), key.trans_b, ld), Engine(), const_cast<void*>(weights));
    memory to(packed, Engine(), dst);
    dnnl::stream& s = State().stream;
    dnnl::reorder(from, to).execute(s, from, to);
    s.wait();
    return Status::Ok();
  });
}

}  // namespace cliffguard::cpu
