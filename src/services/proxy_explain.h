#pragma once
// What a packet to one Service meets in table inet weft-services (issue 31,
// `weftctl service explain`, weftd's GET /services/explain): per service
// port and family, its addresses and NodePort, the endpoints this node has
// a chain for (local, ready, serving, terminating; which policy chain picks
// each), affinity and the traffic policies, and for each destination the
// path a new connection takes through the table: the map, the Service's
// chains, then an endpoint's chain and its DNAT target, or the reject/drop
// verdict of the filter hooks when there is none. Read from the objects the
// Model puts in the table (proxy_table.h's ServiceObjects), not decided
// again here, so it says what the table does. Pure: no I/O, no policy (the
// caller adds what NetworkPolicy makes of the translated destination).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "services/proxy_model.h"

namespace weft::services {

struct ExplainEndpoint {
  std::string addr;  // "10.244.1.5", "fd00::5"
  uint16_t port = 0;
  bool local = false, ready = true, serving = true, terminating = false;
  // Picked by the Cluster policy chain (svc4-...) / the Local one (local4-...).
  bool cluster = false, local_policy = false;
  std::string chain;         // its ep4-... chain (DNAT target)
  std::string affinity_set;  // its aff4-... set ("" without affinity)
};

// One step of a new connection's way through the table.
struct ExplainStep {
  std::string at;    // "map service-ips4", "chain svc4-...", "filter hooks"
  std::string does;  // plain words
  std::vector<std::string> rules;  // a chain's rules in nft's words (empty for a map)
};

// One destination of a service port: the ClusterIP, an externalIP, an LB
// IP, or the NodePort on the node's addresses.
struct ExplainPath {
  std::string kind;     // "ClusterIP", "externalIP", "LoadBalancer", "NodePort"
  std::string address;  // "" for a NodePort (every local address but loopback)
  uint16_t port = 0;
  std::vector<ExplainStep> steps;
  // "dnat": to one of `endpoints`; "reject" (TCP reset, ICMP port
  // unreachable); "drop"; "none": no entry (another Service holds the key).
  std::string verdict;
  std::vector<std::string> endpoints;  // "10.244.1.5:8080", those this path may DNAT to
};

struct ExplainPort {
  std::string port_name;  // "default/web/tcp/http"
  std::string name;       // "http" ("" for the only port)
  bool v6 = false;
  Proto proto = Proto::kTcp;
  uint16_t port = 0, node_port = 0;
  std::vector<std::string> vips;
  bool has_endpoints = false;  // a usable endpoint somewhere in the cluster
  std::vector<ExplainEndpoint> endpoints;
  std::vector<ExplainPath> paths;
  std::vector<std::string> chains, sets;  // every chain and affinity set of this port and family
};

struct Explanation {
  std::string service;  // "ns/name"
  std::string type;     // "ClusterIP", "NodePort", "LoadBalancer", "ExternalName"
  std::string skip;     // why the proxy serves none of it ("" when it serves it)
  std::vector<std::string> cluster_ips, external_ips, lb_ips;
  bool affinity_client_ip = false;
  uint32_t affinity_timeout = 0;  // seconds (affinity only)
  std::string internal_traffic_policy, external_traffic_policy;  // "Cluster" / "Local"
  bool external_policy_applies = false;  // eTP counts (ExternallyAccessible)
  std::string traffic_distribution;      // "" when unset
  std::string node;                      // the node the table is for
  std::vector<ExplainPort> ports;
};

// "ns/name" checked (one '/', DNS-style names: lower-case letters, digits,
// '-' and '.'); invalid argument otherwise.
Result<std::string> ParseServiceKey(std::string_view key);
// The explanation of `key`'s Service; not found when the model does not
// know it.
Result<Explanation> Explain(const Model& model, const std::string& key);
// As weftd serves it (docs/weftd.md, GET /services/explain).
std::string ExplanationJson(const Explanation& e);

}  // namespace weft::services
