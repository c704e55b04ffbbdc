// proxy_explain.h: what `weftctl service explain` says a packet meets, read
// from the objects the Model writes (no root).

#include "services/proxy_explain.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "services/test_objects.h"

namespace weft::services {
namespace {

using testing::Decoded;
using testing::DecodedSlice;
using testing::Ep;
using testing::ServiceJson;
using testing::SliceJson;

Model NodeModel() {
  Config cfg;
  cfg.node.node_name = "n1";
  cfg.cluster_cidrs = {*IpPrefix::Parse("10.244.0.0/16")};
  return Model(cfg);
}

TEST(ServiceExplain, TwoEndpointsWithAffinity) {
  Model m = NodeModel();
  auto web = ServiceJson("default", "web", {"10.96.0.10"});
  web["spec"]["sessionAffinity"] = "ClientIP";
  web["spec"]["sessionAffinityConfig"] = {{"clientIP", {{"timeoutSeconds", 600}}}};
  (void)m.UpsertService(Decoded(web));
  (void)m.UpsertSlice(DecodedSlice(SliceJson("default", "web", "web-1",
                                             {{.ip = "10.244.1.5", .node = "n1"},
                                              {.ip = "10.244.2.5", .ready = false, .serving = true,
                                               .terminating = true}})));
  (void)m.UpsertSlice(DecodedSlice(SliceJson("default", "web", "web-2", {{.ip = "10.244.2.6"}})));
  auto e = Explain(m, "default/web");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(e->affinity_client_ip);
  EXPECT_EQ(e->affinity_timeout, 600u);
  EXPECT_EQ(e->internal_traffic_policy, "Cluster");
  ASSERT_EQ(e->ports.size(), 1u);
  const ExplainPort& p = e->ports[0];
  EXPECT_EQ(p.port_name, "default/web/tcp/http");
  EXPECT_TRUE(p.has_endpoints);
  // Ready ones only while some are ready: the terminating one has no chain.
  ASSERT_EQ(p.endpoints.size(), 2u);
  EXPECT_EQ(p.endpoints[0].addr, "10.244.1.5");
  EXPECT_TRUE(p.endpoints[0].local);
  EXPECT_TRUE(p.endpoints[0].cluster);
  EXPECT_FALSE(p.endpoints[0].local_policy);
  EXPECT_EQ(p.endpoints[1].addr, "10.244.2.6");
  EXPECT_FALSE(p.endpoints[1].local);
  EXPECT_EQ(p.endpoints[0].chain, ChainName("ep", false, "default/web/tcp/http", "10.244.1.5/8080"));
  EXPECT_EQ(p.endpoints[0].affinity_set, ChainName("aff", false, "default/web/tcp/http", "10.244.1.5/8080"));
  ASSERT_EQ(p.paths.size(), 1u);
  const ExplainPath& path = p.paths[0];
  EXPECT_EQ(path.kind, "ClusterIP");
  EXPECT_EQ(path.address, "10.96.0.10");
  EXPECT_EQ(path.verdict, "dnat");
  EXPECT_EQ(path.endpoints, (std::vector<std::string>{"10.244.1.5:8080", "10.244.2.6:8080"}));
  ASSERT_EQ(path.steps.size(), 2u);
  EXPECT_EQ(path.steps[0].at, "map service-ips4");
  EXPECT_NE(path.steps[0].does.find("10.96.0.10 . tcp . 80 : goto svc4-"), std::string::npos) << path.steps[0].does;
  EXPECT_EQ(path.steps[1].at, "chain " + ChainName("svc", false, "default/web/tcp/http"));
  EXPECT_NE(path.steps[1].does.find("outside the cluster CIDR"), std::string::npos) << path.steps[1].does;
  EXPECT_NE(path.steps[1].does.find("affinity set (timeout 600 s)"), std::string::npos) << path.steps[1].does;
  EXPECT_NE(path.steps[1].does.find("one of 2 endpoint(s) at random"), std::string::npos) << path.steps[1].does;
  ASSERT_EQ(path.steps[1].rules.size(), 4u);  // masquerade, two affinity lookups, the pick
  EXPECT_NE(path.steps[1].rules[3].find("numgen random mod 2 vmap { 0 : goto ep4-"), std::string::npos);
  // svc chain and two endpoint chains; two affinity sets.
  EXPECT_EQ(p.chains.size(), 3u);
  EXPECT_EQ(p.sets.size(), 2u);

  auto j = nlohmann::json::parse(ExplanationJson(*e));
  EXPECT_EQ(j["sessionAffinity"], "ClientIP");
  EXPECT_EQ(j["ports"][0]["paths"][0]["verdict"], "dnat");
  EXPECT_EQ(j["ports"][0]["endpoints"][0]["local"], true);
}

TEST(ServiceExplain, NoEndpointsIsRejectedAndLocalWithoutLocalIsDropped) {
  Model m = NodeModel();
  auto idle = ServiceJson("default", "idle", {"10.96.0.11"});
  idle["spec"]["type"] = "NodePort";
  idle["spec"]["ports"][0]["nodePort"] = 30080;
  (void)m.UpsertService(Decoded(idle));
  auto e = Explain(m, "default/idle");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->ports.size(), 1u);
  const ExplainPort& p = e->ports[0];
  EXPECT_FALSE(p.has_endpoints);
  EXPECT_TRUE(p.endpoints.empty());
  ASSERT_EQ(p.paths.size(), 2u);
  EXPECT_EQ(p.paths[0].kind, "ClusterIP");
  EXPECT_EQ(p.paths[0].verdict, "reject");
  EXPECT_EQ(p.paths[1].kind, "NodePort");
  EXPECT_EQ(p.paths[1].port, 30080);
  EXPECT_EQ(p.paths[1].verdict, "reject");
  EXPECT_EQ(p.paths[1].steps.at(0).at, "map no-endpoint-nodeports4");

  // eTP Local with the only endpoint on another node: from outside dropped, while pods and the node are
  // short-circuited to the Cluster chain.
  idle["spec"]["externalTrafficPolicy"] = "Local";
  (void)m.UpsertService(Decoded(idle));
  (void)m.UpsertSlice(DecodedSlice(SliceJson("default", "idle", "idle-1", {{.ip = "10.244.2.7", .node = "n2"}})));
  e = Explain(m, "default/idle");
  ASSERT_TRUE(e.ok());
  const ExplainPort& q = e->ports.at(0);
  EXPECT_EQ(e->external_traffic_policy, "Local");
  EXPECT_EQ(q.paths.at(0).verdict, "dnat");
  const ExplainPath& np = q.paths.at(1);
  EXPECT_EQ(np.verdict, "dnat");  // the short-circuit DNATs pod and node traffic
  bool dropped = false;
  for (const auto& s : np.steps) dropped = dropped || s.at == "map no-endpoint-nodeports4";
  EXPECT_TRUE(dropped) << "the filter hooks drop the NodePort traffic from outside";
  EXPECT_EQ(np.endpoints, std::vector<std::string>{"10.244.2.7:8080"});
}

TEST(ServiceExplain, EveryDestinationHasItsPath) {
  Model m = NodeModel();
  auto lb = ServiceJson("default", "lb", {"10.96.0.12"});
  lb["spec"]["type"] = "LoadBalancer";
  lb["spec"]["ports"][0]["nodePort"] = 30081;
  lb["spec"]["externalIPs"] = {"192.0.2.7"};
  lb["status"] = {{"loadBalancer", {{"ingress", {{{"ip", "198.51.100.7"}}}}}}};
  (void)m.UpsertService(Decoded(lb));
  (void)m.UpsertSlice(DecodedSlice(SliceJson("default", "lb", "lb-1", {{.ip = "10.244.2.8"}})));
  auto e = Explain(m, "default/lb");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const ExplainPort& p = e->ports.at(0);
  std::vector<std::pair<std::string, std::string>> kinds;
  for (const auto& path : p.paths) {
    kinds.emplace_back(path.kind, path.address);
    EXPECT_EQ(path.verdict, "dnat") << path.kind;
    EXPECT_EQ(path.endpoints, std::vector<std::string>{"10.244.2.8:8080"}) << path.kind;
  }
  EXPECT_EQ(kinds, (std::vector<std::pair<std::string, std::string>>{{"ClusterIP", "10.96.0.12"},
                                                                      {"externalIP", "192.0.2.7"},
                                                                      {"LoadBalancer", "198.51.100.7"},
                                                                      {"NodePort", ""}}));
  // External traffic: the ext chain (masquerade), then the Cluster policy chain.
  const ExplainPath& np = p.paths.at(3);
  ASSERT_EQ(np.steps.size(), 3u);
  EXPECT_EQ(np.steps[1].at, "chain " + ChainName("ext", false, "default/lb/tcp/http"));
  EXPECT_EQ(np.steps[1].does, "mark for masquerade; then goto " + ChainName("svc", false, "default/lb/tcp/http"));
  EXPECT_EQ(np.steps[2].at, "chain " + ChainName("svc", false, "default/lb/tcp/http"));
}

TEST(ServiceExplain, UnknownSkippedAndBadKeys) {
  Model m = NodeModel();
  EXPECT_EQ(Explain(m, "default/none").status().reason(), Reason::kNotFound);
  auto headless = ServiceJson("default", "h", {});
  headless["spec"]["clusterIP"] = "None";
  headless["spec"]["clusterIPs"] = {"None"};
  (void)m.UpsertService(Decoded(headless));
  auto e = Explain(m, "default/h");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_NE(e->skip, "");
  EXPECT_TRUE(e->ports.empty());
  for (const char* bad : {"", "web", "/web", "default/", "a/b/c", "Default/web", "de fault/web"})
    EXPECT_EQ(ParseServiceKey(bad).status().reason(), Reason::kInvalidArgument) << bad;
  EXPECT_EQ(*ParseServiceKey("kube-system/kube-dns"), "kube-system/kube-dns");
}

}  // namespace
}  // namespace weft::services
