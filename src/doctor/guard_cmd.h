#pragma once
// `weftctl guard`: the source guard of this node (fw/source_guard.h): which
// tables are installed and what they dropped; `weftctl guard allow POD
// [PREFIX...]` sets (or, without prefixes, clears) one pod's opt-out
// (docs/weftctl.md, docs/security.md).

#include "runtime/ctl.h"

namespace weft::doctor {

void AddGuardCommand(runtime::ctl::Ctl& ctl);

}  // namespace weft::doctor
