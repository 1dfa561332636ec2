// Helpers that build real bundles for the host in tests.
#pragma once

#include <cstdio>
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

}  // namespace cliffguard::testing
