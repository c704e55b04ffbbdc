#pragma once
// Directory watches over inotify, summarised per wait: did files change, and
// which watched directories went away. Used by the conf-dir watcher.

#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace weft::sys {

class DirWatch {
 public:
  static Result<DirWatch> Create();

  // Watches `dir` for completed writes, renames and removals of its entries
  // (creation alone and attribute changes are ignored, as containerd ignores
  // Create/Chmod). With `self`, also reports the directory itself going away.
  // Adding a watched dir again returns the same descriptor.
  Result<int> Add(const std::string& dir, bool self);

  struct Events {
    bool changed = false;          // entries written/renamed/removed, or events were lost
    std::vector<int> gone;         // watch descriptors whose directory is gone
  };
  // Waits up to `timeout` and drains everything pending. No events in time
  // is an empty result, not an error.
  Result<Events> Wait(std::chrono::milliseconds timeout);

  int fd() const { return fd_.get(); }

 private:
  explicit DirWatch(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace weft::sys
