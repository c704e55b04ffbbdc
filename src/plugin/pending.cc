#include "plugin/pending.h"

#include <cstring>
#include <string>

#include "base/log.h"
#include "base/strings.h"
#include "sys/files.h"

namespace weft::plugin {

bool IsPendingNamespace(std::string_view file_contents, bool file_readable, std::string_view ns) {
  if (!file_readable) return true;
  std::string_view rest = file_contents;
  while (!rest.empty()) {
    const void* nl = std::memchr(rest.data(), '\n', rest.size());
    size_t len = nl ? static_cast<size_t>(static_cast<const char*>(nl) - rest.data()) : rest.size();
    std::string_view line = rest.substr(0, len);
    rest.remove_prefix(nl ? len + 1 : len);
    // Namespace names are DNS labels and never hold '#'.
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = Trim(line);
    if (line.empty()) continue;
    if (ns.empty() || line == ns) return true;  // without a namespace, any listed one makes it pending
  }
  return false;
}

uint32_t HostVethGroup(const std::optional<NetworkPolicyConfig>& np, std::string_view pod_namespace) {
  if (!np) return 0;
  auto file = sys::ReadWholeFile(np->namespaces_file, kMaxNamespacesFileBytes);
  if (!file.ok())
    WEFT_LOG(kInfo, "networkPolicy: cannot read namespacesFile (" + file.status().ToString() +
                        "); the pod starts pending (group " + std::to_string(np->pending_group) +
                        ") until weftd learns its IP");
  bool pending = IsPendingNamespace(file.ok() ? std::string_view(*file) : std::string_view(), file.ok(),
                                    pod_namespace);
  return pending ? np->pending_group : 0;
}

}  // namespace weft::plugin
