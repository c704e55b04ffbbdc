#pragma once
// Which endpoints a service port uses on this node, as kube-proxy chooses
// them (pkg/proxy/endpointslicecache.go merges a Service's slices,
// pkg/proxy/topology.go's CategorizeEndpoints picks from them): ready
// endpoints, else serving and terminating ones; the "Cluster" set with
// topology hints, the "Local" set for a traffic policy Local. Pure.

#include <cstdint>
#include <string>
#include <vector>

#include "base/ip.h"
#include "services/service_types.h"

namespace weft::services {

// Where this node is: its name (an endpoint's nodeName equal to it is
// local) and its topology.kubernetes.io/zone label ("" without one).
struct NodeTopology {
  std::string node_name, zone;
};

// One endpoint of one service port, merged from the slices.
struct PortEndpoint {
  IpAddress ip;
  uint16_t port = 0;  // the slice's port for the service port's name and protocol
  bool ready = true, serving = true, terminating = false;
  bool local = false;  // on this node
  std::vector<std::string> zone_hints, node_hints;

  // "10.1.0.5:8080", "[fd00::5]:8080": kube-proxy's endpoint identity.
  std::string Key() const;
  auto operator<=>(const PortEndpoint& o) const { return std::tie(ip, port) <=> std::tie(o.ip, o.port); }
  bool operator==(const PortEndpoint&) const = default;
};

// The endpoints `slices` (one Service's, any order; FQDN and skipped ones
// are left out) give the service port `port` in one family: every slice of
// that family with a port of the same name and protocol, each endpoint's
// first address with that port. An address and port in two slices is one
// endpoint; when the two disagree the local one is kept, else the slice
// first by name (kube-proxy keeps a local one and otherwise whichever its
// map iteration met last). Sorted by address and port.
std::vector<PortEndpoint> MergeEndpoints(const std::vector<const EndpointSlice*>& slices, const ServicePort& port,
                                         bool v6, const NodeTopology& node);

// CategorizeEndpoints' answer.
struct Categorized {
  // "Cluster" policy's endpoints: ready ones (those the topology hints give
  // this node, when every ready endpoint has hints and one names this
  // node, or else this node's zone), else every serving and terminating
  // one. Empty when the Service never uses Cluster policy.
  std::vector<PortEndpoint> cluster;
  // "Local" policy's: this node's ready endpoints, else its serving and
  // terminating ones. Empty when the Service never uses Local policy.
  std::vector<PortEndpoint> local;
  // cluster ∪ local: the endpoints this node has a chain for.
  std::vector<PortEndpoint> reachable;
  // A usable endpoint exists somewhere in the cluster (even when neither
  // list above holds one).
  bool has_any = false;
};

// `endpoints` as MergeEndpoints gives them; every list comes out sorted.
Categorized CategorizeEndpoints(const std::vector<PortEndpoint>& endpoints, const Service& svc, const NodeTopology& node);

}  // namespace weft::services
