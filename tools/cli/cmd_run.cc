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

namespace {

// One key served `iters` times: the median time of a call and what served it.
struct Served {
  Runtime::Resolution res;
  double median_us = 0;
  size_t weights_bytes = 0;  // of the key's plan, when it holds weights
};

template <typename Call>
StatusOr<double> MedianMicros(int iters, Call&& call) {
  std::vector<double> us;
  us.reserve(size_t(iters));
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Status st = call();
    const auto t1 = std::chrono::steady_clock::now();
    CG_RETURN_IF_ERROR(st);
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

std::vector<float> Random(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A plan's resolution (what its calls run), in Resolve's terms.
template <typename Plan>
StatusOr<Runtime::Resolution> PlanResolution(const Runtime& r, const Plan& plan) {
  CG_ASSIGN_OR_RETURN(Runtime::Resolution res, r.Resolve(plan.key()));
  res.hit = plan.hit();
  res.schedule = plan.schedule();
  res.served_by = plan.served_by();
  return res;
}

StatusOr<Served> ServeGemm(Runtime& r, const OpKey& key, bool packed, bool use_plan, int iters, std::mt19937& rng) {
  std::vector<float> A = Random(size_t(key.m() * key.k()), rng), B = Random(size_t(key.k() * key.n()), rng);
  std::vector<float> C(size_t(key.m() * key.n()));
  const GemmArgs a = DenseGemmArgs(key, A.data(), B.data(), C.data());
  Served out;
  if (!use_plan && !packed) {
    CG_ASSIGN_OR_RETURN(out.res, r.Resolve(key));
    CG_ASSIGN_OR_RETURN(out.median_us, MedianMicros(iters, [&] { return r.Gemm(a); }));
    return out;
  }
  auto plan = packed ? r.PlanGemm(key, B.data(), a.ldb) : r.PlanGemm(key);
  CG_RETURN_IF_ERROR(plan.status());
  out.weights_bytes = plan->weights_bytes();
  CG_ASSIGN_OR_RETURN(out.res, PlanResolution(r, *plan));
  CG_ASSIGN_OR_RETURN(out.median_us, MedianMicros(iters, [&] {
                        return packed ? plan->Run(A.data(), a.lda, C.data(), a.ldc)
                                      : plan->Run(A.data(), a.lda, B.data(), a.ldb, C.data(), a.ldc);
                      }));
  return out;
}

// conv2d is served as in a model: a plan per layer holding its packed filter and bias.
StatusOr<Served> ServeConv2d(Runtime& r, const OpKey& key, int iters, std::mt19937& rng) {
  const Conv2dOutput o = Conv2dOutputDims(key);
  const int64_t n = key.dims[0], ic = key.dims[3], oc = key.dims[4];
  std::vector<float> x = Random(size_t(n * key.dims[1] * key.dims[2] * ic), rng);
  std::vector<float> w = Random(size_t(oc * key.dims[5] * key.dims[6] * ic), rng), bias = Random(size_t(oc), rng);
  std::vector<float> y(size_t(n * o.oh * o.ow * oc));
  CG_ASSIGN_OR_RETURN(Conv2dPlan plan, r.PlanConv2d(key, w.data(), ConvWeightLayout::kOhwi, bias.data()));
  Served out;
  out.weights_bytes = plan.weights_bytes();
  CG_ASSIGN_OR_RETURN(out.res, PlanResolution(r, plan));
  CG_ASSIGN_OR_RETURN(out.median_us, MedianMicros(iters, [&] { return plan.Run(x.data(), y.data()); }));
  return out;
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  struct Opts {
    std::vector<std::string> bundles;
    std::string op = "any";
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
  cmd->add_option("--op", opts->op, "Operator of the shapes: any, gemm or conv2d (a shape of another op is refused)")
      ->check(CLI::IsMember({"any", "gemm", "conv2d"}))
      ->capture_default_str();
  cmd->add_option("--shape", opts->shapes,
                  "gemm: M,N,K[,LAYOUT] (LAYOUT nn|nt|tn|tt); conv2d: N,H,W,IC,OC,K,S[,P] (NHWC, K x K kernel, "
                  "stride S, padding P, default (K-1)/2; served through a plan holding its filter); or a canonical "
                  "key; repeatable")
      ->required();
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
    for (OpKey key : keys) {
      if (opts->op != "any" && OpKindName(key.op) != opts->op)
        Fail("run", fmt::format("--shape '{}' is a {} key, not {} (--op)", key.ToString(), OpKindName(key.op), opts->op));
      const bool packed = opts->packed || key.constant_weights || key.op == OpKind::kConv2d;
      key.constant_weights = packed;
      OpKey per_call = key;
      per_call.constant_weights = false;
      auto served = key.op == OpKind::kConv2d ? ServeConv2d(r, per_call, opts->iters, rng)
                                              : ServeGemm(r, per_call, packed, opts->plan, opts->iters, rng);
      ExitIfError(served.status(), "run", kExitFailure);
      weights_bytes += served->weights_bytes;
      packed_plans += packed;
      const Runtime::Resolution& res = served->res;
      const std::string how =
          res.hit ? "hit"
                  : fmt::format("miss ({}, served by {})", MissKindName(res.miss_kind),
                                ServedByTunedKey(res.served_by) ? res.fallback : ServedByName(res.served_by));
      t.Row({key.ToString(), how, HumanMicros(served->median_us),
             fmt::format("{:.1f}", key.Flops() / (served->median_us * 1e3)), res.schedule.ToString()});
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
