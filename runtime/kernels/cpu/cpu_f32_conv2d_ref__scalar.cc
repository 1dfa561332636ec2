// cpu_f32_conv2d_ref__scalar: the portable conv2d reference. Plain loops, runs
// every valid key; threads split the output rows.
#include <algorithm>

#include <fmt/format.h>

#include "kernels/cpu/conv2d_driver.h"
#include "kernels/cpu/conv2d_params.h"
#include "kernels/cpu/thread_pool.h"

namespace cliffguard::cpu {
namespace {

struct RefCtx {
  const Conv2dArgs* a;
  int64_t oh, ow;
  const float* w;
  bool oihw;
};

void RefTask(void* ctx, int tid, int nt) {
  const RefCtx& c = *static_cast<const RefCtx*>(ctx);
  const Conv2dArgs& a = *c.a;
  const float* x = static_cast<const float*>(a.x);
  const float* bias = static_cast<const float*>(a.bias);
  float* y = static_cast<float*>(a.y);
  int64_t r0, r1;
  SplitRange(a.n * c.oh, tid, nt, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t b = r / c.oh, oy = r % c.oh;
    for (int64_t ox = 0; ox < c.ow; ++ox) {
      float* out = y + (r * c.ow + ox) * a.oc;
      for (int64_t o = 0; o < a.oc; ++o) {
        float acc = bias ? bias[o] : 0.0f;
        for (int64_t ry = 0; ry < a.kh; ++ry) {
          const int64_t iy = oy * a.stride_h - a.pad_h + ry;
          if (iy < 0 || iy >= a.h) continue;
          for (int64_t rx = 0; rx < a.kw; ++rx) {
            const int64_t ix = ox * a.stride_w - a.pad_w + rx;
            if (ix < 0 || ix >= a.w) continue;
            const float* xp = x + ((b * a.h + iy) * a.w + ix) * a.ic;
            for (int64_t ci = 0; ci < a.ic; ++ci) {
              const float wv = c.oihw ? c.w[((o * a.ic + ci) * a.kh + ry) * a.kw + rx]
                                      : c.w[((o * a.kh + ry) * a.kw + rx) * a.ic + ci];
              acc += xp[ci] * wv;
            }
          }
        }
        out[o] = acc;
      }
    }
  }
}

}  // namespace

Status cpu_f32_conv2d_ref__scalar_run(const KernelVariant& self, const Conv2dArgs& args, const ParamValues& params) {
  if (args.dtype != DType::kF32)
    return Unimplemented(fmt::format("{}: runs f32, not {}", self.name, DTypeName(args.dtype)));
  const Conv2dOutput o = Conv2dOutputDims(Conv2dKeyOf(args));
  RefCtx c{&args, o.oh, o.ow, nullptr, false};
  if (args.packed_weights) {
    c.w = static_cast<const float*>(args.packed_weights);  // OHWI, dense
  } else {
    c.w = static_cast<const float*>(args.weights);
    c.oihw = args.weight_layout == ConvWeightLayout::kOihw;
  }
  const int64_t rows = args.n * o.oh;
  const int nt = static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(params[0], rows), 1, ThreadPool::kMaxThreads));
  ThreadPool::Global().Run(nt, &RefTask, &c);
  return Status::Ok();
}

}  // namespace cliffguard::cpu
