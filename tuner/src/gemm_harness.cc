// GEMM's measurement harness: inputs, a double-precision reference of sampled (or
// all) output elements, rotated operand copies, and the relative-error check.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "harness.h"

namespace cliffguard::tuner {
namespace {

class GemmHarness final : public OpHarness {
 public:
  GemmHarness(const OpKey& key, const MeasureOptions& opt) : key_(key), opt_(opt) {
    std::mt19937_64 rng(opt.data_seed ^ key.Hash());  // the reference's sample
    a_.resize(size_t(key.m() * key.k()));
    b_.resize(size_t(key.k() * key.n()));
    FillUniform(OperandStream(opt.data_seed, key, 0), a_);
    FillUniform(OperandStream(opt.data_seed, key, 1), b_);
    GemmReference r = MakeGemmReference(key, a_.data(), b_.data(), opt, rng);
    checked_ = std::move(r.checked);
    ref_ = std::move(r.ref);
    scale_ = std::move(r.scale);
  }

  const OpKey& key() const override { return key_; }

  void Arm(const DeviceInfo& device) override {
    const int64_t set_bytes = 4 * int64_t(a_.size() + b_.size() + size_t(key_.m() * key_.n()));
    const int64_t copies = RotatedCopies(set_bytes, opt_, device);
    cover_bytes_ = CoverBytes(opt_, device);
    sets_.resize(size_t(copies));
    for (auto& s : sets_) {
      s.a.assign(a_.begin(), a_.end());
      s.b.assign(b_.begin(), b_.end());
      s.c.assign(size_t(key_.m() * key_.n()), 0.0f);
    }
  }

  std::string Check(const Schedule& s) override {
    Set& set = sets_[0];
    std::fill(set.c.begin(), set.c.end(), std::numeric_limits<float>::quiet_NaN());
    GemmArgs args = DenseGemmArgs(key_, set.a.data(), set.b.data(), set.c.data());
    if (key_.constant_weights) {
      auto w = packed_.Call(s, key_, b_.data(), Ldb());
      if (!w.ok()) return fmt::format("kernel failed: {}", w.status().ToString());
      args.b = w->stored;
      args.packed_b = w->packed;
    }
    Status st = RunGemm(s, args);
    if (!st.ok()) return fmt::format("kernel failed: {}", st.ToString());
    const WorstError w = FindWorstError(set.c.data(), checked_, ref_, scale_);
    if (w.error > opt_.tolerance)
      return fmt::format("wrong result: max rel error {} > tol {:.1e} at ({},{}) of {} checked", ErrorText(w),
                         opt_.tolerance, w.where / key_.n(), w.where % key_.n(), checked_.size());
    return "";
  }

  // Constant weights: read from memory by every timed call (PackedWeightsCache::Cool).
  StatusOr<double> TimeOne(const Schedule& s) override {
    if (key_.constant_weights)
      CG_RETURN_IF_ERROR(packed_.Cool(s, key_, b_.data(), Ldb(),
                                      b_.size() * sizeof(float)));
    return OpHarness::TimeOne(s);
  }

  Status Rotate(std::span<const Schedule> batch) override {
    if (!key_.constant_weights) return Status::Ok();
    return packed_.Rotate(batch, key_, b_.data(), Ldb(), b_.size() * sizeof(float), cover_bytes_);
  }

  Status Run(const Schedule& s) override {
    Set& set = sets_[next_++ % sets_.size()];
    GemmArgs args = DenseGemmArgs(key_, set.a.data(), set.b.data(), set.c.data());
    if (key_.constant_weights) {  // as a plan runs: B packed (or copied) before the first call, cold
      CG_ASSIGN_OR_RETURN(const PackedWeightsCache::Weights w, packed_.Call(s, key_, b_.data(), Ldb()));
      args.b = w.stored;
      args.packed_b = w.packed;
    }
    return RunGemm(s, args);
  }

 private:
  struct Set {  // line-aligned, as a serving stack passes them (LineAligned)
    LineAlignedFloats a, b, c;
  };
  int64_t Ldb() const { return DenseGemmArgs(key_, nullptr, nullptr, nullptr).ldb; }

  PackedWeightsCache packed_;  // constant-weights keys: B packed once per schedule, as a plan packs it
  OpKey key_;
  MeasureOptions opt_;
  std::vector<float> a_, b_;       // op inputs as stored (transposes applied to storage)
  std::vector<int64_t> checked_;   // output indices i*n+j checked against the reference
  std::vector<double> ref_, scale_;  // reference value and sum |a b| per checked index
  std::vector<Set> sets_;
  size_t next_ = 1;
  int64_t cover_bytes_ = 0;  // what rotated copies cover (CoverBytes)
};

}  // namespace

GemmReference MakeGemmReference(const OpKey& key, const float* a, const float* b, const MeasureOptions& opt,
                                std::mt19937_64& rng) {
  GemmReference r;
  const int64_t m = key.m(), n = key.n(), k = key.k(), total = m * n;
  if (total <= opt.full_check_elements) {
    r.checked.resize(size_t(total));
    for (int64_t i = 0; i < total; ++i) r.checked[size_t(i)] = i;
  } else {
    r.checked = {0, n - 1, (m - 1) * n, total - 1};
    std::uniform_int_distribution<int64_t> pick(0, total - 1);
    for (int64_t t = 0; t < opt.max_checked; ++t) r.checked.push_back(pick(rng));
    std::sort(r.checked.begin(), r.checked.end());
    r.checked.erase(std::unique(r.checked.begin(), r.checked.end()), r.checked.end());
  }
  const GemmArgs g = DenseGemmArgs(key, a, b, nullptr);
  r.ref.resize(r.checked.size());
  r.scale.resize(r.checked.size());
  for (size_t t = 0; t < r.checked.size(); ++t) {
    const int64_t i = r.checked[t] / n, j = r.checked[t] % n;
    double sum = 0, mag = 0;
    for (int64_t p = 0; p < k; ++p) {
      const double av = g.trans_a ? a[p * g.lda + i] : a[i * g.lda + p];
      const double bv = g.trans_b ? b[j * g.ldb + p] : b[p * g.ldb + j];
      sum += av * bv;
      mag += std::abs(av * bv);
    }
    r.ref[t] = sum;
    r.scale[t] = mag;
  }
  return r;
}

StatusOr<std::unique_ptr<OpHarness>> MakeGemmHarness(const OpKey& key, const MeasureOptions& options) {
  if (key.dtype != DType::kF32)
    return Unimplemented(fmt::format("measurer: {} has no harness (gemm runs f32 here)", key.ToString()));
  return std::unique_ptr<OpHarness>(new GemmHarness(key, options));
}

}  // namespace cliffguard::tuner
