// conv2d's entry points and its row of the op table: argument rules, the key of a
// call, and (below) Runtime::Conv2d and its plans. The only runtime file that knows
// what a conv2d call looks like.
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

Status ValidateConv2dArgs(const Conv2dArgs& a) {
  if (a.dilation_h != 1 || a.dilation_w != 1)
    return Unimplemented(fmt::format("conv2d: dilation {}x{} is not supported (only 1x1)", a.dilation_h, a.dilation_w));
  if (a.groups != 1) return Unimplemented(fmt::format("conv2d: groups={} is not supported (only 1)", a.groups));
  if (a.weight_layout != ConvWeightLayout::kOhwi && a.weight_layout != ConvWeightLayout::kOihw)
    return InvalidArgument(fmt::format("conv2d: weight layout {} is not ohwi (0) or oihw (1)",
                                       static_cast<int>(a.weight_layout)));
  CG_RETURN_IF_ERROR(Conv2dKeyOf(a).Validate());
  if (!a.x || !a.y || (!a.weights && !a.packed_weights))
    return InvalidArgument(fmt::format("conv2d: pointer {} is null", !a.x ? "x" : !a.y ? "y" : "weights"));
  return Status::Ok();
}

namespace ops::conv2d {

// conv2d calls take dense tensors: no leading dimensions to bound.
ArgBounds KeyArgBounds(const OpKey&) { return {}; }

}  // namespace ops::conv2d

}  // namespace cliffguard
