// Serving-path defects a client hit: each test failed before its fix.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cliffguard/log.h"
#include "cliffguard/miss_report.h"
#include "cliffguard/runtime.h"
#include "test_bundles.h"

namespace cliffguard {
namespace {

using testing::HostBundle;
using testing::TempFile;

std::unique_ptr<Runtime> NewRuntime(RuntimeOptions o = {}) {
  o.warn_on_miss = false;
  auto rt = Runtime::Create(o);
  EXPECT_TRUE(rt.ok()) << rt.status().ToString();
  return std::move(*std::move(rt));  // StatusOr's rvalue operator*
}

struct Operands {
  std::vector<float> a, b, c;
  GemmArgs args;
  explicit Operands(const OpKey& k)
      : a(size_t(k.m() * k.k()), 0.5f), b(size_t(k.k() * k.n()), 0.25f), c(size_t(k.m() * k.n()), 0.f) {
    args = DenseGemmArgs(k, a.data(), b.data(), c.data());
  }
};

// Captures the library's log messages for the life of the object.
struct LogCapture {
  std::mutex mu;
  std::vector<std::pair<LogLevel, std::string>> lines;
  LogLevel saved = GetLogLevel();
  explicit LogCapture(LogLevel level = LogLevel::kWarn) {
    SetLogLevel(level);
    SetLogSink([this](LogLevel l, std::string_view m) {
      std::lock_guard<std::mutex> lock(mu);
      lines.emplace_back(l, std::string(m));
    });
  }
  ~LogCapture() {
    SetLogSink(nullptr);
    SetLogLevel(saved);
  }
  size_t Count(LogLevel l, const std::string& needle) {
    std::lock_guard<std::mutex> lock(mu);
    size_t n = 0;
    for (const auto& [lv, m] : lines) n += lv == l && m.find(needle) != std::string::npos;
    return n;
  }
};

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- a Runtime in a global or static variable writes its report at exit ----

void ExpectReportWrittenAtExit(const std::string& mode) {
  TempFile report("exit_" + mode + ".json");
  // MALLOC_PERTURB_ (with the tcache off, which it skips) overwrites freed memory, so
  // a use after free at exit crashes instead of reading stale bytes.
  const std::string cmd = fmt::format(
      "GLIBC_TUNABLES=glibc.malloc.tcache_count=0 MALLOC_PERTURB_=165 CLIFFGUARD_MISS_REPORT='{}' '{}' {} 2>&1",
      report.path, CG_EXIT_HELPER_PATH, mode);
  const int st = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(st)) << mode << ": killed by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  EXPECT_EQ(WEXITSTATUS(st), 0) << mode;
  auto rep = MissReportFromJson(ReadText(report.path));
  ASSERT_TRUE(rep.ok()) << mode << ": " << rep.status().ToString();
  EXPECT_EQ(rep->misses, 1u);
  ASSERT_EQ(rep->records.size(), 1u);
  EXPECT_EQ(rep->records[0].key, OpKey::Gemm(3, 5, 7));
  EXPECT_NE(rep->records[0].fallback, "<none>");
}

TEST(ServingExitTest, RuntimeInAGlobalWritesItsReportAndExitsZero) { ExpectReportWrittenAtExit("global"); }
TEST(ServingExitTest, RuntimeInAFunctionLocalStaticWritesItsReportAndExitsZero) { ExpectReportWrittenAtExit("static"); }

// ---- a report taken while threads serve is consistent ----

TEST(ServingReportTest, EveryLiveSnapshotPassesTheReportsOwnInvariants) {
  auto rt = NewRuntime();
  const DeviceInfo& dev = rt->device();
  ASSERT_TRUE(rt->LoadBundleBuffer(SerializeBundle(HostBundle(dev, {OpKey::Gemm(4, 4, 4)})), "b").ok());
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      Operands miss(OpKey::Gemm(2 + t, 3, 4)), hit(OpKey::Gemm(4, 4, 4));
      while (!stop.load(std::memory_order_relaxed)) {
        EXPECT_TRUE(rt->Gemm(miss.args).ok());
        EXPECT_TRUE(rt->Gemm(hit.args).ok());
      }
    });
  int checked = 0;
  for (; checked < 200; ++checked) {
    const MissReport r = rt->GetMissReport();
    auto parsed = MissReportFromJson(MissReportToJson(r));
    ASSERT_TRUE(parsed.ok()) << "snapshot " << checked << ": " << parsed.status().ToString();
    uint64_t sum = 0;
    for (const auto& rec : r.records) sum += rec.count;
    ASSERT_EQ(sum, r.misses);
    ASSERT_EQ(r.hits + r.misses, r.calls);
  }
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(checked, 200);
}

// ---- calls that fail are not misses ----

TEST(ServingMissTest, CallsThatReturnAnErrorAreNeitherCountedNorReported) {
  LogCapture log;
  auto rt = NewRuntime();
  Operands ops(OpKey::Gemm(8, 8, 8));
  GemmArgs f16 = ops.args;
  f16.dtype = DType::kF16;
  GemmArgs bf16 = ops.args;
  bf16.dtype = DType::kBF16;
  GemmArgs bogus = ops.args;
  bogus.dtype = static_cast<DType>(7);
  for (int i = 0; i < 3; ++i) {
    const Status a = rt->Gemm(f16), b = rt->Gemm(bf16), c = rt->Gemm(bogus);
    EXPECT_EQ(a.code(), StatusCode::kUnimplemented) << a.ToString();
    EXPECT_EQ(b.code(), StatusCode::kUnimplemented) << b.ToString();
    EXPECT_EQ(c.code(), StatusCode::kInvalidArgument) << c.ToString();
    EXPECT_NE(c.message().find("dtype 7"), std::string::npos) << c.message();
  }
  auto plan = rt->PlanGemm(OpKey::Gemm(8, 8, 8, false, false, DType::kF16));
  EXPECT_EQ(plan.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(rt->Stats().empty());
  const MissReport r = rt->GetMissReport();
  EXPECT_EQ(r.calls, 0u);
  EXPECT_TRUE(r.records.empty());
  ASSERT_TRUE(rt->Gemm(ops.args).ok());  // a real miss is still counted, and the report reads back
  auto parsed = MissReportFromJson(MissReportToJson(rt->GetMissReport()));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->misses, 1u);
  EXPECT_EQ(log.Count(LogLevel::kWarn, "<none>"), 0u);
}

// ---- a bundle default serves only the shape class it was chosen for ----

TEST(ServingDefaultTest, ALegacyBundleDefaultServesOnlyTheClassesOfItsBundlesEntries) {
  auto rt = NewRuntime();
  const DeviceInfo& dev = rt->device();
  const OpKey tuned = OpKey::Gemm(128, 768, 768);
  ASSERT_EQ(ShapeClassOf(tuned), ShapeClass::kLarge);
  BundleSpec spec = HostBundle(dev, {tuned});
  BundleOpDefault d;  // no shape class: written before classes existed
  d.schedule = spec.entries[0].schedule;
  spec.defaults.push_back(d);
  ASSERT_TRUE(rt->LoadBundleBuffer(SerializeBundle(spec), "legacy").ok());

  auto small = rt->Resolve(OpKey::Gemm(8, 64, 64));
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->fallback, "built-in default");
  auto skinny = rt->Resolve(OpKey::Gemm(1, 3072, 768));
  ASSERT_TRUE(skinny.ok());
  EXPECT_EQ(skinny->fallback, "built-in default");
  auto large = rt->Resolve(OpKey::Gemm(384, 1024, 768));
  ASSERT_TRUE(large.ok());
  EXPECT_EQ(large->fallback, "bundle default");
}

TEST(ServingDefaultTest, ClassedBundleDefaultsServeTheirOwnClassOnly) {
  auto rt = NewRuntime();
  const DeviceInfo& dev = rt->device();
  BundleSpec spec = HostBundle(dev, {OpKey::Gemm(128, 768, 768)});
  BundleOpDefault skinny;
  skinny.shape_class = ShapeClass::kSkinny;
  skinny.schedule = ToNamed(*DefaultSchedule(OpKey::Gemm(64, 768, 768), dev));  // a packed schedule: any m
  spec.defaults.push_back(skinny);
  auto back = ParseBundle(SerializeBundle(spec));
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->defaults.size(), 1u);
  EXPECT_EQ(back->defaults[0].shape_class, ShapeClass::kSkinny);
  auto json = BundleFromJson(BundleToJson(*back));
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ(json->defaults[0].shape_class, ShapeClass::kSkinny);
  ASSERT_TRUE(rt->LoadBundleBuffer(SerializeBundle(spec), "classed").ok());
  EXPECT_EQ(rt->Resolve(OpKey::Gemm(4, 3072, 768))->fallback, "bundle default");
  EXPECT_EQ(rt->Resolve(OpKey::Gemm(8, 64, 64))->fallback, "bundle default");  // m = 8: skinny
  EXPECT_EQ(rt->Resolve(OpKey::Gemm(64, 64, 64))->fallback, "built-in default");
  EXPECT_EQ(rt->Resolve(OpKey::Gemm(512, 1024, 1024))->fallback, "built-in default");
}

TEST(ServingDefaultTest, ShapeClassesFollowTheDocumentedRule) {
  EXPECT_EQ(ShapeClassOf(OpKey::Gemm(16, 4096, 4096)), ShapeClass::kSkinny);
  EXPECT_EQ(ShapeClassOf(OpKey::Gemm(4096, 16, 4096)), ShapeClass::kSkinny);
  EXPECT_EQ(ShapeClassOf(OpKey::Gemm(17, 64, 64)), ShapeClass::kSmall);
  EXPECT_EQ(ShapeClassOf(OpKey::Gemm(128, 128, 128)), ShapeClass::kSmall);
  EXPECT_EQ(ShapeClassOf(OpKey::Gemm(128, 128, 129)), ShapeClass::kLarge);
  EXPECT_EQ(ShapeClassOf(OpKey::Conv2d(1, 56, 56, 64, 64, 3, 3, 1, 1, 1, 1)), ShapeClass::kLarge);
  EXPECT_EQ(ShapeClassOf(OpKey::Conv2d(1, 7, 7, 512, 8, 3, 3, 1, 1, 1, 1)), ShapeClass::kSkinny);
}

// ---- logs: the library's own logger, never stdout, once per bundle ----

TEST(ServingLogTest, NothingIsWrittenToStdout) {
  LogLevel saved = GetLogLevel();
  SetLogLevel(LogLevel::kTrace);
  fflush(stdout);
  const int saved_fd = ::dup(STDOUT_FILENO);
  TempFile out("stdout.txt");
  const int fd = ::open(out.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ::dup2(fd, STDOUT_FILENO);
  {
    RuntimeOptions o;
    o.warn_on_miss = true;
    auto rt = Runtime::Create(o);
    ASSERT_TRUE(rt.ok());
    DeviceInfo other = (*rt)->device();
    other.fingerprint = "cpu-avx2-t3-0000000000000000";
    (void)(*rt)->LoadBundleBuffer(SerializeBundle(HostBundle((*rt)->device(), {OpKey::Gemm(4, 4, 4)})), "mine");
    BundleSpec foreign = HostBundle((*rt)->device(), {OpKey::Gemm(4, 4, 4)});
    foreign.device = other;
    (void)(*rt)->LoadBundleBuffer(SerializeBundle(foreign), "foreign");
    Operands ops(OpKey::Gemm(5, 6, 7));
    EXPECT_TRUE((*rt)->Gemm(ops.args).ok());
  }
  fflush(stdout);
  ::dup2(saved_fd, STDOUT_FILENO);
  ::close(saved_fd);
  ::close(fd);
  SetLogLevel(saved);
  EXPECT_EQ(ReadText(out.path), "");
}

TEST(ServingLogTest, AHostSinkGetsEachWarningAndAForeignBundleWarnsOnce) {
  LogCapture log;
  RuntimeOptions o;
  auto rt = Runtime::Create(o);  // warn_on_miss on
  ASSERT_TRUE(rt.ok());
  BundleSpec foreign = HostBundle((*rt)->device(), {OpKey::Gemm(4, 4, 4)});
  foreign.device.fingerprint = "cpu-avx2-t3-0000000000000000";
  const auto bytes = SerializeBundle(foreign);
  for (int i = 0; i < 200; ++i) ASSERT_TRUE((*rt)->LoadBundleBuffer(bytes, "foreign.cgb").ok());
  EXPECT_EQ(log.Count(LogLevel::kWarn, "foreign.cgb"), 1u);
  Operands ops(OpKey::Gemm(5, 6, 7));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE((*rt)->Gemm(ops.args).ok());
  EXPECT_EQ(log.Count(LogLevel::kWarn, "gemm f32 nn m=5 n=6 k=7"), 1u);
}

// ---- a bad bundle file is refused before it is read whole ----

uint64_t BytesReadByThisProcess() {
  std::ifstream io("/proc/self/io");
  std::string name;
  uint64_t v = 0;
  while (io >> name >> v)
    if (name == "rchar:") return v;
  return 0;
}

TEST(ServingLoadTest, AFileWithoutTheBundleIdentifierIsRefusedAfterItsFirstBytes) {
  TempFile big("big.cgb");
  {
    const int fd = ::open(big.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "\x10\0\0\0XXXX", 8), 8);
    ASSERT_EQ(::ftruncate(fd, int64_t{1} << 30), 0);  // sparse: 1 GiB, nothing on disk
    ::close(fd);
  }
  auto rt = NewRuntime();
  const uint64_t before = BytesReadByThisProcess();
  auto r = rt->LoadBundleFile(big.path);
  const uint64_t read = BytesReadByThisProcess() - before;
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("file identifier 'XXXX'"), std::string::npos) << r.status().ToString();
  if (before) EXPECT_LT(read, uint64_t{1} << 20) << "bytes read before refusing";
}

// ---- thread budgets are checked, not silently replaced ----

struct EnvVar {
  std::string name;
  explicit EnvVar(const char* n, const char* v) : name(n) { ::setenv(n, v, 1); }
  ~EnvVar() { ::unsetenv(name.c_str()); }
};

TEST(ServingThreadsTest, ABadThreadBudgetIsRefusedNamingTheValue) {
  for (const char* bad : {"abc", "0", "-2", "5000", "3x", ""}) {
    EnvVar env("CLIFFGUARD_THREADS", bad);
    auto rt = Runtime::Create();
    ASSERT_FALSE(rt.ok()) << "CLIFFGUARD_THREADS='" << bad << "'";
    EXPECT_EQ(rt.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(rt.status().message().find(fmt::format("CLIFFGUARD_THREADS='{}'", bad)), std::string::npos)
        << rt.status().message();
  }
  {
    EnvVar env("CLIFFGUARD_THREADS", "1");
    auto rt = Runtime::Create();
    ASSERT_TRUE(rt.ok());
    EXPECT_EQ((*rt)->device().threads, 1);
  }
  RuntimeOptions o;
  o.threads = 5000;
  EXPECT_EQ(Runtime::Create(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(ServingThreadsTest, ABudgetAboveTheAvailableCpusIsAcceptedWithAWarning) {
  LogCapture log;
  RuntimeOptions o;
  o.threads = AvailableCpus() + 62;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok());
  EXPECT_EQ((*rt)->device().threads, o.threads);
  EXPECT_EQ(log.Count(LogLevel::kWarn, "oversubscribe"), 1u);
}

// ---- a child of fork() counts and reports on its own ----

TEST(ServingForkTest, AForkedChildStartsAtZeroAndWritesItsOwnReport) {
  TempFile parent_report("fork_report.json");
  RuntimeOptions o;
  o.miss_report_path = parent_report.path;
  auto rt = NewRuntime(o);
  Operands ops(OpKey::Gemm(3, 4, 5));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(rt->Gemm(ops.args).ok());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    if (rt->GetMissReport().misses != 0) code = 10;
    if (!rt->Gemm(ops.args).ok()) code = 11;
    const MissReport r = rt->GetMissReport();
    if (r.misses != 1 || r.pid != ::getpid()) code = 12;
    rt.reset();  // writes the child's report beside the parent's
    std::_Exit(code);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  const std::string stem = parent_report.path.substr(0, parent_report.path.size() - 5);
  const std::string child_path = fmt::format("{}.{}.json", stem, child);
  auto child_rep = MissReportFromJson(ReadText(child_path));
  std::remove(child_path.c_str());
  ASSERT_TRUE(child_rep.ok()) << child_path << ": " << child_rep.status().ToString();
  EXPECT_EQ(child_rep->misses, 1u);
  EXPECT_EQ(child_rep->pid, child);
  EXPECT_FALSE(std::filesystem::exists(parent_report.path)) << "the child wrote the parent's report";
  EXPECT_EQ(rt->GetMissReport().misses, 3u);
  EXPECT_EQ(rt->GetMissReport().pid, ::getpid());
}

}  // namespace
}  // namespace cliffguard
