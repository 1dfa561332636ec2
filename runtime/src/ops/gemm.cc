// GEMM's entry points: Runtime::Gemm (per call), PlanGemm and GemmPlan (resolved
// once), the leading-dimension rule, and GEMM's row of the op table. The only
// runtime file that knows what a GEMM call looks like.
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "cliffguard/detail/logging.h"
#include "ops/op_table.h"
#include "runtime_impl.h"
#ifdef CLIFFGUARD_WITH_CUDA
#include "gpu_miss_timer.h"
#endif

namespace cliffguard {
namespace {

// Argument checks for a call whose key is known valid (a table entry's or a plan's):
// that key's leading-dimension bounds (ValidateGemmArgs' rule) and pointers.
// Branch-free.
template <typename Bounds>
inline bool KnownKeyArgsValid(const GemmArgs& a, const Bounds& ld) {
  return (a.lda >= ld.lo[0]) & (a.lda <= ld.hi[0]) & (a.ldb >= ld.lo[1]) & (a.ldb <= ld.hi[1]) &
         (a.ldc >= ld.lo[2]) & (a.ldc <= ld.hi[2]) & (a.a != nullptr) & (a.b != nullptr) & (a.c != nullptr);
}

// The table entry of a call's key, matched without building an OpKey: gemm keys in
// the table have zero unused dimensions (OpKey::Validate), so comparing the gemm
// fields is key equality. A per-call GEMM's key never has constant weights.
inline const TableEntry* FindGemm(const DispatchTable& t, const GemmArgs& a, uint64_t hash) {
  const uint32_t head = static_cast<uint32_t>(OpKind::kGemm) | (static_cast<uint32_t>(a.dtype) << 8) |
                        (static_cast<uint32_t>(a.trans_a) << 16) | (static_cast<uint32_t>(a.trans_b) << 24);
  return t.Probe(hash, [&](const OpKey& k) {
    return ((k.dims[0] ^ a.m) | (k.dims[1] ^ a.n) | (k.dims[2] ^ a.k)) == 0 && DispatchTable::HeadWord(k) == head &&
           !k.constant_weights;
  });
}

// The entry a call hits (usable, arguments valid for its key), or nullptr; `found`
// keeps what the probe found, which decides the kind of a miss.
inline const TableEntry* HitEntry(const DispatchTable& t, const GemmArgs& a, uint64_t hash, const TableEntry*& found) {
  found = FindGemm(t, a, hash);
  return found && !found->rejected && KnownKeyArgsValid(a, found->bounds) ? found : nullptr;
}

inline Status RunHit(ThreadSlot* s, const TableEntry& e, const GemmArgs& a) {
  s->CountHit(e.index);
  return RunGemm(e.schedule, a);
}

// Dimensions and dtype that can form a gemm key; the rest of ValidateGemmArgs' rule
// is the key's leading-dimension bounds (KnownKeyArgsValid).
inline bool GemmDimsValid(const GemmArgs& a) {
  constexpr int64_t kMax = int64_t{1} << 31;
  return (a.m >= 1) & (a.n >= 1) & (a.k >= 1) & (a.m <= kMax) & (a.n <= kMax) & (a.k <= kMax) &
         (static_cast<uint8_t>(a.dtype) < kNumDTypes);
}

// Out of line so that the hit paths keep a small frame.
[[gnu::noinline, gnu::cold]] Status InvalidGemmArgs(const GemmArgs& a) {
  CG_RETURN_IF_ERROR(ValidateGemmArgs(a));
  return InvalidArgument(fmt::format("gemm: arguments m={} n={} k={} are too large", a.m, a.n, a.k));
}

// Whether a (valid) gemm key is the key of these call arguments (FindGemm's test).
inline bool IsKeyOf(const OpKey& k, const GemmArgs& a) {
  const uint32_t head = static_cast<uint32_t>(OpKind::kGemm) | (static_cast<uint32_t>(a.dtype) << 8) |
                        (static_cast<uint32_t>(a.trans_a) << 16) | (static_cast<uint32_t>(a.trans_b) << 24);
  return ((k.dims[0] ^ a.m) | (k.dims[1] ^ a.n) | (k.dims[2] ^ a.k)) == 0 && DispatchTable::HeadWord(k) == head &&
         !k.constant_weights;
}

// A missed call under table t (the thread's): its key's line in the thread's miss
// cache, filled on the first call of the key under t, gives what serves it.
[[gnu::noinline]] Status MissGemm(Runtime::Impl& r, ThreadSlot* s, const GemmArgs& a, uint64_t hash,
                                  const DispatchTable* t, const TableEntry* found) {
  ThreadSlot::MissCacheLine& line = s->miss_cache[hash >> 60];
  if (line.hash != hash || line.generation != t->generation() || !line.entry || !IsKeyOf(line.entry->key, a))
      [[unlikely]] {
    if (!GemmDimsValid(a)) [[unlikely]] return InvalidGemmArgs(a);
    const OpKey key = GemmKeyOf(a);
    // Checked before the miss is recorded: a call with bad arguments is refused, not counted.
    const ArgBounds bounds = ops::gemm::KeyArgBounds(key);
    if (!KnownKeyArgsValid(a, bounds)) [[unlikely]] return InvalidGemmArgs(a);
    CG_RETURN_IF_ERROR(r.FillMissLine(line, key, hash, t, found, bounds));
  } else if (!KnownKeyArgsValid(a, line.bounds)) [[unlikely]] {
    return InvalidGemmArgs(a);
  }
#ifdef CLIFFGUARD_WITH_CUDA
  if (r.device.backend == Backend::kCuda)
    return RunGpuMissed(r, s->stripe, line.entry, line.served_by, a.stream, [&] { return RunGemm(line.fallback, a); });
#endif
  return RunMissed(s, line, [&a](const Schedule& fallback) { return RunGemm(fallback, a); });
}

// Runtime::Gemm when the thread's table is not the current one (its first call on
// a new table).
[[gnu::noinline]] Status GemmSlow(Runtime::Impl& r, ThreadSlot* s, const GemmArgs& a, uint64_t hash) {
  const DispatchTable* t = r.slots.SwitchTable(s, r.table);
  const TableEntry* found;
  if (const TableEntry* e = HitEntry(*t, a, hash, found)) return RunHit(s, *e, a);
  return MissGemm(r, s, a, hash, t, found);
}

}  // namespace

namespace ops::gemm {
ArgBounds KeyArgBounds(const OpKey& key) {
  const GemmLdBounds ld = GemmLeadingDimBounds(key);
  ArgBounds b;
  for (int i = 0; i < 3; ++i) {
    b.lo[i] = ld.lo[i];
    b.hi[i] = ld.hi[i];
  }
  return b;
}
}  // namespace ops::gemm

GemmLdBounds GemmLeadingDimBounds(const OpKey& key) {
  constexpr int64_t kMaxElems = int64_t{1} << 40;
  const int64_t m = key.dims[0], n = key.dims[1], k = key.dims[2];
  const int64_t rows[3] = {key.trans_a ? k : m, key.trans_b ? n : k, m};
  const int64_t cols[3] = {key.trans_a ? m : k, key.trans_b ? k : n, n};
  GemmLdBounds b;
  for (int i = 0; i < 3; ++i) {
    b.lo[i] = cols[i];
    b.hi[i] = kMaxElems / rows[i];
  }
  return b;
}

Status ValidateGemmArgs(const GemmArgs& a) {
  const OpKey key = GemmKeyOf(a);
  CG_RETURN_IF_ERROR(key.Validate());
  const GemmLdBounds bounds = GemmLeadingDimBounds(key);
  const int64_t ld[3] = {a.lda, a.ldb, a.ldc};
  const int64_t rows[3] = {a.trans_a ? a.k : a.m, a.trans_b ? a.n : a.k, a.m};
  static constexpr const char* kName[3] = {"lda", "ldb", "ldc"};
  const char* row_length[3] = {a.trans_a ? "m, A transposed" : "k", a.trans_b ? "k, B transposed" : "n", "n"};
  for (int i = 0; i < 3; ++i) {
    if (ld[i] < bounds.lo[i])
      return InvalidArgument(fmt::format("gemm: {}={} must be >= {} ({})", kName[i], ld[i], bounds.lo[i], row_length[i]));
    if (ld[i] > bounds.hi[i])
      return InvalidArgument(fmt::format("gemm: {} spans {} rows x {}={}: over 2^40 elements", "ABC"[i], rows[i],
                                         kName[i], ld[i]));
  }
  if (!a.a || !a.b || !a.c)
    return InvalidArgument(fmt::format("gemm: pointer {} is null", !a.a ? "a" : !a.b ? "b" : "c"));
  return Status::Ok();
}

Status Runtime::Gemm(const GemmArgs& a) {
  Impl& r = *impl_;
  // Look up first: a key found in the table is a valid key, so a hit only checks
  // the leading dimensions and pointers. The hit path ends in a tail call; a miss
  // (or bad arguments) goes to MissGemm, a new table for this thread to GemmSlow.
  const uint64_t hash = GemmKeyHash(a.dtype, a.trans_a, a.trans_b, a.m, a.n, a.k);
  ThreadSlot* s = r.slots.Local();
  const DispatchTable* t = r.table.load(std::memory_order_acquire);
  if (t == s->table.load(std::memory_order_relaxed)) [[likely]] {
    const TableEntry* found;
    if (const TableEntry* e = HitEntry(*t, a, hash, found)) [[likely]] return RunHit(s, *e, a);
    return MissGemm(r, s, a, hash, t, found);
  }
  return GemmSlow(r, s, a, hash);
}

namespace {

Status CheckPlanKey(const OpKey& key) {
  if (key.op != OpKind::kGemm) return InvalidArgument(fmt::format("PlanGemm: key '{}' is not a gemm", key.ToString()));
  return key.Validate();
}

}  // namespace

StatusOr<GemmPlan> Runtime::PlanGemm(const OpKey& key) {
  CG_RETURN_IF_ERROR(CheckPlanKey(key));
  if (key.constant_weights)
    return InvalidArgument(fmt::format("PlanGemm: key '{}' has constant weights: create its plan with the weights, "
                                       "PlanGemm(key, weights, ldb)",
                                       key.ToString()));
  Impl& r = *impl_;
  GemmPlan plan;
  plan.key_ = key;
  plan.ld_ = GemmLeadingDimBounds(key);
  OpKey counted;
  CG_RETURN_IF_ERROR(r.ResolvePlan("PlanGemm", {&key, 1}, plan.hit_, plan.schedule_, plan.miss_, plan.served_by_, counted));
  if (plan.hit_) plan.plan_index_ = r.slots.PlanIndex(counted);
  plan.runtime_ = &r;
  return plan;
}

StatusOr<GemmPlan> Runtime::PlanGemm(const OpKey& key_in, const float* weights, int64_t ldb) {
  CG_RETURN_IF_ERROR(CheckPlanKey(key_in));
  Impl& r = *impl_;
  if (r.device.backend != Backend::kCpu)
    return Unimplemented(fmt::format("PlanGemm: constant-weights plans run on cpu devices, not {}; pass B per call",
                                     r.device.fingerprint));
  if (key_in.dtype != DType::kF32)
    return Unimplemented(fmt::format("PlanGemm: constant-weights plans take f32 weights, not {}", DTypeName(key_in.dtype)));
  if (!weights) return InvalidArgument("PlanGemm: weights pointer is null");
  OpKey keys[2] = {key_in, key_in};
  keys[0].constant_weights = true;
  keys[1].constant_weights = false;
  const GemmLdBounds ld = GemmLeadingDimBounds(keys[0]);
  if (ldb < ld.lo[1] || ldb > ld.hi[1])
    return InvalidArgument(fmt::format("PlanGemm: ldb={} must be in [{}, {}] ({} of the weights)", ldb, ld.lo[1],
                                       ld.hi[1], key_in.trans_b ? "k, B stored n x k" : "n, B stored k x n"));
  GemmPlan plan;
  plan.key_ = keys[0];
  plan.ld_ = ld;
  OpKey counted;
  CG_RETURN_IF_ERROR(r.ResolvePlan("PlanGemm", keys, plan.hit_, plan.schedule_, plan.miss_, plan.served_by_, counted));

  const KernelVariant& v = *plan.schedule_.variant;
  const OpKey& key = keys[0];
  const int64_t rows = key.trans_b ? key.n() : key.k(), cols = ld.lo[1];
  const bool packs = v.pack_weights != nullptr;
  const size_t bytes = packs ? v.packed_weights_bytes(v, key, plan.schedule_.params)
                             : static_cast<size_t>(rows * cols) * sizeof(float);
  void* buf = AllocateWeights(bytes);
  if (!buf) return Internal(fmt::format("PlanGemm: cannot allocate {} bytes for the weights of '{}'", bytes, key.ToString()));
  plan.weights_.reset(static_cast<float*>(buf));
  if (packs) {
    CG_RETURN_IF_ERROR(v.pack_weights(v, key, plan.schedule_.params, weights, ldb, buf));
  } else {
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(plan.weights_.get() + i * cols, weights + i * ldb, static_cast<size_t>(cols) * sizeof(float));
  }
  plan.weights_bytes_ = bytes;
  plan.packed_layout_ = packs;
  if (plan.hit_) plan.plan_index_ = r.slots.PlanIndex(counted);
  plan.runtime_ = &r;
  logging::Log(LogLevel::kDebug, "plan for '{}': weights {} into {} bytes ({})", key.ToString(),
               packs ? "packed" : "copied", bytes, plan.schedule_.ToString());
  return plan;
}

GemmPlan::GemmPlan(GemmPlan&& o) noexcept { *this = std::move(o); }
GemmPlan& GemmPlan::operator=(GemmPlan&& o) noexcept {
  runtime_ = std::exchange(o.runtime_, nullptr);
  key_ = o.key_;
  schedule_ = o.schedule_;
  ld_ = o.ld_;
  hit_ = std::exchange(o.hit_, false);
  plan_index_ = o.plan_index_;
  miss_ = std::exchange(o.miss_, nullptr);
  served_by_ = o.served_by_;
  weights_ = std::move(o.weights_);
  weights_bytes_ = std::exchange(o.weights_bytes_, 0);
  packed_layout_ = o.packed_layout_;
  return *this;
}
GemmPlan::~GemmPlan() = default;

Status GemmPlan::Dispatch(GemmArgs& args) const {
  if (!KnownKeyArgsValid(args, ld_)) [[unlikely]] return InvalidGemmArgs(args);
#ifdef CLIFFGUARD_WITH_CUDA
  if (!hit_ && runtime_->device.backend == Backend::kCuda)
    return RunGpuMissed(*runtime_, runtime_->slots.Local()->stripe, miss_, served_by_, args.stream,
                        [&] { return RunGemm(schedule_, args); });
#endif
  return RunPlanned(*runtime_, hit_, plan_index_, miss_, served_by_, [&] { return RunGemm(schedule_, args); });
}

namespace {
GemmArgs PlanArgs(const OpKey& key, const float* a, int64_t lda, float* c, int64_t ldc, float alpha, float beta) {
  GemmArgs args = DenseGemmArgs(key, a, nullptr, c, alpha, beta);
  args.lda = lda;
  args.ldc = ldc;
  return args;
}
}  // namespace

Status GemmPlan::Run(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, float alpha,
                     float beta) const {
  if (!runtime_) [[unlikely]] return InvalidState("GemmPlan::Run: the plan is empty (default-constructed or moved from)");
  if (weights_) [[unlikely]]
    return InvalidState(fmt::format("GemmPlan::Run: the plan for '{}' holds its weights: call Run(a, lda, c, ldc)",
                                    key_.ToString()));
  GemmArgs args = PlanArgs(key_, a, lda, c, ldc, alpha, beta);
  args.b = b;
  args.ldb = ldb;
  return Dispatch(args);
}

Status GemmPlan::Run(const float* a, int64_t lda, float* c, int64_t ldc, float alpha, float beta) const {
  if (!runtime_) [[unlikely]] return InvalidState("GemmPlan::Run: the plan is empty (default-constructed or moved from)");
  if (!weights_) [[unlikely]]
    return InvalidState(fmt::format("GemmPlan::Run: the plan for '{}' has no weights: pass B, Run(a, lda, b, ldb, c, ldc)",
                                    key_.ToString()));
  GemmArgs args = PlanArgs(key_, a, lda, c, ldc, alpha, beta);
  args.b = weights_.get();
  args.ldb = ld_.lo[1];
  if (packed_layout_) args.packed_b = weights_.get();
  return Dispatch(args);
}

}  // namespace cliffguard
