// Bad input everywhere: the public API (shapes, pointers, leading dimensions,
// options), bundle and report files (missing, empty, huge, directories, devices,
// garbage), writes that fail (/dev/full, a full tmpfs), and the command line run as
// a child (CG_CLI_PATH). Every case must end in a clear Status or a non-zero exit
// with a message naming the value and the rule: no crash, nothing lost.
//
// Also replays every saved fuzz input (tests/fuzz/regressions/<target>/*, plus the
// seed corpora) through the same entry points the fuzz targets drive
// (tests/fuzz/fuzz_bodies.h). The tuner targets are replayed in
// tests/tuner/crash_safety_test.cc (this binary does not link the tuner).
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include "cliffguard/log.h"

#include "cliffguard/bundle.h"
#include "cliffguard/miss_report.h"
#include "cliffguard/runtime.h"

#define CG_FUZZ_CHECK(cond) EXPECT_TRUE(cond) << "fuzz property: " #cond
#include "fuzz/fuzz_bodies.h"

namespace cliffguard {
namespace {

namespace fs = std::filesystem;

const fs::path kFuzzDir = fs::path(CG_TEST_DATA_DIR) / ".." / "fuzz";

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / fmt::format("cg_bad_input_{}_{}", ::getpid(), counter_++);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

void MakeSparse(const std::string& path, int64_t bytes) {
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, bytes), 0);
  ::close(fd);
}

bool IsCharDevice(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

// A bundle for this host with entries for small shapes.
BundleSpec HostBundle(const DeviceInfo& device, std::vector<OpKey> keys = {OpKey::Gemm(4, 4, 4)}) {
  BundleSpec spec;
  spec.device = device;
  spec.created_at = 1764489600;
  for (const OpKey& k : keys) {
    BundleEntry e;
    e.key = k;
    e.schedule.variant = "cpu_f32_gemm_4x4__scalar";
    e.tuned_us = 1;
    e.default_us = 2;
    spec.entries.push_back(e);
  }
  return spec;
}

std::unique_ptr<Runtime> NewRuntime() {
  RuntimeOptions o;
  o.threads = 1;
  o.warn_on_miss = false;
  auto rt = Runtime::Create(o);
  EXPECT_TRUE(rt.ok()) << rt.status().ToString();
  return std::move(rt).value();
}

// ---------------------------------------------------------------------------
// Fuzz regressions and seed corpora

std::vector<fs::path> FilesUnder(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

void Replay(const std::string& target, void (*body)(const uint8_t*, size_t)) {
  size_t n = 0;
  for (const char* kind : {"regressions", "corpus"}) {
    for (const fs::path& p : FilesUnder(kFuzzDir / kind / target)) {
      SCOPED_TRACE(p.string());
      const std::string bytes = ReadText(p.string());
      body(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++n;
    }
  }
  EXPECT_GT(n, 0u) << "no seed or regression inputs found for " << target << " under " << kFuzzDir;
}

TEST(FuzzRegressionTest, BundleLoad) { Replay("fuzz_bundle_load", fuzz::FuzzBundleLoad); }
TEST(FuzzRegressionTest, BundleJson) { Replay("fuzz_bundle_json", fuzz::FuzzBundleJson); }
TEST(FuzzRegressionTest, MissReport) { Replay("fuzz_miss_report", fuzz::FuzzMissReport); }

// Every regression input also gives a clean Status from the plain entry points.
TEST(FuzzRegressionTest, RegressionInputsGiveAStatus) {
  for (const fs::path& p : FilesUnder(kFuzzDir / "regressions" / "fuzz_bundle_load")) {
    auto r = ReadBundleFile(p.string());
    if (!r.ok()) EXPECT_FALSE(r.status().message().empty()) << p;
  }
  for (const fs::path& p : FilesUnder(kFuzzDir / "regressions" / "fuzz_miss_report")) {
    auto r = MissReportFromJson(ReadText(p.string()));
    if (!r.ok()) EXPECT_FALSE(r.status().message().empty()) << p;
  }
}

// ---------------------------------------------------------------------------
// API: GEMM arguments

struct GemmCall {
  std::vector<float> a, b, c;
  GemmArgs args;
  GemmCall(int64_t m, int64_t n, int64_t k)
      : a(size_t(m * k), 1.f), b(size_t(k * n), 1.f), c(size_t(m * n)),
        args(DenseGemmArgs(OpKey::Gemm(m, n, k), a.data(), b.data(), c.data())) {}
};

void ExpectInvalid(Runtime& rt, const GemmArgs& args, const std::string& names_value, const std::string& rule) {
  Status st = rt.Gemm(args);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find(names_value), std::string::npos) << st.message() << " should name " << names_value;
  EXPECT_NE(st.message().find(rule), std::string::npos) << st.message() << " should state " << rule;
  EXPECT_EQ(ValidateGemmArgs(args).code(), StatusCode::kInvalidArgument);
}

// A refused call runs nothing and is not a miss: not on a key never seen, and not on
// a key whose earlier valid calls missed (then its miss record is cached per thread).
TEST(BadInputApiTest, RefusedCallsAreNeverCountedAsMisses) {
  auto rt = NewRuntime();
  GemmCall g(6, 5, 4);
  GemmArgs bad = g.args;
  bad.ldb = 2;  // < n
  ExpectInvalid(*rt, bad, "ldb=2", ">= 5");
  EXPECT_TRUE(rt->GetMissReport().records.empty());
  ASSERT_TRUE(rt->Gemm(g.args).ok());
  ExpectInvalid(*rt, bad, "ldb=2", ">= 5");
  bad = g.args;
  bad.c = nullptr;
  ExpectInvalid(*rt, bad, "pointer c", "null");
  const MissReport report = rt->GetMissReport();
  ASSERT_EQ(report.records.size(), 1u);
  EXPECT_EQ(report.records[0].count, 1u);
}

TEST(BadInputApiTest, GemmRejectsBadShapesWithTheValueAndTheRule) {
  auto rt = NewRuntime();
  GemmCall g(4, 4, 4);
  {
    GemmArgs a = g.args;
    a.m = 0;
    ExpectInvalid(*rt, a, "m=0", ">= 1");
  }
  {
    GemmArgs a = g.args;
    a.n = -3;
    ExpectInvalid(*rt, a, "n=-3", ">= 1");
  }
  {
    GemmArgs a = g.args;
    a.k = INT64_MIN;
    ExpectInvalid(*rt, a, fmt::format("k={}", INT64_MIN), ">= 1");
  }
  {
    GemmArgs a = g.args;
    a.m = int64_t{1} << 40;  // over the per-dimension limit
    ExpectInvalid(*rt, a, fmt::format("m={}", int64_t{1} << 40), "<=");
  }
  {
    GemmArgs a = g.args;  // each dim in range, the operand element count is not
    a.m = a.n = a.k = int64_t{1} << 31;
    a.lda = a.ldb = a.ldc = int64_t{1} << 31;
    Status st = rt->Gemm(a);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("m=2147483648"), std::string::npos) << st.message();
  }
  // Nothing was counted for the refused calls.
  EXPECT_TRUE(rt->Stats().empty());
}

TEST(BadInputApiTest, GemmRejectsNullPointersAndSmallLeadingDimensions) {
  auto rt = NewRuntime();
  GemmCall g(5, 6, 7);
  for (int which = 0; which < 3; ++which) {
    GemmArgs a = g.args;
    if (which == 0) a.a = nullptr;
    if (which == 1) a.b = nullptr;
    if (which == 2) a.c = nullptr;
    ExpectInvalid(*rt, a, fmt::format("pointer {}", "abc"[which]), "null");
  }
  {
    GemmArgs a = g.args;
    a.lda = 6;
    ExpectInvalid(*rt, a, "lda=6", ">= 7");
  }
  {
    GemmArgs a = g.args;
    a.trans_a = true;  // A is k x m: lda >= m
    a.lda = 4;
    ExpectInvalid(*rt, a, "lda=4", ">= 5");
  }
  {
    GemmArgs a = g.args;
    a.ldb = 5;
    ExpectInvalid(*rt, a, "ldb=5", ">= 6");
  }
  {
    GemmArgs a = g.args;
    a.trans_b = true;  // B is n x k: ldb >= k
    a.ldb = 6;
    ExpectInvalid(*rt, a, "ldb=6", ">= 7");
  }
  {
    GemmArgs a = g.args;
    a.ldc = -1;
    ExpectInvalid(*rt, a, "ldc=-1", ">= 6 (n)");
  }
  EXPECT_TRUE(rt->Stats().empty());
  // A good call after all that still works and is counted once.
  ASSERT_TRUE(rt->Gemm(g.args).ok());
  ASSERT_EQ(rt->Stats().size(), 1u);
  EXPECT_EQ(rt->Stats()[0].misses, 1u);
}

TEST(BadInputApiTest, PlansRefuseBadKeysAndBadRuns) {
  auto rt = NewRuntime();
  EXPECT_EQ(rt->PlanGemm(OpKey::Gemm(0, 1, 1)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rt->PlanGemm(OpKey::Gemm(1, -1, 1)).status().code(), StatusCode::kInvalidArgument);
  auto conv = rt->PlanGemm(OpKey::Conv2d(1, 8, 8, 4, 4, 3, 3, 1, 1, 1, 1));
  EXPECT_EQ(conv.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(conv.status().message().find("not a gemm"), std::string::npos) << conv.status().message();
  OpKey odd = OpKey::Gemm(2, 2, 2);
  odd.dims[5] = 7;  // an unused slot must be zero
  EXPECT_EQ(rt->PlanGemm(odd).status().code(), StatusCode::kInvalidArgument);

  GemmPlan empty;
  float x[16] = {};
  EXPECT_EQ(empty.Run(x, 4, x, 4, x, 4).code(), StatusCode::kInvalidState);
  auto plan = rt->PlanGemm(OpKey::Gemm(4, 4, 4));
  ASSERT_TRUE(plan.ok());
  GemmPlan moved = std::move(plan).value();
  EXPECT_TRUE(moved.Run(x, 4, x, 4, x, 4).ok());
  EXPECT_EQ(moved.Run(nullptr, 4, x, 4, x, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(moved.Run(x, 4, x, 4, nullptr, 4).code(), StatusCode::kInvalidArgument);
  Status st = moved.Run(x, 3, x, 4, x, 4);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("lda=3"), std::string::npos) << st.message();
  GemmPlan stolen = std::move(moved);
  EXPECT_EQ(moved.Run(x, 4, x, 4, x, 4).code(), StatusCode::kInvalidState);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(stolen.Run(x, 4, x, 4, x, 4).ok());
}

TEST(BadInputApiTest, RuntimeOptionsAndKeyTextAreChecked) {
  RuntimeOptions o;
  o.threads = -1;
  auto rt = Runtime::Create(o);
  EXPECT_EQ(rt.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rt.status().message().find("threads=-1"), std::string::npos) << rt.status().message();
  o.threads = 100000;
  EXPECT_FALSE(Runtime::Create(o).ok());
  for (const char* text : {"", "gemm", "gemm f32 nn m=1 n=1", "gemm f32 nn m=0 n=1 k=1", "gemm f32 xx m=1 n=1 k=1",
                           "gemm f99 nn m=1 n=1 k=1", "gemm f32 nn m=1 n=1 k=99999999999999999999",
                           "gemm f32 nn m=-1 n=1 k=1", "conv2d f32 nhwc n=1", "gemm f32 nn m=1 n=1 k=1 extra=2"}) {
    auto k = OpKey::Parse(text);
    EXPECT_FALSE(k.ok()) << "'" << text << "' parsed";
    if (!k.ok()) EXPECT_FALSE(k.status().message().empty());
  }
}

// ---------------------------------------------------------------------------
// Files through the API

TEST(BadInputFileTest, BundleFilesThatAreNotBundlesAreRefused) {
  TempDir d;
  WriteText(d / "empty.cgb", "");
  WriteText(d / "garbage.cgb", "this is not a flatbuffer at all, just text");
  fs::create_directories(d / "dir.cgb");
  MakeSparse(d / "huge.cgb", kMaxBundleBytes + 1);
  WriteText(d / "file", "x");
  auto rt = NewRuntime();
  struct Case {
    std::string path, says;
  };
  const std::vector<Case> cases = {
      {d / "missing.cgb", "No such file"}, {d / "empty.cgb", "empty"},
      {d / "garbage.cgb", "not a cliffguard bundle"}, {d / "dir.cgb", "directory"},
      {d / "huge.cgb", "over the limit"}, {"/dev/zero", "not a regular file"},
      {d / "file" + "/child.cgb", "Not a directory"},  // unreadable for a reason root cannot override
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    auto spec = ReadBundleFile(c.path);
    ASSERT_FALSE(spec.ok());
    EXPECT_NE(spec.status().message().find(c.says), std::string::npos) << spec.status().ToString();
    auto rep = rt->LoadBundleFile(c.path);
    ASSERT_FALSE(rep.ok());
    EXPECT_NE(rep.status().message().find(c.path), std::string::npos) << rep.status().ToString();
  }
  EXPECT_TRUE(rt->LoadReports().empty());
}

TEST(BadInputFileTest, UnreadableByPermission) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "running as root: mode 000 does not stop root from reading; the not-a-directory, "
                    "directory and device cases cover open/read failures instead";
  TempDir d;
  WriteText(d / "locked.cgb", "x");
  ::chmod((d / "locked.cgb").c_str(), 0);
  auto spec = ReadBundleFile(d / "locked.cgb");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kIoError);
  EXPECT_NE(spec.status().message().find("Permission denied"), std::string::npos) << spec.status().ToString();
}

TEST(BadInputFileTest, ReplaceBundlesIsAllOrNothing) {
  TempDir d;
  auto rt = NewRuntime();
  ASSERT_TRUE(WriteBundleFile(d / "good.cgb", HostBundle(rt->device())).ok());
  WriteText(d / "bad.cgb", "garbage garbage garbage");
  ASSERT_TRUE(rt->ReplaceBundles({d / "good.cgb"}).ok());
  GemmCall g(4, 4, 4);
  ASSERT_TRUE(rt->Gemm(g.args).ok());
  auto r = rt->ReplaceBundles({d / "good.cgb", d / "bad.cgb"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bad.cgb"), std::string::npos) << r.status().ToString();
  ASSERT_EQ(rt->LoadReports().size(), 1u);  // the good set is still loaded
  EXPECT_EQ(rt->LoadReports()[0].source, d / "good.cgb");
  ASSERT_TRUE(rt->Gemm(g.args).ok());
  auto stats = rt->Stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].hits, 2u);
  EXPECT_EQ(stats[0].misses, 0u);
}

// Thousands of refused loads would each log a warning: keep errors only here.
class QuietScope {
 public:
  QuietScope() : level_(GetLogLevel()) { SetLogLevel(LogLevel::kError); }
  ~QuietScope() { SetLogLevel(level_); }

 private:
  LogLevel level_;
};

TEST(BadInputFileTest, CorruptBundleBytesNeverCrashTheLoader) {
  QuietScope quiet;
  auto rt = NewRuntime();
  const std::vector<uint8_t> good = SerializeBundle(HostBundle(rt->device(), {OpKey::Gemm(4, 4, 4), OpKey::Gemm(8, 8, 8)}));
  const std::string good_json = BundleToJson(*ParseBundle(good));
  // Every truncation and a sweep of single-byte corruptions: a Status, never a crash.
  // A truncation may only verify when it cut alignment padding: then it reads the same.
  for (size_t n = 0; n < good.size(); ++n) {
    const std::span<const uint8_t> cut(good.data(), n);
    auto r = rt->LoadBundleBuffer(cut, "truncated");
    if (r.ok()) {
      auto spec = ParseBundle(cut);
      ASSERT_TRUE(spec.ok()) << n;
      EXPECT_EQ(BundleToJson(*spec), good_json) << "a truncation at " << n << " of " << good.size() << " read differently";
    }
    rt->UnloadAll();
  }
  size_t loaded = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t x : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0x7f}, uint8_t{0x80}}) {
      std::vector<uint8_t> bad = good;
      bad[i] = x;
      auto r = rt->LoadBundleBuffer(bad, "corrupt");
      loaded += r.ok();
      (void)ParseBundle(bad, "corrupt");
    }
    rt->UnloadAll();
  }
  // A malicious but valid bundle loads; the dispatch still runs a correct kernel.
  GemmCall g(8, 8, 8);
  EXPECT_TRUE(rt->Gemm(g.args).ok());
  EXPECT_GT(loaded, 0u);
}

TEST(BadInputFileTest, NewerSchemaAndOtherDeviceAreRefusedOrNotApplied) {
  auto rt = NewRuntime();
  BundleSpec spec = HostBundle(rt->device());
  spec.schema_version = kBundleSchemaVersion + 1;
  auto r = rt->LoadBundleBuffer(SerializeBundle(spec), "newer");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  spec.schema_version = kBundleSchemaVersion;
  spec.device.fingerprint = "cpu-avx512-t2-0000000000000000";
  auto other = rt->LoadBundleBuffer(SerializeBundle(spec), "other");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->device_match);
  GemmCall g(4, 4, 4);
  ASSERT_TRUE(rt->Gemm(g.args).ok());
  EXPECT_EQ(rt->Stats()[0].misses, 1u);  // a bundle cannot apply to another device
}

TEST(BadInputFileTest, FailedWritesLeaveTheDestinationAlone) {
  ASSERT_TRUE(IsCharDevice("/dev/full"));
  auto rt = NewRuntime();
  const BundleSpec spec = HostBundle(rt->device());
  Status st = WriteBundleFile("/dev/full", spec);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/dev/full"), std::string::npos) << st.ToString();
  EXPECT_FALSE(rt->WriteMissReport("/dev/full").ok());
  EXPECT_TRUE(IsCharDevice("/dev/full")) << "/dev/full was replaced";
  EXPECT_FALSE(WriteBundleFile("", spec).ok());
  TempDir d;
  fs::create_directories(d / "adir");
  EXPECT_FALSE(WriteBundleFile(d / "adir", spec).ok());
  EXPECT_TRUE(fs::is_directory(d / "adir"));
  EXPECT_FALSE(WriteBundleFile(d / "no/such/dir/x.cgb", spec).ok());
}

// A real ENOSPC: a 64 KiB tmpfs (needs root and mount(2); skipped otherwise).
class TinyTmpfs {
 public:
  TinyTmpfs() {
    fs::create_directories(dir_.path() / "mnt");
    mnt_ = dir_ / "mnt";
    mounted_ = ::mount("tmpfs", mnt_.c_str(), "tmpfs", 0, "size=64k") == 0;
    if (!mounted_) why_ = std::strerror(errno);
  }
  ~TinyTmpfs() {
    if (mounted_) ::umount2(mnt_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  std::string operator/(const std::string& name) const { return mnt_ + "/" + name; }

 private:
  TempDir dir_;
  std::string mnt_, why_;
  bool mounted_ = false;
};

std::vector<OpKey> ManyKeys(int n) {
  std::vector<OpKey> keys;
  for (int i = 1; i <= n; ++i) keys.push_back(OpKey::Gemm(i, 7, 9));
  return keys;
}

TEST(BadInputFileTest, DiskFullKeepsTheOldBundleAndLeavesNoTemporary) {
  TinyTmpfs t;
  if (!t.mounted()) GTEST_SKIP() << "cannot mount a 64 KiB tmpfs here (" << t.why() << ")";
  auto rt = NewRuntime();
  const BundleSpec small = HostBundle(rt->device());
  ASSERT_TRUE(WriteBundleFile(t / "b.cgb", small).ok());
  const std::string before = ReadText(t / "b.cgb");
  const BundleSpec big = HostBundle(rt->device(), ManyKeys(2000));  // ~200 KiB
  ASSERT_GT(SerializeBundle(big).size(), 100u * 1024);
  Status st = WriteBundleFile(t / "b.cgb", big);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("No space left"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("unchanged"), std::string::npos) << st.ToString();
  EXPECT_EQ(ReadText(t / "b.cgb"), before);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fs::path(t / "")))  names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"b.cgb"}) << "a temporary file was left behind";
  EXPECT_TRUE(rt->LoadBundleFile(t / "b.cgb").ok());
}

// ---------------------------------------------------------------------------
// The command line, run as a child process

struct CliResult {
  int exit_code = -1;  // -1: killed by a signal
  int signal = 0;
  std::string output;  // stdout and stderr
};

CliResult RunCli(const std::string& args, const std::string& stdin_path = "/dev/null") {
  // `timeout` turns a hang into exit code 124 instead of a stuck test.
  const std::string cmd = fmt::format("timeout -s KILL 60 '{}' {} < {} 2>&1", CG_CLI_PATH, args, stdin_path);
  CliResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
    if (r.exit_code > 128) r.signal = r.exit_code - 128;  // the shell reports a child's signal as 128+N
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  return r;
}

// Fails with a clear message: a non-zero exit code (never a signal, a sanitizer
// report or a timeout) and the output names `says`. Codes: 1-3 from cliffguard,
// 100-127 from CLI11 argument errors.
void ExpectCleanFailure(const std::string& args, const std::string& says) {
  SCOPED_TRACE("cliffguard " + args);
  const CliResult r = RunCli(args);
  EXPECT_EQ(r.signal, 0) << r.output;
  EXPECT_GE(r.exit_code, 1) << r.output;
  EXPECT_LT(r.exit_code, 124) << r.output;
  EXPECT_NE(r.output.find(says), std::string::npos) << "output should mention '" << says << "':\n" << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Sanitizer"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("runtime error"), std::string::npos) << r.output;
}

class CliBadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteText(d_ / "empty", "");
    WriteText(d_ / "garbage", "{ not json, not a flatbuffer");
    fs::create_directories(d_ / "dir");
    MakeSparse(d_ / "huge", kMaxBundleBytes + 1);
    WriteText(d_ / "file", "x");
    auto rt = NewRuntime();
    ASSERT_TRUE(WriteBundleFile(d_ / "good.cgb", HostBundle(rt->device())).ok());
    WriteText(d_ / "good.json", BundleToJson(HostBundle(rt->device())));
  }
  TempDir d_;
};

TEST_F(CliBadInputTest, EveryFileReadingCommandRefusesBadPaths) {
  struct Path {
    std::string path, says;
  };
  const std::vector<Path> paths = {
      {d_ / "missing", "No such file"}, {d_ / "empty", "empty"}, {d_ / "dir", "directory"},
      {d_ / "huge", "over the limit"}, {d_ / "file" + "/child", "Not a directory"},
      {"/dev/zero", "not a regular file"}, {d_ / "garbage", "garbage"},
  };
  for (const Path& p : paths) {
    ExpectCleanFailure(fmt::format("inspect '{}'", p.path), p.says);
    ExpectCleanFailure(fmt::format("pack '{}' -o '{}'", p.path, d_ / "out.cgb"), p.says);
    ExpectCleanFailure(fmt::format("run --bundle '{}' --shape 4,4,4 --iters 1", p.path), p.says);
    ExpectCleanFailure(fmt::format("misses '{}'", p.path), p.says);
  }
  EXPECT_FALSE(fs::exists(d_ / "out.cgb"));
}

TEST_F(CliBadInputTest, MalformedArgumentsAreRefused) {
  const std::string ok = fmt::format("run --bundle '{}' --iters 1", d_ / "good.cgb");
  ExpectCleanFailure(ok + " --shape 1,2", "M,N,K");
  ExpectCleanFailure(ok + " --shape a,b,c", "not an integer");
  ExpectCleanFailure(ok + " --shape 0,4,4", "m=0");
  ExpectCleanFailure(ok + " --shape -1,4,4", "m=-1");
  ExpectCleanFailure(ok + " --shape 99999999999999999999,4,4", "not an integer");
  ExpectCleanFailure(ok + " --shape 3000000000,4,4", "3000000000");
  ExpectCleanFailure(ok + " --shape 4,4,4,xx", "layout");
  ExpectCleanFailure(ok + " --shape ''", "shape");
  ExpectCleanFailure(fmt::format("run --shape 4,4,4 --iters -1"), "iters");
  ExpectCleanFailure(fmt::format("run --shape 4,4,4 --iters 0"), "iters");
  ExpectCleanFailure(fmt::format("run --shape 4,4,4 --iters many"), "iters");
  ExpectCleanFailure(fmt::format("run --shape 4,4,4 --op conv9"), "op");
  ExpectCleanFailure(fmt::format("run --shape 4,4,4 --threads -2"), "threads");
  ExpectCleanFailure("run", "shape");
  ExpectCleanFailure("no-such-command", "unknown command 'no-such-command'; the commands are: device, inspect");
  ExpectCleanFailure("", "a command is required: device, inspect");
  ExpectCleanFailure(fmt::format("pack '{}'", d_ / "good.json"), "out");
  ExpectCleanFailure("misses", "REPORT");
}

TEST_F(CliBadInputTest, WritesToDevFullAreRefusedAndNeverReplaceIt) {
  ASSERT_TRUE(IsCharDevice("/dev/full"));
  ExpectCleanFailure(fmt::format("pack '{}' -o /dev/full", d_ / "good.json"), "/dev/full");
  ExpectCleanFailure("run --shape 4,4,4 --iters 1 --miss-report /dev/full", "/dev/full");
  EXPECT_TRUE(IsCharDevice("/dev/full")) << "/dev/full was replaced by a regular file";
  std::vector<std::string> leftovers;
  for (const auto& e : fs::directory_iterator("/dev"))
    if (e.path().filename().string().rfind("full.tmp", 0) == 0) leftovers.push_back(e.path());
  EXPECT_TRUE(leftovers.empty()) << leftovers[0];
}

TEST_F(CliBadInputTest, AFailedPackLeavesTheExistingBundleUnchanged) {
  const std::string before = ReadText(d_ / "good.cgb");
  WriteText(d_ / "bad.json", R"({"device": {"backend": "tpu", "arch": "x", "fingerprint": "y"}})");
  ExpectCleanFailure(fmt::format("pack '{}' -o '{}'", d_ / "bad.json", d_ / "good.cgb"), "tpu");
  ExpectCleanFailure(fmt::format("pack '{}' -o '{}'", d_ / "garbage", d_ / "good.cgb"), "not valid JSON");
  EXPECT_EQ(ReadText(d_ / "good.cgb"), before);
  const CliResult r = RunCli(fmt::format("inspect --validate '{}'", d_ / "good.cgb"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(CliBadInputTest, PackOntoAFullDiskKeepsTheOldBundle) {
  TinyTmpfs t;
  if (!t.mounted()) GTEST_SKIP() << "cannot mount a 64 KiB tmpfs here (" << t.why() << ")";
  auto rt = NewRuntime();
  ASSERT_TRUE(WriteBundleFile(t / "b.cgb", HostBundle(rt->device())).ok());
  const std::string before = ReadText(t / "b.cgb");
  WriteText(d_ / "big.json", BundleToJson(HostBundle(rt->device(), ManyKeys(2000))));
  ExpectCleanFailure(fmt::format("pack '{}' -o '{}'", d_ / "big.json", t / "b.cgb"), "No space left");
  EXPECT_EQ(ReadText(t / "b.cgb"), before);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(fs::path(t / ""))) files += e.is_regular_file();
  EXPECT_EQ(files, 1u) << "a temporary file was left on the full disk";
}

}  // namespace
}  // namespace cliffguard
