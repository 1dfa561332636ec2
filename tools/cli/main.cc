#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cliffguard/bundle.h"
#include "cliffguard/log.h"
#include "commands.h"

namespace cliffguard::cli {

void Fail(const std::string& command, const std::string& message, int exit_code) {
  fmt::print(stderr, "cliffguard {}: {}\n", command, message);
  throw CLI::RuntimeError(exit_code);
}

void ExitIfError(const Status& status, const std::string& command, int exit_code) {
  if (!status.ok()) Fail(command, status.ToString(), exit_code);
}

namespace {

// CLI11's own errors (unknown option, missing or unconvertible value, a failed check)
// in the form of every other failure: prefixed, with a pointer to the options, code 2.
int ReportParseError(CLI::App& app, const CLI::ParseError& e, const std::string& commands) {
  // The command as typed, nested ones included ("misses merge"), and the arguments
  // CLI11 set aside on the way before it stopped at another error.
  std::string command;
  std::vector<std::string> extras = app.remaining();
  for (const CLI::App* at = &app; !at->get_subcommands().empty();) {
    at = at->get_subcommands().back();
    command += (command.empty() ? "" : " ") + at->get_name();
    for (std::string& x : at->remaining()) extras.push_back(std::move(x));
  }
  std::string message = e.what();
  // At the top level the only requirement is a command.
  if (command.empty() && dynamic_cast<const CLI::RequiredError*>(&e))
    message = "a command is required: " + commands;
  if (!extras.empty() && !dynamic_cast<const CLI::ExtrasError*>(&e)) {
    message += "; not expected:";
    for (const auto& x : extras) message += " " + x;
  }
  const std::string who = command.empty() ? "cliffguard" : "cliffguard " + command;
  fmt::print(stderr, "{}: {}\nRun '{} --help' for the options.\n", who, message, who);
  return kExitUsage;
}

}  // namespace
}  // namespace cliffguard::cli

int main(int argc, char** argv) {
  using namespace cliffguard::cli;
  // The libraries read their environment (idle-thread policy, OpenBLAS's core) when
  // they load (device.h); the pid stays the same. Should exec fail, the command runs
  // on without it.
  if (cliffguard::SetLibraryEnvironment()) ::execv("/proc/self/exe", argv);
  // Diagnostics go to stderr, results to stdout. SPDLOG_LEVEL=info shows load details.
  spdlog::set_default_logger(spdlog::stderr_color_mt("cliffguard"));
  spdlog::set_level(spdlog::level::warn);
  spdlog::cfg::load_env_levels();
  // The library's own logger (cliffguard/log.h) follows CLIFFGUARD_LOG_LEVEL, else a
  // plain SPDLOG_LEVEL such as "info".
  if (!std::getenv("CLIFFGUARD_LOG_LEVEL"))
    if (const char* env = std::getenv("SPDLOG_LEVEL"))
      if (auto level = cliffguard::ParseLogLevel(env); level.ok()) cliffguard::SetLogLevel(*level);
  CLI::App app{fmt::format("cliffguard {}: tuned kernel dispatch with visible performance cliffs",
                           cliffguard::CliffguardVersion())};
  app.require_subcommand(1);
  app.set_version_flag("--version", cliffguard::CliffguardVersion());
  // Set before the subcommands are added: each inherits it.
  app.footer("Exit codes: 0 ok, 1 failure, 2 usage error (an argument or option breaks its rule), 3 internal error.");
  AddDeviceCommand(app);
  AddInspectCommand(app);
  AddPackCommand(app);
  AddRunCommand(app);
  AddMissesCommand(app);
#ifdef CLIFFGUARD_WITH_TUNER
  AddTuneCommand(app);
  AddMergeCommand(app);
  AddCompareCommand(app);
  AddMeasureWorkerCommand(app);
#endif
  // CLI11 reports an unknown command as a missing one: name it and list the commands.
  std::string commands;
  bool known = false;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (!sub->get_group().empty()) commands += (commands.empty() ? "" : ", ") + sub->get_name();
    known = known || (argc > 1 && sub->check_name(argv[1]));
  }
  if (argc == 1 || (argv[1][0] != '-' && !known)) {
    if (argc == 1) fmt::print(stderr, "cliffguard: a command is required: {}\n", commands);
    else fmt::print(stderr, "cliffguard: unknown command '{}'; the commands are: {}\n", argv[1], commands);
    fmt::print(stderr, "Run with --help for more information.\n");
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // Fail printed the message
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --help-all, --version
  } catch (const CLI::ParseError& e) {
    return ReportParseError(app, e, commands);
  } catch (const std::exception& e) {
    fmt::print(stderr, "cliffguard: internal error: {}\n", e.what());
    return kExitInternal;
  }
  return 0;
}
