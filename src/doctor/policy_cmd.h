#pragma once
// `weftctl policy [POD]`: what weftd enforces for this node's pods
// (docs/weftctl.md).

#include "runtime/ctl.h"

namespace weft::doctor {

void AddPolicyCommand(runtime::ctl::Ctl& ctl);

}  // namespace weft::doctor
