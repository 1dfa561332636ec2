// The runtime's counters in Prometheus text exposition format (0.0.4).
#include <algorithm>

#include <fmt/format.h>

#include "runtime_impl.h"

namespace cliffguard {
namespace {

// A label value: backslash, double quote and newline escaped.
std::string Label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

class Exposition {
 public:
  void Family(const char* name, const char* type, const char* help) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void Sample(const char* name, const std::string& labels, double v) {
    fmt::format_to(std::back_inserter(out_), "{}{}{}{} {}\n", name, labels.empty() ? "" : "{", labels,
                   labels.empty() ? "" : "}", v);
  }
  void Sample(const char* name, const std::string& labels, uint64_t v) {
    fmt::format_to(std::back_inserter(out_), "{}{}{}{} {}\n", name, labels.empty() ? "" : "{", labels,
                   labels.empty() ? "" : "}", v);
  }
  std::string Take() { return fmt::to_string(out_); }

 private:
  fmt::memory_buffer out_;
};

constexpr int kNumMissKinds = 3;

}  // namespace

std::string Runtime::MetricsText() const {
  Impl& r = *impl_;
  // From the counters themselves (no report: no ranking, no key texts but the top N).
  const std::vector<MissLog::Snapshot> snap = r.misses.Snap();
  uint64_t hits[kNumOpKinds] = {};
  r.slots.CollectHits([&](const OpKey& k, uint64_t n) {
    if (static_cast<uint8_t>(k.op) < kNumOpKinds) hits[static_cast<int>(k.op)] += n;
  });
  double speedup[kNumOpKinds];
  {
    std::lock_guard<std::mutex> lock(r.load_mu);
    const DispatchTable* t = r.table.load(std::memory_order_acquire);
    for (uint8_t op = 0; op < kNumOpKinds; ++op) speedup[op] = t->ExpectedSpeedup(static_cast<OpKind>(op));
  }
  const double tpu = r.clock.TicksPerMicrosecond();
  uint64_t served[kNumOpKinds][kNumServedBy] = {}, missed[kNumOpKinds][kNumMissKinds] = {}, keys[kNumOpKinds] = {};
  double served_s[kNumOpKinds][kNumServedBy] = {}, gain_s[kNumOpKinds] = {};
  for (const MissLog::Snapshot& m : snap) {
    const int op = static_cast<int>(m.key.op);
    if (op >= kNumOpKinds) continue;
    ++keys[op];
    missed[op][static_cast<int>(m.kind)] += m.count;
    double default_s = 0;
    for (int i = 0; i < kNumServedBy; ++i) {
      const double sec = double(m.served_ticks[i]) / tpu * 1e-6;
      served[op][i] += m.served_calls[i];
      served_s[op][i] += sec;
      if (i != 0 && !ServedByTunedKey(ServedBy(i))) default_s += sec;
    }
    gain_s[op] += default_s * (1.0 - 1.0 / speedup[op]);
  }
  size_t bundles = 0, entries = 0, rejected = 0;
  uint64_t loads, rejected_total, reloads;
  {
    std::lock_guard<std::mutex> lock(r.load_mu);
    for (const LoadedBundle& b : r.bundles)
      if (b.report.device_match) {
        ++bundles;
        entries += b.report.entries_loaded;
        rejected += b.report.rejected.size();
      }
    loads = r.bundle_loads_total;
    rejected_total = r.entries_rejected_total;
    reloads = r.reloads_total;
  }

  Exposition x;
  x.Family("cliffguard_info", "gauge", "The runtime's version and device (value 1).");
  x.Sample("cliffguard_info",
           fmt::format("version=\"{}\",device=\"{}\",device_name=\"{}\",threads=\"{}\",fallback=\"{}\",disabled=\"{}\"",
                       Label(CliffguardVersion()), Label(r.device.fingerprint), Label(r.device.name), r.device.threads,
                       FallbackPolicyName(r.policy), r.options.disable ? 1 : 0),
           uint64_t{1});
  x.Family("cliffguard_start_time_seconds", "gauge", "When the process counting started, unix seconds.");
  x.Sample("cliffguard_start_time_seconds", "", r.process_start);
  x.Family("cliffguard_calls_total", "counter",
           "Operator calls dispatched, by op and by what served them (exact: the key's own tuned entry, a hit).");
  for (int op = 0; op < kNumOpKinds; ++op)
    for (int i = 0; i < kNumServedBy; ++i)
      x.Sample("cliffguard_calls_total",
               fmt::format("op=\"{}\",served_by=\"{}\"", OpKindName(OpKind(op)), ServedByName(ServedBy(i))),
               i == 0 ? hits[op] : served[op][i]);
  x.Family("cliffguard_hits_total", "counter", "Calls served by the key's own tuned entry.");
  for (int op = 0; op < kNumOpKinds; ++op)
    x.Sample("cliffguard_hits_total", fmt::format("op=\"{}\"", OpKindName(OpKind(op))), hits[op]);
  x.Family("cliffguard_misses_total", "counter",
           "Calls whose key has no usable entry of its own, by op and kind of miss (the key's latest).");
  for (int op = 0; op < kNumOpKinds; ++op)
    for (int k = 0; k < kNumMissKinds; ++k)
      x.Sample("cliffguard_misses_total",
               fmt::format("op=\"{}\",kind=\"{}\"", OpKindName(OpKind(op)), MissKindName(MissKind(k))), missed[op][k]);
  x.Family("cliffguard_fallback_seconds_total", "counter",
           "Time missed calls spent in the schedule that served them, by op and kind (bucket and nearest: sampled).");
  for (int op = 0; op < kNumOpKinds; ++op)
    for (int i = 1; i < kNumServedBy; ++i)
      x.Sample("cliffguard_fallback_seconds_total",
               fmt::format("op=\"{}\",served_by=\"{}\"", OpKindName(OpKind(op)), ServedByName(ServedBy(i))),
               served_s[op][i]);
  x.Family("cliffguard_expected_gain_seconds", "gauge",
           "Time that tuning the missed keys would have saved so far (time in defaults x (1 - 1/expected speed-up)).");
  for (int op = 0; op < kNumOpKinds; ++op)
    x.Sample("cliffguard_expected_gain_seconds", fmt::format("op=\"{}\"", OpKindName(OpKind(op))), gain_s[op]);
  x.Family("cliffguard_missed_keys", "gauge", "Distinct keys that missed.");
  for (int op = 0; op < kNumOpKinds; ++op)
    x.Sample("cliffguard_missed_keys", fmt::format("op=\"{}\"", OpKindName(OpKind(op))), keys[op]);
  x.Family("cliffguard_bundles_loaded", "gauge", "Loaded bundles that apply to this device.");
  x.Sample("cliffguard_bundles_loaded", "", uint64_t(bundles));
  x.Family("cliffguard_bundle_entries", "gauge", "Entries of the loaded bundles of this device, by state.");
  x.Sample("cliffguard_bundle_entries", "state=\"loaded\"", uint64_t(entries));
  x.Sample("cliffguard_bundle_entries", "state=\"rejected\"", uint64_t(rejected));
  x.Family("cliffguard_bundle_loads_total", "counter", "Bundles loaded (each file of a replace counts).");
  x.Sample("cliffguard_bundle_loads_total", "", loads);
  x.Family("cliffguard_bundle_entries_rejected_total", "counter", "Entries rejected by bundle loads.");
  x.Sample("cliffguard_bundle_entries_rejected_total", "", rejected_total);
  x.Family("cliffguard_bundle_reloads_total", "counter", "Replacements of the loaded set (ReplaceBundles, UnloadAll).");
  x.Sample("cliffguard_bundle_reloads_total", "", reloads);

  const size_t top = size_t(std::max(0, r.options.metrics_top_keys));
  if (top > 0) {
    std::vector<const MissLog::Snapshot*> by_calls;
    by_calls.reserve(snap.size());
    for (const MissLog::Snapshot& m : snap) by_calls.push_back(&m);
    const size_t n = std::min(top, by_calls.size());
    std::partial_sort(by_calls.begin(), by_calls.begin() + n, by_calls.end(),
                      [](const MissLog::Snapshot* a, const MissLog::Snapshot* b) {
                        return a->count != b->count ? a->count > b->count : a->fallback_ticks > b->fallback_ticks;
                      });
    by_calls.resize(n);
    std::vector<std::string> names;
    for (const MissLog::Snapshot* m : by_calls) names.push_back(Label(m->key.ToString()));
    x.Family("cliffguard_key_calls_total", "counter",
             "Calls of the missed keys with the most calls (the top N, RuntimeOptions.metrics_top_keys), by what "
             "served them.");
    for (size_t k = 0; k < n; ++k)
      for (int i = 1; i < kNumServedBy; ++i)
        if (by_calls[k]->served_calls[i])
          x.Sample("cliffguard_key_calls_total",
                   fmt::format("key=\"{}\",served_by=\"{}\"", names[k], ServedByName(ServedBy(i))),
                   by_calls[k]->served_calls[i]);
    x.Family("cliffguard_key_fallback_seconds_total", "counter", "Time of the same keys' calls.");
    for (size_t k = 0; k < n; ++k)
      x.Sample("cliffguard_key_fallback_seconds_total", fmt::format("key=\"{}\"", names[k]),
               double(by_calls[k]->fallback_ticks) / tpu * 1e-6);
  }
  return x.Take();
}

}  // namespace cliffguard
