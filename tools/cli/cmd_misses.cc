#include <algorithm>
#include <ctime>
#include <set>

#include <fmt/format.h>

#include "cli_util.h"
#include "cliffguard/bundle.h"
#include "cliffguard/file_io.h"
#include "cliffguard/miss_report.h"
#include "commands.h"
#include "report_print.h"

namespace cliffguard::cli {

std::string RenderMissReport(const MissReport& r, size_t max_rows) {
  std::string out;
  if (!r.host.empty() || r.pid)
    out += fmt::format("written by {} pid {}{}\n", r.host.empty() ? "?" : r.host, r.pid,
                       r.runtime_version.empty() ? "" : fmt::format(", cliffguard {}", r.runtime_version));
  if (!r.sources.empty()) {
    std::set<std::string> hosts;
    for (const ReportSource& x : r.sources) hosts.insert(x.host.empty() ? "?" : x.host);
    std::string names;
    for (const std::string& h : hosts) {
      if (names.size() > 60) {
        names += ", ...";
        break;
      }
      names += (names.empty() ? "" : ", ") + h;
    }
    out += fmt::format("merged from {} processes on {} host(s) ({})\n", r.sources.size(), hosts.size(), names);
  }
  out += fmt::format("device {}: {} calls, {} hits, {} misses ({:.1f}% missed) over {} missed keys\n",
                                r.device_fingerprint, r.calls, r.hits, r.misses,
                                r.calls ? 100.0 * double(r.misses) / double(r.calls) : 0.0, r.records.size());
  std::string served;
  for (int i = 0; i < kNumServedBy; ++i)
    served += fmt::format("{}{} {}", i ? ", " : "", ServedByName(static_cast<ServedBy>(i)), r.served[i]);
  out += fmt::format("served by: {}\n", served);
  if (r.records.empty()) return out + "no misses: every call ran a tuned schedule\n";
  out += fmt::format("expected gain assumes a tuned speed-up of {:.2f}x ({})\n\n", r.expected_speedup,
                     r.expected_speedup_basis.empty() ? "the median tuned speed-up of the loaded bundles"
                                                      : r.expected_speedup_basis);
  Table t({"rank", "key", "kind", "served by", "count", "time", "per call", "expected gain", "seen (s)"});
  size_t rank = 0;
  for (const MissRecord& m : r.records) {
    if (max_rows && rank >= max_rows) break;
    ++rank;
    std::string by = ServedByName(m.served_by);
    if (auto from = OpKey::Parse(m.served_from); from.ok())
      by += m.bucket_hi > 0 ? fmt::format(" [{}, {}] of {}={}", m.bucket_lo, m.bucket_hi, VaryingDimName(from->op),
                                          from->dims[kVaryingDim])
                            : fmt::format(" {}={}", VaryingDimName(from->op), from->dims[kVaryingDim]);
    t.Row({fmt::format("{}", rank), m.key.ToString(), MissKindName(m.kind), by, fmt::format("{}", m.count),
           HumanMicros(m.fallback_us_total), HumanMicros(m.count ? m.fallback_us_total / double(m.count) : 0),
           m.expected_gain_us > 0 ? HumanMicros(m.expected_gain_us)
                                  : (ServedByTunedKey(m.served_by) ? "-" : "unknown"),
           fmt::format("{:.1f}", m.last_seen - m.first_seen)});
  }
  out += t.Render();
  if (max_rows && r.records.size() > max_rows) out += fmt::format("... {} more keys\n", r.records.size() - max_rows);
  out += "(time: in the schedule that served the key; bucket and nearest calls are timed one in 16. expected gain: "
         "time in a default x (1 - 1/speed-up); seen: seconds from first to last call)\n";
  if (!r.buckets.empty()) {
    Table b({"bucket of", "range", "keys", "calls", "time"});
    for (const BucketTraffic& x : r.buckets)
      b.Row({x.key.ToString(), fmt::format("[{}, {}]", x.lo, x.hi), fmt::format("{}", x.keys),
             fmt::format("{}", x.calls), HumanMicros(x.us_total)});
    out += "\ntraffic absorbed by buckets:\n" + b.Render();
  }
  if (!r.recommended_buckets.empty()) {
    Table b({"tune", "range", "keys", "calls", "time in defaults", "expected gain"});
    size_t n = 0;
    for (const BucketRecommendation& x : r.recommended_buckets) {
      if (max_rows && n++ >= max_rows) break;
      b.Row({x.key.ToString(), fmt::format("[{}, {}]", x.lo, x.hi), fmt::format("{}", x.keys),
             fmt::format("{}", x.calls), HumanMicros(x.default_us_total),
             x.expected_gain_us > 0 ? HumanMicros(x.expected_gain_us) : "unknown"});
    }
    out += "\nrecommended buckets (missed calls that ran a default, by range of the varying dimension):\n" + b.Render();
  }
  return out;
}

StatusOr<MissReport> ReadMergedMissReport(const std::vector<std::string>& paths) {
  if (paths.size() != 1) return MergeMissReportFiles(paths);
  CG_ASSIGN_OR_RETURN(std::vector<MissReport> reports, ReadMissReportFiles(paths));
  return std::move(reports[0]);
}

void AddMissesCommand(CLI::App& app) {
  struct Opts {
    std::string path;
    int64_t top = 0;
    std::vector<std::string> inputs;
    std::string out;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("misses", "Print a miss report as a ranked table (what to tune next); "
                                               "`misses merge` combines the reports of several replicas");
  cmd->add_option("REPORT", opts->path, "Miss report JSON (from `run --miss-report` or CLIFFGUARD_MISS_REPORT)");
  cmd->add_option("--top", opts->top, "Show only the first N keys (0: all)")->capture_default_str();
  CLI::App* merge = cmd->add_subcommand(
      "merge", "Merge the miss reports of one device's replicas: counts and times summed per key, first and last "
               "seen kept, every process listed; the same in any grouping and order");
  merge->add_option("REPORTS", opts->inputs, "Miss reports (JSON), of one device and schema version")->required();
  merge->add_option("-o,--out", opts->out, "Merged report to write (atomically)")->required();
  merge->callback([opts] {
    auto merged = MergeMissReportFiles(opts->inputs);  // one input too: a merged report, listing its process
    if (!merged.ok()) Fail("misses merge", merged.status().message(), kExitFailure);
    const std::string json = MissReportToJson(*merged) + "\n";
    ExitIfError(WriteFileAtomic(opts->out, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(json.data()),
                                                                    json.size())),
                "misses merge", kExitFailure);
    fmt::print("wrote {}: {} reports from {} processes; {} calls, {} misses over {} keys; device {}\n", opts->out,
               opts->inputs.size(), merged->sources.size(), merged->calls, merged->misses, merged->records.size(),
               merged->device_fingerprint);
  });
  cmd->callback([cmd, opts] {
    if (cmd->got_subcommand("merge")) return;
    if (opts->path.empty()) Fail("misses", "REPORT is required: the miss report to print (or `misses merge ...`)");
    if (opts->top < 0) Fail("misses", fmt::format("--top {} must be >= 0 (0: every key)", opts->top));
    const size_t top = static_cast<size_t>(opts->top);
    auto bytes = ReadFileBytes(opts->path, int64_t{1} << 30);
    ExitIfError(bytes.status(), "misses", kExitFailure);
    auto report = MissReportFromJson(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
    if (!report.ok()) Fail("misses", fmt::format("{}: {}", opts->path, report.status().ToString()), kExitFailure);
    fmt::print("{}", RenderMissReport(*report, top));
    const size_t targets =
        report->recommended_buckets.empty() ? report->records.size() : report->recommended_buckets.size();
    if (targets)
      fmt::print("\nto tune {}: cliffguard tune --from-report {} --top {} --log tuned.jsonl --out tuned.cgb\n",
                 report->recommended_buckets.empty() ? "them" : "the recommended buckets", opts->path,
                 top ? std::min(top, targets) : targets);
  });
}

}  // namespace cliffguard::cli
