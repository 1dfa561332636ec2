#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

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

void ExitIfError(const Status& status, const std::string& command) {
  if (!status.ok()) Fail(command, status.ToString());
}

}  // namespace cliffguard::cli

int main(int argc, char** argv) {
  using namespace cliffguard::cli;
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
  AddDeviceCommand(app);
  AddInspectCommand(app);
  AddPackCommand(app);
  AddRunCommand(app);
  AddMissesCommand(app);
#ifdef CLIFFGUARD_WITH_TUNER
  AddTuneCommand(app);
  AddMergeCommand(app);
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
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    fmt::print(stderr, "cliffguard: internal error: {}\n", e.what());
    return 3;
  }
  return 0;
}
