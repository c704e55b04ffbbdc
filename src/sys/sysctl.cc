#include "sys/sysctl.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "base/strings.h"
#include "base/unique_fd.h"

namespace weft::sys {

Result<std::string> ReadSysctl(const std::string& key) {
  std::string path = "/proc/sys/" + key;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(Reason::kFailed, Domain::kFile, "read sysctl " + key, errno);
  char buf[256];
  ssize_t n = ::read(fd.get(), buf, sizeof buf);
  if (n < 0) return Status::FromErrno(Reason::kFailed, Domain::kFile, "read sysctl " + key, errno);
  return std::string(Trim(std::string_view(buf, static_cast<size_t>(n))));
}

Status WriteSysctl(const std::string& key, const std::string& value) {
  std::string path = "/proc/sys/" + key;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(Reason::kFailed, Domain::kFile, "write sysctl " + key, errno);
  if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    return Status::FromErrno(Reason::kFailed, Domain::kFile, "write sysctl " + key, errno);
  return Status::Ok();
}

Status EnsureSysctl(const std::string& key, const std::string& value) {
  auto cur = ReadSysctl(key);
  if (cur.ok() && *cur == value) return Status::Ok();
  return WriteSysctl(key, value);
}

bool IsSysctlReadOnly(const Status& st) {
  const int e = st.sys_errno();
  return !st.ok() && (e == EROFS || e == EACCES || e == EPERM);
}

std::string SysctlName(const std::string& key) {
  std::string out = key;
  for (char& c : out) c = c == '/' ? '.' : c == '.' ? '/' : c;
  return out;
}

Status DisableIpv6(const std::string& ifname) {
  Status st = WriteSysctl("net/ipv6/conf/" + ifname + "/disable_ipv6", "1");
  if (!st.ok() && st.sys_errno() == ENOENT && ::access("/proc/sys/net/ipv6", F_OK) != 0) return Status::Ok();
  return st;
}

}  // namespace weft::sys
