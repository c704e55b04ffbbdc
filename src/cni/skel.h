#pragma once
// The plugin skeleton: reads env and stdin, validates them, dispatches the
// verb, and prints the result or the CNI error object. Everything it touches
// is injected so it is testable without a process.

#include <string>
#include <vector>

#include "base/status.h"
#include "cni/env.h"
#include "cni/netconf.h"
#include "cni/result.h"

namespace weft::cni {

struct CmdArgs {
  Env env;
  NetConf conf;
  std::string stdin_data;
};

class Plugin {
 public:
  virtual ~Plugin() = default;
  virtual Result<CniResult> CmdAdd(const CmdArgs& args) = 0;
  virtual Status CmdDel(const CmdArgs& args) = 0;
  virtual Status CmdCheck(const CmdArgs& args) = 0;
  virtual Status CmdStatus(const CmdArgs& args) = 0;
  virtual Status CmdGc(const CmdArgs& args, const std::vector<Attachment>& valid) = 0;
};

// Runs one invocation. Writes the result (or the error object) to `out` and
// returns the process exit code (0 on success, 1 on a CNI error).
int PluginMain(Plugin& plugin, const EnvLookup& env, const std::string& stdin_data, std::string* out);

// The error object {"cniVersion","code","msg","details"}.
std::string ErrorJson(const Status& st, const std::string& version);

}  // namespace weft::cni
