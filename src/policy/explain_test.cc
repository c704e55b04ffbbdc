#include "policy/explain.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace weft::policy::netpol {
namespace {

using nlohmann::json;

Pod MakePod(const std::string& ns, const std::string& name, const std::string& node, std::vector<std::string> ips,
            std::vector<ContainerPort> ports = {}) {
  Pod p;
  p.ns = ns;
  p.name = name;
  p.labels = {{"pod", name}};
  p.node = node;
  for (const auto& ip : ips) p.ips.push_back(*IpAddress::Parse(ip));
  p.ports = std::move(ports);
  return p;
}

Policy P(const std::string& text) {
  auto p = DecodePolicy(json::parse(text));
  EXPECT_TRUE(p.has_value());
  return *p;
}

class ExplainTest : public ::testing::Test {
 protected:
  ExplainTest() : engine_(EngineOptions{"n1"}) {
    for (const char* ns : {"x", "y"}) engine_.UpsertNamespace(Namespace{ns, {{"ns", ns}}});
    engine_.UpsertPod(MakePod("x", "a", "n1", {"10.0.1.1", "fd00::1:1"}, {{"serve-80-tcp", Proto::kTcp, 80}}));
    engine_.UpsertPod(MakePod("x", "b", "n2", {"10.0.2.1", "fd00::2:1"}, {{"serve-80-tcp", Proto::kTcp, 81}}));
    engine_.UpsertPod(MakePod("y", "a", "n2", {"10.0.2.2", "fd00::2:2"}));
  }

  Explanation Ask(const std::string& src, const std::string& dst, const std::string& port = "",
                  const std::string& family = "") {
    auto q = ParseExplainQuery(src, dst, port, family);
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    auto e = Explain(engine_, *q);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? *e : Explanation{};
  }

  Engine engine_;
};

TEST_F(ExplainTest, NoPolicyAllowsAndSaysNeitherSideIsIsolated) {
  Explanation e = Ask("x/b", "x/a", "80");
  EXPECT_TRUE(e.allowed);
  EXPECT_FALSE(e.egress.isolated);
  EXPECT_FALSE(e.ingress.isolated);
  EXPECT_EQ(e.reason, "neither side is isolated");
  EXPECT_EQ(e.src.ip, "10.0.2.1");
  EXPECT_EQ(e.dst.node, "n1");
}

TEST_F(ExplainTest, DenyAllNamesTheIsolatingPolicyAndNoRule) {
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"deny"},"spec":{"podSelector":{}}})"));
  Explanation e = Ask("y/a", "x/a", "80/tcp");
  EXPECT_FALSE(e.allowed);
  EXPECT_TRUE(e.egress.allowed);
  EXPECT_TRUE(e.ingress.isolated);
  EXPECT_EQ(e.ingress.policies, std::vector<std::string>{"x/deny"});
  EXPECT_TRUE(e.ingress.admitted_by.empty());
  EXPECT_EQ(e.reason, "the ingress of x/a is isolated by x/deny and no rule of it admits TCP 80");
  // The other direction: y/a is not isolated, x/a's egress is not either.
  EXPECT_TRUE(Ask("x/a", "y/a", "80").allowed);
}

TEST_F(ExplainTest, NamesTheAdmittingRuleAndItsPort) {
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"deny"},"spec":{"podSelector":{}}})"));
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"allow-y"},"spec":{
    "podSelector":{"matchLabels":{"pod":"a"}},
    "ingress":[{"from":[{"podSelector":{}}]},
               {"from":[{"namespaceSelector":{"matchLabels":{"ns":"y"}}}],"ports":[{"port":80,"endPort":85}]}]}})"));
  Explanation e = Ask("y/a", "x/a", "81");
  EXPECT_TRUE(e.allowed);
  ASSERT_EQ(e.ingress.admitted_by.size(), 1u);
  EXPECT_EQ(e.ingress.admitted_by[0].what, "x/allow-y ingress 1");
  EXPECT_EQ(e.ingress.admitted_by[0].ports, "TCP 80-85");
  EXPECT_EQ(e.ingress.policies, (std::vector<std::string>{"x/allow-y", "x/deny"}));
  EXPECT_EQ(e.reason, "admitted by x/allow-y ingress 1 (the source is not isolated for egress)");
  EXPECT_FALSE(Ask("y/a", "x/a", "86").allowed);
  EXPECT_FALSE(Ask("y/a", "x/a", "81/udp").allowed);
  // x/b matches rule 0 (pods of x, any port).
  EXPECT_EQ(Ask("x/b", "x/a", "9/udp").ingress.admitted_by.at(0).what, "x/allow-y ingress 0");
  // x/b is only under x/deny.
  EXPECT_FALSE(Ask("x/a", "x/b", "80").allowed);
}

TEST_F(ExplainTest, NamedPortsResolveOnTheDestination) {
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"eg"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
    "policyTypes":["Egress"],"egress":[{"ports":[{"port":"serve-80-tcp"}]}]}})"));
  // x/b's serve-80-tcp is 81.
  EXPECT_TRUE(Ask("x/a", "x/b", "81").allowed);
  EXPECT_FALSE(Ask("x/a", "x/b", "80").allowed);
  Explanation e = Ask("x/a", "x/b", "81");
  EXPECT_EQ(e.egress.admitted_by.at(0).ports, "TCP serve-80-tcp=81");
  // y/a has no such port; an outside address has none either.
  EXPECT_FALSE(Ask("x/a", "y/a", "80").allowed);
  EXPECT_FALSE(Ask("x/a", "192.0.2.9", "80").allowed);
}

TEST_F(ExplainTest, IpBlockWithExceptAndFamilies) {
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"blk"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
    "ingress":[{"from":[{"ipBlock":{"cidr":"10.0.0.0/16","except":["10.0.2.2/32"]}}]}]}})"));
  EXPECT_TRUE(Ask("x/b", "x/a", "80").allowed);          // 10.0.2.1
  EXPECT_FALSE(Ask("y/a", "x/a", "80").allowed);         // 10.0.2.2 excepted
  EXPECT_FALSE(Ask("x/b", "x/a", "80", "6").allowed);    // no IPv6 block
  EXPECT_TRUE(Ask("10.0.9.9", "x/a", "80").allowed);     // an address outside every pod
  Explanation e = Ask("10.0.9.9", "x/a", "80");
  EXPECT_TRUE(e.src.pod.empty());
  EXPECT_FALSE(e.egress.judged);
}

TEST_F(ExplainTest, AddressesResolveToPodsAndFamiliesMustAgree) {
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"deny"},"spec":{"podSelector":{}}})"));
  Explanation e = Ask("fd00::2:2", "fd00::1:1", "80");
  EXPECT_EQ(e.src.pod, "y/a");
  EXPECT_EQ(e.dst.pod, "x/a");
  EXPECT_EQ(e.family, 6);
  EXPECT_FALSE(e.allowed);
  auto q = ParseExplainQuery("fd00::2:2", "10.0.1.1", "80", "");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(Explain(engine_, *q).status().reason(), Reason::kInvalidArgument);
}

TEST_F(ExplainTest, ItselfIsAlwaysAllowed) {
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"deny"},"spec":{"podSelector":{},
    "policyTypes":["Ingress","Egress"]}})"));
  Explanation e = Ask("x/a", "10.0.1.1", "80");
  EXPECT_TRUE(e.allowed);
  EXPECT_EQ(e.reason, "a pod to itself is always allowed");
  EXPECT_FALSE(Ask("x/a", "x/b", "80").allowed);
  // Both directions named when both deny.
  EXPECT_EQ(Ask("x/a", "x/b", "80").reason,
            "the egress of x/a is isolated by x/deny and no rule of it admits TCP 80; the ingress of x/b is isolated "
            "by x/deny and no rule of it admits TCP 80");
}

TEST_F(ExplainTest, WithoutAPortOnlyAnyPortRulesAllow) {
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"p80"},"spec":{"podSelector":{},
    "ingress":[{"ports":[{"port":80},{"protocol":"UDP","port":"serve-80-tcp"}]}]}})"));
  Explanation e = Ask("y/a", "x/a");
  EXPECT_FALSE(e.allowed);
  ASSERT_EQ(e.ingress.admitted_by.size(), 1u);
  EXPECT_EQ(e.ingress.admitted_by[0].ports, "TCP 80");  // x/a has no UDP serve-80-tcp
  EXPECT_EQ(e.reason, "the ingress of x/a is isolated by x/p80 and no rule of it admits every port");
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"all"},"spec":{"podSelector":{},"ingress":[{}]}})"));
  EXPECT_TRUE(Ask("y/a", "x/a").allowed);
}

TEST_F(ExplainTest, NamespaceRelabelIsSeen) {
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"from-prod"},"spec":{"podSelector":{},
    "ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"env":"prod"}}}]}]}})"));
  EXPECT_FALSE(Ask("y/a", "x/a", "80").allowed);
  engine_.UpsertNamespace(Namespace{"y", {{"ns", "y"}, {"env", "prod"}}});
  EXPECT_TRUE(Ask("y/a", "x/a", "80").allowed);
}

TEST_F(ExplainTest, HostNetworkPodsAreTheirNode) {
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"deny"},"spec":{"podSelector":{}}})"));
  Pod h = MakePod("y", "h", "n1", {"192.0.2.11"});
  h.host_network = true;
  engine_.UpsertPod(h);
  EXPECT_TRUE(Ask("y/h", "x/a", "80").allowed);   // same node: the node to its own pod
  EXPECT_FALSE(Ask("y/h", "x/b", "80").allowed);  // another node's host address: an ordinary peer
  // A hostNetwork pod's address is not taken for a pod's (it is its node's).
  EXPECT_TRUE(Ask("192.0.2.11", "x/a", "80").src.pod.empty());
}

TEST_F(ExplainTest, BadInputAndUnknownPods) {
  EXPECT_EQ(ParseExplainQuery("x/a", "x/b", "http", "").status().reason(), Reason::kInvalidArgument);
  EXPECT_EQ(ParseExplainQuery("x/a", "x/b", "0", "").status().reason(), Reason::kInvalidArgument);
  EXPECT_EQ(ParseExplainQuery("x/a", "x/b", "65536", "").status().reason(), Reason::kInvalidArgument);
  EXPECT_EQ(ParseExplainQuery("x/a", "x/b", "80/icmp", "").status().reason(), Reason::kInvalidArgument);
  EXPECT_EQ(ParseExplainQuery("x/a", "x/b", "80", "5").status().reason(), Reason::kInvalidArgument);
  auto q = ParseExplainQuery("x/a", "x/b", "53/UDP", "");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->proto, Proto::kUdp);
  EXPECT_EQ(*q->port, 53);
  q = ParseExplainQuery("x/nope", "x/a", "", "");
  ASSERT_TRUE(q.ok());
  auto e = Explain(engine_, *q);
  EXPECT_EQ(e.status().reason(), Reason::kNotFound);
  EXPECT_EQ(e.status().msg(), "pod x/nope is not known to weftd");
  q = ParseExplainQuery("web", "x/a", "", "");
  EXPECT_EQ(Explain(engine_, *q).status().reason(), Reason::kInvalidArgument);
  Pod done = MakePod("x", "done", "n1", {"10.0.1.9"});
  done.terminal = true;
  engine_.UpsertPod(done);
  q = ParseExplainQuery("x/done", "x/a", "", "");
  EXPECT_EQ(Explain(engine_, *q).status().reason(), Reason::kNotFound);
}

ClusterPolicy Cnp(const std::string& name, const std::string& tier, int prio, const std::string& dir,
                  const std::string& rules) {
  auto p = DecodeClusterPolicy(json::parse(R"({"metadata":{"name":")" + name + R"("},"spec":{"tier":")" + tier +
                                           R"(","priority":)" + std::to_string(prio) +
                                           R"(,"subject":{"namespaces":{"matchLabels":{"ns":"x"}}},")" + dir +
                                           R"(":)" + rules + "}}"));
  EXPECT_TRUE(p.has_value());
  return *p;
}

TEST_F(ExplainTest, AdminDenyBeatsANetworkPolicyAllowAndIsNamed) {
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"all"},"spec":{"podSelector":{},"ingress":[{}]}})"));
  engine_.UpsertClusterPolicy(Cnp("deny-y", "Admin", 10, "ingress",
                                  R"([{"action":"Deny","from":[{"namespaces":{"matchLabels":{"ns":"y"}}}]}])"));
  Explanation e = Ask("y/a", "x/a", "80");
  EXPECT_FALSE(e.allowed);
  EXPECT_EQ(e.ingress.decided_by, "Admin:deny-y ingress 0 Deny");
  EXPECT_EQ(e.ingress.tier_policies, std::vector<std::string>{"Admin:deny-y"});
  EXPECT_EQ(e.reason, "the ingress of x/a is denied by Admin:deny-y ingress 0 Deny");
  EXPECT_TRUE(Ask("x/b", "x/a", "80").allowed);  // not from y: the NetworkPolicy decides
  // A higher-precedence Accept (lower priority number) wins.
  engine_.UpsertClusterPolicy(Cnp("accept-ya", "Admin", 5, "ingress",
                                  R"([{"action":"Accept","from":[{"pods":{"namespaceSelector":{},"podSelector":{"matchLabels":{"pod":"a"}}}}]}])"));
  e = Ask("y/a", "x/a", "80");
  EXPECT_TRUE(e.allowed);
  EXPECT_EQ(e.ingress.decided_by, "Admin:accept-ya ingress 0 Accept");
  EXPECT_EQ(e.reason, "admitted by Admin:accept-ya ingress 0 Accept (the source is not isolated for egress)");
}

TEST_F(ExplainTest, AdminPassDefersToNetworkPolicyAndBaselineOnlyWhereNoneIsolates) {
  engine_.UpsertClusterPolicy(Cnp("pass-y", "Admin", 1, "ingress",
                                  R"([{"action":"Pass","from":[{"namespaces":{"matchLabels":{"ns":"y"}}}]}])"));
  engine_.UpsertClusterPolicy(Cnp("base-deny", "Baseline", 1, "ingress", R"([{"action":"Deny","from":[{"namespaces":{}}]}])"));
  // No NetworkPolicy: Pass reaches Baseline, which denies.
  Explanation e = Ask("y/a", "x/a", "80");
  EXPECT_FALSE(e.allowed);
  EXPECT_EQ(e.ingress.decided_by, "Baseline:base-deny ingress 0 Deny");
  // A NetworkPolicy isolating x/a and admitting y: Baseline is not reached.
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"from-y"},"spec":{"podSelector":{},
    "ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"ns":"y"}}}]}]}})"));
  e = Ask("y/a", "x/a", "80");
  EXPECT_TRUE(e.allowed);
  EXPECT_EQ(e.ingress.admitted_by.at(0).what, "x/from-y ingress 0");
  EXPECT_FALSE(Ask("x/b", "x/a", "80").allowed);  // isolated, not admitted; Baseline never reached
  // Egress has no tier rules: untouched.
  EXPECT_TRUE(Ask("x/a", "y/a", "80").allowed);
}

// A pod to its own node's address: the tiers judge it (input hook), and
// NetworkPolicy, when it isolates the pod, stands for "allow" there (it never
// restricts a pod's traffic to its own node); another node is a peer as before.
TEST_F(ExplainTest, ThePodsOwnNodeIsJudgedByTheTiersOnly) {
  NodeInfo n1, n2;
  n1.name = "n1";
  n1.ips = {*IpAddress::Parse("192.0.2.11")};
  n2.name = "n2";
  n2.ips = {*IpAddress::Parse("192.0.2.12")};
  engine_.UpsertNode(n1);
  engine_.UpsertNode(n2);
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"no-egress"},"spec":{"podSelector":{},
    "policyTypes":["Egress"]}})"));
  Explanation e = Ask("x/a", "192.0.2.11", "80");  // x/a runs on n1
  EXPECT_TRUE(e.allowed);
  EXPECT_TRUE(e.egress.isolated);
  EXPECT_EQ(e.reason, "NetworkPolicy never restricts a pod's traffic to its own node (192.0.2.11 is n1's address)");
  EXPECT_FALSE(Ask("x/a", "192.0.2.12", "80").allowed);  // n2: an ordinary peer
  EXPECT_FALSE(Ask("x/b", "192.0.2.11", "80").allowed);  // x/b runs on n2
  // An Admin Deny to the nodes decides before NetworkPolicy, on its own node too.
  engine_.UpsertClusterPolicy(Cnp("no-nodes", "Admin", 1, "egress", R"([{"action":"Deny","to":[{"nodes":{}}]}])"));
  e = Ask("x/a", "192.0.2.11", "80");
  EXPECT_FALSE(e.allowed);
  EXPECT_EQ(e.egress.decided_by, "Admin:no-nodes egress 0 Deny");
  // A Baseline Deny: not reached while NetworkPolicy isolates x/a, applies once none does.
  engine_.RemoveClusterPolicy("no-nodes");
  engine_.UpsertClusterPolicy(Cnp("base", "Baseline", 1, "egress", R"([{"action":"Deny","to":[{"networks":["192.0.2.0/24"]}]}])"));
  EXPECT_TRUE(Ask("x/a", "192.0.2.11", "80").allowed);
  engine_.RemovePolicy("x/no-egress");
  e = Ask("x/a", "192.0.2.11", "80");
  EXPECT_FALSE(e.allowed);
  EXPECT_EQ(e.egress.decided_by, "Baseline:base egress 0 Deny");
}

TEST_F(ExplainTest, JsonCarriesVerdictSidesAndRules) {
  engine_.UpsertPolicy(P(R"({"metadata":{"namespace":"x","name":"allow"},"spec":{"podSelector":{},
    "ingress":[{"ports":[{"port":80}]}]}})"));
  json j = json::parse(ExplanationJson(Ask("y/a", "x/a", "80")));
  EXPECT_EQ(j["verdict"], "allowed");
  EXPECT_EQ(j["src"]["pod"], "y/a");
  EXPECT_EQ(j["ingress"]["policies"], json::array({"x/allow"}));
  EXPECT_EQ(j["ingress"]["admittedBy"][0]["what"], "x/allow ingress 0");
  EXPECT_EQ(j["port"], 80);
  EXPECT_EQ(j["protocol"], "TCP");
}

}  // namespace
}  // namespace weft::policy::netpol
