#pragma once
// The plugin skeleton: reads env and stdin, validates them, dispatches the
// verb, and prints the result or the CNI error object. Everything it touches
// is injected so it is testable without a process.

#include <string>
#include <string_view>
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

// The most stdin a plugin reads: a network config with its prevResult and
// runtimeConfig is a few kB. More is code 6, not a truncated config: the
// caller reads kMaxStdinBytes + 1 bytes so that PluginMain can tell.
inline constexpr size_t kMaxStdinBytes = 1 << 20;
// The deepest nesting of arrays and objects a network config may have (a
// conflist's plugin with prevResult and runtimeConfig needs under 10). Deeper
// is code 6 before the JSON is parsed: nlohmann-json parses any depth, but
// copying or printing a value recurses once per level.
inline constexpr int kMaxJsonDepth = 64;

// Why `stdin_data` cannot be a network config before it is parsed (larger
// than kMaxStdinBytes, not UTF-8, nested deeper than kMaxJsonDepth), as a
// malformed error (code 6); OK otherwise.
Status CheckStdin(std::string_view stdin_data);

// Runs one invocation. Writes the result (or the error object) to `out` and
// returns the process exit code (0 on success, 1 on a CNI error). Every
// input is checked (CheckStdin, ParseEnv) before the plugin runs, so
// nothing the runtime sends can make the result unprintable after the work
// is done.
int PluginMain(Plugin& plugin, const EnvLookup& env, const std::string& stdin_data, std::string* out);

// The error object {"cniVersion","code","msg","details"}. Never throws:
// bytes that are not UTF-8 (a library's message quoting its input) are
// printed as U+FFFD.
std::string ErrorJson(const Status& st, const std::string& version);

}  // namespace weft::cni
