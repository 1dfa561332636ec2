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
  // Never destroyed: schedules held by a Runtime in a global or static variable point
  // into it, and that Runtime may be destroyed (writing its miss report) after every
  // function-local static built during main().
  static const std::vector<KernelVariant>* all = [] {
    auto* v = new std::vector<KernelVariant>();
#ifdef CLIFFGUARD_WITH_CUDA
    for (const auto& k : cuda::CudaKernelVariants()) v->push_back(k);
#endif
    for (const auto& k : cpu::CpuKernelVariants()) v->push_back(k);
    return v;
  }();
  return *all;
}

const KernelVariant* FindKernelVariant(std::string_view name) {
  for (const auto& v : AllKernelVariants())
    if (name == v.name) return &v;
  return nullptr;
}

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
