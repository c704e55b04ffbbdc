#include "agent/node_sysctl.h"

#include <cerrno>

#include "sys/sysctl.h"

namespace weft::agent {

Status NodeSysctlError(const std::string& key, const std::string& current, const std::string& want,
                       const Status& write_error) {
  const std::string name = sys::SysctlName(key);
  const std::string why = write_error.sys_errno() == EROFS ? "/proc/sys is read-only here, as in an unprivileged "
                                                             "container"
                                                           : "no permission to write /proc/sys";
  return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                       "sysctl " + name + " is " + (current.empty() ? "unreadable" : current) + ", weftd needs " +
                           want + " and cannot set it (" + why + "): set it on the node with `sysctl -w " + name +
                           "=" + want + "` and a line \"" + name + " = " + want +
                           "\" in /etc/sysctl.d/ (a pod-level sysctl cannot: weftd uses the host network)",
                       write_error.details(), write_error.sys_errno());
}

Status EnsureNodeSysctl(const std::string& key, const std::string& value) {
  auto cur = sys::ReadSysctl(key);
  if (cur.ok() && *cur == value) return Status::Ok();
  Status st = sys::WriteSysctl(key, value);
  if (st.ok() || !sys::IsSysctlReadOnly(st)) return st;
  return NodeSysctlError(key, cur.ok() ? *cur : "", value, st);
}

}  // namespace weft::agent
