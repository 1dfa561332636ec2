// Tuner driver: planted bad variants never reach the bundle while tuning goes on;
// every strategy fills a bundle that hits; in-process resume; option errors.
#include "cliffguard/tuner/tuner.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <unordered_map>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cliffguard/runtime.h"
#include "cliffguard/tuner/space.h"
#include "cliffguard/tuner/strategy.h"
#include "cliffguard/tuner/tuning_log.h"

namespace cliffguard::tuner {
namespace testing {
// Defined in measurer_test.cc (same test binary).
std::vector<const KernelVariant*> PlantedVariants();
MeasureOptions FastMeasureOptions();
}  // namespace testing

namespace {

std::string TempPath(const std::string& name) {
  auto p = (std::filesystem::temp_directory_path() / fmt::format("cg_{}_{}", ::getpid(), name)).string();
  std::remove(p.c_str());
  return p;
}

TunerOptions Fast(const std::vector<OpKey>& keys, const std::string& strategy, int trials, const std::string& log) {
  TunerOptions o;
  o.keys = keys;
  o.strategy = strategy;
  o.trials = trials;
  o.batch_size = 4;
  o.log_path = log;
  o.measure = testing::FastMeasureOptions();
  o.measure.timeout_s = 5;
  return o;
}

TEST(TunerTest, PlantedWrongCrashingAndHangingVariantsNeverWin) {
  const std::string log = TempPath("planted.jsonl");
  // The planted space: 12 good + 12 wrong + 1 crashing + 1 hanging point; 26 trials
  // with the grid strategy measure all of them.
  TunerOptions o = Fast({OpKey::Gemm(24, 40, 16)}, "grid", 26, log);
  o.variants = testing::PlantedVariants();
  o.measure.timeout_s = 1.5;
  auto res = Tune(o);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  ASSERT_EQ(res->summaries.size(), 1u);
  const KeySummary& s = res->summaries[0];
  EXPECT_EQ(s.trials, 26);
  EXPECT_EQ(s.errors, 14);
  ASSERT_TRUE(s.has_best);
  ASSERT_EQ(res->bundle.entries.size(), 1u);
  const std::string winner = res->bundle.entries[0].schedule.variant;
  EXPECT_TRUE(winner == "test_f32_gemm_good__scalar" || winner.rfind("cpu_", 0) == 0) << winner;  // default may win
  for (const auto& d : res->bundle.defaults)
    EXPECT_TRUE(d.schedule.variant.find("wrong") == std::string::npos && d.schedule.variant.find("crash") == std::string::npos &&
                d.schedule.variant.find("hang") == std::string::npos)
        << d.schedule.variant;

  auto contents = ReadTuningLog(log);
  ASSERT_TRUE(contents.ok()) << contents.status().ToString();
  int wrong = 0, crash = 0, hang = 0, defaults = 0;
  for (const auto& r : contents->records) {
    defaults += r.kind == RecordKind::kDefault;
    if (r.ok) continue;
    wrong += r.error.find("wrong result: max rel error") != std::string::npos;
    crash += r.error.find("SIGSEGV") != std::string::npos;
    hang += r.error.find("timeout") != std::string::npos;
  }
  EXPECT_EQ(wrong, 12);
  EXPECT_EQ(crash, 1);
  EXPECT_EQ(hang, 1);
  EXPECT_EQ(defaults, 1);
  std::remove(log.c_str());
}

TEST(TunerTest, EveryStrategyFillsABundleThatHits) {
  const std::vector<OpKey> keys = {OpKey::Gemm(32, 64, 64), OpKey::Gemm(8, 96, 32, false, true)};
  for (std::string_view name : StrategyNames()) {
    const std::string log = TempPath(fmt::format("strat_{}.jsonl", name));
    const std::string out = TempPath(fmt::format("strat_{}.cgb", name));
    TunerOptions o = Fast(keys, std::string(name), 8, log);
    int progress_calls = 0;
    o.progress = [&](const TuneProgress& p) {
      ++progress_calls;
      EXPECT_LE(p.trials_done, p.trials_total);
    };
    auto res = Tune(o);
    ASSERT_TRUE(res.ok()) << name << ": " << res.status().ToString();
    EXPECT_GT(progress_calls, 0);
    ASSERT_EQ(res->bundle.entries.size(), keys.size()) << name;
    // At most one default per shape class tuned (small and skinny here), each for its
    // own class; whether one ships depends on measured times (it must beat the built-in default).
    EXPECT_LE(res->bundle.defaults.size(), 2u) << name;
    for (const auto& d : res->bundle.defaults)
      EXPECT_TRUE(d.shape_class == ShapeClassOf(keys[0]) || d.shape_class == ShapeClassOf(keys[1]))
          << name << ": " << ShapeClassName(d.shape_class);
    EXPECT_EQ(!res->bundle.cost_model.empty(), name == "xgb") << name;
    for (const auto& s : res->summaries) {
      EXPECT_EQ(s.trials, 8) << name;
      EXPECT_GT(s.gflops, 0) << name;
      EXPECT_GT(s.default_us, 0) << name;
    }
    ASSERT_TRUE(WriteBundleFile(out, res->bundle).ok());
    auto rt = Runtime::Create();
    ASSERT_TRUE(rt.ok());
    auto rep = (*rt)->LoadBundleFile(out);
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    EXPECT_TRUE(rep->rejected.empty()) << name << ": " << rep->rejected[0].message;
    EXPECT_EQ(rep->defaults_loaded, res->bundle.defaults.size()) << name;
    for (const auto& k : keys) {
      auto r = (*rt)->Resolve(k);
      ASSERT_TRUE(r.ok());
      EXPECT_TRUE(r->hit) << name << " " << k.ToString();
    }
    std::remove(log.c_str());
    std::remove(out.c_str());
  }
}

// conv2d keys tune like gemm keys, in one run beside them: the measurer checks every
// candidate against the double reference (a constant-weights key with its filter
// packed outside the timed calls), one cost model per op, and the bundle's conv2d
// entries hit in a runtime (a plan for the constant-weights key).
TEST(TunerTest, Conv2dKeysTuneBesideGemmKeysIntoABundleThatHits) {
  OpKey packed = OpKey::Conv2d(1, 9, 9, 8, 16, 3, 3, 1, 1, 1, 1);
  packed.constant_weights = true;
  const std::vector<OpKey> keys = {packed, OpKey::Conv2d(2, 7, 6, 3, 10, 1, 1, 2, 2, 0, 0), OpKey::Gemm(16, 32, 24)};
  const std::string log = TempPath("conv.jsonl");
  TunerOptions o = Fast(keys, "xgb", 8, log);
  auto res = Tune(o);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  ASSERT_EQ(res->bundle.entries.size(), keys.size());
  for (const auto& s : res->summaries) {
    EXPECT_EQ(s.trials, 8) << s.key.ToString();
    EXPECT_GT(s.default_us, 0) << s.key.ToString();
  }
  auto contents = ReadTuningLog(log);
  ASSERT_TRUE(contents.ok()) << contents.status().ToString();
  int conv_ok = 0;
  for (const auto& r : contents->records) {
    if (r.key.op != OpKind::kConv2d) continue;
    EXPECT_TRUE(r.ok) << r.key.ToString() << " " << r.schedule.variant << ": " << r.error;
    conv_ok += r.ok;
  }
  EXPECT_GE(conv_ok, 16);
  auto rt = Runtime::Create();
  ASSERT_TRUE(rt.ok());
  auto rep = (*rt)->LoadBundleBuffer(SerializeBundle(res->bundle), "conv.cgb");
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->rejected.empty()) << rep->rejected[0].message;
  for (const auto& k : keys) {
    auto r = (*rt)->Resolve(k);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->hit) << k.ToString();
  }
  OpKey per_call = packed;
  per_call.constant_weights = false;
  std::vector<float> w(size_t(16 * 3 * 3 * 8), 0.5f);
  auto plan = (*rt)->PlanConv2d(per_call, w.data(), ConvWeightLayout::kOihw);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->hit());
  std::remove(log.c_str());
}

// Scripted times, no kernel run: a schedule's time is a fixed function of its text;
// the default takes `default_us`; an interleaved re-measurement adds `remeasure_add`.
class FakeMeasurer final : public Measurer {
 public:
  explicit FakeMeasurer(DeviceInfo device) : device_(std::move(device)) {}
  const DeviceInfo& device() const override { return device_; }
  StatusOr<std::vector<MeasureResult>> Measure(const OpKey& key, std::span<const Schedule> schedules,
                                               const ResultCallback& on_result) override {
    if (batch_sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(batch_sleep_ms));
    if (schedules.size() == 1 && schedules[0] == *DefaultSchedule(key, device_)) caps_at_default.push_back(cap_s);
    auto out = Times(key, schedules, 0);
    for (auto& r : out) r.cpu_wait = trials_cpu_waited++ < trial_cpu_wait_count ? trial_cpu_wait : -1;
    for (size_t i = 0; i < out.size(); ++i)
      if (on_result) on_result(i, out[i]);
    return out;
  }
  StatusOr<std::vector<MeasureResult>> MeasureInterleaved(const OpKey& key, std::span<const Schedule> schedules) override {
    ++interleaved_calls;
    auto out = Times(key, schedules, remeasure_add);
    const Schedule def = *DefaultSchedule(key, device_);
    for (auto& r : out) {
      r.cpu_wait = size_t(interleaved_calls) <= interleaved_cpu_wait.size() ? interleaved_cpu_wait[interleaved_calls - 1]
                                                                            : -1;
      r.round_us.assign(6, r.median_us);
      if (!others_rounds_us.empty() && !(r.schedule == def)) r.round_us = others_rounds_us;
      std::vector<double> sorted = r.round_us;
      std::sort(sorted.begin(), sorted.end());
      r.median_us = 0.5 * (sorted[2] + sorted[3]);
      r.spread_us = 0.5 * (sorted.back() - sorted.front());
    }
    return out;
  }
  void CapCandidateTimeout(double seconds) override { cap_s = seconds; }
  double default_us = 100, remeasure_add = 7;
  double cap_s = 0;                     // the candidate timeout cap in force
  std::vector<double> caps_at_default;  // the cap in force when each key's default was measured
  // Interleaved results have six rounds, each at the result's time, except that
  // every non-default schedule's rounds are these when given.
  std::vector<double> others_rounds_us;
  int batch_sleep_ms = 0;            // wall time a Measure call takes (time-budget tests)
  int interleaved_calls = 0;
  double trial_cpu_wait = -1;               // the cpu_wait of the first Measure results
  int trial_cpu_wait_count = 1 << 30;        // that many of them (then -1)
  int trials_cpu_waited = 0;
  std::vector<double> interleaved_cpu_wait;  // of the i-th MeasureInterleaved call's results (then -1)

 private:
  std::vector<MeasureResult> Times(const OpKey& key, std::span<const Schedule> schedules, double add) const {
    const Schedule def = *DefaultSchedule(key, device_);
    std::vector<MeasureResult> out;
    for (const Schedule& s : schedules) {
      MeasureResult r;
      r.key = key;
      r.schedule = s;
      r.ok = true;
      r.median_us = (s == def ? default_us : TrialUs(s)) + add;
      out.push_back(r);
    }
    return out;
  }
  // 60-80 us by the schedule's hash, plus a thousandth of a microsecond per distinct
  // schedule seen before it: never two schedules at the same time (a tie would make a
  // re-measured group where a test expects a lone leader), on any host's variant set.
  double TrialUs(const Schedule& s) const {
    const std::string text = s.ToString();
    auto it = seen_.try_emplace(text, double(seen_.size())).first;
    return 60 + double(std::hash<std::string>()(text) % 20) + 1e-3 * it->second;
  }
  DeviceInfo device_;
  mutable std::unordered_map<std::string, double> seen_;
};

// Tunes with the fake's scripted times and no bundle default; the log's records.
std::vector<LogRecord> TuneWithFakeTimes(TunerOptions o, FakeMeasurer& fake, TuneResult* result = nullptr) {
  o.bundle_default = false;
  o.measurer = &fake;
  auto res = Tune(o);
  EXPECT_TRUE(res.ok()) << res.status().ToString();
  if (res.ok() && result) *result = *res;
  auto contents = ReadTuningLog(o.log_path);
  EXPECT_TRUE(contents.ok()) << contents.status().ToString();
  return contents.ok() ? contents->records : std::vector<LogRecord>{};
}

// --time-budget: each key searches for its share of what is left, so every key is
// searched (at least one batch) and the run ends near the budget whatever the trial
// count. (The fake takes 20 ms a batch; a slow host only shortens the searches.)
TEST(TunerTest, ATimeBudgetIsSharedOutOverTheKeys) {
  const std::string log = TempPath("budget.jsonl");
  TunerOptions o = Fast({OpKey::Gemm(48, 64, 32), OpKey::Gemm(40, 64, 32), OpKey::Gemm(32, 64, 32)}, "random", 100000, log);
  o.time_budget_s = 0.6;
  o.confirm = false;
  FakeMeasurer fake(HostCpuDevice());
  fake.batch_sleep_ms = 20;
  TuneResult res;
  const auto start = std::chrono::steady_clock::now();
  TuneWithFakeTimes(o, fake, &res);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(res.summaries.size(), 3u);
  for (const auto& s : res.summaries) {
    EXPECT_GE(s.trials, o.batch_size) << s.key.ToString();
    EXPECT_LT(s.trials, 100000) << s.key.ToString();
    EXPECT_NE(s.note.find("time budget"), std::string::npos) << s.key.ToString() << ": " << s.note;
  }
  EXPECT_LT(took, 30.0);
  std::remove(log.c_str());
}

// The noise rule: a re-measured group always includes the default schedule, and the
// summary's default_us and tuned_us are that interleaved measurement's medians.
TEST(TunerTest, TheDefaultIsReMeasuredWithEveryTieGroup) {
  const std::string log = TempPath("ties.jsonl");
  TunerOptions o = Fast({OpKey::Gemm(48, 64, 32)}, "random", 8, log);
  o.tie_tolerance = 0.5;  // every trial (60-79 us) ties; the default (100 us) does not
  o.tie_max = 2;          // and the group is full before the default's rank is reached
  o.variant_leaders = 0;
  o.confirm = false;
  FakeMeasurer fake(HostCpuDevice());
  TuneResult res;
  NamedSchedule def;
  std::vector<LogRecord> re;
  for (const auto& r : TuneWithFakeTimes(o, fake, &res)) {
    if (r.kind == RecordKind::kDefault) def = r.schedule;
    if (r.kind == RecordKind::kRemeasure) re.push_back(r);
  }
  ASSERT_FALSE(def.variant.empty());
  ASSERT_GE(re.size(), 2u) << "no tie group was re-measured";
  const auto d = std::find_if(re.begin(), re.end(), [&](const LogRecord& r) { return r.schedule == def; });
  ASSERT_NE(d, re.end()) << "the default was not re-measured with the group";
  EXPECT_EQ(re.size(), 3u);  // tie_max candidates plus the default
  EXPECT_EQ(fake.interleaved_calls, 1);
  ASSERT_EQ(res.summaries.size(), 1u);
  const KeySummary& s = res.summaries[0];
  EXPECT_DOUBLE_EQ(s.default_us, fake.default_us + fake.remeasure_add);
  EXPECT_DOUBLE_EQ(s.default_us, d->median_us);
  double fastest = d->median_us;
  for (const auto& r : re)
    if (r.ok) fastest = std::min(fastest, r.median_us);
  EXPECT_DOUBLE_EQ(s.tuned_us, fastest);
  std::remove(log.c_str());
}

// A key's default is measured without the previous key's timeout cap (a default
// far slower than the previous key's would be cut short), and the key's trials
// under a cap from its own default.
TEST(TunerTest, EachKeysDefaultIsMeasuredWithoutThePreviousKeysTimeoutCap) {
  const std::string log = TempPath("caps.jsonl");
  TunerOptions o = Fast({OpKey::Gemm(48, 64, 32), OpKey::Gemm(40, 64, 32)}, "random", 4, log);
  o.confirm = false;
  FakeMeasurer fake(HostCpuDevice());
  TuneWithFakeTimes(o, fake);
  EXPECT_EQ(fake.caps_at_default, (std::vector<double>{0, 0}));
  EXPECT_GT(fake.cap_s, 0);
  std::remove(log.c_str());
}

// Variant leaders: the fastest schedule of each other variant within variant_band of
// the fastest joins the re-measured group (at most variant_leaders of them, fastest
// first), even when nothing ties with the fastest.
TEST(TunerTest, TheFastestScheduleOfOtherVariantsJoinsTheReMeasuredGroup) {
  const OpKey key = OpKey::Gemm(48, 64, 32);
  for (const int leaders : {0, 1, 2}) {
    const std::string log = TempPath("leaders.jsonl");
    TunerOptions o = Fast({key}, "random", 12, log);
    o.tie_tolerance = 0;  // no near-tie group: only the leaders make one
    o.variant_leaders = leaders;
    o.variant_band = 0.5;  // trials take 60-80 us: every variant is within 50% of the fastest
    o.confirm = false;
    FakeMeasurer fake(HostCpuDevice());
    fake.default_us = 1000;  // never within the band: the default joins only as the default
    std::vector<LogRecord> trials, re;
    NamedSchedule def;
    for (const auto& r : TuneWithFakeTimes(o, fake)) {
      if (r.kind == RecordKind::kTrial && r.ok) trials.push_back(r);
      if (r.kind == RecordKind::kRemeasure) re.push_back(r);
      if (r.kind == RecordKind::kDefault) def = r.schedule;
    }
    std::stable_sort(trials.begin(), trials.end(), [](const LogRecord& a, const LogRecord& b) { return a.median_us < b.median_us; });
    ASSERT_FALSE(trials.empty());
    std::vector<NamedSchedule> want = {trials[0].schedule};
    std::set<std::string> variants = {trials[0].schedule.variant};
    for (const LogRecord& t : trials)
      if (static_cast<int>(want.size()) <= leaders && variants.insert(t.schedule.variant).second)
        want.push_back(t.schedule);
    ASSERT_EQ(static_cast<int>(want.size()), leaders + 1) << "the trials cover too few variants";
    if (leaders == 0) {
      EXPECT_TRUE(re.empty()) << "a lone leader was re-measured";
      EXPECT_EQ(fake.interleaved_calls, 0);
    } else {
      if (std::find(want.begin(), want.end(), def) == want.end()) want.push_back(def);  // the default joins any group
      std::vector<NamedSchedule> got;
      for (const LogRecord& r : re) got.push_back(r.schedule);
      EXPECT_EQ(got, want) << "leaders " << leaders;
      EXPECT_EQ(fake.interleaved_calls, 1);
    }
    std::remove(log.c_str());
  }
}

// The confirmation: the winner and the default measured together once more; the
// winner ships only when faster beyond the noise, judged round by round, and the
// entry records that measurement's medians and spreads.
TEST(TunerTest, TheConfirmationShipsTheDefaultUnlessTheWinnerIsFasterBeyondNoise) {
  const OpKey key = OpKey::Gemm(48, 64, 32);
  const Schedule def = *DefaultSchedule(key, HostCpuDevice());
  struct Case {
    std::vector<double> others_us;  // the winner's six rounds; the default's are 107 us each
    bool default_ships;
  };
  const Case cases[] = {
      {{103, 103, 103, 103, 103, 103}, false},  // 3.7% faster in every round
      {{104, 104, 104, 104, 104, 104}, true},   // 2.8%: not beyond confirm_min_gain (3%)
      {{106, 106, 106, 106, 106, 106}, true},   // 0.9%
      {{90, 90, 90, 90, 90, 200}, false},       // one slow round does not decide
      {{90, 90, 90, 90, 200, 200}, true},       // faster in 4 of 6 rounds only
      {{110, 110, 110, 110, 110, 110}, true},   // slower
  };
  for (const Case& c : cases) {
    const std::string log = TempPath("confirm.jsonl");
    TunerOptions o = Fast({key}, "random", 6, log);
    o.tie_tolerance = 0;  // a lone leader: no tie group, only the confirmation is interleaved
    o.variant_leaders = 0;
    FakeMeasurer fake(HostCpuDevice());
    fake.others_rounds_us = c.others_us;
    TuneResult res;
    int confirms = 0;
    const std::string what = fmt::format("winner's rounds {} us", fmt::join(c.others_us, ", "));
    for (const auto& r : TuneWithFakeTimes(o, fake, &res)) {
      if (r.kind != RecordKind::kConfirm) continue;
      ++confirms;
      // The log keeps the verdict's evidence: each schedule's rounds.
      const auto sched = ResolveNamed(r.schedule);
      ASSERT_TRUE(sched.ok()) << sched.status().ToString();
      const bool is_default = *sched == *DefaultSchedule(key, fake.device());
      EXPECT_EQ(r.round_us, is_default ? std::vector<double>(6, r.median_us) : c.others_us) << what;
    }
    std::vector<double> sorted = c.others_us;
    std::sort(sorted.begin(), sorted.end());
    const double others_median = 0.5 * (sorted[2] + sorted[3]), others_spread = 0.5 * (sorted.back() - sorted.front());
    EXPECT_EQ(confirms, 2) << what;
    EXPECT_EQ(fake.interleaved_calls, 1) << what;
    ASSERT_EQ(res.summaries.size(), 1u);
    const KeySummary& s = res.summaries[0];
    EXPECT_TRUE(s.confirmed) << what;
    EXPECT_EQ(s.default_shipped, c.default_ships) << what;
    ASSERT_EQ(res.bundle.entries.size(), 1u);
    const BundleEntry& e = res.bundle.entries[0];
    EXPECT_DOUBLE_EQ(e.default_us, fake.default_us + fake.remeasure_add) << what;
    EXPECT_DOUBLE_EQ(e.default_spread_us, 0) << what;
    if (c.default_ships) {
      EXPECT_EQ(e.schedule, ToNamed(def)) << what;
      EXPECT_DOUBLE_EQ(e.tuned_us, e.default_us) << what;
      EXPECT_DOUBLE_EQ(e.tuned_spread_us, 0) << what;
      EXPECT_NE(s.note.find("default shipped"), std::string::npos) << s.note;
      EXPECT_NE(s.note.find("interleaved rounds"), std::string::npos) << s.note;
    } else {
      EXPECT_NE(e.schedule, ToNamed(def)) << what;
      EXPECT_DOUBLE_EQ(e.tuned_us, others_median) << what;
      EXPECT_DOUBLE_EQ(e.tuned_spread_us, others_spread) << what;
    }
    std::remove(log.c_str());
  }
}

// A confirmation on a busy host (cpu_wait above max_cpu_wait) is measured again after
// a pause; the winner ships only from a quiet try, and when every try is busy the
// default ships and the note says so. Every try is in the log.
TEST(TunerTest, AConfirmationOnABusyHostIsMeasuredAgainAndShipsTheDefaultWhenNeverQuiet) {
  const OpKey key = OpKey::Gemm(48, 64, 32);
  const Schedule def = *DefaultSchedule(key, HostCpuDevice());
  struct Case {
    std::vector<double> waits;  // each try's cpu_wait
    double max_cpu_wait;
    int tries;
    bool default_ships;
  };
  const Case cases[] = {
      {{0.02}, 0.10, 1, false},              // quiet
      {{0.10}, 0.10, 1, false},              // at the bound: quiet
      {{0.30, 0.04}, 0.10, 2, false},        // busy, then quiet: the quiet try decides
      {{0.30, 0.25, 0.40}, 0.10, 3, true},   // busy in all three tries
      {{0.30, 0.25, 0.40}, 1.0, 1, false},   // no check
      {{0.30, 0.35}, 0.10, 2, true},         // cpu_wait_retries = 1 below
  };
  for (const Case& c : cases) {
    const std::string what = fmt::format("waits {}, max {}", fmt::join(c.waits, ", "), c.max_cpu_wait);
    const std::string log = TempPath("busy.jsonl");
    TunerOptions o = Fast({key}, "random", 6, log);
    o.tie_tolerance = 0;  // a lone leader: only the confirmation is interleaved
    o.variant_leaders = 0;
    o.max_cpu_wait = c.max_cpu_wait;
    o.cpu_wait_pause_s = 0;
    if (c.waits.size() == 2 && c.default_ships) o.cpu_wait_retries = 1;
    FakeMeasurer fake(HostCpuDevice());
    fake.others_rounds_us = {100, 100, 100, 100, 100, 100};  // 6.5% faster than the default in every round
    fake.interleaved_cpu_wait = c.waits;
    TuneResult res;
    std::vector<double> logged;
    for (const auto& r : TuneWithFakeTimes(o, fake, &res))
      if (r.kind == RecordKind::kConfirm) logged.push_back(r.cpu_wait);
    EXPECT_EQ(fake.interleaved_calls, c.tries) << what;
    ASSERT_EQ(logged.size(), size_t(2 * c.tries)) << what;
    for (int t = 0; t < c.tries; ++t) {
      EXPECT_DOUBLE_EQ(logged[size_t(2 * t)], c.waits[size_t(t)]) << what;
      EXPECT_DOUBLE_EQ(logged[size_t(2 * t + 1)], c.waits[size_t(t)]) << what;
    }
    ASSERT_EQ(res.summaries.size(), 1u);
    const KeySummary& s = res.summaries[0];
    EXPECT_EQ(s.default_shipped, c.default_ships) << what;
    ASSERT_EQ(res.bundle.entries.size(), 1u);
    EXPECT_EQ(res.bundle.entries[0].schedule == ToNamed(def), c.default_ships) << what;
    if (c.default_ships) {
      EXPECT_NE(s.note.find(fmt::format("the host was busy in all {} tries", c.tries)), std::string::npos) << s.note;
      for (double w : c.waits) EXPECT_NE(s.note.find(fmt::format("{:.0f}%", 100 * w)), std::string::npos) << s.note;
      EXPECT_NE(s.note.find("default shipped"), std::string::npos) << s.note;
    } else {
      EXPECT_EQ(s.note.find("busy"), std::string::npos) << s.note;
    }
    std::remove(log.c_str());
  }
}

// Trials measured on a busy host are counted in the key's summary, and named in its
// note when they are at least a quarter of them.
TEST(TunerTest, TrialsOnABusyHostAreCountedInTheSummary) {
  const OpKey key = OpKey::Gemm(48, 64, 32);
  struct Case {
    double wait;
    int count;  // trial results (of 8) with that cpu_wait; the default's is the first
    int busy;
    bool noted;
  };
  for (const Case& c : {Case{-1.0, 9, 0, false}, Case{0.05, 9, 0, false}, Case{0.5, 9, 8, true},
                        Case{0.5, 2, 1, false}, Case{0.5, 3, 2, true}}) {
    const std::string what = fmt::format("cpu_wait {} on {} results", c.wait, c.count);
    const std::string log = TempPath("busy_trials.jsonl");
    TunerOptions o = Fast({key}, "random", 8, log);
    FakeMeasurer fake(HostCpuDevice());
    fake.trial_cpu_wait = c.wait;
    fake.trial_cpu_wait_count = c.count;
    TuneResult res;
    int logged = 0;
    for (const auto& r : TuneWithFakeTimes(o, fake, &res))
      if (r.kind == RecordKind::kTrial) logged += r.cpu_wait == c.wait;
    EXPECT_EQ(logged, std::min(8, c.count - 1)) << what;
    ASSERT_EQ(res.summaries.size(), 1u);
    const KeySummary& s = res.summaries[0];
    EXPECT_EQ(s.busy, c.busy) << what;
    EXPECT_EQ(s.note.find(fmt::format("{} of 8 trials on a busy host", c.busy)) != std::string::npos, c.noted)
        << what << ": " << s.note;
    std::remove(log.c_str());
  }
}

// A variant that proposes candidates per key (as a library's heuristic does): its
// proposals are the first trials, measured before the strategy's batches.
constexpr int32_t kAlgoValues[] = {0, 1, 2, 3, 4, 5, 6, 7};
constexpr ParamSpec kAlgoParams[] = {{"algo", kAlgoValues, 0, "library algorithm id (test)"}};
std::vector<ParamValues> ProposeAlgos(const KernelVariant&, const OpKey&, const DeviceInfo&) {
  ParamValues a{}, b{};
  a[0] = 6;
  b[0] = 3;
  return {a, b, a};  // a duplicate is measured once
}
const KernelVariant kEnumerating = {"test_f32_gemm_library__scalar", Backend::kCpu, OpKind::kGemm, DType::kF32,
                                    kIsaScalar, kAlgoParams, nullptr, nullptr, nullptr, {.gemm = nullptr},
                                    {.gemm = {1, 1}}, &ProposeAlgos};

TEST(TunerTest, ProposalsOfAnEnumeratingVariantAreTheFirstTrials) {
  const std::string log = TempPath("enum.jsonl");
  TunerOptions o = Fast({OpKey::Gemm(8, 16, 8)}, "random", 5, log);
  o.variants = {&kEnumerating};
  FakeMeasurer fake(HostCpuDevice());
  std::vector<int64_t> algos;
  for (const auto& r : TuneWithFakeTimes(o, fake))
    if (r.kind == RecordKind::kTrial) algos.push_back(r.schedule.params.at(0).second);
  ASSERT_EQ(algos.size(), 5u);
  EXPECT_EQ(algos[0], 6);
  EXPECT_EQ(algos[1], 3);
  EXPECT_EQ(std::set<int64_t>(algos.begin(), algos.end()).size(), 5u) << "a proposal was measured twice";
  std::remove(log.c_str());
}

// A library variant whose points are valid only as its heuristic returns them
// (cuBLASLt: 1e14 declared points, a handful valid): its candidates are the first
// trials and the search goes on in the other variants' points, which the space's
// draws, neighbours and grid walk keep to (drawing from the whole space, a GPU
// tuning run stalled on such a block).
constexpr auto kWideValues = [] {
  std::array<int32_t, 1024> v{};
  for (int32_t i = 0; i < 1024; ++i) v[size_t(i)] = i;
  return v;
}();
constexpr ParamSpec kWideParams[] = {{"algo", kWideValues, 0, "algorithm id (test)"},
                                     {"tile", kWideValues, 0, "tile id (test)"},
                                     {"stages", kWideValues, 0, "stages id (test)"},
                                     {"swizzle", kWideValues, 0, "swizzle (test)"}};
std::vector<ParamValues> ProposeTwo(const KernelVariant&, const OpKey&, const DeviceInfo&) {
  ParamValues a{}, b{};
  a = {5, 7, 9, 1};
  b = {6, 2, 3, 0};
  return {a, b};
}
bool NotProposed(const KernelVariant& v, const OpKey& key, const ParamValues& p) {
  for (const ParamValues& c : ProposeTwo(v, key, DeviceInfo{}))
    if (c == p) return false;
  return true;
}
const KernelVariant kCandidatesOnly = [] {
  KernelVariant v = {"test_f32_gemm_algos__scalar", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar,
                     kWideParams, nullptr, nullptr, nullptr, {.gemm = nullptr}, {.gemm = {1, 1}}, &ProposeTwo};
  v.redundant = &NotProposed;
  v.candidates_only = true;
  return v;
}();

TEST(TunerTest, ACandidatesOnlyVariantIsMeasuredFromItsCandidatesAndNotSearched) {
  const OpKey key = OpKey::Gemm(96, 96, 96);
  const DeviceInfo host = HostCpuDevice();
  const KernelVariant* own = FindKernelVariant("cpu_f32_gemm_4x4__scalar");
  ASSERT_NE(own, nullptr);
  const KernelVariant* both[] = {&kCandidatesOnly, own};
  auto space = SearchSpace::Create(key, host, both);
  ASSERT_TRUE(space.ok()) << space.status().ToString();
  ASSERT_EQ(space->num_variants(), 2);
  EXPECT_EQ(space->num_searched_variants(), 1);
  EXPECT_EQ(space->variants()[0], own);  // the searched blocks come first
  EXPECT_EQ(space->searched_size(), space->variant_size(0));
  EXPECT_EQ(space->size(), space->variant_size(0) + (uint64_t{1} << 40));
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200; ++i) {
    auto k = space->SampleValid(rng, 8);
    ASSERT_TRUE(k.has_value());
    EXPECT_EQ(k->variant, 0);
    auto n = space->Neighbour(*k, rng, 1.0);
    if (n) EXPECT_EQ(n->variant, 0) << "a neighbour switched into the candidates-only variant";
  }
  for (const std::string strategy : {"xgb", "random", "grid", "ga"}) {
    SCOPED_TRACE(strategy);
    const std::string log = TempPath("candidates_only.jsonl");
    TunerOptions o = Fast({key}, strategy, 12, log);
    o.variants = {both[0], both[1]};
    FakeMeasurer fake(host);
    std::vector<std::string> trials;
    for (const auto& r : TuneWithFakeTimes(o, fake))
      if (r.kind == RecordKind::kTrial) trials.push_back(r.schedule.variant);
    ASSERT_EQ(trials.size(), 12u) << "the search found too few of the own variant's points";
    EXPECT_EQ(trials[0], kCandidatesOnly.name);
    EXPECT_EQ(trials[1], kCandidatesOnly.name);
    for (size_t i = 2; i < trials.size(); ++i) EXPECT_EQ(trials[i], own->name);
    std::remove(log.c_str());
  }
}

TEST(TunerTest, ResumeContinuesWithoutRepeatingAndExistingLogIsRefused) {
  const std::string log = TempPath("resume.jsonl");
  const OpKey key = OpKey::Gemm(16, 64, 48);
  TunerOptions o = Fast({key}, "random", 6, log);
  ASSERT_TRUE(Tune(o).ok());
  o.trials = 10;
  auto refused = Tune(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("--resume"), std::string::npos);
  o.resume = true;
  auto res = Tune(o);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->summaries[0].resumed, 6);
  EXPECT_EQ(res->summaries[0].trials, 10);
  auto contents = ReadTuningLog(log);
  ASSERT_TRUE(contents.ok());
  std::set<std::string> seen;
  std::set<int64_t> indices;
  int defaults = 0;
  for (const auto& r : contents->records) {
    defaults += r.kind == RecordKind::kDefault;
    if (r.kind != RecordKind::kTrial) continue;
    EXPECT_TRUE(seen.insert(RecordToJson(LogRecord{.schedule = r.schedule})).second) << "repeated measurement";
    EXPECT_TRUE(indices.insert(r.trial).second);
  }
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(*indices.rbegin(), 9);
  EXPECT_EQ(defaults, 1);  // the default record was reused, not re-measured
  std::remove(log.c_str());
}

TEST(TunerTest, WarmStartFromAnotherLogTransfersToANewShape) {
  const std::string first = TempPath("warm_a.jsonl"), second = TempPath("warm_b.jsonl");
  ASSERT_TRUE(Tune(Fast({OpKey::Gemm(32, 64, 64)}, "random", 8, first)).ok());
  TunerOptions o = Fast({OpKey::Gemm(24, 96, 64)}, "xgb", 4, second);
  o.warm_start_logs = {first};
  auto res = Tune(o);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->summaries[0].trials, 4);
  EXPECT_EQ(res->summaries[0].resumed, 0);  // history, not trials
  EXPECT_FALSE(res->bundle.cost_model.empty());
  o.warm_start_logs = {TempPath("no_such_log.jsonl")};
  std::remove(second.c_str());
  auto missing = Tune(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no_such_log"), std::string::npos);
  std::remove(first.c_str());
  std::remove(second.c_str());
}

TEST(TunerTest, BadOptionsNameTheValue) {
  const std::string log = TempPath("bad.jsonl");
  TunerOptions o = Fast({OpKey::Gemm(8, 8, 8)}, "annealing", 4, log);
  auto r = Tune(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("annealing"), std::string::npos);
  o.strategy = "random";
  o.trials = 0;
  EXPECT_NE(Tune(o).status().message().find("trials=0"), std::string::npos);
  o.trials = 4;
  o.objective = "lambdamart";
  EXPECT_NE(Tune(o).status().message().find("lambdamart"), std::string::npos);
  o.objective = "rank";
  o.keys.clear();
  EXPECT_FALSE(Tune(o).ok());
  std::remove(log.c_str());
}

}  // namespace
}  // namespace cliffguard::tuner
