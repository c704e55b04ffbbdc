#include "services/endpoints.h"

#include <gtest/gtest.h>

#include "services/test_objects.h"

namespace weft::services {
namespace {

using testing::Ep;
using testing::json;

const NodeTopology kNode{"n1", "zone-a"};

std::vector<std::string> Keys(const std::vector<PortEndpoint>& eps) {
  std::vector<std::string> out;
  for (const auto& e : eps) out.push_back(e.Key());
  return out;
}

struct Fixture {
  Service svc = testing::Decoded(testing::ServiceJson("default", "web", {"10.96.0.10", "fd00:96::10"}));
  std::vector<EndpointSlice> slices;
  std::vector<PortEndpoint> Merged(bool v6 = false, size_t port = 0) {
    std::vector<const EndpointSlice*> p;
    for (const auto& s : slices) p.push_back(&s);
    return MergeEndpoints(p, svc.ports[port], v6, kNode);
  }
  Categorized Cat(bool v6 = false) { return CategorizeEndpoints(Merged(v6), svc, kNode); }
};

TEST(Endpoints, ReadyFirstThenServingTerminating) {
  Fixture f;
  f.slices.push_back(testing::DecodedSlice(testing::SliceJson(
      "default", "web", "web-1",
      {{.ip = "10.0.1.1"}, {.ip = "10.0.1.2", .ready = false, .serving = true, .terminating = true},
       {.ip = "10.0.1.3", .ready = false, .serving = false, .terminating = true}, {.ip = "10.0.1.4", .ready = false}})));
  Categorized c = f.Cat();
  EXPECT_EQ(Keys(c.cluster), std::vector<std::string>{"10.0.1.1:8080"});
  EXPECT_EQ(Keys(c.reachable), std::vector<std::string>{"10.0.1.1:8080"});
  EXPECT_TRUE(c.has_any);
  EXPECT_TRUE(c.local.empty());  // the Service never uses Local policy
  // The ready one gone: the serving terminating one (not the one that stopped serving).
  f.slices[0].endpoints.erase(f.slices[0].endpoints.begin());
  c = f.Cat();
  EXPECT_EQ(Keys(c.cluster), std::vector<std::string>{"10.0.1.2:8080"});
  EXPECT_TRUE(c.has_any);
  // Neither: nothing, and nothing anywhere.
  f.slices[0].endpoints.erase(f.slices[0].endpoints.begin());
  c = f.Cat();
  EXPECT_TRUE(c.cluster.empty());
  EXPECT_FALSE(c.has_any);
}

TEST(Endpoints, LocalPolicyTakesThisNodesEndpoints) {
  Fixture f;
  f.svc.internal_policy = TrafficPolicy::kLocal;
  f.slices.push_back(testing::DecodedSlice(testing::SliceJson(
      "default", "web", "web-1", {{.ip = "10.0.1.1", .node = "n1"}, {.ip = "10.0.2.1", .node = "n2"}})));
  Categorized c = f.Cat();
  EXPECT_EQ(Keys(c.local), std::vector<std::string>{"10.0.1.1:8080"});
  EXPECT_TRUE(c.cluster.empty());  // iTP Local, not externally accessible: no Cluster policy
  EXPECT_EQ(Keys(c.reachable), std::vector<std::string>{"10.0.1.1:8080"});
  // No local endpoint: none local, but endpoints exist elsewhere.
  f.slices[0].endpoints.erase(f.slices[0].endpoints.begin());
  c = f.Cat();
  EXPECT_TRUE(c.local.empty());
  EXPECT_TRUE(c.has_any);
  // A local one only terminating: it serves Local policy.
  f.slices[0].endpoints.push_back(Endpoint{*IpAddress::Parse("10.0.1.9"), false, true, true, "n1", "", {}, {}});
  c = f.Cat();
  EXPECT_EQ(Keys(c.local), std::vector<std::string>{"10.0.1.9:8080"});
}

TEST(Endpoints, ExternalLocalUsesBothAndTheUnionIsReachable) {
  Fixture f;
  f.svc.type = ServiceType::kNodePort;
  f.svc.external_policy = TrafficPolicy::kLocal;
  f.slices.push_back(testing::DecodedSlice(testing::SliceJson(
      "default", "web", "web-1",
      {{.ip = "10.0.1.1", .ready = false, .serving = true, .terminating = true, .node = "n1"},
       {.ip = "10.0.2.1", .node = "n2"}})));
  Categorized c = f.Cat();
  EXPECT_EQ(Keys(c.cluster), std::vector<std::string>{"10.0.2.1:8080"});
  EXPECT_EQ(Keys(c.local), std::vector<std::string>{"10.0.1.1:8080"});  // terminating, but this node's
  EXPECT_EQ(Keys(c.reachable), (std::vector<std::string>{"10.0.1.1:8080", "10.0.2.1:8080"}));
}

TEST(Endpoints, TopologyHints) {
  Fixture f;
  f.slices.push_back(testing::DecodedSlice(testing::SliceJson(
      "default", "web", "web-1",
      {{.ip = "10.0.1.1", .zones = {"zone-a"}, .nodes = {"n1"}}, {.ip = "10.0.1.2", .zones = {"zone-a"}, .nodes = {"n2"}},
       {.ip = "10.0.1.3", .zones = {"zone-b"}, .nodes = {"n3"}}})));
  // Every ready endpoint has node hints and one names n1: PreferSameNode.
  EXPECT_EQ(Keys(f.Cat().cluster), std::vector<std::string>{"10.0.1.1:8080"});
  // One without a node hint: the zone's.
  f.slices[0].endpoints[2].node_hints.clear();
  EXPECT_EQ(Keys(f.Cat().cluster), (std::vector<std::string>{"10.0.1.1:8080", "10.0.1.2:8080"}));
  // One without a zone hint too: every ready endpoint.
  f.slices[0].endpoints[2].zone_hints.clear();
  EXPECT_EQ(f.Cat().cluster.size(), 3u);
  // Hints, but none for this node's zone: ignored.
  for (auto& e : f.slices[0].endpoints) e.zone_hints = {"zone-b"}, e.node_hints.clear();
  EXPECT_EQ(f.Cat().cluster.size(), 3u);
}

TEST(Endpoints, SlicesMergeByAddressAndPortAndNamedPorts) {
  Fixture f;
  f.svc = testing::Decoded(testing::ServiceJson(
      "default", "web", {"10.96.0.10"},
      json::array({{{"name", "http"}, {"port", 80}, {"targetPort", "web"}},
                   {{"name", "dns"}, {"protocol", "UDP"}, {"port", 53}}})));
  const json ports = json::array({{{"name", "http"}, {"port", 8080}}, {{"name", "dns"}, {"protocol", "UDP"}, {"port", 5353}},
                                  {{"name", "http"}, {"protocol", "UDP"}, {"port", 9}}});
  f.slices.push_back(testing::DecodedSlice(testing::SliceJson("default", "web", "web-b",
                                                              {{.ip = "10.0.1.1", .node = "n1"}, {.ip = "10.0.1.2"}}, ports)));
  f.slices.push_back(testing::DecodedSlice(testing::SliceJson("default", "web", "web-a",
                                                              {{.ip = "10.0.1.2", .ready = false}, {.ip = "10.0.1.1", .ready = false}},
                                                              ports)));
  f.slices.push_back(testing::DecodedSlice(testing::SliceJson("default", "web", "web-6", {{.ip = "fd00::1"}}, ports)));
  // The named target port: the slice's port of the same name and protocol.
  auto http = f.Merged(false, 0);
  ASSERT_EQ(Keys(http), (std::vector<std::string>{"10.0.1.1:8080", "10.0.1.2:8080"}));
  // In two slices: web-a (first by name) wins, except that web-b's is local.
  EXPECT_TRUE(http[0].ready && http[0].local);
  EXPECT_FALSE(http[1].ready);
  EXPECT_EQ(Keys(f.Merged(false, 1)), (std::vector<std::string>{"10.0.1.1:5353", "10.0.1.2:5353"}));
  EXPECT_EQ(Keys(f.Merged(true, 0)), std::vector<std::string>{"[fd00::1]:8080"});
}

}  // namespace
}  // namespace weft::services
