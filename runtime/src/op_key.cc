#include "cliffguard/op_key.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace cliffguard {
namespace {

constexpr const char* kConvDimNames[OpKey::kMaxDims] = {"n", "h", "w", "ic", "oc", "kh",
                                                       "kw", "sh", "sw", "ph", "pw"};
constexpr const char* kGemmDimNames[3] = {"m", "n", "k"};

std::vector<std::string_view> SplitWords(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

const char* OpKindName(OpKind op) {
  switch (op) {
    case OpKind::kGemm: return "gemm";
    case OpKind::kConv2d: return "conv2d";
  }
  return "?";
}

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
  }
  return "?";
}

size_t DTypeSize(DType d) { return d == DType::kF32 ? 4 : 2; }

StatusOr<OpKind> ParseOpKind(std::string_view s) {
  if (s == "gemm") return OpKind::kGemm;
  if (s == "conv2d") return OpKind::kConv2d;
  return InvalidArgument(fmt::format("op '{}' is not one of: gemm, conv2d", s));
}

StatusOr<DType> ParseDType(std::string_view s) {
  if (s == "f32") return DType::kF32;
  if (s == "f16") return DType::kF16;
  if (s == "bf16") return DType::kBF16;
  return InvalidArgument(fmt::format("dtype '{}' is not one of: f32, f16, bf16", s));
}

OpKey OpKey::Conv2d(int64_t n, int64_t h, int64_t w, int64_t ic, int64_t oc, int64_t kh, int64_t kw,
                    int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w, DType dtype) {
  OpKey key;
  key.op = OpKind::kConv2d;
  key.dtype = dtype;
  key.dims = {n, h, w, ic, oc, kh, kw, stride_h, stride_w, pad_h, pad_w};
  return key;
}

int OpKey::num_dims() const { return op == OpKind::kGemm ? 3 : kMaxDims; }

double OpKey::Flops() const {
  if (op == OpKind::kGemm) return 2.0 * double(dims[0]) * double(dims[1]) * double(dims[2]);
  const double oh = double((dims[1] + 2 * dims[9] - dims[5]) / dims[7] + 1);
  const double ow = double((dims[2] + 2 * dims[10] - dims[6]) / dims[8] + 1);
  return 2.0 * double(dims[0]) * oh * ow * double(dims[4]) * double(dims[3]) * double(dims[5]) * double(dims[6]);
}

const char* ShapeClassName(ShapeClass c) {
  switch (c) {
    case ShapeClass::kUnspecified: return "unspecified";
    case ShapeClass::kSkinny: return "skinny";
    case ShapeClass::kSmall: return "small";
    case ShapeClass::kLarge: return "large";
  }
  return "?";
}

StatusOr<ShapeClass> ParseShapeClass(std::string_view s) {
  for (uint8_t i = 0; i < kNumShapeClasses; ++i)
    if (s == ShapeClassName(static_cast<ShapeClass>(i))) return static_cast<ShapeClass>(i);
  return InvalidArgument(fmt::format("shape class '{}' is not one of: unspecified, skinny, small, large", s));
}

ShapeClass ShapeClassOf(const OpKey& key) {
  double m = double(key.dims[0]), n = double(key.dims[1]), k = double(key.dims[2]);
  if (key.op == OpKind::kConv2d) {
    const int64_t oh = (key.dims[1] + 2 * key.dims[9] - key.dims[5]) / std::max<int64_t>(1, key.dims[7]) + 1;
    const int64_t ow = (key.dims[2] + 2 * key.dims[10] - key.dims[6]) / std::max<int64_t>(1, key.dims[8]) + 1;
    m = double(key.dims[0]) * double(oh) * double(ow);
    n = double(key.dims[4]);
    k = double(key.dims[3]) * double(key.dims[5]) * double(key.dims[6]);
  }
  if (std::min(m, n) <= 16) return ShapeClass::kSkinny;
  if (m * n * k <= double(int64_t{1} << 21)) return ShapeClass::kSmall;
  return ShapeClass::kLarge;
}

Status OpKey::Validate() const {
  constexpr int64_t kMaxDim = int64_t{1} << 31;
  if (static_cast<uint8_t>(op) >= kNumOpKinds)
    return InvalidArgument(fmt::format("op kind {} is not one of: 0 (gemm), 1 (conv2d)", static_cast<int>(op)));
  if (static_cast<uint8_t>(dtype) >= kNumDTypes)
    return InvalidArgument(
        fmt::format("{}: dtype {} is not one of: 0 (f32), 1 (f16), 2 (bf16)", OpKindName(op), static_cast<int>(dtype)));
  const int nd = num_dims();
  for (int i = 0; i < kMaxDims; ++i) {
    const char* name = op == OpKind::kGemm ? (i < 3 ? kGemmDimNames[i] : "unused") : kConvDimNames[i];
    const bool is_pad = op == OpKind::kConv2d && i >= 9;
    if (i >= nd) {
      if (dims[i] != 0) return InvalidArgument(fmt::format("{}: unused dimension {} must be 0, got {}", OpKindName(op), i, dims[i]));
      continue;
    }
    const int64_t lo = is_pad ? 0 : 1;
    if (dims[i] < lo)
      return InvalidArgument(fmt::format("{}: {}={} must be >= {}", OpKindName(op), name, dims[i], lo));
    if (dims[i] > kMaxDim)
      return InvalidArgument(fmt::format("{}: {}={} must be <= {}", OpKindName(op), name, dims[i], kMaxDim));
  }
  if (op == OpKind::kGemm) {
    // Each operand must be addressable with int64 element offsets.
    const double mn = double(dims[0]) * double(dims[1]), mk = double(dims[0]) * double(dims[2]),
                 kn = double(dims[2]) * double(dims[1]);
    const double lim = double(std::numeric_limits<int64_t>::max() / 8);
    if (mn > lim || mk > lim || kn > lim)
      return InvalidArgument(fmt::format("gemm: m={} n={} k={}: an operand's element count overflows int64",
                                         dims[0], dims[1], dims[2]));
  } else {
    if (dims[1] + 2 * dims[9] < dims[5] || dims[2] + 2 * dims[10] < dims[6])
      return InvalidArgument(fmt::format("conv2d: kernel {}x{} is larger than the padded input {}x{}", dims[5],
                                         dims[6], dims[1] + 2 * dims[9], dims[2] + 2 * dims[10]));
  }
  return Status::Ok();
}

std::string OpKey::ToString() const {
  std::string s = fmt::format("{} {} ", OpKindName(op), DTypeName(dtype));
  if (op == OpKind::kGemm) {
    s += fmt::format("{}{} m={} n={} k={}", trans_a ? 't' : 'n', trans_b ? 't' : 'n', dims[0], dims[1], dims[2]);
  } else {
    s += "nhwc";
    for (int i = 0; i < kMaxDims; ++i) s += fmt::format(" {}={}", kConvDimNames[i], dims[i]);
  }
  return s;
}

StatusOr<OpKey> OpKey::Parse(std::string_view text) {
  const auto words = SplitWords(text);
  auto bad = [&](const std::string& why) {
    return InvalidArgument(fmt::format("op key '{}': {}", text, why));
  };
  if (words.size() < 3) return bad("expected '<op> <dtype> <layout> dim=value ...'");
  auto op = ParseOpKind(words[0]);
  if (!op.ok()) return bad(op.status().message());
  auto dt = ParseDType(words[1]);
  if (!dt.ok()) return bad(dt.status().message());
  OpKey key;
  key.op = *op;
  key.dtype = *dt;
  const int nd = key.num_dims();
  const char* const* names = key.op == OpKind::kGemm ? kGemmDimNames : kConvDimNames;
  if (key.op == OpKind::kGemm) {
    const std::string_view layout = words[2];
    if (layout.size() != 2 || (layout[0] != 'n' && layout[0] != 't') || (layout[1] != 'n' && layout[1] != 't'))
      return bad(fmt::format("gemm layout '{}' must be one of nn, nt, tn, tt", layout));
    key.trans_a = layout[0] == 't';
    key.trans_b = layout[1] == 't';
  } else if (words[2] != "nhwc") {
    return bad(fmt::format("conv2d layout '{}' must be nhwc", words[2]));
  }
  if (static_cast<int>(words.size()) != 3 + nd)
    return bad(fmt::format("expected {} dimensions, got {}", nd, words.size() - 3));
  for (int i = 0; i < nd; ++i) {
    const std::string_view w = words[3 + i];
    const size_t eq = w.find('=');
    if (eq == std::string_view::npos || w.substr(0, eq) != names[i])
      return bad(fmt::format("dimension {} must be written '{}=<value>', got '{}'", i + 1, names[i], w));
    const std::string_view v = w.substr(eq + 1);
    int64_t value = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
    if (ec != std::errc() || p != v.data() + v.size())
      return bad(fmt::format("{}='{}' is not a 64-bit integer", names[i], v));
    key.dims[i] = value;
  }
  CG_RETURN_IF_ERROR(key.Validate());
  return key;
}

}  // namespace cliffguard
