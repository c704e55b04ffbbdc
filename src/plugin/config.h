#pragma once
// The weft plugin's configuration (docs/config.md documents every key).

#include <string>
#include <vector>

#include "base/ip.h"
#include "base/log.h"
#include "base/status.h"
#include "cni/netconf.h"

namespace weft::plugin {

enum class Mode { kRouted, kBridge };
enum class FwBackend { kNftables, kIptables };

struct Config {
  cni::NetConf net;
  Mode mode = Mode::kRouted;
  int mtu = 0;  // 0: derive from the host's default-route interface
  bool masquerade = false;
  FwBackend masquerade_backend = FwBackend::kNftables;
  std::string data_dir = "/var/lib/weft";
  std::vector<IpPrefix> ranges;
  std::vector<IpPrefix> cluster_cidrs;  // never masqueraded as destinations
  std::string log_file;
  log::Level log_level = log::Level::kWarn;
};

inline constexpr int kMinMtu = 68;
inline constexpr int kMaxMtu = 65535;

// Validates every weft key. Errors are kInvalidConfig and name the field.
Result<Config> ParseConfig(const cni::NetConf& net);

// The host end of the veth for container+ifname: "wft" + 12 hex digits of a
// stable hash, so DEL finds it without the netns or the database.
std::string HostVethName(const std::string& container_id, const std::string& ifname);

}  // namespace weft::plugin
