// CNI_ARGS ("K=V;K=V") with and without IgnoreUnknown.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/strings.h"
#include "cni/env.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  static const std::vector<std::string> kKnown = {"K8S_POD_NAME", "K8S_POD_NAMESPACE", "K8S_POD_UID",
                                                  "K8S_POD_INFRA_CONTAINER_ID"};
  auto a = weft::cni::ParseCniArgs(in, kKnown);
  if (a.ok()) {
    for (const auto& [k, v] : a->values) {
      if (k.empty()) __builtin_trap();  // a key is never empty
      (void)v;
    }
  }
  (void)weft::IsValidCniName(in);
  (void)weft::InterfaceNameProblem(in);
  return 0;
}
