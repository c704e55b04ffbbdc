// Network config on stdin: the generic spec fields, then every weft key.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cni/netconf.h"
#include "plugin/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto net = weft::cni::ParseNetConf(in);
  if (!net.ok()) return 0;
  auto cfg = weft::plugin::ParseConfig(*net);
  (void)cfg;
  auto prev = net->PrevResult();
  (void)prev;
  auto valid = weft::cni::ValidAttachments(*net);
  (void)valid;
  return 0;
}
