#pragma once
// Sysctls under /proc/sys. Network sysctls apply to the calling thread's
// network namespace. Keys use '/' separators: "net/ipv4/ip_forward".
// REQUIRES: any interface name inside `key` has been validated.

#include <string>

#include "base/status.h"

namespace weft::sys {

Result<std::string> ReadSysctl(const std::string& key);
Status WriteSysctl(const std::string& key, const std::string& value);
// Writes only when the current value differs: avoids a write (and the
// kernel-side work some sysctls trigger) on the hot path.
Status EnsureSysctl(const std::string& key, const std::string& value);

// True when a write failed because this process may not change the sysctl
// at all: /proc/sys mounted read-only (EROFS, as container runtimes mount it
// for unprivileged containers), or no permission (EACCES, EPERM).
bool IsSysctlReadOnly(const Status& st);

// The name sysctl(8) and /etc/sysctl.d use: "net/ipv4/ip_forward" ->
// "net.ipv4.ip_forward" (a '.' inside a component, as in an interface name,
// becomes '/', as sysctl(8) writes it).
std::string SysctlName(const std::string& key);

// Turns IPv6 off on one interface (before it goes up: no link-local
// address, routes, DAD or MLD for it). OK when the kernel has no IPv6.
Status DisableIpv6(const std::string& ifname);

}  // namespace weft::sys
