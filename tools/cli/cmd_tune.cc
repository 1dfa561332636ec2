// `cliffguard tune`: measure candidate schedules and write the best verified one per
// key into a bundle. See docs/tuning.md.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include "cliffguard/detail/logging.h"

#include "cli_util.h"
#include "cliffguard/bundle.h"
#include "cliffguard/device.h"
#include "cliffguard/miss_report.h"
#include "cliffguard/tuner/buckets.h"
#include "cliffguard/tuner/measurer.h"
#include "cliffguard/tuner/strategy.h"
#include "cliffguard/tuner/tuner.h"
#include "cliffguard/tuner/workload.h"
#include "commands.h"
#include "report_print.h"

namespace cliffguard::cli {
namespace {

std::string Duration(double s) {
  if (s < 0) return "?";
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{}m{:02d}s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return fmt::format("{}h{:02d}m", static_cast<int>(s) / 3600, (static_cast<int>(s) / 60) % 60);
}

std::string Us(double us) { return us > 0 ? fmt::format("{:.1f}", us) : "-"; }

std::string Bucket(const tuner::KeySummary& s) {
  return s.bucket_hi > 0 ? fmt::format("[{}, {}]", s.bucket_lo, s.bucket_hi) : "-";
}

}  // namespace

void AddTuneCommand(CLI::App& app) {
  struct Opts {
    std::string op = "any";
    std::vector<std::string> shapes;
    std::string workload, log, out, buckets, shard;
    std::vector<std::string> from_report;
    int top = 5;
    tuner::TunerOptions t;
    bool no_bundle_default = false;
    bool constant_weights = false;
    bool no_confirm = false;
    std::string sandbox = "auto";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("tune", "Measure candidate schedules and write the best verified ones to a bundle");
  cmd->add_option("--op", o->op, "Ops to tune: any, gemm or conv2d (keys of other ops are refused)")
      ->check(CLI::IsMember({"any", "gemm", "conv2d"}))
      ->capture_default_str();
  cmd->add_option("--shape", o->shapes,
                  "Shape M,N,K or M,N,K,LAYOUT (LAYOUT: nn, nt, tn, tt; t = that operand is stored transposed), or a canonical key; repeatable");
  cmd->add_option("--workload", o->workload, "Workload file: canonical op keys one per line ('#' comments) or a JSON array");
  cmd->add_option("--buckets", o->buckets,
                  "Tune shape buckets of the --shape/--workload keys' families instead of the keys: m:E1,E2,... "
                  "(increasing upper ends; ranges [1,E1], [E1+1,E2], ...) or m:pow2:N (ends 1, 2, 4, ... below N, "
                  "then N). Each range is tuned at its representative (the largest given m in it, else its upper "
                  "end) and ships as a bucket if the winner holds at both ends; keys above the last end are tuned "
                  "exactly. Not with --from-report");
  cmd->add_option("--from-report", o->from_report,
                  "Miss report (JSON): tune its top recommended buckets, or its top-ranked keys when it "
                  "recommends none (older reports). Several reports (of one device; repeat the option or list "
                  "them) are merged first, as `misses merge` does");
  cmd->add_option("--shard", o->shard,
                  "Tune only shard I of N (I/N, 0 <= I < N) of the keys and buckets: the units sorted by their text "
                  "and dealt round-robin, so N runs with I = 0..N-1 tune every unit exactly once; `merge` their "
                  "bundles. For Kubernetes Indexed Jobs and Slurm array jobs (deploy/)");
  cmd->add_option("--top", o->top, "With --from-report: how many recommended buckets (or top-ranked keys)")
      ->capture_default_str();
  cmd->add_option("--trials", o->t.trials, "Trial measurements per key (resumed ones count)")->capture_default_str();
  cmd->add_option("--strategy", o->t.strategy, "Search strategy: xgb, random, grid or ga")->capture_default_str();
  cmd->add_option("--seed", o->t.seed, "Random seed")->capture_default_str();
  cmd->add_option("--log", o->log, "Tuning log (JSON lines); refused if it exists, unless --resume")->required();
  cmd->add_flag("--resume", o->t.resume, "Continue the run recorded in --log without repeating measurements");
  cmd->add_option("--warm-start", o->t.warm_start_logs,
                  "Earlier tuning log whose records of this device warm-start the cost model (xgb); repeatable");
  cmd->add_option("--out", o->out, "Bundle to write (.cgb), atomically")->required();
  cmd->add_option("--batch", o->t.batch_size, "Schedules per measured batch")->capture_default_str();
  cmd->add_option("--objective", o->t.objective, "Cost model objective (xgb): rank (pairwise) or reg")->capture_default_str();
  cmd->add_option("--device", o->t.device, "Device to tune for: cpu or cuda:N (default: cpu)");
  cmd->add_option("--threads", o->t.threads, "CPU thread budget (0: CLIFFGUARD_THREADS or every CPU available)")
      ->capture_default_str();
  cmd->add_option("--sandbox", o->sandbox,
                  "How measurement workers start: fork, spawn (a new process: needed with a GPU context), or auto "
                  "(spawn for GPUs, else fork)")
      ->capture_default_str();
  cmd->add_option("--min-time-ms", o->t.measure.min_time_ms, "Timed calls per candidate sum to at least this")
      ->capture_default_str();
  cmd->add_option("--min-repeats", o->t.measure.min_repeats, "At least this many timed calls per candidate")
      ->capture_default_str();
  cmd->add_option("--timeout-s", o->t.measure.timeout_s, "Per-candidate timeout in seconds (0: 30 s)")
      ->default_str(fmt::format("{} (30 s)", o->t.measure.timeout_s));
  cmd->add_option("--time-budget", o->t.time_budget_s,
                  "Wall-time budget in seconds of all keys' searches, shared out as the run goes (each key gets the "
                  "time left over the keys left); raise --trials so that the budget, not the trial count, ends them "
                  "(0: none)")
      ->capture_default_str();
  cmd->add_option("--key-time-limit-s", o->t.key_time_limit_s, "Stop a key's trials after this long (0: none)")
      ->capture_default_str();
  cmd->add_option("--time-limit-s", o->t.total_time_limit_s, "Stop starting batches after this long (0: none)")
      ->capture_default_str();
  cmd->add_option("--tie-tolerance", o->t.tie_tolerance, "Near-tie band re-measured together (relative)")
      ->capture_default_str();
  cmd->add_option("--variant-leaders", o->t.variant_leaders,
                  "The fastest schedule of up to this many other kernel variants, each within --variant-band of "
                  "the fastest, joins the re-measured group (0: none)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--variant-band", o->t.variant_band, "Band of the variant leaders (relative to the fastest)")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  cmd->add_flag("--no-bundle-default", o->no_bundle_default, "Do not compute the per-op bundle default");
  cmd->add_flag("--no-confirm", o->no_confirm,
                "Skip the confirmation (the winner measured against the default, interleaved; the default ships "
                "unless the winner is faster beyond the noise)");
  cmd->add_option("--confirm-min-gain", o->t.confirm_min_gain,
                  "Confirmation: the least relative gain over the default that ships the winner")
      ->capture_default_str();
  cmd->add_option("--max-cpu-wait", o->t.max_cpu_wait,
                  "A confirmation or bucket check whose measurement lost more than this share of its time to other "
                  "work on the host (run-queue wait and steal) is measured again after a pause, up to twice; if "
                  "every try was busy the default ships (1: no check)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_flag("--constant-weights", o->constant_weights,
                "Tune the --shape and --workload keys for constant-weight plans (weights=constant: B packed once, "
                "outside the timed calls, as PlanGemm with weights and `run --packed` serve them)");

  cmd->callback([o] {
    const std::string c = "tune";
    // Every key must be of a tunable op (cpu: f32 gemm and conv2d; cuda: f32, f16 and
    // bf16 gemm), and of --op when given.
    const bool gpu = !o->t.device.empty() && o->t.device != "cpu";
    auto tunable = [o, gpu](const OpKey& k) {
      const bool op_dtype = gpu ? k.op == OpKind::kGemm && (k.dtype == DType::kF32 || k.dtype == DType::kF16 ||
                                                             k.dtype == DType::kBF16)
                                : (k.op == OpKind::kGemm || k.op == OpKind::kConv2d) && k.dtype == DType::kF32;
      return op_dtype && (o->op == "any" || o->op == OpKindName(k.op));
    };
    const std::string tunable_what = gpu ? fmt::format("f32, f16 or bf16 gemm on {}", o->t.device)
                                     : o->op == "any" ? "f32 gemm or conv2d" : fmt::format("f32 {}", o->op);
    std::vector<OpKey> keys;
    for (const auto& s : o->shapes) {
      auto k = ParseShape(s);
      ExitIfError(k.status(), c);
      keys.push_back(*k);
    }
    if (!o->workload.empty()) {
      auto w = tuner::ReadWorkloadFile(o->workload);
      ExitIfError(w.status(), c, kExitFailure);
      keys.insert(keys.end(), w->begin(), w->end());
    }
    if (o->constant_weights)
      for (auto& k : keys) k.constant_weights = true;
    if (!o->buckets.empty() && !o->from_report.empty())
      Fail(c, "--buckets and --from-report cannot be combined: a miss report brings its own recommended buckets. "
              "Tune them in separate runs and `merge` the bundles");
    std::vector<tuner::BucketTarget> buckets;
    if (!o->buckets.empty()) {
      if (keys.empty()) Fail(c, fmt::format("--buckets {}: no --shape or --workload keys to define the families", o->buckets));
      for (const auto& k : keys)
        if (k.op != keys[0].op)
          Fail(c, fmt::format("--buckets: keys '{}' and '{}' are of different ops; bucket one op per run",
                              keys[0].ToString(), k.ToString()));
      auto ends = tuner::ParseBucketEnds(o->buckets, keys[0].op);
      ExitIfError(ends.status(), c);
      tuner::BucketPlan plan = tuner::BucketTargets(keys, *ends);
      fmt::print(stderr, "tune: --buckets {}: {} bucket(s) over {} range(s), {} key(s) above the last end tuned exactly\n",
                 o->buckets, plan.targets.size(), ends->size(), plan.exact_keys.size());
      buckets = std::move(plan.targets);
      keys = std::move(plan.exact_keys);
    }
    if (!o->from_report.empty()) {
      if (o->top < 1) Fail(c, fmt::format("--top {} must be >= 1", o->top));
      auto rep = ReadMergedMissReport(o->from_report);
      if (!rep.ok()) Fail(c, fmt::format("--from-report: {}", rep.status().message()), kExitFailure);
      const std::string from = o->from_report.size() == 1 ? o->from_report[0]
                                                           : fmt::format("{} merged reports", o->from_report.size());
      RankMissRecords(*rep);
      // Tune for the device that reported the misses: its thread budget is part of
      // its identity, so a bundle for another budget would be a device miss there.
      int report_threads = rep->device_threads;
      if (report_threads == 0) {  // older reports: the budget is in the fingerprint ("cpu-avx2-t1-...")
        const size_t at = rep->device_fingerprint.find("-t");
        if (at != std::string::npos) report_threads = std::atoi(rep->device_fingerprint.c_str() + at + 2);
      }
      if (report_threads > 0) {
        if (o->t.threads != 0 && o->t.threads != report_threads)
          Fail(c, fmt::format("--threads {} differs from the thread budget {} of the device that wrote '{}' ({}); "
                              "drop --threads to tune for that device",
                              o->t.threads, report_threads, from, rep->device_fingerprint));
        o->t.threads = report_threads;
      }
      auto budget = ResolveThreadBudget(o->t.threads, "tune --threads");
      ExitIfError(budget.status(), c);
      const DeviceInfo here = HostCpuDevice(*budget);
      if (!FingerprintMatches(here, rep->device_fingerprint))
        Fail(c, fmt::format("miss report '{}' is for device {} ({}, thread budget {}); this host with thread budget {} "
                            "is {} ({}): a bundle tuned here would be a device miss there. Tune on the reported device",
                            from, rep->device_fingerprint, rep->device_name.empty() ? "?" : rep->device_name,
                            report_threads > 0 ? fmt::format("{}", report_threads) : "unknown", *budget,
                            here.fingerprint, here.name));
      const tuner::ReportSelection sel = tuner::SelectFromReport(
          *rep, o->top, tunable);
      for (const auto& k : sel.skipped)
        logging::Warn("tune: --from-report: skipping {} (only {} keys are tuned)", k.ToString(), tunable_what);
      for (const auto& b : sel.buckets) {
        const Status st = b.hi > 0 ? CheckBucket(b.key, b.lo, b.hi)
                                   : InvalidArgument(fmt::format("bucket [{}, {}] of {} is no range", b.lo, b.hi,
                                                                 b.key.ToString()));
        if (!st.ok()) Fail(c, fmt::format("miss report '{}': recommended {}", from, st.message()));
      }
      if (!rep->recommended_buckets.empty()) {
        if (sel.buckets.empty())
          Fail(c, fmt::format("miss report '{}' recommends no {} bucket to tune", from, tunable_what));
        fmt::print(stderr, "tune: {} of {} recommended buckets from {} (their ranges, not the report's keys, are tuned)\n",
                   sel.buckets.size(), rep->recommended_buckets.size(), from);
      } else {
        if (sel.keys.empty()) Fail(c, fmt::format("miss report '{}' lists no {} key to tune", from, tunable_what));
        fmt::print(stderr, "tune: {} top-ranked keys from {} (it recommends no buckets)\n", sel.keys.size(), from);
      }
      keys.insert(keys.end(), sel.keys.begin(), sel.keys.end());
      buckets = sel.buckets;
    }
    for (const auto& k : keys)
      if (!tunable(k)) Fail(c, fmt::format("key '{}' is not {} (--op {})", k.ToString(), tunable_what, o->op));
    keys = tuner::DedupKeys(keys);
    if (keys.empty() && buckets.empty()) Fail(c, "no keys to tune: give --shape, --workload or --from-report");
    if (!o->shard.empty()) {
      auto shard = tuner::ParseShard(o->shard);
      ExitIfError(shard.status(), c);
      std::vector<std::string> names;  // keys first, then buckets; a bucket's name holds its range
      for (const auto& k : keys) names.push_back(k.ToString());
      for (const auto& b : buckets) names.push_back(fmt::format("{} bucket [{}, {}]", b.key.ToString(), b.lo, b.hi));
      std::vector<OpKey> shard_keys;
      std::vector<tuner::BucketTarget> shard_buckets;
      for (size_t i : tuner::ShardIndices(names, *shard)) {
        if (i < keys.size()) shard_keys.push_back(keys[i]);
        else shard_buckets.push_back(buckets[i - keys.size()]);
      }
      fmt::print(stderr, "tune: shard {}/{}: {} of {} keys and {} of {} buckets\n", shard->index, shard->count,
                 shard_keys.size(), keys.size(), shard_buckets.size(), buckets.size());
      if (shard_keys.empty() && shard_buckets.empty()) {
        fmt::print("shard {}/{} has no work ({} units for {} shards); no bundle written\n", shard->index, shard->count,
                   names.size(), shard->count);
        return;
      }
      keys = std::move(shard_keys);
      buckets = std::move(shard_buckets);
    }

    tuner::TunerOptions& t = o->t;
    if (o->sandbox != "auto" && o->sandbox != "fork" && o->sandbox != "spawn")
      Fail(c, fmt::format("--sandbox '{}' is not one of: auto, fork, spawn", o->sandbox));
    if (o->sandbox == "spawn" || (o->sandbox == "auto" && gpu)) {
      char self[4096];
      const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
      if (n <= 0) Fail(c, "--sandbox spawn: cannot find this program's path (/proc/self/exe)", 1);
      t.measure.worker_command = {std::string(self, size_t(n)), "measure-worker"};
    }
    t.keys = keys;
    t.buckets = buckets;
    t.log_path = o->log;
    t.bundle_default = !o->no_bundle_default;
    t.confirm = !o->no_confirm;
    t.provenance_extra = fmt::format("tool=cliffguard-tune-{}", CliffguardVersion());
    const bool tty = ::isatty(STDERR_FILENO);
    bool line_open = false;
    t.progress = [&](const tuner::TuneProgress& p) {
      const std::string line = fmt::format(
          "[{}/{}] {}  {}  trials {}/{} (run {}/{})  best {:.1f} GFLOP/s  elapsed {}  ETA {}", p.key_index + 1,
          p.num_keys, p.key.ToString(), p.phase, p.key_trials_done, p.key_trials, p.trials_done, p.trials_total,
          p.key_best_gflops, Duration(p.elapsed_s), Duration(p.eta_s));
      if (tty) {
        fmt::print(stderr, "\r\033[K{}", line);
        line_open = true;
      } else {
        fmt::print(stderr, "{}\n", line);
      }
      std::fflush(stderr);
    };
    auto res = tuner::Tune(t);
    if (line_open) fmt::print(stderr, "\n");
    ExitIfError(res.status(), c, res.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure);

    Table table({"key", "default us", "tuned us", "speed-up", "GFLOP/s", "trials", "errors", "bucket", "note"});
    for (const auto& s : res->summaries)
      table.Row({s.key.ToString(), Us(s.default_us), s.has_best ? Us(s.tuned_us) : "-",
                 s.speedup > 0 ? fmt::format("{:.2f}x", s.speedup) : "-",
                 s.has_best ? fmt::format("{:.1f}", s.gflops) : "-", fmt::format("{}", s.trials),
                 fmt::format("{}", s.errors), Bucket(s),
                 s.note + (s.resumed ? fmt::format("{}{} resumed", s.note.empty() ? "" : "; ", s.resumed) : "")});
    fmt::print("{}", table.Render());
    if (res->bundle.entries.empty()) Fail(c, "no key got a verified schedule; no bundle written", 1);
    ExitIfError(WriteBundleFile(o->out, res->bundle), c, kExitFailure);
    fmt::print("wrote {}: {} entries, {} op default(s), cost model {}; device {}\n", o->out, res->bundle.entries.size(),
               res->bundle.defaults.size(),
               res->bundle.cost_model.empty() ? "none" : fmt::format("{} bytes", res->bundle.cost_model.size()),
               res->device.fingerprint);
  });
}

void AddMeasureWorkerCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("measure-worker",
                                     "Measures the jobs read on stdin, one per line (started by `tune --sandbox spawn`)");
  cmd->group("");  // hidden: not for people
  cmd->callback([] {
    const int rc = tuner::RunMeasureWorker(stdin, STDOUT_FILENO);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace cliffguard::cli
