// What weftd reads from the Kubernetes API: Node objects, Node lists and the
// lines of a watch stream (ADDED/MODIFIED/DELETED/BOOKMARK/ERROR).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/kube.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  (void)weft::agent::ParseWatchEvent(in);
  (void)weft::agent::ParseNodeList(in);
  (void)weft::agent::ParseNode(in);
  return 0;
}
