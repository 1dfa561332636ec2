// Per-key statistics and miss reports, each from one snapshot of the counts.
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "cliffguard/file_io.h"
#include "runtime_impl.h"

namespace cliffguard {

std::unordered_map<OpKey, KeyStats, OpKeyHash> Runtime::Impl::CollectStats(const std::vector<MissLog::Snapshot>& snap) {
  std::unordered_map<OpKey, KeyStats, OpKeyHash> out;
  slots.CollectHits([&](const OpKey& k, uint64_t n) {
    KeyStats& s = out[k];
    s.key = k;
    s.hits += n;
    s.served[static_cast<int>(ServedBy::kExact)] += n;
  });
  for (const auto& m : snap) {
    KeyStats& s = out[m.key];
    s.key = m.key;
    s.misses += m.count;
    for (int i = 0; i < kNumServedBy; ++i) s.served[i] += m.served_calls[i];
  }
  return out;
}

std::vector<KeyStats> Runtime::Stats() const {
  auto m = impl_->CollectStats(impl_->misses.Snap());
  std::vector<KeyStats> out;
  out.reserve(m.size());
  for (auto& [k, s] : m) out.push_back(s);
  std::sort(out.begin(), out.end(), [](const KeyStats& a, const KeyStats& b) {
    return a.hits + a.misses != b.hits + b.misses ? a.hits + a.misses > b.hits + b.misses
                                                   : a.key.ToString() < b.key.ToString();
  });
  return out;
}

MissReport Runtime::GetMissReport() const {
  Impl& r = *impl_;
  MissReport rep;
  rep.device_fingerprint = r.device.fingerprint;
  rep.device_name = r.device.name;
  rep.device_threads = r.device.threads;
  rep.pid = r.pid;
  rep.process_start = r.process_start;
  rep.runtime_version = CliffguardVersion();
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) rep.host = host;
  rep.generated_at = r.clock.ToUnixSeconds(TickClock::Now());
  // One snapshot of the misses gives both the records and the totals, so that
  // sum(records[].count) == misses holds while other threads keep missing.
  std::vector<MissLog::Snapshot> snap = r.misses.Snap();
  r.slots.CollectHits([&](const OpKey&, uint64_t n) { rep.hits += n; });
  rep.records.reserve(snap.size());
  rep.served[static_cast<int>(ServedBy::kExact)] = rep.hits;
  const double tpu = r.clock.TicksPerMicrosecond();
  double speedup[kNumOpKinds];
  {
    std::lock_guard<std::mutex> lock(r.load_mu);
    const DispatchTable* t = r.table.load(std::memory_order_acquire);
    for (uint8_t op = 0; op < kNumOpKinds; ++op) speedup[op] = t->ExpectedSpeedup(static_cast<OpKind>(op));
    const size_t n = t->SpeedupSamples(OpKind::kGemm);
    rep.expected_speedup_basis =
        n ? fmt::format("median default_us/tuned_us of {} loaded gemm entries, as measured by the tuner", n)
          : "no loaded gemm entry with measured times: gain unknown";
  }
  rep.expected_speedup = speedup[static_cast<int>(OpKind::kGemm)];
  for (auto& m : snap) {
    MissRecord rec;
    rec.key = m.key;
    rec.kind = m.kind;
    rec.count = m.count;
    rec.first_seen = r.clock.ToUnixSeconds(m.first_tick);
    rec.last_seen = r.clock.ToUnixSeconds(m.last_tick);
    rec.fallback_us_total = double(m.fallback_ticks) / tpu;
    rec.fallback = std::move(m.fallback);
    rec.served_by = m.served_by;
    if (ServedByTunedKey(m.served_by)) rec.served_from = m.served_from.ToString();
    rec.bucket_lo = m.bucket_lo;
    rec.bucket_hi = m.bucket_hi;
    double default_us = 0;
    for (int i = 0; i < kNumServedBy; ++i) {
      rec.served_calls[i] = m.served_calls[i];
      rec.served_us[i] = double(m.served_ticks[i]) / tpu;
      rep.served[i] += m.served_calls[i];
      rep.served_us[i] += rec.served_us[i];
      if (!ServedByTunedKey(static_cast<ServedBy>(i))) default_us += rec.served_us[i];
    }
    rec.expected_gain_us = default_us * (1.0 - 1.0 / speedup[static_cast<int>(m.key.op)]);
    rep.misses += m.count;
    rep.records.push_back(std::move(rec));
  }
  rep.calls = rep.hits + rep.misses;
  RankMissRecords(rep);
  rep.buckets = BucketTrafficOf(rep.records);
  rep.recommended_buckets = RecommendBuckets(rep.records, rep.expected_speedup);
  return rep;
}

Status Runtime::WriteMissReport(const std::string& path) const {
  const std::string json = MissReportToJson(GetMissReport()) + "\n";
  return WriteFileAtomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(json.data()), json.size()));
}

}  // namespace cliffguard
