// `cliffguard compare A.cgb B.cgb`: the schedules two bundles of this device ship for
// the same keys, measured here side by side (interleaved, with the built-in default),
// so that whether a re-tuning (a larger budget, another strategy) paid off is a ratio
// taken in one run rather than two tuned_us from different runs.
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "cli_util.h"
#include "cliffguard/bundle.h"
#include "cliffguard/tuner/measurer.h"
#include "commands.h"

namespace cliffguard::cli {

void AddCompareCommand(CLI::App& app) {
  struct Opts {
    std::string a, b;
    int rounds = 6;
    double min_time_ms = 30;
    double tolerance = 0.05;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Measure the schedules two bundles of this device ship for the same keys, interleaved with the "
                 "built-in default, and print their ratio per key");
  cmd->add_option("A", o->a, "Bundle A (.cgb), e.g. tuned with a short budget")->required();
  cmd->add_option("B", o->b, "Bundle B (.cgb) of the same device, e.g. tuned with a longer one")->required();
  cmd->add_option("--rounds", o->rounds, "Interleaved rounds over the three schedules of a key")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--min-time-ms", o->min_time_ms, "Timed calls per schedule and round sum to at least half this")
      ->check(CLI::Range(0.1, 60000.0))
      ->capture_default_str();
  cmd->add_option("--tolerance", o->tolerance,
                  "A key's A is 'within' when its time is at most (1 + this) x B's; the exit status is 0 either way")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  cmd->callback([o] {
    const std::string c = "compare";
    auto a = ReadBundleFile(o->a);
    ExitIfError(a.status(), c, kExitFailure);
    auto b = ReadBundleFile(o->b);
    ExitIfError(b.status(), c, kExitFailure);
    if (a->device.fingerprint != b->device.fingerprint)
      Fail(c, fmt::format("bundles '{}' ({}) and '{}' ({}) are for different devices", o->a, a->device.fingerprint,
                          o->b, b->device.fingerprint),
           kExitFailure);
    const int threads = a->device.backend == Backend::kCpu && a->device.threads > 0 ? a->device.threads : 0;
    const DeviceInfo here = HostCpuDevice(threads);
    if (!FingerprintMatches(here, a->device.fingerprint))
      Fail(c, fmt::format("the bundles are for device {}, not this host ({}): {}", a->device.fingerprint,
                          here.fingerprint, DeviceDifferences(a->device, here)),
           kExitFailure);
    const ResolvedBundle ra = ResolveBundle(*a, here), rb = ResolveBundle(*b, here);
    std::map<std::string, const ResolvedEntry*> in_b;
    for (const auto& e : rb.entries) in_b[e.key.ToString()] = &e;

    tuner::MeasureOptions mo;
    mo.interleave_rounds = o->rounds;
    mo.min_time_ms = o->min_time_ms;
    tuner::SandboxMeasurer measurer(here, mo);
    Table t({"key", "A", "B", "default", "A/B time", "A within"});
    double log_sum = 0;
    int compared = 0, within = 0, only_a = 0;
    for (const auto& ea : ra.entries) {
      const auto it = in_b.find(ea.key.ToString());
      if (it == in_b.end()) {
        ++only_a;
        continue;
      }
      const ResolvedEntry& eb = *it->second;
      in_b.erase(it);
      auto def = DefaultSchedule(ea.key, here);
      ExitIfError(def.status(), c, kExitFailure);
      const Schedule s[3] = {ea.schedule, eb.schedule, *def};
      auto r = measurer.MeasureInterleaved(ea.key, s);
      ExitIfError(r.status(), c, kExitFailure);
      for (const auto& m : *r)
        if (!m.ok) Fail(c, fmt::format("{}: {} failed: {}", ea.key.ToString(), m.schedule.ToString(), m.error), kExitFailure);
      const double ratio = (*r)[0].median_us / (*r)[1].median_us;
      const bool ok = ratio <= 1.0 + o->tolerance;
      log_sum += std::log(ratio);
      ++compared;
      within += ok;
      t.Row({ea.key.ToString(), HumanMicros((*r)[0].median_us), HumanMicros((*r)[1].median_us),
             HumanMicros((*r)[2].median_us), fmt::format("{:.3f}", ratio), ok ? "yes" : "no"});
    }
    fmt::print("{}\n", t.Render());
    if (compared == 0) Fail(c, fmt::format("'{}' and '{}' have no key in common", o->a, o->b), kExitFailure);
    fmt::print("{} keys compared ({} rounds interleaved): A/B time geomean {:.3f}; {} of {} keys within {:.0f}% of B\n",
               compared, o->rounds, std::exp(log_sum / compared), within, compared, o->tolerance * 100);
    if (only_a || !in_b.empty())
      fmt::print("not compared: {} keys only in A, {} only in B\n", only_a, in_b.size());
  });
}

}  // namespace cliffguard::cli
