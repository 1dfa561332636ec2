// Kernel variants: compiled implementations with declared tunable parameters, as
// data (STYLE H1-H3). The runtime and the tuner share these: the tuner measures
// exactly the code the runtime dispatches to.
#pragma once

#include <array>
#include <cstdint>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cliffguard/device.h"
#include "cliffguard/op_key.h"
#include "cliffguard/status.h"

namespace cliffguard {

inline constexpr int kMaxParams = 10;

// One tunable parameter: its name, allowed values (strictly ascending) and the
// value used when a schedule does not set it.
struct ParamSpec {
  const char* name;
  std::span<const int32_t> values;
  int32_t default_value;
  const char* help;  // one line: what the parameter means and its unit
};

// Its allowed values for messages: "8, 16, 24, 32".
std::string AllowedValues(const ParamSpec& p);

// Parameter values, indexed like KernelVariant::params; unused slots are zero.
using ParamValues = std::array<int32_t, kMaxParams>;

// One GEMM call: C = alpha * op(A) * op(B) + beta * C, all row-major.
// op(A) is m x k: A is m x k with lda >= k, or (trans_a) k x m with lda >= m.
// op(B) is k x n: B is k x n with ldb >= n, or (trans_b) n x k with ldb >= k.
// C is m x n with ldc >= n. When beta == 0, C is not read (NaNs in C are ignored).
// alpha and beta are not checked: NaN or infinity is accepted and propagates into C
// as in BLAS (beta == 0 still ignores C).
// Pointers are host memory on the cpu backend and device memory on cuda.
struct GemmArgs {
  DType dtype = DType::kF32;
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;
  void* c = nullptr;
  int64_t ldc = 0;
  void* stream = nullptr;  // cudaStream_t on the cuda backend; ignored on cpu
  // op(B) packed ahead of the call by the running variant's pack_weights, for this
  // key and these parameters (a plan with constant weights). When set, b and ldb are
  // not read. Only for a variant with pack_weights.
  const void* packed_b = nullptr;
};

// Checks dims >= 1, leading dimensions, non-null pointers. Names the value and rule.
Status ValidateGemmArgs(const GemmArgs& args);

// The leading dimensions ValidateGemmArgs accepts for a valid gemm key: lda, ldb and
// ldc each within [lo, hi] (at least the operand's row length; rows x ld at most 2^40
// elements). hi < lo when no value is accepted.
struct GemmLdBounds {
  int64_t lo[3], hi[3];  // lda, ldb, ldc
};
GemmLdBounds GemmLeadingDimBounds(const OpKey& key);
inline OpKey GemmKeyOf(const GemmArgs& a) { return OpKey::Gemm(a.m, a.n, a.k, a.trans_a, a.trans_b, a.dtype); }

// Arguments for a gemm key whose operands are dense row-major arrays (each leading
// dimension is its operand's row length).
inline GemmArgs DenseGemmArgs(const OpKey& key, const void* a, const void* b, void* c, float alpha = 1.0f,
                              float beta = 0.0f) {
  GemmArgs g;
  g.dtype = key.dtype;
  g.trans_a = key.trans_a;
  g.trans_b = key.trans_b;
  g.m = key.m();
  g.n = key.n();
  g.k = key.k();
  g.alpha = alpha;
  g.beta = beta;
  g.a = a;
  g.lda = key.trans_a ? key.m() : key.k();
  g.b = b;
  g.ldb = key.trans_b ? key.k() : key.n();
  g.c = c;
  g.ldc = key.n();
  return g;
}

// Filter layouts a conv2d call accepts. OHWI: W[o][ry][rx][c] (oc rows of kh*kw*ic,
// the layout of NHWC frameworks); OIHW: W[o][c][ry][rx] (PyTorch's Conv2d.weight).
enum class ConvWeightLayout : uint8_t { kOhwi = 0, kOihw = 1 };
const char* ConvWeightLayoutName(ConvWeightLayout l);  // "ohwi", "oihw"

// One conv2d call, NHWC activations, dense tensors:
//   y[b][oy][ox][o] = bias[o] + sum over ry < kh, rx < kw, c < ic of
//                     x[b][oy*sh - ph + ry][ox*sw - pw + rx][c] * W[o][ry][rx][c]
// where input positions outside h x w read as zero (padding ph rows above and
// below, pw columns left and right). oh = (h + 2 ph - kh) / sh + 1, ow likewise
// (Conv2dOutputDims). x holds n*h*w*ic floats, y n*oh*ow*oc (overwritten, never
// read), W oc*kh*kw*ic in weight_layout; bias (oc floats) may be null (zero).
// Dilation and groups other than 1 are refused (kUnimplemented).
struct Conv2dArgs {
  DType dtype = DType::kF32;
  int64_t n = 0, h = 0, w = 0, ic = 0, oc = 0, kh = 0, kw = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1, groups = 1;
  ConvWeightLayout weight_layout = ConvWeightLayout::kOhwi;
  const void* x = nullptr;
  const void* weights = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  // The filter packed ahead of the call by the running variant's pack_weights, for
  // this key and these parameters (a plan). When set, weights and weight_layout are
  // not read. Only for a variant with pack_weights.
  const void* packed_weights = nullptr;
};

// Checks what a conv2d key needs (dims, kernel within the padded input, sizes that
// fit int64), dilation and groups, and non-null x, weights and y. Names the value
// and rule.
Status ValidateConv2dArgs(const Conv2dArgs& args);
inline OpKey Conv2dKeyOf(const Conv2dArgs& a) {
  return OpKey::Conv2d(a.n, a.h, a.w, a.ic, a.oc, a.kh, a.kw, a.stride_h, a.stride_w, a.pad_h, a.pad_w, a.dtype);
}
// Arguments for a conv2d key on dense tensors (weights in `layout`).
Conv2dArgs DenseConv2dArgs(const OpKey& key, const void* x, const void* weights, const void* bias, void* y,
                           ConvWeightLayout layout = ConvWeightLayout::kOhwi);

struct KernelVariant;

// ---- Op families: typed entry points and fixed parameters ----
// (XNNPACK's microfnptr.h and config-types.h.) Each op family adds its function
// type to KernelFn and its fixed parameters to KernelConfig; the dispatch core never
// looks inside either: only the op's own files (runtime/src/ops/<op>.cc, its kernels
// and its tests) do.

// Runs one GEMM with the given parameter values. Arguments and parameters have been
// validated (ValidateGemmArgs, CheckSchedule); the function does no allocation after
// its first call on a thread with a given workspace size.
using GemmFn = Status (*)(const KernelVariant& self, const GemmArgs& args, const ParamValues& params);
// Fixed parameters of a GEMM kernel: the register tile of its micro-kernel.
struct GemmConfig {
  int mr = 1, nr = 1;
  friend constexpr bool operator==(const GemmConfig&, const GemmConfig&) = default;
};

// Runs one conv2d with the given parameter values (ValidateConv2dArgs, CheckSchedule
// done). Scratch memory is the calling thread's (grown on first use, then reused).
using Conv2dFn = Status (*)(const KernelVariant& self, const Conv2dArgs& args, const ParamValues& params);
// Fixed parameters of a conv2d kernel: its register tile over output channels and
// output columns (1 x 1 for variants without one).
struct Conv2dConfig {
  int oc_tile = 1, ow_tile = 1;
};

union KernelFn {
  GemmFn gemm;      // op == kGemm
  Conv2dFn conv2d;  // op == kConv2d
};
union KernelConfig {
  GemmConfig gemm;      // op == kGemm
  Conv2dConfig conv2d;  // op == kConv2d
};

// Proposes parameter values for one key (a library that picks algorithms per shape,
// as cuBLASLt's heuristic does); the tuner measures them beside its own search.
// Every proposal must pass CheckSchedule for the key and device.
using CandidateFn = std::vector<ParamValues> (*)(const KernelVariant& self, const OpKey& key,
                                                 const DeviceInfo& device);
// Scratch memory (bytes) one call with these parameters needs from the caller.
using WorkspaceFn = size_t (*)(const KernelVariant& self, const OpKey& key, const ParamValues& params);

// Whether these (valid) parameter values run exactly as a schedule of smaller values
// does for this key, e.g. a block larger than the extent it blocks: the tuner's
// search skips such points (they would spend trials on repeats), while bundles,
// defaults and hand-written schedules may still use them.
using RedundantFn = bool (*)(const KernelVariant& self, const OpKey& key, const ParamValues& params);

// Constant weights (gemm: B), packed once ahead of every call into the layout this
// variant reads under these parameters (GemmArgs::packed_b). Bytes of that layout:
using PackedWeightsBytesFn = size_t (*)(const KernelVariant& self, const OpKey& key, const ParamValues& params);
// Packs the weights as the key stores them (gemm: op(B), n x k rows when trans_b,
// else k x n, leading dimension `ld`; conv2d: the filter in OHWI, dense, ld =
// kh*kw*ic: a plan converts other layouts to OHWI first) into `dst`: PackedWeightsBytes bytes, 64-byte
// aligned, owned by the caller and kept alive and unchanged while calls read it.
using PackWeightsFn = Status (*)(const KernelVariant& self, const OpKey& key, const ParamValues& params,
                                 const void* weights, int64_t ld, void* dst);

// Memory for constant weights as a plan holds them, packed or copied (free with
// std::free; nullptr when out of memory): 64-byte aligned, and from kHugePageBytes up
// aligned to a huge page with its whole huge pages advised for transparent huge
// pages (madvise MADV_HUGEPAGE: taken where the system's THP mode is "madvise" or
// "always"; a short tail stays in base pages). Those pages are also dropped (MADV_DONTNEED),
// so that memory the heap hands back after other blocks touched it is faulted in afresh:
// once glibc had raised its mmap threshold, such blocks kept their base pages, and the
// decode default ran 1.06-1.16x slower in a full serving run (bench/RESULTS.md, "...
// weights the heap hands back"). A weights stream then misses the TLB
// once per 2 MiB instead of once per 4 KiB: the small-m kernels read m = 2..8 panels
// 1.06-1.34x faster under KVM (bench/RESULTS.md, "... weights in huge pages"). The tuner
// allocates its copies of the weights with it, so that it times them as plans hold them.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;
float* AllocateWeights(size_t bytes);

// An allocator whose blocks start on a cache line, as a serving stack's tensor
// allocator places the operands it passes with each call (PyTorch's CPU allocator
// aligns to 64 bytes). The tuner's operand copies and the benches' are placed so,
// and timed as serving reads them. From the heap (16 bytes), a row of B stored n x k
// straddles a line at every vector load: the tuner measured the small-m `nt` kernel
// at 16 x 4096 x 4096 1.20x slower than oneDNN's matmul, where bench_serving, its
// operands line-aligned, found them level (bench/RESULTS.md, "... operands on a
// cache line in the tuner"). Three bench rows of one schedule measured up to 3.4x
// apart when each row's copies landed at their own offset.
template <class T>
struct LineAligned {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  LineAligned() = default;
  template <class U>
  LineAligned(const LineAligned<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
  friend bool operator==(const LineAligned&, const LineAligned&) { return true; }
};
using LineAlignedFloats = std::vector<float, LineAligned<float>>;

// One compiled implementation with declared tunable parameters (STYLE H1-H3). The
// same record shape serves every op family and device.
struct KernelVariant {
  const char* name;  // e.g. "cpu_f32_gemm_8x32__avx512"; the one name used everywhere
  Backend backend;   // the device kind it runs on
  OpKind op;
  DType dtype;
  uint32_t isa;      // IsaBits every one of which the host must have (cpu); 0 on cuda
  std::span<const ParamSpec> params;
  // Declines shapes or hosts this variant cannot run (beyond backend/op/dtype/isa,
  // which VariantSupports checks). nullptr: no extra rule.
  Status (*supports)(const KernelVariant& self, const OpKey& key, const DeviceInfo& device);
  // Constraints between parameters, shape and device (e.g. mc % mr == 0,
  // threads <= device.threads). Values are already known to be in their lists.
  // nullptr: no extra rule.
  Status (*check)(const KernelVariant& self, const OpKey& key, const ParamValues& params,
                  const DeviceInfo& device);
  // Adjusts the declared defaults so that check() accepts them for this key and
  // device (e.g. threads from the shape's work). nullptr: declared defaults as they are.
  void (*fit_defaults)(const KernelVariant& self, const OpKey& key, const DeviceInfo& device,
                       ParamValues& params);
  KernelFn fn;           // the op family's entry point (fn.gemm for kGemm)
  KernelConfig config;   // the op family's fixed parameters (config.gemm for kGemm)
  CandidateFn candidates = nullptr;     // optional per-key proposals
  WorkspaceFn workspace_bytes = nullptr;  // optional scratch size; nullptr: none
  // Optional: packed constant weights (both set or both null). A variant without
  // them runs a constant-weights plan from a dense copy of the weights.
  PackedWeightsBytesFn packed_weights_bytes = nullptr;
  PackWeightsFn pack_weights = nullptr;
  // Whether this variant is the preferred built-in default for the key on this
  // device (a rule measured per shape class and host: bench/RESULTS.md, "Built-in
  // default per shape class"): DefaultSchedule tries such variants first, in table
  // order, then every variant in table order. nullptr: table order only.
  bool (*preferred_default)(const KernelVariant& self, const OpKey& key, const DeviceInfo& device) = nullptr;
  RedundantFn redundant = nullptr;  // optional: points the search skips
  // Its valid points for a key are exactly its candidates() (a library's algorithm
  // ids, valid only as its heuristic returns them): the tuner measures those and the
  // search draws none of the variant's other points.
  bool candidates_only = false;

  int ParamIndex(std::string_view param_name) const;  // -1 when absent
};

// Every kernel variant compiled into this build, in dispatch preference order
// (fastest ISA first, the portable reference last). Built without static
// constructors; safe to call from any thread.
std::span<const KernelVariant> AllKernelVariants();
const KernelVariant* FindKernelVariant(std::string_view name);

// Whether `v` runs this op and dtype on `device` at all: backend, op, dtype, and
// every ISA feature it needs present on the host. The one ISA check.
Status VariantRunsOn(const KernelVariant& v, OpKind op, DType dtype, const DeviceInfo& device);
// VariantRunsOn for the key's op and dtype, then the variant's own supports().
Status VariantSupports(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);

// A kernel variant plus values for its parameters.
struct Schedule {
  const KernelVariant* variant = nullptr;
  ParamValues params{};

  // "cpu_f32_gemm_8x32__avx512 mc=64 kc=384 nc=2048 par=0 threads=1 ..."
  std::string ToString() const;
  // (name, value) pairs in declaration order.
  std::vector<std::pair<std::string, int64_t>> Named() const;
  // The one way a schedule is built from names (bundles, JSON, tuning logs, the
  // command line). Resolves the variant among `among` (default: AllKernelVariants())
  // -> kNotFound; then SetParam for each pair; missing parameters take their default.
  static StatusOr<Schedule> FromNamed(std::string_view variant,
                                      const std::vector<std::pair<std::string, int64_t>>& params,
                                      std::span<const KernelVariant* const> among = {});
  // A schedule of `v` with every parameter at its declared default.
  static Schedule Defaults(const KernelVariant& v);
  // Sets one parameter by name with the full checks: a known name (kInvalidArgument),
  // not set before (`seen`: a bit per parameter index, kInvalidArgument), a value
  // that is one of its declared values (kOutOfRange, naming them). No narrowing: a
  // value outside int32 is out of range.
  Status SetParam(std::string_view name, int64_t value, uint32_t& seen);
  friend bool operator==(const Schedule& a, const Schedule& b) {
    return a.variant == b.variant && a.params == b.params;
  }
};

// Every value in its list, VariantSupports, then the variant's check().
Status CheckSchedule(const Schedule& s, const OpKey& key, const DeviceInfo& device);

// The variant's declared defaults, adjusted by its fit_defaults() for this key and
// device (e.g. threads from the shape's work, packing of B for short M).
Schedule VariantDefaultSchedule(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);

// The built-in global default for a key: the first variant in AllKernelVariants()
// whose preferred_default() holds for the key and device and that supports it, else the
// first that supports it, with VariantDefaultSchedule. Always resolves for a valid
// key on its backend (the portable reference goes last).
StatusOr<Schedule> DefaultSchedule(const OpKey& key, const DeviceInfo& device);

// Runs a schedule (the caller has checked it with CheckSchedule for args' key).
inline Status RunGemm(const Schedule& s, const GemmArgs& args) { return s.variant->fn.gemm(*s.variant, args, s.params); }
inline Status RunConv2d(const Schedule& s, const Conv2dArgs& args) {
  return s.variant->fn.conv2d(*s.variant, args, s.params);
}

}  // namespace cliffguard
