#include "cliffguard/tuner/measurer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include <fmt/format.h>
#include "cliffguard/detail/logging.h"

namespace cliffguard::tuner {

struct Measurer::KeyData {
  OpKey key;
  std::vector<float> a, b;        // op inputs as stored (transposes applied to storage)
  std::vector<int64_t> checked;   // output indices i*n+j checked against the reference
  std::vector<double> ref, scale; // reference value and sum |a b| per checked index
};

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Gemm {
  int64_t m, n, k, lda, ldb;
  bool ta, tb;
  explicit Gemm(const OpKey& key)
      : m(key.m()), n(key.n()), k(key.k()), lda(key.trans_a ? key.m() : key.k()),
        ldb(key.trans_b ? key.k() : key.n()), ta(key.trans_a), tb(key.trans_b) {}
  float A(const float* a, int64_t i, int64_t p) const { return ta ? a[p * lda + i] : a[i * lda + p]; }
  float B(const float* b, int64_t p, int64_t j) const { return tb ? b[j * ldb + p] : b[p * ldb + j]; }
  int64_t a_elems() const { return m * k; }
  int64_t b_elems() const { return k * n; }
  int64_t c_elems() const { return m * n; }
};

std::string SignalText(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return fmt::format("signal {} (SIG{})", sig, abbrev ? abbrev : "?");
}

void WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      _exit(3);
    }
    done += static_cast<size_t>(n);
  }
}

std::string OneLine(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  if (s.size() > 2000) s.resize(2000);
  return s;
}

// The worker: owns rotated copies of the inputs and measures candidates.
class Worker {
 public:
  Worker(const Measurer::KeyData& data, const MeasureOptions& opt, const DeviceInfo& device)
      : d_(data), g_(data.key), opt_(opt) {
    const int64_t set_bytes = 4 * (g_.a_elems() + g_.b_elems() + g_.c_elems());
    int64_t budget = opt.rotate_bytes;
    if (budget <= 0) {
      const int64_t cache = device.l3_bytes + device.l2_bytes * std::max(1, device.threads);
      budget = 2 * (cache > 0 ? cache : (int64_t{32} << 20));
    }
    int64_t copies = (budget + set_bytes - 1) / set_bytes;
    copies = std::clamp<int64_t>(copies, 1, std::max(1, opt.max_copies));
    copies = std::max<int64_t>(1, std::min<int64_t>(copies, (int64_t{1} << 30) / std::max<int64_t>(1, set_bytes)));
    sets_.resize(copies);
    for (auto& s : sets_) {
      s.a = data.a;
      s.b = data.b;
      s.c.assign(g_.c_elems(), 0.0f);
    }
  }

  GemmArgs Args(size_t set) {
    GemmArgs args;
    args.dtype = DType::kF32;
    args.trans_a = g_.ta;
    args.trans_b = g_.tb;
    args.m = g_.m;
    args.n = g_.n;
    args.k = g_.k;
    args.a = sets_[set].a.data();
    args.lda = g_.lda;
    args.b = sets_[set].b.data();
    args.ldb = g_.ldb;
    args.c = sets_[set].c.data();
    args.ldc = g_.n;
    args.alpha = 1.0f;
    args.beta = 0.0f;
    return args;
  }

  // "" when correct, else the error text.
  std::string Check(const Schedule& s) {
    std::fill(sets_[0].c.begin(), sets_[0].c.end(), std::numeric_limits<float>::quiet_NaN());
    Status st = RunGemm(s, Args(0));
    if (!st.ok()) return fmt::format("kernel failed: {}", st.ToString());
    const float* c = sets_[0].c.data();
    double worst = 0;
    int64_t where = -1;
    for (size_t t = 0; t < d_.checked.size(); ++t) {
      const int64_t idx = d_.checked[t];
      const double err = std::abs(static_cast<double>(c[idx]) - d_.ref[t]) / std::max(d_.scale[t], 1e-30);
      if (!(err <= worst)) {  // also catches NaN
        worst = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
        where = idx;
        if (std::isnan(err)) break;
      }
    }
    if (worst > opt_.tolerance) {
      const bool nan = std::isnan(c[where]) || std::isinf(worst);
      return fmt::format("wrong result: max rel error {} > tol {:.1e} at ({},{}) of {} checked",
                         nan ? std::string("nan") : fmt::format("{:.2e}", worst), opt_.tolerance, where / g_.n,
                         where % g_.n, d_.checked.size());
    }
    return "";
  }

  // Appends per-call times (us) until `budget_ms` of timed calls and `min_calls` calls.
  std::string Time(const Schedule& s, double budget_ms, int min_calls, std::vector<double>& times) {
    double total_us = 0;
    int calls = 0;
    while ((total_us < budget_ms * 1000.0 || calls < min_calls) && calls < opt_.max_repeats) {
      GemmArgs args = Args(next_ % sets_.size());
      ++next_;
      const auto t0 = Clock::now();
      Status st = RunGemm(s, args);
      const auto t1 = Clock::now();
      if (!st.ok()) return fmt::format("kernel failed: {}", st.ToString());
      const double us = Seconds(t1 - t0) * 1e6;
      times.push_back(us);
      total_us += us;
      ++calls;
    }
    return "";
  }

  std::string Warmup(const Schedule& s) {
    std::vector<double> t;
    return Time(s, opt_.warmup_ms, 1, t);
  }

 private:
  struct Set {
    std::vector<float> a, b, c;
  };
  const Measurer::KeyData& d_;
  Gemm g_;
  const MeasureOptions& opt_;
  std::vector<Set> sets_;
  size_t next_ = 1;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string ResultLine(size_t i, bool ok, double us, const std::string& error) {
  return fmt::format("R {} {} {:.17g} {}\n", i, ok ? 1 : 0, us, OneLine(error));
}

[[noreturn]] void WorkerMain(int fd, const Measurer::KeyData& data, const MeasureOptions& opt,
                             const DeviceInfo& device, std::span<const Schedule> schedules,
                             const std::vector<size_t>& pending, bool interleaved, pid_t parent) {
  // Die with the tuner. The check after prctl closes the race where the parent died
  // between fork and prctl (getppid is then a reaper, not `parent`).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) _exit(4);
  struct rlimit no_core = {0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::signal(SIGPIPE, SIG_DFL);
  Worker w(data, opt, device);
  if (!interleaved) {
    for (size_t i : pending) {
      WriteAll(fd, fmt::format("S {}\n", i));
      const Schedule& s = schedules[i];
      std::string err = w.Check(s);
      if (err.empty()) err = w.Warmup(s);
      std::vector<double> times;
      if (err.empty()) err = w.Time(s, opt.min_time_ms, std::max(1, opt.min_repeats), times);
      WriteAll(fd, err.empty() ? ResultLine(i, true, Median(times), "") : ResultLine(i, false, 0, err));
    }
  } else {
    std::vector<std::string> errs(pending.size());
    std::vector<std::vector<double>> times(pending.size());
    for (size_t t = 0; t < pending.size(); ++t) {
      errs[t] = w.Check(schedules[pending[t]]);
      if (errs[t].empty()) errs[t] = w.Warmup(schedules[pending[t]]);
    }
    const int rounds = std::max(1, opt.interleave_rounds);
    const int per_round_calls = std::max(1, (std::max(1, opt.min_repeats) + rounds - 1) / rounds);
    for (int r = 0; r < rounds; ++r)
      for (size_t t = 0; t < pending.size(); ++t)
        if (errs[t].empty()) errs[t] = w.Time(schedules[pending[t]], opt.min_time_ms / 2, per_round_calls, times[t]);
    for (size_t t = 0; t < pending.size(); ++t)
      WriteAll(fd, errs[t].empty() ? ResultLine(pending[t], true, Median(times[t]), "")
                                   : ResultLine(pending[t], false, 0, errs[t]));
  }
  _exit(0);
}

}  // namespace

Measurer::Measurer(DeviceInfo device, MeasureOptions options) : device_(std::move(device)), options_(options) {}
Measurer::~Measurer() = default;

StatusOr<const Measurer::KeyData*> Measurer::DataFor(const OpKey& key) {
  for (const auto& d : cache_)
    if (d->key == key) return d.get();
  CG_RETURN_IF_ERROR(key.Validate());
  if (key.op != OpKind::kGemm || key.dtype != DType::kF32)
    return Unimplemented(fmt::format("measurer: {} is not supported (f32 gemm only)", key.ToString()));
  auto d = std::make_unique<KeyData>();
  d->key = key;
  const Gemm g(key);
  std::mt19937_64 rng(options_.data_seed ^ key.Hash());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  d->a.resize(g.a_elems());
  d->b.resize(g.b_elems());
  for (auto& x : d->a) x = u(rng);
  for (auto& x : d->b) x = u(rng);
  const int64_t total = g.c_elems();
  if (total <= options_.full_check_elements) {
    d->checked.resize(total);
    for (int64_t i = 0; i < total; ++i) d->checked[i] = i;
  } else {
    d->checked = {0, g.n - 1, (g.m - 1) * g.n, total - 1};
    std::uniform_int_distribution<int64_t> pick(0, total - 1);
    for (int64_t t = 0; t < options_.max_checked; ++t) d->checked.push_back(pick(rng));
    std::sort(d->checked.begin(), d->checked.end());
    d->checked.erase(std::unique(d->checked.begin(), d->checked.end()), d->checked.end());
  }
  d->ref.resize(d->checked.size());
  d->scale.resize(d->checked.size());
  for (size_t t = 0; t < d->checked.size(); ++t) {
    const int64_t i = d->checked[t] / g.n, j = d->checked[t] % g.n;
    double sum = 0, mag = 0;
    for (int64_t p = 0; p < g.k; ++p) {
      const double prod = static_cast<double>(g.A(d->a.data(), i, p)) * g.B(d->b.data(), p, j);
      sum += prod;
      mag += std::abs(prod);
    }
    d->ref[t] = sum;
    d->scale[t] = mag;
  }
  if (cache_.size() >= 4) cache_.erase(cache_.begin());
  cache_.push_back(std::move(d));
  return cache_.back().get();
}

StatusOr<std::vector<MeasureResult>> Measurer::Measure(const OpKey& key, std::span<const Schedule> schedules,
                                                       const ResultCallback& on_result) {
  return Run(key, schedules, false, on_result);
}

StatusOr<std::vector<MeasureResult>> Measurer::MeasureInterleaved(const OpKey& key,
                                                                  std::span<const Schedule> schedules) {
  return Run(key, schedules, true, {});
}

StatusOr<std::vector<MeasureResult>> Measurer::Run(const OpKey& key, std::span<const Schedule> schedules,
                                                   bool interleaved, const ResultCallback& on_result) {
  CG_RETURN_IF_ERROR(key.Validate());
  std::vector<MeasureResult> results(schedules.size());
  std::vector<bool> done(schedules.size(), false);
  auto finish = [&](size_t i, bool ok, double us, std::string error) {
    MeasureResult& r = results[i];
    r.key = key;
    r.schedule = schedules[i];
    r.ok = ok;
    r.median_us = ok ? us : 0;
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
  CG_ASSIGN_OR_RETURN(const KeyData* data, DataFor(key));

  const double timeout_s = options_.timeout_s > 0 ? options_.timeout_s : 30.0;
  const double setup_s = 60.0;
  while (!pending.empty()) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return IoError(fmt::format("measurer: pipe failed: {}", std::strerror(errno)));
    std::fflush(nullptr);
    const pid_t self = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return IoError(fmt::format("measurer: fork failed: {}", std::strerror(errno)));
    }
    if (pid == 0) {
      ::close(fds[0]);
      WorkerMain(fds[1], *data, options_, device_, schedules, pending, interleaved, self);
    }
    ::close(fds[1]);
    const int fd = fds[0];
    std::string buf;
    long in_flight = -1;
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                       setup_s + (interleaved ? timeout_s * pending.size() : 0)));
    auto arm = [&](double s) {
      deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
    };
    enum { kRunning, kEof, kTimeout } state = kRunning;
    while (state == kRunning) {
      const double left_ms = std::chrono::duration<double, std::milli>(deadline - Clock::now()).count();
      if (left_ms <= 0) {
        state = kTimeout;
        break;
      }
      struct pollfd p = {fd, POLLIN, 0};
      int pr = ::poll(&p, 1, static_cast<int>(std::min(left_ms + 1, 1e9)));
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) continue;  // re-checks the deadline
      char tmp[4096];
      ssize_t n = ::read(fd, tmp, sizeof(tmp));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        state = kEof;
        break;
      }
      buf.append(tmp, static_cast<size_t>(n));
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        std::string line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        if (line.size() > 2 && line[0] == 'S') {
          in_flight = std::strtol(line.c_str() + 2, nullptr, 10);
          arm(timeout_s);
        } else if (line.size() > 2 && line[0] == 'R') {
          char* end = nullptr;
          const size_t i = std::strtoul(line.c_str() + 2, &end, 10);
          const bool ok = std::strtol(end, &end, 10) == 1;
          const double us = std::strtod(end, &end);
          std::string err = *end == ' ' ? std::string(end + 1) : std::string(end);
          if (i < schedules.size() && !done[i]) finish(i, ok, us, std::move(err));
          in_flight = -1;
          arm(interleaved ? timeout_s * pending.size() : timeout_s);
        }
      }
    }
    if (state == kTimeout) ::kill(pid, SIGKILL);
    ::close(fd);
    int wstatus = 0;
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    std::string why;
    if (state == kTimeout) {
      why = fmt::format("timeout: no result after {:.1f} s (worker killed with SIGKILL)", timeout_s);
    } else if (WIFSIGNALED(wstatus)) {
      why = fmt::format("crashed: worker killed by {}", SignalText(WTERMSIG(wstatus)));
    } else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0) {
      why = fmt::format("crashed: worker exited with status {}", WEXITSTATUS(wstatus));
    }
    std::vector<size_t> rest;
    for (size_t i : pending)
      if (!done[i]) rest.push_back(i);
    if (rest.empty()) break;
    if (why.empty()) why = "worker ended without a result";
    if (in_flight >= 0 && !interleaved && static_cast<size_t>(in_flight) < schedules.size() && !done[in_flight]) {
      logging::Warn("measurer: {} for {}: {}", schedules[in_flight].ToString(), key.ToString(), why);
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

}  // namespace cliffguard::tuner
