// What weftd reads from the Kubernetes API: Node objects, list pages and the
// lines of a watch stream (ADDED/MODIFIED/DELETED/BOOKMARK/ERROR), as the
// informer (kube/informer.h) parses them for every resource.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/kube.h"
#include "kube/informer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (auto e = weft::kube::ParseKubeWatchLine(in); e.ok()) (void)weft::kube::ObjectKey(e->object);
  if (auto p = weft::kube::ParseKubeListPage(in); p.ok())
    for (const auto& item : p->items) (void)weft::kube::ObjectKey(item);
  (void)weft::agent::ParseNode(in);
  return 0;
}
