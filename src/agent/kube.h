#pragma once
// The Kubernetes control plane: Nodes through the API server's REST API with
// libcurl. This node's pod CIDRs come from its spec.podCIDRs (set by the
// controller-manager's --allocate-node-cidrs); it publishes its VTEP MAC,
// host IP and backend as annotations with a JSON merge patch. Peers come
// from a Node informer (informer.h: paginated list, then a watch from the
// list's resourceVersion with bookmarks; 410 Gone means re-list).

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/control_plane.h"
#include "kube/kube_endpoint.h"
#include "sys/http.h"

namespace weft::agent {

inline constexpr char kAnnotationVtepMac[] = "weft.io/vtep-mac";
// The node's uplink MAC (host-gw: the overlay filter binds its pod CIDRs to it).
inline constexpr char kAnnotationHostMac[] = "weft.io/host-mac";
inline constexpr char kAnnotationHostIp[] = "weft.io/host-ip";
inline constexpr char kAnnotationHostIp6[] = "weft.io/host-ip6";
inline constexpr char kAnnotationBackend[] = "weft.io/backend";

// --- Pure parsing (unit-tested) --------------------------------------------

// A v1.Node object (as JSON text's parsed form) to a peer: both entries of
// spec.podCIDRs (else spec.podCIDR), IPv4 first. Node IP: the host-ip
// annotation, else the first InternalIP in status.addresses; its IPv6
// address: the host-ip6 annotation, else the first IPv6 InternalIP.
struct KubeNode {
  overlay::NodeInfo info;
  std::string resource_version;
  std::map<std::string, std::string> annotations;
};
Result<KubeNode> ParseNode(std::string_view json_text);

// The merge patch that publishes `self`.
std::string AnnotationPatch(const overlay::LocalNode& self);
// Whether `node` already carries what AnnotationPatch(self) would set.
bool AnnotationsMatch(const KubeNode& node, const overlay::LocalNode& self);

struct KubeOptions {
  kube::KubeEndpoint endpoint;
  int64_t watch_timeout_seconds = 300;  // server-side timeout per watch
  int64_t list_page_size = 500;
};

std::unique_ptr<ControlPlane> NewKubeControlPlane(KubeOptions opts);

}  // namespace weft::agent
