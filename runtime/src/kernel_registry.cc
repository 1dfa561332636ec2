#include <algorithm>
#include <climits>
#include <vector>

#include <fmt/format.h>

#include "cliffguard/kernel.h"
#include "kernels/cpu/conv2d_kernels.h"
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
    for (const auto& k : cpu::CpuConv2dVariants()) v->push_back(k);
    return v;
  }();
  return *all;
}

const KernelVariant* FindKernelVariant(std::string_view name) {
  for (const auto& v : AllKernelVariants())
    if (name == v.name) return &v;
  return nullptr;
}

Status VariantRunsOn(const KernelVariant& v, OpKind op, DType dtype, const DeviceInfo& device) {
  if (v.backend != device.backend)
    return Unimplemented(fmt::format("{}: backend {} is not the device's {}", v.name, BackendName(v.backend), BackendName(device.backend)));
  if (v.op != op) return Unimplemented(fmt::format("{}: runs {}, not {}", v.name, OpKindName(v.op), OpKindName(op)));
  if (v.dtype != dtype) return Unimplemented(fmt::format("{}: runs {}, not {}", v.name, DTypeName(v.dtype), DTypeName(dtype)));
  if (v.backend == Backend::kCpu && (v.isa & device.isa) != v.isa)
    return Unimplemented(fmt::format("{}: needs ISA {}, host has {}", v.name, IsaLevelName(v.isa), device.arch));
  return Status::Ok();
}

Status VariantSupports(const KernelVariant& v, const OpKey& key, const DeviceInfo& device) {
  CG_RETURN_IF_ERROR(VariantRunsOn(v, key.op, key.dtype, device));
  if (v.supports) return v.supports(v, key, device);
  return Status::Ok();
}

std::string Schedule::ToString() const {
  if (!variant) return "<none>";
  fmt::memory_buffer s;
  s.append(std::string_view(variant->name));
  for (size_t i = 0; i < variant->params.size(); ++i)
    fmt::format_to(std::back_inserter(s), " {}={}", variant->params[i].name, params[i]);
  return fmt::to_string(s);
}

std::vector<std::pair<std::string, int64_t>> Schedule::Named() const {
  std::vector<std::pair<std::string, int64_t>> out;
  if (!variant) return out;
  for (size_t i = 0; i < variant->params.size(); ++i) out.emplace_back(variant->params[i].name, params[i]);
  return out;
}

Schedule Schedule::Defaults(const KernelVariant& v) {
  Schedule s;
  s.variant = &v;
  for (size_t i = 0; i < v.params.size(); ++i) s.params[i] = v.params[i].default_value;
  return s;
}

std::string AllowedValues(const ParamSpec& p) {
  fmt::memory_buffer out;
  for (size_t i = 0; i < p.values.size(); ++i) fmt::format_to(std::back_inserter(out), "{}{}", i ? ", " : "", p.values[i]);
  return fmt::to_string(out);
}

Status Schedule::SetParam(std::string_view name, int64_t value, uint32_t& seen) {
  const KernelVariant& v = *variant;
  const int idx = v.ParamIndex(name);
  if (idx < 0) return InvalidArgument(fmt::format("{}: unknown parameter '{}'", v.name, name));
  if (seen & (1u << idx)) return InvalidArgument(fmt::format("{}: parameter '{}' is given twice", v.name, name));
  seen |= 1u << idx;
  const auto& vals = v.params[size_t(idx)].values;
  if (value < INT32_MIN || value > INT32_MAX || !std::binary_search(vals.begin(), vals.end(), static_cast<int32_t>(value))) {
    return OutOfRange(fmt::format("{}: {}={} is not one of its values: {}", v.name, name, value,
                                  AllowedValues(v.params[size_t(idx)])));
  }
  params[size_t(idx)] = static_cast<int32_t>(value);
  return Status::Ok();
}

StatusOr<Schedule> Schedule::FromNamed(std::string_view variant,
                                       const std::vector<std::pair<std::string, int64_t>>& params,
                                       std::span<const KernelVariant* const> among) {
  const KernelVariant* v = nullptr;
  if (among.empty()) {
    v = FindKernelVariant(variant);
    if (!v) return NotFound(fmt::format("kernel variant '{}' is not in this build", variant));
  } else {
    for (const KernelVariant* c : among)
      if (c && variant == c->name) v = c;
    if (!v) return NotFound(fmt::format("kernel variant '{}' is not among the variants being tuned", variant));
  }
  Schedule s = Defaults(*v);
  uint32_t seen = 0;
  for (const auto& [name, value] : params) CG_RETURN_IF_ERROR(s.SetParam(name, value, seen));
  return s;
}

Status CheckSchedule(const Schedule& s, const OpKey& key, const DeviceInfo& device) {
  if (!s.variant) return InvalidArgument("schedule has no kernel variant");
  const KernelVariant& v = *s.variant;
  for (size_t i = 0; i < v.params.size(); ++i) {
    const auto& vals = v.params[i].values;
    if (!std::binary_search(vals.begin(), vals.end(), s.params[i]))
      return OutOfRange(fmt::format("{}: {}={} is not an allowed value: allowed are {}", v.name, v.params[i].name,
                                    s.params[i], AllowedValues(v.params[i])));
  }
  for (size_t i = v.params.size(); i < kMaxParams; ++i)
    if (s.params[i] != 0) return InvalidArgument(fmt::format("{}: unused parameter slot {} is set", v.name, i));
  CG_RETURN_IF_ERROR(VariantSupports(v, key, device));
  if (v.check) return v.check(v, key, s.params, device);
  return Status::Ok();
}

Schedule VariantDefaultSchedule(const KernelVariant& v, const OpKey& key, const DeviceInfo& device) {
  Schedule s = Schedule::Defaults(v);
  if (v.fit_defaults) v.fit_defaults(v, key, device, s.params);
  return s;
}

StatusOr<Schedule> DefaultSchedule(const OpKey& key, const DeviceInfo& device) {
  CG_RETURN_IF_ERROR(key.Validate());
  std::string reasons;
  for (const bool preferred : {true, false})
    for (const auto& v : AllKernelVariants()) {
      if (preferred && !(v.preferred_default && v.preferred_default(v, key, device))) continue;
      Status st = VariantSupports(v, key, device);
      if (st.ok()) {
        Schedule s = VariantDefaultSchedule(v, key, device);
        st = CheckSchedule(s, key, device);
        if (st.ok()) return s;
      }
      if (!preferred) reasons += fmt::format("\n  {}", st.message());
    }
  return Unimplemented(fmt::format("no kernel variant runs {} on {}:{}", key.ToString(), device.fingerprint, reasons));
}

}  // namespace cliffguard
