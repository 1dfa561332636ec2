// The tuner driver: for each op key, asks a search strategy for batches of
// schedules, measures them (measurer.h), logs every measurement (tuning_log.h),
// feeds results back, decides the winner with a noise-aware rule, and assembles a
// bundle (bundle_writer.h). It runs in phases (tuner.cc): log replay, then per key
// the default, the search and the noise rule, then bundle defaults and the cost model.
//
// Per key:
//   1. the default schedule (DefaultSchedule) is measured once ("default" record;
//      reused from the log on --resume): the size of the cliff a miss falls off.
//   2. trials: first the proposals of variants that enumerate candidates per key
//      (KernelVariant::candidates, a library's heuristic), then batches of up to
//      batch_size from the strategy until `trials`
//      measurements of this key exist (resumed ones count), the space is
//      exhausted, or a time limit passes.
//   3. noise rule: every verified candidate (the default included) whose median is
//      within tie_tolerance (10%) of the fastest, at most tie_max of them, is
//      re-measured together, interleaved over several rounds with more calls
//      ("remeasure" records), and the re-measured medians decide the winner and its
//      tuned_us. The fastest schedule of each other variant within variant_band
//      (50%) of the fastest joins the group (at most variant_leaders of them), and
//      so does the default schedule (beyond tie_max), so default_us comes from the
//      same measurement. A lone leader with no variant within the band is not
//      re-measured.
//   4. confirmation: the winner and the default, measured together again (interleaved
//      rounds of runs of calls, as the serving path runs them: B packed once for a
//      constant-weights key and rotated over copies; "confirm" records). The winner
//      ships only when it is faster beyond the noise, judged round by round
//      (ComparePaired): faster in at least three quarters of the rounds, and by more
//      than confirm_min_gain in the median round. Else the default ships as the key's
//      entry (a hit that runs the default). The entry records both times and spreads
//      of this measurement. A measurement on a busy host (cpu_wait above
//      max_cpu_wait) is taken again after a pause; when every try is busy the
//      default ships.
//   5. bucket check (keys of TunerOptions::buckets only): at each end e of the range
//      other than the key's own varying dimension, the end key
//      WithVaryingDim(key, e) measures what ships (step 4's choice) against
//      DefaultSchedule(end key), together, interleaved ("bucket" records, whose key
//      is the end key). The bucket ships when, at every end, the shipped schedule is
//      valid (CheckSchedule), passes the correctness gate, and the end default is
//      not faster than it beyond the noise (ComparePaired, as in step 4). An end
//      whose default is the shipped
//      schedule passes unmeasured. An end whose default fails refuses the bucket
//      (nothing verified to compare with), and so does an end measured on a busy
//      host in every try (as in step 4). A refused bucket leaves the entry exact;
//      the note names the end and both times.
// Then, per op and shape class, the bundle default (docs/tuning.md): candidates are
// the top default_candidates schedules of every tuned key of the class; each
// candidate's time on each other shape comes from the log or is measured now
// ("cross" records); it ships only when it beats the built-in default there.
//
// Cost model: one CostModel per (device, op) shared by every key of the run and
// warm-started with every log record of other keys on this device (transfer
// across shapes), plus every record of this device in warm_start_logs. With the xgb strategy it steers the search; it is serialized
// into the bundle ("xgboost-json"). Other strategies do not train a model and write
// none.
//
// Resume: with resume=true the log is read (a partial last line is dropped and cut
// off), records of this device are fed to the strategy through Update before its
// first batch and count toward the trial budget, so no trial is repeated; the
// default record is reused. Other records (remeasure, cross, confirm, bucket) are
// kept with the key they measured (a bucket record with its end key); the near-tie
// re-measurement, the confirmation and the bucket check run again. Without resume an existing non-empty log is refused (never overwritten).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cliffguard/bundle.h"
#include "cliffguard/kernel.h"
#include "cliffguard/op_key.h"
#include "cliffguard/status.h"
#include "cliffguard/tuner/bundle_writer.h"
#include "cliffguard/tuner/measurer.h"

namespace cliffguard::tuner {

struct TuneProgress {
  size_t key_index = 0, num_keys = 0;  // the key being tuned
  OpKey key;
  int key_trials_done = 0, key_trials = 0;  // this key (resumed trials included)
  int64_t trials_done = 0, trials_total = 0;  // the whole run
  double key_best_gflops = 0;  // best verified GFLOP/s of this key so far (0: none yet)
  double elapsed_s = 0;
  double eta_s = -1;           // estimated seconds left for the run; -1 unknown
  std::string phase;           // "default", "trials", "remeasure", "confirm", "bucket", "bundle default"
};

struct KeySummary {
  OpKey key;
  bool has_best = false;
  Schedule best;
  double default_us = 0;  // 0: the default schedule failed or was not measured
  double tuned_us = 0;
  double speedup = 0;     // default_us / tuned_us; 0 when unknown
  double gflops = 0;      // of the tuned schedule
  int trials = 0;         // trial records of this key (resumed included)
  int errors = 0;         // trial records that are errors (wrong result, crash, timeout, ...)
  int resumed = 0;        // trial records taken from the log
  bool remeasured = false;  // the near-tie rule re-measured candidates
  bool confirmed = false;   // the confirmation measured the winner against the default
  bool default_shipped = false;  // the confirmation found the winner no faster (or the host busy): the default ships
  int busy = 0;           // trial records whose cpu_wait exceeds max_cpu_wait (measured on a busy host)
  int64_t bucket_lo = 0, bucket_hi = 0;  // the bucket shipped with the entry (0, 0: none)
  std::string note;       // why a key has no best, why its bucket was refused, etc.
};

// A bucket to tune: `key` (its representative) is tuned like any key, then its
// winner is checked at the range's ends (the keys of its family with the varying
// dimension at lo and at hi): correct there and not slower than each end's own
// default beyond the noise (the confirmation's rule; step 5 above). The entry ships
// with the bucket [lo, hi] when both ends pass, else without a bucket (the note says
// why). lo <= key's varying dimension <= hi (CheckBucket). The ranges of one family
// (KeyFamily) must not overlap; one key has at most one range. buckets.h builds
// targets from a spec ("m:pow2:64") or takes them from a miss report.
struct BucketTarget {
  OpKey key;
  int64_t lo = 0, hi = 0;
};

struct TunerOptions {
  std::vector<OpKey> keys;           // at least one key or bucket
  std::vector<BucketTarget> buckets;  // their keys are tuned too (with `keys`, deduplicated)
  int trials = 64;                   // trial measurements per key (resumed ones count)
  std::string strategy = "xgb";      // one of StrategyNames()
  uint64_t seed = 1;
  int batch_size = 8;                // schedules per strategy batch / measurer worker
  std::string log_path;              // JSONL tuning log; required
  bool resume = false;
  // Other tuning logs whose records (of this device) warm-start the cost model (xgb)
  // as history only: they are not trials of this run and do not stop a schedule from
  // being measured again. Missing or corrupt files are errors.
  std::vector<std::string> warm_start_logs;
  std::string objective = "rank";    // cost model objective: "rank" (rank:pairwise) or "reg" (reg:squarederror)
  double key_time_limit_s = 0;       // stop a key's trials after this long; 0: none
  double total_time_limit_s = 0;     // stop starting new batches after this long; 0: none
  // Wall-time budget of the whole run's searches, shared out as it goes: each key may
  // search for (budget - time used so far) / (keys left), so what a key leaves unused
  // passes to the keys after it. Defaults, confirmations and the bundle default run
  // outside the searches' shares (the run's wall time slightly exceeds the budget).
  // 0: none.
  double time_budget_s = 0;
  std::string device;                // the device tuned for (ProbeDevice): "" or "cpu", "cuda:N"
  int threads = 0;                   // CPU thread budget (ResolveThreadBudget); 0: default
  MeasureOptions measure;            // for the SandboxMeasurer made when `measurer` is null
  // Measures the candidates (non-owning; must be for `device`). nullptr: a
  // SandboxMeasurer with `measure`. Tests pass a fake with scripted times.
  Measurer* measurer = nullptr;
  double tie_tolerance = 0.10;       // near-tie band for re-measurement (relative; docs/tuning.md)
  int tie_max = 4;                   // at most this many near-ties re-measured per key (leaders and the default on top)
  // Variant leaders join the re-measured group (step 3): the fastest schedule of
  // each variant not in it, within variant_band of the fastest (relative), at most
  // variant_leaders of them, fastest first. 0 leaders: none.
  double variant_band = 0.5;
  int variant_leaders = 3;
  // Confirmation (step 4): the winner ships only when faster than the default
  // beyond the noise (PairedComparison::Beyond(confirm_min_gain)); the bucket check
  // (step 5) uses the same rule. 3%: on the AMD Zen 4 host, 7 entries the
  // confirmation measured 2.2-2.9% faster than their default took 0.967-1.042x its
  // speed in `bench_serving` (1.002x in geometric mean, two of them slower beyond the
  // bench's noise), where the 21 confirmed at 3.0-17% took 1.036x (bench/RESULTS.md,
  // "AMD EPYC (Zen 4): the serving table rerun").
  bool confirm = true;
  double confirm_min_gain = 0.03;
  // A busy host: a confirmation (step 4) or a bucket check (step 5) whose measurement
  // lost more than max_cpu_wait of its window to other work (MeasureResult::cpu_wait,
  // either schedule) is measured again, up to cpu_wait_retries more times, the first
  // after cpu_wait_pause_s and each later one after twice the pause before it. When
  // every try was busy the winner is not confirmed: the default ships (a bucket is
  // refused). Interleaving does not cancel a busy host's bias: with another process
  // on one of two cores, a 2-thread oneDNN call took 1.5-2x its quiet time and the
  // own tiles 1.2-1.45x, so a verdict taken then need not hold in serving. On that
  // host (bench/RESULTS.md, "Measurements on a busy host") quiet confirmations lost
  // 0-4.8% of their window, quiet trials mostly under 10% (5 of 2112 above, up to
  // 19%), and 2-thread measurements beside one busy process 20-40%. Trials above it
  // are counted (KeySummary::busy), and named in the note with a warning when they
  // are at least a quarter of the key's. 1: no check.
  double max_cpu_wait = 0.10;
  int cpu_wait_retries = 2;
  double cpu_wait_pause_s = 2;
  bool bundle_default = true;        // compute the per-op bundle default
  int default_candidates = 3;        // top schedules per key considered for it
  // Kernel variants to search (non-owning, must outlive the call); empty: every
  // variant in this build. Tests pass planted variant tables here.
  std::vector<const KernelVariant*> variants;
  std::function<void(const TuneProgress&)> progress;  // called after every batch and phase
  // Text for the bundle's provenance (e.g. the command line); host and log are added.
  std::string provenance_extra;
};

struct TuneResult {
  DeviceInfo device;
  BundleSpec bundle;                 // entries for keys with a verified best
  std::vector<KeySummary> summaries; // one per key, in option order: keys, then bucket keys not among them
  int64_t measurements = 0;          // measured in this run (all record kinds)
};

// Errors: kInvalidArgument for bad options (naming the value and rule; a bad bucket:
// CheckBucket's rule, an invalid end key, overlapping ranges of one family),
// kFailedPrecondition for an existing log without resume, kDataLoss for a corrupt
// log, kIoError when the log cannot be written. A key whose every candidate fails
// is not an error: its summary says so and it gets no bundle entry.
StatusOr<TuneResult> Tune(const TunerOptions& options);

// Two schedules measured together (MeasureInterleaved), compared round by round:
// round r of both ran under the same conditions, so a slow spell of the machine
// that hits one round moves both and one round cannot decide. gain_r = 1 - a_r / b_r
// (> 0: a faster in round r). Results without per-round times, or with different
// round counts, compare as one round of their medians.
struct PairedComparison {
  int rounds = 0;
  int a_faster = 0;          // rounds where a took less time than b
  double median_gain = 0;    // the median over rounds of gain_r
  // a is faster than b beyond the noise: in at least three quarters of the rounds
  // (rounded up) and by more than min_gain in the median round.
  bool Beyond(double min_gain) const { return rounds > 0 && 4 * a_faster >= 3 * rounds && median_gain > min_gain; }
};
PairedComparison ComparePaired(const MeasureResult& a, const MeasureResult& b);

// GFLOP/s of one call of `key` taking `us` microseconds.
double Gflops(const OpKey& key, double us);

}  // namespace cliffguard::tuner
