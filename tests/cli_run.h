// Runs command lines in tests: the cliffguard CLI (CG_CLI_PATH) or a script, as a
// child process through /bin/sh, with stdout and stderr collected together.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace cliffguard::testing {

struct ShellResult {
  int exit_code = -1;  // 128 + N when killed by signal N
  std::string output;  // stdout and stderr
};

inline ShellResult RunShell(const std::string& command) {
  ShellResult r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

#ifdef CG_CLI_PATH
// `cliffguard ARGS`, reading nothing from stdin.
inline ShellResult RunCli(const std::string& args) {
  return RunShell(fmt::format("'{}' {} < /dev/null", CG_CLI_PATH, args));
}
#endif

}  // namespace cliffguard::testing
