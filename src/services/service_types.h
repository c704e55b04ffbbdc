#pragma once
// Services and EndpointSlices as Weft's Service proxy needs them (issue 31,
// docs/services.md): the API objects (core/v1 Service, discovery.k8s.io/v1
// EndpointSlice) decoded into small values, everything the proxy does not
// read dropped. Pure: no I/O; a malformed object is an error naming the
// object and the field, never an exception.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/ip.h"
#include "base/status.h"

namespace weft::services {

enum class Proto : uint8_t { kTcp = 6, kUdp = 17, kSctp = 132 };
// "tcp", "udp", "sctp": as nft and kube-proxy's chain names spell them.
const char* ProtoName(Proto p);

enum class ServiceType : uint8_t { kClusterIP, kNodePort, kLoadBalancer, kExternalName };
enum class TrafficPolicy : uint8_t { kCluster, kLocal };
// spec.trafficDistribution. The proxy itself follows the hints the
// EndpointSlice controller wrote for it (as kube-proxy does: topology.go);
// the field is kept for explain and metrics.
enum class TrafficDistribution : uint8_t { kNone, kPreferClose, kPreferSameZone, kPreferSameNode };

// The labels that take a Service (or slice) away from the default proxy.
inline constexpr char kProxyNameLabel[] = "service.kubernetes.io/service-proxy-name";
inline constexpr char kHeadlessLabel[] = "service.kubernetes.io/headless";
inline constexpr char kServiceNameLabel[] = "kubernetes.io/service-name";
// sessionAffinityConfig.clientIP.timeoutSeconds when unset (the API's default: 3 hours).
inline constexpr uint32_t kDefaultAffinityTimeout = 10800;

struct ServicePort {
  std::string name;  // "" for the only port of a Service
  Proto proto = Proto::kTcp;
  uint16_t port = 0;
  uint16_t node_port = 0;  // 0: none
  // targetPort as the API holds it: a number, or a container port's name.
  // The proxy DNATs to the port the Service's EndpointSlices give for this
  // port's name and protocol (the controller resolved a name per pod), as
  // kube-proxy does; target_port is what a slice-less explain shows.
  uint16_t target_port = 0;
  std::string target_port_name;
  bool operator==(const ServicePort&) const = default;
};

struct Service {
  std::string ns, name;
  ServiceType type = ServiceType::kClusterIP;
  // spec.clusterIPs (spec.clusterIP when the list is absent): at most one
  // per family, the primary first.
  std::vector<IpAddress> cluster_ips;
  std::vector<ServicePort> ports;
  std::vector<IpAddress> external_ips;  // spec.externalIPs
  std::vector<IpAddress> lb_ips;        // status.loadBalancer.ingress[].ip (hostname-only entries have none)
  bool affinity_client_ip = false;      // sessionAffinity ClientIP
  uint32_t affinity_timeout = kDefaultAffinityTimeout;  // seconds
  TrafficPolicy internal_policy = TrafficPolicy::kCluster;
  TrafficPolicy external_policy = TrafficPolicy::kCluster;
  uint16_t health_check_node_port = 0;
  TrafficDistribution traffic_distribution = TrafficDistribution::kNone;
  // Why the proxy serves none of it ("" when it serves it): ExternalName,
  // headless (clusterIP None or the headless label), another proxy's
  // (the service-proxy-name label).
  std::string skip;

  std::string Key() const { return ns + "/" + name; }
  // kube-proxy's ExternallyAccessible: a NodePort or LoadBalancer Service,
  // or one with externalIPs.
  bool ExternallyAccessible() const;
  bool InternalLocal() const { return internal_policy == TrafficPolicy::kLocal; }
  // externalTrafficPolicy Local counts only for an externally accessible Service.
  bool ExternalLocal() const { return ExternallyAccessible() && external_policy == TrafficPolicy::kLocal; }
  // Whether the proxy ever uses endpoints chosen by "Cluster" policy (also
  // for eTP Local's short-circuit of pod and node traffic) or by "Local".
  bool UsesClusterEndpoints() const { return !InternalLocal() || ExternallyAccessible(); }
  bool UsesLocalEndpoints() const { return InternalLocal() || ExternalLocal(); }
  bool operator==(const Service&) const = default;
};

enum class AddressType : uint8_t { kIpv4, kIpv6, kFqdn };

struct Endpoint {
  IpAddress addr;  // addresses[0]: the only one a proxy uses (the API's own rule)
  // conditions: ready unset is ready; serving unset is serving; terminating unset is not.
  bool ready = true, serving = true, terminating = false;
  std::string node_name, zone;
  std::vector<std::string> zone_hints, node_hints;  // hints.forZones / forNodes
  bool operator==(const Endpoint&) const = default;
};

struct SlicePort {
  std::string name;
  Proto proto = Proto::kTcp;
  uint16_t port = 0;
  bool operator==(const SlicePort&) const = default;
};

struct EndpointSlice {
  std::string ns, name;
  std::string service;  // the kubernetes.io/service-name label
  AddressType address_type = AddressType::kIpv4;
  std::vector<Endpoint> endpoints;  // those without an address are dropped
  std::vector<SlicePort> ports;     // those without a port number are dropped
  std::string skip;                 // as Service::skip (FQDN slices too)

  std::string Key() const { return ns + "/" + name; }
  std::string ServiceKey() const { return ns + "/" + service; }
  bool operator==(const EndpointSlice&) const = default;
};

// The object as the API (a list item or a watch event's object) holds it.
// Errors (kMalformed, control plane) name the object and the field:
// `Service default/web: spec.ports[1].port: 70000 is not a port`.
Result<Service> DecodeService(const nlohmann::json& obj);
Result<EndpointSlice> DecodeEndpointSlice(const nlohmann::json& obj);
// Whether a Service owns the slice (a non-empty kubernetes.io/service-name
// label). One without is not malformed, only no proxy's concern: the
// controller leaves it out silently (DecodeEndpointSlice refuses it).
bool HasServiceNameLabel(const nlohmann::json& slice);
// The same from JSON text.
Result<Service> ParseService(std::string_view text);
Result<EndpointSlice> ParseEndpointSlice(std::string_view text);

}  // namespace weft::services
