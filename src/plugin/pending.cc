#include "plugin/pending.h"

#include <cstring>
#include <string>

#include "base/log.h"
#include "sys/files.h"

namespace weft::plugin {

namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// Whether some line of `file`, comments and surrounding blanks aside, is
// exactly `ns`. memmem jumps from candidate to candidate (the file may hold
// thousands of names); each candidate is checked to stand alone on its line
// and not after a '#'.
bool Lists(std::string_view file, std::string_view ns) {
  const char* base = file.data();
  size_t pos = 0;
  while (pos + ns.size() <= file.size()) {
    const void* hit = ::memmem(base + pos, file.size() - pos, ns.data(), ns.size());
    if (!hit) return false;
    size_t at = static_cast<size_t>(static_cast<const char*>(hit) - base);
    size_t b = at;
    while (b > 0 && IsBlank(base[b - 1])) --b;
    size_t e = at + ns.size();
    while (e < file.size() && IsBlank(base[e])) ++e;
    if ((b == 0 || base[b - 1] == '\n') && (e == file.size() || base[e] == '\n' || base[e] == '#')) return true;
    pos = at + 1;
  }
  return false;
}

// Whether any line holds a name (is neither blank nor a comment).
bool ListsAny(std::string_view file) {
  bool line_start = true;
  for (char c : file) {
    if (c == '\n') {
      line_start = true;
    } else if (line_start && !IsBlank(c)) {
      if (c != '#') return true;
      line_start = false;  // a comment: skip to the next line
    }
  }
  return false;
}

}  // namespace

bool IsPendingNamespace(std::string_view file_contents, bool file_readable, std::string_view ns) {
  if (!file_readable) return true;
  if (ns.empty()) return ListsAny(file_contents);
  // No namespace name holds these (they are DNS labels); such a value cannot
  // be matched against the list, so the pod is held as pending.
  if (ns.find_first_of(" \t\r\n#") != std::string_view::npos) return true;
  return Lists(file_contents, ns);
}

uint32_t HostVethGroup(const std::optional<NetworkPolicyConfig>& np, std::string_view pod_namespace) {
  if (!np) return 0;
  auto file = sys::ReadWholeFile(np->namespaces_file, kMaxNamespacesFileBytes);
  if (!file.ok())
    WEFT_LOG(kInfo, "networkPolicy: cannot read namespacesFile; the pod starts pending until weftd learns its IP",
             {"group", np->pending_group}, {"err", file.status()});
  bool pending = IsPendingNamespace(file.ok() ? std::string_view(*file) : std::string_view(), file.ok(),
                                    pod_namespace);
  return pending ? np->pending_group : 0;
}

}  // namespace weft::plugin
