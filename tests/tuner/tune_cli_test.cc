// `cliffguard tune` and `cliffguard merge` as a user runs them (CG_CLI_PATH): a run
// killed with SIGKILL resumes without repeating a measurement; bad input exits
// non-zero naming the value; workload files and miss reports select keys; merge.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cli_run.h"

#include "cliffguard/bundle.h"
#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "cliffguard/miss_report.h"
#include "cliffguard/runtime.h"
#include "cliffguard/tuner/tuning_log.h"

namespace cliffguard::tuner {
namespace {

std::string TempPath(const std::string& name) {
  auto p = (std::filesystem::temp_directory_path() / fmt::format("cg_cli_{}_{}", ::getpid(), name)).string();
  std::remove(p.c_str());
  return p;
}

using CliResult = testing::ShellResult;
using testing::RunCli;
using testing::RunShell;

int CountLines(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  std::string line;
  while (std::getline(in, line)) ++n;
  return n;
}

const std::string kFast = "--min-time-ms 3 --min-repeats 3";

// The command re-executes itself with passive OpenMP waiting when no policy is set,
// so the tuner measures oneDNN schedules with threads > 1 (refused without it).
TEST(TuneCliTest, TheCommandMeasuresOnednnWithTwoThreads) {
  if (!FindKernelVariant("cpu_f32_gemm_onednn")) GTEST_SKIP() << "this build has no oneDNN";
  const std::string log = TempPath("passive.jsonl"), out = TempPath("passive.cgb");
  const CliResult r = RunShell(fmt::format(
      "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT '{}' tune --shape 'gemm f32 nt m=64 n=512 k=512' --constant-weights --threads 2 "
      "--trials 12 --strategy random --seed 1 --log {} --out {} {} < /dev/null",
      CG_CLI_PATH, log, out, kFast));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto contents = ReadTuningLog(log);
  ASSERT_TRUE(contents.ok()) << contents.status().ToString();
  int onednn_two_threads = 0;
  for (const auto& rec : contents->records) {
    if (rec.kind != RecordKind::kTrial || rec.schedule.variant != "cpu_f32_gemm_onednn") continue;
    for (const auto& [name, value] : rec.schedule.params)
      if (name == "threads" && value == 2) {
        EXPECT_TRUE(rec.ok) << rec.error;
        ++onednn_two_threads;
      }
  }
  EXPECT_GT(onednn_two_threads, 0) << r.output;
  std::remove(log.c_str());
  std::remove(out.c_str());
}

// The command also sets OPENBLAS_THREAD_TIMEOUT=4 when it is unset: OpenBLAS's idle
// workers then sleep at once instead of spinning for 2^28 cycles, and the OpenBLAS
// variant has nothing to warn about at its first threaded call (its 2-thread
// candidate, which the tuner measures among every variant's proposals before its
// search: enough trials for all of them). With the spin set explicitly, the warning
// names it.
TEST(TuneCliTest, TheCommandKeepsIdleOpenblasWorkersFromSpinning) {
  if (!FindKernelVariant("cpu_f32_gemm_openblas")) GTEST_SKIP() << "this build has no OpenBLAS";
  const std::string out = TempPath("openblas_timeout.cgb"), log = TempPath("openblas_timeout.jsonl");
  const std::string tune = fmt::format(
      "'{}' tune --shape 'gemm f32 nn m=200 n=300 k=100' --threads 2 --trials 32 --strategy random --seed 1 --log {} "
      "--out {} {} < /dev/null",
      CG_CLI_PATH, log, out, kFast);
  const CliResult quiet = RunShell("env -u OPENBLAS_THREAD_TIMEOUT " + tune);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.output;
  auto contents = ReadTuningLog(log);
  ASSERT_TRUE(contents.ok()) << contents.status().ToString();
  bool ran_threaded_openblas = false;
  for (const auto& rec : contents->records)
    if (rec.ok && rec.schedule.variant == "cpu_f32_gemm_openblas")
      for (const auto& [name, value] : rec.schedule.params) ran_threaded_openblas |= name == "threads" && value == 2;
  ASSERT_TRUE(ran_threaded_openblas) << "no OpenBLAS schedule on 2 threads was measured:\n" << quiet.output;
  std::remove(log.c_str());
  EXPECT_EQ(quiet.output.find("OPENBLAS_THREAD_TIMEOUT is"), std::string::npos) << quiet.output;
  const CliResult spinning = RunShell("env OPENBLAS_THREAD_TIMEOUT=28 " + tune);
  ASSERT_EQ(spinning.exit_code, 0) << spinning.output;
  EXPECT_NE(spinning.output.find("OPENBLAS_THREAD_TIMEOUT is 28"), std::string::npos) << spinning.output;
  std::remove(log.c_str());
  std::remove(out.c_str());
}

// On a GPU: a bf16 decode key tuned with spawned workers (cuBLAS default, then the
// cuBLASLt heuristic's algorithms), shipped, and served as a hit. Without a GPU the
// device is refused, naming it.
TEST(TuneCliTest, TunesAndServesAGemmOnAGpu) {
  const std::string log = TempPath("gpu.jsonl"), out = TempPath("gpu.cgb");
  const std::string shape = "'gemm bf16 nt m=16 n=4096 k=4096'";
  const CliResult r = RunCli(fmt::format("tune --device cuda:0 --shape {} --trials 8 --log {} --out {} {}", shape, log,
                                         out, kFast));
  size_t gpus = 0;
  for (const auto& d : ListDevices(1).devices) gpus += d.backend == Backend::kCuda;
  if (gpus == 0) {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("cuda:0"), std::string::npos) << r.output;
    GTEST_SKIP() << "no GPU here";
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto contents = ReadTuningLog(log);
  ASSERT_TRUE(contents.ok()) << contents.status().ToString();
  int lt_ok = 0;
  for (const auto& rec : contents->records)
    if (rec.kind == RecordKind::kTrial && rec.schedule.variant == "cuda_bf16_gemm_cublaslt") lt_ok += rec.ok;
  EXPECT_GT(lt_ok, 0) << r.output;
  auto bundle = ReadBundleFile(out);
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_EQ(bundle->device.backend, Backend::kCuda);
  ASSERT_EQ(bundle->entries.size(), 1u);
  EXPECT_EQ(bundle->entries[0].schedule.variant.rfind("cuda_bf16_gemm_", 0), 0u);
  EXPECT_GT(bundle->entries[0].default_us, 0);
  std::remove(log.c_str());
  std::remove(out.c_str());
}

TEST(TuneCliTest, KilledRunResumesWithoutRepeatingMeasurements) {
  const std::string log = TempPath("killed.jsonl"), out = TempPath("killed.cgb");
  const std::string shape = "48,128,96";
  const std::string args = fmt::format("tune --op gemm --shape {} --trials 30 --batch 4 --strategy random --seed 3 "
                                       "--log {} --out {} --min-time-ms 15 --min-repeats 3",
                                       shape, log, out);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = fmt::format("exec '{}' {} >/dev/null 2>&1", CG_CLI_PATH, args);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Kill once some trial records are in the log (the default record comes first).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (CountLines(log) < 7 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFSIGNALED(st)) << "tune finished before it could be killed";
  const int lines_at_kill = CountLines(log);
  ASSERT_GE(lines_at_kill, 7);
  ASSERT_FALSE(std::filesystem::exists(out));

  CliResult r = RunCli(args + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed"), std::string::npos) << r.output;

  auto contents = ReadTuningLog(log);
  ASSERT_TRUE(contents.ok()) << contents.status().ToString();
  EXPECT_FALSE(contents->dropped_last_line);
  std::set<std::string> schedules;
  std::set<int64_t> trials;
  int defaults = 0;
  for (const auto& rec : contents->records) {
    defaults += rec.kind == RecordKind::kDefault;
    if (rec.kind != RecordKind::kTrial) continue;
    std::string s = rec.schedule.variant;
    for (const auto& [k, v] : rec.schedule.params) s += fmt::format(" {}={}", k, v);
    EXPECT_TRUE(schedules.insert(s).second) << "measured twice: " << s;
    EXPECT_TRUE(trials.insert(rec.trial).second) << "trial index twice: " << rec.trial;
  }
  EXPECT_EQ(defaults, 1);
  EXPECT_EQ(trials.size(), 30u);
  EXPECT_EQ(*trials.begin(), 0);
  EXPECT_EQ(*trials.rbegin(), 29);

  auto rt = Runtime::Create();
  ASSERT_TRUE(rt.ok());
  ASSERT_TRUE((*rt)->LoadBundleFile(out).ok());
  auto res = (*rt)->Resolve(OpKey::Gemm(48, 128, 96));
  ASSERT_TRUE(res.ok());
  EXPECT_TRUE(res->hit);
  std::remove(log.c_str());
  std::remove(out.c_str());
}

TEST(TuneCliTest, BadInputExitsNonZeroNamingTheValue) {
  const std::string log = TempPath("bad.jsonl"), out = TempPath("bad.cgb");
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"--shape 1,2", "'1,2'"},
      {"--shape 4,4,0", "k=0"},
      {"--shape 4,4,4,nx", "nx"},
      {"--shape 4,4,4 --strategy annealing", "annealing"},
      {"--shape 4,4,4 --objective lambdamart", "lambdamart"},
      {"--shape 4,4,4 --trials 0", "trials=0"},
      {"--shape 4,4,4 --threads -1", "threads=-1"},
      {"--op conv2d --shape 4,4,4", "conv2d"},
      {"--workload /nonexistent/w.txt", "/nonexistent/w.txt"},
      {"--from-report /nonexistent/r.json", "/nonexistent/r.json"},
      {"--shape 12,64,32 --buckets m:9,x", "m:9,x"},
      {"--shape 12,64,32 --buckets k:8", "'k:8'"},
      {"--shape 12,64,32 --buckets m:16,8", "strictly increasing"},
      {"--buckets m:8", "no --shape or --workload keys"},
      {"--shape 4,4,4 --buckets m:8 --from-report /nonexistent/r.json", "cannot be combined"},
      {"", "no keys"},
  };
  for (const auto& c : cases) {
    CliResult r = RunCli(fmt::format("tune {} --log {} --out {} {}", c.args, log, out, kFast));
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << " -> " << r.output;
  }
  std::ofstream(log) << "{\"v\":1}\n";
  CliResult r = RunCli(fmt::format("tune --shape 4,4,4 --log {} --out {} {}", log, out, kFast));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--resume"), std::string::npos) << r.output;
  std::remove(log.c_str());
}

TEST(TuneCliTest, WorkloadAndMissReportSelectKeysAndSummaryIsPrinted) {
  const std::string wl = TempPath("w.txt"), log = TempPath("w.jsonl"), out = TempPath("w.cgb");
  std::ofstream(wl) << "# two shapes\ngemm f32 nn m=8 n=64 k=32\ngemm f32 tn m=12 n=40 k=24  # transposed A\n";
  CliResult r = RunCli(fmt::format("tune --workload {} --trials 4 --strategy grid --log {} --out {} {}", wl, log, out, kFast));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("speed-up"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gemm f32 tn m=12 n=40 k=24"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[2/2]"), std::string::npos) << r.output;  // plain progress lines (not a TTY)
  auto spec = ReadBundleFile(out);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->entries.size(), 2u);

  MissReport rep;
  rep.device_fingerprint = spec->device.fingerprint;
  for (int i = 0; i < 3; ++i) {
    MissRecord m;
    m.key = OpKey::Gemm(4 + i, 32, 16);
    m.count = 10 - i;
    m.fallback_us_total = 100.0 * (3 - i);
    m.expected_gain_us = 50.0 * (3 - i);
    rep.records.push_back(m);
    rep.calls += m.count;
    rep.misses += m.count;
  }
  const std::string rp = TempPath("r.json"), log2 = TempPath("r.jsonl"), out2 = TempPath("r.cgb");
  std::ofstream(rp) << MissReportToJson(rep);
  r = RunCli(fmt::format("tune --from-report {} --top 2 --trials 3 --strategy random --log {} --out {} {}", rp, log2, out2, kFast));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto spec2 = ReadBundleFile(out2);
  ASSERT_TRUE(spec2.ok());
  ASSERT_EQ(spec2->entries.size(), 2u);
  std::set<std::string> got;
  for (const auto& e : spec2->entries) got.insert(e.key.ToString());
  EXPECT_TRUE(got.count(OpKey::Gemm(4, 32, 16).ToString()));
  EXPECT_TRUE(got.count(OpKey::Gemm(5, 32, 16).ToString()));

  // merge: same device keeps the faster entry; different devices are refused.
  const std::string merged = TempPath("m.cgb");
  r = RunCli(fmt::format("merge {} {} -o {}", out, out2, merged));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto m = ReadBundleFile(merged);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->entries.size(), 4u);
  BundleSpec other = *spec2;
  other.device.fingerprint = "cpu-avx2-t2-0123456789abcdef";
  const std::string other_path = TempPath("other.cgb");
  ASSERT_TRUE(WriteBundleFile(other_path, other).ok());
  r = RunCli(fmt::format("merge {} {} -o {}", out, other_path, merged));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cpu-avx2-t2-0123456789abcdef"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(spec->device.fingerprint), std::string::npos) << r.output;
  for (const auto& p : {wl, log, out, rp, log2, out2, merged, other_path}) std::remove(p.c_str());
}

// --buckets: the families of the given keys are tuned at one representative per
// range (the largest given m in it, else its upper end), keys above the last end
// exactly; the summary has a bucket column. Whether a bucket ships depends on
// measured times, so only its range is checked.
TEST(TuneCliTest, BucketsTuneOneRepresentativePerRange) {
  const std::string log = TempPath("bk.jsonl"), out = TempPath("bk.cgb");
  CliResult r = RunCli(fmt::format("tune --shape 12,32,16 --shape 10,32,16 --shape 40,32,16 --buckets m:8,16 "
                                   "--trials 2 --strategy random --no-bundle-default --log {} --out {} {}",
                                   log, out, kFast));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 bucket(s) over 2 range(s), 1 key(s) above the last end tuned exactly"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("bucket"), std::string::npos) << r.output;
  auto spec = ReadBundleFile(out);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  std::map<std::string, std::pair<int64_t, int64_t>> want = {
      {OpKey::Gemm(8, 32, 16).ToString(), {1, 8}},
      {OpKey::Gemm(12, 32, 16).ToString(), {9, 16}},
      {OpKey::Gemm(40, 32, 16).ToString(), {0, 0}},
  };
  ASSERT_EQ(spec->entries.size(), want.size()) << r.output;
  for (const auto& e : spec->entries) {
    auto it = want.find(e.key.ToString());
    ASSERT_NE(it, want.end()) << e.key.ToString();
    if (e.has_bucket() || it->second.second == 0) {
      EXPECT_EQ(e.bucket_lo, it->second.first) << e.key.ToString();
      EXPECT_EQ(e.bucket_hi, it->second.second) << e.key.ToString();
    } else {
      EXPECT_NE(r.output.find(fmt::format("bucket [{}, {}] refused", it->second.first, it->second.second)),
                std::string::npos)
          << r.output;
    }
  }
  std::remove(log.c_str());
  std::remove(out.c_str());
}

// A report written by a runtime with a 1-thread budget is tuned for that budget, so
// the bundle applies where the misses happened; another device's report is refused.
TEST(TuneCliTest, FromReportTunesForTheReportedDeviceOrRefuses) {
  const DeviceInfo one = HostCpuDevice(1);
  MissReport rep;
  rep.device_fingerprint = one.fingerprint;
  rep.device_name = one.name;
  rep.device_threads = 1;
  MissRecord m;
  m.key = OpKey::Gemm(6, 24, 16);
  m.count = 4;
  m.fallback_us_total = 40;
  rep.records.push_back(m);
  rep.calls = rep.misses = 4;
  const std::string rp = TempPath("dev.json"), log = TempPath("dev.jsonl"), out = TempPath("dev.cgb");
  std::ofstream(rp) << MissReportToJson(rep);
  CliResult r = RunCli(fmt::format("tune --from-report {} --trials 2 --strategy random --log {} --out {} {}", rp, log,
                                   out, kFast));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto spec = ReadBundleFile(out);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->device.fingerprint, one.fingerprint);
  std::remove(log.c_str());
  std::remove(out.c_str());

  // An older report without device.threads: the budget is read from the fingerprint.
  rep.device_threads = 0;
  std::ofstream(rp) << MissReportToJson(rep);
  r = RunCli(fmt::format("tune --from-report {} --trials 2 --strategy random --log {} --out {} {}", rp, log, out, kFast));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ReadBundleFile(out)->device.fingerprint, one.fingerprint);
  std::remove(log.c_str());
  std::remove(out.c_str());

  r = RunCli(fmt::format("tune --from-report {} --threads 2 --trials 2 --log {} --out {} {}", rp, log, out, kFast));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--threads 2 differs from the thread budget 1"), std::string::npos) << r.output;

  rep.device_fingerprint = "cpu-avx2-t1-0123456789abcdef";
  rep.device_name = "another CPU";
  std::ofstream(rp) << MissReportToJson(rep);
  r = RunCli(fmt::format("tune --from-report {} --trials 2 --log {} --out {} {}", rp, log, out, kFast));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("is for device cpu-avx2-t1-0123456789abcdef (another CPU"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(log));
  std::remove(rp.c_str());
}

// The loop of a dynamic-shape workload: a runtime serves m's its bundle lacks, its
// report recommends a bucket, `tune --from-report` tunes that bucket, and the
// runtime then serves those m's by it.
TEST(TuneCliTest, FromReportTunesTheRecommendedBucketsOfARuntimesReport) {
  RuntimeOptions o;
  o.threads = 1;
  o.warn_on_miss = false;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok());
  std::vector<float> a(64 * 24, 1.f), b(24 * 40, 1.f), c(64 * 40);
  for (int64_t m : {5, 6, 7, 7, 30}) {
    const OpKey key = OpKey::Gemm(m, 40, 24, false, true);
    ASSERT_TRUE((*rt)->Gemm(DenseGemmArgs(key, a.data(), b.data(), c.data())).ok());
  }
  const MissReport rep = (*rt)->GetMissReport();
  ASSERT_EQ(rep.recommended_buckets.size(), 2u);  // (4, 8] and (16, 32]
  const std::string rp = TempPath("rec.json"), log = TempPath("rec.jsonl"), out = TempPath("rec.cgb");
  ASSERT_TRUE((*rt)->WriteMissReport(rp).ok());
  // Both ranges are tuned, so the test does not depend on which one the measured times rank first.
  CliResult r = RunCli(fmt::format("tune --from-report {} --top 2 --trials 2 --strategy random --log {} --out {} {}",
                                   rp, log, out, kFast));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto spec = ReadBundleFile(out);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->entries.size(), 2u);
  ASSERT_TRUE((*rt)->LoadBundleFile(out).ok());
  for (const BundleEntry& e : spec->entries) {
    EXPECT_EQ(KeyFamily(e.key), KeyFamily(OpKey::Gemm(1, 40, 24, false, true)));
    // The representative is an observed m of its range: the one that spent the most time in a default.
    const bool low = e.key.m() >= 5 && e.key.m() <= 7;
    EXPECT_TRUE(low || e.key.m() == 30) << e.key.ToString();
    if (e.has_bucket()) {  // shipped when it holds at the range's ends (measured: may be refused)
      EXPECT_EQ(e.bucket_lo, low ? 5 : 17);
      EXPECT_EQ(e.bucket_hi, low ? 8 : 32);
      const int64_t other_end = e.key.m() == e.bucket_lo ? e.bucket_hi : e.bucket_lo;
      auto res = (*rt)->Resolve(OpKey::Gemm(other_end, 40, 24, false, true));
      ASSERT_TRUE(res.ok());
      EXPECT_EQ(res->served_by, ServedBy::kBucket) << other_end;
      EXPECT_EQ(res->served_from, e.key);
    } else {
      EXPECT_NE(r.output.find("refused"), std::string::npos) << r.output;
    }
  }
  std::remove(rp.c_str());
  std::remove(log.c_str());
  std::remove(out.c_str());
}

TEST(TuneCliTest, ShardsTuneEveryKeyExactlyOnceAndMergeToASingleRunsKeys) {
  const std::string workload = TempPath("shard_workload.txt");
  {
    std::ofstream w(workload);
    w << "8,16,8\n9,16,8\n10,16,8,nt\n12,24,8\n5,16,16\n6,16,16,nt\n7,8,8\n";
  }
  const std::string common = fmt::format("tune --workload {} --trials 2 --strategy random --no-confirm "
                                         "--no-bundle-default {}",
                                         workload, kFast);
  auto keys_of = [](const std::string& path) {
    std::multiset<std::string> keys;
    auto b = ReadBundleFile(path);
    EXPECT_TRUE(b.ok()) << path << ": " << b.status().ToString();
    if (b.ok())
      for (const auto& e : b->entries) keys.insert(e.key.ToString());
    return keys;
  };
  const std::string single_log = TempPath("shard_single.jsonl"), single = TempPath("shard_single.cgb");
  CliResult r = RunCli(fmt::format("{} --log {} --out {}", common, single_log, single));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::multiset<std::string> want = keys_of(single);
  ASSERT_EQ(want.size(), 7u);

  const int n = 3;
  std::multiset<std::string> got;
  std::string bundles;
  std::vector<std::string> shard_bundles;
  for (int i = 0; i < n; ++i) {
    const std::string log = TempPath(fmt::format("shard{}.jsonl", i)), out = TempPath(fmt::format("shard{}.cgb", i));
    r = RunCli(fmt::format("{} --shard {}/{} --log {} --out {}", common, i, n, log, out));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(fmt::format("shard {}/{}: {} of 7 keys", i, n, i == 0 ? 3 : 2)), std::string::npos)
        << r.output;
    const auto mine = keys_of(out);
    got.insert(mine.begin(), mine.end());  // a key in two shards would appear twice
    bundles += " " + out;
    shard_bundles.push_back(out);
    std::remove(log.c_str());
  }
  EXPECT_EQ(got, want);
  const std::string merged = TempPath("shard_merged.cgb");
  r = RunCli(fmt::format("merge{} -o {}", bundles, merged));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("0 duplicates"), std::string::npos) << r.output;
  EXPECT_EQ(keys_of(merged), want);

  // The same through the engines' scripts: shards 0 and 1 as Slurm array tasks, shard
  // 2 as a Kubernetes Indexed Job pod, then the merge step.
  const std::string root = std::filesystem::path(CG_TEST_DATA_DIR).parent_path().parent_path().string();
  const std::string dir = TempPath("shard_engines");
  std::filesystem::create_directories(dir);
  const std::string env = fmt::format("CLIFFGUARD='{}' CG_WORKLOAD='{}' CG_OUT_DIR='{}' CG_TUNE_ARGS='--trials 2 "
                                      "--strategy random --no-confirm --no-bundle-default {}'",
                                      CG_CLI_PATH, workload, dir, kFast);
  const std::string merge = fmt::format("{} CG_SHARDS=3 sh '{}/deploy/merge-shards.sh'", env, root);
  for (int i = 0; i < 2; ++i) {
    r = RunShell(fmt::format("{} SLURM_ARRAY_TASK_ID={} SLURM_ARRAY_TASK_COUNT=3 SLURM_SUBMIT_DIR='{}' bash '{}/deploy/slurm/tune.sbatch'",
                           env, i, root, root));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  r = RunShell(merge);  // shard 2 has not run: refused, naming it
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("shards not finished: 2 (of 3)"), std::string::npos) << r.output;
  r = RunShell(fmt::format("{} JOB_COMPLETION_INDEX=2 CG_SHARDS=3 sh '{}/deploy/tune-shard.sh'", env, root));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunShell(merge);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(keys_of(dir + "/tuned.cgb"), want);
  std::filesystem::remove_all(dir);

  for (const char* bad : {"3/3", "-1/3", "1/0", "1", "a/b", "1/3x"}) {
    r = RunCli(fmt::format("{} --shard {} --log {} --out {}", common, bad, TempPath("bad.jsonl"), TempPath("bad.cgb")));
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("must be I/N"), std::string::npos) << r.output;
  }
  for (const std::string& p : {workload, single_log, single, merged}) std::remove(p.c_str());
  for (const std::string& p : shard_bundles) std::remove(p.c_str());
}

TEST(TuneCliTest, FromReportMergesSeveralReplicasReports) {
  const DeviceInfo here = HostCpuDevice(1);
  auto report = [&](int64_t pid, int64_t m, uint64_t count) {
    MissReport r;
    r.device_fingerprint = here.fingerprint;
    r.device_threads = 1;
    r.host = "replica";
    r.pid = pid;
    r.process_start = 1.8e9;
    MissRecord rec;
    rec.key = *OpKey::Parse(fmt::format("gemm f32 nn m={} n=16 k=8", m));
    rec.count = count;
    rec.served_calls[static_cast<int>(ServedBy::kBuiltinDefault)] = count;
    rec.served_us[static_cast<int>(ServedBy::kBuiltinDefault)] = rec.fallback_us_total = 10.0 * double(count);
    r.records.push_back(rec);
    r.misses = r.calls = count;
    const std::string path = TempPath(fmt::format("replica{}.json", pid));
    std::ofstream(path) << MissReportToJson(r);
    return path;
  };
  const std::string a = report(1, 3, 10), b = report(2, 40, 1000), c = report(3, 3, 5);
  const std::string log = TempPath("replicas.jsonl"), out = TempPath("replicas.cgb");
  CliResult r = RunCli(fmt::format("tune --from-report {} {} --from-report {} --top 1 --trials 2 --strategy random "
                                   "--no-confirm --log {} --out {} {}",
                                   a, b, c, log, out, kFast));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("from 3 merged reports"), std::string::npos) << r.output;
  auto bundle = ReadBundleFile(out);
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  bool m40 = false;  // the top range of the merged traffic: m=40 with 1000 calls
  for (const auto& e : bundle->entries) m40 = m40 || e.key.dims[kVaryingDim] == 40;
  EXPECT_TRUE(m40) << r.output;
  r = RunCli(fmt::format("tune --from-report {} {} --log {} --out {}", a, a, TempPath("dup.jsonl"), TempPath("dup.cgb")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("count its calls twice"), std::string::npos) << r.output;
  for (const std::string& p : {a, b, c, log, out}) std::remove(p.c_str());
}

// conv2d from the command line: tune (shorthand shapes, beside a gemm key), run
// (a hit and a miss through plans), --op refusing the other op, and compare.
TEST(TuneCliTest, Conv2dTunesRunsAndComparesFromTheCommandLine) {
  const std::string conv = "1,9,9,8,16,3,1", gemm = "16,24,8";
  const std::string common = fmt::format("tune --shape {} --shape {} --threads 1 --trials 2 --strategy random "
                                         "--no-bundle-default {}",
                                         conv, gemm, kFast);
  const std::string log_a = TempPath("conv_a.jsonl"), a = TempPath("conv_a.cgb");
  const std::string log_b = TempPath("conv_b.jsonl"), b = TempPath("conv_b.cgb");
  auto r = RunCli(fmt::format("{} --seed 1 --log {} --out {}", common, log_a, a));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunCli(fmt::format("{} --seed 2 --log {} --out {}", common, log_b, b));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  r = RunCli(fmt::format("run --threads 1 --bundle {} --shape {} --shape 2,9,9,8,16,3,1 --iters 2", a, conv));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("calls 4: 2 hits, 2 misses"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("conv2d f32 nhwc n=2 h=9 w=9 ic=8 oc=16 kh=3 kw=3 sh=1 sw=1 ph=1 pw=1 weights=constant"),
            std::string::npos)
      << r.output;
  r = RunCli(fmt::format("run --op gemm --shape {} --iters 1", conv));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is a conv2d key, not gemm (--op)"), std::string::npos) << r.output;
  r = RunCli(fmt::format("tune --op conv2d --shape {} --trials 2 --log {} --out {}", gemm, TempPath("x.jsonl"),
                         TempPath("x.cgb")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is not f32 conv2d (--op conv2d)"), std::string::npos) << r.output;

  r = RunCli(fmt::format("compare {} {} --rounds 1 --min-time-ms 1", a, b));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 keys compared"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("conv2d f32 nhwc n=1 h=9 w=9"), std::string::npos) << r.output;

  // Bundles of two thread budgets are two devices.
  const std::string log_c = TempPath("conv_c.jsonl"), c = TempPath("conv_c.cgb");
  r = RunCli(fmt::format("tune --shape {} --threads 2 --trials 1 --no-bundle-default --no-confirm --log {} --out {}",
                         gemm, log_c, c));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunCli(fmt::format("compare {} {}", a, c));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("are for different devices"), std::string::npos) << r.output;
  for (const auto& f : {log_a, a, log_b, b, log_c, c}) std::remove(f.c_str());
}

}  // namespace
}  // namespace cliffguard::tuner
