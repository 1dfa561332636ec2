// The edges of `cliffguard` as a user meets them (CG_CLI_PATH): every usage error
// exits 2 with the command's prefix and names the value; pack refuses what
// `inspect --validate` rejects; inspect --validate confirms a good bundle and refuses
// another device's; help shows defaults and exit codes; the library logs its name once.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cli_run.h"

#include "cliffguard/bundle.h"
#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "cliffguard/log.h"

namespace cliffguard {
namespace {

namespace fs = std::filesystem;

using CliResult = testing::ShellResult;
using testing::RunCli;

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class CliEdgesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("cg_cli_edges_{}", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A bundle for this host with one entry: the default schedule of the first variant
  // with a parameter mc that runs the key here.
  static BundleSpec HostSpec() {
    BundleSpec spec;
    spec.created_at = 1764460800;
    spec.device = HostCpuDevice();
    const OpKey key = OpKey::Gemm(64, 64, 64);
    BundleEntry e;
    e.key = key;
    for (const KernelVariant& v : AllKernelVariants()) {
      if (v.ParamIndex("mc") < 0) continue;
      const Schedule s = VariantDefaultSchedule(v, key, spec.device);
      if (!CheckSchedule(s, key, spec.device).ok()) continue;
      e.schedule = ToNamed(s);
      break;
    }
    EXPECT_FALSE(e.schedule.variant.empty()) << "no variant with a parameter mc runs " << key.ToString();
    e.tuned_us = 10;
    e.default_us = 20;
    e.trials = 3;
    spec.entries.push_back(e);
    return spec;
  }

  std::string WriteJson(const std::string& name, const BundleSpec& spec) const {
    const std::string path = Path(name);
    std::ofstream(path) << BundleToJson(spec);
    return path;
  }

  fs::path dir_;
};

// CLI11's own errors read like every other failure: prefix, the value, code 2.
TEST_F(CliEdgesTest, ParseErrorsExitTwoWithTheCommandsPrefix) {
  struct Case {
    std::string args, command;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"run --shape 4,4,4 --bogus-option 3", "run", {"--bogus-option"}},
      {"run --iters 5", "run", {"--shape", "required"}},
      {"run --shape 4,4,4 --iters 0", "run", {"--iters", "0", "1"}},
      {"run --shape 4,4,4 --iters many", "run", {"--iters", "many"}},
      {"run --shape 4,4,4 --threads 5000", "run", {"--threads", "5000"}},
      {"run --shape 4,4,4 --op conv9", "run", {"--op", "conv9"}},
      {"pack spec.json", "pack", {"--out", "required"}},
      {"inspect", "inspect", {"BUNDLE", "required"}},
      {"tune --shape 4,4,4 --log x.jsonl --max-cpu-wait 1.5", "tune", {"--max-cpu-wait", "1.5"}},
      {"tune --shape 4,4,4 --log x.jsonl --max-cpu-wait -0.1", "tune", {"--max-cpu-wait", "-0.1"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("cliffguard " + c.args);
    const CliResult r = RunCli(c.args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(r.output.rfind("cliffguard " + c.command + ": ", 0), 0u) << r.output;
    for (const auto& s : c.says) EXPECT_TRUE(Has(r.output, s)) << "should name '" << s << "':\n" << r.output;
    EXPECT_TRUE(Has(r.output, fmt::format("Run 'cliffguard {} --help' for the options.", c.command))) << r.output;
  }
  const CliResult r = RunCli("--bogus-option");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("cliffguard: ", 0), 0u) << r.output;
  EXPECT_TRUE(Has(r.output, "--bogus-option")) << r.output;
}

TEST_F(CliEdgesTest, FailuresThatAreNotUsageExitOne) {
  const CliResult r = RunCli(fmt::format("inspect '{}'", Path("missing.cgb")));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("cliffguard inspect: ", 0), 0u) << r.output;
  EXPECT_TRUE(Has(r.output, "missing.cgb")) << r.output;
}

TEST_F(CliEdgesTest, HelpShowsDefaultsAndExitCodes) {
  CliResult r = RunCli("run --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r.output, "=50")) << "run --help should show --iters' default 50:\n" << r.output;
  EXPECT_TRUE(Has(r.output, "Exit codes: 0 ok, 1 failure, 2 usage error")) << r.output;
  r = RunCli("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r.output, "Exit codes:")) << r.output;
  r = RunCli("pack --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r.output, "--no-validate")) << r.output;
  r = RunCli("--version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, std::string(CliffguardVersion()) + "\n");
}

TEST_F(CliEdgesTest, InspectValidateConfirmsAGoodBundle) {
  const std::string json = WriteJson("good.json", HostSpec()), out = Path("good.cgb");
  CliResult r = RunCli(fmt::format("pack '{}' -o '{}'", json, out));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunCli(fmt::format("inspect --validate '{}'", out));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r.output, fmt::format("valid: 1 entries, 0 defaults; device {} matches this host",
                                        HostCpuDevice().fingerprint)))
      << r.output;
}

TEST_F(CliEdgesTest, PackRefusesWhatInspectValidateRejects) {
  BundleSpec spec = HostSpec();
  bool has_mc = false;
  for (auto& [name, value] : spec.entries[0].schedule.params)
    if (name == "mc") {
      value = 63;
      has_mc = true;
    }
  ASSERT_TRUE(has_mc) << spec.entries[0].schedule.variant << " has no parameter mc";
  const std::string json = WriteJson("bad.json", spec), out = Path("bad.cgb");

  CliResult r = RunCli(fmt::format("pack '{}' -o '{}'", json, out));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("cliffguard pack: ", 0), 0u) << r.output;
  EXPECT_TRUE(Has(r.output, "mc=63")) << r.output;
  EXPECT_TRUE(Has(r.output, "bad_parameter")) << r.output;
  EXPECT_TRUE(Has(r.output, "--no-validate")) << r.output;
  EXPECT_FALSE(fs::exists(out)) << "a refused pack wrote " << out;

  r = RunCli(fmt::format("pack --no-validate '{}' -o '{}'", json, out));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(out));

  r = RunCli(fmt::format("inspect --validate '{}'", out));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.find("valid: "), std::string::npos) << r.output;
  EXPECT_TRUE(Has(r.output, "cliffguard inspect: ")) << r.output;
  EXPECT_TRUE(Has(r.output, "mc=63")) << r.output;
  EXPECT_TRUE(Has(r.output, "1 of 1 entries rejected")) << r.output;
}

TEST_F(CliEdgesTest, InspectValidateRefusesAnotherDevicesBundle) {
  BundleSpec spec = HostSpec();
  spec.device.name += " (another)";
  spec.device.l2_bytes += 1024;
  FinalizeDeviceInfo(spec.device);
  const std::string json = WriteJson("other.json", spec), out = Path("other.cgb");
  CliResult r = RunCli(fmt::format("pack '{}' -o '{}'", json, out));
  ASSERT_EQ(r.exit_code, 0) << "a bundle for another device packs: " << r.output;
  EXPECT_TRUE(Has(r.output, "is not this host")) << r.output;

  r = RunCli(fmt::format("inspect --validate '{}'", out));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Has(r.output, "cliffguard inspect: ")) << r.output;
  EXPECT_TRUE(Has(r.output, "its device is not this host")) << r.output;
  EXPECT_TRUE(Has(r.output, spec.device.fingerprint)) << r.output;
  EXPECT_TRUE(Has(r.output, fmt::format("l2_bytes {} (here {})", spec.device.l2_bytes, spec.device.l2_bytes - 1024)))
      << r.output;
  EXPECT_TRUE(Has(r.output, "(another)")) << r.output;
}

TEST(CliffguardLog, NamesCliffguardOnce) {
  const LogLevel before = GetLogLevel();
  SetLogLevel(LogLevel::kWarn);
  std::string seen;
  SetLogSink([&](LogLevel, std::string_view m) { seen = m; });
  LogMessage(LogLevel::kWarn, "cliffguard: thread budget 9 exceeds 2 CPUs");
  EXPECT_EQ(seen, "thread budget 9 exceeds 2 CPUs");
  SetLogSink(nullptr);
  ::testing::internal::CaptureStderr();
  LogMessage(LogLevel::kWarn, "cliffguard: thread budget 9 exceeds 2 CPUs");
  LogMessage(LogLevel::kWarn, "bundle 'x.cgb' is for another device");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err,
            "[cliffguard] [warning] thread budget 9 exceeds 2 CPUs\n"
            "[cliffguard] [warning] bundle 'x.cgb' is for another device\n");
  SetLogLevel(before);
}

}  // namespace
}  // namespace cliffguard
