// Crash-safe tuning: `cliffguard tune` (CG_CLI_PATH) run as a child and killed with
// SIGKILL at several random points, resumed each time with --resume, then run to
// completion. After every kill:
//   - the log holds whole lines only, except possibly a partial last line (which
//     ReadTuningLog drops with a warning); it never reports a corrupt middle line;
//   - nothing is at the --out path and no temporary file is left beside it;
//   - the process group is empty (measurer workers die with the tuner);
//   - the records written before the kill are all still there after the resume
//     (a resume loses at most the measurement in flight).
// At the end every trial index 0..trials-1 is in the log exactly once, no schedule
// was measured twice, and the bundle loads into a Runtime.
//
// CG_CRASH_SEED picks the kill points (default: from the clock; printed on failure).
//
// Also replays the tuner fuzz targets' seeds and saved regressions
// (tests/fuzz/{corpus,regressions}/fuzz_{workload,tuning_log}) through the same
// entry points (tests/fuzz/fuzz_bodies_tuner.h).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cliffguard/bundle.h"
#include "cliffguard/runtime.h"
#include "cliffguard/tuner/tuning_log.h"

#define CG_FUZZ_CHECK(cond) EXPECT_TRUE(cond) << "fuzz property: " #cond
#include "fuzz/fuzz_bodies_tuner.h"

namespace cliffguard::tuner {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Complete lines (ending in '\n') and whether a partial line follows them.
struct LogShape {
  int complete = 0;
  bool partial_tail = false;
};
LogShape ShapeOf(const std::string& text) {
  LogShape s;
  for (char c : text) s.complete += c == '\n';
  s.partial_tail = !text.empty() && text.back() != '\n';
  return s;
}

// Starts `cliffguard ARGS` in its own process group; returns its pid.
pid_t StartCli(const std::string& args) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    const std::string cmd = fmt::format("exec '{}' {} >/dev/null 2>&1", CG_CLI_PATH, args);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (pid > 0) ::setpgid(pid, pid);  // also from the parent: no race with kill(-pid)
  return pid;
}

bool GroupGone(pid_t pgid, double within_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(within_s);
  while (Clock::now() < deadline) {
    if (::kill(-pgid, 0) != 0 && errno == ESRCH) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::vector<std::string> Leftovers(const std::string& dir, const std::string& out_name) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(out_name, 0) == 0) found.push_back(name);  // out.cgb or out.cgb.tmp.XXXXXX
  }
  return found;
}

TEST(CrashSafetyTest, SigkillAtRandomPointsThenResumeLosesNothingWritten) {
  const char* env_seed = std::getenv("CG_CRASH_SEED");
  const uint64_t seed = env_seed ? std::strtoull(env_seed, nullptr, 10)
                                 : static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  SCOPED_TRACE(fmt::format("CG_CRASH_SEED={}", seed));
  std::mt19937_64 rng(seed);

  const std::string dir = (fs::temp_directory_path() / fmt::format("cg_crash_{}", ::getpid())).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string log = dir + "/log.jsonl", out = dir + "/out.cgb";
  constexpr int kTrials = 16;
  const std::string args = fmt::format(
      "tune --op gemm --shape 24,40,32 --trials {} --batch 2 --strategy random --seed 5 --threads 1 "
      "--log '{}' --out '{}' --min-time-ms 2 --min-repeats 3 --no-bundle-default",
      kTrials, log, out);

  int kills = 0;
  std::string before;  // the log's valid prefix at the last kill
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(fmt::format("round {}", round));
    const int lines_before = ShapeOf(ReadText(log)).complete;
    const int target = lines_before + 1 + static_cast<int>(rng() % 4);
    const pid_t pid = StartCli(round == 0 ? args : args + " --resume");
    ASSERT_GT(pid, 0);
    // Wait for `target` lines (or the end), then a random extra delay so some kills
    // land in the middle of a measurement or a write.
    int st = 0;
    bool exited = false;
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (Clock::now() < deadline) {
      if (::waitpid(pid, &st, WNOHANG) == pid) {
        exited = true;
        break;
      }
      if (ShapeOf(ReadText(log)).complete >= target) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (!exited) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
      ASSERT_EQ(::kill(pid, SIGKILL), 0);
      ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    }
    if (WIFEXITED(st)) {
      // Finished before the kill: fine, the final checks below cover it.
      ASSERT_EQ(WEXITSTATUS(st), 0) << "tune failed in round " << round;
      break;
    }
    ASSERT_TRUE(WIFSIGNALED(st));
    ++kills;
    EXPECT_TRUE(GroupGone(pid, 10.0)) << "measurer workers outlived the killed tuner";

    const std::string text = ReadText(log);
    const LogShape shape = ShapeOf(text);
    auto contents = ReadTuningLog(log);
    ASSERT_TRUE(contents.ok()) << contents.status().ToString() << "\n" << text;
    // The bundle is written once, after the last trial: before that nothing exists at
    // --out. A kill during that write leaves the old state, or a complete bundle, or
    // (where the filesystem lacks O_TMPFILE, or in the moment between naming and
    // renaming the finished file) a temporary beside it; never a partial bundle.
    const auto trials_logged = std::count_if(contents->records.begin(), contents->records.end(),
                                             [](const LogRecord& r) { return r.kind == RecordKind::kTrial; });
    for (const std::string& name : Leftovers(dir, "out.cgb")) {
      EXPECT_EQ(trials_logged, kTrials) << name << " exists before the last trial was logged";
      if (name == "out.cgb") EXPECT_TRUE(ReadBundleFile(out).ok()) << "a partial bundle at --out";
      else fs::remove(dir + "/" + name);
    }
    EXPECT_EQ(contents->dropped_last_line, shape.partial_tail);
    // Every complete line is a record (blank lines aside, which the writer never makes).
    EXPECT_EQ(static_cast<int>(contents->records.size()), shape.complete);
    // Nothing written before the previous kill was lost by the resume.
    EXPECT_EQ(text.compare(0, before.size(), before), 0) << "the resume rewrote earlier records";
    before = text.substr(0, static_cast<size_t>(contents->valid_bytes));
  }
  EXPECT_GE(kills, 2) << "the run was too fast to be killed at several points";
  std::printf("crash safety: seed %llu, %d kills, log %zu bytes before the final resume\n",
              static_cast<unsigned long long>(seed), kills, before.size());

  // Run to the end.
  const pid_t pid = StartCli(args + " --resume");
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "final --resume failed";
  const std::string text = ReadText(log);
  EXPECT_EQ(text.compare(0, before.size(), before), 0) << "the final resume rewrote earlier records";
  auto contents = ReadTuningLog(log);
  ASSERT_TRUE(contents.ok()) << contents.status().ToString();
  EXPECT_FALSE(contents->dropped_last_line);
  std::set<int64_t> trials;
  std::set<std::string> schedules;
  int defaults = 0;
  for (const LogRecord& r : contents->records) {
    defaults += r.kind == RecordKind::kDefault;
    if (r.kind != RecordKind::kTrial) continue;
    EXPECT_TRUE(trials.insert(r.trial).second) << "trial " << r.trial << " measured twice";
    std::string s = r.schedule.variant;
    for (const auto& [k, v] : r.schedule.params) s += fmt::format(" {}={}", k, v);
    EXPECT_TRUE(schedules.insert(s).second) << "schedule measured twice: " << s;
  }
  EXPECT_EQ(defaults, 1);
  EXPECT_EQ(trials.size(), static_cast<size_t>(kTrials));
  if (!trials.empty()) {
    EXPECT_EQ(*trials.begin(), 0);
    EXPECT_EQ(*trials.rbegin(), kTrials - 1);
  }
  EXPECT_EQ(Leftovers(dir, "out.cgb"), std::vector<std::string>{"out.cgb"});
  RuntimeOptions o;
  o.threads = 1;
  o.warn_on_miss = false;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok());
  auto rep = (*rt)->LoadBundleFile(out);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->device_match) << rep->device_rule;
  EXPECT_EQ(rep->entries_loaded, 1u);
  EXPECT_TRUE(rep->rejected.empty());
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------
// Fuzz regressions and seeds of the tuner targets

void Replay(const std::string& target, void (*body)(const uint8_t*, size_t)) {
  const fs::path base = fs::path(CG_TEST_DATA_DIR) / ".." / "fuzz";
  size_t n = 0;
  for (const char* kind : {"regressions", "corpus"}) {
    const fs::path d = base / kind / target;
    std::error_code ec;
    if (!fs::is_directory(d, ec)) continue;
    for (const auto& e : fs::directory_iterator(d)) {
      if (!e.is_regular_file()) continue;
      SCOPED_TRACE(e.path().string());
      const std::string bytes = ReadText(e.path().string());
      body(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++n;
    }
  }
  EXPECT_GT(n, 0u) << "no seed or regression inputs for " << target;
}

TEST(FuzzRegressionTest, Workload) { Replay("fuzz_workload", cliffguard::fuzz::FuzzWorkload); }
TEST(FuzzRegressionTest, TuningLog) { Replay("fuzz_tuning_log", cliffguard::fuzz::FuzzTuningLog); }

}  // namespace
}  // namespace cliffguard::tuner
