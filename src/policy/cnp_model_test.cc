// ClusterNetworkPolicy: decoding (strict, fail-closed) and the tiers in the
// engine's chains. Pure, no root.

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "policy/cnp_types.h"
#include "policy/netpol_model.h"

namespace weft::policy::netpol {
namespace {

using nlohmann::json;

Pod MakePod(const std::string& ns, const std::string& name, Labels labels, const std::string& node,
            const std::string& ip, std::vector<ContainerPort> ports = {}) {
  Pod p;
  p.ns = ns;
  p.name = name;
  p.labels = std::move(labels);
  p.node = node;
  if (!ip.empty()) p.ips.push_back(*IpAddress::Parse(ip));
  p.ports = std::move(ports);
  return p;
}

ClusterPolicy Cnp(const std::string& text) {
  auto p = DecodeClusterPolicy(json::parse(text));
  EXPECT_TRUE(p.has_value());
  return *p;
}

Policy Np(const std::string& text) { return *DecodePolicy(json::parse(text)); }

NodeInfo Node(const std::string& name, Labels labels, std::vector<std::string> ips) {
  NodeInfo n;
  n.name = name;
  n.labels = std::move(labels);
  for (const auto& s : ips) n.ips.push_back(*IpAddress::Parse(s));
  return n;
}

// "x" namespace subject, one rule.
std::string OneRule(const std::string& name, const std::string& tier, int prio, const std::string& dir,
                    const std::string& rule, const std::string& subject = R"({"namespaces":{"matchLabels":{"ns":"x"}}})") {
  return R"({"metadata":{"name":")" + name + R"(","generation":3},"spec":{"tier":")" + tier +
         R"(","priority":)" + std::to_string(prio) + R"(,"subject":)" + subject + R"(,")" + dir + R"(":[)" + rule +
         "]}}";
}

// --- Decoding ---------------------------------------------------------------

TEST(CnpDecode, EveryFieldOfV1alpha2) {
  ClusterPolicy p = Cnp(R"({"metadata":{"name":"c","generation":7},"spec":{"tier":"Admin","priority":5,
    "subject":{"pods":{"namespaceSelector":{"matchLabels":{"ns":"x"}},"podSelector":{"matchLabels":{"app":"a"}}}},
    "ingress":[{"name":"r0","action":"Deny","from":[{"namespaces":{}},{"pods":{"namespaceSelector":{},"podSelector":{"matchLabels":{"pod":"b"}}}}],
                "protocols":[{"tcp":{"destinationPort":{"number":80}}},{"udp":{"destinationPort":{"range":{"start":100,"end":200}}}},
                             {"destinationNamedPort":"web"}]}],
    "egress":[{"action":"Pass","to":[{"networks":["10.0.0.0/8","fd00::/8"]},{"nodes":{"matchLabels":{"role":"w"}}}]},
              {"action":"Accept","to":[{"pods":{"podSelector":{}}}],"protocols":[{"sctp":{"destinationPort":{"number":9}}}]}]}})");
  EXPECT_TRUE(p.enforced);
  EXPECT_TRUE(p.problems.empty()) << p.problems[0];
  EXPECT_EQ(p.generation, 7);
  EXPECT_EQ(p.tier, Tier::kAdmin);
  EXPECT_EQ(p.priority, 5);
  ASSERT_TRUE(p.subject_pods.has_value());
  EXPECT_EQ(p.subject_pods->match_labels.at("app"), "a");
  ASSERT_EQ(p.ingress.size(), 1u);
  EXPECT_EQ(p.ingress[0].name, "r0");
  EXPECT_EQ(p.ingress[0].action, Action::kDeny);
  ASSERT_EQ(p.ingress[0].match.peers.size(), 2u);
  EXPECT_TRUE(p.ingress[0].match.peers[0].namespace_selector->empty());
  EXPECT_FALSE(p.ingress[0].match.peers[0].pod_selector.has_value());
  EXPECT_EQ(p.ingress[0].match.peers[1].pod_selector->match_labels.at("pod"), "b");
  const auto& ports = p.ingress[0].match.ports;
  ASSERT_EQ(ports.size(), 5u);  // tcp 80, udp 100-200, the named port per protocol
  EXPECT_EQ(ports[0].port, 80);
  EXPECT_EQ(ports[1].proto, Proto::kUdp);
  EXPECT_EQ(ports[1].end_port, 200);
  EXPECT_EQ(ports[2].name, "web");
  ASSERT_EQ(p.egress.size(), 2u);
  EXPECT_EQ(p.egress[0].action, Action::kPass);
  EXPECT_EQ(p.egress[0].match.peers.size(), 2u);
  EXPECT_EQ(p.egress[0].match.peers[1].ip_block->cidr.ToString(), "fd00::/8");
  ASSERT_EQ(p.egress[0].nodes.size(), 1u);
  EXPECT_TRUE(p.egress[0].match.any_port);
  EXPECT_EQ(p.egress[1].match.ports[0].proto, Proto::kSctp);
  EXPECT_EQ(ConditionFor(p).reason, "Accepted");
}

TEST(CnpDecode, UnknownPeerFailsClosedAsTheApiSays) {
  // Accept: the unknown peer matches nothing, the known one still counts.
  ClusterPolicy a = Cnp(OneRule("a", "Admin", 1, "egress",
                                R"({"action":"Accept","to":[{"futurePeer":{}},{"namespaces":{}}]})"));
  ASSERT_EQ(a.egress.size(), 1u);
  EXPECT_EQ(a.egress[0].action, Action::kAccept);
  EXPECT_FALSE(a.egress[0].match.any_peer);
  EXPECT_EQ(a.egress[0].match.peers.size(), 1u);
  EXPECT_EQ(ConditionFor(a).reason, "FailedClosed");
  // Deny and Pass: the rule denies everything (any peer, any port).
  for (const char* action : {"Deny", "Pass"}) {
    ClusterPolicy d = Cnp(OneRule("d", "Baseline", 1, "ingress",
                                  std::string(R"({"action":")") + action +
                                      R"(","from":[{}],"protocols":[{"tcp":{"destinationPort":{"number":1}}}]})"));
    EXPECT_EQ(d.ingress[0].action, Action::kDeny) << action;
    EXPECT_TRUE(d.ingress[0].match.any_peer);
    EXPECT_TRUE(d.ingress[0].match.any_port);
    EXPECT_EQ(ConditionFor(d).status, "False");
  }
  // An unknown protocol entry in a Deny rule: deny all, too.
  ClusterPolicy u = Cnp(OneRule("u", "Admin", 1, "ingress",
                                R"({"action":"Deny","from":[{"namespaces":{}}],"protocols":[{"icmp":{}}]})"));
  EXPECT_TRUE(u.ingress[0].match.any_port);
  // Ingress has no networks peer: unknown there.
  ClusterPolicy n = Cnp(OneRule("n", "Admin", 1, "ingress", R"({"action":"Accept","from":[{"networks":["10.0.0.0/8"]}]})"));
  EXPECT_TRUE(n.ingress[0].match.peers.empty());
}

TEST(CnpDecode, DomainNamesMatchNothingAndSaySo) {
  ClusterPolicy p = Cnp(OneRule("dn", "Admin", 1, "egress",
                                R"({"action":"Accept","to":[{"domainNames":["kubernetes.io","*.example.com"]}]})"));
  EXPECT_TRUE(p.enforced);
  EXPECT_TRUE(p.egress[0].match.peers.empty());
  EXPECT_FALSE(p.egress[0].match.any_peer);
  CnpCondition c = ConditionFor(p);
  EXPECT_EQ(c.reason, "FailedClosed");
  EXPECT_NE(c.message.find("domainNames: not implemented by Weft"), std::string::npos) << c.message;
  // In a Deny rule the API forbids it: deny all.
  ClusterPolicy d = Cnp(OneRule("dn", "Admin", 1, "egress", R"({"action":"Deny","to":[{"domainNames":["a.io"]}]})"));
  EXPECT_TRUE(d.egress[0].match.any_peer);
}

TEST(CnpDecode, WhatCannotBePlacedIsNotEnforcedAndInvalid) {
  for (const char* spec : {R"({"tier":"Middle","priority":1,"subject":{"namespaces":{}}})",
                           R"({"tier":"Admin","priority":1001,"subject":{"namespaces":{}}})",
                           R"({"tier":"Admin","priority":1,"subject":{}})",
                           R"({"tier":"Admin","priority":1,"subject":{"namespaces":{"matchExpressions":[{"key":"a","operator":"Bad"}]}}})"}) {
    ClusterPolicy p = Cnp(std::string(R"({"metadata":{"name":"c"},"spec":)") + spec + "}");
    EXPECT_FALSE(p.enforced) << spec;
    EXPECT_EQ(ConditionFor(p).reason, "Invalid") << spec;
  }
  EXPECT_FALSE(DecodeClusterPolicy(json::parse(R"({"metadata":{}})")).has_value());
}

TEST(CnpDecode, ConditionPatchWritesOnlyWhatChangedAndKeepsOthers) {
  ClusterPolicy p = Cnp(R"({"metadata":{"name":"c","generation":2},"spec":{"tier":"Admin","priority":1,
    "subject":{"namespaces":{}}},"status":{"conditions":[{"type":"Other","status":"True","reason":"X","message":"m",
    "lastTransitionTime":"2026-01-01T00:00:00Z"}]}})");
  std::string patch = ConditionPatch(p, "2026-11-27T06:00:00Z");
  json j = json::parse(patch);
  ASSERT_EQ(j["status"]["conditions"].size(), 2u);
  EXPECT_EQ(j["status"]["conditions"][0]["type"], "Other");
  EXPECT_EQ(j["status"]["conditions"][1]["type"], "Accepted");
  EXPECT_EQ(j["status"]["conditions"][1]["status"], "True");
  EXPECT_EQ(j["status"]["conditions"][1]["observedGeneration"], 2);
  // The object as written back: nothing more to write.
  json obj = json::parse(R"({"metadata":{"name":"c","generation":2},"spec":{"tier":"Admin","priority":1,"subject":{"namespaces":{}}}})");
  obj["status"] = j["status"];
  ClusterPolicy again = *DecodeClusterPolicy(obj);
  EXPECT_EQ(ConditionPatch(again, "2026-11-27T06:00:01Z"), "");
  EXPECT_TRUE(again.SameSpec(p));
  // A new generation is written again.
  obj["metadata"]["generation"] = 3;
  EXPECT_NE(ConditionPatch(*DecodeClusterPolicy(obj), "t"), "");
}

TEST(CnpDecode, NodeAddressesAreItsIps) {
  auto n = DecodeNodeInfo(json::parse(R"({"metadata":{"name":"n1","labels":{"a":"b"}},"status":{"addresses":[
    {"type":"Hostname","address":"n1"},{"type":"InternalIP","address":"192.168.1.5"},{"type":"InternalIP","address":"fd00::5"}]}})"));
  ASSERT_TRUE(n.has_value());
  ASSERT_EQ(n->ips.size(), 2u);
  EXPECT_EQ(n->ips[0].ToString(), "192.168.1.5");
  EXPECT_EQ(n->labels.at("a"), "b");
}

// --- The tiers in the chains ------------------------------------------------

class TierTest : public ::testing::Test {
 protected:
  TierTest() : e_(EngineOptions{"n1", kDefaultPendingGroup}) {
    e_.UpsertNamespace({"x", {{"ns", "x"}}});
    e_.UpsertNamespace({"y", {{"ns", "y"}}});
    e_.UpsertPod(MakePod("x", "a", {{"pod", "a"}}, "n1", "10.0.1.1", {{"web", Proto::kTcp, 8080}}));
    e_.UpsertPod(MakePod("x", "b", {{"pod", "b"}}, "n1", "10.0.1.2", {{"web", Proto::kTcp, 8081}}));
    e_.UpsertPod(MakePod("y", "a", {{"pod", "a"}}, "n2", "10.0.2.1", {{"web", Proto::kUdp, 53}}));
    e_.UpsertPod(MakePod("y", "b", {{"pod", "b"}}, "n1", "10.0.1.3"));
    e_.MarkApplied(true);
  }
  std::string Chain(const std::string& dir, const std::string& ip) {
    const auto& m = dir == "in" ? e_.desired().ingress4 : e_.desired().egress4;
    auto it = m.find(ip);
    return it == m.end() ? "" : it->second;
  }
  std::vector<std::string> Rules(const std::string& chain) {
    auto it = e_.desired().chains.find(chain);
    return it == e_.desired().chains.end() ? std::vector<std::string>{} : it->second;
  }
  // The index of the first rule containing `needle` (-1: none).
  static int Find(const std::vector<std::string>& rules, const std::string& needle) {
    for (size_t i = 0; i < rules.size(); ++i)
      if (rules[i].find(needle) != std::string::npos) return static_cast<int>(i);
    return -1;
  }
  Engine e_;
};

TEST_F(TierTest, AdminDenyComesBeforeTheNetworkPolicyAllow) {
  e_.UpsertPolicy(Np(R"({"metadata":{"namespace":"x","name":"allow-y"},"spec":{"podSelector":{},
    "ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"ns":"y"}}}]}]}})"));
  e_.UpsertClusterPolicy(Cnp(OneRule("deny-y", "Admin", 10, "ingress",
                                     R"({"action":"Deny","from":[{"namespaces":{"matchLabels":{"ns":"y"}}}]})")));
  auto rules = Rules(Chain("in", "10.0.1.1"));
  int deny = Find(rules, "Admin:deny-y ingress 0 Deny");
  int allow = Find(rules, "x/allow-y ingress 0");
  ASSERT_GE(deny, 0);
  ASSERT_GE(allow, 0);
  EXPECT_LT(deny, allow);
  EXPECT_NE(rules[deny].find("goto drop-in"), std::string::npos) << rules[deny];
  EXPECT_EQ(rules.back(), "goto drop-in");  // NP isolates: baseline never reached
  // The deny set holds y's pods.
  std::string set = rules[deny].substr(rules[deny].find('@') + 1, 13);
  EXPECT_EQ(e_.desired().sets.at(set + "-p4").elements, (std::set<std::string>{"10.0.1.3", "10.0.2.1"}));
}

TEST_F(TierTest, AdminPassGoesToTheTailWithNetworkPolicyAndBaseline) {
  e_.UpsertClusterPolicy(Cnp(OneRule("pass-y", "Admin", 1, "ingress",
                                     R"({"action":"Pass","from":[{"namespaces":{"matchLabels":{"ns":"y"}}}]})")));
  e_.UpsertClusterPolicy(Cnp(OneRule("deny-all", "Admin", 2, "ingress", R"({"action":"Deny","from":[{"namespaces":{}}]})")));
  e_.UpsertClusterPolicy(Cnp(OneRule("base-deny", "Baseline", 1, "ingress",
                                     R"({"action":"Deny","from":[{"namespaces":{}}]})")));
  std::string c = Chain("in", "10.0.1.1");
  // One transaction: the tail chain is declared before the rule that jumps to it.
  std::string d = e_.RenderDelta();
  ASSERT_NE(d.find("add chain inet weft-netpol t" + c), std::string::npos) << d;
  EXPECT_LT(d.find("add chain inet weft-netpol t" + c), d.find("goto t" + c)) << d;
  EXPECT_LT(d.find("add chain inet weft-netpol rt" + c), d.find("goto rt" + c)) << d;
  auto head = Rules(c);
  int pass = Find(head, "Admin:pass-y ingress 0 Pass");
  ASSERT_GE(pass, 0);
  EXPECT_NE(head[pass].find("goto t" + c), std::string::npos);
  EXPECT_LT(pass, Find(head, "Admin:deny-all"));
  EXPECT_EQ(head.back(), "goto t" + c);
  auto tail = Rules("t" + c);
  ASSERT_GE(Find(tail, "Baseline:base-deny ingress 0 Deny"), 0);
  EXPECT_EQ(tail.back(), "accept comment \"default\"");
  // The reply twins jump to each other.
  auto rhead = Rules("r" + c);
  EXPECT_EQ(rhead.back(), "goto rt" + c);
  EXPECT_FALSE(Rules("rt" + c).empty());
  // An NP selecting the pod replaces the baseline in the tail.
  e_.UpsertPolicy(Np(R"({"metadata":{"namespace":"x","name":"np"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
    "ingress":[{"from":[{"podSelector":{}}]}]}})"));
  tail = Rules("t" + c);
  EXPECT_EQ(Find(tail, "Baseline:"), -1);
  EXPECT_GE(Find(tail, "x/np ingress 0"), 0);
  EXPECT_EQ(tail.back(), "goto drop-in");
  // Removing the pass: no tail any more.
  e_.RemoveClusterPolicy("pass-y");
  EXPECT_TRUE(Rules("t" + c).empty());
  EXPECT_TRUE(Rules("rt" + c).empty());
}

TEST_F(TierTest, BaselineOnlyAppliesToPodsNoNetworkPolicySelects) {
  e_.UpsertClusterPolicy(Cnp(OneRule("base", "Baseline", 1, "ingress",
                                     R"({"action":"Deny","from":[{"namespaces":{"matchLabels":{"ns":"y"}}}]})")));
  auto b = Rules(Chain("in", "10.0.1.2"));
  EXPECT_GE(Find(b, "Baseline:base"), 0);
  EXPECT_EQ(b.back(), "accept comment \"default\"");
  e_.UpsertPolicy(Np(R"({"metadata":{"namespace":"x","name":"np"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
    "ingress":[{"from":[{"namespaceSelector":{}}]}]}})"));
  auto a = Rules(Chain("in", "10.0.1.1"));
  EXPECT_EQ(Find(a, "Baseline:base"), -1);
  EXPECT_GE(Find(Rules(Chain("in", "10.0.1.2")), "Baseline:base"), 0);
  // Egress is untouched: the CNP has no egress rules.
  EXPECT_TRUE(Chain("eg", "10.0.1.1").empty());
}

TEST_F(TierTest, PriorityThenNameDecideTheOrder) {
  e_.UpsertClusterPolicy(Cnp(OneRule("b-second", "Admin", 5, "egress", R"({"action":"Deny","to":[{"namespaces":{}}]})")));
  e_.UpsertClusterPolicy(Cnp(OneRule("a-first", "Admin", 5, "egress", R"({"action":"Accept","to":[{"namespaces":{}}]})")));
  e_.UpsertClusterPolicy(Cnp(OneRule("z-top", "Admin", 0, "egress", R"({"action":"Deny","to":[{"networks":["10.9.0.0/16"]}]})")));
  e_.UpsertClusterPolicy(Cnp(OneRule("late", "Admin", 1000, "egress", R"({"action":"Deny","to":[{"namespaces":{}}]})")));
  auto r = Rules(Chain("eg", "10.0.1.1"));
  int top = Find(r, "Admin:z-top"), a = Find(r, "Admin:a-first"), b = Find(r, "Admin:b-second"),
      late = Find(r, "Admin:late");
  ASSERT_TRUE(top >= 0 && a >= 0 && b >= 0 && late >= 0);
  EXPECT_LT(top, a);
  EXPECT_LT(a, b);
  EXPECT_LT(b, late);
  EXPECT_NE(r[a].find(" return comment"), std::string::npos) << r[a];  // egress Accept leaves ingress to judge
  // Moving a policy's priority reorders it.
  e_.UpsertClusterPolicy(Cnp(OneRule("late", "Admin", 0, "egress", R"({"action":"Deny","to":[{"namespaces":{}}]})")));
  r = Rules(Chain("eg", "10.0.1.1"));
  EXPECT_LT(Find(r, "Admin:late"), Find(r, "Admin:z-top"));  // same priority 0: "late" < "z-top"
}

TEST_F(TierTest, SubjectsNeverIncludeHostNetworkPodsOrOtherNamespaces) {
  Pod h = MakePod("x", "h", {{"pod", "a"}}, "n1", "192.168.0.1");
  h.host_network = true;
  e_.UpsertPod(h);
  e_.UpsertClusterPolicy(Cnp(OneRule("d", "Admin", 1, "ingress", R"({"action":"Deny","from":[{"namespaces":{}}]})",
                                     R"({"pods":{"namespaceSelector":{"matchLabels":{"ns":"x"}},"podSelector":{"matchLabels":{"pod":"a"}}}})")));
  EXPECT_FALSE(Chain("in", "10.0.1.1").empty());
  EXPECT_TRUE(Chain("in", "10.0.1.2").empty());   // pod b
  EXPECT_TRUE(Chain("in", "10.0.1.3").empty());   // namespace y
  EXPECT_TRUE(Chain("in", "192.168.0.1").empty());
  // ...nor peers: the deny set has the pods, not the host-network one.
  auto r = Rules(Chain("in", "10.0.1.1"));
  std::string set = r[Find(r, "Admin:d")].substr(r[Find(r, "Admin:d")].find('@') + 1, 13);
  EXPECT_EQ(e_.desired().sets.at(set + "-p4").elements.count("192.168.0.1"), 0u);
  // The pending decision covers the subject's namespaces.
  EXPECT_EQ(e_.NamespacesWithPolicies(), std::vector<std::string>{"x"});
  // A namespace relabelled into the subject: its pods are selected.
  e_.UpsertPod(MakePod("y", "c", {{"pod", "a"}}, "n1", "10.0.1.4"));
  EXPECT_TRUE(Chain("in", "10.0.1.4").empty());
  e_.UpsertNamespace({"y", {{"ns", "x"}}});
  EXPECT_FALSE(Chain("in", "10.0.1.4").empty());
  EXPECT_EQ(e_.NamespacesWithPolicies(), (std::vector<std::string>{"x", "y"}));
}

TEST_F(TierTest, NodePeersFollowTheNodesAddresses) {
  e_.UpsertNode(Node("n1", {{"role", "w"}}, {"192.168.1.1"}));
  e_.UpsertNode(Node("n2", {{"role", "cp"}}, {"192.168.1.2", "fd00::2"}));
  e_.UpsertClusterPolicy(Cnp(OneRule("nodes", "Admin", 1, "egress",
                                     R"({"action":"Deny","to":[{"nodes":{"matchLabels":{"role":"cp"}}}]})")));
  e_.MarkApplied(false);
  auto r = Rules(Chain("eg", "10.0.1.1"));
  int i = Find(r, "ip daddr @b");
  ASSERT_GE(i, 0);
  std::string set = r[i].substr(r[i].find('@') + 1, 13);
  EXPECT_EQ(e_.desired().sets.at(set + "-b4").elements, std::set<std::string>{"192.168.1.2"});
  EXPECT_GE(Find(r, "ip6 daddr @b"), 0);
  // n1 becomes a control-plane node: the deny grows, and the pods' chains change
  // (so their established connections are judged again).
  e_.UpsertNode(Node("n1", {{"role", "cp"}}, {"192.168.1.7"}));
  r = Rules(Chain("eg", "10.0.1.1"));
  i = Find(r, "ip daddr @b");
  set = r[i].substr(r[i].find('@') + 1, 13);
  EXPECT_EQ(e_.desired().sets.at(set + "-b4").elements, (std::set<std::string>{"192.168.1.2", "192.168.1.7"}));
  auto t = e_.Tightened();
  EXPECT_NE(std::find(t.begin(), t.end(), "10.0.1.1"), t.end());
  e_.RemoveNode("n1");
  e_.RemoveNode("n2");
  r = Rules(Chain("eg", "10.0.1.1"));
  EXPECT_EQ(Find(r, "@b"), -1);  // no node left: the rule matches nothing
}

TEST_F(TierTest, NamedPortsResolvePerDestinationPod) {
  e_.UpsertClusterPolicy(Cnp(OneRule("web-in", "Admin", 1, "ingress",
                                     R"({"action":"Deny","from":[{"namespaces":{}}],"protocols":[{"destinationNamedPort":"web"}]})")));
  EXPECT_GE(Find(Rules(Chain("in", "10.0.1.1")), "meta l4proto tcp th dport 8080"), 0);
  EXPECT_GE(Find(Rules(Chain("in", "10.0.1.2")), "meta l4proto tcp th dport 8081"), 0);
  e_.UpsertClusterPolicy(Cnp(OneRule("web-out", "Admin", 1, "egress",
                                     R"({"action":"Accept","to":[{"pods":{"podSelector":{}}}],"protocols":[{"destinationNamedPort":"web"}]})")));
  auto r = Rules(Chain("eg", "10.0.1.1"));
  int i = Find(r, "ip daddr . meta l4proto . th dport @");
  ASSERT_GE(i, 0);
  std::string set = r[i].substr(r[i].find('@') + 1, 13);
  EXPECT_EQ(e_.desired().sets.at(set + "-n4").elements,
            (std::set<std::string>{"10.0.1.1 . tcp . 8080", "10.0.1.2 . tcp . 8081", "10.0.2.1 . udp . 53"}));
}

TEST_F(TierTest, NetworksMatchPodTrafficToo) {
  e_.UpsertClusterPolicy(Cnp(OneRule("nets", "Baseline", 1, "egress", R"({"action":"Deny","to":[{"networks":["10.0.2.0/24"]}]})")));
  auto r = Rules(Chain("eg", "10.0.1.1"));
  int i = Find(r, "ip daddr @b");
  ASSERT_GE(i, 0);
  EXPECT_NE(r[i].find("goto drop-eg"), std::string::npos);
  std::string set = r[i].substr(r[i].find('@') + 1, 13);
  EXPECT_EQ(e_.desired().sets.at(set + "-b4").elements, std::set<std::string>{"10.0.2.0-10.0.2.255"});
}

TEST_F(TierTest, APodEnteringADenySetIsTightened) {
  e_.UpsertClusterPolicy(Cnp(OneRule("d", "Admin", 1, "ingress",
                                     R"({"action":"Deny","from":[{"pods":{"podSelector":{"matchLabels":{"bad":"1"}}}}]})")));
  e_.MarkApplied(false);
  e_.UpsertPod(MakePod("y", "a", {{"pod", "a"}, {"bad", "1"}}, "n2", "10.0.2.1"));
  EXPECT_EQ(e_.Tightened(), std::vector<std::string>{"10.0.2.1"});
  e_.MarkApplied(false);
  // An Accept set growing tightens nothing.
  e_.UpsertClusterPolicy(Cnp(OneRule("a", "Admin", 0, "ingress",
                                     R"({"action":"Accept","from":[{"pods":{"podSelector":{"matchLabels":{"good":"1"}}}}]})")));
  e_.MarkApplied(false);
  e_.UpsertPod(MakePod("y", "b", {{"pod", "b"}, {"good", "1"}}, "n1", "10.0.1.3"));
  auto t = e_.Tightened();
  EXPECT_EQ(std::find(t.begin(), t.end(), "10.0.1.3"), t.end());
}

TEST_F(TierTest, FullRenderIsValidStructureAndRemovalLeavesNothing) {
  e_.UpsertClusterPolicy(Cnp(OneRule("p", "Admin", 1, "ingress", R"({"action":"Pass","from":[{"namespaces":{}}]})")));
  std::string full = e_.RenderFull();
  EXPECT_NE(full.find("chain tin-"), std::string::npos);
  EXPECT_NE(full.find("chain rtin-"), std::string::npos);
  // Every chain a rule jumps to is declared.
  for (const auto& [name, rules] : e_.desired().chains)
    for (const auto& r : rules) {
      auto g = r.find("goto ");
      if (g == std::string::npos) continue;
      EXPECT_TRUE(e_.desired().chains.count(r.substr(g + 5, r.find(' ', g + 5) - g - 5))) << name << ": " << r;
    }
  e_.RemoveClusterPolicy("p");
  EXPECT_TRUE(e_.desired().chains.empty());
  EXPECT_TRUE(e_.desired().ingress4.empty());
  EXPECT_EQ(e_.desired().sets.size(), 2u);  // local4, local6
}

// The model after any event history equals the model built from the final
// objects in one go, for random histories over pods, namespaces, nodes,
// NetworkPolicies and ClusterNetworkPolicies of both tiers.
TEST(CnpEngine, AnyEventHistoryEqualsFromScratch) {
  std::vector<ClusterPolicy> cnps = {
      Cnp(OneRule("a1", "Admin", 1, "ingress", R"({"action":"Pass","from":[{"namespaces":{"matchLabels":{"ns":"y"}}}]})")),
      Cnp(OneRule("a2", "Admin", 1, "egress",
                  R"({"action":"Deny","to":[{"nodes":{"matchLabels":{"role":"cp"}}},{"networks":["10.0.2.0/24"]}]})")),
      Cnp(R"({"metadata":{"name":"b1"},"spec":{"tier":"Baseline","priority":3,"subject":{"pods":{"namespaceSelector":{},
           "podSelector":{"matchLabels":{"pod":"a"}}}},"ingress":[{"action":"Deny","from":[{"pods":{"namespaceSelector":{},
           "podSelector":{"matchLabels":{"pod":"b"}}}}],"protocols":[{"destinationNamedPort":"web"}]}],
           "egress":[{"action":"Accept","to":[{"pods":{"podSelector":{}}}],"protocols":[{"destinationNamedPort":"web"}]}]}})"),
      Cnp(OneRule("b2", "Baseline", 0, "egress", R"({"action":"Pass","to":[{"namespaces":{}}]})",
                  R"({"namespaces":{}})"))};
  std::vector<Policy> nps = {Np(R"({"metadata":{"namespace":"x","name":"p1"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
        "ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"ns":"y"}}}]}]}})")};
  std::vector<NodeInfo> nodes = {Node("n1", {{"role", "cp"}}, {"192.168.1.1"}), Node("n2", {{"role", "w"}}, {"192.168.1.2"})};
  std::vector<Pod> pods;
  for (int i = 0; i < 8; ++i)
    pods.push_back(MakePod(i % 2 ? "x" : "y", "p" + std::to_string(i), {{"pod", i % 3 ? "a" : "b"}}, i % 4 ? "n1" : "n2",
                           "10.0." + std::to_string(1 + i % 2) + "." + std::to_string(10 + i),
                           {{"web", i % 2 ? Proto::kTcp : Proto::kUdp, static_cast<uint16_t>(8000 + i)}}));
  std::vector<Namespace> nss = {{"x", {{"ns", "x"}}}, {"y", {{"ns", "y"}}}};

  for (unsigned seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    Engine inc(EngineOptions{"n1"});
    for (int step = 0; step < 60; ++step) {
      switch (pick(9)) {
        case 0: inc.UpsertClusterPolicy(cnps[pick(cnps.size())]); break;
        case 1: inc.RemoveClusterPolicy(cnps[pick(cnps.size())].name); break;
        case 2: inc.UpsertPod(pods[pick(pods.size())]); break;
        case 3: {  // a relabelled or moved pod
          Pod p = pods[pick(pods.size())];
          p.labels["pod"] = pick(2) ? "a" : "b";
          if (pick(2)) p.ips = {*IpAddress::Parse("10.0.1." + std::to_string(100 + pick(5)))};
          inc.UpsertPod(p);
          break;
        }
        case 4: inc.RemovePod(pods[pick(pods.size())].key()); break;
        case 5: inc.UpsertNamespace({pick(2) ? "x" : "y", {{"ns", pick(2) ? "x" : "y"}}}); break;
        case 6: inc.UpsertNode(pick(2) ? nodes[pick(2)] : Node("n" + std::to_string(1 + pick(2)), {{"role", "cp"}}, {"192.168.1.9"})); break;
        case 7: inc.RemoveNode("n" + std::to_string(1 + pick(2))); break;
        case 8: pick(2) ? inc.UpsertPolicy(nps[0]) : inc.RemovePolicy("x/p1"); break;
      }
      if (pick(4) == 0) {
        inc.EndBatch();
        inc.MarkApplied(false);
      }
      if (pick(6) == 0) inc.BeginBatch();  // batches of any length, as the controller's Drain makes them
    }
    inc.EndBatch();
    // The final state: everything present as written.
    for (const auto& n : nss) inc.UpsertNamespace(n);
    for (const auto& n : nodes) inc.UpsertNode(n);
    for (const auto& p : pods) inc.UpsertPod(p);
    for (const auto& c : cnps) inc.UpsertClusterPolicy(c);
    inc.UpsertPolicy(nps[0]);

    Engine fresh(EngineOptions{"n1"});
    for (const auto& n : nss) fresh.UpsertNamespace(n);
    for (const auto& n : nodes) fresh.UpsertNode(n);
    for (const auto& p : pods) fresh.UpsertPod(p);
    for (const auto& c : cnps) fresh.UpsertClusterPolicy(c);
    fresh.UpsertPolicy(nps[0]);
    ASSERT_EQ(inc.desired(), fresh.desired()) << "seed " << seed;
    ASSERT_EQ(inc.RenderFull(), fresh.RenderFull()) << "seed " << seed;
    ASSERT_EQ(inc.NamespacesWithPolicies(), fresh.NamespacesWithPolicies()) << "seed " << seed;
  }
}

}  // namespace
}  // namespace weft::policy::netpol
