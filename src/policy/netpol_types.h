#pragma once
// NetworkPolicy's vocabulary (networking.k8s.io/v1) as plain values, and the
// decoding of the API server's JSON into them. Pure: no I/O.
//
// Decoding accepts both a defaulted object (as the API server stores it) and
// one without the server's defaults: policyTypes missing means Ingress, plus
// Egress when the policy has egress rules; a port's protocol missing means
// TCP; a Namespace without the kubernetes.io/metadata.name label gets it.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/ip.h"

namespace weft::policy::netpol {

using Labels = std::map<std::string, std::string>;

enum class Proto : uint8_t { kTcp = 6, kUdp = 17, kSctp = 132 };
// "TCP" "UDP" "SCTP" (as the API spells them).
std::optional<Proto> ParseProto(const std::string& s);
// "tcp" "udp" "sctp" (as nft spells them).
const char* NftProtoName(Proto p);

struct LabelRequirement {
  enum class Op { kIn, kNotIn, kExists, kDoesNotExist };
  std::string key;
  Op op = Op::kIn;
  std::vector<std::string> values;
  bool operator==(const LabelRequirement&) const = default;
};

// metav1.LabelSelector. Empty (no labels, no expressions) matches everything.
// An invalid selector (unknown operator, In/NotIn without values, values with
// Exists) matches nothing: callers that must fail closed check `valid`.
struct LabelSelector {
  std::map<std::string, std::string> match_labels;
  std::vector<LabelRequirement> expressions;
  bool valid = true;
  bool Matches(const Labels& labels) const;
  bool empty() const { return match_labels.empty() && expressions.empty(); }
  bool operator==(const LabelSelector&) const = default;
};

// ipBlock: cidr minus every except.
struct IpBlock {
  IpPrefix cidr;
  std::vector<IpPrefix> except;
  bool operator==(const IpBlock&) const = default;
};

// One entry of `from` / `to`. Exactly one of the shapes is set.
struct Peer {
  std::optional<LabelSelector> pod_selector;
  std::optional<LabelSelector> namespace_selector;
  std::optional<IpBlock> ip_block;
  bool operator==(const Peer&) const = default;
};

// One entry of `ports`. `port` 0 with an empty name means every port of the
// protocol; a name is resolved against the destination pod's containerPorts.
struct PortRef {
  Proto proto = Proto::kTcp;
  bool proto_valid = true;  // false: an unknown protocol (matches nothing)
  uint16_t port = 0;
  uint16_t end_port = 0;    // inclusive; 0 = just `port`
  std::string name;
  bool operator==(const PortRef&) const = default;
};

struct Rule {
  bool any_peer = true;  // `from`/`to` missing or empty
  std::vector<Peer> peers;
  bool any_port = true;  // `ports` missing or empty
  std::vector<PortRef> ports;
  bool operator==(const Rule&) const = default;
};

struct Policy {
  std::string ns;
  std::string name;
  LabelSelector pod_selector;
  bool isolates_ingress = true;
  bool isolates_egress = false;
  std::vector<Rule> ingress;
  std::vector<Rule> egress;
  std::string key() const { return ns + "/" + name; }
  bool operator==(const Policy&) const = default;
};

struct ContainerPort {
  std::string name;
  Proto proto = Proto::kTcp;
  uint16_t port = 0;
  bool operator==(const ContainerPort&) const = default;
};

struct Pod {
  std::string ns;
  std::string name;
  Labels labels;
  std::string node;
  std::vector<IpAddress> ips;  // status.podIPs (podIP when absent)
  bool host_network = false;
  bool terminal = false;       // phase Succeeded or Failed: its IP may belong to another pod
  std::vector<ContainerPort> ports;  // named container ports only
  std::string key() const { return ns + "/" + name; }
  // Takes part in policy at all: has an address of its own and is running.
  bool Addressable() const { return !host_network && !terminal && !ips.empty(); }
  // The port number `name`/`proto` resolves to on this pod (0 = none).
  uint16_t ResolvePort(const std::string& name, Proto proto) const;
  bool operator==(const Pod&) const = default;
};

// Pods are shared between the informer's cache and the engine, never
// copied between them.
using PodPtr = std::shared_ptr<const Pod>;
// The informer cache's value: a shared Pod compared by value (the cache
// reports a change only when the decoded object differs).
struct SharedPod {
  PodPtr pod;
  bool operator==(const SharedPod& o) const { return pod == o.pod || (pod && o.pod && *pod == *o.pod); }
};

struct Namespace {
  std::string name;
  Labels labels;
  bool operator==(const Namespace&) const = default;
};

// Decoders for the informers' caches; nullopt for an object without a name.
std::optional<Policy> DecodePolicy(const nlohmann::json& obj);
std::optional<Pod> DecodePod(const nlohmann::json& obj);
std::optional<SharedPod> DecodeSharedPod(const nlohmann::json& obj);
std::optional<Namespace> DecodeNamespace(const nlohmann::json& obj);
LabelSelector DecodeSelector(const nlohmann::json& obj);

// The label every namespace carries (the API server sets it).
inline constexpr char kNamespaceNameLabel[] = "kubernetes.io/metadata.name";

}  // namespace weft::policy::netpol
