#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "cli_util.h"
#include "cliffguard/device.h"
#include "cliffguard/runtime.h"
#include "commands.h"
#include "report_print.h"

namespace cliffguard::cli {

void AddRunCommand(CLI::App& app) {
  struct Opts {
    std::vector<std::string> bundles;
    std::string op = "gemm";
    std::vector<std::string> shapes;
    int iters = 50;
    int threads = 0;
    std::string miss_report;
    bool plan = false;
    bool packed = false;
    std::string fallback;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("run", "Serve calls through the runtime and report hits, misses and speed");
  cmd->add_option("--bundle", opts->bundles, "Bundle to load (repeatable)");
  cmd->add_option("--op", opts->op, "Operator")->check(CLI::IsMember({"gemm"}))->capture_default_str();
  cmd->add_option("--shape", opts->shapes, "M,N,K[,LAYOUT] (LAYOUT nn|nt|tn|tt) or a canonical key; repeatable")->required();
  cmd->add_option("--iters", opts->iters, "Calls per shape")->check(CLI::Range(1, 100000000))->capture_default_str();
  cmd->add_option("--threads", opts->threads, "Thread budget (0: CLIFFGUARD_THREADS or all)")
      ->check(CLI::Range(0, kMaxThreadBudget))
      ->capture_default_str();
  cmd->add_option("--miss-report", opts->miss_report, "Write the miss report JSON here");
  cmd->add_flag("--plan", opts->plan, "Dispatch through GemmPlan (create once, run many) instead of per call");
  cmd->add_option("--fallback", opts->fallback,
                  "What a missed key may run before the defaults: exact (its own entry only), bucket (a bucket of "
                  "its family), nearest (a bucket, else the nearest tuned key of its family). Default: "
                  "CLIFFGUARD_FALLBACK, else nearest");
  cmd->add_flag("--packed", opts->packed,
                "Serve through constant-weight plans: B packed once at plan creation, calls pass A and C "
                "(keys written with weights=constant are always served so)");
  cmd->callback([opts] {
    std::vector<OpKey> keys;
    for (const auto& s : opts->shapes) {
      auto k = ParseShape(s);
      ExitIfError(k.status(), "run");
      keys.push_back(*k);
    }
    RuntimeOptions ro;
    ro.threads = opts->threads;
    ro.miss_report_path = opts->miss_report;  // also rewritten while serving with CLIFFGUARD_MISS_REPORT_INTERVAL
    if (!opts->fallback.empty()) {
      auto p = ParseFallbackPolicy(opts->fallback);
      if (!p.ok()) Fail("run", fmt::format("--fallback: {}", p.status().message()));
      ro.fallback = *p;
    }
    auto rt = Runtime::Create(ro);
    ExitIfError(rt.status(), "run", kExitFailure);
    Runtime& r = **rt;
    fmt::print("device {} ({}, {} threads)\n", r.device().fingerprint, r.device().name, r.device().threads);
    for (const auto& b : opts->bundles) {
      auto rep = r.LoadBundleFile(b);
      ExitIfError(rep.status(), "run", kExitFailure);
      if (rep->device_match)
        fmt::print("bundle {}: {} of {} entries loaded, {} rejected\n", b, rep->entries_loaded, rep->entries_total,
                   rep->rejected.size());
      else
        fmt::print("bundle {}: not applied ({})\n", b, rep->device_rule);
      for (const auto& e : rep->rejected) fmt::print("  rejected ({}): {}\n", EntryRejectionName(e.reason), e.message);
    }
    fmt::print("\n");
    Table t({"key", "dispatch", "time/call", "GFLOP/s", "schedule"});
    size_t weights_bytes = 0, packed_plans = 0;
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    for (OpKey key : keys) {
      const bool packed = opts->packed || key.constant_weights;
      key.constant_weights = packed;
      OpKey per_call = key;
      per_call.constant_weights = false;
      const int64_t m = key.m(), n = key.n(), k = key.k();
      std::vector<float> A(size_t(m * k)), B(size_t(k * n)), C(size_t(m * n));
      for (auto& x : A) x = dist(rng);
      for (auto& x : B) x = dist(rng);
      const GemmArgs a = DenseGemmArgs(per_call, A.data(), B.data(), C.data());
      GemmPlan plan;
      if (opts->plan || packed) {
        auto p = packed ? r.PlanGemm(per_call, B.data(), a.ldb) : r.PlanGemm(per_call);
        ExitIfError(p.status(), "run", kExitFailure);
        plan = std::move(p).value();
        weights_bytes += plan.weights_bytes();
        packed_plans += packed;
      }
      // What the calls below use: the plan's resolution, else the per-call one.
      auto res = r.Resolve(packed ? plan.key() : per_call);
      ExitIfError(res.status(), "run", kExitFailure);
      if (packed) {
        res->hit = plan.hit();
        res->schedule = plan.schedule();
        res->served_by = plan.served_by();
      }
      std::vector<double> us;
      us.reserve(size_t(opts->iters));
      for (int i = 0; i < opts->iters; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        Status st = packed      ? plan.Run(A.data(), a.lda, C.data(), a.ldc)
                    : opts->plan ? plan.Run(A.data(), a.lda, B.data(), a.ldb, C.data(), a.ldc)
                                 : r.Gemm(a);
        const auto t1 = std::chrono::steady_clock::now();
        ExitIfError(st, "run", kExitFailure);
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
      const double med = us[us.size() / 2];
      const std::string how =
          res->hit ? "hit"
                   : fmt::format("miss ({}, served by {})", MissKindName(res->miss_kind),
                                 ServedByTunedKey(res->served_by) ? res->fallback : ServedByName(res->served_by));
      t.Row({key.ToString(), how, HumanMicros(med), fmt::format("{:.1f}", key.Flops() / (med * 1e3)),
             res->schedule.ToString()});
    }
    fmt::print("{}\n", t.Render());
    if (packed_plans)
      fmt::print("constant-weight plans {}: weights packed into {:.1f} MiB\n", packed_plans,
                 double(weights_bytes) / (1 << 20));
    uint64_t hits = 0, misses = 0;
    for (const auto& s : r.Stats()) {
      hits += s.hits;
      misses += s.misses;
    }
    fmt::print("calls {}: {} hits, {} misses\n", hits + misses, hits, misses);
    if (!opts->miss_report.empty()) {
      ExitIfError(r.WriteMissReport(opts->miss_report), "run", kExitFailure);
      fmt::print("miss report written to {} (read it with: cliffguard misses {})\n", opts->miss_report,
                 opts->miss_report);
    } else {
      fmt::print("\nmiss report (ranked by expected gain):\n{}", RenderMissReport(r.GetMissReport()));
    }
  });
}

}  // namespace cliffguard::cli
