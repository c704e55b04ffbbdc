// The CNI_* environment: NUL-separated values fed as the six variables.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/strings.h"
#include "cni/env.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> vals;
  size_t start = 0;
  for (int i = 0; i < 6; ++i) {
    size_t z = in.find('\0', start);
    vals.push_back(in.substr(start, z == std::string::npos ? std::string::npos : z - start));
    if (z == std::string::npos) break;
    start = z + 1;
  }
  vals.resize(6);
  static const char* kNames[] = {"CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"};
  auto env = weft::cni::ParseEnv([&](const char* k) -> const char* {
    for (int i = 0; i < 6; ++i)
      if (std::string(k) == kNames[i]) return vals[i].c_str();
    return nullptr;
  });
  // Names that reach link names and paths are validated for the verbs that
  // use them (GC, STATUS and VERSION ignore CNI_IFNAME/CNI_CONTAINERID).
  using weft::cni::Command;
  bool attach = env.ok() && (env->command == Command::kAdd || env->command == Command::kDel ||
                             env->command == Command::kCheck);
  if (attach && !weft::InterfaceNameProblem(env->ifname).empty()) __builtin_trap();
  if (attach && !weft::IsValidCniName(env->container_id)) __builtin_trap();
  return 0;
}
