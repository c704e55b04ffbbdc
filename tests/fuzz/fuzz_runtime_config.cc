// runtimeConfig (portMappings in both key spellings, dns) as a runtime sends
// it, with the capabilities that let it through.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "cni/netconf.h"
#include "plugin/runtime_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json rc = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (rc.is_discarded()) return 0;
  nlohmann::json conf = {{"cniVersion", "1.1.0"},
                         {"name", "fuzz"},
                         {"type", "weft"},
                         {"capabilities", {{"portMappings", true}, {"dns", true}}},
                         {"runtimeConfig", rc}};
  auto net = weft::cni::ParseNetConf(conf.dump());
  if (!net.ok()) return 0;
  auto opts = weft::plugin::ParseRuntimeConfig(*net);
  (void)opts;
  return 0;
}
