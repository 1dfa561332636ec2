// Conv2dTester: one fp32 conv2d case (NHWC, shape, stride, padding, weight layout,
// bias, packed weights, schedule) checked against a double-precision reference
// (STYLE H9), plus the data helpers other conv2d tests reuse.
//
//   Conv2dTester().batch(3).input(13, 7).channels(5, 17).kernel(3, 5).stride(2, 1)
//       .pad(1, 2).layout(ConvWeightLayout::kOihw).bias(true).Test(schedule);
//
// y starts as NaN (every output must be written) and is followed by sentinel floats
// that must survive (a kernel that writes past y fails). With packed_weights(true)
// the filter goes through the variant's pack_weights first (from OHWI, as a plan
// converts other layouts) and the call reads it only from Conv2dArgs::packed_weights
// (weights is null).
// The error bound scales with the square root of the reduction length
// K = kh*kw*ic: |y - ref| <= 8 * sqrt(K + 2) * eps * (sum |x * w| + |bias|).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cliffguard/kernel.h"

namespace cliffguard::testing {

// n floats uniform in [-1, 1] from `seed`.
inline std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Element counts of a valid conv2d key's tensors.
struct Conv2dSizes {
  size_t x, w, y;
  int64_t oh, ow;
};
inline Conv2dSizes Conv2dSizesOf(const OpKey& key) {
  const Conv2dOutput o = Conv2dOutputDims(key);
  const auto& d = key.dims;
  return {static_cast<size_t>(d[0] * d[1] * d[2] * d[3]), static_cast<size_t>(d[4] * d[5] * d[6] * d[3]),
          static_cast<size_t>(d[0] * o.oh * o.ow * d[4]), o.oh, o.ow};
}

// The OHWI filter `ohwi` of `key` in OIHW (and back).
inline std::vector<float> OihwFromOhwi(const OpKey& key, const std::vector<float>& ohwi) {
  const int64_t ic = key.dims[3], oc = key.dims[4], taps = key.dims[5] * key.dims[6];
  std::vector<float> out(ohwi.size());
  for (int64_t o = 0; o < oc; ++o)
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t c = 0; c < ic; ++c) out[(o * ic + c) * taps + t] = ohwi[(o * taps + t) * ic + c];
  return out;
}
inline std::vector<float> OhwiFromOihw(const OpKey& key, const std::vector<float>& oihw) {
  const int64_t ic = key.dims[3], oc = key.dims[4], taps = key.dims[5] * key.dims[6];
  std::vector<float> out(oihw.size());
  for (int64_t o = 0; o < oc; ++o)
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t c = 0; c < ic; ++c) out[(o * taps + t) * ic + c] = oihw[(o * ic + c) * taps + t];
  return out;
}

// Double-precision conv2d of a valid key: y (n*oh*ow*oc) and, per output, the
// bound sum |x * w| + |bias| its error is measured against. w is OHWI; bias may be
// null.
inline void ReferenceConv2d(const OpKey& key, const float* x, const float* w, const float* bias,
                            std::vector<double>& y, std::vector<double>& bound) {
  const auto& d = key.dims;
  const int64_t n = d[0], h = d[1], wd = d[2], ic = d[3], oc = d[4], kh = d[5], kw = d[6];
  const int64_t sh = d[7], sw = d[8], ph = d[9], pw = d[10];
  const Conv2dSizes s = Conv2dSizesOf(key);
  y.assign(s.y, 0.0);
  bound.assign(s.y, 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oy = 0; oy < s.oh; ++oy)
      for (int64_t ox = 0; ox < s.ow; ++ox)
        for (int64_t o = 0; o < oc; ++o) {
          double acc = bias ? bias[o] : 0.0, abs = bias ? std::fabs(double(bias[o])) : 0.0;
          for (int64_t ry = 0; ry < kh; ++ry) {
            const int64_t iy = oy * sh - ph + ry;
            if (iy < 0 || iy >= h) continue;
            for (int64_t rx = 0; rx < kw; ++rx) {
              const int64_t ix = ox * sw - pw + rx;
              if (ix < 0 || ix >= wd) continue;
              const float* xp = x + ((b * h + iy) * wd + ix) * ic;
              const float* wp = w + ((o * kh + ry) * kw + rx) * ic;
              for (int64_t c = 0; c < ic; ++c) {
                const double p = double(xp[c]) * double(wp[c]);
                acc += p;
                abs += std::fabs(p);
              }
            }
          }
          const size_t i = static_cast<size_t>(((b * s.oh + oy) * s.ow + ox) * oc + o);
          y[i] = acc;
          bound[i] = abs;
        }
}

// The tolerance of one output whose reference bound is `bound` (see the file comment).
inline double Conv2dTolerance(const OpKey& key, double bound) {
  const double k = double(key.dims[3] * key.dims[5] * key.dims[6]);
  return 8.0 * std::sqrt(k + 2.0) * double(std::numeric_limits<float>::epsilon()) * bound + 1e-30;
}

class Conv2dTester {
 public:
  Conv2dTester& batch(int64_t v) { n_ = v; return *this; }
  Conv2dTester& input(int64_t h, int64_t w) { h_ = h; w_ = w; return *this; }
  Conv2dTester& channels(int64_t ic, int64_t oc) { ic_ = ic; oc_ = oc; return *this; }
  Conv2dTester& kernel(int64_t kh, int64_t kw) { kh_ = kh; kw_ = kw; return *this; }
  Conv2dTester& stride(int64_t sh, int64_t sw) { sh_ = sh; sw_ = sw; return *this; }
  Conv2dTester& pad(int64_t ph, int64_t pw) { ph_ = ph; pw_ = pw; return *this; }
  Conv2dTester& layout(ConvWeightLayout v) { layout_ = v; return *this; }
  Conv2dTester& bias(bool v) { bias_ = v; return *this; }
  Conv2dTester& packed_weights(bool v) { packed_ = v; return *this; }
  Conv2dTester& seed(uint32_t v) { seed_ = v; return *this; }
  // Sets every field from a key (layout, bias, packing and seed unchanged).
  Conv2dTester& key(const OpKey& k) {
    const auto& d = k.dims;
    return batch(d[0]).input(d[1], d[2]).channels(d[3], d[4]).kernel(d[5], d[6]).stride(d[7], d[8]).pad(d[9], d[10]);
  }

  OpKey Key() const { return OpKey::Conv2d(n_, h_, w_, ic_, oc_, kh_, kw_, sh_, sw_, ph_, pw_); }
  std::string Describe() const {
    return fmt::format("{} {}{}{}", Key().ToString(), ConvWeightLayoutName(layout_), bias_ ? " bias" : "",
                       packed_ ? " packed_weights" : "");
  }

  // Runs the schedule and compares with the reference; returns false (after adding
  // a gtest failure naming the case and the first bad element) on a mismatch. When
  // `out` is given it receives y.
  bool Test(const Schedule& s, std::vector<float>* out = nullptr) const {
    const OpKey key = Key();
    const Status kv = key.Validate();
    if (!kv.ok()) {
      ADD_FAILURE() << "invalid test key " << key.ToString() << ": " << kv.ToString();
      return false;
    }
    const Conv2dSizes sz = Conv2dSizesOf(key);
    const std::vector<float> x = RandomFloats(sz.x, seed_);
    const std::vector<float> w_ohwi = RandomFloats(sz.w, seed_ + 1);
    const std::vector<float> b = RandomFloats(static_cast<size_t>(oc_), seed_ + 2);
    std::vector<float> w = layout_ == ConvWeightLayout::kOihw ? OihwFromOhwi(key, w_ohwi) : w_ohwi;
    constexpr size_t kGuard = 64;
    constexpr float kSentinel = -12345.0f;
    std::vector<float> y(sz.y + kGuard, std::numeric_limits<float>::quiet_NaN());
    std::fill(y.begin() + sz.y, y.end(), kSentinel);

    Conv2dArgs args = DenseConv2dArgs(key, x.data(), w.data(), bias_ ? b.data() : nullptr, y.data(), layout_);
    const Status valid = ValidateConv2dArgs(args);
    EXPECT_TRUE(valid.ok()) << valid.ToString();
    std::unique_ptr<void, decltype(&std::free)> packed(nullptr, &std::free);
    if (packed_) {
      const KernelVariant& v = *s.variant;
      if (!v.pack_weights || !v.packed_weights_bytes) {
        ADD_FAILURE() << v.name << " has no pack_weights";
        return false;
      }
      const size_t bytes = v.packed_weights_bytes(v, key, s.params);
      packed.reset(std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64));
      const Status ps = v.pack_weights(v, key, s.params, w_ohwi.data(), kh_ * kw_ * ic_, packed.get());
      if (!ps.ok()) {
        ADD_FAILURE() << s.ToString() << " pack_weights on " << Describe() << ": " << ps.ToString();
        return false;
      }
      std::fill(w.begin(), w.end(), std::numeric_limits<float>::quiet_NaN());
      args.packed_weights = packed.get();
      args.weights = nullptr;
    }
    const Status st = RunConv2d(s, args);
    if (!st.ok()) {
      ADD_FAILURE() << s.ToString() << " on " << Describe() << ": " << st.ToString();
      return false;
    }
    for (size_t i = sz.y; i < y.size(); ++i)
      if (y[i] != kSentinel) {
        ADD_FAILURE() << s.ToString() << " on " << Describe() << ": wrote past y at element " << i;
        return false;
      }
    std::vector<double> ref, bound;
    ReferenceConv2d(key, x.data(), w_ohwi.data(), bias_ ? b.data() : nullptr, ref, bound);
    for (size_t i = 0; i < sz.y; ++i) {
      const double tol = Conv2dTolerance(key, bound[i]);
      if (!(std::fabs(double(y[i]) - ref[i]) <= tol)) {
        const int64_t o = static_cast<int64_t>(i) % oc_, pix = static_cast<int64_t>(i) / oc_;
        ADD_FAILURE() << s.ToString() << " on " << Describe() << ": y[b=" << pix / (sz.oh * sz.ow)
                      << " oy=" << pix / sz.ow % sz.oh << " ox=" << pix % sz.ow << " o=" << o << "] = " << y[i]
                      << ", reference " << ref[i] << ", tolerance " << tol;
        return false;
      }
    }
    if (out) out->assign(y.begin(), y.begin() + sz.y);
    return true;
  }

 private:
  int64_t n_ = 1, h_ = 1, w_ = 1, ic_ = 1, oc_ = 1, kh_ = 1, kw_ = 1, sh_ = 1, sw_ = 1, ph_ = 0, pw_ = 0;
  ConvWeightLayout layout_ = ConvWeightLayout::kOhwi;
  bool bias_ = false;
  bool packed_ = false;
  uint32_t seed_ = 1;
};

}  // namespace cliffguard::testing
