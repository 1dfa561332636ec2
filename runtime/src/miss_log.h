// Internal: exact, concurrent miss accounting and a cheap clock.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cliffguard/kernel.h"
#include "cliffguard/miss_report.h"
#include "cliffguard/op_key.h"

namespace cliffguard {

// Time-stamp counter ticks, converted to seconds with a calibration taken over the
// clock's own lifetime (the longer it lives, the more exact).
class TickClock {
 public:
  TickClock();
  static uint64_t Now() {
#if defined(__x86_64__)
    return __builtin_ia32_rdtsc();
#else
    return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
  }
  double TicksPerMicrosecond() const;
  double ToUnixSeconds(uint64_t ticks) const { return ToUnixSeconds(ticks, TicksPerMicrosecond()); }
  // With a calibration taken once (TicksPerMicrosecond()), for the many times of one report.
  double ToUnixSeconds(uint64_t ticks, double ticks_per_us) const;

 private:
  uint64_t tick0_;
  std::chrono::steady_clock::time_point steady0_;
  double unix0_;
};

// A missed key's counters summed over its stripes.
struct MissCounts {
  uint64_t count = 0, fallback_ticks = 0;
  uint64_t first_tick = 0, last_tick = 0;  // 0: none
  uint64_t served_calls[kNumServedBy] = {}, served_ticks[kNumServedBy] = {};
};

// A text a report shows, with its JSON string (quoted and escaped) made once.
struct ReportText {
  std::string text, json;
};
// miss_report.cc: `text` as a JSON string, quoted and escaped, as reports write it.
std::string JsonString(std::string_view text);

// One missed key. Counters are striped by thread (each stripe on its own cache lines)
// so that threads missing the same key do not contend, and kept per ServedBy kind
// (a reload can change what serves the key); kind, fallback and generation change
// only under the owning shard's mutex.
struct MissEntry {
  static constexpr int kStripes = 8;
  // Calls served by a tuned key of the family (bucket, nearest) run at hit speed, so
  // they are timed one in kTimeSampling per thread and key: that call's time stands
  // for the calls since the previous timed one. Counts stay exact. Calls served by a
  // default are all timed.
  static constexpr uint32_t kTimeSampling = 16;
  struct alignas(64) Stripe {
    std::atomic<uint64_t> count[kNumServedBy] = {};
    std::atomic<uint64_t> ticks[kNumServedBy] = {};  // time in the schedule that served
    std::atomic<uint64_t> first_tick{0};  // 0: none yet
    std::atomic<uint64_t> last_tick{0};
  };
  // What a report reads comes first, on adjacent lines, then the stripes.
  OpKey key;
  std::atomic<uint8_t> used_stripes{0};  // bit s: stripe s has recorded (a snapshot reads only those)
  // Guarded by the shard mutex:
  MissKind kind = MissKind::kShapeMiss;
  ServedBy served_by = ServedBy::kBuiltinDefault;
  int64_t bucket_lo = 0, bucket_hi = 0;  // bucket: its range
  // For reports, kept by the log (MissLog::Intern): fallback.ToString(), and
  // served_from.ToString() when served by a tuned key (else null).
  const ReportText* fallback_text = nullptr;
  const ReportText* served_from_text = nullptr;
  // Set when the entry is first handed out: key.ToString() as a JSON string, kept by
  // the log, and the log's id of the key's family (KeyFamily).
  std::string_view key_json;
  uint32_t family = 0;
  Stripe stripes[kStripes];
  // Guarded by the shard mutex:
  OpKey served_from;  // bucket, nearest: the tuned key whose schedule runs
  Schedule fallback;
  std::string fallback_source;   // what serves it, for people: "bucket [9, 16] of '...'", "built-in default", ...
  uint64_t generation = ~uint64_t{0};  // dispatch-table generation kind/fallback were computed for

  // Records `calls` runs served by `by` that took `ticks` in all, the last one
  // ending at t1 (stripe: any value, taken modulo kStripes).
  void Record(uint32_t stripe, ServedBy by, uint64_t calls, uint64_t ticks, uint64_t t0, uint64_t t1) {
    Stripe& s = Use(stripe);
    const int i = static_cast<int>(by);
    s.count[i].fetch_add(calls, std::memory_order_relaxed);
    s.ticks[i].fetch_add(ticks, std::memory_order_relaxed);
    Stamp(s, t0, t1);
  }
  void Record(uint32_t stripe, ServedBy by, uint64_t t0, uint64_t t1) { Record(stripe, by, 1, t1 - t0, t0, t1); }
  // One call, not timed (sampled kinds: its time comes with a later timed call).
  void Count(uint32_t stripe, ServedBy by) {
    Use(stripe).count[static_cast<int>(by)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t Count() const {
    uint64_t n = 0;
    for (const Stripe& s : stripes)
      for (const auto& c : s.count) n += c.load(std::memory_order_relaxed);
    return n;
  }
  // The counters of the stripes that have recorded.
  MissCounts Read() const {
    MissCounts c;
    const uint8_t used = used_stripes.load(std::memory_order_relaxed);
    for (int si = 0; si < kStripes; ++si) {
      if (!(used & (1u << si))) continue;
      const Stripe& st = stripes[si];
      for (int i = 0; i < kNumServedBy; ++i) {
        const uint64_t n = st.count[i].load(std::memory_order_relaxed), t = st.ticks[i].load(std::memory_order_relaxed);
        c.served_calls[i] += n;
        c.served_ticks[i] += t;
        c.count += n;
        c.fallback_ticks += t;
      }
      const uint64_t first = st.first_tick.load(std::memory_order_relaxed);
      if (first && (!c.first_tick || first < c.first_tick)) c.first_tick = first;
      c.last_tick = std::max(c.last_tick, st.last_tick.load(std::memory_order_relaxed));
    }
    return c;
  }
  // Asks for the lines a snapshot reads (up to the first stripe's end), ahead of
  // reading them.
  void Prefetch() const {
    const char* const end = reinterpret_cast<const char*>(&stripes[1]);
    for (const char* p = reinterpret_cast<const char*>(this); p < end; p += 64) __builtin_prefetch(p);
  }

 private:
  Stripe& Use(uint32_t stripe) {
    const auto bit = static_cast<uint8_t>(1u << (stripe % kStripes));
    if (!(used_stripes.load(std::memory_order_relaxed) & bit)) used_stripes.fetch_or(bit, std::memory_order_relaxed);
    return stripes[stripe % kStripes];
  }
  static void Stamp(Stripe& s, uint64_t t0, uint64_t t1) {
    uint64_t first = 0;
    if (s.first_tick.load(std::memory_order_relaxed) == 0)
      s.first_tick.compare_exchange_strong(first, t0, std::memory_order_relaxed);
    uint64_t last = s.last_tick.load(std::memory_order_relaxed);
    while (t1 > last && !s.last_tick.compare_exchange_weak(last, t1, std::memory_order_relaxed)) {
    }
  }
};

class MissLog {
 public:
  static constexpr int kShards = 64;

  // Finds or creates the entry for `key`; `created` tells whether this is its first
  // miss. `refresh` computes kind and fallback when the entry's generation is not
  // `generation`; `current` receives them (its counters untouched). A key no kernel can run (no fallback) gets no entry: nullptr, with
  // the reason in `why`, and nothing is counted. The returned entry lives as long as
  // the MissLog.
  template <typename Refresh>
  MissEntry* Get(const OpKey& key, uint64_t hash, uint64_t generation, Refresh&& refresh, bool& created,
                 MissEntry& current, std::string& why) {
    Shard& s = shards_[(hash >> 58) & (kShards - 1)];
    std::lock_guard<std::mutex> lock(s.mu);
    auto [it, inserted] = s.map.try_emplace(key, nullptr);
    if (inserted) {
      it->second = std::make_unique<MissEntry>();
      it->second->key = key;
      s.entries.push_back(it->second.get());
    }
    MissEntry* e = it->second.get();
    if (e->generation != generation) {
      refresh(*e);
      e->fallback_text = Intern(e->fallback.ToString());
      e->served_from_text = ServedByTunedKey(e->served_by) ? Intern(e->served_from.ToString()) : nullptr;
      e->generation = generation;
    }
    created = inserted;
    current.kind = e->kind;
    current.served_by = e->served_by;
    current.served_from = e->served_from;
    current.bucket_lo = e->bucket_lo;
    current.bucket_hi = e->bucket_hi;
    current.fallback = e->fallback;
    current.fallback_source = e->fallback_source;
    if (!e->fallback.variant) {
      why = e->fallback_source;
      if (e->Count() == 0) {
        const auto at = std::find(s.entries.rbegin(), s.entries.rend(), e);  // most often the last
        s.entries.erase(std::next(at).base());
        s.map.erase(it);
      }
      return nullptr;
    }
    if (e->key_json.empty()) {
      e->key_json = KeepKeyJson(key);
      e->family = FamilyId(key);
    }
    return e;
  }

  // Calls visit(entry, counts) for every entry with at least one counted miss, under
  // the entry's shard's lock (what is guarded by it reads consistently; visit takes
  // no lock of the log). In order of creation within a shard. Such an entry is never
  // removed (only an entry without counts is, and counts are only zeroed in a child
  // of fork() before any other thread runs there): its key and key_json stay valid
  // as long as the log, and what Intern gave stays too.
  template <typename Visit>
  void ForEach(Visit&& visit) const {
    constexpr size_t kAhead = 8;  // entries are apart in memory: ask for the next ones' lines early
    for (const Shard& s : shards_) {
      std::lock_guard<std::mutex> lock(s.mu);
      const size_t n = s.entries.size();
      for (size_t i = 0; i < std::min(n, kAhead); ++i) s.entries[i]->Prefetch();
      for (size_t i = 0; i < n; ++i) {
        if (i + kAhead < n) s.entries[i + kAhead]->Prefetch();
        const MissEntry& e = *s.entries[i];
        const MissCounts c = e.Read();
        if (c.count) visit(e, c);
      }
    }
  }
  // Entries (some may have no count yet); a size to reserve for.
  size_t Size() const;

  // The text, kept as long as the log, one copy for every entry that shows it
  // (fallback schedules and serving keys: a few distinct ones; what the log keeps
  // grows with the distinct texts it has seen, as its entries grow with the keys).
  const ReportText* Intern(std::string text);
  // A key's text as a JSON string, kept as long as the log, next to the other keys'
  // (a report reads them all, in its own order: they take few pages).
  std::string_view KeepKeyJson(const OpKey& key);
  // The id of the key's family (KeyFamily): equal for keys of one family only.
  uint32_t FamilyId(const OpKey& key);

  struct Snapshot : MissCounts {
    OpKey key;
    MissKind kind;
    ServedBy served_by;
  };
  // Every entry with at least one counted miss, each read under its shard's lock.
  std::vector<Snapshot> Snap() const;
  // Zeroes every count and time (a child of fork() starts its own accounting).
  // Caller guarantees no other thread records meanwhile.
  void ResetCounts();

 private:
  struct alignas(64) Shard {
    mutable std::mutex mu;
    std::unordered_map<OpKey, std::unique_ptr<MissEntry>, OpKeyHash> map;
    std::vector<MissEntry*> entries;  // the map's, in order of creation (read without walking the map's nodes)
  };
  Shard shards_[kShards];
  std::mutex texts_mu_;  // lock order: a shard's mu, then texts_mu_
  std::unordered_map<std::string, std::unique_ptr<const ReportText>> texts_;
  static constexpr size_t kKeyChunk = size_t{1} << 16;
  std::vector<std::unique_ptr<char[]>> key_chunks_;  // KeepKeyJson's texts, packed
  size_t key_chunk_used_ = kKeyChunk;                // of the last chunk
  std::unordered_map<OpKey, uint32_t, OpKeyHash> families_;  // guarded by texts_mu_
};

// A miss record as the runtime's report writer holds it: MissRecord's fields, with
// the texts (and the key's) as the miss log's (MissLog::ForEach), so that a report
// of many keys is gathered without an allocation or a copy of text per key, and
// written without escaping one.
struct MissRow {
  const OpKey* key = nullptr;  // the entry's
  int64_t varying = 0;  // key->dims[kVaryingDim]
  uint32_t family = 0;  // MissEntry::family
  MissKind kind = MissKind::kShapeMiss;
  ServedBy served_by = ServedBy::kBuiltinDefault;
  uint64_t count = 0;
  double first_seen = 0, last_seen = 0, fallback_us_total = 0, expected_gain_us = 0;
  int64_t bucket_lo = 0, bucket_hi = 0;
  uint64_t served_calls[kNumServedBy] = {};
  double served_us[kNumServedBy] = {};
  std::string_view key_json;
  const ReportText* fallback = nullptr;
  const ReportText* served_from = nullptr;  // null: none
};

// What ranking sorts: a record's ranking fields, the start of its key's order (most
// keys are told apart by it without reading the record), and its index.
struct MissRankKey {
  double gain_us, fallback_us;
  uint64_t count;
  uint64_t key_prefix;
  uint32_t index;
};

// What one miss report is gathered and written with; kept across the periodic
// rewrites so that they reuse its memory.
struct MissReportBuffers {
  std::vector<MissRow> rows;
  std::vector<MissRow> unranked;  // scratch for ranking
  std::vector<MissRankKey> rank_keys;
  std::string json;
};

// miss_report.cc: the report functions over rows (as over MissRecords).
// Sorts `rows` by RankMissRecords's rule, given keys[i] = RankKeyOf(rows[i], i)
// (`unranked`: scratch).
MissRankKey RankKeyOf(const MissRow& row, uint32_t index);
void RankMissRows(std::vector<MissRow>& rows, std::vector<MissRow>& unranked, std::vector<MissRankKey>& keys);
std::vector<BucketTraffic> BucketTrafficOf(std::span<const MissRow> ranked);
std::vector<BucketRecommendation> RecommendBuckets(std::span<const MissRow> ranked);
// A report file's text into `out` (its memory reused): MissReportToJson of `head` with
// `ranked` as its records, and a newline.
void MissReportFileText(const MissReport& head, std::span<const MissRow> ranked, std::string& out);

}  // namespace cliffguard
