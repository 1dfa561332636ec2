// SandboxMeasurer: batches of candidates measured in worker processes (sandbox.h)
// with each op's harness (harness.h); the worker loop; the spawned worker's job.
#include "cliffguard/tuner/measurer.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cliffguard/detail/json_reader.h"
#include "cliffguard/detail/logging.h"
#include "cpu_wait.h"
#include "harness.h"
#include "sandbox.h"
#include "stats.h"

namespace cliffguard::tuner {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

std::string OneLine(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  if (s.size() > 2000) s.resize(2000);
  return s;
}

// The timed calls of one candidate in one measurement (or round).
struct Calls {
  std::vector<double> us;
  double total_us = 0;
  // Whether it still needs calls to have `budget_ms` of timed calls and `min_calls`
  // calls (never more than max_repeats).
  bool Short(const MeasureOptions& opt, double budget_ms, int min_calls) const {
    const int n = static_cast<int>(us.size());
    return n < opt.max_repeats && (n < min_calls || total_us < budget_ms * 1000.0);
  }
  // Times one call of `s`; the error text when the kernel fails.
  std::string Add(OpHarness& h, const Schedule& s) {
    const StatusOr<double> t = h.TimeOne(s);
    if (!t.ok()) return fmt::format("kernel failed: {}", t.status().ToString());
    us.push_back(*t);
    total_us += *t;
    return "";
  }
};

// "R i 1 median spread cpu_wait n m_1 .. m_n" or "R i 0 0 0 error" (cpu_wait: the
// CpuWaitMeter share of the timed calls' window, -1 unknown). Separate measurements
// (four consecutive parts of the run): m_g are the parts' medians and the median is
// over every timed call. Interleaved rounds: m_g are the rounds' mean call times
// (what a run of calls costs, a kernel's own slow calls included, as serving pays
// them and bench_serving times them) and the median is over the rounds. The spread
// is half the range of the m_g: how far the result moves within one measurement.
std::string ResultLine(size_t i, const std::vector<Calls>& groups, const std::string& error, bool round_means,
                       double cpu_wait) {
  std::vector<double> all, per_group;
  for (const auto& g : groups) {
    all.insert(all.end(), g.us.begin(), g.us.end());
    if (!g.us.empty()) per_group.push_back(round_means ? g.total_us / double(g.us.size()) : Median(g.us));
  }
  if (!error.empty() || all.empty())
    return fmt::format("R {} 0 0 0 {}\n", i, OneLine(error.empty() ? "no timed call" : error));
  const auto [lo, hi] = std::minmax_element(per_group.begin(), per_group.end());
  return fmt::format("R {} 1 {:.17g} {:.17g} {:.6g} {} {:.17g}\n", i,
                     round_means ? Median(per_group) : Median(std::move(all)), 0.5 * (*hi - *lo), cpu_wait,
                     per_group.size(), fmt::join(per_group, " "));
}

// Four consecutive parts of one run's calls (one part when there are fewer calls).
std::vector<Calls> Parts(const Calls& calls) {
  const std::vector<double>& t = calls.us;
  const size_t parts = t.size() >= 4 ? 4 : 1;
  std::vector<Calls> out(parts);
  for (size_t c = 0; c < t.size(); ++c) out[c * parts / t.size()].us.push_back(t[c]);
  return out;
}

// Times calls of `s` until `budget_ms` of timed calls and `min_calls` calls.
std::string Time(OpHarness& h, const Schedule& s, const MeasureOptions& opt, double budget_ms, int min_calls,
                 Calls& calls) {
  while (calls.Short(opt, budget_ms, min_calls))
    if (std::string err = calls.Add(h, s); !err.empty()) return err;
  return "";
}

// The worker: measures the pending candidates with an armed harness, writing
// "S i" when candidate i starts and its result line (ResultLine) when it ends.
void WorkerLoop(int fd, OpHarness& h, const MeasureOptions& opt, std::span<const Schedule> schedules,
                const std::vector<size_t>& pending, bool interleaved) {
  auto fail = [] { _exit(3); };
  auto warmup = [&](const Schedule& s) {
    Calls c;
    return Time(h, s, opt, opt.warmup_ms, 1, c);
  };
  if (!interleaved) {
    for (size_t i : pending) {
      if (!WriteAll(fd, fmt::format("S {}\n", i))) fail();
      const Schedule& s = schedules[i];
      std::string err = h.Check(s);
      if (err.empty()) err = warmup(s);
      Calls times;
      const CpuWaitMeter window;
      if (err.empty()) err = Time(h, s, opt, opt.min_time_ms, std::max(1, opt.min_repeats), times);
      if (!WriteAll(fd, ResultLine(i, Parts(times), err, false, window.Share()))) fail();
    }
    return;
  }
  std::vector<std::string> errs(pending.size());
  std::vector<std::vector<Calls>> times(pending.size());  // [candidate][round]
  std::vector<Schedule> batch;
  for (size_t t = 0; t < pending.size(); ++t) {
    errs[t] = h.Check(schedules[pending[t]]);
    if (errs[t].empty()) batch.push_back(schedules[pending[t]]);
  }
  if (Status st = h.Rotate(batch); !st.ok()) {
    std::fprintf(stderr, "measure worker: %s\n", st.ToString().c_str());
    fail();
  }
  for (size_t t = 0; t < pending.size(); ++t)
    if (errs[t].empty()) errs[t] = warmup(schedules[pending[t]]);
  const int rounds = std::max(1, opt.interleave_rounds);
  const int per_round_calls = std::max(1, (std::max(1, opt.min_repeats) + rounds - 1) / rounds);
  const CpuWaitMeter window;  // one window: the rounds of every candidate
  for (int r = 0; r < rounds; ++r) {
    for (auto& t : times) t.emplace_back();
    for (size_t i = 0; i < pending.size(); ++i) {  // each candidate's run, from the r-th on
      const size_t t = (size_t(r) + i) % pending.size();
      if (!errs[t].empty()) continue;
      const Schedule& s = schedules[pending[t]];
      Calls untimed;  // the switch from the previous candidate
      if (errs[t] = untimed.Add(h, s); errs[t].empty())
        errs[t] = Time(h, s, opt, opt.min_time_ms / 2, per_round_calls, times[t].back());
    }
  }
  const double cpu_wait = window.Share();
  for (size_t t = 0; t < pending.size(); ++t)
    if (!WriteAll(fd, ResultLine(pending[t], times[t], errs[t], true, cpu_wait))) fail();
  (void)h.Rotate({});  // ending a rotation cannot fail
}

// ---- the spawned worker's job ----

Json OptionsJson(const MeasureOptions& o) {
  return Json{{"min_time_ms", o.min_time_ms},         {"min_repeats", o.min_repeats},
              {"max_repeats", o.max_repeats},         {"warmup_ms", o.warmup_ms},
              {"rotate_bytes", o.rotate_bytes},       {"max_copies", o.max_copies},
              {"tolerance", o.tolerance},             {"full_check_elements", o.full_check_elements},
              {"max_checked", o.max_checked},         {"data_seed", o.data_seed},
              {"interleave_rounds", o.interleave_rounds}};
}

std::string JobJson(const DeviceInfo& device, const MeasureOptions& o, const OpKey& key,
                    std::span<const Schedule> schedules, const std::vector<size_t>& pending, bool interleaved) {
  Json scheds = Json::array();
  for (size_t i : pending) scheds.push_back(detail::ScheduleToJson(ToNamed(schedules[i])));
  return Json{{"device", device.spec.empty() ? "cpu" : device.spec},
              {"threads", device.threads},
              {"fingerprint", device.fingerprint},
              {"key", key.ToString()},
              {"interleaved", interleaved},
              {"options", OptionsJson(o)},
              {"indices", pending},
              {"schedules", scheds}}
      .dump();
}

}  // namespace

SandboxMeasurer::SandboxMeasurer(DeviceInfo device, MeasureOptions options)
    : device_(std::move(device)), options_(std::move(options)) {}
SandboxMeasurer::~SandboxMeasurer() = default;

StatusOr<OpHarness*> SandboxMeasurer::HarnessFor(const OpKey& key) {
  for (const auto& h : cache_)
    if (h->key() == key) return h.get();
  CG_ASSIGN_OR_RETURN(auto h, MakeHarness(key, options_, device_));
  if (cache_.size() >= 4) cache_.erase(cache_.begin());
  cache_.push_back(std::move(h));
  return cache_.back().get();
}

StatusOr<std::vector<MeasureResult>> SandboxMeasurer::Measure(const OpKey& key, std::span<const Schedule> schedules,
                                                              const ResultCallback& on_result) {
  return Run(key, schedules, false, on_result);
}

StatusOr<std::vector<MeasureResult>> SandboxMeasurer::MeasureInterleaved(const OpKey& key,
                                                                         std::span<const Schedule> schedules) {
  return Run(key, schedules, true, {});
}

StatusOr<std::vector<MeasureResult>> SandboxMeasurer::Run(const OpKey& key, std::span<const Schedule> schedules,
                                                          bool interleaved, const ResultCallback& on_result) {
  CG_RETURN_IF_ERROR(key.Validate());
  std::vector<MeasureResult> results(schedules.size());
  std::vector<bool> done(schedules.size(), false);
  auto finish = [&](size_t i, bool ok, double us, std::string error, double spread = 0, double cpu_wait = -1,
                    std::vector<double> rounds = {}) {
    MeasureResult& r = results[i];
    r.key = key;
    r.schedule = schedules[i];
    r.ok = ok;
    r.median_us = ok ? us : 0;
    r.spread_us = ok ? spread : 0;
    r.cpu_wait = ok ? cpu_wait : -1;
    r.round_us = ok ? std::move(rounds) : std::vector<double>{};
    r.error = ok ? "" : std::move(error);
    done[i] = true;
    if (on_result) on_result(i, r);
  };
  std::vector<size_t> pending;
  for (size_t i = 0; i < schedules.size(); ++i) {
    Status st = CheckSchedule(schedules[i], key, device_);
    if (!st.ok()) {
      finish(i, false, 0, fmt::format("invalid schedule: {}", st.message()));
    } else {
      pending.push_back(i);
    }
  }
  if (pending.empty()) return results;
  const bool spawn = !options_.worker_command.empty();
  OpHarness* harness = nullptr;
  if (!spawn) {
    CG_ASSIGN_OR_RETURN(harness, HarnessFor(key));
  }

  double timeout_s = options_.timeout_s > 0 ? options_.timeout_s : 30.0;
  if (timeout_cap_s_ > 0) timeout_s = std::min(timeout_s, timeout_cap_s_);
  const double setup_s = 60.0;
  while (!pending.empty()) {
    long in_flight = -1;
    const double batch_s = interleaved ? timeout_s * double(pending.size()) : timeout_s;
    const SandboxLineFn on_line = [&](const std::string& line) -> double {
      if (line.size() > 2 && line[0] == 'S') {
        in_flight = std::strtol(line.c_str() + 2, nullptr, 10);
        return timeout_s;
      }
      if (line.size() > 2 && line[0] == 'R') {
        char* end = nullptr;
        const size_t i = std::strtoul(line.c_str() + 2, &end, 10);
        const bool ok = std::strtol(end, &end, 10) == 1;
        const double us = std::strtod(end, &end);
        const double spread = std::strtod(end, &end);
        double cpu_wait = -1;
        std::vector<double> rounds;
        if (ok) {
          cpu_wait = std::strtod(end, &end);
          const long n = std::strtol(end, &end, 10);
          for (long g = 0; g < n && g < 100000; ++g) rounds.push_back(std::strtod(end, &end));
        }
        std::string err = *end == ' ' ? std::string(end + 1) : std::string(end);
        if (i < schedules.size() && !done[i]) finish(i, ok, us, std::move(err), spread, cpu_wait, std::move(rounds));
        in_flight = -1;
        return batch_s;
      }
      return 0;
    };
    const double first_line_s = setup_s + (interleaved ? batch_s : 0);
    SandboxOutcome outcome;
    if (spawn) {
      if (!worker_ || !worker_->alive()) {
        worker_.reset();
        CG_ASSIGN_OR_RETURN(worker_, SpawnedWorker::Start(options_.worker_command));
      }
      outcome = worker_->RunJob(JobJson(device_, options_, key, schedules, pending, interleaved), first_line_s, on_line);
    } else {
      SandboxTask task;
      task.body = [&, harness](int fd) {
        harness->Arm(device_);
        WorkerLoop(fd, *harness, options_, schedules, pending, interleaved);
      };
      CG_ASSIGN_OR_RETURN(outcome, RunSandboxed(task, first_line_s, on_line));
    }
    std::vector<size_t> rest;
    for (size_t i : pending)
      if (!done[i]) rest.push_back(i);
    if (rest.empty()) break;
    std::string why = outcome.Describe(timeout_s);
    if (why.empty()) why = "worker ended without a result";
    if (in_flight >= 0 && !interleaved && static_cast<size_t>(in_flight) < schedules.size() && !done[size_t(in_flight)]) {
      logging::Warn("measurer: {} for {}: {}", schedules[size_t(in_flight)].ToString(), key.ToString(), why);
      finish(static_cast<size_t>(in_flight), false, 0, why);
    } else {
      // Failure outside any single candidate (start-up, or an interleaved batch):
      // every remaining candidate gets the error, so the loop always ends.
      for (size_t i : rest) finish(i, false, 0, fmt::format("{} (outside a single candidate)", why));
    }
    pending.clear();
    for (size_t i : rest)
      if (!done[i]) pending.push_back(i);
  }
  return results;
}

namespace {

// The spawned worker's state between jobs: the last key's armed harness.
struct WorkerState {
  std::string harness_for;  // device, key and options of `harness`
  std::unique_ptr<OpHarness> harness;
};

// One job of a spawned worker; 0, or the exit status 5 when it cannot be run.
int RunJob(std::string_view job, int out_fd, WorkerState& state) {
  auto refuse = [](const std::string& why) {
    std::fprintf(stderr, "cliffguard measure-worker: %s\n", why.c_str());
    return 5;
  };
  Json j = Json::parse(job, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return refuse("the job is not a JSON object");
  detail::JsonReader r("job");
  const std::string spec = r.String(j, "device"), fingerprint = r.String(j, "fingerprint"), key_text = r.String(j, "key");
  const int threads = static_cast<int>(r.Int(j, "threads", true, 0, kMaxThreadBudget));
  const Json* opts = r.Object(j, "options");
  const Json* idx = r.Array(j, "indices");
  const Json* scheds = r.Array(j, "schedules");
  const bool interleaved = j.value("interleaved", false);
  if (!r.status().ok()) return refuse(r.status().message());
  MeasureOptions o;
  detail::JsonReader ro = r.Sub("options");
  o.min_time_ms = ro.Number(*opts, "min_time_ms");
  o.min_repeats = static_cast<int>(ro.Int(*opts, "min_repeats", true, 1, INT32_MAX));
  o.max_repeats = static_cast<int>(ro.Int(*opts, "max_repeats", true, 1, INT32_MAX));
  o.warmup_ms = ro.Number(*opts, "warmup_ms");
  o.rotate_bytes = ro.Int(*opts, "rotate_bytes", true, 0);
  o.max_copies = static_cast<int>(ro.Int(*opts, "max_copies", true, 1, 1 << 16));
  o.tolerance = ro.Number(*opts, "tolerance");
  o.full_check_elements = ro.Int(*opts, "full_check_elements", true, 0);
  o.max_checked = ro.Int(*opts, "max_checked", true, 0);
  o.data_seed = ro.UInt(*opts, "data_seed");
  o.interleave_rounds = static_cast<int>(ro.Int(*opts, "interleave_rounds", true, 1, 1000));
  if (!ro.status().ok()) return refuse(ro.status().message());
  auto device = ProbeDevice(spec, threads);
  if (!device.ok()) return refuse(device.status().message());
  if (!FingerprintMatches(*device, fingerprint))
    return refuse(fmt::format("device {} here is not the job's device {}", device->fingerprint, fingerprint));
  auto key = OpKey::Parse(key_text);
  if (!key.ok()) return refuse(key.status().message());
  if (idx->size() != scheds->size()) return refuse("job.indices and job.schedules differ in length");
  size_t max_index = 0;
  std::vector<size_t> pending;
  for (const Json& v : *idx) {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > (1u << 20)) return refuse("job.indices must hold small integers");
    pending.push_back(v.get<size_t>());
    max_index = std::max(max_index, pending.back());
  }
  std::vector<Schedule> schedules(max_index + 1);
  for (size_t t = 0; t < pending.size(); ++t) {
    detail::JsonReader rs(fmt::format("job.schedules[{}]", t));
    const Json wrapper = Json{{"s", (*scheds)[t]}};
    const NamedSchedule named = rs.Schedule(wrapper, "s");
    if (!rs.status().ok()) return refuse(rs.status().message());
    auto s = Schedule::FromNamed(named.variant, named.params);
    if (!s.ok()) return refuse(s.status().message());
    schedules[pending[t]] = *s;
  }
  const std::string harness_for = fmt::format("{} {} {}", device->fingerprint, key_text, opts->dump());
  if (!state.harness || state.harness_for != harness_for) {
    state.harness.reset();  // one key's buffers at a time
    auto harness = MakeHarness(*key, o, *device);
    if (!harness.ok()) return refuse(harness.status().message());
    state.harness = std::move(*harness);
    state.harness->Arm(*device);
    state.harness_for = harness_for;
  }
  WorkerLoop(out_fd, *state.harness, o, schedules, pending, interleaved);
  return 0;
}

}  // namespace

int RunMeasureWorker(std::FILE* in, int out_fd) {
  // Die with the tuner that spawned this worker; write no core file.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  struct rlimit no_core = {0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  WorkerState state;
  char* line = nullptr;
  size_t cap = 0;
  int rc = 0;
  for (ssize_t n; (n = ::getline(&line, &cap, in)) > 0;) {
    std::string_view job(line, size_t(n));
    while (!job.empty() && (job.back() == '\n' || job.back() == '\r')) job.remove_suffix(1);
    if (job.empty()) continue;
    if ((rc = RunJob(job, out_fd, state)) != 0) break;
    if (!WriteAll(out_fd, "E\n")) {
      rc = 3;
      break;
    }
  }
  std::free(line);
  return rc;
}

}  // namespace cliffguard::tuner
