#pragma once
// `weftctl doctor` as a weftctl subcommand (docs/weftctl.md).

#include "runtime/ctl.h"

namespace weft::doctor {

void AddDoctorCommand(runtime::ctl::Ctl& ctl);

}  // namespace weft::doctor
