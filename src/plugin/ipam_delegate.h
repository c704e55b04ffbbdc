#pragma once
// Delegated IPAM: the config's `ipam.type` names an IPAM plugin (host-local,
// static, dhcp, ...) that weft execs from CNI_PATH the way libcni's
// invoke.Delegate* does: the same CNI_* environment with CNI_COMMAND set,
// the whole network config on stdin, the result on stdout.
//
// Version skew: an IPAM plugin older than the config (host-local 1.1.1 speaks
// at most 1.0.0) answers code 1; weft then asks it for VERSION and repeats
// the call with `cniVersion` lowered to the highest version both speak.
// STATUS and GC are forwarded only for configs >= 1.1.0 and skipped, not
// failed, when the plugin does not speak 1.1.0.

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cni/env.h"
#include "cni/result.h"

namespace weft::plugin {

// Who to exec and for which attachment. `netns` may be empty (DEL, GC).
struct DelegateCall {
  std::string container_id, netns, ifname, args;
  std::vector<std::string> path;  // CNI_PATH
};

class DelegatedIpam {
 public:
  // `stdin_data` is the config as weft received it; `version` its cniVersion.
  DelegatedIpam(std::string type, std::string stdin_data, std::string version)
      : type_(std::move(type)), stdin_(std::move(stdin_data)), version_(std::move(version)) {}

  Result<cni::CniResult> Add(const DelegateCall& call) const;
  Status Del(const DelegateCall& call) const;
  Status Check(const DelegateCall& call) const;
  // STATUS and GC: no-ops below 1.1.0 or for a plugin that cannot speak it.
  Status ForwardStatus(const DelegateCall& call) const;
  Status ForwardGc(const DelegateCall& call) const;

  const std::string& type() const { return type_; }

 private:
  struct Outcome {
    std::string out;      // stdout of the successful call
    std::string version;  // the cniVersion it was called with
  };
  // Runs `command`; on an incompatible-version answer negotiates and retries.
  Result<Outcome> Call(const char* command, const DelegateCall& call) const;
  Result<std::vector<std::string>> SupportedVersions(const DelegateCall& call) const;
  Status ForwardIfSupported(const char* command, const DelegateCall& call) const;

  std::string type_, stdin_, version_;
};

// The highest version in `theirs` that weft supports and that is not newer
// than `ours`; nullopt when there is none.
std::optional<std::string> NegotiateVersion(const std::string& ours, const std::vector<std::string>& theirs);
// `stdin_data` with its top-level cniVersion replaced (malformed on bad JSON).
Result<std::string> WithCniVersion(const std::string& stdin_data, const std::string& version);
// The error object a failed plugin printed: {code, msg, details}; code 0
// when stdout holds none.
struct PluginError {
  int code = 0;
  std::string msg, details;
};
PluginError ParsePluginError(const std::string& out);

// What weft takes from an IPAM result: at most one address per family
// (failed, plugin, when the plugin returned two of one family, or none).
struct IpamAddrs {
  std::optional<cni::IpConfig> v4, v6;
  std::vector<cni::Route> routes;
  cni::Dns dns;
};
Result<IpamAddrs> PickAddrs(const cni::CniResult& r, const std::string& type);

}  // namespace weft::plugin
