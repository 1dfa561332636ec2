// Internal: a generic process sandbox. Runs one task in a child process and streams
// the lines it writes back to the parent, under deadlines; a crash (any signal), an
// exit status or a missed deadline is an outcome, never a crash of the parent.
//
// Two ways to start the child:
//   fork:  the child runs `body` in a copy of this process (cheap: it inherits the
//          parent's memory, e.g. cached inputs). Unsafe once a GPU context exists in
//          the parent (CUDA does not survive fork).
//   spawn: the child is a new program (posix_spawn of `argv`) that reads
//          `stdin_data` and writes its lines to stdout. Safe with any GPU context.
// In both the child dies with the parent (PR_SET_PDEATHSIG) and writes no core file.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "cliffguard/status.h"

namespace cliffguard::tuner {

struct SandboxTask {
  std::function<void(int out_fd)> body;  // fork: runs in the child, then the child exits 0
  std::vector<std::string> argv;         // spawn: argv[0] is the program path
  std::string stdin_data;                // spawn: written to the child's stdin, then closed
};

struct SandboxOutcome {
  enum Kind { kExited, kSignaled, kTimedOut } kind = kExited;
  int code = 0;  // exit status (kExited) or signal number (kSignaled)
  // "crashed: worker killed by signal 11 (SIGSEGV)", "timeout: ..."; "" for exit 0.
  std::string Describe(double timeout_s) const;
};

// Called for each complete line (without '\n'); returns the seconds the child has
// from now until the next line, or a value <= 0 to keep the current deadline.
using SandboxLineFn = std::function<double(const std::string& line)>;

// Writes all of `s` to fd, retrying short writes and EINTR; false on an error
// (e.g. EPIPE when the reader is gone).
bool WriteAll(int fd, const std::string& s);

// Runs the task; `first_deadline_s` is the time until the first line. Fails only
// when the operating system refuses a pipe, fork or spawn.
StatusOr<SandboxOutcome> RunSandboxed(const SandboxTask& task, double first_deadline_s, const SandboxLineFn& on_line);

}  // namespace cliffguard::tuner
