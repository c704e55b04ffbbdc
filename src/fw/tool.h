#pragma once
// Running the firewall tools (nft, iptables-restore, conntrack): found in
// the sbin directories, exec'd directly (never through a shell) with a
// minimal environment and a deadline.

#include <string>
#include <vector>

#include "base/status.h"
#include "sys/exec.h"

namespace weft::fw {

// `netns_fd` >= 0: the tool runs in that network namespace.
Result<sys::ExecResult> RunTool(const std::string& tool, const std::vector<std::string>& args,
                                const std::string& input, int netns_fd = -1);
// Failed (firewall) for a tool that ran and failed; details carry its stderr.
Status ToolError(const std::string& what, const sys::ExecResult& r);

}  // namespace weft::fw
