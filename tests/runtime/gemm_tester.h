// GemmTester: one fp32 GEMM case (shape, transposes, padded leading dimensions,
// alpha, beta, schedule) checked against a double-precision reference (STYLE H9).
//
//   GemmTester().m(17).n(31).k(5).trans_a(true).lda_pad(3).beta(0).nan_c(true).Test(schedule);
//
// Padding elements of A and B are NaN (a kernel that reads them poisons C), the
// padding of C holds a sentinel that must survive (a kernel that writes it fails).
// With packed_weights(true) the weights go through the variant's pack_weights first and
// the call reads them only from GemmArgs::packed_b (b is null).
// The error bound scales with k: |c - ref| <= 4 * (k + 2) * eps * (|alpha| * sum|a||b|
// + |beta * c0|).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cliffguard/kernel.h"

namespace cliffguard::testing {

class GemmTester {
 public:
  GemmTester& m(int64_t v) { m_ = v; return *this; }
  GemmTester& n(int64_t v) { n_ = v; return *this; }
  GemmTester& k(int64_t v) { k_ = v; return *this; }
  GemmTester& shape(int64_t m, int64_t n, int64_t k) { m_ = m; n_ = n; k_ = k; return *this; }
  GemmTester& trans_a(bool v) { ta_ = v; return *this; }
  GemmTester& trans_b(bool v) { tb_ = v; return *this; }
  GemmTester& lda_pad(int64_t v) { lda_pad_ = v; return *this; }
  GemmTester& ldb_pad(int64_t v) { ldb_pad_ = v; return *this; }
  GemmTester& ldc_pad(int64_t v) { ldc_pad_ = v; return *this; }
  GemmTester& alpha(float v) { alpha_ = v; return *this; }
  GemmTester& beta(float v) { beta_ = v; return *this; }
  GemmTester& nan_c(bool v) { nan_c_ = v; return *this; }  // fill C with NaN (use with beta = 0)
  GemmTester& seed(uint32_t v) { seed_ = v; return *this; }
  // Pack B ahead with the schedule's pack_weights (the variant must have it) and run
  // from GemmArgs::packed_b; B itself is then overwritten with NaN and args.b is null, so a
  // kernel that still reads it fails.
  GemmTester& packed_weights(bool v) { packed_ = v; return *this; }

  // The call's key; with packed weights, the constant-weights key a plan runs.
  OpKey Key() const {
    OpKey key = OpKey::Gemm(m_, n_, k_, ta_, tb_);
    key.constant_weights = packed_;
    return key;
  }
  std::string Describe() const {
    return fmt::format("m={} n={} k={} t{}{} pads={},{},{} alpha={} beta={}{}{}", m_, n_, k_, ta_ ? 't' : 'n',
                       tb_ ? 't' : 'n', lda_pad_, ldb_pad_, ldc_pad_, alpha_, beta_, nan_c_ ? " nan_c" : "",
                       packed_ ? " packed_weights" : "");
  }

  // Runs the schedule and compares; returns false (after adding a gtest failure
  // naming the case and the first bad element) on a mismatch.
  bool Test(const Schedule& s) const {
    const float kNaN = std::numeric_limits<float>::quiet_NaN();
    const float kSentinel = -12345.0f;
    const int64_t a_rows = ta_ ? k_ : m_, a_cols = ta_ ? m_ : k_;
    const int64_t b_rows = tb_ ? n_ : k_, b_cols = tb_ ? k_ : n_;
    const int64_t lda = a_cols + lda_pad_, ldb = b_cols + ldb_pad_, ldc = n_ + ldc_pad_;
    std::mt19937 rng(seed_);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> a(a_rows * lda, kNaN), b(b_rows * ldb, kNaN), c(m_ * ldc, kSentinel);
    for (int64_t i = 0; i < a_rows; ++i)
      for (int64_t j = 0; j < a_cols; ++j) a[i * lda + j] = dist(rng);
    for (int64_t i = 0; i < b_rows; ++i)
      for (int64_t j = 0; j < b_cols; ++j) b[i * ldb + j] = dist(rng);
    for (int64_t i = 0; i < m_; ++i)
      for (int64_t j = 0; j < n_; ++j) c[i * ldc + j] = nan_c_ ? kNaN : dist(rng);
    const std::vector<float> c0 = c;

    GemmArgs args;
    args.trans_a = ta_;
    args.trans_b = tb_;
    args.m = m_;
    args.n = n_;
    args.k = k_;
    args.alpha = alpha_;
    args.a = a.data();
    args.lda = lda;
    args.b = b.data();
    args.ldb = ldb;
    args.beta = beta_;
    args.c = c.data();
    args.ldc = ldc;
    const Status valid = ValidateGemmArgs(args);
    EXPECT_TRUE(valid.ok()) << valid.ToString();
    std::unique_ptr<void, decltype(&std::free)> packed(nullptr, &std::free);
    const std::vector<float> b_kept = packed_ ? b : std::vector<float>();
    if (packed_) {
      const KernelVariant& v = *s.variant;
      if (!v.pack_weights || !v.packed_weights_bytes) {
        ADD_FAILURE() << v.name << " has no pack_weights";
        return false;
      }
      const size_t bytes = v.packed_weights_bytes(v, Key(), s.params);
      packed.reset(std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64));
      const Status ps = v.pack_weights(v, Key(), s.params, b.data(), ldb, packed.get());
      if (!ps.ok()) {
        ADD_FAILURE() << s.ToString() << " pack_weights on " << Describe() << ": " << ps.ToString();
        return false;
      }
      std::fill(b.begin(), b.end(), kNaN);
      args.packed_b = packed.get();
      args.b = nullptr;
    }
    const Status st = RunGemm(s, args);
    if (packed_) b = b_kept;
    if (!st.ok()) {
      ADD_FAILURE() << s.ToString() << " on " << Describe() << ": " << st.ToString();
      return false;
    }

    const double eps = std::numeric_limits<float>::epsilon();
    for (int64_t i = 0; i < m_; ++i) {
      for (int64_t j = 0; j < ldc; ++j) {
        const float got = c[i * ldc + j];
        if (j >= n_) {
          if (got != kSentinel) {
            ADD_FAILURE() << s.ToString() << " on " << Describe() << ": wrote C padding at (" << i << ", " << j << ")";
            return false;
          }
          continue;
        }
        double dot = 0, absdot = 0;
        if (alpha_ != 0.0f) {
          for (int64_t p = 0; p < k_; ++p) {
            const double av = ta_ ? a[p * lda + i] : a[i * lda + p];
            const double bv = tb_ ? b[j * ldb + p] : b[p * ldb + j];
            dot += av * bv;
            absdot += std::fabs(av * bv);
          }
        }
        double ref = double(alpha_) * dot, bound = std::fabs(double(alpha_)) * absdot;
        if (beta_ != 0.0f) {
          ref += double(beta_) * c0[i * ldc + j];
          bound += std::fabs(double(beta_) * c0[i * ldc + j]);
        }
        const double tol = 4.0 * double(k_ + 2) * eps * bound + 1e-30;
        if (!(std::fabs(got - ref) <= tol)) {
          ADD_FAILURE() << s.ToString() << " on " << Describe() << ": C(" << i << ", " << j << ") = " << got
                        << ", reference " << ref << ", tolerance " << tol;
          return false;
        }
      }
    }
    return true;
  }

 private:
  int64_t m_ = 1, n_ = 1, k_ = 1;
  bool ta_ = false, tb_ = false;
  int64_t lda_pad_ = 0, ldb_pad_ = 0, ldc_pad_ = 0;
  float alpha_ = 1.0f, beta_ = 0.0f;
  bool nan_c_ = false;
  bool packed_ = false;
  uint32_t seed_ = 1;
};

}  // namespace cliffguard::testing
