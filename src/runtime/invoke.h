#pragma once
// Running one plugin the way libcni's invoke package does: find the binary
// by its "type" in the plugin dirs, exec it directly (never a shell) with the
// CNI_* environment and the injected config on stdin, under a deadline, and
// turn every way it can fail into a Status that says what happened.

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "runtime/conf.h"

namespace weft::runtime {

// The per-attachment arguments of an invocation (libcni's RuntimeConf).
struct RuntimeConf {
  std::string container_id;
  std::string netns;   // may be empty for DEL
  std::string ifname;
  std::vector<std::pair<std::string, std::string>> args;  // CNI_ARGS, in order
  // Capability data offered by the runtime ("portMappings", "bandwidth",
  // ...). Only the keys a plugin declares in "capabilities" reach it, under
  // "runtimeConfig". Values are passed through untouched.
  nlohmann::json capability_args = nlohmann::json::object();
};

// "K1=V1;K2=V2", as libcni joins RuntimeConf.Args.
std::string JoinCniArgs(const std::vector<std::pair<std::string, std::string>>& args);
// Parses cnitool's CNI_ARGS syntax. Invalid-argument (environment) on a pair without '='.
Result<std::vector<std::pair<std::string, std::string>>> SplitCniArgs(const std::string& raw);

// The stdin of one plugin call (libcni buildOneConfig): the plugin's own
// object with "name" and "cniVersion" set to the list's, "prevResult" when
// given, and "runtimeConfig" holding only the capabilities it declares.
// Pass rt == nullptr for STATUS/GC, which get no runtimeConfig.
nlohmann::json BuildOneConfig(const std::string& name, const std::string& cni_version, const PluginConf& plugin,
                              const nlohmann::json* prev_result, const RuntimeConf* rt);

// The environment of one plugin call: `base` (the runtime's own
// environment, as libcni passes os.Environ()) with every CNI_* variable
// replaced by this call's.
std::vector<std::string> PluginEnv(const std::vector<std::string>& base, const std::string& command,
                                   const RuntimeConf& rt, const std::vector<std::string>& plugin_dirs);

struct InvokeOptions {
  std::vector<std::string> plugin_dirs = {"/opt/cni/bin"};
  std::vector<std::string> base_env;  // inherited by plugins
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

struct VersionInfo {
  std::string cni_version;
  std::vector<std::string> supported;
  bool Supports(const std::string& v) const;
};

// Thread-safe: holds only its options.
class Invoker {
 public:
  explicit Invoker(InvokeOptions options) : options_(std::move(options)) {}
  const InvokeOptions& options() const { return options_; }

  // The plugin binary for `type`. Not found (exec) naming the dirs searched.
  Result<std::string> Find(const std::string& type) const;

  // Runs `type` with `command`. Returns stdout when the plugin exits 0.
  // A plugin that reports a CNI error gives that error's code, msg and
  // details; one that crashes, hangs past the deadline, or exits non-zero
  // without an error object gives failed (exec) with what is known (signal,
  // deadline, exit status, the tail of its stderr).
  Result<std::string> Run(const std::string& type, const std::string& command, const RuntimeConf& rt,
                          const std::string& stdin_data) const;

  // VERSION, as libcni's GetVersionInfo sends it. A plugin too old to know
  // VERSION supports only 0.1.0.
  Result<VersionInfo> GetVersionInfo(const std::string& type) const;

 private:
  InvokeOptions options_;
};

}  // namespace weft::runtime
