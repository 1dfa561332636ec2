#include "sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

extern char** environ;

namespace cliffguard::tuner {
namespace {

using Clock = std::chrono::steady_clock;

std::string SignalText(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return fmt::format("signal {} (SIG{})", sig, abbrev ? abbrev : "?");
}

void ChildSetup(pid_t parent) {
  // Die with the tuner. The check after prctl closes the race where the parent died
  // between fork and prctl (getppid is then a reaper, not `parent`).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) _exit(4);
  struct rlimit no_core = {0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::signal(SIGPIPE, SIG_DFL);
}

}  // namespace

bool WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string SandboxOutcome::Describe(double timeout_s) const {
  switch (kind) {
    case kTimedOut: return fmt::format("timeout: no result after {:.1f} s (worker killed with SIGKILL)", timeout_s);
    case kSignaled: return fmt::format("crashed: worker killed by {}", SignalText(code));
    case kExited:
      return code == 0    ? ""
             : code == -1 ? "crashed: worker ended before finishing its job"
                          : fmt::format("crashed: worker exited with status {}", code);
  }
  return "?";
}

namespace {

// Starts argv[0] with its stdin and stdout on new pipes: *in_fd writes to its stdin,
// *out_fd reads its stdout (both close-on-exec here).
StatusOr<pid_t> Spawn(const std::vector<std::string>& args, int* in_fd, int* out_fd) {
  int in[2], out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return IoError(fmt::format("sandbox: pipe failed: {}", std::strerror(errno)));
  if (::pipe2(in, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(out[0]);
    ::close(out[1]);
    return IoError(fmt::format("sandbox: pipe failed: {}", std::strerror(err)));
  }
  std::fflush(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    return IoError(fmt::format("sandbox: cannot start '{}': {}", args[0], std::strerror(rc)));
  }
  *in_fd = in[1];
  *out_fd = out[0];
  return pid;
}

// Writes to a child's stdin; a child that died early closes the pipe (EPIPE,
// ignored here: its exit status says what happened).
bool WriteToChild(int fd, const std::string& data) {
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old);
  const bool ok = WriteAll(fd, data);
  ::sigaction(SIGPIPE, &old, nullptr);
  return ok;
}

enum class ReadEnd { kEof, kTimedOut, kStopLine };

// Passes the child's complete lines to on_line until end of file, a missed deadline
// or `stop_line` (not passed on). `buf` keeps a partial line between calls.
ReadEnd ReadLines(int fd, std::string& buf, double first_deadline_s, const SandboxLineFn& on_line,
                  const char* stop_line) {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(first_deadline_s));
  for (;;) {
    for (size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
      const std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (stop_line && line == stop_line) return ReadEnd::kStopLine;
      const double next = on_line(line);
      if (next > 0)
        deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(next));
    }
    const double left_ms = std::chrono::duration<double, std::milli>(deadline - Clock::now()).count();
    if (left_ms <= 0) return ReadEnd::kTimedOut;
    struct pollfd p = {fd, POLLIN, 0};
    const int pr = ::poll(&p, 1, static_cast<int>(std::min(left_ms + 1, 1e9)));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) continue;  // re-checks the deadline
    char tmp[4096];
    const ssize_t n = ::read(fd, tmp, sizeof(tmp));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ReadEnd::kEof;
    buf.append(tmp, static_cast<size_t>(n));
  }
}

// Kills the child when it timed out, then waits for it: how it ended.
SandboxOutcome Reap(pid_t pid, bool timed_out) {
  if (timed_out) ::kill(pid, SIGKILL);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  SandboxOutcome outcome;
  if (timed_out) {
    outcome.kind = SandboxOutcome::kTimedOut;
  } else if (WIFSIGNALED(wstatus)) {
    outcome.kind = SandboxOutcome::kSignaled;
    outcome.code = WTERMSIG(wstatus);
  } else {
    outcome.kind = SandboxOutcome::kExited;
    outcome.code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 0;
  }
  return outcome;
}

}  // namespace

StatusOr<SandboxOutcome> RunSandboxed(const SandboxTask& task, double first_deadline_s, const SandboxLineFn& on_line) {
  pid_t pid = -1;
  int fd = -1;
  if (task.argv.empty()) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return IoError(fmt::format("sandbox: pipe failed: {}", std::strerror(errno)));
    std::fflush(nullptr);
    const pid_t self = ::getpid();
    pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      ::close(out[0]);
      ::close(out[1]);
      return IoError(fmt::format("sandbox: fork failed: {}", std::strerror(err)));
    }
    if (pid == 0) {
      ::close(out[0]);
      ChildSetup(self);
      task.body(out[1]);
      _exit(0);
    }
    ::close(out[1]);
    fd = out[0];
  } else {
    int in_fd = -1;
    CG_ASSIGN_OR_RETURN(pid, Spawn(task.argv, &in_fd, &fd));
    WriteToChild(in_fd, task.stdin_data);  // the job goes in while the child starts
    ::close(in_fd);
  }
  std::string buf;
  const ReadEnd end = ReadLines(fd, buf, first_deadline_s, on_line, nullptr);
  ::close(fd);
  return Reap(pid, end == ReadEnd::kTimedOut);
}

StatusOr<std::unique_ptr<SpawnedWorker>> SpawnedWorker::Start(const std::vector<std::string>& argv) {
  if (argv.empty()) return InvalidArgument("sandbox: a spawned worker needs a program");
  std::unique_ptr<SpawnedWorker> w(new SpawnedWorker());
  CG_ASSIGN_OR_RETURN(w->pid_, Spawn(argv, &w->in_fd_, &w->out_fd_));
  return w;
}

SpawnedWorker::~SpawnedWorker() {
  if (pid_ < 0) return;
  ::close(in_fd_);
  ::close(out_fd_);
  Reap(pid_, /*timed_out=*/true);
}

SandboxOutcome SpawnedWorker::RunJob(const std::string& job, double first_deadline_s, const SandboxLineFn& on_line) {
  SandboxOutcome outcome;
  if (pid_ < 0) {
    outcome.kind = SandboxOutcome::kExited;
    outcome.code = -1;
    return outcome;
  }
  WriteToChild(in_fd_, job + "\n");
  const ReadEnd end = ReadLines(out_fd_, buf_, first_deadline_s, on_line, "E");
  if (end == ReadEnd::kStopLine) return outcome;  // the job is done; the worker waits for the next
  ::close(in_fd_);
  ::close(out_fd_);
  outcome = Reap(pid_, end == ReadEnd::kTimedOut);
  if (outcome.kind == SandboxOutcome::kExited && outcome.code == 0) outcome.code = -1;  // ended mid-job
  pid_ = -1;
  return outcome;
}

}  // namespace cliffguard::tuner
