// weftctl: drives any CNI plugin as a container runtime does. The commands
// live in src/runtime (ctl.h); add new ones (doctor, state) here.

#include <exception>
#include <iostream>
#include <string>

#include "build_info.h"
#include "doctor/doctor_cmd.h"
#include "doctor/guard_cmd.h"
#include "doctor/policy_cmd.h"
#include "doctor/service_cmd.h"
#include "runtime/ctl.h"

int main(int argc, char** argv) {
  try {
    weft::runtime::ctl::Ctl ctl;
    ctl.SetVersion(std::string("weftctl ") + weft::build::kVersion + " (commit " + weft::build::kCommit + ")");
    weft::runtime::ctl::AddCniCommands(ctl);
    weft::doctor::AddDoctorCommand(ctl);
    weft::doctor::AddPolicyCommand(ctl);
    weft::doctor::AddGuardCommand(ctl);
    weft::doctor::AddServiceCommand(ctl);
    return ctl.Main(argc, argv, weft::runtime::ctl::ProcessContext());
  } catch (const std::exception& e) {
    std::cerr << "weftctl: internal error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "weftctl: internal error\n";
  }
  return weft::runtime::ctl::kExitFailed;
}
