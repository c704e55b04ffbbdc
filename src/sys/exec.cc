#include "sys/exec.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
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
    return Status::Error(Code::kInvalidConfig, "invalid plugin name \"" + name + "\"");
  for (const auto& d : dirs) {
    if (d.empty()) continue;
    std::string p = d + "/" + name;
    struct stat st;
    if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0) return p;
  }
  std::string searched;
  for (const auto& d : dirs) searched += (searched.empty() ? "" : ":") + d;
  return Status::Error(Code::kExec, "failed to find plugin \"" + name + "\" in path [" + searched + "]");
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

}  // namespace

Result<ExecResult> Exec(const ExecRequest& req) {
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return Status::FromErrno(Code::kExec, "pipe", errno);
  UniqueFd in_r(in[0]), in_w(in[1]);
  if (::pipe2(out, O_CLOEXEC) != 0) return Status::FromErrno(Code::kExec, "pipe", errno);
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return Status::FromErrno(Code::kExec, "pipe", errno);
  UniqueFd err_r(err[0]), err_w(err[1]);
  // A status pipe reports an exec failure (errno) back to the parent.
  int st[2];
  if (::pipe2(st, O_CLOEXEC) != 0) return Status::FromErrno(Code::kExec, "pipe", errno);
  UniqueFd st_r(st[0]), st_w(st[1]);

  std::vector<std::string> argv_s = req.argv.empty() ? std::vector<std::string>{req.path} : req.argv;
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : req.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno(Code::kExec, "fork", errno);
  if (pid == 0) {
    // Child: only async-signal-safe calls from here on.
    ::setpgid(0, 0);
    ::dup2(in_r.get(), 0);
    ::dup2(out_w.get(), 1);
    ::dup2(err_w.get(), 2);
    int e = 0;
    if (req.netns_fd >= 0 && ::setns(req.netns_fd, CLONE_NEWNET) != 0) {
      e = errno;
    } else {
      ::execve(req.path.c_str(), argv.data(), envp.data());
      e = errno;
    }
    ssize_t n = ::write(st_w.get(), &e, sizeof e);
    (void)n;
    ::_exit(127);
  }
  SigpipeBlocked no_sigpipe;  // after the fork: the child must not inherit it
  in_r.Reset();
  out_w.Reset();
  err_w.Reset();
  st_w.Reset();

  int exec_errno = 0;
  ssize_t got = ::read(st_r.get(), &exec_errno, sizeof exec_errno);
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    ::waitpid(pid, nullptr, 0);
    return Status::FromErrno(Code::kExec, "exec " + req.path, exec_errno);
  }

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
