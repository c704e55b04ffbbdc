#pragma once
// Sysctls weftd needs on its node (net.ipv4.ip_forward, ...). The DaemonSet
// runs weftd unprivileged, where container runtimes mount /proc/sys
// read-only: a sysctl that already has the value is fine, one weftd would
// have to change is the node's job, and the error says so (docs/weftd.md,
// "What the node provides").

#include <string>

#include "base/status.h"

namespace weft::agent {

// Reads the sysctl and writes it only when it differs. Errors: the read or
// write failed (the sys layer's Status); a write this process may not do at
// all comes back as NodeSysctlError. Applies to the calling thread's
// network namespace. `key` uses '/' separators ("net/ipv4/ip_forward").
Status EnsureNodeSysctl(const std::string& key, const std::string& value);

// Pure: the error for a sysctl weftd could not set because /proc/sys is
// read-only or not writable here (sys::IsSysctlReadOnly(write_error)):
// invalid-argument, naming the sysctl, its current and wanted value and how
// to set it on the node; the write's errno is kept.
Status NodeSysctlError(const std::string& key, const std::string& current, const std::string& want,
                       const Status& write_error);

}  // namespace weft::agent
