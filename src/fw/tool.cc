#include "fw/tool.h"

#include <chrono>

#include "base/strings.h"

namespace weft::fw {

Result<sys::ExecResult> RunTool(const std::string& tool, const std::vector<std::string>& args,
                                const std::string& input, int netns_fd) {
  static const std::vector<std::string> kSbin = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
  WEFT_ASSIGN_OR_RETURN(std::string path, sys::FindInPath(tool, kSbin));
  sys::ExecRequest req;
  req.path = path;
  req.argv = {tool};
  req.argv.insert(req.argv.end(), args.begin(), args.end());
  req.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  req.stdin_data = input;
  req.timeout = std::chrono::seconds(30);
  req.netns_fd = netns_fd;
  return sys::Exec(req);
}

Status ToolError(const std::string& what, const sys::ExecResult& r) {
  std::string err = std::string(Trim(r.err));
  if (r.timed_out) err = "timed out";
  return Status::Error(Reason::kFailed, Domain::kFirewall,
                       what + " failed (exit " + std::to_string(r.exit_code) + ")", err);
}

}  // namespace weft::fw
