#include "miss_log.h"

#include <algorithm>
#include <thread>

namespace cliffguard {

TickClock::TickClock()
    : tick0_(Now()),
      steady0_(std::chrono::steady_clock::now()),
      unix0_(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()) {}

double TickClock::TicksPerMicrosecond() const {
  // Calibrate over at least 2 ms of the clock's life.
  auto elapsed = std::chrono::steady_clock::now() - steady0_;
  if (elapsed < std::chrono::milliseconds(2)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2) - elapsed);
    elapsed = std::chrono::steady_clock::now() - steady0_;
  }
  const uint64_t ticks = Now() - tick0_;
  const double us = std::chrono::duration<double, std::micro>(elapsed).count();
  return us > 0 ? double(ticks) / us : 1.0;
}

double TickClock::ToUnixSeconds(uint64_t ticks, double ticks_per_us) const {
  if (ticks == 0) return 0;
  return unix0_ + (double(int64_t(ticks - tick0_)) / ticks_per_us) * 1e-6;
}

size_t MissLog::Size() const {
  size_t n = 0;
  for (const Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    n += s.entries.size();
  }
  return n;
}

const ReportText* MissLog::Intern(std::string text) {
  std::lock_guard<std::mutex> lock(texts_mu_);
  auto [it, added] = texts_.try_emplace(std::move(text));
  if (added) it->second = std::make_unique<const ReportText>(ReportText{it->first, JsonString(it->first)});
  return it->second.get();
}

std::string_view MissLog::KeepKeyJson(const OpKey& key) {
  const std::string json = JsonString(key.ToString());
  std::lock_guard<std::mutex> lock(texts_mu_);
  if (key_chunk_used_ + json.size() > kKeyChunk) {  // a key longer than a chunk gets one of its own
    key_chunks_.push_back(std::make_unique_for_overwrite<char[]>(std::max(kKeyChunk, json.size())));
    key_chunk_used_ = 0;
  }
  char* at = key_chunks_.back().get() + key_chunk_used_;
  std::copy(json.begin(), json.end(), at);
  key_chunk_used_ += json.size();
  return {at, json.size()};
}

uint32_t MissLog::FamilyId(const OpKey& key) {
  std::lock_guard<std::mutex> lock(texts_mu_);
  return families_.try_emplace(KeyFamily(key), static_cast<uint32_t>(families_.size())).first->second;
}

std::vector<MissLog::Snapshot> MissLog::Snap() const {
  std::vector<Snapshot> out;
  const size_t n = Size();
  out.reserve(n + n / 8);
  ForEach([&](const MissEntry& e, const MissCounts& c) { out.push_back({c, e.key, e.kind, e.served_by}); });
  return out;
}

void MissLog::ResetCounts() {
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    for (auto& [key, e] : s.map)
      for (auto& st : e->stripes) {
        for (auto& c : st.count) c.store(0, std::memory_order_relaxed);
        for (auto& t : st.ticks) t.store(0, std::memory_order_relaxed);
        st.first_tick.store(0, std::memory_order_relaxed);
        st.last_tick.store(0, std::memory_order_relaxed);
      }
  }
}

}  // namespace cliffguard
