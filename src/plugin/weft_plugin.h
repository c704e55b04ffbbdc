#pragma once
// The weft CNI plugin: ADD, DEL, CHECK, STATUS and GC over the routed
// datapath, the SQLite IPAM and the node-wide masquerade.

#include "cni/skel.h"

namespace weft::plugin {

// CNI_ARGS keys the plugin understands (others need IgnoreUnknown).
const std::vector<std::string>& KnownCniArgs();

class WeftPlugin : public cni::Plugin {
 public:
  Result<cni::CniResult> CmdAdd(const cni::CmdArgs& args) override;
  Status CmdDel(const cni::CmdArgs& args) override;
  Status CmdCheck(const cni::CmdArgs& args) override;
  Status CmdStatus(const cni::CmdArgs& args) override;
  Status CmdGc(const cni::CmdArgs& args, const std::vector<cni::Attachment>& valid) override;
};

}  // namespace weft::plugin
