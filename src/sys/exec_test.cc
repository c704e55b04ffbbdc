#include "sys/exec.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace weft::sys {
namespace {

TEST(Exec, FeedsStdinAndCollectsOutput) {
  ExecRequest req;
  req.path = "/bin/cat";
  req.stdin_data = std::string(200000, 'x');  // larger than a pipe buffer
  auto r = Exec(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->out.size(), 200000u);
}

TEST(Exec, SurvivesAChildThatExitsWithoutReadingItsInput) {
  // The write into the closed pipe raises SIGPIPE: without care it kills the
  // calling process (this test binary), as it killed the plugin when
  // host-local exited early on STATUS.
  for (int i = 0; i < 20; ++i) {
    ExecRequest req;
    req.path = "/bin/true";
    req.stdin_data = std::string(1 << 20, 'x');
    auto r = Exec(req);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->exit_code, 0);
  }
  // And the caller's signal mask is as it was.
  sigset_t now;
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, nullptr, &now), 0);
  EXPECT_FALSE(sigismember(&now, SIGPIPE));
}

TEST(Exec, PassesExactlyTheGivenEnvironment) {
  ExecRequest req;
  req.path = "/usr/bin/env";
  req.env = {"A=1", "B=two"};
  auto r = Exec(req);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "A=1\nB=two\n");
}

TEST(Exec, ReportsExitCodesAndMissingPrograms) {
  ExecRequest req;
  req.path = "/bin/false";
  auto r = Exec(req);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  req.path = "/nonexistent/prog";
  auto m = Exec(req);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().reason(), Reason::kFailed);
  EXPECT_EQ(m.status().domain(), Domain::kExec);
}

TEST(Exec, KillsAHungProgramAtTheDeadline) {
  ExecRequest req;
  req.path = "/bin/sleep";
  req.argv = {"sleep", "30"};
  req.timeout = std::chrono::milliseconds(200);
  auto start = std::chrono::steady_clock::now();
  auto r = Exec(req);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->term_signal, SIGKILL);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// The pid of a child of `parent` that has exec'd `comm`, found in /proc;
// -1 once `parent` has exited without one. REQUIRES: `parent` is a child of
// this process.
pid_t WaitForExecdChild(pid_t parent, const std::string& comm) {
  for (;;) {
    if (DIR* d = ::opendir("/proc")) {
      pid_t found = -1;
      while (dirent* e = ::readdir(d)) {
        std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
        std::string line;
        if (!std::getline(f, line)) continue;
        // pid (comm) state ppid ...
        const auto open = line.find('('), close = line.rfind(')');
        if (open == std::string::npos || close == std::string::npos) continue;
        std::istringstream rest(line.substr(close + 2));
        char state = 0;
        pid_t ppid = 0;
        rest >> state >> ppid;
        if (ppid == parent && line.substr(open + 1, close - open - 1) == comm) found = std::atoi(e->d_name);
      }
      ::closedir(d);
      if (found > 0) return found;
    }
    if (::waitpid(parent, nullptr, WNOHANG) != 0) return -1;
    ::usleep(1000);
  }
}

// In a process of its own: runs `sleep 100` through Exec in a child (the
// caller), SIGKILLs the caller once the sleep runs, and exits 0 if the
// sleep was killed too, 1 if it ran on (after 100 s), 2-4 if the setup
// failed.
[[noreturn]] void KillTheCallerOfASleep() {
  // The orphaned sleep is re-parented to this process, which can then wait
  // for it.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  const pid_t caller = ::fork();
  if (caller == 0) {
    ExecRequest req;
    req.path = "/bin/sleep";
    req.argv = {"sleep", "100"};
    (void)Exec(req);
    ::_exit(3);
  }
  const pid_t sleeper = WaitForExecdChild(caller, "sleep");
  if (sleeper <= 0) ::_exit(2);
  ::kill(caller, SIGKILL);
  ::waitpid(caller, nullptr, 0);
  // Returns at once if the sleep was killed with its caller; only after
  // 100 s, with exit 0, if it was not.
  int status = 0;
  if (::waitpid(sleeper, &status, 0) != sleeper) ::_exit(4);
  ::_exit(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? 0 : 1);
}

// A program outlives neither weftd nor the plugin: when the process that
// ran it through Exec is killed (SIGKILL, no chance to clean up), the
// program is killed too instead of running on as an orphan.
TEST(Exec, TheProgramDiesWithItsCaller) {
  EXPECT_EXIT(KillTheCallerOfASleep(), ::testing::ExitedWithCode(0), "");
}

// The program starts with the caller's signal mask (as after fork), not
// with the everything-blocked mask Exec holds while it starts the child,
// and the caller's own mask is as it was.
TEST(Exec, TheProgramGetsTheCallersSignalMask) {
  sigset_t usr1, old;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &usr1, &old), 0);
  ExecRequest req;
  req.path = "/bin/cat";
  req.argv = {"cat", "/proc/self/status"};
  auto r = Exec(req);
  sigset_t now;
  pthread_sigmask(SIG_SETMASK, nullptr, &now);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // SIGUSR1 (10) is bit 9: 0x200; nothing else blocked.
  EXPECT_NE(r->out.find("SigBlk:\t0000000000000200\n"), std::string::npos) << r->out;
  EXPECT_TRUE(sigismember(&now, SIGUSR1));
  EXPECT_FALSE(sigismember(&now, SIGUSR2));
}

TEST(Exec, ReportsAStepThatFailedBeforeTheProgramRan) {
  int not_a_netns = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(not_a_netns, 0);
  ExecRequest req;
  req.path = "/bin/true";
  req.netns_fd = not_a_netns;
  auto r = Exec(req);
  ::close(not_a_netns);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sys_errno(), EINVAL) << r.status().ToString();
  EXPECT_NE(r.status().msg().find("setns"), std::string::npos) << r.status().ToString();
}

TEST(FindInPath, RejectsPathsAndFindsBinaries) {
  EXPECT_TRUE(FindInPath("cat", {"/nonexistent", "/bin"}).ok());
  EXPECT_FALSE(FindInPath("../bin/cat", {"/bin"}).ok());
  auto r = FindInPath("no-such-plugin", {"/bin"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().msg().find("no-such-plugin"), std::string::npos);
}

}  // namespace
}  // namespace weft::sys
