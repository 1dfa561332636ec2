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
#include <memory>
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

// A spawned child kept across jobs, so that what it sets up once (a CUDA context,
// cuBLAS, a key's inputs) serves many: each job is one line on its stdin, and the
// child writes the line "E" when the job is done and then waits for the next (it
// exits at end of input). Its death, an exit or a missed deadline ends it: the
// outcome says how, and alive() is false from then on.
class SpawnedWorker {
 public:
  // Fails only when the operating system refuses a pipe or the spawn.
  static StatusOr<std::unique_ptr<SpawnedWorker>> Start(const std::vector<std::string>& argv);
  SpawnedWorker(const SpawnedWorker&) = delete;
  SpawnedWorker& operator=(const SpawnedWorker&) = delete;
  ~SpawnedWorker();  // kills the child if it is still running, and reaps it

  bool alive() const { return pid_ >= 0; }
  // Sends `job` (one line, no '\n') and streams the child's lines to on_line until
  // "E" (then kExited with code 0, and the child stays) or its end: the outcome of
  // RunSandboxed, except that an exit with status 0 before "E" reads as status -1.
  // A dead worker answers kExited with code -1 at once.
  SandboxOutcome RunJob(const std::string& job, double first_deadline_s, const SandboxLineFn& on_line);

 private:
  SpawnedWorker() = default;
  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1;
  std::string buf_;  // a partial line read past "E" (none in practice)
};

}  // namespace cliffguard::tuner
