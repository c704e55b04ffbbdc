#pragma once
// The runtime-supplied parts of a config: `runtimeConfig.portMappings` and
// `runtimeConfig.dns`, honoured only when the config declares the matching
// capability (as libcni only fills what is declared), plus the DNS merge.
// Pure: no syscalls.

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cni/netconf.h"
#include "cni/result.h"

namespace weft::plugin {

struct PortMap {
  std::string host_ip;  // "" = every node address ("0.0.0.0" and "::" map here)
  int host_port = 0;
  int container_port = 0;
  std::string protocol;  // "tcp", "udp" or "sctp"
  bool operator==(const PortMap&) const = default;
};

struct RuntimeOptions {
  std::vector<PortMap> port_mappings;
  std::optional<cni::Dns> dns;
};

// Accepts both key spellings: libcni/podman's `hostPort`, `containerPort`,
// `protocol`, `hostIP` and containerd CRI's `HostPort`, `ContainerPort`,
// `Protocol`, `HostIP`. Entries with hostPort 0 are skipped (nothing to
// publish); exact duplicates are collapsed. Errors are invalid-argument naming
// the key.
Result<RuntimeOptions> ParseRuntimeConfig(const cni::NetConf& net);

// The result's DNS: runtimeConfig.dns when given, else the config's `dns`,
// else what a delegated IPAM plugin returned.
cni::Dns EffectiveDns(const cni::Dns& config, const std::optional<cni::Dns>& runtime, const cni::Dns& ipam);

}  // namespace weft::plugin
