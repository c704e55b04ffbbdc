#include "sys/netns.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <thread>

namespace weft::sys {

Result<Netns> Netns::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return Status::FromErrno(err == ENOENT ? Reason::kNotFound : Reason::kFailed, Domain::kNetns,
                             "open netns " + path, err);
  }
  UniqueFd owned(fd);
  int type = ::ioctl(fd, NS_GET_NSTYPE);
  if (type != CLONE_NEWNET) {
    return Status::Error(Reason::kInvalidArgument, Domain::kNetns, path + " is not a network namespace");
  }
  return Netns(std::move(owned), path);
}

Result<Netns> Netns::Current() { return Open("/proc/thread-self/ns/net"); }

Result<Netns> Netns::NewPrivate() {
  Status st = Status::Error(Reason::kInternal, Domain::kNone, "netns thread did not run");
  UniqueFd fd;
  // The thread ends inside the new namespace, so no switch back is needed.
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      st = Status::FromErrno(Reason::kFailed, Domain::kKernel, "unshare(CLONE_NEWNET)", errno);
      return;
    }
    int f = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (f < 0) {
      st = Status::FromErrno(Reason::kFailed, Domain::kFile, "open the new netns", errno);
      return;
    }
    fd = UniqueFd(f);
    st = Status::Ok();
  });
  t.join();
  if (!st.ok()) return st;
  return Netns(std::move(fd), "(private netns)");
}

bool IsNetnsGone(const Status& st) {
  return st.domain() == Domain::kNetns && (st.IsNotFound() || st.IsInvalidArgument());
}

Status RunInNetns(const Netns& ns, const std::function<Status()>& fn) {
  Status result = Status::Error(Reason::kInternal, Domain::kNone, "netns thread did not run");
  std::thread t([&] {
    int self = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self < 0) {
      result = Status::FromErrno(Reason::kFailed, Domain::kFile, "open current netns", errno);
      return;
    }
    UniqueFd self_fd(self);
    if (::setns(ns.fd(), CLONE_NEWNET) != 0) {
      result = Status::FromErrno(Reason::kFailed, Domain::kKernel, "enter netns " + ns.path(), errno);
      return;
    }
    result = fn();
    if (::setns(self_fd.get(), CLONE_NEWNET) != 0) std::abort();
  });
  t.join();
  return result;
}

Status RunInNetnsOnThisThread(const Netns& ns, const std::function<Status()>& fn) {
  int self = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (self < 0) return Status::FromErrno(Reason::kFailed, Domain::kFile, "open current netns", errno);
  UniqueFd self_fd(self);
  if (::setns(ns.fd(), CLONE_NEWNET) != 0)
    return Status::FromErrno(Reason::kFailed, Domain::kKernel, "enter netns " + ns.path(), errno);
  Status result = fn();
  if (::setns(self_fd.get(), CLONE_NEWNET) != 0) std::abort();
  return result;
}

}  // namespace weft::sys
