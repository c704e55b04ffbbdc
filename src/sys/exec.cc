#include "sys/exec.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"

extern char** environ;

namespace weft::sys {

Result<std::string> FindInPath(const std::string& name, const std::vector<std::string>& dirs) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    return Status::Error(Reason::kInvalidArgument, Domain::kExec, "invalid plugin name \"" + name + "\"");
  for (const auto& d : dirs) {
    if (d.empty()) continue;
    std::string p = d + "/" + name;
    struct stat st;
    if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0) return p;
  }
  std::string searched;
  for (const auto& d : dirs) searched += (searched.empty() ? "" : ":") + d;
  return Status::Error(Reason::kNotFound, Domain::kExec,
                       "failed to find plugin \"" + name + "\" in path [" + searched + "]");
}

std::vector<std::string> CurrentEnv() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) out.emplace_back(*e);
  return out;
}

namespace {

// A child that exits without reading all of its stdin (host-local does for
// STATUS) makes the write below fail with EPIPE and raise SIGPIPE, whose
// default action kills this whole process. Block it on this thread while
// the child is fed, and discard the one that may be pending, rather than
// change the process's disposition, which is not a library's to change.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigset_t s;
    ::sigemptyset(&s);
    ::sigaddset(&s, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &s, &old_);
  }
  ~SigpipeBlocked() {
    if (!::sigismember(&old_, SIGPIPE)) {
      sigset_t s;
      ::sigemptyset(&s);
      ::sigaddset(&s, SIGPIPE);
      const timespec zero{0, 0};
      while (::sigtimedwait(&s, nullptr, &zero) > 0) {
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t old_;
};

// Everything the child needs, made ready by the parent: the child runs in
// the parent's memory (CLONE_VM) until it execs, so it must not allocate,
// take a lock or touch errno-dependent library state.
struct ChildArgs {
  const char* path;
  char* const* argv;
  char* const* envp;
  int fds[3];               // become the child's 0, 1, 2
  int netns_fd;             // >= 0: joined before the exec
  pid_t parent;             // getpid() of the caller, taken before the clone
  const sigset_t* mask;     // the caller's signal mask, the program's own
  int err = 0;              // errno of the step that failed; the parent reads it
  const char* step = "";
};

// The child, from clone() to execve(). It shares the parent's memory and
// the parent's thread is suspended until the exec (CLONE_VFORK), so only
// async-signal-safe calls, no allocation, and no return: a failure is
// written into `a` and the child exits 127. Not instrumented: a sanitizer's
// bookkeeping on this borrowed stack would outlive it.
[[noreturn]] __attribute__((no_sanitize("address", "undefined"))) void ChildFail(ChildArgs* a, const char* step) {
  a->err = errno;
  a->step = step;
  ::_exit(127);
}

__attribute__((no_sanitize("address", "undefined"))) int ChildMain(void* arg) {
  auto* a = static_cast<ChildArgs*>(arg);
  // Killed when the thread that started it dies (weftd or the plugin killed,
  // OOM, a crash), so no tool outlives its caller holding locks or half a
  // ruleset. The parent may have died before this line; then the child was
  // re-parented already and the signal will never come: check, and go.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) ChildFail(a, "prctl(PR_SET_PDEATHSIG)");
  if (::getppid() != a->parent) ::_exit(127);
  // Every signal is blocked (the parent blocked them before the clone). The
  // parent's handlers must never run here, on a borrowed stack in shared
  // memory: back to the default before the mask is lifted (execve would
  // reset them only later). Ignored signals stay ignored, as across fork.
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction sa;
    if (sig == SIGKILL || sig == SIGSTOP || ::sigaction(sig, nullptr, &sa) != 0) continue;
    if (sa.sa_handler == SIG_IGN || sa.sa_handler == SIG_DFL) continue;
    sa.sa_handler = SIG_DFL;
    sa.sa_flags = 0;
    ::sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
  ::setpgid(0, 0);  // its own group: the deadline kills the tool's children too
  for (int i = 0; i < 3; ++i) {
    // dup2 onto itself keeps FD_CLOEXEC: clear it instead.
    if (a->fds[i] == i ? ::fcntl(i, F_SETFD, 0) != 0 : ::dup2(a->fds[i], i) != i) ChildFail(a, "dup2");
  }
  if (a->netns_fd >= 0 && ::setns(a->netns_fd, CLONE_NEWNET) != 0) ChildFail(a, "setns");
  ::sigprocmask(SIG_SETMASK, a->mask, nullptr);
  ::execve(a->path, a->argv, a->envp);
  ChildFail(a, "exec");
}

// The child's stack: it needs a few kilobytes (libc wrappers only).
constexpr size_t kChildStack = 64 * 1024;

// Starts the child with clone(CLONE_VM | CLONE_VFORK), as posix_spawn does:
// no copy of the caller's page tables, which fork() pays for in proportion
// to the caller's size (weftd is ~50 MB), and the caller's thread resumes
// when the child has exec'd or failed. Returns the pid, or -1 with errno.
pid_t Spawn(ChildArgs* a) {
  void* stack = ::mmap(nullptr, kChildStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return -1;
  sigset_t all, old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &old);
  a->mask = &old;
  pid_t pid = ::clone(ChildMain, static_cast<char*>(stack) + kChildStack, CLONE_VM | CLONE_VFORK | SIGCHLD, a);
  const int e = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::munmap(stack, kChildStack);
  errno = e;
  return pid;
}

}  // namespace

Result<ExecResult> Exec(const ExecRequest& req) {
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return Status::FromErrno(Reason::kFailed, Domain::kExec, "pipe", errno);
  UniqueFd in_r(in[0]), in_w(in[1]);
  if (::pipe2(out, O_CLOEXEC) != 0) return Status::FromErrno(Reason::kFailed, Domain::kExec, "pipe", errno);
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return Status::FromErrno(Reason::kFailed, Domain::kExec, "pipe", errno);
  UniqueFd err_r(err[0]), err_w(err[1]);
  std::vector<std::string> argv_s = req.argv.empty() ? std::vector<std::string>{req.path} : req.argv;
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : req.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  ChildArgs child{req.path.c_str(), argv.data(), envp.data(), {in_r.get(), out_w.get(), err_w.get()},
                  req.netns_fd, ::getpid(), nullptr};
  const pid_t pid = Spawn(&child);
  if (pid < 0) return Status::FromErrno(Reason::kFailed, Domain::kExec, "clone", errno);
  if (child.err != 0) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    const std::string step = child.step;
    return Status::FromErrno(Reason::kFailed, Domain::kExec,
                             step == "exec" ? "exec " + req.path : step + " for " + req.path,
                             child.err);
  }
  SigpipeBlocked no_sigpipe;  // while the child is fed (the child has exec'd: it does not inherit it)
  in_r.Reset();
  out_w.Reset();
  err_w.Reset();

  ExecResult res;
  auto deadline = std::chrono::steady_clock::now() + req.timeout;
  size_t in_off = 0;
  if (req.stdin_data.empty()) in_w.Reset();
  else ::fcntl(in_w.get(), F_SETFL, O_NONBLOCK);
  while (out_r.valid() || err_r.valid()) {
    pollfd fds[3];
    int n = 0;
    int idx_in = -1, idx_out = -1, idx_err = -1;
    if (in_w.valid()) { idx_in = n; fds[n++] = {in_w.get(), POLLOUT, 0}; }
    if (out_r.valid()) { idx_out = n; fds[n++] = {out_r.get(), POLLIN, 0}; }
    if (err_r.valid()) { idx_err = n; fds[n++] = {err_r.get(), POLLIN, 0}; }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      res.timed_out = true;
      break;
    }
    int r = ::poll(fds, n, static_cast<int>(left.count()));
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (r == 0) continue;
    if (idx_in >= 0 && fds[idx_in].revents) {
      ssize_t w = ::write(in_w.get(), req.stdin_data.data() + in_off, req.stdin_data.size() - in_off);
      if (w > 0) in_off += static_cast<size_t>(w);
      if (w < 0 && errno != EAGAIN) in_w.Reset();
      if (in_off >= req.stdin_data.size()) in_w.Reset();
    }
    auto drain = [](UniqueFd& fd, std::string& into) {
      char buf[16384];
      ssize_t k = ::read(fd.get(), buf, sizeof buf);
      if (k > 0) into.append(buf, static_cast<size_t>(k));
      else if (k == 0 || errno != EINTR) fd.Reset();
    };
    if (idx_out >= 0 && fds[idx_out].revents) drain(out_r, res.out);
    if (idx_err >= 0 && fds[idx_err].revents) drain(err_r, res.err);
  }
  if (res.timed_out) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) res.term_signal = WTERMSIG(status);
  else res.exit_code = WEXITSTATUS(status);
  return res;
}

}  // namespace weft::sys
