#include <algorithm>
#include <cstdio>
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

// The validation of `inspect --validate` and `pack`: every entry and op default is
// resolved against the device here that the bundle names (the host CPU at the
// bundle's thread budget, or a GPU), else against the device the bundle declares.
struct BundleCheck {
  bool here = false;         // a device here has the bundle's fingerprint
  DeviceInfo device;         // what the entries were checked against
  std::string mismatch;      // !here: the device here it is not, and how they differ
  std::vector<std::string> problems;  // one line per rejected or unreadable entry
  size_t entries_ok = 0, defaults_ok = 0;
  std::string Summary(const BundleSpec& spec) const {
    std::vector<std::string> parts;
    if (const size_t bad = spec.entries.size() - entries_ok)
      parts.push_back(fmt::format("{} of {} entries rejected", bad, spec.entries.size()));
    if (const size_t bad = spec.defaults.size() - defaults_ok)
      parts.push_back(fmt::format("{} of {} op defaults rejected", bad, spec.defaults.size()));
    if (!spec.unreadable.empty()) parts.push_back(fmt::format("{} unreadable", spec.unreadable.size()));
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
    return out;
  }
};

BundleCheck CheckBundle(const BundleSpec& spec) {
  BundleCheck c;
  const int threads = spec.device.backend == Backend::kCpu && spec.device.threads > 0 ? spec.device.threads : 0;
  const DeviceList all = ListDevices(threads);
  const DeviceInfo* nearest = &all.devices[0];
  for (const DeviceInfo& d : all.devices) {
    if (FingerprintMatches(d, spec.device.fingerprint)) {
      c.here = true;
      c.device = d;
    }
    if (d.backend == spec.device.backend && nearest->backend != spec.device.backend) nearest = &d;
  }
  if (!c.here) {
    c.mismatch = fmt::format("bundle device '{}' is not this host's {} '{}': {}", spec.device.fingerprint,
                             nearest->spec, nearest->fingerprint, DeviceDifferences(spec.device, *nearest));
    c.device = spec.device;
  }
  const ResolvedBundle r = ResolveBundle(spec, c.device);
  for (const auto& rej : r.rejected)
    c.problems.push_back(fmt::format("rejected ({}): {}", EntryRejectionName(rej.reason), rej.message));
  for (const auto& rej : r.rejected_defaults)
    c.problems.push_back(fmt::format("rejected ({}): {}", EntryRejectionName(rej.reason), rej.message));
  for (const auto& u : spec.unreadable)
    c.problems.push_back(fmt::format("rejected (unreadable): {}: {}", u.where, u.reason));
  c.entries_ok = spec.entries.size() - r.rejected.size();
  c.defaults_ok = spec.defaults.size() - r.rejected_defaults.size();
  return c;
}

[[noreturn]] void FailWithDetails(const std::string& command, const std::string& message,
                                  const std::vector<std::string>& details, const std::string& hint = "") {
  fmt::print(stderr, "cliffguard {}: {}\n", command, message);
  for (const auto& d : details) fmt::print(stderr, "  {}\n", d);
  if (!hint.empty()) fmt::print(stderr, "{}\n", hint);
  throw CLI::RuntimeError(kExitFailure);
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
                "Also check every entry against this build and host; exit 1 when any is rejected or the "
                "bundle's device is not this host");
  cmd->callback([opts] {
    auto spec = ReadBundleFile(opts->path);
    ExitIfError(spec.status(), "inspect", kExitFailure);
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
      throw CLI::RuntimeError(kExitFailure);
    }
    if (opts->validate) {
      const BundleCheck c = CheckBundle(*spec);
      std::vector<std::string> details = c.problems;
      if (!c.here) details.push_back(c.mismatch + "; a runtime here treats every key as a device miss");
      if (!details.empty()) {
        std::string why = c.Summary(*spec);
        if (!c.here) why += fmt::format("{}its device is not this host", why.empty() ? "" : ", ");
        FailWithDetails("inspect", fmt::format("'{}' is not valid here: {}", opts->path, why), details);
      }
      // The confirmation goes with the rest of the output, unless that is JSON.
      std::FILE* out = opts->json ? stderr : stdout;
      fmt::print(out, "valid: {} entries, {} defaults; device {} matches this host{}\n", c.entries_ok, c.defaults_ok,
                 spec->device.fingerprint,
                 c.device.backend == Backend::kCpu ? "" : fmt::format(" ({})", c.device.spec));
      if (c.device.backend == Backend::kCpu && c.device.threads != DefaultThreadBudget())
        fmt::print(out, "note: it applies with a thread budget of {} (--threads or CLIFFGUARD_THREADS); this "
                   "host's default is {}\n", c.device.threads, DefaultThreadBudget());
    }
  });
}

void AddPackCommand(CLI::App& app) {
  struct Opts {
    std::string spec;
    std::string out;
    bool no_validate = false;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("pack", "Write a bundle from its JSON form (as printed by `inspect --json`)");
  cmd->add_option("SPEC", opts->spec, "JSON file ('-' for standard input)")->required();
  cmd->add_option("-o,--out", opts->out, "Bundle file to write (atomically)")->required();
  cmd->add_flag("--no-validate", opts->no_validate,
                "Write entries that `inspect --validate` rejects (by default pack refuses them and writes nothing)");
  cmd->callback([opts] {
    std::string text;
    if (opts->spec == "-") {
      std::stringstream ss;
      ss << std::cin.rdbuf();
      text = ss.str();
    } else {
      auto bytes = ReadFileBytes(opts->spec, int64_t{1} << 30);
      ExitIfError(bytes.status(), "pack", kExitFailure);
      text.assign(bytes->begin(), bytes->end());
    }
    auto spec = BundleFromJson(text);
    if (!spec.ok()) Fail("pack", fmt::format("{}: {}", opts->spec, spec.status().ToString()), kExitFailure);
    if (!opts->no_validate) {
      const BundleCheck c = CheckBundle(*spec);
      if (!c.problems.empty())
        FailWithDetails("pack", fmt::format("'{}' is not valid: {}; '{}' not written", opts->spec, c.Summary(*spec),
                                            opts->out),
                        c.problems, "Run 'cliffguard pack --no-validate' to write it anyway.");
      if (!c.here)
        fmt::print(stderr, "cliffguard pack: note: {}; its entries were checked against the device it names\n",
                   c.mismatch);
    }
    ExitIfError(WriteBundleFile(opts->out, *spec), "pack", kExitFailure);
    fmt::print("wrote {} ({} entries, device {})\n", opts->out, spec->entries.size(), spec->device.fingerprint);
  });
}

}  // namespace cliffguard::cli
