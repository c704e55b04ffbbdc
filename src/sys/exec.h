#pragma once
// Runs a program directly with execve (never through a shell), feeding stdin
// and collecting stdout/stderr, with a deadline. On timeout the child's whole
// process group is killed.
//
// The program dies with its caller: it is started with PR_SET_PDEATHSIG =
// SIGKILL, so when the calling thread dies (weftd or the plugin killed,
// crashed, OOM-killed) no nft, iptables-restore or conntrack runs on as an
// orphan. Only the program itself: what it starts in turn is its own
// business (it is in the program's process group, which the deadline kills).
// A set-user-ID or file-capability program loses the setting at exec.
//
// The child is started with clone(CLONE_VM | CLONE_VFORK), as posix_spawn
// does, not fork(): the caller's page tables are not copied, which fork()
// pays for in proportion to the caller's size (about 3 ms more per run from
// a 50 MB weftd; docs/performance.md).

#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"

namespace weft::sys {

struct ExecRequest {
  std::string path;                 // absolute path of the program
  std::vector<std::string> argv;    // argv[0] included; empty -> {path}
  std::vector<std::string> env;     // "K=V"; the child gets exactly these
  std::string stdin_data;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  int netns_fd = -1;                // if >= 0, the child joins this netns first
};

struct ExecResult {
  int exit_code = -1;      // valid when !signaled
  int term_signal = 0;     // non-zero when killed by a signal
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Errors only when the program could not be run at all (failed, exec); a program
// that ran and failed is an ExecResult with a non-zero exit code.
Result<ExecResult> Exec(const ExecRequest& req);

// Searches `dirs` for an executable regular file named `name`.
// `name` must be a bare file name (no '/').
Result<std::string> FindInPath(const std::string& name, const std::vector<std::string>& dirs);

// The current process environment as "K=V" strings.
std::vector<std::string> CurrentEnv();

}  // namespace weft::sys
