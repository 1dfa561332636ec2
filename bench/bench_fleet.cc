// Fleet operations: what merging replica miss reports costs (`misses merge`: read,
// parse, merge, write), what one periodic miss report rewrite and one metrics scrape
// cost with 10,000 distinct missed keys, and a serving loop over those keys with and
// without the periodic writer. Run (RESULTS.md):
//   build/bench/bench_fleet --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//       --benchmark_report_aggregates_only=true
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "cliffguard/file_io.h"
#include "cliffguard/log.h"
#include "cliffguard/miss_report.h"
#include "cliffguard/runtime.h"

namespace cliffguard {
namespace {

constexpr int kReplicas = 100;
constexpr int kKeysPerReplica = 10000;

std::string Dir() {
  static const std::string dir = [] {
    auto d = std::filesystem::temp_directory_path() / fmt::format("cg_bench_fleet_{}", ::getpid());
    std::filesystem::create_directories(d);
    return d.string();
  }();
  return dir;
}

// 100 replicas' reports as a runtime writes them: 10,000 keys each out of a pool of
// 15,000 (m from 1 to 5,000 in three layouts), so most keys are in most reports.
const std::vector<std::string>& ReplicaFiles() {
  static const std::vector<std::string> files = [] {
    std::vector<std::string> out;
    std::mt19937_64 rng(7);
    std::vector<OpKey> pool;
    for (const char* layout : {"nn", "nt", "tn"})
      for (int64_t m = 1; m <= 5000; ++m) pool.push_back(*OpKey::Parse(fmt::format("gemm f32 {} m={} n=768 k=768", layout, m)));
    for (int i = 0; i < kReplicas; ++i) {
      MissReport r;
      r.device_fingerprint = "cpu-t2-benchfleet";
      r.device_name = "bench";
      r.device_threads = 2;
      r.host = fmt::format("replica-{:03d}", i);
      r.pid = 1000 + i;
      r.process_start = 1.8e9 + i;
      r.runtime_version = CliffguardVersion();
      r.generated_at = 1.8e9 + 3600 + i;
      r.hits = 1000000;
      r.expected_speedup = 1.3;
      std::shuffle(pool.begin(), pool.end(), rng);
      for (int k = 0; k < kKeysPerReplica; ++k) {
        MissRecord m;
        m.key = pool[size_t(k)];
        const int by = 1 + int(rng() % 4);
        m.served_by = static_cast<ServedBy>(by);
        if (ServedByTunedKey(m.served_by)) m.served_from = pool[0].ToString();
        if (m.served_by == ServedBy::kBucket) m.bucket_lo = 1, m.bucket_hi = 8192;
        m.count = m.served_calls[by] = 1 + rng() % 1000;
        m.fallback_us_total = m.served_us[by] = double(rng() % 10000000) / 7.0;
        m.expected_gain_us = ServedByTunedKey(m.served_by) ? 0 : m.fallback_us_total * (1 - 1 / 1.3);
        m.first_seen = 1.8e9 + double(rng() % 3600);
        m.last_seen = m.first_seen + double(rng() % 3600);
        m.fallback = "cpu_f32_gemm_6x16__avx2 mc=48 kc=384 nc=1024 par=0 threads=2 unroll_k=4 prefetch=0 pack_a=1 pack_b=0";
        r.misses += m.count;
        r.records.push_back(std::move(m));
      }
      r.calls = r.hits + r.misses;
      RankMissRecords(r);
      r.recommended_buckets = RecommendBuckets(r.records);
      const std::string path = fmt::format("{}/replica{:03d}.json", Dir(), i);
      const std::string json = MissReportToJson(r) + "\n";
      if (!WriteFileAtomic(path, {reinterpret_cast<const uint8_t*>(json.data()), json.size()}).ok()) std::abort();
      out.push_back(path);
    }
    return out;
  }();
  return files;
}

// `cliffguard misses merge` of 100 reports of 10,000 keys: read, parse and merge
// (MergeMissReportFiles, one thread per CPU), write.
void BM_MergeReplicaReports(benchmark::State& state) {
  const auto& files = ReplicaFiles();
  size_t bytes = 0;
  for (const auto& f : files) bytes += std::filesystem::file_size(f);
  const std::string out = Dir() + "/fleet.json";
  for (auto _ : state) {
    auto merged = MergeMissReportFiles(files);
    if (!merged.ok()) return state.SkipWithError(merged.status().ToString().c_str());
    const std::string json = MissReportToJson(*merged) + "\n";
    if (!WriteFileAtomic(out, {reinterpret_cast<const uint8_t*>(json.data()), json.size()}).ok())
      return state.SkipWithError("write failed");
    state.counters["merged_keys"] = double(merged->records.size());
  }
  state.counters["input_MB"] = double(bytes) / 1e6;
}
BENCHMARK(BM_MergeReplicaReports)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();

// Parsing one replica's report (10,000 records).
void BM_ParseReplicaReport(benchmark::State& state) {
  auto bytes = ReadFileBytes(ReplicaFiles()[0]);
  if (!bytes.ok()) return state.SkipWithError("read");
  const std::string_view text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  for (auto _ : state) benchmark::DoNotOptimize(MissReportFromJson(text));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}
BENCHMARK(BM_ParseReplicaReport)->Unit(benchmark::kMillisecond)->UseRealTime();

// The merge alone, on reports already in memory.
void BM_MergeInMemory(benchmark::State& state) {
  auto reports = ReadMissReportFiles(ReplicaFiles());
  if (!reports.ok()) return state.SkipWithError(reports.status().ToString().c_str());
  for (auto _ : state) benchmark::DoNotOptimize(MergeMissReports(*reports));
}
BENCHMARK(BM_MergeInMemory)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();

// A runtime that has missed 10,000 distinct keys, and the operands to call them.
struct Serving {
  std::unique_ptr<Runtime> rt;
  std::vector<GemmArgs> calls;
  std::vector<float> a, b, c;
};

std::unique_ptr<Serving> MakeServing(double interval_s, const std::string& report) {
  auto s = std::make_unique<Serving>();
  RuntimeOptions o;
  o.threads = 1;
  o.warn_on_miss = false;
  o.miss_report_path = report;
  o.miss_report_interval_s = interval_s;
  auto rt = Runtime::Create(o);
  if (!rt.ok()) return nullptr;
  s->rt = std::move(*rt);
  constexpr int64_t kMaxM = 2500, kN = 8, kK = 8;
  s->a.assign(size_t(kMaxM * kK), 0.5f);
  s->b.assign(size_t(kK * kN), 0.25f);
  s->c.assign(size_t(kMaxM * kN), 0.0f);
  for (int layout = 0; layout < 4; ++layout)
    for (int64_t m = 1; m <= kMaxM; ++m) {
      GemmArgs g;
      g.trans_a = layout & 1;
      g.trans_b = layout & 2;
      g.m = m;
      g.n = kN;
      g.k = kK;
      g.a = s->a.data();
      g.b = s->b.data();
      g.c = s->c.data();
      g.lda = g.trans_a ? m : kK;
      g.ldb = g.trans_b ? kK : kN;
      g.ldc = kN;
      s->calls.push_back(g);
    }
  for (const GemmArgs& g : s->calls)
    if (!s->rt->Gemm(g).ok()) return nullptr;
  return s;
}

// One periodic rewrite: snapshot, JSON, atomic write with fsync.
void BM_MissReportRewrite10kKeys(benchmark::State& state) {
  auto s = MakeServing(0, "");
  if (!s) return state.SkipWithError("runtime");
  const std::string path = Dir() + "/rewrite.json";
  for (auto _ : state)
    if (!s->rt->WriteMissReport(path).ok()) return state.SkipWithError("write failed");
  state.counters["keys"] = double(s->rt->GetMissReport().records.size());
  state.counters["bytes"] = double(std::filesystem::file_size(path));
}
BENCHMARK(BM_MissReportRewrite10kKeys)->Unit(benchmark::kMillisecond)->UseRealTime();

// Its parts: the snapshot (GetMissReport) and the JSON text.
void BM_MissReportSnapshot10kKeys(benchmark::State& state) {
  auto s = MakeServing(0, "");
  if (!s) return state.SkipWithError("runtime");
  for (auto _ : state) benchmark::DoNotOptimize(s->rt->GetMissReport());
}
BENCHMARK(BM_MissReportSnapshot10kKeys)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MissReportJson10kKeys(benchmark::State& state) {
  auto s = MakeServing(0, "");
  if (!s) return state.SkipWithError("runtime");
  const MissReport r = s->rt->GetMissReport();
  for (auto _ : state) benchmark::DoNotOptimize(MissReportToJson(r));
}
BENCHMARK(BM_MissReportJson10kKeys)->Unit(benchmark::kMillisecond)->UseRealTime();

// One scrape of the metrics (MetricsText) with 10,000 missed keys, top 10 per-key series.
void BM_MetricsText10kKeys(benchmark::State& state) {
  auto s = MakeServing(0, "");
  if (!s) return state.SkipWithError("runtime");
  size_t bytes = 0;
  for (auto _ : state) bytes = s->rt->MetricsText().size();
  state.counters["bytes"] = double(bytes);
}
BENCHMARK(BM_MetricsText10kKeys)->Unit(benchmark::kMillisecond)->UseRealTime();

// A serving loop over the 10,000 missed keys (every call a miss, so the miss path
// that feeds the report), with the report rewritten every second or not at all, on
// 1 and 2 serving threads (2: every core of this machine serves, so the writer's
// time comes out of serving).
std::unique_ptr<Serving> g_serving;
void BM_ServeMissedKeys(benchmark::State& state) {
  const double interval = double(state.range(0));
  if (state.thread_index() == 0) {
    g_serving = MakeServing(interval, interval > 0 ? Dir() + "/serving.json" : "");
    if (!g_serving) state.SkipWithError("runtime");
  }
  size_t n = 0;
  for (auto _ : state) {
    if (!g_serving) break;
    // Threads start at different keys, so that they do not call one key at once.
    n = g_serving->calls.size();
    const size_t first = size_t(state.thread_index()) * n / 2;
    for (size_t i = 0; i < n; ++i) benchmark::DoNotOptimize(g_serving->rt->Gemm(g_serving->calls[(first + i) % n]));
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(n));
  if (state.thread_index() == 0) g_serving.reset();
}
BENCHMARK(BM_ServeMissedKeys)->ArgName("report_interval_s")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)
    ->MinTime(5.0)->UseRealTime()->Threads(1)->Threads(2);

}  // namespace
}  // namespace cliffguard

int main(int argc, char** argv) {
  cliffguard::SetLogLevel(cliffguard::LogLevel::kError);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::filesystem::remove_all(cliffguard::Dir());
  return 0;
}
