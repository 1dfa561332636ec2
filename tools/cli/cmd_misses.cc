#include <ctime>

#include <fmt/format.h>

#include "cli_util.h"
#include "cliffguard/bundle.h"
#include "cliffguard/miss_report.h"
#include "commands.h"
#include "report_print.h"

namespace cliffguard::cli {

std::string RenderMissReport(const MissReport& r, size_t max_rows) {
  std::string out;
  if (!r.host.empty() || r.pid) out += fmt::format("written by {} pid {}\n", r.host.empty() ? "?" : r.host, r.pid);
  out += fmt::format("device {}: {} calls, {} hits, {} misses ({:.1f}% missed) over {} missed keys\n",
                                r.device_fingerprint, r.calls, r.hits, r.misses,
                                r.calls ? 100.0 * double(r.misses) / double(r.calls) : 0.0, r.records.size());
  if (r.records.empty()) return out + "no misses: every call ran a tuned schedule\n";
  out += fmt::format("expected gain assumes a tuned speed-up of {:.2f}x ({})\n\n", r.expected_speedup,
                     r.expected_speedup_basis.empty() ? "the median tuned speed-up of the loaded bundles"
                                                      : r.expected_speedup_basis);
  Table t({"rank", "key", "kind", "count", "fallback total", "per call", "expected gain", "seen (s)"});
  size_t rank = 0;
  for (const MissRecord& m : r.records) {
    if (max_rows && rank >= max_rows) break;
    ++rank;
    t.Row({fmt::format("{}", rank), m.key.ToString(), MissKindName(m.kind), fmt::format("{}", m.count),
           HumanMicros(m.fallback_us_total), HumanMicros(m.count ? m.fallback_us_total / double(m.count) : 0),
           m.expected_gain_us > 0 ? HumanMicros(m.expected_gain_us) : "unknown",
           fmt::format("{:.1f}", m.last_seen - m.first_seen)});
  }
  out += t.Render();
  if (max_rows && r.records.size() > max_rows) out += fmt::format("... {} more keys\n", r.records.size() - max_rows);
  return out;
}

void AddMissesCommand(CLI::App& app) {
  struct Opts {
    std::string path;
    size_t top = 0;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("misses", "Print a miss report as a ranked table (what to tune next)");
  cmd->add_option("REPORT", opts->path, "Miss report JSON (from `run --miss-report` or CLIFFGUARD_MISS_REPORT)")->required();
  cmd->add_option("--top", opts->top, "Show only the first N keys");
  cmd->callback([opts] {
    auto bytes = ReadFileBytes(opts->path, int64_t{1} << 30);
    ExitIfError(bytes.status(), "misses");
    auto report = MissReportFromJson(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
    if (!report.ok()) Fail("misses", fmt::format("{}: {}", opts->path, report.status().ToString()));
    fmt::print("{}", RenderMissReport(*report, opts->top));
    if (!report->records.empty())
      fmt::print("\nto tune them: cliffguard tune --from-report {} --top {} --log tuned.jsonl --out tuned.cgb\n", opts->path,
                 opts->top ? opts->top : report->records.size());
  });
}

}  // namespace cliffguard::cli
