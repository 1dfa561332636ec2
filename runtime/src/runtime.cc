// Runtime creation and destruction: the device, options from the environment, the
// miss report written at exit, and a fork child's own accounting.
#include "cliffguard/runtime.h"

#include <unistd.h>

#include <cstdlib>

#include <fmt/format.h>

#include "cliffguard/detail/logging.h"
#include "runtime_impl.h"

namespace cliffguard {

Runtime::Impl::Impl(RuntimeOptions o, DeviceInfo d)
    : options(std::move(o)), policy(options.fallback.value_or(FallbackPolicy::kNearest)), device(std::move(d)), slots([this] { ResetAfterFork(); }), pid(::getpid()) {}

// In a child of fork() (after ThreadSlots reset the hit counts): misses start at
// zero and the report goes to a path of the child's own, so parent and child never
// overwrite one report.
void Runtime::Impl::ResetAfterFork() {
  pid = ::getpid();
  if (!report_path.empty()) {
    const std::string& base = options.miss_report_path;
    const size_t dot = base.rfind('.'), slash = base.rfind('/');
    const bool ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
    report_path = ext ? fmt::format("{}.{}{}", base.substr(0, dot), pid, base.substr(dot)) : fmt::format("{}.{}", base, pid);
  }
  misses.ResetCounts();
}

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusOr<std::unique_ptr<Runtime>> Runtime::Create(const RuntimeOptions& options) {
  CG_ASSIGN_OR_RETURN(const int threads, ResolveThreadBudget(options.threads, "RuntimeOptions.threads"));
  CG_ASSIGN_OR_RETURN(DeviceInfo device, ProbeDevice(options.device, threads));
  RuntimeOptions o = options;
  if (o.miss_report_path.empty())
    if (const char* env = std::getenv("CLIFFGUARD_MISS_REPORT")) o.miss_report_path = env;
  if (!o.fallback)
    if (const char* env = std::getenv("CLIFFGUARD_FALLBACK")) {
      auto p = ParseFallbackPolicy(env);
      if (!p.ok()) return InvalidArgument(fmt::format("CLIFFGUARD_FALLBACK: {}", p.status().message()));
      o.fallback = *p;
    }
  if (device.backend == Backend::kCpu)
    if (const int cpus = AvailableCpus(); threads > cpus)
      logging::Warn("thread budget {} ({}) exceeds the {} CPUs this process may use: multi-threaded schedules will "
                    "oversubscribe them; bundles apply only when tuned for the same budget",
                    threads, options.threads ? "RuntimeOptions.threads" : "CLIFFGUARD_THREADS", cpus);
  auto impl = std::make_unique<Impl>(std::move(o), std::move(device));
  impl->report_path = impl->options.miss_report_path;
  {
    std::lock_guard<std::mutex> lock(impl->load_mu);
    impl->RebuildLocked();  // the empty table: every call is a device miss
  }
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

Runtime::~Runtime() {
  if (!impl_->report_path.empty()) {
    Status st = WriteMissReport(impl_->report_path);
    if (!st.ok()) logging::Error("cannot write the miss report at exit: {}", st.ToString());
    else logging::Info("miss report written to '{}'", impl_->report_path);
  }
}

const DeviceInfo& Runtime::device() const { return impl_->device; }

const char* FallbackPolicyName(FallbackPolicy p) {
  switch (p) {
    case FallbackPolicy::kExact: return "exact";
    case FallbackPolicy::kBucket: return "bucket";
    case FallbackPolicy::kNearest: return "nearest";
  }
  return "?";
}

StatusOr<FallbackPolicy> ParseFallbackPolicy(std::string_view s) {
  for (FallbackPolicy p : {FallbackPolicy::kExact, FallbackPolicy::kBucket, FallbackPolicy::kNearest})
    if (s == FallbackPolicyName(p)) return p;
  return InvalidArgument(fmt::format("fallback policy '{}' is not one of: exact, bucket, nearest", s));
}

}  // namespace cliffguard
