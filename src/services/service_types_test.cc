#include "services/service_types.h"

#include <gtest/gtest.h>

#include "services/test_objects.h"

namespace weft::services {
namespace {

using testing::json;

TEST(ServiceDecode, EveryFieldTheProxyReads) {
  json j = testing::ServiceJson("default", "web", {"10.96.0.10", "fd00:96::10"},
                                json::array({{{"name", "http"}, {"port", 80}, {"targetPort", "web"}, {"nodePort", 30080}},
                                             {{"name", "dns"}, {"protocol", "UDP"}, {"port", 53}},
                                             {{"name", "s"}, {"protocol", "SCTP"}, {"port", 9}, {"targetPort", 99}}}));
  j["spec"]["type"] = "LoadBalancer";
  j["spec"]["externalIPs"] = {"192.0.2.7"};
  j["spec"]["sessionAffinity"] = "ClientIP";
  j["spec"]["internalTrafficPolicy"] = "Local";
  j["spec"]["externalTrafficPolicy"] = "Local";
  j["spec"]["healthCheckNodePort"] = 31000;
  j["spec"]["trafficDistribution"] = "PreferSameNode";
  j["status"]["loadBalancer"]["ingress"] = {{{"ip", "198.51.100.1"}}, {{"hostname", "lb.example"}}};
  auto s = DecodeService(j);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->Key(), "default/web");
  EXPECT_EQ(s->type, ServiceType::kLoadBalancer);
  ASSERT_EQ(s->cluster_ips.size(), 2u);
  EXPECT_EQ(s->cluster_ips[1].ToString(), "fd00:96::10");
  ASSERT_EQ(s->ports.size(), 3u);
  EXPECT_EQ(s->ports[0].proto, Proto::kTcp);  // the API's default
  EXPECT_EQ(s->ports[0].node_port, 30080);
  EXPECT_EQ(s->ports[0].target_port_name, "web");
  EXPECT_EQ(s->ports[1].proto, Proto::kUdp);
  EXPECT_EQ(s->ports[1].target_port, 53);  // unset: the port
  EXPECT_EQ(s->ports[2].proto, Proto::kSctp);
  EXPECT_EQ(s->ports[2].target_port, 99);
  ASSERT_EQ(s->external_ips.size(), 1u);
  ASSERT_EQ(s->lb_ips.size(), 1u);  // the hostname-only ingress has no address
  EXPECT_EQ(s->lb_ips[0].ToString(), "198.51.100.1");
  EXPECT_TRUE(s->affinity_client_ip);
  EXPECT_EQ(s->affinity_timeout, 10800u);  // the default
  EXPECT_TRUE(s->InternalLocal());
  EXPECT_TRUE(s->ExternalLocal());
  EXPECT_EQ(s->health_check_node_port, 31000);
  EXPECT_EQ(s->traffic_distribution, TrafficDistribution::kPreferSameNode);
  EXPECT_EQ(s->skip, "");

  j["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] = 60;
  EXPECT_EQ(DecodeService(j)->affinity_timeout, 60u);
  // eTP Local on a Service nothing reaches from outside is no Local policy.
  json plain = testing::ServiceJson("default", "p", {"10.96.0.11"});
  plain["spec"]["externalTrafficPolicy"] = "Local";
  EXPECT_FALSE(DecodeService(plain)->ExternalLocal());
  // Only clusterIP (an object from before dual-stack).
  json old = testing::ServiceJson("default", "o", {});
  old["spec"]["clusterIP"] = "10.96.0.12";
  old["spec"].erase("clusterIPs");
  ASSERT_EQ(DecodeService(old)->cluster_ips.size(), 1u);
}

TEST(ServiceDecode, WhatTheProxyLeavesAloneIsMarkedSkipped) {
  json headless = testing::ServiceJson("default", "h", {"None"});
  EXPECT_EQ(DecodeService(headless)->skip, "headless (clusterIP None)");
  json labelled = testing::ServiceJson("default", "l", {"10.96.0.1"});
  labelled["metadata"]["labels"][kHeadlessLabel] = "";
  EXPECT_EQ(DecodeService(labelled)->skip, std::string("label ") + kHeadlessLabel);
  json other = testing::ServiceJson("default", "x", {"10.96.0.1"});
  other["metadata"]["labels"][kProxyNameLabel] = "someone-else";
  EXPECT_EQ(DecodeService(other)->skip, std::string("label ") + kProxyNameLabel);
  json ext = {{"metadata", {{"namespace", "default"}, {"name", "e"}}},
              {"spec", {{"type", "ExternalName"}, {"externalName", "example.com"}}}};
  EXPECT_EQ(DecodeService(ext)->skip, "type ExternalName");
}

TEST(ServiceDecode, BadInputIsAnErrorNamingTheField) {
  auto err = [](json j) {
    auto s = DecodeService(j);
    EXPECT_FALSE(s.ok());
    return s.ok() ? std::string() : s.status().ToString();
  };
  json j = testing::ServiceJson("default", "web", {"10.96.0.10"});
  j["spec"]["ports"][0]["port"] = 70000;
  EXPECT_NE(err(j).find("Service default/web: spec.ports[0].port: 70000 is not an integer in [1, 65535]"),
            std::string::npos)
      << err(j);
  j = testing::ServiceJson("default", "web", {"10.96.0.10"});
  j["spec"]["ports"][0]["protocol"] = "ICMP";
  EXPECT_NE(err(j).find("spec.ports[0].protocol: unknown protocol \"ICMP\""), std::string::npos) << err(j);
  j = testing::ServiceJson("default", "web", {"10.96.0.300"});
  EXPECT_NE(err(j).find("spec.clusterIPs[0]: \"10.96.0.300\" is not an IP address"), std::string::npos) << err(j);
  j = testing::ServiceJson("default", "web", {"10.96.0.1", "10.96.0.2"});
  EXPECT_NE(err(j).find("two addresses of one family"), std::string::npos) << err(j);
  j = testing::ServiceJson("default", "web", {"10.96.0.1"});
  j["spec"]["externalTrafficPolicy"] = "Sometimes";
  EXPECT_NE(err(j).find("spec.externalTrafficPolicy: unknown policy \"Sometimes\""), std::string::npos) << err(j);
  j = testing::ServiceJson("default", "web", {"10.96.0.1"});
  j["metadata"].erase("name");
  EXPECT_NE(err(j).find("metadata.name: missing"), std::string::npos) << err(j);
  auto text = ParseService("{not json");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().reason(), Reason::kMalformed);
}

TEST(SliceDecode, ConditionsHintsAndPorts) {
  json j = testing::SliceJson("default", "web", "web-1",
                              {{.ip = "10.0.1.5", .zones = {"a"}, .nodes = {"n1"}},
                               {.ip = "10.0.2.5", .ready = false, .serving = true, .terminating = true}},
                              json::array({{{"name", "http"}, {"port", 8080}}, {{"name", "all"}}}));
  j["endpoints"][0].erase("conditions");  // unset: ready and serving, not terminating
  j["endpoints"][0]["zone"] = "a";
  j["endpoints"].push_back({{"addresses", json::array()}});  // no address: dropped
  auto s = DecodeEndpointSlice(j);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->ServiceKey(), "default/web");
  ASSERT_EQ(s->endpoints.size(), 2u);
  EXPECT_TRUE(s->endpoints[0].ready && s->endpoints[0].serving && !s->endpoints[0].terminating);
  EXPECT_EQ(s->endpoints[0].zone, "a");
  EXPECT_EQ(s->endpoints[0].zone_hints, std::vector<std::string>{"a"});
  EXPECT_EQ(s->endpoints[0].node_hints, std::vector<std::string>{"n1"});
  EXPECT_TRUE(!s->endpoints[1].ready && s->endpoints[1].serving && s->endpoints[1].terminating);
  ASSERT_EQ(s->ports.size(), 1u);  // a port without a number is none a proxy can use
  EXPECT_EQ(s->ports[0].proto, Proto::kTcp);

  json fqdn = testing::SliceJson("default", "web", "web-f", {}, json::array(), "FQDN");
  EXPECT_EQ(DecodeEndpointSlice(fqdn)->skip, "addressType FQDN");
  json other = testing::SliceJson("default", "web", "web-o", {{.ip = "10.0.1.5"}});
  other["metadata"]["labels"][kProxyNameLabel] = "x";
  EXPECT_FALSE(DecodeEndpointSlice(other)->skip.empty());
}

TEST(SliceDecode, BadInputIsAnErrorNamingTheField) {
  json j = testing::SliceJson("default", "web", "web-1", {{.ip = "fd00::5"}}, json::array(), "IPv4");
  auto s = DecodeEndpointSlice(j);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().ToString().find("EndpointSlice default/web-1: endpoints[0].addresses[0]: fd00::5 is not of the "
                                       "slice's addressType IPv4"),
            std::string::npos)
      << s.status().ToString();
  j = testing::SliceJson("default", "web", "web-1", {{.ip = "10.0.0.1"}});
  j["metadata"]["labels"].erase(kServiceNameLabel);
  EXPECT_FALSE(DecodeEndpointSlice(j).ok());
  j = testing::SliceJson("default", "web", "web-1", {{.ip = "10.0.0.1"}});
  j["endpoints"][0]["conditions"]["ready"] = "yes";
  s = DecodeEndpointSlice(j);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().ToString().find("endpoints[0].conditions.ready: not a boolean"), std::string::npos);
  j = testing::SliceJson("default", "web", "web-1", {{.ip = "10.0.0.1"}});
  j["addressType"] = "IPX";
  EXPECT_FALSE(DecodeEndpointSlice(j).ok());
}

}  // namespace
}  // namespace weft::services
