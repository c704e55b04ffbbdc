// ClusterNetworkPolicy: decoding (strict, fail-closed) and the tiers in the
// engine's chains. Pure, no root.

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "policy/cnp_types.h"
#include "policy/netpol_model.h"
#include "policy/netpol_testing.h"

namespace weft::policy::netpol {
namespace {

using nlohmann::json;

using test_util::DeltaText;
using test_util::FullText;
using test_util::MakePod;
using test_util::RulesText;
using test_util::TableText;

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
    return e_.desired().chains.count(chain) ? RulesText(e_, chain) : std::vector<std::string>{};
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
  std::string d = DeltaText(e_);
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
  EXPECT_GE(Find(Rules(Chain("in", "10.0.1.1")), "tcp dport 8080"), 0);
  EXPECT_GE(Find(Rules(Chain("in", "10.0.1.2")), "tcp dport 8081"), 0);
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
  std::string full = TableText(e_);
  EXPECT_NE(full.find("\tchain tin-"), std::string::npos);
  EXPECT_NE(full.find("\tchain rtin-"), std::string::npos);
  // Every chain a rule jumps to is declared.
  const std::set<std::string> fixed = {"drop-in", "drop-eg", "rdrop-in", "rdrop-eg"};
  for (const auto& [name, rules] : e_.desired().chains)
    for (const auto& r : rules)
      for (const auto& x : r.exprs) {
        const auto* v = std::get_if<sys::nft::Verdict>(&x);
        if (v && !v->chain.empty()) {
          EXPECT_TRUE(e_.desired().chains.count(v->chain) || fixed.count(v->chain)) << name << ": " << nftr::Render(r);
        }
      }
  e_.RemoveClusterPolicy("p");
  EXPECT_TRUE(e_.desired().chains.empty());
  EXPECT_TRUE(e_.desired().ingress4.empty());
  EXPECT_EQ(e_.desired().sets.size(), 2u);  // local4, local6
}

// A pod's traffic to its own node never reaches the forward hook: the tiers'
// egress rules that can match a node address are compiled into a node-<pod>
// chain the input hook dispatches to by the pod's address.
class OwnNodeTest : public TierTest {
 protected:
  // A dual-stack pod x/d beside the fixture's, nodes n1 (both families)
  // and n2; then a NetworkPolicy isolating x/b for egress and an Admin
  // rule with pod peers only (which no node address can match).
  void SetUpOwnNode() {
    Pod dual = MakePod("x", "d", {{"pod", "d"}}, "n1", "10.0.1.9");
    dual.ips.push_back(*IpAddress::Parse("fd00:1::9"));
    e_.UpsertPod(dual);
    e_.UpsertNode(Node("n1", {}, {"192.168.1.1", "fd00::1"}));
    e_.UpsertNode(Node("n2", {}, {"192.168.1.2"}));
    e_.MarkApplied(false);
    e_.UpsertPolicy(Np(R"({"metadata":{"namespace":"x","name":"np-eg"},"spec":{"podSelector":{"matchLabels":{"pod":"b"}},
      "policyTypes":["Egress"],"egress":[]}})"));
    e_.UpsertClusterPolicy(Cnp(OneRule("pods-only", "Admin", 1, "egress",
                                       R"({"action":"Deny","to":[{"namespaces":{"matchLabels":{"ns":"y"}}}]})")));
  }
  // The node chain the input hook dispatches `ip` to ("" = none).
  std::string NodeChain(const std::string& ip) {
    const auto& m = ip.find(':') == std::string::npos ? e_.desired().node4 : e_.desired().node6;
    auto it = m.find(ip);
    return it == m.end() ? "" : it->second;
  }
};

TEST_F(OwnNodeTest, TrafficToTheOwnNodeIsJudgedByTheTiersInTheInputHook) {
  SetUpOwnNode();
  // A NetworkPolicy alone never restricts it (unchanged); a tier rule with
  // pod peers only cannot match a node address: no chain.
  EXPECT_FALSE(Chain("eg", "10.0.1.2").empty());
  EXPECT_FALSE(Chain("eg", "10.0.1.1").empty());
  EXPECT_TRUE(e_.desired().node4.empty());
  EXPECT_TRUE(e_.Tightened().size() > 0);
  e_.MarkApplied(false);

  // An Admin Deny to the nodes: every selected pod of n1 gets a node chain,
  // both families, with only the rule that can match a node address.
  e_.UpsertClusterPolicy(Cnp(OneRule("no-nodes", "Admin", 2, "egress",
                                     R"({"action":"Deny","to":[{"nodes":{}}],"protocols":[{"tcp":{"destinationPort":{"number":10250}}}]})")));
  std::string c = NodeChain("10.0.1.1");
  ASSERT_EQ(c.rfind("node-", 0), 0u) << c;
  EXPECT_EQ(NodeChain("10.0.1.9"), NodeChain("fd00:1::9"));
  // Pods with the same node rules share one chain (x/a and x/d); x/b, which a
  // NetworkPolicy isolates, has its own.
  EXPECT_EQ(NodeChain("10.0.1.9"), c);
  EXPECT_NE(NodeChain("10.0.1.2"), c);
  EXPECT_EQ(e_.desired().node4r.at("10.0.1.1"), "r" + c);
  EXPECT_EQ(NodeChain("10.0.1.3"), "");  // y/b: not a subject
  auto r = Rules(c);
  ASSERT_EQ(r.size(), 4u) << ::testing::PrintToString(r);
  EXPECT_EQ(r[0], "ct state invalid drop");
  EXPECT_EQ(Find(r, "Admin:pods-only"), -1);
  EXPECT_EQ(Find(r, "itself"), -1);
  int deny = Find(r, "ip daddr @b");
  ASSERT_EQ(deny, 1);
  EXPECT_NE(r[deny].find("tcp dport 10250 goto drop-eg comment \"Admin:no-nodes egress 0 Deny\""),
            std::string::npos)
      << r[deny];
  EXPECT_NE(r[2].find("ip6 daddr @b"), std::string::npos) << r[2];
  EXPECT_EQ(r.back(), "accept comment \"default\"");
  std::string set = r[deny].substr(r[deny].find('@') + 1, 13);
  EXPECT_EQ(e_.desired().sets.at(set + "-b4").elements, std::set<std::string>{"192.168.1.1-192.168.1.2"});
  // The reply twin (output hook, rechecked connections): addresses and ports swapped.
  auto rr = Rules("r" + c);
  EXPECT_NE(rr[1].find("ip saddr @" + set + "-b4 tcp sport 10250 goto rdrop-eg"), std::string::npos)
      << rr[1];
  // The forward chain keeps both rules (other nodes are peers there).
  EXPECT_GE(Find(Rules(Chain("eg", "10.0.1.1")), "Admin:no-nodes"), 0);
  // The pods whose node chain appeared are marked for a recheck.
  auto t = e_.Tightened();
  for (const char* ip : {"10.0.1.1", "10.0.1.2", "10.0.1.9", "fd00:1::9"})
    EXPECT_NE(std::find(t.begin(), t.end(), ip), t.end()) << ip;
  e_.MarkApplied(false);

  // x/b, which a NetworkPolicy isolates for egress: the Admin tier still
  // decides first, then NetworkPolicy stands for "allow".
  auto rb = Rules(NodeChain("10.0.1.2"));
  EXPECT_GE(Find(rb, "Admin:no-nodes"), 0);
  EXPECT_EQ(rb.back(), "accept comment \"NetworkPolicy: the pod's own node\"");
}

// networks covering a node address count too; an Admin Pass goes to the
// tail, where the Baseline tier (for pods no NP isolates) or NetworkPolicy's
// allow follows; node chains go with the last pod or policy that needs them.
TEST_F(OwnNodeTest, PassAndBaselineToTheOwnNodeAndTheirRemoval) {
  SetUpOwnNode();
  e_.MarkApplied(false);
  e_.UpsertClusterPolicy(Cnp(OneRule("pass-net", "Admin", 3, "egress",
                                     R"({"action":"Pass","to":[{"networks":["192.168.0.0/16"]}]})")));
  e_.UpsertClusterPolicy(Cnp(OneRule("base-deny", "Baseline", 1, "egress",
                                     R"({"action":"Deny","to":[{"networks":["0.0.0.0/0","::/0"]}]})")));
  std::string c = NodeChain("10.0.1.1");
  auto r = Rules(c);
  int pass = Find(r, "Admin:pass-net egress 0 Pass");
  ASSERT_GE(pass, 0);
  EXPECT_NE(r[pass].find("goto t" + c), std::string::npos) << r[pass];
  EXPECT_EQ(r.back(), "goto t" + c);
  auto tail = Rules("t" + c);
  EXPECT_GE(Find(tail, "Baseline:base-deny egress 0 Deny"), 0);
  EXPECT_EQ(tail.back(), "accept comment \"default\"");
  EXPECT_EQ(Rules("rt" + c).size(), tail.size());
  auto tb = Rules("t" + NodeChain("10.0.1.2"));  // x/b: NetworkPolicy decides, the Baseline never
  EXPECT_EQ(tb, std::vector<std::string>{"accept comment \"NetworkPolicy: the pod's own node\""});

  // A Baseline alone, for a pod NetworkPolicy isolates: no node chain.
  e_.RemoveClusterPolicy("pass-net");
  EXPECT_FALSE(NodeChain("10.0.1.1").empty());
  EXPECT_EQ(NodeChain("10.0.1.2"), "");
  // A shared chain stays while one pod uses it.
  std::string shared = NodeChain("10.0.1.1");
  ASSERT_EQ(NodeChain("10.0.1.9"), shared);
  e_.RemovePod("x/a");
  EXPECT_EQ(NodeChain("10.0.1.9"), shared);
  EXPECT_FALSE(Rules(shared).empty());
  e_.RemovePod("x/d");
  EXPECT_TRUE(Rules(shared).empty());
  EXPECT_TRUE(Rules("r" + shared).empty());
  // Everything removed: no node chain, map entry or tail left.
  e_.RemoveClusterPolicy("base-deny");
  e_.RemoveClusterPolicy("pods-only");
  e_.RemovePolicy("x/np-eg");
  EXPECT_TRUE(e_.desired().chains.empty());
  EXPECT_TRUE(e_.desired().node4.empty() && e_.desired().node6.empty() && e_.desired().node4r.empty() &&
              e_.desired().node6r.empty());
}

// The input and output hooks: what always passes comes first (replies, the
// node's own connections, neighbour discovery), then pending pods, then the
// dispatch by the pod's address; the rule counts are the kernel check's.
TEST_F(TierTest, InputAndOutputChainsKeepRepliesAndPendingPods) {
  e_.UpsertNode(Node("n1", {}, {"192.168.1.1"}));
  e_.UpsertClusterPolicy(Cnp(OneRule("no-nodes", "Admin", 2, "egress", R"({"action":"Deny","to":[{"nodes":{}}]})")));
  std::string f = TableText(e_);
  auto body = [&](const std::string& chain) {
    size_t start = f.find("\tchain " + chain + " {\n");
    EXPECT_NE(start, std::string::npos) << chain;
    size_t end = f.find("\n\t}\n", start);
    std::vector<std::string> lines;
    std::istringstream in(f.substr(start, end - start));
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return std::vector<std::string>(lines.begin() + 2, lines.end());  // "chain X {", the hook line
  };
  auto in = body("input");
  auto out = body("output");
  EXPECT_EQ(in.size(), kInputChainRules);
  EXPECT_EQ(out.size(), kOutputChainRules);
  auto at = [&](const std::string& needle) {
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].find(needle) != std::string::npos) return static_cast<int>(i);
    return -1;
  };
  EXPECT_NE(f.find("type filter hook input priority filter; policy accept;"), std::string::npos);
  EXPECT_EQ(at("ct mark & 0x20000000 == 0x00000000 ct state established,related accept"), 0);
  int reply = at("ct direction reply accept"), nd = at("nd-neighbor-solicit"), ll = at("ip6 saddr fe80::/10 goto drop-eg");
  int pend4 = at("iifgroup 22342 ip saddr != @local4 goto pending-eg"),
      pend6 = at("iifgroup 22342 ip6 saddr != @local6 goto pending-eg");
  int v4 = at("ip saddr vmap @node4"), v6 = at("ip6 saddr vmap @node6");
  ASSERT_TRUE(reply > 0 && nd > 0 && ll > 0 && pend4 > 0 && pend6 > 0 && v4 > 0 && v6 > 0) << f;
  EXPECT_LT(reply, pend4);
  EXPECT_LT(nd, ll);
  EXPECT_LT(ll, pend4);
  EXPECT_LT(pend6, v4);
  EXPECT_NE(in[ll].find("iifname \"wft*\""), std::string::npos);
  EXPECT_NE(out[0].find("ct direction reply ct mark & 0x20000000 == 0x20000000 ip daddr vmap @node4r"),
            std::string::npos);
  EXPECT_NE(f.find("\tmap node4 {\n\t\ttype ipv4_addr : verdict\n\t\telements = { 10.0.1.1 : jump node-"),
            std::string::npos)
      << f;
  // A new pod with the same node rules: one map entry to the shared chain,
  // no chain sent again.
  e_.MarkApplied(true);
  e_.UpsertPod(MakePod("x", "n", {{"pod", "n"}}, "n1", "10.0.1.8"));
  std::string d = DeltaText(e_);
  EXPECT_EQ(d.find("chain inet weft-netpol node-"), std::string::npos) << d;
  EXPECT_NE(d.find("add element inet weft-netpol node4 { 10.0.1.8 : jump node-"), std::string::npos) << d;
  EXPECT_NE(d.find("add element inet weft-netpol node4r { 10.0.1.8 : jump rnode-"), std::string::npos) << d;
  // New rules: the new chain is declared before the map entries that jump to it.
  e_.MarkApplied(false);
  e_.UpsertClusterPolicy(Cnp(OneRule("no-nodes", "Admin", 2, "egress",
                                     R"({"action":"Deny","to":[{"nodes":{}}],"protocols":[{"udp":{}}]})")));
  d = DeltaText(e_);
  size_t chain = d.find("add chain inet weft-netpol node-"), entry = d.find("add element inet weft-netpol node4 {");
  ASSERT_NE(chain, std::string::npos) << d;
  ASSERT_NE(entry, std::string::npos) << d;
  EXPECT_LT(chain, entry);
  EXPECT_LT(entry, d.find("delete chain inet weft-netpol node-")) << d;  // the old one goes last
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
    ASSERT_EQ(FullText(inc), FullText(fresh)) << "seed " << seed;
    ASSERT_EQ(inc.NamespacesWithPolicies(), fresh.NamespacesWithPolicies()) << "seed " << seed;
  }
}

}  // namespace
}  // namespace weft::policy::netpol
