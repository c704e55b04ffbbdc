// The healthCheckNodePort answer (kube-proxy's service_health.go), without
// root: status codes, the body byte for byte, the headers. The servers
// themselves are tested in a network namespace
// (tests/integration/agent/health_server_test.cc).
#include "services/health_server.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "services/test_objects.h"

namespace weft::services {
namespace {

using testing::Ep;
using testing::SliceJson;

// An eTP Local LoadBalancer default/lb with ports http (80) and https (443).
nlohmann::json LocalLb(std::vector<std::string> ips = {"10.96.0.10"}) {
  auto j = testing::ServiceJson("default", "lb", ips,
                                nlohmann::json::array({{{"name", "http"}, {"protocol", "TCP"}, {"port", 80}},
                                                       {{"name", "https"}, {"protocol", "TCP"}, {"port", 443}}}));
  j["spec"]["type"] = "LoadBalancer";
  j["spec"]["externalTrafficPolicy"] = "Local";
  j["spec"]["healthCheckNodePort"] = 31000;
  return j;
}

const nlohmann::json kBothPorts = nlohmann::json::array(
    {{{"name", "http"}, {"protocol", "TCP"}, {"port", 8080}}, {{"name", "https"}, {"protocol", "TCP"}, {"port", 8443}}});

std::optional<std::pair<uint16_t, HealthCheck>> Check(const nlohmann::json& svc,
                                                      const std::vector<nlohmann::json>& slices) {
  std::vector<EndpointSlice> decoded;
  for (const auto& j : slices) {
    auto s = DecodeEndpointSlice(j);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) decoded.push_back(*s);
  }
  std::vector<const EndpointSlice*> ptrs;
  for (const auto& s : decoded) ptrs.push_back(&s);
  return HealthCheckOf(testing::Decoded(svc), ptrs, NodeTopology{"n1", ""});
}

// kube-proxy's LocalReadyEndpoints: this node's ready endpoints, by address
// across the ports; terminating and other nodes' ones do not count.
TEST(HealthCheckOf, CountsThisNodesReadyEndpointsByAddress) {
  auto c = Check(LocalLb(), {SliceJson("default", "lb", "lb-a",
                                       {{.ip = "10.244.1.5", .node = "n1"},
                                        {.ip = "10.244.1.6", .node = "n1"},
                                        {.ip = "10.244.2.5"},  // another node's
                                        {.ip = "10.244.1.7", .ready = false, .terminating = true, .node = "n1"},
                                        {.ip = "10.244.1.8", .ready = false, .serving = false, .node = "n1"}},
                                       kBothPorts)});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->first, 31000);
  EXPECT_EQ(c->second, (HealthCheck{"default", "lb", 2}));
  // Only a terminating local endpoint left (the proxy still sends it
  // traffic): none counts, so the check fails and the balancer drains the node.
  c = Check(LocalLb(), {SliceJson("default", "lb", "lb-a",
                                  {{.ip = "10.244.1.7", .ready = false, .terminating = true, .node = "n1"},
                                   {.ip = "10.244.2.5"}},
                                  kBothPorts)});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->second.local_endpoints, 0);
  EXPECT_EQ(ServiceHealthAnswer(c->second).code, 503);
  // A slice port no service port names gives no endpoint.
  c = Check(LocalLb(), {SliceJson("default", "lb", "lb-a", {{.ip = "10.244.1.5", .node = "n1"}},
                                  nlohmann::json::array({{{"name", "metrics"}, {"protocol", "TCP"}, {"port", 9090}}}))});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->second.local_endpoints, 0);
}

TEST(HealthCheckOf, DualStackPodsCountOnce) {
  auto c = Check(LocalLb({"10.96.0.10", "fd00:96::10"}),
                 {SliceJson("default", "lb", "lb-4", {{.ip = "10.244.1.5", .node = "n1"}, {.ip = "10.244.1.6", .node = "n1"}},
                            kBothPorts),
                  SliceJson("default", "lb", "lb-6", {{.ip = "fd00:244:1::5", .node = "n1"}, {.ip = "fd00:244:1::6", .node = "n1"}},
                            kBothPorts)});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->second.local_endpoints, 2);
}

TEST(HealthCheckOf, OnlyServicesWhoseLocalPolicyCountsHaveOne) {
  const auto slice = SliceJson("default", "lb", "lb-a", {{.ip = "10.244.1.5", .node = "n1"}}, kBothPorts);
  EXPECT_TRUE(Check(LocalLb(), {slice}));
  auto cluster = LocalLb();
  cluster["spec"]["externalTrafficPolicy"] = "Cluster";
  EXPECT_FALSE(Check(cluster, {slice}));
  auto no_port = LocalLb();
  no_port["spec"].erase("healthCheckNodePort");
  EXPECT_FALSE(Check(no_port, {slice}));
  auto internal = LocalLb();  // a ClusterIP Service: eTP does not apply
  internal["spec"]["type"] = "ClusterIP";
  EXPECT_FALSE(Check(internal, {slice}));
  auto other_proxy = LocalLb();
  other_proxy["metadata"]["labels"][kProxyNameLabel] = "someone-else";
  EXPECT_FALSE(Check(other_proxy, {slice}));
}

TEST(HealthAnswer, LocalEndpointsAre200AndNoneIs503) {
  EXPECT_EQ(ServiceHealthAnswer({"default", "web", 1}).code, 200);
  EXPECT_EQ(ServiceHealthAnswer({"default", "web", 3}).code, 200);
  // No ready local endpoint (none at all, or only terminating ones, which
  // the caller does not count): the load balancer must leave this node.
  EXPECT_EQ(ServiceHealthAnswer({"default", "web", 0}).code, 503);
  // An unhealthy proxy fails every check, as kube-proxy's does.
  EXPECT_EQ(ServiceHealthAnswer({"default", "web", 3}, false).code, 503);
}

TEST(HealthAnswer, BodyIsKubeProxysByteForByte) {
  // pkg/proxy/healthcheck: a tab-indented template, dedented, trimmed of
  // its newlines.
  EXPECT_EQ(ServiceHealthAnswer({"default", "web", 2}).body,
            "{\n"
            "\t\"service\": {\n"
            "\t\t\"namespace\": \"default\",\n"
            "\t\t\"name\": \"web\"\n"
            "\t},\n"
            "\t\"localEndpoints\": 2,\n"
            "\t\"serviceProxyHealthy\": true\n"
            "}");
  auto none = nlohmann::json::parse(ServiceHealthAnswer({"kube-system", "dns", 0}, false).body);
  EXPECT_EQ(none, nlohmann::json::parse(R"({"service": {"namespace": "kube-system", "name": "dns"},
                                            "localEndpoints": 0, "serviceProxyHealthy": false})"));
  // Whatever the names hold, the body stays JSON.
  auto odd = nlohmann::json::parse(ServiceHealthAnswer({"a\"b", "c\\d\n", 1}).body);
  EXPECT_EQ(odd["service"]["namespace"], "a\"b");
  EXPECT_EQ(odd["service"]["name"], "c\\d\n");
}

TEST(HealthAnswer, HeadersAreKubeProxys) {
  using Headers = std::vector<std::pair<std::string, std::string>>;
  for (int n : {0, 1})
    EXPECT_EQ(ServiceHealthAnswer({"default", "web", n}).headers,
              (Headers{{"Content-Type", "application/json"}, {"X-Content-Type-Options", "nosniff"}}));
}

TEST(HealthServer, NothingWantedOpensNothing) {
  HealthServer s;
  auto r = s.Sync({});
  EXPECT_TRUE(r.opened.empty());
  EXPECT_TRUE(r.closed.empty());
  EXPECT_TRUE(r.failed.empty());
  EXPECT_TRUE(s.States().empty());
  EXPECT_FALSE(s.StateOf("default", "web"));
}

}  // namespace
}  // namespace weft::services
