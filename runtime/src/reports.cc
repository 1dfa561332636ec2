// Per-key statistics and miss reports, each from one snapshot of the counts.
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <optional>

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

namespace {

// The shared buffers of a runtime's reports, or, while another report holds them, a
// set of its own.
class BuffersLease {
 public:
  explicit BuffersLease(Runtime::Impl& r) : lock_(r.report_buffers_mu, std::try_to_lock) {
    b_ = lock_.owns_lock() ? &r.report_buffers : &own_.emplace();
  }
  MissReportBuffers& operator*() const { return *b_; }

 private:
  std::unique_lock<std::mutex> lock_;
  std::optional<MissReportBuffers> own_;
  MissReportBuffers* b_;
};

// The report's fields in `rep` and its records as rows in `b` (ranked), with its
// buckets and recommendations: one snapshot of the misses gives both the records
// and the totals, so that sum(records[].count) == misses holds while other threads
// keep missing.
void Gather(Runtime::Impl& r, MissReport& rep, MissReportBuffers& b) {
  rep.device_fingerprint = r.device.fingerprint;
  rep.device_name = r.device.name;
  rep.device_threads = r.device.threads;
  rep.pid = r.pid;
  rep.process_start = r.process_start;
  rep.runtime_version = CliffguardVersion();
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) rep.host = host;
  rep.generated_at = r.clock.ToUnixSeconds(TickClock::Now());
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
  const double tpu = r.clock.TicksPerMicrosecond();
  b.rows.clear();
  b.rank_keys.clear();
  const size_t entries = r.misses.Size();
  b.rows.reserve(entries);
  b.rank_keys.reserve(entries);
  r.misses.ForEach([&](const MissEntry& e, const MissCounts& c) {
    MissRow m;  // every field set, then appended whole
    m.key = &e.key;
    m.varying = e.key.dims[kVaryingDim];
    m.family = e.family;
    m.kind = e.kind;
    m.served_by = e.served_by;
    m.count = c.count;
    m.first_seen = r.clock.ToUnixSeconds(c.first_tick, tpu);
    m.last_seen = r.clock.ToUnixSeconds(c.last_tick, tpu);
    m.fallback_us_total = double(c.fallback_ticks) / tpu;
    m.bucket_lo = e.bucket_lo;
    m.bucket_hi = e.bucket_hi;
    m.key_json = e.key_json;
    m.fallback = e.fallback_text;
    m.served_from = e.served_from_text;
    double default_us = 0;
    for (int i = 0; i < kNumServedBy; ++i) {
      m.served_calls[i] = c.served_calls[i];
      m.served_us[i] = double(c.served_ticks[i]) / tpu;
      rep.served[i] += c.served_calls[i];
      if (!ServedByTunedKey(static_cast<ServedBy>(i))) default_us += m.served_us[i];
    }
    m.expected_gain_us = default_us * (1.0 - 1.0 / speedup[static_cast<int>(e.key.op)]);
    b.rank_keys.push_back(RankKeyOf(m, static_cast<uint32_t>(b.rows.size())));
    b.rows.push_back(m);
    rep.misses += c.count;
  });
  r.slots.CollectHits([&](const OpKey&, uint64_t n) { rep.hits += n; });
  rep.served[static_cast<int>(ServedBy::kExact)] += rep.hits;
  rep.calls = rep.hits + rep.misses;
  RankMissRows(b.rows, b.unranked, b.rank_keys);
  for (const MissRow& m : b.rows)  // in rank order, as a reader of the report sums them
    for (int i = 0; i < kNumServedBy; ++i) rep.served_us[i] += m.served_us[i];
  rep.buckets = BucketTrafficOf(b.rows);
  rep.recommended_buckets = RecommendBuckets(b.rows);
}

}  // namespace

MissReport Runtime::GetMissReport() const {
  BuffersLease lease(*impl_);
  MissReportBuffers& b = *lease;
  MissReport rep;
  Gather(*impl_, rep, b);
  rep.records.reserve(b.rows.size());
  for (const MissRow& m : b.rows) {
    MissRecord& rec = rep.records.emplace_back();
    rec.key = *m.key;
    rec.kind = m.kind;
    rec.count = m.count;
    rec.first_seen = m.first_seen;
    rec.last_seen = m.last_seen;
    rec.fallback_us_total = m.fallback_us_total;
    if (m.fallback) rec.fallback = m.fallback->text;
    rec.served_by = m.served_by;
    if (m.served_from) rec.served_from = m.served_from->text;
    rec.bucket_lo = m.bucket_lo;
    rec.bucket_hi = m.bucket_hi;
    std::copy(std::begin(m.served_calls), std::end(m.served_calls), rec.served_calls);
    std::copy(std::begin(m.served_us), std::end(m.served_us), rec.served_us);
    rec.expected_gain_us = m.expected_gain_us;
  }
  return rep;
}

Status Runtime::WriteMissReport(const std::string& path) const {
  BuffersLease lease(*impl_);
  MissReportBuffers& b = *lease;
  MissReport head;  // the report but its records, which are b's rows
  Gather(*impl_, head, b);
  MissReportFileText(head, b.rows, b.json);
  return WriteFileAtomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.json.data()), b.json.size()));
}

}  // namespace cliffguard
