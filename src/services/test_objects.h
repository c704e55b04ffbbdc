#pragma once
// Services and EndpointSlices for the unit tests, built as the API server
// returns them (JSON) and decoded the way the proxy will decode them.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "services/service_types.h"

namespace weft::services::testing {

using nlohmann::json;

// A Service "ns/name" with clusterIPs `ips` and ports [{name, protocol, port, targetPort}] ("TCP" port 80 -> 8080).
inline json ServiceJson(const std::string& ns, const std::string& name, std::vector<std::string> ips,
                        json ports = json::array({{{"name", "http"}, {"protocol", "TCP"}, {"port", 80},
                                                   {"targetPort", 8080}}})) {
  return {{"metadata", {{"namespace", ns}, {"name", name}}},
          {"spec", {{"type", "ClusterIP"}, {"clusterIP", ips.empty() ? "" : ips[0]}, {"clusterIPs", ips},
                    {"ports", ports}}}};
}

inline Service Decoded(const json& j) {
  auto s = DecodeService(j);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : Service{};
}

struct Ep {
  std::string ip;
  bool ready = true, serving = true, terminating = false;
  std::string node = "n2";
  std::vector<std::string> zones = {}, nodes = {};
};

// A slice of Service ns/service named `name` (address type from the first endpoint), ports [{name, protocol, port}].
inline json SliceJson(const std::string& ns, const std::string& service, const std::string& name,
                      const std::vector<Ep>& eps, json ports = json::array({{{"name", "http"}, {"protocol", "TCP"},
                                                                             {"port", 8080}}}),
                      const std::string& type = "") {
  json list = json::array();
  for (const auto& e : eps) {
    json ep = {{"addresses", {e.ip}},
               {"conditions", {{"ready", e.ready}, {"serving", e.serving}, {"terminating", e.terminating}}},
               {"nodeName", e.node}};
    json hints = json::object();
    for (const auto& z : e.zones) hints["forZones"].push_back({{"name", z}});
    for (const auto& n : e.nodes) hints["forNodes"].push_back({{"name", n}});
    if (!hints.empty()) ep["hints"] = hints;
    list.push_back(ep);
  }
  std::string t = type;
  if (t.empty()) t = !eps.empty() && eps[0].ip.find(':') != std::string::npos ? "IPv6" : "IPv4";
  return {{"metadata", {{"namespace", ns}, {"name", name}, {"labels", {{kServiceNameLabel, service}}}}},
          {"addressType", t},
          {"endpoints", list},
          {"ports", ports}};
}

inline EndpointSlice DecodedSlice(const json& j) {
  auto s = DecodeEndpointSlice(j);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : EndpointSlice{};
}

}  // namespace weft::services::testing
