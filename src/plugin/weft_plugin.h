#pragma once
// The weft CNI plugin: the verbs cni::PluginMain dispatches (cmd/weft).
// Every verb parses the config first (config.h: routed or bridge mode, the
// built-in SQLite IPAM or a delegated IPAM plugin, masquerade, hostPorts,
// NetworkPolicy).
//  ADD     opens the pod netns, the host and pod netlink sockets and the
//          database, then RunAdd (add.h): allocate (store_ipam.h), arm the
//          teardown, claim the hostPorts, the source guard, attach the
//          datapath of the mode (datapath.h), firewall (node_firewall.h:
//          masquerade, hostPorts through hostports.h), ready.
//  DEL     the ordered, idempotent teardown (teardown.h); needs neither the
//          netns nor the database row.
//  CHECK   the row is ready, the delegated IPAM agrees, the datapath and the
//          hostPort rules are in the kernel, prevResult lists the addresses.
//  STATUS  whether an ADD could succeed: the store opens and is writable and
//          has addresses left (or the delegated IPAM plugin's STATUS).
//  GC      tears down the rows the runtime no longer lists, and listed ones
//          whose netns and veth are gone (reclaim.h); resyncs the hostPort
//          rules; prunes the source guard's chains of ports that are gone;
//          forwards GC to a delegated IPAM plugin.

#include <string>
#include <vector>

#include "cni/skel.h"
#include "plugin/add.h"
#include "plugin/config.h"

namespace weft::plugin {

// CNI_ARGS keys the plugin understands (others need IgnoreUnknown).
const std::vector<std::string>& KnownCniArgs();

// ADD's request from the invocation and its parsed config: CNI_ARGS, the
// runtimeConfig, the derived host veth name. Pure (CmdAdd applies the
// config's logging first; fuzz_plugin_main drives it without).
Result<AddRequest> ParseAddRequest(const cni::CmdArgs& args, Config cfg);

class WeftPlugin : public cni::Plugin {
 public:
  Result<cni::CniResult> CmdAdd(const cni::CmdArgs& args) override;
  Status CmdDel(const cni::CmdArgs& args) override;
  Status CmdCheck(const cni::CmdArgs& args) override;
  Status CmdStatus(const cni::CmdArgs& args) override;
  Status CmdGc(const cni::CmdArgs& args, const std::vector<cni::Attachment>& valid) override;
};

}  // namespace weft::plugin
