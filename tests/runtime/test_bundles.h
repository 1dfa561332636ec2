// Helpers that build real bundles for the host in tests.
#pragma once

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cliffguard/bundle.h"
#include "cliffguard/device.h"
#include "cliffguard/kernel.h"

namespace cliffguard::testing {

// A bundle for `device` whose entries use each key's built-in default schedule.
inline BundleSpec HostBundle(const DeviceInfo& device, const std::vector<OpKey>& keys, double tuned_us = 10,
                             double default_us = 20) {
  BundleSpec spec;
  spec.created_at = 1764460800;
  spec.producer_version = "0.1.0";
  spec.device = device;
  for (const OpKey& k : keys) {
    auto s = DefaultSchedule(k, device);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    BundleEntry e;
    e.key = k;
    e.schedule = ToNamed(*s);
    e.tuned_us = tuned_us;
    e.default_us = default_us;
    e.trials = 7;
    e.tuned_at = 1764460800;
    e.provenance = "test";
    spec.entries.push_back(e);
  }
  return spec;
}

inline std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/cg_test_" + std::to_string(::getpid()) + "_" + name;
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& name) : path(TempPath(name)) {}
  ~TempFile() { std::remove(path.c_str()); }
};

// Operands for one gemm key with a double-precision reference.
struct Problem {
  OpKey key;
  std::vector<float> a, b, c;
  GemmArgs args;
  explicit Problem(const OpKey& k, uint32_t seed = 1) : key(k) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1, 1);
    a.resize(size_t(k.m() * k.k()));
    b.resize(size_t(k.k() * k.n()));
    c.assign(size_t(k.m() * k.n()), 0.f);
    for (auto& x : a) x = d(rng);
    for (auto& x : b) x = d(rng);
    args = DenseGemmArgs(k, a.data(), b.data(), c.data());
  }
  double MaxError() const {
    double err = 0;
    for (int64_t i = 0; i < key.m(); ++i)
      for (int64_t j = 0; j < key.n(); ++j) {
        double ref = 0;
        for (int64_t p = 0; p < key.k(); ++p) {
          const double av = key.trans_a ? a[size_t(p * key.m() + i)] : a[size_t(i * key.k() + p)];
          const double bv = key.trans_b ? b[size_t(j * key.k() + p)] : b[size_t(p * key.n() + j)];
          ref += av * bv;
        }
        err = std::max(err, std::abs(ref - double(c[size_t(i * key.n() + j)])));
      }
    return err;
  }
};

}  // namespace cliffguard::testing
