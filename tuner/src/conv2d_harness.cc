// conv2d's measurement harness: NHWC input, OHWI filter and bias from the key's
// seed, a double-precision reference of sampled (or all) output elements, rotated
// operand copies, and the relative-error check.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "harness.h"

namespace cliffguard::tuner {
namespace {

class Conv2dHarness final : public OpHarness {
 public:
  Conv2dHarness(const OpKey& key, const MeasureOptions& opt) : key_(key), opt_(opt), out_(Conv2dOutputDims(key)) {
    std::mt19937_64 rng(opt.data_seed ^ key.Hash());  // the reference's sample
    const int64_t n = key.dims[0], h = key.dims[1], w = key.dims[2], ic = key.dims[3], oc = key.dims[4];
    const int64_t kh = key.dims[5], kw = key.dims[6];
    x_.resize(size_t(n * h * w * ic));
    w_.resize(size_t(oc * kh * kw * ic));
    bias_.resize(size_t(oc));
    FillUniform(OperandStream(opt.data_seed, key, 0), x_);
    FillUniform(OperandStream(opt.data_seed, key, 1), w_);
    FillUniform(OperandStream(opt.data_seed, key, 2), bias_);
    const int64_t total = OutputElems();
    if (total <= opt.full_check_elements) {
      checked_.resize(size_t(total));
      for (int64_t i = 0; i < total; ++i) checked_[size_t(i)] = i;
    } else {
      // Corners of the output (padding borders) and random elements.
      checked_ = {0, oc - 1, out_.ow * oc - 1, total - out_.ow * oc, total - 1};
      std::uniform_int_distribution<int64_t> pick(0, total - 1);
      for (int64_t t = 0; t < opt.max_checked; ++t) checked_.push_back(pick(rng));
      std::sort(checked_.begin(), checked_.end());
      checked_.erase(std::unique(checked_.begin(), checked_.end()), checked_.end());
    }
    ref_.resize(checked_.size());
    scale_.resize(checked_.size());
    const int64_t sh = key.dims[7], sw = key.dims[8], ph = key.dims[9], pw = key.dims[10];
    for (size_t t = 0; t < checked_.size(); ++t) {
      int64_t i = checked_[t];
      const int64_t o = i % oc;
      i /= oc;
      const int64_t ox = i % out_.ow;
      i /= out_.ow;
      const int64_t oy = i % out_.oh, b = i / out_.oh;
      double sum = bias_[size_t(o)], mag = std::abs(double(bias_[size_t(o)]));
      for (int64_t ry = 0; ry < kh; ++ry) {
        const int64_t iy = oy * sh - ph + ry;
        if (iy < 0 || iy >= h) continue;
        for (int64_t rx = 0; rx < kw; ++rx) {
          const int64_t ix = ox * sw - pw + rx;
          if (ix < 0 || ix >= w) continue;
          const float* xp = &x_[size_t(((b * h + iy) * w + ix) * ic)];
          const float* wp = &w_[size_t(((o * kh + ry) * kw + rx) * ic)];
          for (int64_t c = 0; c < ic; ++c) {
            const double p = double(xp[c]) * double(wp[c]);
            sum += p;
            mag += std::abs(p);
          }
        }
      }
      ref_[t] = sum;
      scale_[t] = mag;
    }
  }

  const OpKey& key() const override { return key_; }

  void Arm(const DeviceInfo& device) override {
    const int64_t set_bytes = 4 * int64_t(x_.size() + w_.size() + size_t(OutputElems()));
    sets_.resize(size_t(RotatedCopies(set_bytes, opt_, device)));
    cover_bytes_ = CoverBytes(opt_, device);
    for (auto& s : sets_) {
      s.x.assign(x_.begin(), x_.end());
      s.w.assign(w_.begin(), w_.end());
      s.y.assign(size_t(OutputElems()), 0.0f);
    }
  }

  std::string Check(const Schedule& s) override {
    Set& set = sets_[0];
    std::fill(set.y.begin(), set.y.end(), std::numeric_limits<float>::quiet_NaN());
    auto args = Args(s, set);
    if (!args.ok()) return fmt::format("kernel failed: {}", args.status().ToString());
    Status st = RunConv2d(s, *args);
    if (!st.ok()) return fmt::format("kernel failed: {}", st.ToString());
    const WorstError w = FindWorstError(set.y.data(), checked_, ref_, scale_);
    if (w.error > opt_.tolerance) {
      const int64_t oc = key_.dims[4], pixel = w.where / oc;
      return fmt::format("wrong result: max rel error {} > tol {:.1e} at output (n={}, y={}, x={}, oc={}) of {} checked",
                         ErrorText(w), opt_.tolerance, pixel / (out_.oh * out_.ow), pixel / out_.ow % out_.oh,
                         pixel % out_.ow, w.where % oc, checked_.size());
    }
    return "";
  }

  // Constant weights: read from memory by every timed call (PackedWeightsCache::Cool).
  StatusOr<double> TimeOne(const Schedule& s) override {
    if (key_.constant_weights)
      CG_RETURN_IF_ERROR(packed_.Cool(s, key_, w_.data(), FilterLd(), w_.size() * sizeof(float)));
    return OpHarness::TimeOne(s);
  }

  Status Rotate(std::span<const Schedule> batch) override {
    if (!key_.constant_weights) return Status::Ok();
    return packed_.Rotate(batch, key_, w_.data(), FilterLd(), w_.size() * sizeof(float), cover_bytes_);
  }

  Status Run(const Schedule& s) override {
    Set& set = sets_[next_++ % sets_.size()];
    CG_ASSIGN_OR_RETURN(Conv2dArgs args, Args(s, set));
    return RunConv2d(s, args);
  }

 private:
  struct Set {  // line-aligned, as a serving stack passes them (LineAligned)
    LineAlignedFloats x, w, y;
  };

  int64_t FilterLd() const { return key_.dims[5] * key_.dims[6] * key_.dims[3]; }  // an OHWI filter row
  int64_t OutputElems() const { return key_.dims[0] * out_.oh * out_.ow * key_.dims[4]; }

  // A constant-weights key runs as a plan does: its filter packed before the first
  // call, cold at every timed call (PackedWeightsCache::Cool, Rotate); otherwise
  // the set's own OHWI filter per call.
  StatusOr<Conv2dArgs> Args(const Schedule& s, Set& set) {
    Conv2dArgs args = DenseConv2dArgs(key_, set.x.data(), set.w.data(), bias_.data(), set.y.data());
    if (key_.constant_weights) {
      CG_ASSIGN_OR_RETURN(const PackedWeightsCache::Weights w, packed_.Call(s, key_, w_.data(), FilterLd()));
      args.weights = w.stored;
      args.packed_weights = w.packed;
    }
    return args;
  }

  OpKey key_;
  MeasureOptions opt_;
  Conv2dOutput out_;
  std::vector<float> x_, w_, bias_;   // NHWC input, OHWI filter, bias
  std::vector<int64_t> checked_;      // output indices ((b*oh + y)*ow + x)*oc + o checked against the reference
  std::vector<double> ref_, scale_;   // reference value and sum of |products| per checked index
  std::vector<Set> sets_;
  size_t next_ = 1;
  int64_t cover_bytes_ = 0;  // what rotated copies cover (CoverBytes)
  PackedWeightsCache packed_;
};

}  // namespace

StatusOr<std::unique_ptr<OpHarness>> MakeConv2dHarness(const OpKey& key, const MeasureOptions& options) {
  if (key.dtype != DType::kF32)
    return Unimplemented(fmt::format("measurer: {} has no harness (conv2d runs f32 here)", key.ToString()));
  return std::unique_ptr<OpHarness>(new Conv2dHarness(key, options));
}

}  // namespace cliffguard::tuner
