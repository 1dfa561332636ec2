#include <ctime>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cli_util.h"
#include "cliffguard/bundle.h"
#include "commands.h"

namespace cliffguard::cli {
namespace {

std::string FormatTime(uint64_t unix_seconds) {
  if (unix_seconds == 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%SZ", &tm);
  return buf;
}

std::string FormatSchedule(const NamedSchedule& s) {
  std::string out = s.variant;
  for (const auto& [k, v] : s.params) out += fmt::format(" {}={}", k, v);
  return out;
}

}  // namespace

void AddInspectCommand(CLI::App& app) {
  struct Opts {
    std::string path;
    bool json = false;
    bool validate = false;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("inspect", "Print a bundle's header, device and entries");
  cmd->add_option("BUNDLE", opts->path, "Bundle file (.cgb)")->required();
  cmd->add_flag("--json", opts->json, "Print the JSON form that `cliffguard pack` reads");
  cmd->add_flag("--validate", opts->validate,
                "Also check every entry against this build and host (exit 1 when any is rejected)");
  cmd->callback([opts] {
    auto spec = ReadBundleFile(opts->path);
    ExitIfError(spec.status(), "inspect");
    if (opts->json) {
      fmt::print("{}\n", BundleToJson(*spec));
    } else {
      const BundleSpec& b = *spec;
      fmt::print("bundle       {}\nschema       {}\nproducer     {} {}\ncreated      {}\n", opts->path, b.schema_version,
                 b.producer, b.producer_version, FormatTime(b.created_at));
      fmt::print("device       {} {} ({}, {})\nfingerprint  {}\n", BackendName(b.device.backend), b.device.name,
                 b.device.vendor, b.device.arch, b.device.fingerprint);
      fmt::print("cost model   {}\n", b.cost_model.empty() ? "none" : fmt::format("{} ({} bytes)", b.cost_model_format, b.cost_model.size()));
      for (const auto& d : b.defaults)
        fmt::print("default      {} {} {} shapes: {}\n", OpKindName(d.op), DTypeName(d.dtype),
                   d.shape_class == ShapeClass::kUnspecified ? "tuned-class" : ShapeClassName(d.shape_class),
                   FormatSchedule(d.schedule));
      fmt::print("entries      {}\n\n", b.entries.size());
      Table t({"key", "tuned", "default", "speed-up", "GFLOP/s", "trials", "schedule"});
      for (const auto& e : b.entries) {
        const double gflops = e.tuned_us > 0 ? e.key.Flops() / (e.tuned_us * 1e3) : 0;
        t.Row({e.key.ToString(), HumanMicros(e.tuned_us), HumanMicros(e.default_us),
               e.tuned_us > 0 && e.default_us > 0 ? fmt::format("{:.2f}x", e.default_us / e.tuned_us) : "-",
               fmt::format("{:.1f}", gflops), fmt::format("{}", e.trials), FormatSchedule(e.schedule)});
      }
      fmt::print("{}", t.Render());
      if (!b.unreadable.empty()) {
        fmt::print("\nunreadable   {} (this build cannot decode them; a runtime rejects them at load)\n",
                   b.unreadable.size());
        for (const auto& u : b.unreadable) fmt::print("  {}: {}\n", u.where, u.reason);
      }
    }
    // The JSON form is what pack reads: entries left out of it must not pass silently.
    if (opts->json && !spec->unreadable.empty()) {
      for (const auto& u : spec->unreadable)
        fmt::print(stderr, "cliffguard inspect: {} is not in the JSON form: {}\n", u.where, u.reason);
      throw CLI::RuntimeError(1);
    }
    if (opts->validate) {
      const DeviceInfo host = HostCpuDevice(spec->device.threads > 0 ? spec->device.threads : 0);
      const ResolvedBundle r = ResolveBundle(*spec, host);
      for (const auto& rej : r.rejected)
        fmt::print(stderr, "rejected ({}): {}\n", EntryRejectionName(rej.reason), rej.message);
      for (const auto& rej : r.rejected_defaults)
        fmt::print(stderr, "rejected ({}): {}\n", EntryRejectionName(rej.reason), rej.message);
      if (!FingerprintMatches(host, spec->device.fingerprint))
        fmt::print(stderr, "note: bundle device '{}' is not this host '{}': a runtime here treats it as a device miss\n",
                   spec->device.fingerprint, host.fingerprint);
      for (const auto& u : spec->unreadable) fmt::print(stderr, "rejected (unreadable): {}: {}\n", u.where, u.reason);
      if (!r.rejected.empty() || !r.rejected_defaults.empty() || !spec->unreadable.empty()) throw CLI::RuntimeError(1);
    }
  });
}

void AddPackCommand(CLI::App& app) {
  struct Opts {
    std::string spec;
    std::string out;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("pack", "Write a bundle from its JSON form (as printed by `inspect --json`)");
  cmd->add_option("SPEC", opts->spec, "JSON file ('-' for standard input)")->required();
  cmd->add_option("-o,--out", opts->out, "Bundle file to write (atomically)")->required();
  cmd->callback([opts] {
    std::string text;
    if (opts->spec == "-") {
      std::stringstream ss;
      ss << std::cin.rdbuf();
      text = ss.str();
    } else {
      auto bytes = ReadFileBytes(opts->spec, int64_t{1} << 30);
      ExitIfError(bytes.status(), "pack");
      text.assign(bytes->begin(), bytes->end());
    }
    auto spec = BundleFromJson(text);
    if (!spec.ok()) Fail("pack", fmt::format("{}: {}", opts->spec, spec.status().ToString()));
    ExitIfError(WriteBundleFile(opts->out, *spec), "pack");
    fmt::print("wrote {} ({} entries, device {})\n", opts->out, spec->entries.size(), spec->device.fingerprint);
  });
}

}  // namespace cliffguard::cli
