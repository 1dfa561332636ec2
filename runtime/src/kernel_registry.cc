#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "cliffguard/kernel.h"
#include "kernels/cpu/cpu_kernels.h"
#ifdef CLIFFGUARD_WITH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace cliffguard {

int KernelVariant::ParamIndex(std::string_view param_name) const {
  for (size_t i = 0; i < params.size(); ++i)
    if (param_name == params[i].name) return static_cast<int>(i);
  return -1;
}

std::span<const KernelVariant> AllKernelVariants() {
  static const std::vector<KernelVariant> all = [] {
    std::vector<KernelVariant> v;
#ifdef CLIFFGUARD_WITH_CUDA
    for (const auto& k : cuda::CudaKernelVariants()) v.push_back(k);
#endif
    for (const auto& k : cpu::CpuKernelVariants()) v.push_back(k);
    return v;
  }();
  return all;
}

const KernelVariant* FindKernelVariant(std::string_view name) {
  for (const auto& v : AllKernelVariants())
    if (name == v.name) return &v;
  return nullptr;
}

Status ValidateGemmArgs(const GemmArgs& a) {
  CG_RETURN_IF_ERROR(GemmKeyOf(a).Validate());
  const int64_t a_cols = a.trans_a ? a.m : a.k, b_cols = a.trans_b ? a.k : a.n;
  if (a.lda < a_cols)
    return InvalidArgument(fmt::format("gemm: lda={} must be >= {} ({})", a.lda, a_cols, a.trans_a ? "m, A transposed" : "k"));
  if (a.ldb < b_cols)
    return InvalidArgument(fmt::format("gemm: ldb={} must be >= {} ({})", a.ldb, b_cols, a.trans_b ? "k, B transposed" : "n"));
  if (a.ldc < a.n) return InvalidArgument(fmt::format("gemm: ldc={} must be >= n={}", a.ldc, a.n));
  // The last element of each operand must be addressable with int64 offsets.
  constexpr int64_t kMaxElems = int64_t{1} << 40;
  const int64_t a_rows = a.trans_a ? a.k : a.m, b_rows = a.trans_b ? a.n : a.k;
  auto span_ok = [&](int64_t rows, int64_t ld) { return ld <= kMaxElems && rows <= kMaxElems / ld; };
  if (!span_ok(a_rows, a.lda)) return InvalidArgument(fmt::format("gemm: A spans {} rows x lda={}: over 2^40 elements", a_rows, a.lda));
  if (!span_ok(b_rows, a.ldb)) return InvalidArgument(fmt::format("gemm: B spans {} rows x ldb={}: over 2^40 elements", b_rows, a.ldb));
  if (!span_ok(a.m, a.ldc)) return InvalidArgument(fmt::format("gemm: C spans {} rows x ldc={}: over 2^40 elements", a.m, a.ldc));
  if (!a.a || !a.b || !a.c)
    return InvalidArgument(fmt::format("gemm: pointer {} is null", !a.a ? "a" : !a.b ? "b" : "c"));
  return Status::Ok();
}

Status VariantSupports(const KernelVariant& v, const OpKey& key, const DeviceInfo& device) {
  if (v.backend != device.backend)
    return Unimplemented(fmt::format("{}: backend {} is not the device's {}", v.name, BackendName(v.backend), BackendName(device.backend)));
  if (v.op != key.op) return Unimplemented(fmt::format("{}: runs {}, not {}", v.name, OpKindName(v.op), OpKindName(key.op)));
  if (v.dtype != key.dtype)
    return Unimplemented(fmt::format("{}: runs {}, not {}", v.name, DTypeName(v.dtype), DTypeName(key.dtype)));
  if (v.backend == Backend::kCpu && (v.isa & device.isa) != v.isa)
    return Unimplemented(fmt::format("{}: needs ISA {}, host has {}", v.name, IsaLevelName(v.isa), device.arch));
  if (v.supports) return v.supports(v, key, device);
  return Status::Ok();
}

std::string Schedule::ToString() const {
  if (!variant) return "<none>";
  std::string s = variant->name;
  for (size_t i = 0; i < variant->params.size(); ++i) s += fmt::format(" {}={}", variant->params[i].name, params[i]);
  return s;
}

std::vector<std::pair<std::string, int64_t>> Schedule::Named() const {
  std::vector<std::pair<std::string, int64_t>> out;
  if (!variant) return out;
  for (size_t i = 0; i < variant->params.size(); ++i) out.emplace_back(variant->params[i].name, params[i]);
  return out;
}

StatusOr<Schedule> Schedule::FromNamed(std::string_view variant,
                                       const std::vector<std::pair<std::string, int64_t>>& params) {
  const KernelVariant* v = FindKernelVariant(variant);
  if (!v) return NotFound(fmt::format("kernel variant '{}' is not in this build", variant));
  Schedule s;
  s.variant = v;
  std::vector<bool> seen(v->params.size(), false);
  for (size_t i = 0; i < v->params.size(); ++i) s.params[i] = v->params[i].default_value;
  for (const auto& [name, value] : params) {
    const int idx = v->ParamIndex(name);
    if (idx < 0) return InvalidArgument(fmt::format("{}: unknown parameter '{}'", v->name, name));
    if (seen[idx]) return InvalidArgument(fmt::format("{}: parameter '{}' is given twice", v->name, name));
    seen[idx] = true;
    const auto& vals = v->params[idx].values;
    if (std::find(vals.begin(), vals.end(), value) == vals.end())
      return OutOfRange(fmt::format("{}: {}={} is not an allowed value (from {} to {}, {} values)", v->name, name,
                                    value, vals.front(), vals.back(), vals.size()));
    s.params[idx] = static_cast<int32_t>(value);
  }
  return s;
}

Status CheckSchedule(const Schedule& s, const OpKey& key, const DeviceInfo& device) {
  if (!s.variant) return InvalidArgument("schedule has no kernel variant");
  const KernelVariant& v = *s.variant;
  for (size_t i = 0; i < v.params.size(); ++i) {
    const auto& vals = v.params[i].values;
    if (!std::binary_search(vals.begin(), vals.end(), s.params[i]))
      return OutOfRange(fmt::format("{}: {}={} is not an allowed value", v.name, v.params[i].name, s.params[i]));
  }
  for (size_t i = v.params.size(); i < kMaxParams; ++i)
    if (s.params[i] != 0) return InvalidArgument(fmt::format("{}: unused parameter slot {} is set", v.name, i));
  CG_RETURN_IF_ERROR(VariantSupports(v, key, device));
  if (v.check) return v.check(v, key, s.params, device);
  return Status::Ok();
}

Schedule VariantDefaultSchedule(const KernelVariant& v, const OpKey& key, const DeviceInfo& device) {
  Schedule s;
  s.variant = &v;
  for (size_t i = 0; i < v.params.size(); ++i) s.params[i] = v.params[i].default_value;
  if (v.fit_defaults) v.fit_defaults(v, key, device, s.params);
  return s;
}

StatusOr<Schedule> DefaultSchedule(const OpKey& key, const DeviceInfo& device) {
  CG_RETURN_IF_ERROR(key.Validate());
  std::string reasons;
  for (const auto& v : AllKernelVariants()) {
    Status st = VariantSupports(v, key, device);
    if (st.ok()) {
      Schedule s = VariantDefaultSchedule(v, key, device);
      st = CheckSchedule(s, key, device);
      if (st.ok()) return s;
    }
    reasons += fmt::format("\n  {}", st.message());
  }
  return Unimplemented(fmt::format("no kernel variant runs {} on {}:{}", key.ToString(), device.fingerprint, reasons));
}

}  // namespace cliffguard
