// Runtime creation and destruction: the device, options from the environment, the
// miss report written periodically and at exit, and a fork child's own accounting.
#include "cliffguard/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <new>
#include <sstream>

#include <fmt/format.h>

#include "cliffguard/detail/logging.h"
#include "cliffguard/file_io.h"
#include "runtime_impl.h"

namespace cliffguard {
namespace {

// When this process started, unix seconds (/proc: boot time plus the start in clock
// ticks since boot); 0 when /proc cannot tell.
double ProcessStartUnixSeconds() {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const size_t paren = line.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return 0;
  std::istringstream fields(line.substr(paren + 2));
  std::string f;
  for (int i = 3; i <= 22 && fields >> f; ++i)
    if (i == 22) {
      std::ifstream boot("/proc/stat");
      for (std::string w; boot >> w;)
        if (w == "btime") {
          double btime = 0;
          boot >> btime;
          const long hz = ::sysconf(_SC_CLK_TCK);
          return hz > 0 ? btime + std::strtod(f.c_str(), nullptr) / double(hz) : 0;
        }
    }
  return 0;
}

// An operator switch: unset leaves `value`; "0" or "1" sets it; anything else is refused.
Status ApplySwitch(const char* name, bool& value) {
  const char* env = std::getenv(name);
  if (!env) return Status::Ok();
  const std::string_view v(env);
  if (v != "0" && v != "1") return InvalidArgument(fmt::format("{}='{}' must be 0 or 1", name, v));
  value = v == "1";
  return Status::Ok();
}

// A duration from the environment, where `value` is unset (0): a number of seconds
// > 0, else refused naming it; `origin` then names the variable.
Status ApplySeconds(const char* name, double& value, const char*& origin) {
  const char* env = value == 0 ? std::getenv(name) : nullptr;
  if (!env) return Status::Ok();
  origin = name;
  const std::string_view v(env);
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty() || !(value > 0))
    return InvalidArgument(fmt::format("{}='{}' must be a number of seconds > 0", name, v));
  return Status::Ok();
}

// Runtimes with a periodic writer, so that fork's prepare handler can hold each
// one's write_mu (no child inherits a writer's half-taken locks).
std::mutex g_writers_mu;
std::vector<Runtime::Impl*>& Writers() {
  static auto* w = new std::vector<Runtime::Impl*>;
  return *w;
}
void WritersPrepareFork() {
  g_writers_mu.lock();
  for (Runtime::Impl* r : Writers()) r->write_mu.lock();
}
void WritersAfterFork() {
  for (Runtime::Impl* r : Writers()) r->write_mu.unlock();
  g_writers_mu.unlock();
}

}  // namespace

Runtime::Impl::Impl(RuntimeOptions o, DeviceInfo d)
    : options(std::move(o)), policy(options.fallback.value_or(FallbackPolicy::kNearest)), device(std::move(d)), slots([this] { ResetAfterFork(); }), pid(::getpid()), process_start(ProcessStartUnixSeconds()) {}

void Runtime::Impl::StartWriter() {
  {
    std::lock_guard<std::mutex> lock(writer_mu);
    writer_stop = false;
  }
  writer_running = ::pthread_create(
                       &writer, nullptr,
                       [](void* self) -> void* {
                         static_cast<Impl*>(self)->WriterLoop();
                         return nullptr;
                       },
                       this) == 0;
  if (!writer_running) logging::Error("cannot start the miss report writer: the report is written at exit only");
}

void Runtime::Impl::StopWriter() {
  if (!writer_running) return;
  {
    std::lock_guard<std::mutex> lock(writer_mu);
    writer_stop = true;
  }
  writer_cv.notify_all();
  ::pthread_join(writer, nullptr);
  writer_running = false;
}

void Runtime::Impl::WriterLoop() {
  // The files this thread keeps current, each with its own interval. An error is
  // logged when it starts and when it ends, not at every interval.
  struct Task {
    const char* what;
    std::string path;
    double interval_s;
    bool metrics;
    std::chrono::steady_clock::time_point due;
    bool failed = false;
  };
  std::vector<Task> tasks;
  const auto now = std::chrono::steady_clock::now();
  auto after = [](std::chrono::steady_clock::time_point t, double s) {
    return t + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
  };
  if (options.miss_report_interval_s > 0)
    tasks.push_back({"miss report", report_path, options.miss_report_interval_s, false,
                     after(now, options.miss_report_interval_s)});
  if (!options.metrics_path.empty())
    tasks.push_back({"metrics file", options.metrics_path, options.metrics_interval_s, true, now});
  std::unique_lock<std::mutex> lock(writer_mu);
  for (;;) {
    auto next = tasks.front().due;
    for (const Task& t : tasks) next = std::min(next, t.due);
    if (writer_cv.wait_until(lock, next, [this] { return writer_stop; })) break;
    lock.unlock();
    for (Task& t : tasks) {
      if (std::chrono::steady_clock::now() < t.due) continue;
      Status st;
      {
        std::lock_guard<std::mutex> w(write_mu);
        if (t.metrics) {
          const std::string text = self->MetricsText();
          st = WriteFileAtomic(t.path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
        } else {
          st = self->WriteMissReport(t.path);
        }
      }
      if (!st.ok() && !t.failed)
        logging::Error("cannot rewrite the {} (retrying every {} s): {}", t.what, t.interval_s, st.ToString());
      if (st.ok() && t.failed) logging::Info("{} rewritten to '{}' again", t.what, t.path);
      t.failed = !st.ok();
      t.due = after(std::chrono::steady_clock::now(), t.interval_s);
    }
    lock.lock();
  }
}

// In a child of fork() (after ThreadSlots reset the hit counts): misses start at
// zero and the report goes to a path of the child's own, so parent and child never
// overwrite one report.
void Runtime::Impl::ResetAfterFork() {
  pid = ::getpid();
  process_start = ProcessStartUnixSeconds();
  if (!report_path.empty()) {
    const std::string& base = options.miss_report_path;
    const size_t dot = base.rfind('.'), slash = base.rfind('/');
    const bool ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
    report_path = ext ? fmt::format("{}.{}{}", base.substr(0, dot), pid, base.substr(dot)) : fmt::format("{}.{}", base, pid);
  }
  misses.ResetCounts();
  if (writer_running) {  // the parent's writer does not exist here: start the child's own
    // Its mutex and condition variable may hold the parent writer's state (a lock
    // taken, a waiter): fresh ones, never used by a thread of this process.
    new (&writer_mu) std::mutex();
    new (&writer_cv) std::condition_variable();
    writer_running = false;
    StartWriter();
  }
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
  CG_RETURN_IF_ERROR(ApplySwitch("CLIFFGUARD_DISABLE", o.disable));
  CG_RETURN_IF_ERROR(ApplySwitch("CLIFFGUARD_WARN_ON_MISS", o.warn_on_miss));
  CG_RETURN_IF_ERROR(ApplySwitch("CLIFFGUARD_SAME_ARCH", o.allow_same_arch_bundles));
  const char* interval_origin = "RuntimeOptions.miss_report_interval_s";
  CG_RETURN_IF_ERROR(ApplySeconds("CLIFFGUARD_MISS_REPORT_INTERVAL", o.miss_report_interval_s, interval_origin));
  if (!std::isfinite(o.miss_report_interval_s) || o.miss_report_interval_s < 0 ||
      (o.miss_report_interval_s > 0 && o.miss_report_interval_s < 0.01) || o.miss_report_interval_s > 86400 * 365)
    return InvalidArgument(fmt::format("{}={} must be 0 (at exit only) or seconds in [0.01, 31536000]", interval_origin,
                                       o.miss_report_interval_s));
  if (o.miss_report_interval_s > 0 && o.miss_report_path.empty())
    return InvalidArgument(fmt::format("{}={} needs a miss report path (RuntimeOptions.miss_report_path or "
                                       "CLIFFGUARD_MISS_REPORT) to rewrite",
                                       interval_origin, o.miss_report_interval_s));
  if (o.metrics_path.empty())
    if (const char* env = std::getenv("CLIFFGUARD_METRICS_FILE")) o.metrics_path = env;
  const char* metrics_origin = "RuntimeOptions.metrics_interval_s";
  CG_RETURN_IF_ERROR(ApplySeconds("CLIFFGUARD_METRICS_INTERVAL", o.metrics_interval_s, metrics_origin));
  if (o.metrics_interval_s == 0) o.metrics_interval_s = 15;
  if (!std::isfinite(o.metrics_interval_s) || o.metrics_interval_s < 0.01 || o.metrics_interval_s > 86400 * 365)
    return InvalidArgument(fmt::format("{}={} must be seconds in [0.01, 31536000] (0: 15)", metrics_origin,
                                       o.metrics_interval_s));
  if (o.metrics_top_keys < 0) {
    o.metrics_top_keys = 10;
    if (const char* env = std::getenv("CLIFFGUARD_METRICS_TOP_KEYS")) {
      const std::string_view v(env);
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), o.metrics_top_keys);
      if (ec != std::errc() || end != v.data() + v.size() || o.metrics_top_keys < 0 || o.metrics_top_keys > 10000)
        return InvalidArgument(fmt::format("CLIFFGUARD_METRICS_TOP_KEYS='{}' must be an integer in [0, 10000]", v));
    }
  } else if (o.metrics_top_keys > 10000) {
    return InvalidArgument(fmt::format("RuntimeOptions.metrics_top_keys={} must be in [0, 10000]", o.metrics_top_keys));
  }
  std::vector<std::pair<std::string, const char*>> bundle_paths;  // (path, where it was named)
  if (const char* env = std::getenv("CLIFFGUARD_BUNDLES"))
    for (std::string_view rest(env); !rest.empty();) {
      const size_t colon = rest.find(':');
      const std::string_view p = rest.substr(0, colon);
      if (!p.empty()) bundle_paths.emplace_back(std::string(p), "CLIFFGUARD_BUNDLES");
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  for (const std::string& p : o.bundles) bundle_paths.emplace_back(p, "RuntimeOptions.bundles");
  if (device.backend == Backend::kCpu)
    if (const int cpus = AvailableCpus(); threads > cpus) {
      const double limit = CgroupCpuLimit();
      logging::Warn("thread budget {} ({}) exceeds the {} CPUs this process may use ({}): multi-threaded schedules "
                    "will oversubscribe them; bundles apply only when tuned for the same budget",
                    threads, options.threads ? "RuntimeOptions.threads" : "CLIFFGUARD_THREADS", cpus,
                    limit > 0 && cpus < AffinityCpus()
                        ? fmt::format("its cgroup's CPU limit of {:g}, rounded up; {} in its affinity mask", limit,
                                      AffinityCpus())
                        : std::string("its affinity mask"));
    }
  if (o.disable)
    logging::Warn("disabled (CLIFFGUARD_DISABLE=1 or RuntimeOptions.disable): every call runs the built-in default "
                  "and is counted as a miss; bundles load but are not used");
  auto impl = std::make_unique<Impl>(std::move(o), std::move(device));
  {
    std::lock_guard<std::mutex> lock(impl->load_mu);
    impl->RebuildLocked();  // the empty table: every call is a device miss
  }
  Impl* r = impl.get();
  std::unique_ptr<Runtime> rt(new Runtime(std::move(impl)));
  r->self = rt.get();
  for (const auto& [path, origin] : bundle_paths) {
    auto report = rt->LoadBundleFile(path);
    if (!report.ok())
      return Status(report.status().code(), fmt::format("{} names '{}': {}", origin, path, report.status().message()));
  }
  // Only now that nothing can fail: a runtime that Create refused writes no report.
  r->report_path = r->options.miss_report_path;
  if (r->options.miss_report_interval_s > 0 || !r->options.metrics_path.empty()) {
    static std::once_flag fork_handler;
    std::call_once(fork_handler, [] { ::pthread_atfork(WritersPrepareFork, WritersAfterFork, WritersAfterFork); });
    {
      std::lock_guard<std::mutex> lock(g_writers_mu);
      Writers().push_back(r);
    }
    r->StartWriter();
  }
  return rt;
}

Runtime::~Runtime() {
  if (impl_->options.miss_report_interval_s > 0 || !impl_->options.metrics_path.empty()) {
    impl_->StopWriter();
    std::lock_guard<std::mutex> lock(g_writers_mu);
    std::erase(Writers(), impl_.get());
  }
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
