#pragma once
// For tests only (the policy unit tests and the netns tests that drive the
// engine): a Pod from its parts, as the informer would decode it.

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "base/ip.h"
#include "policy/netpol_types.h"

namespace weft::policy::netpol::test_util {

// A pod's addresses as text: "10.0.0.1", {"10.0.0.1", "fd00::1"}, or ""
// for a pod without an address yet.
struct Ips {
  std::vector<std::string> list;
  Ips(const char* ip) {  // NOLINT(google-explicit-constructor): the point is brevity
    if (*ip != '\0') list.emplace_back(ip);
  }
  Ips(const std::string& ip) {  // NOLINT(google-explicit-constructor)
    if (!ip.empty()) list.push_back(ip);
  }
  Ips(std::initializer_list<const char*> ips) : list(ips.begin(), ips.end()) {}
};

inline Pod MakePod(const std::string& ns, const std::string& name, Labels labels, const std::string& node,
                   const Ips& ips, std::vector<ContainerPort> ports = {}) {
  Pod p;
  p.ns = ns;
  p.name = name;
  p.labels = std::move(labels);
  p.node = node;
  for (const auto& ip : ips.list) p.ips.push_back(*IpAddress::Parse(ip));
  p.ports = std::move(ports);
  return p;
}

}  // namespace weft::policy::netpol::test_util
