// Op keys: the canonical, hashable, printable identity of one operator call shape.
//   gemm f32 nn m=128 n=3072 k=768
//   gemm f32 nt m=1 n=4096 k=4096 weights=constant
//   conv2d f32 nhwc n=1 h=56 w=56 ic=64 oc=64 kh=3 kw=3 sh=1 sw=1 ph=1 pw=1
// Two calls with equal keys may use the same tuned schedule.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "cliffguard/status.h"

namespace cliffguard {

// Op kinds and element types are tables (cliffguard/defs/*.inc): everything below
// that names, parses, sizes or bounds them derives from the rows there.
enum class OpKind : uint8_t {
#define CG_OP_KIND(e, name, dims, shape, transposes, layout, dim_names) e,
#include "cliffguard/defs/op_kinds.inc"
};
enum class DType : uint8_t {
#define CG_DTYPE(e, name, bytes, acc, out) e,
#include "cliffguard/defs/dtypes.inc"
};

inline constexpr uint8_t kNumOpKinds = 0
#define CG_OP_KIND(...) +1
#include "cliffguard/defs/op_kinds.inc"
    ;  // valid OpKind values are [0, kNumOpKinds)
inline constexpr uint8_t kNumDTypes = 0
#define CG_DTYPE(...) +1
#include "cliffguard/defs/dtypes.inc"
    ;  // valid DType values are [0, kNumDTypes)

struct OpKindInfo {
  const char* name;       // "gemm"
  int dims;               // dims a key of this op holds
  int shape_dims;         // the first shape_dims of them are the bundle's shape, the rest its attrs
  bool transposes;        // the key carries trans_a / trans_b (layout word nn, nt, tn or tt)
  const char* layout;     // the fixed layout word when !transposes: "nhwc"
  const char* dim_names;  // space-separated, key order: "m n k"
};
inline constexpr OpKindInfo kOpKindInfo[kNumOpKinds] = {
#define CG_OP_KIND(e, name, dims, shape, transposes, layout, dim_names) {#name, dims, shape, transposes, layout, dim_names},
#include "cliffguard/defs/op_kinds.inc"
};

struct DTypeInfo {
  const char* name;   // "bf16"
  int bytes;          // size of one element
  DType accumulator;  // what kernels accumulate in
  DType output;       // what a call with this input type writes by default
};
inline constexpr DTypeInfo kDTypeInfo[kNumDTypes] = {
#define CG_DTYPE(e, name, bytes, acc, out) {#name, bytes, DType::acc, DType::out},
#include "cliffguard/defs/dtypes.inc"
};

// Precondition for the Info functions: a valid value (Validate, Parse* give only those).
constexpr const OpKindInfo& InfoOf(OpKind op) { return kOpKindInfo[static_cast<int>(op)]; }
constexpr const DTypeInfo& InfoOf(DType dtype) { return kDTypeInfo[static_cast<int>(dtype)]; }

const char* OpKindName(OpKind op);     // "gemm", "conv2d"; "?" for an invalid value
const char* DTypeName(DType dtype);    // "f32", "f16", "bf16", "i8", "s32"; "?" for an invalid value
StatusOr<OpKind> ParseOpKind(std::string_view s);
StatusOr<DType> ParseDType(std::string_view s);
size_t DTypeSize(DType dtype);         // bytes per element; 0 for an invalid value

// Dimensions are held in `dims`; which slot means what depends on `op` (its row in
// defs/op_kinds.inc):
//   gemm:   m, n, k
//   conv2d: n, h, w, ic, oc, kh, kw, stride_h, stride_w, pad_h, pad_w
// Unused slots are zero, so equal shapes compare and hash equal. `dtype` is the
// input type; the accumulator and output types follow from it (InfoOf(dtype)).
struct OpKey {
  static constexpr int kMaxDims = 11;  // at least every op's dims (checked in op_key.cc)
  OpKind op = OpKind::kGemm;
  DType dtype = DType::kF32;
  bool trans_a = false;  // gemm: A is stored k x m (row-major), i.e. op(A) = A^T
  bool trans_b = false;  // gemm: B is stored n x k
  // The op's weights (gemm: B; conv2d: the filter) are the same on every call and
  // are packed once ahead of calls (Runtime::PlanGemm with weights). Schedules are
  // tuned and shipped for such a key with the packing outside the timed region.
  // Text form: a trailing "weights=constant".
  bool constant_weights = false;
  std::array<int64_t, kMaxDims> dims{};

  static OpKey Gemm(int64_t m, int64_t n, int64_t k, bool trans_a = false, bool trans_b = false,
                    DType dtype = DType::kF32);
  static OpKey Conv2d(int64_t n, int64_t h, int64_t w, int64_t ic, int64_t oc, int64_t kh,
                      int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                      int64_t pad_w, DType dtype = DType::kF32);

  int64_t m() const { return dims[0]; }
  int64_t n() const { return dims[1]; }
  int64_t k() const { return dims[2]; }
  // Number of meaningful dims for this op (3 for gemm, 11 for conv2d).
  int num_dims() const { return static_cast<uint8_t>(op) < kNumOpKinds ? InfoOf(op).dims : 0; }
  // Floating-point operations of one call (2*m*n*k for gemm).
  double Flops() const;

  // Checks that op and dtype are known values and every dimension is in range for
  // its op (>= 1; strides >= 1, pads >= 0; products fit in int64). Names the value
  // and the rule.
  Status Validate() const;

  // Canonical text form (see the file comment). Parse(ToString()) == *this.
  std::string ToString() const;
  static StatusOr<OpKey> Parse(std::string_view text);

  // 64-bit hash of the canonical fields; equal keys hash equal. Computed once per
  // call on the dispatch path, so it is one multiply deep: a sum of each field times
  // a distinct odd constant. Its high bits depend on every input bit, its low bits
  // do not: hash tables take their slot from the high bits (Fibonacci hashing), and
  // other uses go through MixHash64 (as OpKeyHash does).
  uint64_t Hash() const;

  friend bool operator==(const OpKey& a, const OpKey& b) {
    uint64_t diff = 0;  // branch-free: compiles to a few vector compares
    for (int i = 0; i < kMaxDims; ++i) diff |= static_cast<uint64_t>(a.dims[i] ^ b.dims[i]);
    return diff == 0 && a.op == b.op && a.dtype == b.dtype && a.trans_a == b.trans_a && a.trans_b == b.trans_b &&
           a.constant_weights == b.constant_weights;
  }
  friend bool operator!=(const OpKey& a, const OpKey& b) { return !(a == b); }
};

// The one shape grammar of the command line, workloads and tools: a canonical key
// ("gemm f32 nt m=16 n=3072 k=768", any op), the GEMM shorthand "M,N,K" or
// "M,N,K,LAYOUT" (LAYOUT nn, nt, tn or tt: t = that operand is stored transposed;
// f32), or the conv2d shorthand "N,H,W,IC,OC,K,S[,P]" (square K x K kernel, stride S
// and padding P in both dimensions, P default (K-1)/2; f32). Spaces around the
// parts are ignored. Errors name the text and the rule.
StatusOr<OpKey> ParseShape(std::string_view text);

// Shape classes: a bundle's per-op default schedule is chosen from the tuned shapes
// of one class and applied only to missed shapes of that class, because a schedule
// chosen for large shapes (many threads, large blocks) can be far slower than the
// built-in default on small or skinny ones. Classes use the GEMM view of a key
// (conv2d as implicit GEMM: m = n*oh*ow, n = oc, k = ic*kh*kw):
//   skinny: min(m, n) <= 16       (decode steps, matrix-vector-like products)
//   small:  m*n*k <= 2^21 (128^3), not skinny
//   large:  the rest
// kUnspecified marks op defaults of bundles written before classes existed; such a
// default applies to the classes of that bundle's own tuned entries of its op.
enum class ShapeClass : uint8_t { kUnspecified = 0, kSkinny = 1, kSmall = 2, kLarge = 3 };
// The most work (m*n*k of the GEMM view) of a small key: 2^21.
inline constexpr double kSmallClassMaxWork = double(int64_t{1} << 21);
inline constexpr uint8_t kNumShapeClasses = 4;
const char* ShapeClassName(ShapeClass c);  // "unspecified", "skinny", "small", "large"
StatusOr<ShapeClass> ParseShapeClass(std::string_view s);
// The class of a valid key: kSkinny, kSmall or kLarge (never kUnspecified).
ShapeClass ShapeClassOf(const OpKey& key);

// A valid conv2d key's output height and width: (h + 2 ph - kh) / sh + 1, likewise.
struct Conv2dOutput {
  int64_t oh, ow;
};
inline Conv2dOutput Conv2dOutputDims(const OpKey& key) {
  return {(key.dims[1] + 2 * key.dims[9] - key.dims[5]) / key.dims[7] + 1,
          (key.dims[2] + 2 * key.dims[10] - key.dims[6]) / key.dims[8] + 1};
}

// The GEMM view of a valid key: gemm's own m, n, k; conv2d as implicit GEMM,
// m = n*oh*ow, n = oc, k = ic*kh*kw. (Shape classes and the cost model's features.)
struct GemmView {
  int64_t m, n, k;
};
inline GemmView GemmViewOf(const OpKey& key) {
  if (key.op != OpKind::kConv2d) return {key.dims[0], key.dims[1], key.dims[2]};
  const Conv2dOutput o = Conv2dOutputDims(key);
  return {key.dims[0] * o.oh * o.ow, key.dims[4], key.dims[3] * key.dims[5] * key.dims[6]};
}

// Dynamic shapes: one dimension of a key varies from call to call in serving (the
// token count), the rest are fixed by the model. The varying dimension is dims[0]
// for every op: m for gemm, the batch n for conv2d. A key's family is the key with
// that dimension zeroed: keys of one family differ only in it, and a schedule tuned
// for one of them can serve the others (buckets and nearest-key fallback,
// runtime.h).
inline constexpr int kVaryingDim = 0;
std::string_view VaryingDimName(OpKind op);  // "m" for gemm, "n" for conv2d
inline OpKey KeyFamily(OpKey key) {
  key.dims[kVaryingDim] = 0;
  return key;
}
inline OpKey WithVaryingDim(OpKey key, int64_t v) {
  key.dims[kVaryingDim] = v;
  return key;
}

inline uint64_t MixHash64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

struct OpKeyHash {
  size_t operator()(const OpKey& k) const { return static_cast<size_t>(MixHash64(k.Hash())); }
};

inline OpKey OpKey::Gemm(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, DType dtype) {
  OpKey key;
  key.op = OpKind::kGemm;
  key.dtype = dtype;
  key.trans_a = trans_a;
  key.trans_b = trans_b;
  key.dims[0] = m;
  key.dims[1] = n;
  key.dims[2] = k;
  return key;
}

namespace detail {
inline constexpr uint64_t kKeyMul[OpKey::kMaxDims + 1] = {
    0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL, 0x165667b19e3779f9ULL, 0xd6e8feb86659fd93ULL,
    0xff51afd7ed558ccdULL, 0xc4ceb9fe1a85ec53ULL, 0x94d049bb133111ebULL, 0xbf58476d1ce4e5b9ULL,
    0x2545f4914f6cdd1dULL, 0x9fb21c651e98df25ULL, 0xa0761d6478bd642fULL, 0xe7037ed1a0b428dbULL};
// The four header bytes in field order (op lowest): the same word the dispatch table
// compares, so the hot path builds it once; constant_weights above them.
inline uint64_t KeyHeaderHash(OpKind op, DType dtype, bool trans_a, bool trans_b, bool constant_weights = false) {
  return (static_cast<uint64_t>(op) | (static_cast<uint64_t>(dtype) << 8) | (static_cast<uint64_t>(trans_a) << 16) |
          (static_cast<uint64_t>(trans_b) << 24) | (static_cast<uint64_t>(constant_weights) << 32)) *
         kKeyMul[OpKey::kMaxDims];
}
}  // namespace detail

// OpKey::Gemm(m, n, k, trans_a, trans_b, dtype).Hash() (constant_weights as given),
// without building the key: independent multiplies by distinct odd constants, summed.
[[gnu::always_inline]] inline uint64_t GemmKeyHash(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n,
                                                   int64_t k, bool constant_weights = false) {
  return detail::KeyHeaderHash(OpKind::kGemm, dtype, trans_a, trans_b, constant_weights) +
         static_cast<uint64_t>(m) * detail::kKeyMul[0] + static_cast<uint64_t>(n) * detail::kKeyMul[1] +
         static_cast<uint64_t>(k) * detail::kKeyMul[2];
}

inline uint64_t OpKey::Hash() const {
  if (op == OpKind::kGemm) return GemmKeyHash(dtype, trans_a, trans_b, dims[0], dims[1], dims[2], constant_weights);
  uint64_t h = detail::KeyHeaderHash(op, dtype, trans_a, trans_b, constant_weights);
  for (int i = 0; i < kMaxDims; ++i) h += static_cast<uint64_t>(dims[i]) * detail::kKeyMul[i];
  return h;
}

}  // namespace cliffguard
