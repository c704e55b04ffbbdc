#include "runtime/conf_watcher.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

namespace weft::runtime {

namespace {

// Writes that completed, renames and removals. Creation alone (IN_CREATE)
// and attribute changes are ignored, as containerd ignores Create/Chmod; a
// created file is seen when it is closed after writing.
constexpr uint32_t kFileEvents = IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE;
constexpr uint32_t kSelfGone = IN_DELETE_SELF | IN_MOVE_SELF;

}  // namespace

Result<ConfWatcher> ConfWatcher::Start(LoadOptions options) {
  UniqueFd fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(Code::kIo, "inotify_init1", errno);
  int wd = ::inotify_add_watch(fd.get(), options.conf_dir.c_str(), kFileEvents | kSelfGone | IN_ONLYDIR);
  if (wd < 0) return Status::FromErrno(Code::kIo, "watch " + options.conf_dir, errno);
  ConfWatcher w(std::move(options), std::move(fd));
  w.dir_wd_ = wd;
  w.report_ = LoadConfDir(w.options_);
  w.WatchSubdirs();
  return w;
}

void ConfWatcher::WatchSubdirs() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(options_.conf_dir, ec)) {
    std::error_code e2;
    if (!e.is_directory(e2)) continue;
    // Re-adding an existing watch is harmless: the kernel returns its wd.
    (void)::inotify_add_watch(fd_.get(), e.path().c_str(), kFileEvents | IN_ONLYDIR);
  }
}

void ConfWatcher::Reload() {
  report_ = LoadConfDir(options_);
  ++reloads_;
  WatchSubdirs();
}

Result<bool> ConfWatcher::WaitAndReload(std::chrono::milliseconds timeout) {
  pollfd p{fd_.get(), POLLIN, 0};
  int r = ::poll(&p, 1, static_cast<int>(timeout.count()));
  if (r < 0) {
    if (errno == EINTR) return false;
    return Status::FromErrno(Code::kIo, "poll inotify", errno);
  }
  if (r == 0) return false;
  bool changed = false;
  bool dir_gone = false;
  alignas(inotify_event) char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      return Status::FromErrno(Code::kIo, "read inotify", errno);
    }
    if (n == 0) break;
    for (char* ptr = buf; ptr < buf + n;) {
      auto* ev = reinterpret_cast<inotify_event*>(ptr);
      if (ev->wd == dir_wd_ && (ev->mask & (kSelfGone | IN_IGNORED))) dir_gone = true;
      else if (ev->mask & kFileEvents) changed = true;
      else if (ev->mask & IN_Q_OVERFLOW) changed = true;  // lost events: reload to be level-triggered
      ptr += sizeof(inotify_event) + ev->len;
    }
  }
  if (dir_gone) {
    report_.status = Status::Error(Code::kIo, "cni conf dir " + options_.conf_dir + " was removed, stopped watching");
    return report_.status;
  }
  if (!changed) return false;
  Reload();
  return true;
}

}  // namespace weft::runtime
