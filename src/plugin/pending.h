#pragma once
// NetworkPolicy's "no window at pod start", the plugin's half: a pod whose
// namespace may have policies starts "pending" (its host veth in the
// pending interface group), and weftd's nftables table drops the forwarded
// traffic of pending interfaces until weftd has learned the pod's IP and
// applied the policies that select it. docs/plugin.md ("NetworkPolicy").

#include <cstdint>
#include <optional>
#include <string_view>

#include "plugin/config.h"

namespace weft::plugin {

// Largest namespaces file read; a larger one counts as unreadable (fail
// closed). Namespace names are at most 63 bytes: this is over 50,000 names.
inline constexpr size_t kMaxNamespacesFileBytes = 4u << 20;

// Whether a pod in namespace `ns` starts pending, given the namespaces file
// (one namespace per line; blank lines and '#' comments ignored; spaces and
// CR around a name ignored). Pure; allocates nothing; a lookup costs about
// a memmem over the file.
//   - file not readable (missing, unreadable, too large): pending;
//   - `ns` non-empty: pending iff listed;
//   - `ns` empty (no K8S_POD_NAMESPACE, e.g. a non-Kubernetes runtime):
//     pending unless the file lists no namespace at all;
//   - `ns` holding whitespace or '#' (no namespace does): pending.
bool IsPendingNamespace(std::string_view file_contents, bool file_readable, std::string_view ns);

// The IFLA_GROUP for the host veth of a pod in `pod_namespace`: 0 without
// `networkPolicy` or when the pod is not pending, else its pendingGroup.
// Reads the namespaces file (open, fstat, one read); logs at info when it
// cannot, since every pod then starts pending.
uint32_t HostVethGroup(const std::optional<NetworkPolicyConfig>& np, std::string_view pod_namespace);

}  // namespace weft::plugin
