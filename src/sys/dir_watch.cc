#include "sys/dir_watch.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>

namespace weft::sys {

namespace {
constexpr uint32_t kFileEvents = IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE;
constexpr uint32_t kSelfGone = IN_DELETE_SELF | IN_MOVE_SELF;
}  // namespace

Result<DirWatch> DirWatch::Create() {
  UniqueFd fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(Reason::kFailed, Domain::kFile, "inotify_init1", errno);
  return DirWatch(std::move(fd));
}

Result<int> DirWatch::Add(const std::string& dir, bool self) {
  int wd = ::inotify_add_watch(fd_.get(), dir.c_str(), kFileEvents | IN_ONLYDIR | (self ? kSelfGone : 0));
  if (wd < 0) return Status::FromErrno(Reason::kFailed, Domain::kFile, "watch " + dir, errno);
  return wd;
}

Result<DirWatch::Events> DirWatch::Wait(std::chrono::milliseconds timeout) {
  Events out;
  pollfd p{fd_.get(), POLLIN, 0};
  int r = ::poll(&p, 1, static_cast<int>(timeout.count()));
  if (r < 0) {
    if (errno == EINTR) return out;
    return Status::FromErrno(Reason::kFailed, Domain::kFile, "poll inotify", errno);
  }
  if (r == 0) return out;
  alignas(inotify_event) char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      return Status::FromErrno(Reason::kFailed, Domain::kFile, "read inotify", errno);
    }
    if (n == 0) break;
    for (char* ptr = buf; ptr < buf + n;) {
      auto* ev = reinterpret_cast<inotify_event*>(ptr);
      if (ev->mask & (kSelfGone | IN_IGNORED)) out.gone.push_back(ev->wd);
      if (ev->mask & (kFileEvents | IN_Q_OVERFLOW)) out.changed = true;  // lost events: reload anyway
      ptr += sizeof(inotify_event) + ev->len;
    }
  }
  return out;
}

}  // namespace weft::sys
