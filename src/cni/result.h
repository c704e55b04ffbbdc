#pragma once
// The CNI result model (a superset: spec 1.1.0) and its conversion to and
// from every result version from 0.1.0 to 1.1.0.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/status.h"

namespace weft::cni {

struct Interface {
  std::string name;
  std::string mac;
  std::optional<int> mtu;   // 1.1.0
  std::string sandbox;      // set for container-side interfaces
  std::string socket_path;  // 1.1.0
  std::string pci_id;       // 1.1.0
  bool operator==(const Interface&) const = default;
};

struct IpConfig {
  IpPrefix address;  // the address with the prefix length of its subnet
  std::optional<IpAddress> gateway;
  std::optional<int> interface;  // index into interfaces
  bool operator==(const IpConfig&) const = default;
};

struct Route {
  IpPrefix dst;
  std::optional<IpAddress> gw;
  // 1.1.0 route attributes.
  std::optional<int> mtu, advmss, priority, table, scope;
  bool operator==(const Route&) const = default;
};

struct Dns {
  std::vector<std::string> nameservers;
  std::string domain;
  std::vector<std::string> search;
  std::vector<std::string> options;
  bool empty() const { return nameservers.empty() && domain.empty() && search.empty() && options.empty(); }
  bool operator==(const Dns&) const = default;
};

struct CniResult {
  std::string cni_version;  // version it was decoded from, if any
  std::vector<Interface> interfaces;
  std::vector<IpConfig> ips;
  std::vector<Route> routes;
  Dns dns;
  bool operator==(const CniResult&) const = default;
};

// Prints `r` in the shape of `version`. Unsupported when unknown.
Result<nlohmann::json> EncodeResult(const CniResult& r, const std::string& version);
// Reads a result of any supported version; `fallback_version` is used when
// the object has no cniVersion (prevResult inside a config). Errors: malformed.
Result<CniResult> DecodeResult(const nlohmann::json& j, const std::string& fallback_version);

Result<Dns> DecodeDns(const nlohmann::json& j);
nlohmann::json EncodeDns(const Dns& d);

}  // namespace weft::cni
