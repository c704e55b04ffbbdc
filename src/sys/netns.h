#pragma once
// Network namespace handles. A Netns owns an fd on the namespace; it is
// validated to really be a network namespace when opened.

#include <functional>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace weft::sys {

class Netns {
 public:
  // Opens `path` (e.g. /run/netns/x or /proc/<pid>/ns/net). Errors, all in
  // Domain::kNetns: kNotFound when it does not exist, kInvalidArgument when
  // it is not a network namespace, kFailed (with errno) when it cannot be
  // opened (EACCES...). IsNetnsGone() tells the first two from the third.
  static Result<Netns> Open(const std::string& path);
  // The calling thread's current network namespace.
  static Result<Netns> Current();
  // A new, empty network namespace that nothing else uses, alive as long
  // as the returned handle (no name in /run/netns, so nothing is left behind
  // when it closes). Made by a short-lived thread that unshares and exits;
  // the caller's namespace never changes. Needs CAP_SYS_ADMIN (kFailed in
  // Domain::kKernel with EPERM otherwise). Use it with ExecRequest::netns_fd.
  static Result<Netns> NewPrivate();

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }

 private:
  Netns(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  UniqueFd fd_;
  std::string path_;
};

// True when Netns::Open failed because the namespace is gone: the path does
// not exist, or it is no longer a network namespace (a bind mount whose
// namespace was released). A failure to open it (EACCES and the like) is not
// proof of absence.
bool IsNetnsGone(const Status& st);

// Runs `fn` on a dedicated thread that has joined `ns`, so the caller's
// namespace never changes. Aborts the process if the thread cannot switch
// back (it would otherwise run later work in the wrong namespace).
Status RunInNetns(const Netns& ns, const std::function<Status()>& fn);

// Runs `fn` on the calling thread switched into `ns`, then switches back
// (aborting if it cannot). Cheaper than RunInNetns by a thread start and
// join. REQUIRES: the process is single-threaded, or no other thread relies
// on this thread's namespace while `fn` runs (the plugin's case).
Status RunInNetnsOnThisThread(const Netns& ns, const std::function<Status()>& fn);

}  // namespace weft::sys
