#include "cliffguard/tuner/tuner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include "cliffguard/detail/logging.h"

#include "cliffguard/tuner/cost_model.h"
#include "cliffguard/tuner/space.h"
#include "cliffguard/tuner/strategy.h"
#include "cliffguard/tuner/tuning_log.h"
#include "stats.h"

namespace cliffguard::tuner {

double Gflops(const OpKey& key, double us) { return us > 0 ? key.Flops() / (us * 1e3) : 0; }

PairedComparison ComparePaired(const MeasureResult& a, const MeasureResult& b) {
  PairedComparison pc;
  if (!a.ok || !b.ok) return pc;
  const bool rounds = !a.round_us.empty() && a.round_us.size() == b.round_us.size();
  const std::vector<double> at = rounds ? a.round_us : std::vector<double>{a.median_us};
  const std::vector<double> bt = rounds ? b.round_us : std::vector<double>{b.median_us};
  std::vector<double> gains;
  for (size_t r = 0; r < at.size(); ++r) {
    if (!(at[r] > 0 && bt[r] > 0)) continue;
    gains.push_back(1.0 - at[r] / bt[r]);
    pc.a_faster += at[r] < bt[r];
  }
  pc.rounds = static_cast<int>(gains.size());
  if (!gains.empty()) pc.median_gain = Median(std::move(gains));
  return pc;
}

namespace {

using Clock = std::chrono::steady_clock;

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// Everything known about one key: measurements from the log and from this run.
struct KeyState {
  OpKey key;
  std::vector<MeasureResult> trials;       // trial records, in order
  std::optional<MeasureResult> def;        // the default schedule's measurement
  std::vector<MeasureResult> extra;        // remeasure and cross records
  std::unordered_map<std::string, double> latest_ok;  // schedule text -> latest ok median
  std::unordered_map<std::string, Schedule> schedules;
  std::unordered_map<std::string, bool> failed;       // schedule text -> failed at least once
  int resumed = 0;

  void Note(const MeasureResult& r) {
    const std::string s = r.schedule.ToString();
    schedules[s] = r.schedule;
    if (r.ok) {
      latest_ok[s] = r.median_us;
    } else {
      failed[s] = true;
    }
  }
  std::optional<double> TimeOf(const Schedule& s) const {
    const std::string t = s.ToString();
    if (failed.count(t)) return -1.0;
    auto it = latest_ok.find(t);
    if (it == latest_ok.end()) return std::nullopt;
    return it->second;
  }
};

struct OpId {
  OpKind op;
  DType dtype;
  friend bool operator<(const OpId& a, const OpId& b) {
    return std::pair(a.op, a.dtype) < std::pair(b.op, b.dtype);
  }
};

Status ValidateBuckets(const std::vector<BucketTarget>& buckets) {
  for (size_t i = 0; i < buckets.size(); ++i) {
    const BucketTarget& b = buckets[i];
    const std::string key = b.key.ToString();
    if (Status st = b.key.Validate(); !st.ok())
      return InvalidArgument(fmt::format("tune: bucket key '{}': {}", key, st.message()));
    if (b.lo == 0 && b.hi == 0)
      return InvalidArgument(fmt::format("tune: bucket [0, 0] of {} is no range; a bucket needs 1 <= lo <= hi", key));
    if (Status st = CheckBucket(b.key, b.lo, b.hi); !st.ok()) return InvalidArgument(fmt::format("tune: {}", st.message()));
    for (const int64_t e : {b.lo, b.hi}) {
      const OpKey end = WithVaryingDim(b.key, e);
      if (Status st = end.Validate(); !st.ok())
        return InvalidArgument(
            fmt::format("tune: bucket [{}, {}] of {}: end key '{}': {}", b.lo, b.hi, key, end.ToString(), st.message()));
    }
    for (size_t j = 0; j < i; ++j) {
      const BucketTarget& a = buckets[j];
      if (a.key == b.key) {
        if (a.lo == b.lo && a.hi == b.hi) continue;  // the same target twice: tuned once
        return InvalidArgument(fmt::format("tune: {} has two bucket ranges, [{}, {}] and [{}, {}]; a key has at most one",
                                           key, a.lo, a.hi, b.lo, b.hi));
      }
      if (KeyFamily(a.key) == KeyFamily(b.key) && a.lo <= b.hi && b.lo <= a.hi)
        return InvalidArgument(fmt::format("tune: bucket [{}, {}] of {} overlaps bucket [{}, {}] of {}; the ranges of "
                                           "one family must be disjoint",
                                           b.lo, b.hi, key, a.lo, a.hi, a.key.ToString()));
    }
  }
  return Status::Ok();
}

Status ValidateOptions(const TunerOptions& o) {
  if (o.keys.empty() && o.buckets.empty())
    return InvalidArgument("tune: no op keys given (--shape, --workload, --buckets or --from-report)");
  for (const auto& k : o.keys) {
    Status st = k.Validate();
    if (!st.ok()) return InvalidArgument(fmt::format("tune: key '{}': {}", k.ToString(), st.message()));
  }
  CG_RETURN_IF_ERROR(ValidateBuckets(o.buckets));
  if (o.trials < 1) return InvalidArgument(fmt::format("tune: trials={} must be >= 1", o.trials));
  if (o.batch_size < 1) return InvalidArgument(fmt::format("tune: batch={} must be >= 1", o.batch_size));
  if (o.log_path.empty()) return InvalidArgument("tune: a tuning log path is required (--log)");
  const auto names = StrategyNames();
  if (std::find(names.begin(), names.end(), o.strategy) == names.end())
    return InvalidArgument(fmt::format("tune: strategy '{}' is not one of: {}", o.strategy, fmt::join(names, ", ")));
  if (o.objective != "rank" && o.objective != "reg")
    return InvalidArgument(fmt::format("tune: objective '{}' is not one of: rank, reg", o.objective));
  if (!(o.max_cpu_wait >= 0 && o.max_cpu_wait <= 1))
    return InvalidArgument(fmt::format("tune: max cpu wait {} must be in [0, 1] (1: no check)", o.max_cpu_wait));
  if (o.cpu_wait_retries < 0 || o.cpu_wait_retries > 10)
    return InvalidArgument(fmt::format("tune: cpu wait retries {} must be in [0, 10]", o.cpu_wait_retries));
  if (!(o.cpu_wait_pause_s >= 0 && o.cpu_wait_pause_s <= 600))
    return InvalidArgument(fmt::format("tune: cpu wait pause {} s must be in [0, 600]", o.cpu_wait_pause_s));
  if (!(o.confirm_min_gain >= 0 && o.confirm_min_gain <= 0.5))
    return InvalidArgument(fmt::format("tune: confirm min gain {} must be in [0, 0.5]", o.confirm_min_gain));
  if (o.tie_tolerance < 0 || o.tie_tolerance > 0.5)
    return InvalidArgument(fmt::format("tune: tie tolerance {} must be in [0, 0.5]", o.tie_tolerance));
  if (!(o.variant_band >= 0 && o.variant_band <= 10))
    return InvalidArgument(fmt::format("tune: variant band {} must be in [0, 10]", o.variant_band));
  if (o.variant_leaders < 0)
    return InvalidArgument(fmt::format("tune: variant leaders {} must be >= 0 (0: none)", o.variant_leaders));
  if (o.measure.min_time_ms <= 0 || o.measure.min_repeats < 1)
    return InvalidArgument(fmt::format("tune: min measure time {} ms must be > 0 and min repeats {} >= 1",
                                       o.measure.min_time_ms, o.measure.min_repeats));
  if (o.threads < 0) return InvalidArgument(fmt::format("tune: threads={} must be >= 0 (0: the default budget)", o.threads));
  if (o.measure.timeout_s < 0)
    return InvalidArgument(fmt::format("tune: timeout {} s must be >= 0 (0: 30 s)", o.measure.timeout_s));
  if (o.time_budget_s < 0)
    return InvalidArgument(fmt::format("tune: time budget {} s must be >= 0", o.time_budget_s));
  if (o.key_time_limit_s < 0 || o.total_time_limit_s < 0)
    return InvalidArgument(fmt::format("tune: time limits ({} s per key, {} s total) must be >= 0 (0: none)",
                                       o.key_time_limit_s, o.total_time_limit_s));
  for (const auto* v : o.variants)
    if (!v) return InvalidArgument("tune: a null kernel variant was given");
  return Status::Ok();
}


// One run of Tune(), phase by phase: the log (replay and writer), per key the
// default and the search, the noise rule, then bundle defaults and the cost model.
class TuneRun {
 public:
  TuneRun(const TunerOptions& o, DeviceInfo device) : o_(o), start_(Clock::now()), variants_(o.variants) {
    result_.device = std::move(device);
    for (const auto& key : o.keys)
      if (std::find(keys_.begin(), keys_.end(), key) == keys_.end()) keys_.push_back(key);
    for (const auto& b : o.buckets) {
      if (std::find(keys_.begin(), keys_.end(), b.key) == keys_.end()) keys_.push_back(b.key);
      buckets_[b.key.ToString()] = {b.lo, b.hi};
    }
  }

  StatusOr<TuneResult> Run(Measurer& measurer) {
    measurer_ = &measurer;
    CG_RETURN_IF_ERROR(ReplayLog());
    CG_RETURN_IF_ERROR(MakeCostModels());
    for (const auto& k : keys_) {
      auto it = state_.find(k.ToString());
      if (it != state_.end()) trials_done_ += std::min<int64_t>(o_.trials, it->second.trials.size());
    }
    for (size_t ki = 0; ki < keys_.size(); ++ki) CG_RETURN_IF_ERROR(TuneKey(ki));
    std::vector<BundleOpDefault> defaults;
    if (o_.bundle_default) {
      CG_ASSIGN_OR_RETURN(defaults, ChooseBundleDefaults());
    }
    result_.bundle = MakeBundleSpec(device(), outcomes_, std::move(defaults), SerializedCostModel(),
                                    static_cast<uint64_t>(UnixNow()));
    return std::move(result_);
  }

 private:
  const DeviceInfo& device() const { return result_.device; }
  double Elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  // ---- the log: earlier records of this device (resume) and the writer ----
  Status ReplayLog() {
    std::vector<LogRecord> previous;
    int64_t keep_bytes = -1;
    std::error_code ec;
    const bool exists = std::filesystem::exists(o_.log_path, ec);
    if (o_.resume) {
      auto log = ReadTuningLog(o_.log_path);
      if (log.ok()) {
        previous = std::move(log->records);
        keep_bytes = log->valid_bytes;
      } else if (log.status().code() != StatusCode::kNotFound) {
        return log.status();
      } else {
        logging::Info("tune: --resume: log {} does not exist yet; starting a new one", o_.log_path);
      }
    } else if (exists && std::filesystem::file_size(o_.log_path, ec) > 0) {
      return FailedPrecondition(fmt::format(
          "tune: log '{}' already holds measurements; pass --resume to continue it, or remove it", o_.log_path));
    }
    for (const auto& path : o_.warm_start_logs) {
      auto log = ReadTuningLog(path);
      if (!log.ok()) return Status(log.status().code(), fmt::format("tune: warm-start log: {}", log.status().message()));
      size_t used = 0;
      for (const auto& rec : log->records) {
        if (!FingerprintMatches(device(), rec.device)) continue;
        auto mr = ToMeasureResult(rec, variants_);
        if (!mr.ok()) continue;
        warm_.push_back(*mr);
        ++used;
      }
      logging::Info("tune: warm-start log {}: {} of {} records used (device {})", path, used, log->records.size(),
                    device().fingerprint);
    }
    CG_ASSIGN_OR_RETURN(writer_, TuningLogWriter::Open(o_.log_path,
                                                       o_.resume ? TuningLogWriter::Mode::kAppend
                                                                 : TuningLogWriter::Mode::kTruncate,
                                                       keep_bytes));
    size_t other_device = 0, unresolved = 0;
    for (const auto& rec : previous) {
      if (!FingerprintMatches(device(), rec.device)) {
        ++other_device;
        continue;
      }
      auto mr = ToMeasureResult(rec, variants_);
      if (!mr.ok()) {
        ++unresolved;
        continue;
      }
      KeyState& ks = state_[rec.key.ToString()];
      ks.key = rec.key;
      ks.Note(*mr);
      switch (rec.kind) {
        case RecordKind::kTrial:
          ks.trials.push_back(*mr);
          ++ks.resumed;
          break;
        case RecordKind::kDefault: ks.def = *mr; break;
        default: ks.extra.push_back(*mr); break;
      }
    }
    if (other_device)
      logging::Warn("tune: {} log records of other devices ignored (this device: {})", other_device, device().fingerprint);
    if (unresolved) logging::Warn("tune: {} log records name kernel variants not in this build; ignored", unresolved);
    return Status::Ok();
  }

  Status Log(RecordKind kind, const MeasureResult& r, int64_t trial) {
    LogRecord rec;
    rec.kind = kind;
    rec.key = r.key;
    rec.device = device().fingerprint;
    rec.schedule = ToNamed(r.schedule);
    rec.strategy = kind == RecordKind::kDefault ? "default" : o_.strategy;
    rec.seed = o_.seed;
    rec.trial = trial;
    rec.ok = r.ok;
    rec.median_us = r.median_us;
    rec.round_us = r.round_us;  // written beside median_us only
    rec.cpu_wait = r.cpu_wait;
    rec.error = r.error;
    rec.timestamp = UnixNow();
    ++result_.measurements;
    if (write_status_.ok()) write_status_ = writer_->Append(rec);
    return write_status_;
  }

  // ---- cost models, one per (device, op) ----
  Status MakeCostModels() {
    if (o_.strategy != "xgb") return Status::Ok();
    for (const auto& k : keys_) {
      OpId id{k.op, k.dtype};
      if (models_.count(id)) continue;
      CostModelOptions mo;
      mo.objective = o_.objective == "rank" ? "rank:pairwise" : "reg:squarederror";
      mo.seed = o_.seed;
      CG_ASSIGN_OR_RETURN(CostModel m, CostModel::Create(mo));
      models_[id] = std::make_unique<CostModel>(std::move(m));
    }
    return Status::Ok();
  }

  // The model of the op with the most keys, serialized for the bundle.
  std::vector<uint8_t> SerializedCostModel() {
    std::vector<uint8_t> out;
    size_t most = 0;
    for (const auto& [op, m] : models_) {
      const size_t n = std::count_if(keys_.begin(), keys_.end(),
                                     [&, op = op](const OpKey& k) { return k.op == op.op && k.dtype == op.dtype; });
      if (n <= most || !m->trained()) continue;
      auto bytes = m->Serialize();
      if (bytes.ok()) {
        out = std::move(*bytes);
        most = n;
      } else {
        logging::Warn("tune: cost model not written: {}", bytes.status().message());
      }
    }
    return out;
  }

  void Report(size_t ki, const OpKey& key, int key_done, double best_us, const std::string& phase) {
    if (!o_.progress) return;
    TuneProgress p;
    p.key_index = ki;
    p.num_keys = keys_.size();
    p.key = key;
    p.key_trials_done = key_done;
    p.key_trials = o_.trials;
    p.trials_done = trials_done_;
    p.trials_total = static_cast<int64_t>(keys_.size()) * o_.trials;
    p.key_best_gflops = Gflops(key, best_us);
    p.elapsed_s = Elapsed();
    if (trials_this_run_ > 0)
      p.eta_s = Elapsed() / double(trials_this_run_) * double(std::max<int64_t>(0, p.trials_total - trials_done_));
    p.phase = phase;
    o_.progress(p);
  }

  // ---- per key: the default, the search, the winner ----
  Status TuneKey(size_t ki) {
    const OpKey& key = keys_[ki];
    KeyState& ks = state_[key.ToString()];
    ks.key = key;
    KeySummary sum;
    sum.key = key;
    sum.resumed = ks.resumed;
    CG_RETURN_IF_ERROR(MeasureDefault(ki, ks, sum));
    CG_RETURN_IF_ERROR(Search(ki, ks, sum));
    sum.trials = static_cast<int>(ks.trials.size());
    for (const auto& r : ks.trials) {
      sum.errors += !r.ok;
      sum.busy += r.ok && r.cpu_wait > o_.max_cpu_wait;
    }
    if (sum.busy > 0 && 4 * sum.busy >= sum.trials) {  // one trial's spike is no busy host
      const std::string busy = fmt::format("{} of {} trials on a busy host (above --max-cpu-wait {:.0f}%)", sum.busy,
                                           sum.trials, 100 * o_.max_cpu_wait);
      logging::Warn("tune: {}: {}: their times may be biased between schedules", key.ToString(), busy);
      sum.note += (sum.note.empty() ? "" : "; ") + busy;
    }
    KeyOutcome out;
    CG_RETURN_IF_ERROR(PickWinner(ki, ks, sum, out));
    CG_RETURN_IF_ERROR(Confirm(ki, ks, sum, out));
    CG_RETURN_IF_ERROR(VerifyBucket(ki, ks, sum, out));
    outcomes_.push_back(out);
    result_.summaries.push_back(sum);
    return Status::Ok();
  }

  // The default schedule, measured once ("default" record; reused on resume).
  Status MeasureDefault(size_t ki, KeyState& ks, KeySummary& sum) {
    const OpKey& key = ks.key;
    if (!ks.def) {
      measurer_->CapCandidateTimeout(0);  // not the previous key's cap
      auto def = DefaultSchedule(key, device());
      if (def.ok()) {
        Report(ki, key, static_cast<int>(ks.trials.size()), 0, "default");
        CG_ASSIGN_OR_RETURN(auto r, measurer_->Measure(key, std::vector<Schedule>{*def}));
        ks.def = r[0];
        ks.Note(r[0]);
        CG_RETURN_IF_ERROR(Log(RecordKind::kDefault, r[0], -1));
      } else {
        logging::Warn("tune: {}: no default schedule: {}", key.ToString(), def.status().message());
      }
    }
    if (ks.def && ks.def->ok) sum.default_us = ks.def->median_us;
    // A candidate 100x slower than the default (a library's reference path, a
    // degenerate blocking) is cut short: it can never win, and the key's budget
    // would go to it. At least 1 s (a library's first call may compile a kernel).
    measurer_->CapCandidateTimeout(sum.default_us > 0 ? std::max(1.0, 100 * sum.default_us * 1e-6 + 0.5) : 0);
    if (ks.def && !ks.def->ok) logging::Warn("tune: {}: default schedule failed: {}", key.ToString(), ks.def->error);
    return Status::Ok();
  }

  // Trials: batches from the strategy until the budget, the space or a time limit ends.
  Status Search(size_t ki, KeyState& ks, KeySummary& sum) {
    const OpKey& key = ks.key;
    const auto key_start = Clock::now();
    auto space = SearchSpace::Create(key, device(), variants_);
    if (!space.ok()) {
      sum.note = fmt::format("no search space: {}", space.status().message());
      logging::Error("tune: {}: {}", key.ToString(), sum.note);
      return Status::Ok();
    }
    std::vector<MeasureResult> history;
    for (const auto& r : warm_)
      if (r.key.op == key.op && r.key.dtype == key.dtype) history.push_back(r);
    for (const auto& [text, other] : state_)
      if (!(other.key == key) && other.key.op == key.op && other.key.dtype == key.dtype) {
        history.insert(history.end(), other.trials.begin(), other.trials.end());
        history.insert(history.end(), other.extra.begin(), other.extra.end());
      }
    StrategyOptions so;
    so.seed = MixHash64(o_.seed ^ key.Hash());
    auto mit = models_.find(OpId{key.op, key.dtype});
    so.model = mit == models_.end() ? nullptr : mit->second.get();
    so.history = history;
    CG_ASSIGN_OR_RETURN(auto strategy, MakeStrategy(o_.strategy, *space, so));
    if (!ks.trials.empty()) strategy->Update(ks.trials);
    double best_us = 0;
    for (const auto& r : ks.trials)
      if (r.ok && (best_us == 0 || r.median_us < best_us)) best_us = r.median_us;
    // Proposals of variants that enumerate candidates per key (a library's own
    // heuristic) are measured first, as trials, unless measured before.
    std::vector<Schedule> proposed;
    for (const KernelVariant* v : space->variants()) {
      if (!v->candidates) continue;
      for (const ParamValues& p : v->candidates(*v, key, device())) {
        Schedule s;
        s.variant = v;
        s.params = p;
        const std::string text = s.ToString();
        if (CheckSchedule(s, key, device()).ok() && !ks.latest_ok.count(text) && !ks.failed.count(text) &&
            std::find(proposed.begin(), proposed.end(), s) == proposed.end())
          proposed.push_back(s);
      }
    }
    if (static_cast<int>(proposed.size()) > o_.trials - static_cast<int>(ks.trials.size()))
      proposed.resize(size_t(std::max(0, o_.trials - static_cast<int>(ks.trials.size()))));
    const double budget_share =
        o_.time_budget_s > 0 ? std::max(0.0, (o_.time_budget_s - Elapsed()) / double(keys_.size() - ki)) : 0;
    while (static_cast<int>(ks.trials.size()) < o_.trials) {
      const double key_s = std::chrono::duration<double>(Clock::now() - key_start).count();
      if (o_.time_budget_s > 0 && key_s >= budget_share && !ks.trials.empty()) {  // every key gets one batch
        sum.note = fmt::format("time budget: this key's share {:.1f} s of {} s used", budget_share, o_.time_budget_s);
        break;
      }
      if (o_.key_time_limit_s > 0 && key_s >= o_.key_time_limit_s) {
        sum.note = fmt::format("key time limit {} s reached", o_.key_time_limit_s);
        break;
      }
      if (o_.total_time_limit_s > 0 && Elapsed() >= o_.total_time_limit_s) {
        sum.note = fmt::format("total time limit {} s reached", o_.total_time_limit_s);
        break;
      }
      const int n = std::min<int>(o_.batch_size, o_.trials - static_cast<int>(ks.trials.size()));
      std::vector<Schedule> batch;
      if (!proposed.empty()) {
        const size_t take = std::min(proposed.size(), size_t(n));
        batch.assign(proposed.begin(), proposed.begin() + long(take));
        proposed.erase(proposed.begin(), proposed.begin() + long(take));
      } else {
        batch = strategy->NextBatch(n);
      }
      if (batch.empty()) {
        sum.note = fmt::format("search space exhausted after {} trials", ks.trials.size());
        break;
      }
      const int64_t first_trial = static_cast<int64_t>(ks.trials.size());
      CG_ASSIGN_OR_RETURN(auto results, measurer_->Measure(key, batch, [&](size_t i, const MeasureResult& r) {
        (void)Log(RecordKind::kTrial, r, first_trial + static_cast<int64_t>(i));
      }));
      CG_RETURN_IF_ERROR(write_status_);
      strategy->Update(results);
      for (const auto& r : results) {
        ks.trials.push_back(r);
        ks.Note(r);
        if (r.ok && (best_us == 0 || r.median_us < best_us)) best_us = r.median_us;
      }
      trials_done_ += static_cast<int64_t>(results.size());
      trials_this_run_ += static_cast<int64_t>(results.size());
      Report(ki, key, static_cast<int>(ks.trials.size()), best_us, "trials");
    }
    return Status::Ok();
  }

  // The noise rule: verified candidates within tie_tolerance of the fastest, the
  // variant leaders and the default are re-measured together and the re-measured
  // medians decide.
  Status PickWinner(size_t ki, KeyState& ks, KeySummary& sum, KeyOutcome& out) {
    const OpKey& key = ks.key;
    std::vector<std::pair<double, Schedule>> ranked;
    {
      std::unordered_map<std::string, bool> seen;
      auto add = [&](const MeasureResult& r) {
        if (!r.ok) return;
        const std::string t = r.schedule.ToString();
        if (seen[t] || ks.failed.count(t)) return;
        seen[t] = true;
        ranked.emplace_back(r.median_us, r.schedule);
      };
      for (const auto& r : ks.trials) add(r);
      if (ks.def) add(*ks.def);
      std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    out.key = key;
    out.trials = static_cast<uint32_t>(ks.trials.size());
    out.tuned_at = static_cast<uint64_t>(UnixNow());
    out.provenance = fmt::format("strategy={} seed={} trials={} objective={} host={} log={}{}{}", o_.strategy, o_.seed,
                                 ks.trials.size(), o_.objective, HostName(), o_.log_path,
                                 o_.provenance_extra.empty() ? "" : " ", o_.provenance_extra);
    out.default_us = sum.default_us;
    if (ranked.empty()) {
      if (sum.note.empty()) sum.note = "no candidate passed the correctness gate";
      return Status::Ok();
    }
    std::vector<Schedule> group;
    for (const auto& [t, s] : ranked)
      if (t <= ranked[0].first * (1 + o_.tie_tolerance) && static_cast<int>(group.size()) < std::max(1, o_.tie_max))
        group.push_back(s);
    // Variant leaders: one unlucky first measurement can put a whole variant far
    // behind (a library has one or a few schedules), so the fastest schedule of each
    // variant not in the group yet joins it when within variant_band of the fastest.
    {
      std::vector<const KernelVariant*> in_group;
      for (const Schedule& s : group) in_group.push_back(s.variant);
      int leaders = 0;
      for (const auto& [t, s] : ranked) {
        if (leaders >= o_.variant_leaders || t > ranked[0].first * (1 + o_.variant_band)) break;
        if (std::find(in_group.begin(), in_group.end(), s.variant) != in_group.end()) continue;
        in_group.push_back(s.variant);
        group.push_back(s);
        ++leaders;
      }
    }
    // A re-measured group is slower than its first measurements (the fastest of many
    // noisy medians is optimistic): the default joins it, whatever its rank, so
    // tuned_us and default_us come from the same interleaved measurement and a
    // default that is really as fast wins.
    if (group.size() > 1 && ks.def && ks.def->ok && std::find(group.begin(), group.end(), ks.def->schedule) == group.end())
      group.push_back(ks.def->schedule);
    out.has_best = true;
    out.best = ranked[0].second;
    out.tuned_us = ranked[0].first;
    if (group.size() > 1) {
      Report(ki, key, sum.trials, ranked[0].first, "remeasure");
      CG_ASSIGN_OR_RETURN(auto re, measurer_->MeasureInterleaved(key, group));
      double best = 0;
      for (const auto& r : re) {
        CG_RETURN_IF_ERROR(Log(RecordKind::kRemeasure, r, -1));
        ks.extra.push_back(r);
        ks.Note(r);
        if (r.ok && (best == 0 || r.median_us < best)) {
          best = r.median_us;
          out.best = r.schedule;
        }
        if (r.ok && ks.def && r.schedule == ks.def->schedule) out.default_us = sum.default_us = r.median_us;
      }
      if (best > 0) {
        out.tuned_us = best;
        sum.remeasured = true;
      }
    }
    // The default schedule also measured as a trial (a library's proposal) is one
    // schedule: its entry compares the default with itself.
    if (ks.def && ks.def->ok && out.best == ks.def->schedule) out.tuned_us = out.default_us;
    sum.has_best = true;
    sum.best = out.best;
    sum.tuned_us = out.tuned_us;
    sum.gflops = Gflops(key, out.tuned_us);
    if (sum.default_us > 0) sum.speedup = sum.default_us / sum.tuned_us;
    return Status::Ok();
  }

  // Two schedules measured together for a verdict (confirm, bucket): measured again
  // while the host was busy (TunerOptions::max_cpu_wait), after a pause that doubles,
  // up to cpu_wait_retries more times. Every try's records are logged as `kind` and
  // noted in `ks`; the last try's results are returned.
  struct PairMeasurement {
    std::vector<MeasureResult> results;
    std::vector<double> busy_waits;  // the cpu_wait of each busy try
    bool busy = false;               // every try was busy (the last one was)
    std::string BusyText(const TunerOptions& o) const {
      std::vector<std::string> shares;
      for (double w : busy_waits) shares.push_back(fmt::format("{:.0f}%", 100 * w));
      return fmt::format("the host was busy in all {} tries ({} of the window lost to other work, above "
                         "--max-cpu-wait {:.0f}%)",
                         busy_waits.size(), fmt::join(shares, ", "), 100 * o.max_cpu_wait);
    }
  };
  StatusOr<PairMeasurement> MeasureForVerdict(const OpKey& key, const std::vector<Schedule>& pair, RecordKind kind,
                                              KeyState& ks, const char* what) {
    PairMeasurement pm;
    double pause_s = o_.cpu_wait_pause_s;
    for (int tries = 1;; ++tries) {
      CG_ASSIGN_OR_RETURN(pm.results, measurer_->MeasureInterleaved(key, pair));
      double wait = -1;
      for (const auto& r : pm.results) {
        CG_RETURN_IF_ERROR(Log(kind, r, -1));
        ks.extra.push_back(r);
        ks.Note(r);
        if (r.ok) wait = std::max(wait, r.cpu_wait);
      }
      pm.busy = wait > o_.max_cpu_wait;
      if (!pm.busy) return pm;
      pm.busy_waits.push_back(wait);
      if (tries > o_.cpu_wait_retries) return pm;
      logging::Warn("tune: {}: {} on a busy host ({:.0f}% of the window lost to other work, above --max-cpu-wait "
                    "{:.0f}%): measuring again in {:.3g} s",
                    key.ToString(), what, 100 * wait, 100 * o_.max_cpu_wait, pause_s);
      std::this_thread::sleep_for(std::chrono::duration<double>(pause_s));
      pause_s *= 2;
    }
  }

  // Step 4: the winner against the default, measured together as serving runs them;
  // the default ships unless the winner is faster beyond the noise.
  Status Confirm(size_t ki, KeyState& ks, KeySummary& sum, KeyOutcome& out) {
    if (!o_.confirm || !out.has_best || !ks.def || !ks.def->ok || out.best == ks.def->schedule) return Status::Ok();
    const OpKey& key = ks.key;
    const Schedule def = ks.def->schedule;
    Report(ki, key, sum.trials, out.tuned_us, "confirm");
    CG_ASSIGN_OR_RETURN(const PairMeasurement pm,
                        MeasureForVerdict(key, {out.best, def}, RecordKind::kConfirm, ks, "confirmation"));
    const std::vector<MeasureResult>& re = pm.results;
    auto add_note = [&](const std::string& n) { sum.note += (sum.note.empty() ? "" : "; ") + n; };
    if (re.size() != 2 || !re[1].ok) {
      add_note(fmt::format("not confirmed: the default failed ({})", re.size() == 2 ? re[1].error : "no result"));
      return Status::Ok();
    }
    const MeasureResult &w = re[0], &d = re[1];
    sum.confirmed = true;
    out.default_us = sum.default_us = d.median_us;
    out.default_spread_us = d.spread_us;
    const PairedComparison pc = ComparePaired(w, d);
    if (w.ok && !pm.busy && pc.Beyond(o_.confirm_min_gain)) {
      out.tuned_us = w.median_us;
      out.tuned_spread_us = w.spread_us;
    } else {
      if (!w.ok)
        add_note(fmt::format("confirm: the winner failed ({}): default shipped", w.error));
      else if (pm.busy)
        add_note(fmt::format("confirm: {}: the winner is not confirmed, default shipped", pm.BusyText(o_)));
      else
        add_note(fmt::format("confirm: {} us against the default's {} us is not faster beyond the noise ({}): "
                             "default shipped",
                             Us(w.median_us), Us(d.median_us), Describe(pc)));
      out.best = def;
      out.tuned_us = d.median_us;
      out.tuned_spread_us = d.spread_us;
      sum.default_shipped = true;
    }
    sum.best = out.best;
    sum.tuned_us = out.tuned_us;
    sum.gflops = Gflops(key, out.tuned_us);
    sum.speedup = sum.default_us / sum.tuned_us;
    return Status::Ok();
  }

  // Step 5: the entry's schedule at each end of the key's bucket against that end
  // key's default, measured together; the bucket ships when it holds at every end.
  Status VerifyBucket(size_t ki, KeyState& ks, KeySummary& sum, KeyOutcome& out) {
    auto bit = buckets_.find(ks.key.ToString());
    if (bit == buckets_.end()) return Status::Ok();
    const auto [lo, hi] = bit->second;
    const OpKey& key = ks.key;
    const std::string range = fmt::format("[{}, {}]", lo, hi);
    auto refuse = [&](const std::string& why) {
      sum.note += fmt::format("{}bucket {} refused: {}", sum.note.empty() ? "" : "; ", range, why);
      logging::Warn("tune: {}: bucket {} refused: {}", key.ToString(), range, why);
      return Status::Ok();
    };
    if (!out.has_best) return refuse("no verified schedule");
    Report(ki, key, sum.trials, out.tuned_us, "bucket");
    std::vector<std::string> checked;
    for (const int64_t e : {lo, hi}) {
      if (e == key.dims[kVaryingDim]) continue;
      const OpKey end = WithVaryingDim(key, e);
      const std::string at = fmt::format("{}={}", VaryingDimName(key.op), e);
      if (Status st = CheckSchedule(out.best, end, device()); !st.ok())
        return refuse(fmt::format("the entry's schedule is not valid at {}: {}", at, st.message()));
      auto def = DefaultSchedule(end, device());
      if (!def.ok()) return refuse(fmt::format("no default schedule at {}: {}", at, def.status().message()));
      if (*def == out.best) {  // a miss there runs this schedule anyway
        checked.push_back(fmt::format("{}: the default itself", at));
        continue;
      }
      KeyState& es = state_[end.ToString()];
      es.key = end;
      CG_ASSIGN_OR_RETURN(const PairMeasurement pm,
                          MeasureForVerdict(end, {out.best, *def}, RecordKind::kBucket, es, "bucket check"));
      const std::vector<MeasureResult>& re = pm.results;
      if (re.size() != 2) return refuse(fmt::format("no result at {}", at));
      const MeasureResult &w = re[0], &d = re[1];
      if (!w.ok) return refuse(fmt::format("the entry's schedule fails at {}: {}", at, w.error));
      if (!d.ok) return refuse(fmt::format("the default fails at {} ({}): nothing verified to compare with", at, d.error));
      if (pm.busy) return refuse(fmt::format("at {}: {}", at, pm.BusyText(o_)));
      if (const PairedComparison pc = ComparePaired(d, w); pc.Beyond(o_.confirm_min_gain))
        return refuse(fmt::format("at {} the entry's schedule takes {} us, the default {} us: slower beyond the noise "
                                  "(the default {})",
                                  at, Us(w.median_us), Us(d.median_us), Describe(pc)));
      checked.push_back(fmt::format("{}: {} us, default {} us", at, Us(w.median_us), Us(d.median_us)));
    }
    out.bucket_lo = sum.bucket_lo = lo;
    out.bucket_hi = sum.bucket_hi = hi;
    logging::Info("tune: {}: bucket {} verified{}{}", key.ToString(), range, checked.empty() ? "" : ": ",
                  fmt::join(checked, "; "));
    return Status::Ok();
  }

  static std::string Us(double us) { return fmt::format("{:.3g}", us); }
  static std::string Describe(const PairedComparison& pc) {
    return fmt::format("faster in {} of {} interleaved rounds, by {:.1f}% in the median round", pc.a_faster, pc.rounds,
                       100 * pc.median_gain);
  }

  // ---- per-op, per-shape-class bundle defaults ----
  StatusOr<std::vector<BundleOpDefault>> ChooseBundleDefaults() {
    std::vector<BundleOpDefault> defaults;
    const std::vector<KeyOutcome>& outcomes = outcomes_;
    const DeviceInfo& device = this->device();
    std::map<std::string, KeyState>& state = state_;
    auto report = [&](size_t ki, const OpKey& key, int done, double best_us, const std::string& phase) {
      Report(ki, key, done, best_us, phase);
    };
    std::map<std::pair<OpId, ShapeClass>, std::vector<size_t>> by_op;
    for (size_t i = 0; i < outcomes.size(); ++i)
      if (outcomes[i].has_best)
        by_op[{OpId{outcomes[i].key.op, outcomes[i].key.dtype}, ShapeClassOf(outcomes[i].key)}].push_back(i);
    for (const auto& [group, idx] : by_op) {
      const auto& [op, shape_class] = group;
      // candidates: the top schedules of every tuned key
      std::vector<Schedule> cands;
      for (size_t i : idx) {
        const KeyState& ks = state[outcomes[i].key.ToString()];
        std::vector<std::pair<double, Schedule>> top;
        for (const auto& [t, us] : ks.latest_ok)
          if (!ks.failed.count(t)) top.emplace_back(us, ks.schedules.at(t));
        std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        if (std::find(cands.begin(), cands.end(), outcomes[i].best) == cands.end()) cands.push_back(outcomes[i].best);
        for (size_t t = 0; t < top.size() && static_cast<int>(t) < o_.default_candidates; ++t)
          if (std::find(cands.begin(), cands.end(), top[t].second) == cands.end()) cands.push_back(top[t].second);
      }
      std::vector<std::vector<double>> times(idx.size(), std::vector<double>(cands.size(), 0));
      std::vector<double> best(idx.size(), 0);
      for (size_t s = 0; s < idx.size(); ++s) {
        KeyState& ks = state[outcomes[idx[s]].key.ToString()];
        const OpKey& key = ks.key;
        std::vector<Schedule> missing;
        std::vector<size_t> missing_c;
        for (size_t c = 0; c < cands.size(); ++c) {
          if (!CheckSchedule(cands[c], key, device).ok()) continue;  // ineligible: stays 0
          if (auto t = ks.TimeOf(cands[c])) {
            times[s][c] = *t;
          } else {
            missing.push_back(cands[c]);
            missing_c.push_back(c);
          }
        }
        if (!missing.empty()) {
          report(idx[s], key, outcomes[idx[s]].trials, outcomes[idx[s]].tuned_us, "bundle default");
          CG_ASSIGN_OR_RETURN(auto rs, measurer_->Measure(key, missing));
          for (size_t j = 0; j < rs.size(); ++j) {
            CG_RETURN_IF_ERROR(Log(RecordKind::kCross, rs[j], -1));
            ks.extra.push_back(rs[j]);
            ks.Note(rs[j]);
            times[s][missing_c[j]] = rs[j].ok ? rs[j].median_us : -1;
          }
        }
        best[s] = outcomes[idx[s]].tuned_us;
        for (double t : times[s])
          if (t > 0 && t < best[s]) best[s] = t;
      }
      // The built-in default (fitted per shape) on the same scale: a bundle default
      // ships only when it beats it, so loading the bundle never slows a miss of this class.
      std::vector<std::vector<double>> builtin_times(idx.size(), std::vector<double>(1, 0));
      for (size_t s = 0; s < idx.size(); ++s) {
        const KeyState& ks = state[outcomes[idx[s]].key.ToString()];
        if (ks.def && ks.def->ok) builtin_times[s][0] = ks.def->median_us;
      }
      double score = 0, builtin_score = 0;
      auto w = ChooseBundleDefault(times, best, &score);
      const bool builtin_known = ChooseBundleDefault(builtin_times, best, &builtin_score).has_value();
      const std::string group_name =
          fmt::format("{} {} {} shapes", OpKindName(op.op), DTypeName(op.dtype), ShapeClassName(shape_class));
      if (w && (!builtin_known || score > builtin_score)) {
        BundleOpDefault d;
        d.op = op.op;
        d.dtype = op.dtype;
        d.shape_class = shape_class;
        d.schedule = ToNamed(cands[*w]);
        defaults.push_back(d);
        logging::Info("tune: bundle default for {}: {} (geomean {:.1f}% of each shape's best over {} shapes, {} "
                      "candidates; built-in default {:.1f}%)",
                      group_name, cands[*w].ToString(), 100 * score, idx.size(), cands.size(), 100 * builtin_score);
      } else if (w) {
        logging::Info("tune: no bundle default for {}: the best candidate ({:.1f}% of each shape's best) does not beat "
                      "the built-in default ({:.1f}%)",
                      group_name, 100 * score, 100 * builtin_score);
      } else {
        logging::Warn("tune: no bundle default for {}: no candidate is valid for every tuned shape", group_name);
      }
    }
    return defaults;
  }

  const TunerOptions& o_;
  const Clock::time_point start_;
  std::span<const KernelVariant* const> variants_;
  std::vector<OpKey> keys_;
  std::map<std::string, std::pair<int64_t, int64_t>> buckets_;  // key text -> its bucket [lo, hi]
  TuneResult result_;
  Measurer* measurer_ = nullptr;
  std::unique_ptr<TuningLogWriter> writer_;
  Status write_status_;
  std::vector<MeasureResult> warm_;
  std::map<std::string, KeyState> state_;  // by key text, every key seen on this device
  std::map<OpId, std::unique_ptr<CostModel>> models_;
  std::vector<KeyOutcome> outcomes_;
  int64_t trials_done_ = 0, trials_this_run_ = 0;
};

}  // namespace

StatusOr<TuneResult> Tune(const TunerOptions& o) {
  CG_RETURN_IF_ERROR(ValidateOptions(o));
  CG_ASSIGN_OR_RETURN(const int threads, ResolveThreadBudget(o.threads, "tune: threads"));
  CG_ASSIGN_OR_RETURN(DeviceInfo device, ProbeDevice(o.device, threads));
  if (o.measurer && !FingerprintMatches(device, o.measurer->device().fingerprint))
    return InvalidArgument(fmt::format("tune: the measurer's device {} is not the device tuned for, {}",
                                       o.measurer->device().fingerprint, device.fingerprint));
  if (!o.measurer && device.backend != Backend::kCpu && o.measure.worker_command.empty())
    return FailedPrecondition(fmt::format("tune: device {} ({}) needs spawned measurement workers "
                                          "(MeasureOptions::worker_command; `tune --sandbox spawn`)",
                                          device.spec, device.name));
  TuneRun run(o, device);
  if (o.measurer) return run.Run(*o.measurer);
  SandboxMeasurer measurer(device, o.measure);
  return run.Run(measurer);
}

}  // namespace cliffguard::tuner
