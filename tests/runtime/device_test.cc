// Devices and the tables that name ops, dtypes and ISA levels.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "cliffguard/bundle.h"
#include "cliffguard/device.h"
#include "cliffguard/runtime.h"
#include "test_bundles.h"

namespace cliffguard {
namespace {

TEST(DeviceTest, AFeatureBitAddedToTheProbeKeepsTheFingerprint) {
  const DeviceInfo host = HostCpuDevice(2);
  DeviceInfo more = host;
  more.isa |= 1u << 9;  // a feature a later build probes (VNNI, BF16, AMX, ...)
  FinalizeDeviceInfo(more);
  EXPECT_EQ(more.fingerprint, host.fingerprint);
  DeviceInfo other_budget = host;
  other_budget.threads = 3;
  FinalizeDeviceInfo(other_budget);
  EXPECT_NE(other_budget.fingerprint, host.fingerprint);
  DeviceInfo other_cache = host;
  other_cache.l2_bytes += 4096;
  FinalizeDeviceInfo(other_cache);
  EXPECT_NE(other_cache.fingerprint, host.fingerprint);
}

TEST(DeviceTest, BundlesOfTheEarlierFingerprintStillApply) {
  auto rt = Runtime::Create();
  ASSERT_TRUE(rt.ok());
  const DeviceInfo& host = (*rt)->device();
  ASSERT_FALSE(host.legacy_fingerprint.empty());
  ASSERT_NE(host.legacy_fingerprint, host.fingerprint);
  BundleSpec spec = testing::HostBundle(host, {OpKey::Gemm(4, 4, 4)});
  spec.device.fingerprint = host.legacy_fingerprint;
  auto report = (*rt)->LoadBundleBuffer(SerializeBundle(spec), "legacy");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->device_match) << report->device_rule;
  EXPECT_TRUE((*rt)->Resolve(OpKey::Gemm(4, 4, 4))->hit);
}

TEST(DeviceTest, DeviceSpecsNameTheDevice) {
  auto cpu = ProbeDevice("cpu", 1);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->backend, Backend::kCpu);
  EXPECT_EQ(cpu->spec, "cpu");
  EXPECT_EQ(cpu->threads, 1);
  EXPECT_EQ(ProbeDevice("", 1)->fingerprint, cpu->fingerprint);
  for (const char* bad : {"tpu", "cuda:", "cuda:x", "cuda:-1", "cpu:0"}) {
    auto d = ProbeDevice(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find(bad), std::string::npos) << d.status().message();
  }
  const DeviceList all = ListDevices(1);
  ASSERT_FALSE(all.devices.empty());
  EXPECT_EQ(all.devices[0].fingerprint, cpu->fingerprint);
  size_t gpus = 0;
  for (const auto& d : all.devices) gpus += d.backend == Backend::kCuda;
  if (gpus == 0) {
    EXPECT_FALSE(all.cuda_status.empty());
    EXPECT_EQ(ProbeDevice("cuda:0").status().code(), StatusCode::kNotFound);
    RuntimeOptions o;
    o.device = "cuda:0";
    EXPECT_EQ(Runtime::Create(o).status().code(), StatusCode::kNotFound);
  }
}

// A file system root with /proc/self/{cgroup,mountinfo} and cgroup files, for
// CgroupCpuLimit(root).
class FakeCgroupRoot {
 public:
  FakeCgroupRoot() : dir_(std::filesystem::temp_directory_path() / fmt::format("cg_cgroup_{}_{}", ::getpid(), n_++)) {}
  ~FakeCgroupRoot() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void Write(const std::string& path, const std::string& text) const {
    const std::filesystem::path p = dir_ / path.substr(1);
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string root() const { return dir_.string(); }

 private:
  static inline int n_ = 0;
  std::filesystem::path dir_;
};

constexpr const char* kV2Mount = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";

TEST(CgroupCpuLimitTest, TheLowestLimitFromTheProcessCgroupUpToTheRootCounts) {
  FakeCgroupRoot f;
  f.Write("/proc/self/cgroup", "0::/kubepods/pod1/c1\n");
  f.Write("/proc/self/mountinfo", std::string("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n") + kV2Mount);
  f.Write("/sys/fs/cgroup/cpu.max", "max 100000\n");
  f.Write("/sys/fs/cgroup/kubepods/cpu.max", "max 100000\n");
  f.Write("/sys/fs/cgroup/kubepods/pod1/cpu.max", "250000 100000\n");
  f.Write("/sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "max 100000\n");
  EXPECT_DOUBLE_EQ(CgroupCpuLimit(f.root()), 2.5);
  f.Write("/sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "150000 100000\n");
  EXPECT_DOUBLE_EQ(CgroupCpuLimit(f.root()), 1.5);
  f.Write("/sys/fs/cgroup/kubepods/cpu.max", "50000 100000\n");
  EXPECT_DOUBLE_EQ(CgroupCpuLimit(f.root()), 0.5);
}

TEST(CgroupCpuLimitTest, AContainerSeesItsOwnCgroupAsTheMountsRoot) {
  FakeCgroupRoot f;  // cgroup v1 without a cgroup namespace: the path is the host's
  f.Write("/proc/self/cgroup", "5:cpuset:/docker/abc\n4:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n");
  f.Write("/proc/self/mountinfo",
          "40 31 0:34 /docker/abc /sys/fs/cgroup/cpuset ro - cgroup cgroup ro,cpuset\n"
          "41 31 0:35 /docker/abc /sys/fs/cgroup/cpu\\054cpuacct ro - cgroup cgroup ro,cpu,cpuacct\n");
  f.Write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "200000\n");
  f.Write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  EXPECT_DOUBLE_EQ(CgroupCpuLimit(f.root()), 2.0);
  f.Write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  EXPECT_EQ(CgroupCpuLimit(f.root()), 0);
}

TEST(CgroupCpuLimitTest, NoLimitOrFilesThatDoNotParseMeanNone) {
  FakeCgroupRoot f;
  EXPECT_EQ(CgroupCpuLimit(f.root()), 0);  // no /proc, no cgroup file system
  f.Write("/proc/self/cgroup", "0::/\n");
  f.Write("/proc/self/mountinfo", kV2Mount);
  EXPECT_EQ(CgroupCpuLimit(f.root()), 0);  // no cpu.max: the cpu controller is not enabled
  for (const char* bad : {"max 100000", "abc 100000", "100000", "100000 0", "-5 100000", "1e5 100000", ""}) {
    f.Write("/sys/fs/cgroup/cpu.max", bad);
    EXPECT_EQ(CgroupCpuLimit(f.root()), 0) << bad;
  }
  f.Write("/proc/self/cgroup", "garbage\n::\n1:cpuacct:/\n");  // no v2 line, no v1 cpu controller
  f.Write("/sys/fs/cgroup/cpu.max", "100000 100000");
  EXPECT_EQ(CgroupCpuLimit(f.root()), 0);
}

TEST(CgroupCpuLimitTest, AvailableCpusIsTheAffinityMaskAtMost) {
  const int cpus = AvailableCpus();
  EXPECT_GE(cpus, 1);
  EXPECT_LE(cpus, AffinityCpus());
  if (const double limit = CgroupCpuLimit(); limit > 0 && limit < AffinityCpus())
    EXPECT_EQ(cpus, std::max(1, static_cast<int>(std::ceil(limit - 1e-9))));
  else
    EXPECT_EQ(cpus, AffinityCpus());
}

TEST(TablesTest, OpKindsAndDTypesRoundTripTheirNames) {
  for (uint8_t i = 0; i < kNumOpKinds; ++i) {
    const auto op = static_cast<OpKind>(i);
    EXPECT_EQ(*ParseOpKind(OpKindName(op)), op);
    EXPECT_LE(InfoOf(op).dims, OpKey::kMaxDims);
  }
  for (uint8_t i = 0; i < kNumDTypes; ++i) {
    const auto dt = static_cast<DType>(i);
    EXPECT_EQ(*ParseDType(DTypeName(dt)), dt);
    EXPECT_GT(DTypeSize(dt), 0u);
  }
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kI8), 1u);
  EXPECT_EQ(InfoOf(DType::kBF16).accumulator, DType::kF32);
  EXPECT_EQ(InfoOf(DType::kI8).accumulator, DType::kS32);
  EXPECT_STREQ(OpKindName(static_cast<OpKind>(kNumOpKinds)), "?");
  EXPECT_EQ(DTypeSize(static_cast<DType>(kNumDTypes)), 0u);
  EXPECT_STREQ(IsaLevelName(kIsaAvx512 | kIsaAvx2 | kIsaScalar), "avx512");
  EXPECT_STREQ(IsaLevelName(kIsaScalar), "scalar");
  // A key of every op prints and parses back.
  for (const OpKey& k : {OpKey::Gemm(3, 5, 7, true, false, DType::kBF16),
                         OpKey::Conv2d(1, 8, 8, 3, 16, 3, 3, 1, 1, 1, 1, DType::kI8)}) {
    auto back = OpKey::Parse(k.ToString());
    ASSERT_TRUE(back.ok()) << k.ToString() << ": " << back.status().ToString();
    EXPECT_EQ(*back, k);
  }
  OpKey conv_t = OpKey::Conv2d(1, 8, 8, 3, 16, 3, 3, 1, 1, 1, 1);
  conv_t.trans_a = true;
  EXPECT_FALSE(conv_t.Validate().ok());
}

}  // namespace
}  // namespace cliffguard
