// Helpers shared by the kernel tests (gemm_kernels_test.cc, gemm_library_test.cc,
// conv2d_kernels_test.cc, conv2d_library_test.cc): the host, skipping variants it
// or this build cannot run (STYLE H5), schedules, and checks in a child of fork().
#pragma once

#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "cliffguard/kernel.h"

namespace cliffguard::testing {

// The host CPU as the runtime probes it (once).
inline const DeviceInfo& Host() {
  static const DeviceInfo device = HostCpuDevice();
  return device;
}

// Threads for cases that run a variant on several threads: 2 within the host's
// budget.
inline int TwoThreads() { return std::min(Host().threads, 2); }

// The variant when the host can run it (its ISA), else nullptr.
inline const KernelVariant* Runnable(const char* name) {
  const KernelVariant* v = FindKernelVariant(name);
  if (!v || (v->isa & Host().isa) != v->isa) return nullptr;
  return v;
}

// In a test: `var` = Runnable(name), or skips the test naming the missing ISA.
#define CG_REQUIRE_VARIANT(var, name)                                                            \
  const KernelVariant* var = ::cliffguard::testing::Runnable(name);                              \
  if (var == nullptr) GTEST_SKIP() << name << " needs ISA the host (" << ::cliffguard::testing::Host().arch << ") lacks"

// The library variant `name` (gemm_library.h, conv2d_library.h) for `op` when this
// build has it and the host runs it; else nullptr, and `why` says which is missing.
inline const KernelVariant* RunnableLibraryVariant(const char* name, OpKind op, std::string& why) {
  const KernelVariant* v = FindKernelVariant(name);
  if (v == nullptr) {
    why = std::string("this build has no ") + name +
          " (CLIFFGUARD_LIBRARY_VARIANTS=OFF, or its library was not found at configure time)";
    return nullptr;
  }
  if (!VariantRunsOn(*v, op, DType::kF32, Host()).ok()) {
    why = std::string(name) + ": host lacks AVX2";
    return nullptr;
  }
  return v;
}

// In a test: `var` = RunnableLibraryVariant(name, op), or skips the test saying why.
#define CG_REQUIRE_LIBRARY_VARIANT(var, name, op)                                                   \
  std::string var##_missing;                                                                        \
  const KernelVariant* var = ::cliffguard::testing::RunnableLibraryVariant(name, op, var##_missing); \
  if (var == nullptr) GTEST_SKIP() << var##_missing

// `v` with the named parameters and the others at their declared defaults
// (Schedule::FromNamed); a failure of the test, and an empty schedule, when refused.
inline Schedule With(const KernelVariant& v, const std::vector<std::pair<std::string, int64_t>>& named) {
  auto s = Schedule::FromNamed(v.name, named);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : Schedule{};
}

// Expects every parameter of `v` to be found by name at its index, with values
// sorted and distinct, the default among them and a help line.
inline void ExpectParamSpecsValid(const KernelVariant& v) {
  for (size_t i = 0; i < v.params.size(); ++i) {
    const ParamSpec& p = v.params[i];
    EXPECT_EQ(v.ParamIndex(p.name), static_cast<int>(i));
    EXPECT_TRUE(std::is_sorted(p.values.begin(), p.values.end()) &&
                std::adjacent_find(p.values.begin(), p.values.end()) == p.values.end())
        << v.name << " " << p.name;
    EXPECT_TRUE(std::binary_search(p.values.begin(), p.values.end(), p.default_value)) << v.name << " " << p.name;
    EXPECT_GT(std::string(p.help).size(), 10u);
  }
}

// A schedule drawn uniformly from the whole declared space of `v` that
// CheckSchedule accepts for `key` on the host.
inline Schedule RandomSchedule(const KernelVariant& v, const OpKey& key, std::mt19937& rng) {
  for (;;) {
    Schedule s;
    s.variant = &v;
    for (size_t i = 0; i < v.params.size(); ++i) {
      const auto& vals = v.params[i].values;
      s.params[i] = vals[std::uniform_int_distribution<size_t>(0, vals.size() - 1)(rng)];
    }
    if (CheckSchedule(s, key, Host()).ok()) return s;
  }
}

// OMP_WAIT_POLICY=passive or GOMP_SPINCOUNT=0 in this process's environment: the
// oneDNN variants then accept threads > 1.
inline bool OmpWaitsPassively() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  return (policy && ::strcasecmp(policy, "passive") == 0) || (spin && std::string(spin) == "0");
}

// Whether `st` is how the oneDNN variants refuse threads > 1 in a child of fork() on
// a thread that ran an OpenMP team before it: kFailedPrecondition naming fork.
inline bool RefusedAfterFork(const Status& st) {
  return st.code() == StatusCode::kFailedPrecondition && st.message().find("fork") != std::string::npos;
}

// For a child of fork() on such a thread: a GEMM (96 x 80 x 64, all ones) on the
// schedule `two` (threads > 1) is refused, one on `one` (threads = 1) runs right.
inline bool GemmRefusedAfterForkOneRuns(const Schedule& two, const Schedule& one) {
  std::vector<float> a(96 * 64, 1.0f), b(64 * 80, 1.0f), c(96 * 80);
  const GemmArgs args = DenseGemmArgs(OpKey::Gemm(96, 80, 64), a.data(), b.data(), c.data());
  return RefusedAfterFork(RunGemm(two, args)) && RunGemm(one, args).ok() && c[0] == 64.0f;
}

// The same for a conv2d (16 x 16 x 8, 3x3 SAME, 8 output channels, all ones): an
// interior output is 3 * 3 * 8 = 72.
inline bool Conv2dRefusedAfterForkOneRuns(const Schedule& two, const Schedule& one) {
  const OpKey key = OpKey::Conv2d(1, 16, 16, 8, 8, 3, 3, 1, 1, 1, 1);
  std::vector<float> x(16 * 16 * 8, 1.0f), w(8 * 9 * 8, 1.0f), y(16 * 16 * 8);
  const Conv2dArgs args = DenseConv2dArgs(key, x.data(), w.data(), nullptr, y.data());
  return RefusedAfterFork(RunConv2d(two, args)) && RunConv2d(one, args).ok() && y[(8 * 16 + 8) * 8] == 72.0f;
}

// Runs `child` in a child of fork() from the calling thread, which exits 0 when it
// returns true, and expects that exit. An alarm of 30 s turns a hang into SIGALRM;
// `hang` says what a hang means (the failure message adds it).
inline void ExpectChildOfForkSucceeds(const std::function<bool()>& child, const char* hang) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(30);
    ::_exit(child() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << "child ended by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                 << " (SIGALRM: " << hang << ")";
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
}

}  // namespace cliffguard::testing
