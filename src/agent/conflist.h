#pragma once
// The CNI side of the node: the conflist the container runtime reads, and
// the plugin binary it executes (the DaemonSet's init step installs it).

#include <cstdint>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/status.h"

namespace weft::agent {

struct ConflistSpec {
  std::string network_name = "weft";
  std::string cni_version = "1.0.0";
  std::vector<IpPrefix> ranges;         // this node's pod CIDRs
  int mtu = 0;                          // pod MTU (0: the plugin derives it)
  std::vector<IpPrefix> cluster_cidrs;  // never masqueraded by the plugin
  std::string data_dir;                 // the plugin's IPAM store ("" = its default)
  std::string log_file;
  std::string log_level;
  bool port_mappings = true;            // chain "portmap" with the portMappings capability
  // NetworkPolicy: the plugin's `networkPolicy` key (docs/plugin.md). Pods
  // of the namespaces listed in the file start in the pending group.
  bool network_policy = false;
  std::string netpol_namespaces_file;     // absolute; required when network_policy
  uint32_t netpol_pending_group = 22342;  // 0x5746, the plugin's default
};

// The conflist JSON (pure; unit-tested).
std::string RenderConflist(const ConflistSpec& spec);

// Writes `content` to dir/name with write-then-rename (containerd reloads on
// inotify events and must never read half a file). No write when the file
// already holds exactly `content`. Sets *changed accordingly.
Status WriteConflist(const std::string& dir, const std::string& name, const std::string& content,
                     bool* changed = nullptr);

// Copies the plugin binary `src` to bin_dir/name (mode 0755) with
// write-then-rename, so a runtime executing the old binary is never
// disturbed. No write when identical.
Status InstallPlugin(const std::string& src, const std::string& bin_dir, const std::string& name,
                     bool* changed = nullptr);

}  // namespace weft::agent
