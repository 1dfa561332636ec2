// Dynamic shapes: a trace of token counts replayed through the runtime under each
// fallback policy, against an oracle with every token count tuned.
//
// The trace: --requests calls whose m is drawn from a log-normal (median
// --median_m, sigma --sigma), rounded and clamped to [1, --max_m], fixed --seed; the
// same trace for every family (--families, LAYOUT:N:K; default BERT-base nt:768:768
// and a 4096-wide model nt:4096:4096).
//
// Policies, each a Runtime with its own bundles and FallbackPolicy:
//   default       no bundle: every call runs the built-in default
//   exact_top8    --exact (the 8 most frequent m of the trace, tuned as exact keys), policy exact
//   nearest_top8  the same bundle, policy nearest (the nearest tuned m serves)
//   buckets       --buckets (`tune --buckets`), policy bucket
//   buckets_nearest  the same bundle, policy nearest
//   oracle        --oracle (exact keys at every power of two and 1.5 x power of two),
//                 policy exact: measured at those m; at the trace's other m, the
//                 default's time measured there divided by the oracle's speed-up over
//                 the default, interpolated linearly in log2(m) between the two
//                 nearest tuned m (the oracle stands for "every m of the trace tuned";
//                 interpolating the speed-up, not GFLOP/s, keeps an odd m's edge tiles,
//                 which tuned and default schedules both pay, out of the estimate),
//                 and at every m no slower than the fastest policy measured there (a
//                 tuner run at m measures those schedules too; the minimum of noisy
//                 medians leans low, so the oracle is if anything too good).
// Replay: every distinct m of the trace is timed under every policy, interleaved
// (the distinct schedules the policies resolve m to, in a rotated order per round,
// --rounds rounds (default 5), each timing at least 1 ms of repeated calls, median;
// policies that run the same schedule at m share its timing, made through the first
// of them, so the oracle's minimum is over different kernels, not over repeated
// measurements of one); a policy's total is sum over m of count(m) x median time(m),
// and "served" counts the trace's requests by what the policy resolves them to.
// Calls go through Runtime::Gemm (per call), so the timing policy's lookup runs on
// every call. The weights (B) rotate over copies covering
// twice the last-level cache, as a model's layers evict each other's weights; A and
// C (the activations, just written by the previous layer) do not.
//
//   build/bench/bench_dynamic --print_trace            (distinct m and counts)
//   build/bench/bench_dynamic --print_top=8            (the top-8 keys, a `tune --workload` file)
//   build/bench/bench_dynamic --print_oracle           (the oracle's keys)
//   build/bench/bench_dynamic --exact=a.cgb --buckets=b.cgb --oracle=c.cgb [--threads=N]
// bench/dynamic.sh tunes the three bundles and runs it (commands: bench/RESULTS.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "bench_util.h"
#include "cliffguard/log.h"
#include "cliffguard/runtime.h"

namespace cliffguard {
namespace {

struct Flags {
  std::vector<OpKey> families = {OpKey::Gemm(0, 768, 768, false, true), OpKey::Gemm(0, 4096, 4096, false, true)};
  int requests = 10000;
  double median_m = 32, sigma = 1.3;
  int64_t max_m = 2048;
  uint64_t seed = 1;
  int rounds = 5;
  int threads = 0;
  std::string exact, buckets, oracle;
  std::string dump;  // per-m times of every policy, appended as CSV lines
};

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "bench_dynamic: %s\n", msg.c_str());
  std::exit(2);
}

// m -> number of requests with that m.
std::map<int64_t, int64_t> Trace(const Flags& f) {
  std::mt19937_64 rng(f.seed);
  std::lognormal_distribution<double> d(std::log(f.median_m), f.sigma);
  std::map<int64_t, int64_t> counts;
  for (int i = 0; i < f.requests; ++i)
    ++counts[std::clamp<int64_t>(std::llround(d(rng)), 1, f.max_m)];
  return counts;
}

std::vector<int64_t> OracleSample(int64_t max_m) {
  std::vector<int64_t> out;
  for (int64_t p = 1; p <= max_m; p *= 2) {
    out.push_back(p);
    if (p >= 2 && p * 3 / 2 <= max_m) out.push_back(p * 3 / 2);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int64_t> TopM(const std::map<int64_t, int64_t>& trace, size_t n) {
  std::vector<std::pair<int64_t, int64_t>> v(trace.begin(), trace.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size() && i < n; ++i) out.push_back(v[i].first);
  return out;
}

struct Policy {
  std::string name;
  std::string bundle;
  FallbackPolicy fallback;
  std::unique_ptr<Runtime> rt;
};

struct Timing {
  std::vector<double> us;                      // per policy: median time of one call
  std::vector<Runtime::Resolution> resolved;   // per policy: what serves the key
  size_t schedules = 0;                        // distinct schedules timed
};

// Times one m under every policy; b: copies of the weights, one per call in turn,
// continuing from `next` across m, so no call finds the weights its predecessor
// left in cache. Policies that resolve the key to the same schedule share one timing
// (made through the first of them), so identical kernels are not set against each
// other's noise.
Timing TimeAt(std::vector<Policy>& policies, const OpKey& key, std::vector<float>& a,
              std::vector<std::vector<float>>& b, std::vector<float>& c, int rounds, size_t& next) {
  GemmArgs args = DenseGemmArgs(key, a.data(), b[0].data(), c.data());
  Timing out;
  std::vector<Runtime::Resolution>& resolved = out.resolved;
  std::vector<size_t> group(policies.size());  // policy -> index into timed
  std::vector<size_t> timed;                   // one policy per distinct schedule
  for (size_t p = 0; p < policies.size(); ++p) {
    auto r = policies[p].rt->Resolve(key);
    if (!r.ok()) Die(r.status().ToString());
    resolved.push_back(*r);
    size_t g = 0;
    while (g < timed.size() && resolved[timed[g]].schedule != r->schedule) ++g;
    if (g == timed.size()) timed.push_back(p);
    group[p] = g;
  }
  auto call = [&](size_t p) {
    args.b = b[next++ % b.size()].data();
    if (Status st = policies[p].rt->Gemm(args); !st.ok()) Die(st.ToString());
    benchmark::ClobberMemory();
  };
  for (size_t p : timed) call(p);  // warm-up: resolves the key, builds library primitives
  std::vector<std::vector<double>> us(timed.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < timed.size(); ++i) {
      const size_t g = (i + size_t(r)) % timed.size();
      int64_t calls = 0;
      const auto t0 = std::chrono::steady_clock::now();
      double elapsed = 0;
      do {
        call(timed[g]);
        ++calls;
        elapsed = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      } while (elapsed < 1000);
      us[g].push_back(elapsed / double(calls));
    }
  for (size_t p = 0; p < policies.size(); ++p) {
    auto v = us[group[p]];
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    out.us.push_back(v[v.size() / 2]);
  }
  out.schedules = timed.size();
  return out;
}

int Run(const Flags& f) {
  const auto trace = Trace(f);
  std::vector<Policy> policies;
  auto add = [&](const std::string& name, const std::string& bundle, FallbackPolicy fb) {
    RuntimeOptions o;
    o.threads = f.threads;
    o.warn_on_miss = false;
    o.fallback = fb;
    auto rt = Runtime::Create(o);
    if (!rt.ok()) Die(rt.status().ToString());
    if (!bundle.empty())
      if (const LoadReport rep = bench::LoadBundleOrDie(**rt, bundle); !rep.device_match)
        Die(fmt::format("{}: not for this device ({})", bundle, rep.device_rule));
    policies.push_back({name, bundle, fb, std::move(*rt)});
  };
  add("default", "", FallbackPolicy::kExact);
  if (!f.exact.empty()) {
    add("exact_top8", f.exact, FallbackPolicy::kExact);
    add("nearest_top8", f.exact, FallbackPolicy::kNearest);
  }
  if (!f.buckets.empty()) {
    add("buckets", f.buckets, FallbackPolicy::kBucket);
    add("buckets_nearest", f.buckets, FallbackPolicy::kNearest);
  }
  size_t oracle_index = policies.size();
  if (!f.oracle.empty()) add("oracle", f.oracle, FallbackPolicy::kExact);
  const DeviceInfo& dev = policies[0].rt->device();
  int64_t requests = 0;
  for (const auto& [m, n] : trace) requests += n;
  fmt::print("device {} ({}), {} threads\n", dev.fingerprint, dev.name, dev.threads);
  fmt::print("trace: {} requests, {} distinct m in [{}, {}], log-normal median {} sigma {}, seed {}\n", requests,
             trace.size(), trace.begin()->first, trace.rbegin()->first, f.median_m, f.sigma, f.seed);

  int rc = 0;
  for (const OpKey& family : f.families) {
    std::vector<int64_t> ms;
    for (const auto& [m, n] : trace) ms.push_back(m);
    std::vector<int64_t> sample;
    if (oracle_index < policies.size())
      for (int64_t m : OracleSample(f.max_m)) {
        sample.push_back(m);
        if (!trace.count(m)) ms.push_back(m);
      }
    std::sort(ms.begin(), ms.end());
    const int64_t max_m = ms.back();
    const int64_t b_bytes = 4 * family.n() * family.k();
    const int64_t cover = 2 * std::max<int64_t>(dev.l3_bytes + 2 * dev.l2_bytes, 32 << 20);
    std::vector<std::vector<float>> b(size_t(std::clamp<int64_t>((cover + b_bytes - 1) / b_bytes, 1, 64)),
                                      std::vector<float>(size_t(family.n() * family.k()), 0.25f));
    std::vector<float> a(size_t(max_m * family.k()), 0.5f), c(size_t(max_m * family.n()));
    std::map<int64_t, std::vector<double>> times;  // m -> per-policy median us
    std::vector<std::vector<uint64_t>> served_n(policies.size(), std::vector<uint64_t>(kNumServedBy));  // trace requests
    size_t timings = 0, next_b = 0;
    for (int64_t m : ms) {
      Timing t = TimeAt(policies, WithVaryingDim(family, m), a, b, c, f.rounds, next_b);
      times[m] = std::move(t.us);
      timings += t.schedules;
      if (auto it = trace.find(m); it != trace.end())
        for (size_t p = 0; p < policies.size(); ++p)
          served_n[p][static_cast<int>(t.resolved[p].hit ? ServedBy::kExact : t.resolved[p].served_by)] +=
              uint64_t(it->second);
    }
    // Oracle at the trace's m: measured where tuned, else the default's time there
    // over the oracle's speed-up on the default, interpolated in log2 m; never slower
    // than the fastest policy measured at m.
    auto estimate_us = [&](int64_t m) {
      if (std::binary_search(sample.begin(), sample.end(), m)) return times[m][oracle_index];
      auto hi = std::upper_bound(sample.begin(), sample.end(), m);
      const int64_t m1 = hi == sample.begin() ? *hi : *(hi - 1), m2 = hi == sample.end() ? *(hi - 1) : *hi;
      const double s1 = times[m1][0] / times[m1][oracle_index], s2 = times[m2][0] / times[m2][oracle_index];
      const double t = m1 == m2 ? 0 : (std::log2(double(m)) - std::log2(double(m1))) /
                                          (std::log2(double(m2)) - std::log2(double(m1)));
      return times[m][0] / (s1 + t * (s2 - s1));
    };
    auto oracle_us = [&](int64_t m) {
      return std::min(estimate_us(m), *std::min_element(times[m].begin(), times[m].end()));
    };
    if (!f.dump.empty()) {
      std::FILE* out = std::fopen(f.dump.c_str(), "a");
      if (!out) Die(fmt::format("--dump: cannot open {}", f.dump));
      for (const auto& [m, t] : times) {
        std::fprintf(out, "%s,%lld", KeyFamily(family).ToString().c_str(), static_cast<long long>(m));
        for (size_t p = 0; p < t.size(); ++p) std::fprintf(out, ",%s=%.3f", policies[p].name.c_str(), t[p]);
        std::fprintf(out, "\n");
      }
      std::fclose(out);
    }
    std::vector<double> total(policies.size(), 0);
    for (const auto& [m, n] : trace)
      for (size_t p = 0; p < policies.size(); ++p)
        total[p] += double(n) * (p == oracle_index ? oracle_us(m) : times[m][p]);
    fmt::print("\n{} (m varies; every policy's calls through Runtime::Gemm; {} distinct m, {} distinct schedules timed)\n",
               family.ToString(), ms.size(), timings);
    fmt::print("{:<16} {:>12} {:>14} {:>10}   {}\n", "policy", "tuned keys", "total GEMM s", "vs oracle",
               "how the trace's requests were served");
    for (size_t p = 0; p < policies.size(); ++p) {
      size_t keys = 0;
      for (const auto& r : policies[p].rt->LoadReports())
        if (!r.source.empty()) {
          auto spec = ReadBundleFile(r.source);
          if (spec.ok())
            for (const auto& e : spec->entries) keys += KeyFamily(e.key) == KeyFamily(family);
        }
      std::string served;
      uint64_t all = 0;
      for (uint64_t n : served_n[p]) all += n;
      for (int i = 0; i < kNumServedBy; ++i)
        if (served_n[p][i])
          served += fmt::format("{}{} {:.0f}%", served.empty() ? "" : ", ", ServedByName(static_cast<ServedBy>(i)),
                                100.0 * double(served_n[p][i]) / double(all));
      const bool has_oracle = oracle_index < policies.size();
      fmt::print("{:<16} {:>12} {:>14.3f} {:>10}   {}{}\n", policies[p].name, keys, total[p] / 1e6,
                 has_oracle ? fmt::format("{:.3f}x", total[p] / total[oracle_index]) : "-", served,
                 p == oracle_index ? " (between tuned m: the default's time over the interpolated speed-up; never above the best policy)" : "");
    }
  }
  return rc;
}

}  // namespace
}  // namespace cliffguard

int main(int argc, char** argv) {
  using namespace cliffguard;
  bench::ReexecWithLibraryEnvironment(argv);  // the libraries as the cliffguard command runs them
  SetLogLevel(LogLevel::kError);
  Flags f;
  bool print_trace = false, print_oracle = false;
  size_t print_top = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      const size_t n = std::strlen(name);
      return a.compare(0, n, name) == 0 && a.size() > n && a[n] == '=' ? a.c_str() + n + 1 : nullptr;
    };
    if (a == "--print_trace") print_trace = true;
    else if (a == "--print_oracle") print_oracle = true;
    else if (auto v = value("--print_top")) print_top = std::strtoul(v, nullptr, 10);
    else if (auto v = value("--requests")) f.requests = std::atoi(v);
    else if (auto v = value("--median_m")) f.median_m = std::atof(v);
    else if (auto v = value("--sigma")) f.sigma = std::atof(v);
    else if (auto v = value("--max_m")) f.max_m = std::atoll(v);
    else if (auto v = value("--seed")) f.seed = std::strtoull(v, nullptr, 10);
    else if (auto v = value("--rounds")) f.rounds = std::atoi(v);
    else if (auto v = value("--threads")) f.threads = std::atoi(v);
    else if (auto v = value("--exact")) f.exact = v;
    else if (auto v = value("--buckets")) f.buckets = v;
    else if (auto v = value("--oracle")) f.oracle = v;
    else if (auto v = value("--dump")) f.dump = v;
    else if (auto v = value("--families")) {
      f.families.clear();
      for (std::string s = v; !s.empty();) {
        const size_t comma = s.find(',');
        const std::string part = s.substr(0, comma);
        s = comma == std::string::npos ? "" : s.substr(comma + 1);
        int64_t n = 0, k = 0;
        char layout[3] = {};
        if (std::sscanf(part.c_str(), "%2[nt]:%ld:%ld", layout, &n, &k) != 3 || n < 1 || k < 1)
          Die(fmt::format("--families: '{}' is not LAYOUT:N:K (e.g. nt:768:768)", part));
        f.families.push_back(OpKey::Gemm(0, n, k, layout[0] == 't', layout[1] == 't'));
      }
    } else {
      Die(fmt::format("unknown argument '{}' (see the comment at the top of bench/bench_dynamic.cc)", a));
    }
  }
  if (f.requests < 1 || f.max_m < 1 || f.rounds < 1 || f.median_m <= 0 || f.sigma <= 0)
    Die("--requests, --max_m, --rounds, --median_m and --sigma must be positive");
  const auto trace = Trace(f);
  if (print_trace) {
    for (const auto& [m, n] : trace) std::printf("%lld %lld\n", static_cast<long long>(m), static_cast<long long>(n));
    return 0;
  }
  if (print_top || print_oracle) {
    for (const OpKey& family : f.families)
      for (int64_t m : print_top ? TopM(trace, print_top) : OracleSample(f.max_m))
        std::printf("%s\n", WithVaryingDim(family, m).ToString().c_str());
    return 0;
  }
  return Run(f);
}
