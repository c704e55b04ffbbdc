#include "sys/exec.h"

#include <gtest/gtest.h>
#include <signal.h>

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
  EXPECT_EQ(m.status().code(), Code::kExec);
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

TEST(FindInPath, RejectsPathsAndFindsBinaries) {
  EXPECT_TRUE(FindInPath("cat", {"/nonexistent", "/bin"}).ok());
  EXPECT_FALSE(FindInPath("../bin/cat", {"/bin"}).ok());
  auto r = FindInPath("no-such-plugin", {"/bin"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().msg().find("no-such-plugin"), std::string::npos);
}

}  // namespace
}  // namespace weft::sys
