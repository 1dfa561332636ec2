#include "cliffguard/tuner/tuner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>
#include "cliffguard/detail/logging.h"

#include "cliffguard/tuner/cost_model.h"
#include "cliffguard/tuner/space.h"
#include "cliffguard/tuner/strategy.h"
#include "cliffguard/tuner/tuning_log.h"

namespace cliffguard::tuner {

double Gflops(const OpKey& key, double us) { return us > 0 ? key.Flops() / (us * 1e3) : 0; }

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

Status ValidateOptions(const TunerOptions& o) {
  if (o.keys.empty()) return InvalidArgument("tune: no op keys given (--shape, --workload or --from-report)");
  for (const auto& k : o.keys) {
    Status st = k.Validate();
    if (!st.ok()) return InvalidArgument(fmt::format("tune: key '{}': {}", k.ToString(), st.message()));
  }
  if (o.trials < 1) return InvalidArgument(fmt::format("tune: trials={} must be >= 1", o.trials));
  if (o.batch_size < 1) return InvalidArgument(fmt::format("tune: batch={} must be >= 1", o.batch_size));
  if (o.log_path.empty()) return InvalidArgument("tune: a tuning log path is required (--log)");
  const auto names = StrategyNames();
  if (std::find(names.begin(), names.end(), o.strategy) == names.end())
    return InvalidArgument(fmt::format("tune: strategy '{}' is not one of: {}", o.strategy, fmt::join(names, ", ")));
  if (o.objective != "rank" && o.objective != "reg")
    return InvalidArgument(fmt::format("tune: objective '{}' is not one of: rank, reg", o.objective));
  if (o.tie_tolerance < 0 || o.tie_tolerance > 0.5)
    return InvalidArgument(fmt::format("tune: tie tolerance {} must be in [0, 0.5]", o.tie_tolerance));
  if (o.measure.min_time_ms <= 0 || o.measure.min_repeats < 1)
    return InvalidArgument(fmt::format("tune: min measure time {} ms must be > 0 and min repeats {} >= 1",
                                       o.measure.min_time_ms, o.measure.min_repeats));
  if (o.threads < 0) return InvalidArgument(fmt::format("tune: threads={} must be >= 0 (0: the default budget)", o.threads));
  if (o.measure.timeout_s < 0)
    return InvalidArgument(fmt::format("tune: timeout {} s must be >= 0 (0: 30 s)", o.measure.timeout_s));
  if (o.key_time_limit_s < 0 || o.total_time_limit_s < 0)
    return InvalidArgument(fmt::format("tune: time limits ({} s per key, {} s total) must be >= 0 (0: none)",
                                       o.key_time_limit_s, o.total_time_limit_s));
  for (const auto* v : o.variants)
    if (!v) return InvalidArgument("tune: a null kernel variant was given");
  return Status::Ok();
}

}  // namespace

StatusOr<TuneResult> Tune(const TunerOptions& o) {
  CG_RETURN_IF_ERROR(ValidateOptions(o));
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  TuneResult result;
  CG_ASSIGN_OR_RETURN(const int threads, ResolveThreadBudget(o.threads, "tune: threads"));
  result.device = HostCpuDevice(threads);
  const DeviceInfo& device = result.device;
  const std::vector<OpKey> keys = [&] {
    std::vector<OpKey> k;
    for (const auto& key : o.keys)
      if (std::find(k.begin(), k.end(), key) == k.end()) k.push_back(key);
    return k;
  }();
  std::span<const KernelVariant* const> variants(o.variants);

  // ---- the log ----
  std::vector<LogRecord> previous;
  int64_t keep_bytes = -1;
  std::error_code ec;
  const bool exists = std::filesystem::exists(o.log_path, ec);
  if (o.resume) {
    auto log = ReadTuningLog(o.log_path);
    if (log.ok()) {
      previous = std::move(log->records);
      keep_bytes = log->valid_bytes;
    } else if (log.status().code() != StatusCode::kNotFound) {
      return log.status();
    } else {
      logging::Info("tune: --resume: log {} does not exist yet; starting a new one", o.log_path);
    }
  } else if (exists && std::filesystem::file_size(o.log_path, ec) > 0) {
    return FailedPrecondition(fmt::format(
        "tune: log '{}' already holds measurements; pass --resume to continue it, or remove it", o.log_path));
  }
  std::vector<MeasureResult> warm;
  for (const auto& path : o.warm_start_logs) {
    auto log = ReadTuningLog(path);
    if (!log.ok()) return Status(log.status().code(), fmt::format("tune: warm-start log: {}", log.status().message()));
    size_t used = 0;
    for (const auto& rec : log->records) {
      if (rec.device != device.fingerprint) continue;
      auto mr = ToMeasureResult(rec, variants);
      if (!mr.ok()) continue;
      warm.push_back(*mr);
      ++used;
    }
    logging::Info("tune: warm-start log {}: {} of {} records used (device {})", path, used, log->records.size(),
                 device.fingerprint);
  }
  CG_ASSIGN_OR_RETURN(auto writer, TuningLogWriter::Open(o.log_path, o.resume ? TuningLogWriter::Mode::kAppend
                                                                                : TuningLogWriter::Mode::kTruncate,
                                                         keep_bytes));
  Status write_status;
  auto log_result = [&](RecordKind kind, const MeasureResult& r, int64_t trial) {
    LogRecord rec;
    rec.kind = kind;
    rec.key = r.key;
    rec.device = device.fingerprint;
    rec.schedule = ToNamed(r.schedule);
    rec.strategy = kind == RecordKind::kDefault ? "default" : o.strategy;
    rec.seed = o.seed;
    rec.trial = trial;
    rec.ok = r.ok;
    rec.median_us = r.median_us;
    rec.error = r.error;
    rec.timestamp = UnixNow();
    ++result.measurements;
    if (write_status.ok()) write_status = writer->Append(rec);
  };

  // ---- state from the log ----
  std::map<std::string, KeyState> state;  // by key text, every key seen on this device
  size_t other_device = 0, unresolved = 0;
  for (const auto& rec : previous) {
    if (rec.device != device.fingerprint) {
      ++other_device;
      continue;
    }
    auto mr = ToMeasureResult(rec, variants);
    if (!mr.ok()) {
      ++unresolved;
      continue;
    }
    KeyState& ks = state[rec.key.ToString()];
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
    logging::Warn("tune: {} log records of other devices ignored (this device: {})", other_device, device.fingerprint);
  if (unresolved) logging::Warn("tune: {} log records name kernel variants not in this build; ignored", unresolved);

  // ---- cost models, one per (device, op) ----
  std::map<OpId, std::unique_ptr<CostModel>> models;
  if (o.strategy == "xgb") {
    for (const auto& k : keys) {
      OpId id{k.op, k.dtype};
      if (models.count(id)) continue;
      CostModelOptions mo;
      mo.objective = o.objective == "rank" ? "rank:pairwise" : "reg:squarederror";
      mo.seed = o.seed;
      CG_ASSIGN_OR_RETURN(CostModel m, CostModel::Create(mo));
      models[id] = std::make_unique<CostModel>(std::move(m));
    }
  }

  Measurer measurer(device, o.measure);
  const int64_t trials_total = static_cast<int64_t>(keys.size()) * o.trials;
  int64_t trials_done = 0, trials_this_run = 0;
  for (const auto& k : keys) {
    auto it = state.find(k.ToString());
    if (it != state.end()) trials_done += std::min<int64_t>(o.trials, it->second.trials.size());
  }
  auto report = [&](size_t ki, const OpKey& key, int key_done, double best_us, const std::string& phase) {
    if (!o.progress) return;
    TuneProgress p;
    p.key_index = ki;
    p.num_keys = keys.size();
    p.key = key;
    p.key_trials_done = key_done;
    p.key_trials = o.trials;
    p.trials_done = trials_done;
    p.trials_total = trials_total;
    p.key_best_gflops = Gflops(key, best_us);
    p.elapsed_s = elapsed();
    if (trials_this_run > 0) p.eta_s = elapsed() / trials_this_run * std::max<int64_t>(0, trials_total - trials_done);
    p.phase = phase;
    o.progress(p);
  };

  std::vector<KeyOutcome> outcomes;
  for (size_t ki = 0; ki < keys.size(); ++ki) {
    const OpKey& key = keys[ki];
    KeyState& ks = state[key.ToString()];
    ks.key = key;
    KeySummary sum;
    sum.key = key;
    sum.resumed = ks.resumed;
    const auto key_start = Clock::now();

    // 1. the default schedule
    if (!ks.def) {
      auto def = DefaultSchedule(key, device);
      if (def.ok()) {
        report(ki, key, static_cast<int>(ks.trials.size()), 0, "default");
        CG_ASSIGN_OR_RETURN(auto r, measurer.Measure(key, std::vector<Schedule>{*def}));
        ks.def = r[0];
        ks.Note(r[0]);
        log_result(RecordKind::kDefault, r[0], -1);
        CG_RETURN_IF_ERROR(write_status);
      } else {
        logging::Warn("tune: {}: no default schedule: {}", key.ToString(), def.status().message());
      }
    }
    if (ks.def && ks.def->ok) sum.default_us = ks.def->median_us;
    if (ks.def && !ks.def->ok) logging::Warn("tune: {}: default schedule failed: {}", key.ToString(), ks.def->error);

    // 2. trials
    auto space = SearchSpace::Create(key, device, variants);
    if (!space.ok()) {
      sum.note = fmt::format("no search space: {}", space.status().message());
      logging::Error("tune: {}: {}", key.ToString(), sum.note);
    } else {
      std::vector<MeasureResult> history;
      for (const auto& r : warm)
        if (r.key.op == key.op && r.key.dtype == key.dtype) history.push_back(r);
      for (const auto& [text, other] : state)
        if (!(other.key == key) && other.key.op == key.op && other.key.dtype == key.dtype) {
          history.insert(history.end(), other.trials.begin(), other.trials.end());
          history.insert(history.end(), other.extra.begin(), other.extra.end());
        }
      StrategyOptions so;
      so.seed = MixHash64(o.seed ^ key.Hash());
      auto mit = models.find(OpId{key.op, key.dtype});
      so.model = mit == models.end() ? nullptr : mit->second.get();
      so.history = history;
      CG_ASSIGN_OR_RETURN(auto strategy, MakeStrategy(o.strategy, *space, so));
      if (!ks.trials.empty()) strategy->Update(ks.trials);
      double best_us = 0;
      for (const auto& r : ks.trials)
        if (r.ok && (best_us == 0 || r.median_us < best_us)) best_us = r.median_us;
      while (static_cast<int>(ks.trials.size()) < o.trials) {
        const double key_s = std::chrono::duration<double>(Clock::now() - key_start).count();
        if (o.key_time_limit_s > 0 && key_s >= o.key_time_limit_s) {
          sum.note = fmt::format("key time limit {} s reached", o.key_time_limit_s);
          break;
        }
        if (o.total_time_limit_s > 0 && elapsed() >= o.total_time_limit_s) {
          sum.note = fmt::format("total time limit {} s reached", o.total_time_limit_s);
          break;
        }
        const int n = std::min<int>(o.batch_size, o.trials - static_cast<int>(ks.trials.size()));
        std::vector<Schedule> batch = strategy->NextBatch(n);
        if (batch.empty()) {
          sum.note = fmt::format("search space exhausted after {} trials", ks.trials.size());
          break;
        }
        const int64_t first_trial = static_cast<int64_t>(ks.trials.size());
        CG_ASSIGN_OR_RETURN(auto results, measurer.Measure(key, batch, [&](size_t i, const MeasureResult& r) {
          log_result(RecordKind::kTrial, r, first_trial + static_cast<int64_t>(i));
        }));
        CG_RETURN_IF_ERROR(write_status);
        strategy->Update(results);
        for (const auto& r : results) {
          ks.trials.push_back(r);
          ks.Note(r);
          if (r.ok && (best_us == 0 || r.median_us < best_us)) best_us = r.median_us;
        }
        trials_done += static_cast<int64_t>(results.size());
        trials_this_run += static_cast<int64_t>(results.size());
        report(ki, key, static_cast<int>(ks.trials.size()), best_us, "trials");
      }
    }
    sum.trials = static_cast<int>(ks.trials.size());
    for (const auto& r : ks.trials) sum.errors += !r.ok;

    // 3. noise-aware winner
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
    KeyOutcome out;
    out.key = key;
    out.trials = static_cast<uint32_t>(ks.trials.size());
    out.tuned_at = static_cast<uint64_t>(UnixNow());
    out.provenance = fmt::format("strategy={} seed={} trials={} objective={} host={} log={}{}{}", o.strategy, o.seed,
                                 ks.trials.size(), o.objective, HostName(), o.log_path,
                                 o.provenance_extra.empty() ? "" : " ", o.provenance_extra);
    out.default_us = sum.default_us;
    if (!ranked.empty()) {
      std::vector<Schedule> group;
      for (const auto& [t, s] : ranked)
        if (t <= ranked[0].first * (1 + o.tie_tolerance) && static_cast<int>(group.size()) < std::max(1, o.tie_max))
          group.push_back(s);
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
        report(ki, key, sum.trials, ranked[0].first, "remeasure");
        CG_ASSIGN_OR_RETURN(auto re, measurer.MeasureInterleaved(key, group));
        double best = 0;
        for (const auto& r : re) {
          log_result(RecordKind::kRemeasure, r, -1);
          ks.extra.push_back(r);
          ks.Note(r);
          if (r.ok && (best == 0 || r.median_us < best)) {
            best = r.median_us;
            out.best = r.schedule;
          }
          if (r.ok && ks.def && r.schedule == ks.def->schedule) out.default_us = sum.default_us = r.median_us;
        }
        CG_RETURN_IF_ERROR(write_status);
        if (best > 0) {
          out.tuned_us = best;
          sum.remeasured = true;
        }
      }
      sum.has_best = true;
      sum.best = out.best;
      sum.tuned_us = out.tuned_us;
      sum.gflops = Gflops(key, out.tuned_us);
      if (sum.default_us > 0) sum.speedup = sum.default_us / sum.tuned_us;
    } else if (sum.note.empty()) {
      sum.note = "no candidate passed the correctness gate";
    }
    outcomes.push_back(out);
    result.summaries.push_back(sum);
  }

  // ---- per-op, per-shape-class bundle defaults ----
  std::vector<BundleOpDefault> defaults;
  if (o.bundle_default) {
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
        for (size_t t = 0; t < top.size() && static_cast<int>(t) < o.default_candidates; ++t)
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
          CG_ASSIGN_OR_RETURN(auto rs, measurer.Measure(key, missing));
          for (size_t j = 0; j < rs.size(); ++j) {
            log_result(RecordKind::kCross, rs[j], -1);
            ks.extra.push_back(rs[j]);
            ks.Note(rs[j]);
            times[s][missing_c[j]] = rs[j].ok ? rs[j].median_us : -1;
          }
          CG_RETURN_IF_ERROR(write_status);
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
  }

  // ---- the cost model: of the op with the most keys ----
  std::vector<uint8_t> model_bytes;
  {
    size_t most = 0;
    for (const auto& [op, m] : models) {
      size_t n = std::count_if(keys.begin(), keys.end(), [&, op = op](const OpKey& k) { return k.op == op.op && k.dtype == op.dtype; });
      if (n > most && m->trained()) {
        auto bytes = m->Serialize();
        if (bytes.ok()) {
          model_bytes = std::move(*bytes);
          most = n;
        } else {
          logging::Warn("tune: cost model not written: {}", bytes.status().message());
        }
      }
    }
  }
  result.bundle = MakeBundleSpec(device, outcomes, std::move(defaults), std::move(model_bytes),
                                 static_cast<uint64_t>(UnixNow()));
  return result;
}

}  // namespace cliffguard::tuner
