// conv2d's entry points and its row of the op table: argument rules, the key of a
// call, and (below) Runtime::Conv2d and its plans. The only runtime file that knows
// what a conv2d call looks like.
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "cliffguard/detail/logging.h"
#include "ops/op_table.h"
#include "runtime_impl.h"

namespace cliffguard {

const char* ConvWeightLayoutName(ConvWeightLayout l) {
  switch (l) {
    case ConvWeightLayout::kOhwi: return "ohwi";
    case ConvWeightLayout::kOihw: return "oihw";
  }
  return "?";
}

Conv2dArgs DenseConv2dArgs(const OpKey& key, const void* x, const void* weights, const void* bias, void* y,
                           ConvWeightLayout layout) {
  Conv2dArgs a;
  a.dtype = key.dtype;
  a.n = key.dims[0];
  a.h = key.dims[1];
  a.w = key.dims[2];
  a.ic = key.dims[3];
  a.oc = key.dims[4];
  a.kh = key.dims[5];
  a.kw = key.dims[6];
  a.stride_h = key.dims[7];
  a.stride_w = key.dims[8];
  a.pad_h = key.dims[9];
  a.pad_w = key.dims[10];
  a.weight_layout = layout;
  a.x = x;
  a.weights = weights;
  a.bias = bias;
  a.y = y;
  return a;
}

namespace {
// ValidateConv2dArgs for a call whose key is `key` (Conv2dKeyOf(a)), built once.
Status CheckConv2dArgs(const Conv2dArgs& a, const OpKey& key) {
  if (a.dilation_h != 1 || a.dilation_w != 1)
    return Unimplemented(fmt::format("conv2d: dilation {}x{} is not supported (only 1x1)", a.dilation_h, a.dilation_w));
  if (a.groups != 1) return Unimplemented(fmt::format("conv2d: groups={} is not supported (only 1)", a.groups));
  if (a.weight_layout != ConvWeightLayout::kOhwi && a.weight_layout != ConvWeightLayout::kOihw)
    return InvalidArgument(fmt::format("conv2d: weight layout {} is not ohwi (0) or oihw (1)",
                                       static_cast<int>(a.weight_layout)));
  CG_RETURN_IF_ERROR(key.Validate());
  if (!a.x || !a.y || (!a.weights && !a.packed_weights))
    return InvalidArgument(fmt::format("conv2d: pointer {} is null", !a.x ? "x" : !a.y ? "y" : "weights"));
  return Status::Ok();
}
}  // namespace

Status ValidateConv2dArgs(const Conv2dArgs& a) { return CheckConv2dArgs(a, Conv2dKeyOf(a)); }

namespace {

[[gnu::noinline]] Status MissConv2d(Runtime::Impl& r, ThreadSlot* s, const Conv2dArgs& a, const OpKey& key,
                                    uint64_t hash, const DispatchTable* t, const TableEntry* found) {
  ThreadSlot::MissCacheLine& line = s->miss_cache[hash >> 60];
  if (!line.Holds(hash, t->generation(), key)) [[unlikely]]
    CG_RETURN_IF_ERROR(r.FillMissLine(line, key, hash, t, found, ops::conv2d::KeyArgBounds(key)));
  return RunMissed(s, line, [&a](const Schedule& fallback) { return RunConv2d(fallback, a); });
}

// OHWI copy of a filter stored in `layout` (oc x kh x kw x ic).
void ToOhwi(const OpKey& key, const float* w, ConvWeightLayout layout, float* out) {
  const int64_t oc = key.dims[4], ic = key.dims[3], kh = key.dims[5], kw = key.dims[6];
  const int64_t per_oc = kh * kw * ic;
  if (layout == ConvWeightLayout::kOhwi) {
    std::memcpy(out, w, static_cast<size_t>(oc * per_oc) * sizeof(float));
    return;
  }
  for (int64_t o = 0; o < oc; ++o)
    for (int64_t c = 0; c < ic; ++c)
      for (int64_t y = 0; y < kh; ++y)
        for (int64_t x = 0; x < kw; ++x) out[o * per_oc + (y * kw + x) * ic + c] = w[((o * ic + c) * kh + y) * kw + x];
}

float* AlignedFloats(size_t count) {
  return static_cast<float*>(std::aligned_alloc(64, (count * sizeof(float) + 63) / 64 * 64));
}

}  // namespace

Status Runtime::Conv2d(const Conv2dArgs& a) {
  if (a.packed_weights) [[unlikely]]
    return InvalidArgument("conv2d: packed_weights is set: a packed filter runs through a Conv2dPlan");
  const OpKey key = Conv2dKeyOf(a);
  CG_RETURN_IF_ERROR(CheckConv2dArgs(a, key));
  Impl& r = *impl_;
  const uint64_t hash = key.Hash();
  ThreadSlot* s = r.slots.Local();
  const DispatchTable* t = r.table.load(std::memory_order_acquire);
  if (t != s->table.load(std::memory_order_relaxed)) [[unlikely]] t = r.slots.SwitchTable(s, r.table);
  const TableEntry* e = t->Find(key, hash);
  if (e && !e->rejected) [[likely]] {
    s->CountHit(e->index);
    return RunConv2d(e->schedule, a);
  }
  return MissConv2d(r, s, a, key, hash, t, e);
}

StatusOr<Conv2dPlan> Runtime::PlanConv2d(const OpKey& key_in, const float* weights, ConvWeightLayout layout,
                                         const float* bias) {
  if (key_in.op != OpKind::kConv2d)
    return InvalidArgument(fmt::format("PlanConv2d: key '{}' is not a conv2d", key_in.ToString()));
  CG_RETURN_IF_ERROR(key_in.Validate());
  Impl& r = *impl_;
  if (r.device.backend != Backend::kCpu)
    return Unimplemented(fmt::format("PlanConv2d: conv2d runs on cpu devices, not {}", r.device.fingerprint));
  if (key_in.dtype != DType::kF32)
    return Unimplemented(fmt::format("PlanConv2d: conv2d runs f32, not {}", DTypeName(key_in.dtype)));
  if (!weights) return InvalidArgument("PlanConv2d: weights pointer is null");
  if (layout != ConvWeightLayout::kOhwi && layout != ConvWeightLayout::kOihw)
    return InvalidArgument(fmt::format("PlanConv2d: weight layout {} is not ohwi (0) or oihw (1)", static_cast<int>(layout)));
  OpKey keys[2] = {key_in, key_in};
  keys[0].constant_weights = true;
  keys[1].constant_weights = false;
  Conv2dPlan plan;
  plan.key_ = keys[0];
  OpKey counted;
  CG_RETURN_IF_ERROR(r.ResolvePlan("PlanConv2d", keys, plan.hit_, plan.schedule_, plan.miss_, plan.served_by_, counted));

  const OpKey& key = keys[0];
  const int64_t oc = key.dims[4], per_oc = key.dims[5] * key.dims[6] * key.dims[3];
  const size_t dense = static_cast<size_t>(oc * per_oc);
  std::unique_ptr<float, Conv2dPlan::Free> ohwi(AllocateWeights(dense * sizeof(float)));  // the plan's when it does not pack
  if (!ohwi) return Internal(fmt::format("PlanConv2d: cannot allocate {} bytes for the filter of '{}'",
                                         dense * sizeof(float), key.ToString()));
  ToOhwi(key, weights, layout, ohwi.get());
  const KernelVariant& v = *plan.schedule_.variant;
  const bool packs = v.pack_weights != nullptr;
  size_t bytes = dense * sizeof(float);
  if (packs) {
    bytes = v.packed_weights_bytes(v, key, plan.schedule_.params);
    plan.weights_.reset(AllocateWeights(bytes));
    if (!plan.weights_)
      return Internal(fmt::format("PlanConv2d: cannot allocate {} bytes for the packed filter of '{}'", bytes,
                                  key.ToString()));
    CG_RETURN_IF_ERROR(v.pack_weights(v, key, plan.schedule_.params, ohwi.get(), per_oc, plan.weights_.get()));
  } else {
    plan.weights_ = std::move(ohwi);
  }
  plan.weights_bytes_ = bytes;
  if (bias) {
    plan.bias_.reset(AlignedFloats(static_cast<size_t>(oc)));
    if (!plan.bias_) return Internal(fmt::format("PlanConv2d: cannot allocate the bias of '{}'", key.ToString()));
    std::memcpy(plan.bias_.get(), bias, static_cast<size_t>(oc) * sizeof(float));
    plan.weights_bytes_ += static_cast<size_t>(oc) * sizeof(float);
  }
  plan.packed_layout_ = packs;
  if (plan.hit_) plan.plan_index_ = r.slots.PlanIndex(counted);
  plan.runtime_ = &r;
  logging::Log(LogLevel::kDebug, "plan for '{}': filter {} into {} bytes ({})", key.ToString(),
               packs ? "packed" : "copied", bytes, plan.schedule_.ToString());
  return plan;
}

Conv2dPlan::Conv2dPlan(Conv2dPlan&& o) noexcept { *this = std::move(o); }
Conv2dPlan& Conv2dPlan::operator=(Conv2dPlan&& o) noexcept {
  runtime_ = std::exchange(o.runtime_, nullptr);
  key_ = o.key_;
  schedule_ = o.schedule_;
  hit_ = std::exchange(o.hit_, false);
  plan_index_ = o.plan_index_;
  miss_ = std::exchange(o.miss_, nullptr);
  served_by_ = o.served_by_;
  weights_ = std::move(o.weights_);
  bias_ = std::move(o.bias_);
  weights_bytes_ = std::exchange(o.weights_bytes_, 0);
  packed_layout_ = o.packed_layout_;
  return *this;
}
Conv2dPlan::~Conv2dPlan() = default;

Status Conv2dPlan::Run(const float* x, float* y) const {
  if (!runtime_) [[unlikely]] return InvalidState("Conv2dPlan::Run: the plan is empty (default-constructed or moved from)");
  if (!x || !y) [[unlikely]] return InvalidArgument(fmt::format("Conv2dPlan::Run: pointer {} is null", !x ? "x" : "y"));
  Conv2dArgs args = DenseConv2dArgs(key_, x, weights_.get(), bias_.get(), y);
  if (packed_layout_) args.packed_weights = weights_.get();
  return RunPlanned(*runtime_, hit_, plan_index_, miss_, served_by_, [&] { return RunConv2d(schedule_, args); });
}

namespace ops::conv2d {

// conv2d calls take dense tensors: no leading dimensions to bound.
ArgBounds KeyArgBounds(const OpKey&) { return {}; }

}  // namespace ops::conv2d

}  // namespace cliffguard
