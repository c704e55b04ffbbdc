#pragma once
// File helpers. Errors carry the path and errno.

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace weft::sys {

// Reads at most `max_bytes` (everything by default).
Result<std::string> ReadFile(const std::string& path, size_t max_bytes = SIZE_MAX);
// Reads `fd` (not owned) until end of input or `max_bytes`, retrying EINTR.
// A read(2) error is an error naming `what`, never a short input.
Result<std::string> ReadFd(int fd, size_t max_bytes, const std::string& what);
// Reads a whole file sized by fstat(2): open, fstat, one read(2) for a
// regular file that does not grow meanwhile (files replaced by rename never
// do), close. A file larger than `max_bytes` is an error with EFBIG rather
// than a silently truncated read.
Result<std::string> ReadWholeFile(const std::string& path, size_t max_bytes);
// Writes to a temporary file beside `path`, fsyncs, renames over `path`.
// Readers (e.g. containerd's inotify reload) never see a partial file.
Status WriteFileAtomic(const std::string& path, const std::string& data, int mode = 0644);
// mkdir -p; created directories get `mode`.
Status MkdirAll(const std::string& path, int mode = 0755);
bool PathExists(const std::string& path);
// Creates `path` empty with `mode` (less the umask) unless it exists; an
// existing file is left as it is.
Status CreateFileIfAbsent(const std::string& path, int mode);
Status RemoveFile(const std::string& path);  // OK when already gone
// Names in a directory (no "." / ".."), sorted.
Result<std::vector<std::string>> ListDir(const std::string& path);

// An exclusive flock(2) held for the object's lifetime.
class FileLock {
 public:
  static Result<FileLock> Acquire(const std::string& path);
 private:
  explicit FileLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace weft::sys
