#pragma once
// ADD's firewall steps on the node (AddFirewall, add.h): the masquerade
// through the configured backend, the pod's own hostPort entries (its
// mappings as recorded in the database), and the UDP conntrack flush for
// them.

#include <string>

#include "fw/masquerade.h"
#include "ipam/store.h"
#include "plugin/add.h"
#include "plugin/config.h"
#include "plugin/store_ipam.h"

namespace weft::plugin {

class NodeFirewall : public AddFirewall {
 public:
  // `cfg` and `ipam` outlive this object; the hostPort claims are read
  // through `ipam`'s database.
  NodeFirewall(const Config& cfg, StoreIpam& ipam) : cfg_(cfg), ipam_(ipam) {}

  Status EnsureMasquerade(const ipam::PodRecord& rec) override;
  Status SyncHostPorts(const ipam::PodRecord& rec, const std::string& localnet_dev) override;
  Status FlushUdpConntrack(const ipam::PodRecord& rec) override;

 private:
  const Config& cfg_;
  StoreIpam& ipam_;
};

// The masquerade's sources: the configured ranges, the delegated IPAM's
// subnets, or (for an IPAM plugin whose config names none) the pod's subnet.
fw::MasqueradeSpec MasqSpec(const Config& cfg, const ipam::PodRecord& rec);

}  // namespace weft::plugin
