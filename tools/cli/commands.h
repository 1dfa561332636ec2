// Subcommands of the `cliffguard` command line. Each Add*Command registers one
// subcommand; its callback throws CLI::RuntimeError(exit_code) on failure after
// printing a clear error on stderr, so every failure exits non-zero.
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
void AddMeasureWorkerCommand(CLI::App& app);  // hidden: the body of spawned measurement workers
#endif

// Prints "cliffguard <command>: <status message>" on stderr and throws
// CLI::RuntimeError(2) when !status.ok().
void ExitIfError(const Status& status, const std::string& command);
[[noreturn]] void Fail(const std::string& command, const std::string& message, int exit_code = 2);

}  // namespace cliffguard::cli
