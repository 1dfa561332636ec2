#include "cliffguard/op_key.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <string>
#include <vector>

#include <fmt/compile.h>
#include <fmt/format.h>

namespace cliffguard {
namespace {

static_assert([] {
  for (const OpKindInfo& o : kOpKindInfo)
    if (o.dims > OpKey::kMaxDims || o.shape_dims > o.dims) return false;
  return true;
}(), "an op kind row has more dims than OpKey::kMaxDims");

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

// The dims' names of each op, split once from its row. Never destroyed: keys are
// printed by Runtimes destroyed at exit.
const std::vector<std::string_view>& DimNames(OpKind op) {
  static const auto* names = [] {
    auto* v = new std::vector<std::vector<std::string_view>>();
    for (const OpKindInfo& o : kOpKindInfo) v->push_back(SplitWords(o.dim_names));
    return v;
  }();
  return (*names)[static_cast<size_t>(op)];
}

template <typename Info, size_t N>
std::string NameList(const Info (&rows)[N]) {
  std::string out;
  for (const Info& r : rows) out += fmt::format("{}{}", out.empty() ? "" : ", ", r.name);
  return out;
}

}  // namespace

const char* OpKindName(OpKind op) { return static_cast<uint8_t>(op) < kNumOpKinds ? InfoOf(op).name : "?"; }
std::string_view VaryingDimName(OpKind op) {
  return static_cast<uint8_t>(op) < kNumOpKinds ? DimNames(op)[kVaryingDim] : "?";
}
const char* DTypeName(DType d) { return static_cast<uint8_t>(d) < kNumDTypes ? InfoOf(d).name : "?"; }
size_t DTypeSize(DType d) { return static_cast<uint8_t>(d) < kNumDTypes ? size_t(InfoOf(d).bytes) : 0; }

StatusOr<OpKind> ParseOpKind(std::string_view s) {
  for (uint8_t i = 0; i < kNumOpKinds; ++i)
    if (s == kOpKindInfo[i].name) return static_cast<OpKind>(i);
  return InvalidArgument(fmt::format("op '{}' is not one of: {}", s, NameList(kOpKindInfo)));
}

StatusOr<DType> ParseDType(std::string_view s) {
  for (uint8_t i = 0; i < kNumDTypes; ++i)
    if (s == kDTypeInfo[i].name) return static_cast<DType>(i);
  return InvalidArgument(fmt::format("dtype '{}' is not one of: {}", s, NameList(kDTypeInfo)));
}

OpKey OpKey::Conv2d(int64_t n, int64_t h, int64_t w, int64_t ic, int64_t oc, int64_t kh, int64_t kw,
                    int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w, DType dtype) {
  OpKey key;
  key.op = OpKind::kConv2d;
  key.dtype = dtype;
  key.dims = {n, h, w, ic, oc, kh, kw, stride_h, stride_w, pad_h, pad_w};
  return key;
}

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
  const GemmView g = GemmViewOf(key);
  const double m = double(g.m), n = double(g.n), k = double(g.k);
  if (std::min(m, n) <= 16) return ShapeClass::kSkinny;
  if (m * n * k <= kSmallClassMaxWork) return ShapeClass::kSmall;
  return ShapeClass::kLarge;
}

Status OpKey::Validate() const {
  constexpr int64_t kMaxDim = int64_t{1} << 31;
  if (static_cast<uint8_t>(op) >= kNumOpKinds)
    return InvalidArgument(fmt::format("op kind {} is not one of 0 to {} ({})", static_cast<int>(op), kNumOpKinds - 1,
                                       NameList(kOpKindInfo)));
  if (static_cast<uint8_t>(dtype) >= kNumDTypes)
    return InvalidArgument(fmt::format("{}: dtype {} is not one of 0 to {} ({})", OpKindName(op), static_cast<int>(dtype),
                                       kNumDTypes - 1, NameList(kDTypeInfo)));
  const int nd = num_dims();
  if (!InfoOf(op).transposes && (trans_a || trans_b))
    return InvalidArgument(fmt::format("{}: keys of this op carry no transposes", OpKindName(op)));
  const auto& names = DimNames(op);
  for (int i = 0; i < kMaxDims; ++i) {
    const std::string_view name = i < nd ? names[size_t(i)] : "unused";
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
    // Each tensor (x, y, the filter, an im2col matrix) must be addressable with
    // int64 element offsets.
    const Conv2dOutput out = Conv2dOutputDims(*this);
    const double lim = double(std::numeric_limits<int64_t>::max() / 8);
    const double x = double(dims[0]) * double(dims[1]) * double(dims[2]) * double(dims[3]);
    const double y = double(dims[0]) * double(out.oh) * double(out.ow) * double(dims[4]);
    const double w = double(dims[4]) * double(dims[5]) * double(dims[6]) * double(dims[3]);
    const double cols = double(dims[0]) * double(out.oh) * double(out.ow) * double(dims[5]) * double(dims[6]) *
                        double(dims[3]);
    if (x > lim || y > lim || w > lim || cols > lim)
      return InvalidArgument(fmt::format("conv2d: {}: a tensor's element count overflows int64", ToString()));
  }
  return Status::Ok();
}

std::string OpKey::ToString() const {
  if (static_cast<uint8_t>(op) >= kNumOpKinds) return fmt::format("? {}", DTypeName(dtype));
  const OpKindInfo& info = InfoOf(op);
  fmt::memory_buffer s;
  auto out = std::back_inserter(s);
  fmt::format_to(out, FMT_COMPILE("{} {} "), info.name, DTypeName(dtype));
  if (info.transposes) {
    s.push_back(trans_a ? 't' : 'n');
    s.push_back(trans_b ? 't' : 'n');
  } else {
    s.append(std::string_view(info.layout));
  }
  const auto& names = DimNames(op);
  for (int i = 0; i < info.dims; ++i) fmt::format_to(out, FMT_COMPILE(" {}={}"), names[size_t(i)], dims[i]);
  if (constant_weights) s.append(std::string_view(" weights=constant"));
  return fmt::to_string(s);
}

StatusOr<OpKey> OpKey::Parse(std::string_view text) {
  // The words, without allocating: a key has at most 4 + kMaxDims of them.
  struct {
    std::array<std::string_view, 4 + kMaxDims + 1> w;
    size_t n = 0;
    size_t size() const { return n; }
    std::string_view operator[](size_t i) const { return w[i]; }
    std::string_view back() const { return w[n - 1]; }
  } words;
  for (size_t i = 0; i < text.size();) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\t') ++j;
    if (j > i) {
      if (words.n == words.w.size()) {
        words.n = words.w.size() + 1;  // too many: refused below
        break;
      }
      words.w[words.n++] = text.substr(i, j - i);
    }
    i = j;
  }
  auto bad = [&](const std::string& why) {
    return InvalidArgument(fmt::format("op key '{}': {}", text, why));
  };
  if (words.size() > words.w.size()) return bad(fmt::format("more than {} words", words.w.size()));
  if (words.size() < 3) return bad("expected '<op> <dtype> <layout> dim=value ...'");
  auto op = ParseOpKind(words[0]);
  if (!op.ok()) return bad(op.status().message());
  auto dt = ParseDType(words[1]);
  if (!dt.ok()) return bad(dt.status().message());
  OpKey key;
  key.op = *op;
  key.dtype = *dt;
  const OpKindInfo& info = InfoOf(key.op);
  const int nd = info.dims;
  const auto& names = DimNames(key.op);
  const std::string_view layout = words[2];
  if (info.transposes) {
    if (layout.size() != 2 || (layout[0] != 'n' && layout[0] != 't') || (layout[1] != 'n' && layout[1] != 't'))
      return bad(fmt::format("{} layout '{}' must be one of nn, nt, tn, tt", info.name, layout));
    key.trans_a = layout[0] == 't';
    key.trans_b = layout[1] == 't';
  } else if (layout != info.layout) {
    return bad(fmt::format("{} layout '{}' must be {}", info.name, layout, info.layout));
  }
  size_t nwords = words.size();
  if (nwords == size_t(4 + nd) && words.back().starts_with("weights=")) {
    if (words.back() != "weights=constant")
      return bad(fmt::format("'{}': the only weights attribute is weights=constant", words.back()));
    key.constant_weights = true;
    --nwords;
  }
  if (nwords != size_t(3 + nd))
    return bad(fmt::format("expected {} dimensions, then optionally weights=constant; got {} words after the layout", nd,
                           words.size() - 3));
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

StatusOr<OpKey> ParseShape(std::string_view text) {
  auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  };
  const std::string_view t = trim(text);
  if (t.find(',') == std::string_view::npos) {  // no comma: a canonical key
    auto key = OpKey::Parse(t);
    if (!key.ok()) return InvalidArgument(fmt::format("shape '{}': {}", text, key.status().message()));
    return key;
  }
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t comma = t.find(',', start);
    parts.push_back(trim(t.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  auto number = [&](std::string_view part, const char* name, int64_t& out) -> Status {
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), out);
    if (part.empty() || ec != std::errc() || p != part.data() + part.size())
      return InvalidArgument(fmt::format("shape '{}': {}='{}' is not an integer", text, name, part));
    return Status::Ok();
  };
  if (parts.size() == 7 || parts.size() == 8) {  // conv2d: N,H,W,IC,OC,K,S[,P]
    static constexpr const char* kConvNames[8] = {"N", "H", "W", "IC", "OC", "K", "S", "P"};
    int64_t c[8];
    for (size_t i = 0; i < parts.size(); ++i) CG_RETURN_IF_ERROR(number(parts[i], kConvNames[i], c[i]));
    if (parts.size() == 7) c[7] = c[5] >= 1 ? (c[5] - 1) / 2 : 0;  // SAME padding of an odd kernel
    const OpKey key = OpKey::Conv2d(c[0], c[1], c[2], c[3], c[4], c[5], c[5], c[6], c[6], c[7], c[7]);
    if (Status st = key.Validate(); !st.ok()) return InvalidArgument(fmt::format("shape '{}': {}", text, st.message()));
    return key;
  }
  if (parts.size() != 3 && parts.size() != 4)
    return InvalidArgument(fmt::format(
        "shape '{}' must be M,N,K or M,N,K,LAYOUT (gemm; LAYOUT: nn, nt, tn, tt), N,H,W,IC,OC,K,S[,P] (conv2d: square "
        "kernel K, stride S, padding P, default (K-1)/2) or a canonical key",
        text));
  int64_t d[3];
  static constexpr const char* kNames[3] = {"M", "N", "K"};
  for (int i = 0; i < 3; ++i) CG_RETURN_IF_ERROR(number(parts[i], kNames[i], d[i]));
  bool ta = false, tb = false;
  if (parts.size() == 4) {
    const std::string_view l = parts[3];
    if (l != "nn" && l != "nt" && l != "tn" && l != "tt")
      return InvalidArgument(fmt::format("shape '{}': layout '{}' must be one of nn, nt, tn, tt", text, l));
    ta = l[0] == 't';
    tb = l[1] == 't';
  }
  const OpKey key = OpKey::Gemm(d[0], d[1], d[2], ta, tb);
  if (Status st = key.Validate(); !st.ok()) return InvalidArgument(fmt::format("shape '{}': {}", text, st.message()));
  return key;
}

}  // namespace cliffguard
