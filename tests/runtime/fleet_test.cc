// Running a fleet: miss reports that merge across replicas (associative to the bit,
// refusing what would double-count), that carry their process, that a killed process
// leaves on disk; and the operator's environment switches.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cliffguard/file_io.h"
#include "cliffguard/miss_report.h"
#include "cliffguard/runtime.h"
#include "test_bundles.h"

namespace cliffguard {
namespace {

using testing::HostBundle;
using testing::Problem;
using testing::TempFile;

// Sets an environment variable for one scope, then restores what it was.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> was;
  ScopedEnv(const char* n, const std::string& v) : name(n) {
    if (const char* old = std::getenv(n)) was = old;
    ::setenv(n, v.c_str(), 1);
  }
  ~ScopedEnv() {
    if (was) ::setenv(name.c_str(), was->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

OpKey Gemm(int64_t m, int64_t n, int64_t k) { return *OpKey::Parse(fmt::format("gemm f32 nn m={} n={} k={}", m, n, k)); }

// A report of one process with records over a pool of keys shared by every replica, so
// that merges overlap; times have fractional microseconds.
MissReport Replica(uint32_t seed, const std::string& host, int64_t pid) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> us(0.1, 900.0);
  MissReport r;
  r.device_fingerprint = "cpu-t2-fleet";
  r.device_name = "test cpu";
  r.device_threads = 2;
  r.host = host;
  r.pid = pid;
  r.process_start = 1.8e9 + seed;
  r.runtime_version = "0.1.0";
  r.generated_at = 1.8e9 + 100 + seed;
  r.hits = 1000 + seed;
  r.expected_speedup = 1.1 + 0.1 * seed;
  for (int64_t m = 1; m <= 40; ++m) {
    if (rng() % 3 == 0) continue;
    MissRecord rec;
    rec.key = Gemm(m, 64, 32);
    rec.kind = MissKind::kShapeMiss;
    const int by = 1 + int(rng() % 4);  // bucket, nearest, bundle default, built-in default
    rec.served_by = static_cast<ServedBy>(by);
    if (ServedByTunedKey(rec.served_by)) rec.served_from = Gemm(64, 64, 32).ToString();
    if (rec.served_by == ServedBy::kBucket) rec.bucket_lo = 1, rec.bucket_hi = 64;
    rec.served_calls[by] = 1 + rng() % 50;
    rec.served_us[by] = us(rng);
    if (rng() % 2) {  // a reload changed what served it
      rec.served_calls[4] += 1 + rng() % 5;
      rec.served_us[4] += us(rng);
    }
    for (int i = 0; i < kNumServedBy; ++i) {
      rec.count += rec.served_calls[i];
      rec.fallback_us_total += rec.served_us[i];
    }
    rec.expected_gain_us = (rec.served_us[3] + rec.served_us[4]) * (1 - 1 / r.expected_speedup);
    rec.first_seen = 1.8e9 + double(rng() % 1000) / 7;
    rec.last_seen = rec.first_seen + double(rng() % 1000) / 3;
    rec.fallback = "cpu_f32_gemm_6x16__avx2(mc=48)";
    r.misses += rec.count;
    r.records.push_back(rec);
  }
  r.calls = r.hits + r.misses;
  return r;
}

// As a fleet would: every intermediate result written and read back.
MissReport RoundTrip(const MissReport& r) {
  auto back = MissReportFromJson(MissReportToJson(r));
  EXPECT_TRUE(back.ok()) << back.status().ToString();
  return *back;
}

MissReport Merge(const std::vector<MissReport>& in) {
  auto m = MergeMissReports(in);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return RoundTrip(*m);
}

TEST(FleetTest, MergingIsAssociativeAndCommutativeToTheBit) {
  const MissReport a = RoundTrip(Replica(1, "h1", 10)), b = RoundTrip(Replica(2, "h2", 10)),
                   c = RoundTrip(Replica(3, "h1", 11)), d = RoundTrip(Replica(4, "h3", 12));
  const std::string flat = MissReportToJson(Merge({a, b, c, d}));
  EXPECT_EQ(MissReportToJson(Merge({Merge({a, b}), Merge({c, d})})), flat);
  EXPECT_EQ(MissReportToJson(Merge({Merge({Merge({a, b}), c}), d})), flat);
  EXPECT_EQ(MissReportToJson(Merge({a, Merge({b, Merge({c, d})})})), flat);
  EXPECT_EQ(MissReportToJson(Merge({d, c, b, a})), flat);
  EXPECT_EQ(MissReportToJson(Merge({Merge({d, b}), Merge({a}), c})), flat);

  const MissReport m = Merge({a, b, c, d});
  EXPECT_EQ(m.calls, a.calls + b.calls + c.calls + d.calls);
  EXPECT_EQ(m.hits, a.hits + b.hits + c.hits + d.hits);
  ASSERT_EQ(m.sources.size(), 4u);
  EXPECT_TRUE(m.host.empty());
  EXPECT_EQ(m.sources[0].host, "h1");
  EXPECT_EQ(m.generated_at, d.generated_at);
  for (const MissRecord& r : m.records) {  // per key: counts summed, first and last seen kept
    uint64_t count = 0;
    double first = 1e300, last = 0, us = 0;
    for (const MissReport* x : {&a, &b, &c, &d})
      for (const MissRecord& y : x->records)
        if (y.key == r.key) {
          count += y.count;
          first = std::min(first, y.first_seen);
          last = std::max(last, y.last_seen);
          us += y.fallback_us_total;
        }
    EXPECT_EQ(r.count, count) << r.key.ToString();
    EXPECT_EQ(r.first_seen, first);
    EXPECT_EQ(r.last_seen, last);
    EXPECT_NEAR(r.fallback_us_total, us, 1e-2);
  }
  // What served a key is the latest record's.
  MissReport early = a, late = b;
  early.records = {a.records[0]};
  late.records = {a.records[0]};
  late.records[0].served_by = ServedBy::kNearest;
  late.records[0].served_from = Gemm(64, 64, 32).ToString();
  late.records[0].last_seen = early.records[0].last_seen + 1;
  early.misses = early.records[0].count;
  late.misses = late.records[0].count;
  early.calls = early.hits + early.misses;
  late.calls = late.hits + late.misses;
  EXPECT_EQ(Merge({early, late}).records[0].served_by, ServedBy::kNearest);
  EXPECT_EQ(Merge({late, early}).records[0].served_by, ServedBy::kNearest);
}

TEST(FleetTest, MergeRefusesWhatWouldMixDevicesVersionsOrCountAProcessTwice) {
  const MissReport a = Replica(1, "h1", 10), b = Replica(2, "h2", 20);
  EXPECT_EQ(MergeMissReports({}).status().code(), StatusCode::kInvalidArgument);

  MissReport other = b;
  other.device_fingerprint = "cpu-t1-other";
  auto st = MergeMissReports({a, other}, {"a.json", "b.json"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("'b.json' is for device cpu-t1-other"), std::string::npos) << st.status().message();

  MissReport newer = b;
  newer.schema_version = 2;
  st = MergeMissReports({a, newer}, {"a.json", "b.json"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("schema_version 2"), std::string::npos) << st.status().message();

  MissReport later = a;  // a later report of the same process
  later.generated_at += 60;
  st = MergeMissReports({a, later}, {"a.json", "a2.json"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("count its calls twice"), std::string::npos) << st.status().message();
  st = MergeMissReports({*MergeMissReports({a, b}), later});  // also inside a merged report
  EXPECT_FALSE(st.ok());

  MissReport restarted = a;  // same host and pid, another process start: a different process
  restarted.process_start += 3600;
  EXPECT_TRUE(MergeMissReports({a, restarted}).ok());
}

TEST(FleetTest, ARuntimesReportNamesItsProcessAndVersion) {
  auto rt = Runtime::Create({.threads = 1});
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  Problem p(Gemm(5, 8, 8));
  ASSERT_TRUE((*rt)->Gemm(p.args).ok());
  const MissReport r = RoundTrip((*rt)->GetMissReport());
  EXPECT_EQ(r.pid, ::getpid());
  EXPECT_FALSE(r.host.empty());
  EXPECT_EQ(r.runtime_version, CliffguardVersion());
  const double now = double(std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  EXPECT_GT(r.process_start, now - 86400 * 30);
  EXPECT_LE(r.process_start, now + 1);
}

StatusOr<MissReport> ReadReport(const std::string& path) {
  CG_ASSIGN_OR_RETURN(auto bytes, ReadFileBytes(path));
  return MissReportFromJson(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

// Waits until the report at `path` parses with at least `calls` calls.
StatusOr<MissReport> AwaitReport(const std::string& path, uint64_t calls, double timeout_s = 60) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  Status last = NotFound(fmt::format("'{}' was not written", path));
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(path)) {
      auto r = ReadReport(path);
      if (r.ok() && r->calls >= calls) return r;
      if (!r.ok()) last = r.status();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return last;
}

TEST(FleetTest, AServingProcessKilledWithSigkillLeavesARecentReport) {
  TempFile report("killed_report.json");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setenv("CLIFFGUARD_MISS_REPORT_INTERVAL", "0.05", 1);
    const std::string cmd = fmt::format("exec '{}' run --shape 7,32,16 --iters 100000000 --threads 1 --miss-report '{}' "
                                        ">/dev/null 2>&1",
                                        CG_CLI_PATH, report.path);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  auto first = AwaitReport(report.path, 1);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = AwaitReport(report.path, first->calls + 1);  // rewritten while serving
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(st));
  auto left = ReadReport(report.path);  // what the killed process left: whole, readable, recent
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  EXPECT_EQ(left->pid, pid);
  EXPECT_GE(left->calls, second->calls);
  EXPECT_EQ(left->misses, left->calls);
  ASSERT_EQ(left->records.size(), 1u);
  EXPECT_EQ(left->records[0].key, Gemm(7, 32, 16));
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(report.path).parent_path()))
    EXPECT_EQ(e.path().string().find(report.path + ".tmp"), std::string::npos) << "temporary left: " << e.path();
}

TEST(FleetTest, AForkedChildRewritesItsOwnReportPeriodically) {
  TempFile report("fork_periodic.json");
  auto rt = Runtime::Create({.threads = 1, .miss_report_path = report.path, .miss_report_interval_s = 0.05});
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  Problem p(Gemm(3, 8, 8));
  ASSERT_TRUE((*rt)->Gemm(p.args).ok());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // serves, waits for its writer's report, then dies without running a destructor
    for (int i = 0; i < 5; ++i) (void)(*rt)->Gemm(p.args);
    const std::string mine = fmt::format("{}.{}.json", report.path.substr(0, report.path.size() - 5), ::getpid());
    _exit(AwaitReport(mine, 5).ok() ? 0 : 1);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  const TempFile child_report(fmt::format("fork_periodic.{}.json", pid));
  auto r = ReadReport(child_report.path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->pid, pid);
  EXPECT_EQ(r->calls, 5u);  // the child's own calls only
  auto parent = AwaitReport(report.path, 1);
  ASSERT_TRUE(parent.ok()) << parent.status().ToString();
  EXPECT_EQ(parent->pid, ::getpid());
}

// Threads serving misses while the writer rewrites the report every 10 ms: every
// report on disk is whole and consistent, and the last one exact. (Runs under TSan.)
TEST(FleetConcurrency, ConcurrentCallers) {
  TempFile report("concurrent_periodic.json");
  constexpr int kThreads = 4, kCalls = 300;
  {
    auto rt = Runtime::Create({.threads = 1, .miss_report_path = report.path, .miss_report_interval_s = 0.01,
                               .warn_on_miss = false});
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        Problem p(Gemm(1 + t, 8, 8), uint32_t(t));
        for (int i = 0; i < kCalls; ++i) ASSERT_TRUE((*rt)->Gemm(p.args).ok());
      });
    for (int i = 0; i < 20; ++i) {  // read what the writer leaves while they serve
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (!std::filesystem::exists(report.path)) continue;
      auto r = ReadReport(report.path);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_LE(r->calls, uint64_t(kThreads * kCalls));
    }
    for (auto& t : threads) t.join();
  }
  auto last = ReadReport(report.path);  // the destructor's, after the writer stopped
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(last->calls, uint64_t(kThreads * kCalls));
  EXPECT_EQ(last->records.size(), size_t(kThreads));
}

// What the runtime writes (WriteMissReport, as the periodic writer does) is the JSON
// text of the report it holds: read back and written again, the same bytes; and it
// holds what GetMissReport gives.
TEST(FleetTest, AWrittenReportIsTheTextOfTheReportItHolds) {
  const DeviceInfo device = HostCpuDevice(1);
  BundleSpec spec = HostBundle(device, {Gemm(16, 40, 24), Gemm(128, 40, 24)});
  spec.entries[0].bucket_lo = 9;  // m in [9, 16] runs the m=16 entry's schedule
  spec.entries[0].bucket_hi = 16;
  TempFile bundle("written_bundle.cgb");
  ASSERT_TRUE(WriteBundleFile(bundle.path, spec).ok());
  auto rt = Runtime::Create({.threads = 1, .bundles = {bundle.path}, .warn_on_miss = false});
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  auto call = [&](const OpKey& key, int times) {
    Problem p(key);
    for (int i = 0; i < times; ++i) ASSERT_TRUE((*rt)->Gemm(p.args).ok()) << key.ToString();
  };
  call(Gemm(16, 40, 24), 2);                                          // hits
  for (int64_t m : {9, 12, 15}) call(Gemm(m, 40, 24), int(m) % 4 + 1);  // the bucket
  for (int64_t m : {100, 300}) call(Gemm(m, 40, 24), 2);              // the nearest key
  for (int64_t m = 1; m <= 40; ++m) call(Gemm(m, 8, 8), 1);            // defaults: another family
  (*rt)->UnloadAll();
  call(Gemm(12, 40, 24), 2);  // now a built-in default: one record, served two ways
  TempFile report("written_report.json");
  ASSERT_TRUE((*rt)->WriteMissReport(report.path).ok());
  auto bytes = ReadFileBytes(report.path);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  const std::string text(bytes->begin(), bytes->end());
  auto back = MissReportFromJson(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(MissReportToJson(*back) + "\n", text);

  const MissReport now = (*rt)->GetMissReport();
  EXPECT_EQ(back->calls, now.calls);
  EXPECT_EQ(back->hits, 2u);
  ASSERT_EQ(back->records.size(), now.records.size());
  ASSERT_EQ(back->records.size(), 45u);
  for (size_t i = 0; i < now.records.size(); ++i) {
    const MissRecord &a = back->records[i], &b = now.records[i];
    EXPECT_EQ(a.key, b.key) << i;
    EXPECT_EQ(a.count, b.count) << b.key.ToString();
    EXPECT_EQ(a.kind, b.kind) << b.key.ToString();
    EXPECT_EQ(a.served_by, b.served_by) << b.key.ToString();
    EXPECT_EQ(a.served_from, b.served_from) << b.key.ToString();
    EXPECT_EQ(a.fallback, b.fallback) << b.key.ToString();
    EXPECT_EQ(a.bucket_lo, b.bucket_lo) << b.key.ToString();
    EXPECT_EQ(a.bucket_hi, b.bucket_hi) << b.key.ToString();
    for (int k = 0; k < kNumServedBy; ++k) EXPECT_EQ(a.served_calls[k], b.served_calls[k]) << b.key.ToString();
  }
  const MissRecord* split = nullptr;
  for (const MissRecord& m : back->records)
    if (m.key == Gemm(12, 40, 24)) split = &m;
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(split->served_calls[int(ServedBy::kBucket)], 1u);
  EXPECT_EQ(split->served_calls[int(ServedBy::kBuiltinDefault)], 2u);
  EXPECT_EQ(split->served_by, ServedBy::kBuiltinDefault);
  ASSERT_EQ(back->buckets.size(), 1u);
  EXPECT_EQ(back->buckets[0].key, Gemm(16, 40, 24));
  EXPECT_EQ(back->buckets[0].keys, 2u);  // m=9 and m=15: m=12 is served by the built-in default now
  // The same recommendations (family and range) with the same calls. Their order (and
  // the key named for a range, its slowest) is by measured time in
  // the defaults: with no tuned entry every gain is 0, and two ranges whose times tie
  // to 1e-5 (sums in another order) may swap between the two snapshots.
  ASSERT_EQ(back->recommended_buckets.size(), now.recommended_buckets.size());
  for (const BucketRecommendation& b : back->recommended_buckets) {
    const auto same = std::find_if(now.recommended_buckets.begin(), now.recommended_buckets.end(),
                                   [&](const BucketRecommendation& n) {
                                     return n.lo == b.lo && n.hi == b.hi && n.key.n() == b.key.n() &&
                                            n.key.k() == b.key.k();
                                   });
    ASSERT_NE(same, now.recommended_buckets.end()) << b.key.ToString();
    EXPECT_EQ(b.calls, same->calls) << b.key.ToString();
    EXPECT_EQ(b.keys, same->keys) << b.key.ToString();
  }
  // The runtime ranks and groups its records as the functions of the API do.
  MissReport ranked = now;
  std::reverse(ranked.records.begin(), ranked.records.end());
  RankMissRecords(ranked);
  for (size_t i = 0; i < now.records.size(); ++i) EXPECT_EQ(ranked.records[i].key, now.records[i].key) << i;
  const auto traffic = BucketTrafficOf(now.records);
  ASSERT_EQ(traffic.size(), now.buckets.size());
  for (size_t i = 0; i < traffic.size(); ++i) {
    EXPECT_EQ(traffic[i].key, now.buckets[i].key);
    EXPECT_EQ(traffic[i].calls, now.buckets[i].calls);
    EXPECT_EQ(traffic[i].us_total, now.buckets[i].us_total);
  }
  const auto recommended = RecommendBuckets(now.records);
  ASSERT_EQ(recommended.size(), now.recommended_buckets.size());
  for (size_t i = 0; i < recommended.size(); ++i) {
    EXPECT_EQ(recommended[i].key, now.recommended_buckets[i].key);
    EXPECT_EQ(recommended[i].lo, now.recommended_buckets[i].lo);
    EXPECT_EQ(recommended[i].keys, now.recommended_buckets[i].keys);
    EXPECT_EQ(recommended[i].default_us_total, now.recommended_buckets[i].default_us_total);
  }
}

// Numbers are written as fmt's "{}" writes them: the shortest text that reads back
// as the value, in fixed notation for decimal exponents in [-4, 16).
TEST(FleetTest, ReportNumbersAreTheShortestThatReadBack) {
  std::vector<double> values = {0.0, 1.0, 0.1, 1e-4, 9.9999e-5, 1e-5, 123.456, 1e15, 1e16, 9999999999999998.0,
                                1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, 1796184022.5559552,
                                4604.5273085689005};
  for (int e = -310; e <= 308; e += 7) {
    const double p = std::pow(10.0, e);
    values.insert(values.end(), {p, 1.5 * p, std::nextafter(p, 0.0), std::nextafter(p, INFINITY)});
  }
  std::mt19937_64 rng(11);
  while (values.size() < 20000) {
    const uint64_t bits = rng() >> 1;  // positive
    double v;
    std::memcpy(&v, &bits, sizeof v);
    if (std::isfinite(v)) values.push_back(v);
    values.push_back(double(rng() % 100000000) / double(1 + rng() % 100000));
  }
  MissReport r;
  r.device_fingerprint = "cpu-t1-numbers";
  for (size_t i = 0; i < values.size(); ++i) {
    MissRecord rec;
    rec.key = Gemm(int64_t(i) + 1, 8, 8);
    rec.first_seen = values[i];
    r.records.push_back(rec);
  }
  const std::string json = MissReportToJson(r);
  size_t at = 0;
  for (const double v : values) {
    at = json.find("\"first_seen\": ", at);
    ASSERT_NE(at, std::string::npos);
    at += 14;
    const size_t end = json.find(',', at);
    EXPECT_EQ(json.substr(at, end - at), fmt::format("{}", v));
  }
}

// Texts are escaped as JSON has them at any length and position (the writer copies
// runs of plain bytes 8 at a time), and bytes that are not UTF-8 become U+FFFD.
TEST(FleetTest, ReportTextsAreEscapedAtAnyLengthAndPosition) {
  MissReport r;
  r.device_fingerprint = "cpu-t1-escape";
  std::vector<std::string> expected;
  const std::pair<std::string, std::string> specials[] = {
      {"\"", "\""}, {"\\", "\\"}, {"\n", "\n"}, {"\x01", "\x01"}, {"\xc3\xa9", "\xc3\xa9"},
      {"\xe2\x82\xac", "\xe2\x82\xac"}, {"\xff", "\xef\xbf\xbd"}, {"\xc3", "\xef\xbf\xbd"}};
  int64_t m = 0;
  for (size_t len = 0; len <= 20; ++len)
    for (size_t at = 0; at <= len; ++at)
      for (const auto& [in, out] : specials) {
        MissRecord rec;
        rec.key = Gemm(++m, 8, 8);
        rec.count = 1;
        rec.served_calls[int(rec.served_by)] = 1;
        rec.fallback = std::string(at, 'a') + in + std::string(len - at, 'b');
        expected.push_back(std::string(at, 'a') + out + std::string(len - at, 'b'));
        r.records.push_back(rec);
      }
  r.misses = r.calls = r.records.size();
  const std::string json = MissReportToJson(r);
  EXPECT_NE(json.find(R"("fallback": "aa\"b")"), std::string::npos);
  EXPECT_NE(json.find(R"("fallback": "a\\bb")"), std::string::npos);
  EXPECT_NE(json.find(R"("fallback": "\u000abbb")"), std::string::npos);
  EXPECT_NE(json.find(R"("fallback": "aaaa\u0001")"), std::string::npos);
  auto back = MissReportFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->records.size(), expected.size());
  for (const MissRecord& rec : back->records)
    EXPECT_EQ(rec.fallback, expected[size_t(rec.key.m() - 1)]) << rec.key.ToString();
}

// The value of one sample line of an exposition ("name{labels} value"), or -1.
double Sample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + series.size() + 2, nullptr);
}

TEST(FleetTest, MetricsTextCountsWhatTheRuntimeCountsWithBoundedPerKeySeries) {
  const DeviceInfo device = HostCpuDevice(1);
  const OpKey tuned = Gemm(16, 32, 16);
  TempFile bundle("metrics_bundle.cgb");
  ASSERT_TRUE(WriteBundleFile(bundle.path, HostBundle(device, {tuned})).ok());
  auto rt = Runtime::Create({.threads = 1, .metrics_top_keys = 2, .bundles = {bundle.path}, .warn_on_miss = false});
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  Problem hit(tuned);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*rt)->Gemm(hit.args).ok());
  for (int64_t m = 1; m <= 5; ++m) {  // five missed keys, m calls each
    Problem p(Gemm(m, 24, 8));
    for (int64_t i = 0; i < m; ++i) ASSERT_TRUE((*rt)->Gemm(p.args).ok());
  }
  const std::string text = (*rt)->MetricsText();
  EXPECT_EQ(Sample(text, "cliffguard_calls_total{op=\"gemm\",served_by=\"exact\"}"), 3);
  EXPECT_EQ(Sample(text, "cliffguard_hits_total{op=\"gemm\"}"), 3);
  EXPECT_EQ(Sample(text, "cliffguard_misses_total{op=\"gemm\",kind=\"shape_miss\"}"), 15);
  EXPECT_EQ(Sample(text, "cliffguard_missed_keys{op=\"gemm\"}"), 5);
  EXPECT_EQ(Sample(text, "cliffguard_bundles_loaded"), 1);
  EXPECT_EQ(Sample(text, "cliffguard_bundle_entries{state=\"loaded\"}"), 1);
  EXPECT_EQ(Sample(text, "cliffguard_bundle_loads_total"), 1);
  EXPECT_GT(Sample(text, "cliffguard_fallback_seconds_total{op=\"gemm\",served_by=\"builtin_default\"}"), 0);
  // The top 2 keys by calls, m=5 and m=4; no series for the others.
  EXPECT_NE(text.find("cliffguard_key_calls_total{key=\"gemm f32 nn m=5 n=24 k=8\",served_by=\"builtin_default\"} 5"),
            std::string::npos) << text;
  EXPECT_NE(text.find("key=\"gemm f32 nn m=4 n=24 k=8\""), std::string::npos);
  EXPECT_EQ(text.find("key=\"gemm f32 nn m=3 n=24 k=8\""), std::string::npos);
  for (const char* family : {"cliffguard_calls_total", "cliffguard_misses_total", "cliffguard_key_calls_total"}) {
    EXPECT_NE(text.find(fmt::format("# TYPE {} counter\n", family)), std::string::npos) << family;
    EXPECT_NE(text.find(fmt::format("# HELP {} ", family)), std::string::npos) << family;
  }
  ASSERT_TRUE((*rt)->ReplaceBundles({bundle.path}).ok());
  EXPECT_EQ(Sample((*rt)->MetricsText(), "cliffguard_bundle_reloads_total"), 1);
}

TEST(FleetTest, TheMetricsFileIsRewrittenForTheTextfileCollector) {
  TempFile metrics("metrics.prom");
  auto rt = Runtime::Create({.threads = 1, .metrics_path = metrics.path, .metrics_interval_s = 0.02, .warn_on_miss = false});
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  Problem p(Gemm(3, 8, 8));
  for (int i = 0; i < 7; ++i) ASSERT_TRUE((*rt)->Gemm(p.args).ok());
  const std::string series = "cliffguard_misses_total{op=\"gemm\",kind=\"device_miss\"}";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  double seen = -1;
  while (seen != 7 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto bytes = ReadFileBytes(metrics.path);
    if (bytes.ok()) seen = Sample(std::string(bytes->begin(), bytes->end()), series);
  }
  EXPECT_EQ(seen, 7);
  for (const char* bad : {"0", "x", "-3"}) {
    ScopedEnv env("CLIFFGUARD_METRICS_INTERVAL", bad);
    auto r = Runtime::Create({.threads = 1, .metrics_path = metrics.path});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("CLIFFGUARD_METRICS_INTERVAL"), std::string::npos) << r.status().message();
  }
  ScopedEnv env("CLIFFGUARD_METRICS_TOP_KEYS", "many");
  auto r = Runtime::Create({.threads = 1});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("CLIFFGUARD_METRICS_TOP_KEYS='many'"), std::string::npos) << r.status().message();
}


TEST(FleetTest, EnvironmentSwitchesAreAppliedAndBadValuesRefused) {
  const DeviceInfo device = HostCpuDevice(1);
  const OpKey tuned = Gemm(16, 32, 16);
  TempFile bundle("env_bundle.cgb");
  ASSERT_TRUE(WriteBundleFile(bundle.path, HostBundle(device, {tuned})).ok());
  Problem p(tuned);
  {
    ScopedEnv env("CLIFFGUARD_BUNDLES", "/nonexistent/a.cgb:" + bundle.path);
    auto rt = Runtime::Create({.threads = 1});
    ASSERT_FALSE(rt.ok());
    EXPECT_NE(rt.status().message().find("CLIFFGUARD_BUNDLES names '/nonexistent/a.cgb'"), std::string::npos)
        << rt.status().message();
  }
  {
    ScopedEnv env("CLIFFGUARD_BUNDLES", ":" + bundle.path + ":");
    auto rt = Runtime::Create({.threads = 1});
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    ASSERT_EQ((*rt)->LoadReports().size(), 1u);
    ASSERT_TRUE((*rt)->Gemm(p.args).ok());
    EXPECT_EQ((*rt)->GetMissReport().hits, 1u);
  }
  {
    ScopedEnv env("CLIFFGUARD_DISABLE", "1");
    auto rt = Runtime::Create({.threads = 1, .bundles = {bundle.path}});
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    EXPECT_EQ((*rt)->LoadReports().at(0).entries_loaded, 1u);  // loaded and reported, not used
    ASSERT_TRUE((*rt)->Gemm(p.args).ok());
    ASSERT_TRUE((*rt)->Gemm(p.args).ok());
    const MissReport r = (*rt)->GetMissReport();
    EXPECT_EQ(r.hits, 0u);
    EXPECT_EQ(r.served[static_cast<int>(ServedBy::kBuiltinDefault)], 2u);
    ASSERT_EQ(r.records.size(), 1u);
    EXPECT_EQ(r.records[0].kind, MissKind::kShapeMiss);
  }
  for (const char* name : {"CLIFFGUARD_DISABLE", "CLIFFGUARD_WARN_ON_MISS", "CLIFFGUARD_SAME_ARCH"}) {
    ScopedEnv env(name, "yes");
    auto rt = Runtime::Create({.threads = 1});
    ASSERT_FALSE(rt.ok()) << name;
    EXPECT_NE(rt.status().message().find(fmt::format("{}='yes' must be 0 or 1", name)), std::string::npos)
        << rt.status().message();
  }
  {
    ScopedEnv env("CLIFFGUARD_SAME_ARCH", "1");
    auto rt = Runtime::Create({.threads = 2});  // another thread budget: another fingerprint, same arch
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    auto lr = (*rt)->LoadBundleFile(bundle.path);
    ASSERT_TRUE(lr.ok());
    EXPECT_TRUE(lr->device_match);
    EXPECT_EQ(lr->device_rule, "same-arch");
  }
  {
    auto rt = Runtime::Create({.threads = 2});  // without the switch: refused, naming what differs
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    auto lr = (*rt)->LoadBundleFile(bundle.path);
    ASSERT_TRUE(lr.ok());
    EXPECT_FALSE(lr->device_match);
    EXPECT_NE(lr->device_rule.find(": thread budget 1, here 2"), std::string::npos) << lr->device_rule;
    EXPECT_EQ(lr->producer, "cliffguard");
    EXPECT_EQ(lr->producer_version, "0.1.0");
    EXPECT_EQ(lr->schema_version, 1u);
  }
  for (const char* bad : {"0", "-1", "abc", "1e9", ""}) {
    ScopedEnv env("CLIFFGUARD_MISS_REPORT_INTERVAL", bad);
    auto rt = Runtime::Create({.threads = 1, .miss_report_path = TempFile("never.json").path});
    ASSERT_FALSE(rt.ok()) << bad;
    EXPECT_NE(rt.status().message().find("CLIFFGUARD_MISS_REPORT_INTERVAL"), std::string::npos) << rt.status().message();
  }
  {
    ScopedEnv env("CLIFFGUARD_MISS_REPORT_INTERVAL", "1");
    auto rt = Runtime::Create({.threads = 1});  // nowhere to write
    ASSERT_FALSE(rt.ok());
    EXPECT_NE(rt.status().message().find("needs a miss report path"), std::string::npos) << rt.status().message();
  }
}

// A runtime that Create refuses (here: a bundle CLIFFGUARD_BUNDLES names is missing)
// writes no miss report: its destructor runs, but it never got the report's path.
TEST(FleetTest, ARuntimeCreateRefusedWritesNoReport) {
  TempFile report("refused_report.json");
  ScopedEnv bundles("CLIFFGUARD_BUNDLES", "/nonexistent/missing.cgb");
  ScopedEnv path("CLIFFGUARD_MISS_REPORT", report.path);
  auto rt = Runtime::Create({.threads = 1});
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.status().message().find("CLIFFGUARD_BUNDLES names '/nonexistent/missing.cgb'"), std::string::npos)
      << rt.status().message();
  EXPECT_FALSE(std::filesystem::exists(report.path)) << "a report was written to " << report.path;
}

}  // namespace
}  // namespace cliffguard
