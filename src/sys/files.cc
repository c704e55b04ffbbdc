#include "sys/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace weft::sys {

Result<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(Reason::kFailed, Domain::kFile, "open " + path, errno);
  return ReadFd(fd.get(), max_bytes, path);
}

Result<std::string> ReadFd(int fd, size_t max_bytes, const std::string& what) {
  std::string out;
  char buf[8192];
  while (out.size() < max_bytes) {
    ssize_t n = ::read(fd, buf, std::min(sizeof buf, max_bytes - out.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(Reason::kFailed, Domain::kFile, "read " + what, errno);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Result<std::string> ReadWholeFile(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(Reason::kFailed, Domain::kFile, "open " + path, errno);
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(Reason::kFailed, Domain::kFile, "stat " + path, errno);
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) > max_bytes)
    return Status::FromErrno(Reason::kFailed, Domain::kFile, "read " + path, EFBIG);
  // One byte more than the size: a read of a regular file that returns its
  // whole size and not that byte has reached EOF, with no second read(2).
  // Anything else (a partial read, procfs files whose size is 0) reads on
  // until read(2) returns 0.
  const size_t size = static_cast<size_t>(st.st_size);
  const size_t cap = max_bytes == SIZE_MAX ? SIZE_MAX : max_bytes + 1;
  const bool regular = S_ISREG(st.st_mode);
  std::string out;
  out.resize(std::min(size + 1, cap));
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(Reason::kFailed, Domain::kFile, "read " + path, errno);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
    if (regular && got >= size && got < out.size()) break;
    if (got == out.size()) {  // it grew (or is not a regular file): keep reading, up to the cap
      if (out.size() > max_bytes) return Status::FromErrno(Reason::kFailed, Domain::kFile, "read " + path, EFBIG);
      out.resize(std::min(out.size() * 2 + 4096, cap));
    }
  }
  out.resize(got);
  return out;
}

Status WriteFileAtomic(const std::string& path, const std::string& data, int mode) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!fd.valid()) return Status::FromErrno(Reason::kFailed, Domain::kFile, "create " + tmp, errno);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::unlink(tmp.c_str());
      return Status::FromErrno(Reason::kFailed, Domain::kFile, "write " + tmp, err);
    }
    off += static_cast<size_t>(n);
  }
  if (::fchmod(fd.get(), mode) != 0 || ::fsync(fd.get()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno(Reason::kFailed, Domain::kFile, "sync " + tmp, err);
  }
  fd.Reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno(Reason::kFailed, Domain::kFile, "rename to " + path, err);
  }
  return Status::Ok();
}

Status MkdirAll(const std::string& path, int mode) {
  if (path.empty()) return Status::Error(Reason::kFailed, Domain::kFile, "mkdir: empty path");
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST)
      return Status::FromErrno(Reason::kFailed, Domain::kFile, "mkdir " + cur, errno);
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Status::Error(Reason::kFailed, Domain::kFile, path + " is not a directory");
  return Status::Ok();
}

bool PathExists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

Status CreateFileIfAbsent(const std::string& path, int mode) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (!fd.valid() && errno != EEXIST) return Status::FromErrno(Reason::kFailed, Domain::kFile, "create " + path, errno);
  return Status::Ok();
}

Status RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return Status::FromErrno(Reason::kFailed, Domain::kFile, "remove " + path, errno);
  return Status::Ok();
}

Result<std::vector<std::string>> ListDir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) return Status::FromErrno(Reason::kFailed, Domain::kFile, "open directory " + path, errno);
  std::vector<std::string> out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

Result<FileLock> FileLock::Acquire(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno(Reason::kFailed, Domain::kFile, "open lock " + path, errno);
  while (::flock(fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return Status::FromErrno(Reason::kFailed, Domain::kFile, "lock " + path, errno);
  }
  return FileLock(std::move(fd));
}

}  // namespace weft::sys
