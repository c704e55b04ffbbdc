#pragma once
// Watches a conf dir with inotify and reloads it on change, as containerd's
// CNI conf syncer does, keeping the last load status (`crictl info`'s
// lastCNILoadStatus). It also watches the drop-in plugin dirs
// (<confdir>/<network>/), which containerd does not.

#include <chrono>
#include <string>

#include "base/status.h"
#include "runtime/conf.h"
#include "sys/dir_watch.h"

namespace weft::runtime {

// Not thread-safe: one thread calls WaitAndReload and reads the report.
class ConfWatcher {
 public:
  // Starts watching and does the first load. Failed (file) when the dir cannot be
  // watched (it must exist, as containerd requires).
  static Result<ConfWatcher> Start(LoadOptions options);

  // Waits up to `timeout` for changes; when files were written, renamed or
  // removed, reloads. Returns true when it reloaded. An error (the dir
  // itself was removed, inotify failed) means watching has stopped.
  Result<bool> WaitAndReload(std::chrono::milliseconds timeout);

  const LoadReport& report() const { return report_; }
  // OK or why the last load failed.
  const Status& last_load_status() const { return report_.status; }
  int reloads() const { return reloads_; }
  // For callers that poll several fds.
  int fd() const { return watch_.fd(); }

 private:
  ConfWatcher(LoadOptions options, sys::DirWatch watch) : options_(std::move(options)), watch_(std::move(watch)) {}
  void Reload();
  void WatchSubdirs();

  LoadOptions options_;
  sys::DirWatch watch_;
  int dir_wd_ = -1;
  LoadReport report_;
  int reloads_ = 0;
};

}  // namespace weft::runtime
