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
    case kExited: return code == 0 ? "" : fmt::format("crashed: worker exited with status {}", code);
  }
  return "?";
}

StatusOr<SandboxOutcome> RunSandboxed(const SandboxTask& task, double first_deadline_s, const SandboxLineFn& on_line) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return IoError(fmt::format("sandbox: pipe failed: {}", std::strerror(errno)));
  std::fflush(nullptr);
  const pid_t self = ::getpid();
  pid_t pid = -1;
  int in_fd = -1;
  if (task.argv.empty()) {
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
  } else {
    int in[2];
    if (::pipe2(in, O_CLOEXEC) != 0) {
      const int err = errno;
      ::close(out[0]);
      ::close(out[1]);
      return IoError(fmt::format("sandbox: pipe failed: {}", std::strerror(err)));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    std::vector<char*> argv;
    for (const std::string& a : task.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const int rc = ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    if (rc != 0) {
      ::close(in[1]);
      ::close(out[0]);
      ::close(out[1]);
      return IoError(fmt::format("sandbox: cannot start '{}': {}", task.argv[0], std::strerror(rc)));
    }
    in_fd = in[1];
  }
  ::close(out[1]);
  const int fd = out[0];
  // The job goes in while the child starts; a child that dies early closes the pipe
  // (EPIPE, ignored here: its exit status says what happened).
  if (in_fd >= 0) {
    struct sigaction ignore {}, old {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old);
    WriteAll(in_fd, task.stdin_data);
    ::sigaction(SIGPIPE, &old, nullptr);
    ::close(in_fd);
  }

  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(first_deadline_s));
  std::string buf;
  SandboxOutcome outcome;
  bool timed_out = false;
  for (;;) {
    const double left_ms = std::chrono::duration<double, std::milli>(deadline - Clock::now()).count();
    if (left_ms <= 0) {
      timed_out = true;
      break;
    }
    struct pollfd p = {fd, POLLIN, 0};
    const int pr = ::poll(&p, 1, static_cast<int>(std::min(left_ms + 1, 1e9)));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) continue;  // re-checks the deadline
    char tmp[4096];
    const ssize_t n = ::read(fd, tmp, sizeof(tmp));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(tmp, static_cast<size_t>(n));
    for (size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
      const std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      const double next = on_line(line);
      if (next > 0)
        deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(next));
    }
  }
  if (timed_out) ::kill(pid, SIGKILL);
  ::close(fd);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
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

}  // namespace cliffguard::tuner
