#include "services/endpoints.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>

namespace weft::services {
namespace {

bool Has(const std::vector<std::string>& v, const std::string& x) {
  return !x.empty() && std::find(v.begin(), v.end(), x) != v.end();
}

enum class Topology { kNone, kSameZone, kSameNode };

// topology.go's topologyModeFromHints with the PreferSameTrafficDistribution
// gate on (kube-proxy's default where PreferSameNode exists): same-node when every ready endpoint has node hints
// and one names this node; else same-zone when every ready endpoint has
// zone hints and one names this node's zone; else none.
Topology TopologyFromHints(const std::vector<PortEndpoint>& eps, const NodeTopology& node) {
  bool any_ready = false, all_node = true, for_node = false, all_zone = true, for_zone = false;
  for (const auto& e : eps) {
    if (!e.ready) continue;
    any_ready = true;
    if (e.node_hints.empty()) all_node = false;
    else if (Has(e.node_hints, node.node_name)) for_node = true;
    if (e.zone_hints.empty()) all_zone = false;
    else if (Has(e.zone_hints, node.zone)) for_zone = true;
  }
  if (!any_ready) return Topology::kNone;
  if (all_node && for_node) return Topology::kSameNode;
  if (all_zone && for_zone) return Topology::kSameZone;
  return Topology::kNone;
}

bool AvailableFor(const PortEndpoint& e, Topology t, const NodeTopology& node) {
  switch (t) {
    case Topology::kNone: return true;
    case Topology::kSameNode: return Has(e.node_hints, node.node_name);
    case Topology::kSameZone: return Has(e.zone_hints, node.zone);
  }
  return false;
}

template <typename F>
std::vector<PortEndpoint> Filter(const std::vector<PortEndpoint>& eps, F keep) {
  std::vector<PortEndpoint> out;
  for (const auto& e : eps)
    if (keep(e)) out.push_back(e);
  return out;
}

bool ServingTerminating(const PortEndpoint& e) { return e.serving && e.terminating; }

}  // namespace

std::string PortEndpoint::Key() const {
  return (ip.is_v4() ? ip.ToString() : "[" + ip.ToString() + "]") + ":" + std::to_string(port);
}

std::vector<PortEndpoint> MergeEndpoints(const std::vector<const EndpointSlice*>& slices, const ServicePort& port,
                                         bool v6, const NodeTopology& node) {
  std::vector<const EndpointSlice*> sorted = slices;
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
  std::map<std::pair<IpAddress, uint16_t>, PortEndpoint> merged;
  for (const EndpointSlice* s : sorted) {
    if (!s->skip.empty() || (s->address_type == AddressType::kIpv6) != v6) continue;
    for (const SlicePort& sp : s->ports) {
      if (sp.name != port.name || sp.proto != port.proto) continue;
      for (const Endpoint& e : s->endpoints) {
        PortEndpoint pe{e.addr, sp.port, e.ready, e.serving, e.terminating,
                        !node.node_name.empty() && e.node_name == node.node_name, e.zone_hints, e.node_hints};
        auto [it, fresh] = merged.try_emplace({pe.ip, pe.port}, pe);
        if (!fresh && pe.local && !it->second.local) it->second = std::move(pe);
      }
    }
  }
  std::vector<PortEndpoint> out;
  out.reserve(merged.size());
  for (auto& [k, e] : merged) out.push_back(std::move(e));
  return out;
}

Categorized CategorizeEndpoints(const std::vector<PortEndpoint>& eps, const Service& svc, const NodeTopology& node) {
  Categorized c;
  if (eps.empty()) return c;
  Topology topology = Topology::kNone;
  if (svc.UsesClusterEndpoints()) {
    topology = TopologyFromHints(eps, node);
    c.cluster = Filter(eps, [&](const PortEndpoint& e) { return e.ready && AvailableFor(e, topology, node); });
    // No ready endpoint anywhere (a topology is chosen only when one is
    // ready for this node or zone): the serving terminating ones.
    if (c.cluster.empty()) c.cluster = Filter(eps, ServingTerminating);
    c.has_any = !c.cluster.empty();
  }
  if (!svc.UsesLocalEndpoints()) {
    c.reachable = c.cluster;
    return c;
  }
  bool local_ready = false, local_terminating = false;
  for (const auto& e : eps) {
    if (e.ready) {
      c.has_any = true;
      local_ready |= e.local;
    } else if (ServingTerminating(e)) {
      c.has_any = true;
      local_terminating |= e.local;
    }
  }
  if (local_ready) c.local = Filter(eps, [](const PortEndpoint& e) { return e.local && e.ready; });
  else if (local_terminating) c.local = Filter(eps, [](const PortEndpoint& e) { return e.local && ServingTerminating(e); });
  if (!svc.UsesClusterEndpoints()) {
    c.reachable = c.local;
    return c;
  }
  // Both: the union (each list is sorted, so is a merge of them).
  std::set_union(c.cluster.begin(), c.cluster.end(), c.local.begin(), c.local.end(), std::back_inserter(c.reachable));
  return c;
}

}  // namespace weft::services
