// Subcommands of the `cliffguard` command line. Each Add*Command registers one
// subcommand; its callback throws CLI::RuntimeError(exit_code) on failure after
// printing "cliffguard <command>: <message>" on stderr, so every failure exits
// non-zero. Exit codes: 0 ok, 1 failure (a file, a bundle or a run went wrong),
// 2 usage error (an argument or option value breaks its rule), 3 internal error.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "cliffguard/status.h"

namespace cliffguard::cli {

void AddDeviceCommand(CLI::App& app);
void AddInspectCommand(CLI::App& app);
void AddPackCommand(CLI::App& app);
void AddRunCommand(CLI::App& app);
void AddMissesCommand(CLI::App& app);
#ifdef CLIFFGUARD_WITH_TUNER
void AddTuneCommand(CLI::App& app);
void AddMergeCommand(CLI::App& app);
void AddCompareCommand(CLI::App& app);
void AddMeasureWorkerCommand(CLI::App& app);  // hidden: the body of spawned measurement workers
#endif

inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInternal = 3;

// Prints "cliffguard <command>: <status message>" on stderr and throws
// CLI::RuntimeError(exit_code) when !status.ok(). The default is the usage code:
// pass kExitFailure when the status is not about an argument.
void ExitIfError(const Status& status, const std::string& command, int exit_code = kExitUsage);
[[noreturn]] void Fail(const std::string& command, const std::string& message, int exit_code = kExitUsage);

}  // namespace cliffguard::cli
