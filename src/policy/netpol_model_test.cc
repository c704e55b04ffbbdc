#include "policy/netpol_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "policy/netpol_types.h"
#include "policy/netpol_testing.h"

namespace weft::policy::netpol {
namespace {

using nlohmann::json;

using test_util::DeltaText;
using test_util::FullText;
using test_util::MakePod;
using test_util::RulesText;
using test_util::TableText;

Policy Parse(const std::string& text) {
  auto p = DecodePolicy(json::parse(text));
  EXPECT_TRUE(p.has_value());
  return *p;
}

bool Has(const std::vector<std::string>& v, const std::string& needle) {
  return std::any_of(v.begin(), v.end(), [&](const std::string& s) { return s.find(needle) != std::string::npos; });
}

// --- Decoding ---------------------------------------------------------------

TEST(NetpolDecode, DefaultsPolicyTypesLikeTheApiServer) {
  Policy p = Parse(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{}}})");
  EXPECT_TRUE(p.isolates_ingress);
  EXPECT_FALSE(p.isolates_egress);
  p = Parse(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{},"egress":[{}]}})");
  EXPECT_TRUE(p.isolates_ingress);
  EXPECT_TRUE(p.isolates_egress);
  p = Parse(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{},"policyTypes":["Egress"]}})");
  EXPECT_FALSE(p.isolates_ingress);
  EXPECT_TRUE(p.isolates_egress);
}

TEST(NetpolDecode, PortsDefaultToTcpAndAcceptNamesNumbersAndRanges) {
  Policy p = Parse(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{},
    "ingress":[{"ports":[{"port":80},{"protocol":"UDP","port":"serve-80-udp"},{"port":"81"},
                          {"protocol":"SCTP","port":80,"endPort":90},{"protocol":"ICMP","port":1}]}]}})");
  ASSERT_EQ(p.ingress.size(), 1u);
  const auto& ports = p.ingress[0].ports;
  ASSERT_EQ(ports.size(), 5u);
  EXPECT_EQ(ports[0].proto, Proto::kTcp);
  EXPECT_EQ(ports[0].port, 80);
  EXPECT_EQ(ports[1].proto, Proto::kUdp);
  EXPECT_EQ(ports[1].name, "serve-80-udp");
  EXPECT_EQ(ports[2].port, 81);
  EXPECT_TRUE(ports[2].name.empty());
  EXPECT_EQ(ports[3].end_port, 90);
  EXPECT_FALSE(ports[4].proto_valid);
  EXPECT_TRUE(p.ingress[0].any_peer);
}

TEST(NetpolDecode, EmptyFromAndPortsMeanAny) {
  Policy p = Parse(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{},
    "ingress":[{"from":[],"ports":[]}]}})");
  EXPECT_TRUE(p.ingress[0].any_peer);
  EXPECT_TRUE(p.ingress[0].any_port);
  p = Parse(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{},"ingress":[]}})");
  EXPECT_TRUE(p.ingress.empty());
  EXPECT_TRUE(p.isolates_ingress);
}

TEST(NetpolDecode, NamespaceGetsItsNameLabel) {
  auto n = DecodeNamespace(json::parse(R"({"metadata":{"name":"x","labels":{"ns":"x"}}})"));
  ASSERT_TRUE(n);
  EXPECT_EQ(n->labels.at(kNamespaceNameLabel), "x");
  EXPECT_EQ(n->labels.at("ns"), "x");
}

TEST(NetpolDecode, PodIpsPortsAndPhase) {
  auto p = DecodePod(json::parse(R"({"metadata":{"namespace":"x","name":"a","labels":{"pod":"a"}},
    "spec":{"nodeName":"n1","containers":[{"ports":[{"name":"http","containerPort":8080},
                                                    {"containerPort":9090},{"name":"dns","containerPort":53,"protocol":"UDP"}]}]},
    "status":{"phase":"Running","podIP":"10.0.0.5","podIPs":[{"ip":"10.0.0.5"},{"ip":"fd00::5"}]}})"));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->ips.size(), 2u);
  EXPECT_EQ(p->ResolvePort("http", Proto::kTcp), 8080);
  EXPECT_EQ(p->ResolvePort("http", Proto::kUdp), 0);
  EXPECT_EQ(p->ResolvePort("dns", Proto::kUdp), 53);
  EXPECT_EQ(p->ports.size(), 2u);  // the unnamed port is not kept
  EXPECT_TRUE(p->Addressable());
  p = DecodePod(json::parse(R"({"metadata":{"namespace":"x","name":"a"},"status":{"phase":"Succeeded","podIP":"10.0.0.5"}})"));
  EXPECT_FALSE(p->Addressable());
  p = DecodePod(json::parse(R"({"metadata":{"namespace":"x","name":"a"},"spec":{"hostNetwork":true},"status":{"podIP":"10.0.0.5"}})"));
  EXPECT_FALSE(p->Addressable());
}

TEST(NetpolSelector, MatchLabelsAndExpressions) {
  auto s = DecodeSelector(json::parse(R"({"matchLabels":{"app":"web"},"matchExpressions":[
      {"key":"tier","operator":"In","values":["a","b"]},{"key":"env","operator":"NotIn","values":["prod"]},
      {"key":"team","operator":"Exists"},{"key":"legacy","operator":"DoesNotExist"}]})"));
  EXPECT_TRUE(s.valid);
  EXPECT_TRUE(s.Matches({{"app", "web"}, {"tier", "a"}, {"team", "t"}}));
  EXPECT_TRUE(s.Matches({{"app", "web"}, {"tier", "b"}, {"team", "t"}, {"env", "dev"}}));
  EXPECT_FALSE(s.Matches({{"app", "web"}, {"tier", "c"}, {"team", "t"}}));
  EXPECT_FALSE(s.Matches({{"app", "web"}, {"tier", "a"}, {"team", "t"}, {"env", "prod"}}));
  EXPECT_FALSE(s.Matches({{"app", "web"}, {"tier", "a"}}));
  EXPECT_FALSE(s.Matches({{"app", "web"}, {"tier", "a"}, {"team", "t"}, {"legacy", "1"}}));
  EXPECT_FALSE(s.Matches({{"tier", "a"}, {"team", "t"}}));
  EXPECT_TRUE(DecodeSelector(json::object()).Matches({}));
  auto bad = DecodeSelector(json::parse(R"({"matchExpressions":[{"key":"a","operator":"Near"}]})"));
  EXPECT_FALSE(bad.valid);
  EXPECT_FALSE(bad.Matches({{"a", "1"}}));
  auto novals = DecodeSelector(json::parse(R"({"matchExpressions":[{"key":"a","operator":"In","values":[]}]})"));
  EXPECT_FALSE(novals.valid);
}

TEST(NetpolBlocks, CidrMinusExceptUnionAndV6) {
  IpBlock a{*IpPrefix::Parse("10.0.0.0/24"), {*IpPrefix::Parse("10.0.0.128/25"), *IpPrefix::Parse("10.0.0.16/28")}};
  EXPECT_EQ(BlockElements({a}, false),
            (std::vector<std::string>{"10.0.0.0-10.0.0.15", "10.0.0.32-10.0.0.127"}));
  // An except narrows only its own block: the second block puts .200 back.
  IpBlock b{*IpPrefix::Parse("10.0.0.200/32"), {}};
  EXPECT_EQ(BlockElements({a, b}, false),
            (std::vector<std::string>{"10.0.0.0-10.0.0.15", "10.0.0.32-10.0.0.127", "10.0.0.200"}));
  IpBlock all{*IpPrefix::Parse("0.0.0.0/0"), {*IpPrefix::Parse("10.0.0.0/8")}};
  EXPECT_EQ(BlockElements({all}, false),
            (std::vector<std::string>{"0.0.0.0-9.255.255.255", "11.0.0.0-255.255.255.255"}));
  IpBlock v6{*IpPrefix::Parse("fd00::/64"), {*IpPrefix::Parse("fd00::/65")}};
  EXPECT_EQ(BlockElements({v6}, true), (std::vector<std::string>{"fd00::8000:0:0:0-fd00::ffff:ffff:ffff:ffff"}));
  EXPECT_TRUE(BlockElements({v6}, false).empty());
  IpBlock gone{*IpPrefix::Parse("10.1.0.0/16"), {*IpPrefix::Parse("10.0.0.0/8")}};
  EXPECT_TRUE(BlockElements({gone}, false).empty());
}

// --- The engine -------------------------------------------------------------

class EngineTest : public ::testing::Test {
 protected:
  EngineTest() : e_(EngineOptions{"n1", kDefaultPendingGroup}) {
    e_.UpsertNamespace({"x", {{"ns", "x"}}});
    e_.UpsertNamespace({"y", {{"ns", "y"}}});
    e_.UpsertPod(MakePod("x", "a", {{"pod", "a"}}, "n1", "10.0.1.1", {{"serve-80-tcp", Proto::kTcp, 80}}));
    e_.UpsertPod(MakePod("x", "b", {{"pod", "b"}}, "n1", "10.0.1.2", {{"serve-80-tcp", Proto::kTcp, 81}}));
    e_.UpsertPod(MakePod("y", "a", {{"pod", "a"}}, "n2", "10.0.2.1", {{"serve-80-tcp", Proto::kTcp, 80}}));
    e_.UpsertPod(MakePod("y", "b", {{"pod", "b"}}, "n2", "10.0.2.2"));
    e_.MarkApplied(true);
  }
  std::string Chain(const std::string& prefix, const std::string& ip) {
    const auto& m = prefix == "in" ? e_.desired().ingress4 : e_.desired().egress4;
    auto it = m.find(ip);
    return it == m.end() ? "" : it->second;
  }
  std::vector<std::string> Rules(const std::string& chain) { return RulesText(e_, chain); }
  Engine e_;
};

TEST_F(EngineTest, NoPolicyMeansNoIsolationButLocalPodsAreKnown) {
  EXPECT_TRUE(e_.desired().ingress4.empty());
  EXPECT_TRUE(e_.desired().chains.empty());
  EXPECT_EQ(e_.desired().sets.at("local4").elements, (std::set<std::string>{"10.0.1.1", "10.0.1.2"}));
}

TEST_F(EngineTest, DefaultDenyIngressIsolatesEveryLocalPodOfItsNamespace) {
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"deny"},"spec":{"podSelector":{}}})"));
  std::string c = Chain("in", "10.0.1.1");
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(Rules(c), (std::vector<std::string>{"ct state invalid drop", "ip saddr 10.0.1.1 accept comment \"itself\"",
                                                "goto drop-in"}));
  EXPECT_FALSE(Chain("in", "10.0.1.2").empty());
  EXPECT_TRUE(Chain("eg", "10.0.1.1").empty());
  EXPECT_EQ(e_.NamespacesWithPolicies(), std::vector<std::string>{"x"});
  // Only the changed pieces are in the delta; nothing about sets of other pods.
  std::string d = DeltaText(e_);
  EXPECT_NE(d.find("add chain inet weft-netpol in-"), std::string::npos);
  EXPECT_NE(d.find("add element inet weft-netpol ingress4 { 10.0.1.1 : jump in-"), std::string::npos);
  EXPECT_EQ(d.find("local4"), std::string::npos) << d;
  // Newly isolated pods are "tightened": their conntrack entries get flushed.
  EXPECT_EQ(e_.Tightened(), (std::vector<std::string>{"10.0.1.1", "10.0.1.2"}));
  e_.MarkApplied(false);
  EXPECT_EQ(DeltaText(e_), "");
  e_.RemovePolicy("x/deny");
  EXPECT_TRUE(e_.desired().ingress4.empty());
  d = DeltaText(e_);
  EXPECT_NE(d.find("delete element inet weft-netpol ingress4 { 10.0.1.1, 10.0.1.2 }"), std::string::npos) << d;
  EXPECT_NE(d.find("delete chain inet weft-netpol in-"), std::string::npos);
  // The map entries go before the chains they jump to.
  EXPECT_LT(d.find("delete element inet weft-netpol ingress4"), d.find("delete chain"));
  EXPECT_TRUE(e_.NamespacesWithPolicies().empty());
}

TEST_F(EngineTest, PodSelectorPeersAreSetsOfPodAddressesKeptInStepWithLabels) {
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"allow-b"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
     "ingress":[{"from":[{"podSelector":{"matchLabels":{"pod":"b"}}}]}]}})"));
  std::string c = Chain("in", "10.0.1.1");
  ASSERT_FALSE(c.empty());
  EXPECT_TRUE(Chain("in", "10.0.1.2").empty());  // b is not selected
  std::string set;
  for (const auto& [name, s] : e_.desired().sets)
    if (name.ends_with("-p4") && name[0] == 's') set = name;
  ASSERT_FALSE(set.empty());
  // pod=b of x only (y/b is another namespace).
  EXPECT_EQ(e_.desired().sets.at(set).elements, std::set<std::string>{"10.0.1.2"});
  EXPECT_TRUE(Has(Rules(c), "ip saddr @" + set + " accept"));
  e_.MarkApplied(false);
  // Relabel x/b: it leaves the set; the chain is untouched.
  e_.UpsertPod(MakePod("x", "b", {{"pod", "c"}}, "n1", "10.0.1.2"));
  EXPECT_TRUE(e_.desired().sets.at(set).elements.empty());
  std::string d = DeltaText(e_);
  EXPECT_EQ(d, "delete element inet weft-netpol " + set + " { 10.0.1.2 }\n");
  EXPECT_EQ(e_.Tightened(), std::vector<std::string>{"10.0.1.2"});
}

TEST(NetpolElements, KeysAreTheKernelsBytes) {
  EXPECT_EQ(*ElementKey("ipv4_addr", "10.0.1.2"), std::string("\x0a\x00\x01\x02", 4));
  auto v6 = ElementKey("ipv6_addr", "fd00::1");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(*v6, std::string("\xfd\x00", 2) + std::string(13, '\0') + "\x01");
  // Each field of a concatenation padded to 4 bytes; the port in network order.
  EXPECT_EQ(*ElementKey("ipv4_addr . inet_proto . inet_service", "10.0.1.2 . tcp . 8080"),
            std::string("\x0a\x00\x01\x02" "\x06\x00\x00\x00" "\x1f\x90\x00\x00", 12));
  EXPECT_EQ(ElementKey("ipv6_addr . inet_proto . inet_service", "fd00::1 . sctp . 1")->size(), 24u);
  EXPECT_EQ(ElementKey("ipv6_addr . inet_proto . inet_service", "fd00::1 . sctp . 1")->substr(16, 1), "\x84");
  // Anything else is an error, never a wrong key.
  EXPECT_FALSE(ElementKey("ipv4_addr", "fd00::1").ok());
  EXPECT_FALSE(ElementKey("ipv4_addr", "10.0.0.0-10.0.0.9").ok());
  EXPECT_FALSE(ElementKey("ipv4_addr . inet_proto . inet_service", "10.0.1.2 . icmp . 1").ok());
  EXPECT_FALSE(ElementKey("ipv4_addr . inet_proto . inet_service", "10.0.1.2 . tcp . 65536").ok());
  EXPECT_FALSE(ElementKey("ipv4_addr . inet_proto . inet_service", "10.0.1.2 . tcp").ok());
  EXPECT_FALSE(ElementKey("ipv4_addr : verdict", "10.0.1.2").ok());
}

// Whether every op of the delta is an element change (a remote pod's event
// touches set elements and nothing else).
bool ElementsOnly(const Engine& e) {
  auto tx = e.Delta();
  if (!tx.ok()) return false;
  for (const auto& op : tx->ops())
    if (!std::holds_alternative<sys::nft::Elements>(op.object)) return false;
  return true;
}

TEST_F(EngineTest, RemotePodEventsAreElementChangesAlone) {
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"allow-b"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
     "ingress":[{"from":[{"podSelector":{"matchLabels":{"pod":"b"}}}]}]}})"));
  // A new policy: sets and chains.
  EXPECT_FALSE(ElementsOnly(e_));
  e_.MarkApplied(false);
  EXPECT_EQ(DeltaText(e_), "");  // nothing changed
  std::string set;
  for (const auto& [name, s] : e_.desired().sets)
    if (name.ends_with("-p4") && name[0] == 's') set = name;
  ASSERT_FALSE(set.empty());
  // A local pod relabelled out of the peers and another one in: elements,
  // deletions first.
  e_.UpsertPod(MakePod("x", "b", {{"pod", "c"}}, "n1", "10.0.1.2"));
  e_.UpsertPod(MakePod("x", "c", {{"pod", "b"}}, "n2", "10.0.1.9"));
  EXPECT_TRUE(ElementsOnly(e_));
  EXPECT_EQ(DeltaText(e_), "delete element inet weft-netpol " + set + " { 10.0.1.2 }\n" +
                               "add element inet weft-netpol " + set + " { 10.0.1.9 }\n");
  e_.MarkApplied(false);
  EXPECT_EQ(DeltaText(e_), "");
  // A new local pod: the dispatch maps and its chain change.
  e_.UpsertPod(MakePod("x", "d", {{"pod", "a"}}, "n1", "10.0.1.4"));
  EXPECT_FALSE(ElementsOnly(e_));
  e_.MarkApplied(false);
  // An ipBlock set is an interval set: created whole.
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"blocks"},"spec":{"podSelector":{},
     "ingress":[{"from":[{"ipBlock":{"cidr":"192.0.2.0/24"}}]}]}})"));
  EXPECT_NE(DeltaText(e_).find("add set inet weft-netpol"), std::string::npos) << DeltaText(e_);
  e_.MarkApplied(false);
}

TEST_F(EngineTest, NamespaceSelectorAndAndOrForms) {
  // AND: pods labelled b in namespaces labelled ns=y.
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"and"},"spec":{"podSelector":{},
     "ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"ns":"y"}},"podSelector":{"matchLabels":{"pod":"b"}}}]}]}})"));
  // OR: any pod of ns=y, or pods labelled b of x.
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"or"},"spec":{"podSelector":{},
     "ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"ns":"y"}}},{"podSelector":{"matchLabels":{"pod":"b"}}}]}]}})"));
  std::map<std::string, std::set<std::string>> by;
  for (const auto& [name, s] : e_.desired().sets) by[name] = s.elements;
  // One set per distinct peer: the AND peer's, and the OR rule's two peers'
  // (ns=y's pods; x's pods labelled b). No set holds the OR's union.
  std::string and_set, ns_set, b_set;
  for (const auto& [name, s] : by) {
    if (!name.ends_with("-p4")) continue;
    if (s == std::set<std::string>{"10.0.2.2"}) and_set = name;
    if (s == std::set<std::string>{"10.0.2.1", "10.0.2.2"}) ns_set = name;
    if (s == std::set<std::string>{"10.0.1.2"}) b_set = name;
    EXPECT_NE(s, (std::set<std::string>{"10.0.1.2", "10.0.2.1", "10.0.2.2"})) << name;
  }
  ASSERT_FALSE(and_set.empty());
  ASSERT_FALSE(ns_set.empty());
  ASSERT_FALSE(b_set.empty());
  EXPECT_EQ(by.size(), 3u + 2u);  // the three peers' sets, local4 and local6
  // The OR rule is one rule per peer's set, each admitting; the AND rule one.
  const auto& rules = Rules(Chain("in", "10.0.1.1"));
  for (const auto& set : {and_set, ns_set, b_set})
    EXPECT_EQ(std::count_if(rules.begin(), rules.end(),
                            [&](const std::string& r) {
                              return r.starts_with("ip saddr @" + set + " accept");
                            }),
              1)
        << set;
  // A peer another policy names again (here of namespace x, the "or"
  // policy's own podSelector peer) is the same set, with a second reference:
  // deleting one policy keeps it.
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"again"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
     "ingress":[{"from":[{"podSelector":{"matchLabels":{"pod":"b"}}}],"ports":[{"port":81}]}]}})"));
  EXPECT_EQ(e_.desired().sets.size(), 5u);
  e_.RemovePolicy("x/again");
  EXPECT_EQ(e_.desired().sets.count(b_set), 1u);
  EXPECT_EQ(e_.desired().sets.size(), 5u);
  e_.MarkApplied(false);
  // Relabel namespace y: its pods leave both sets.
  e_.UpsertNamespace({"y", {{"ns", "other"}}});
  for (const auto& [name, s] : e_.desired().sets) {
    if (!name.ends_with("-p4") && name[0] == 's') continue;
    EXPECT_EQ(s.elements.count("10.0.2.2"), 0u) << name;
  }
  std::string d = DeltaText(e_);
  EXPECT_NE(d.find("delete element"), std::string::npos);
  EXPECT_EQ(d.find("add chain"), std::string::npos);
  EXPECT_EQ(d.find("flush chain"), std::string::npos);
}

TEST_F(EngineTest, NamedIngressPortsResolvePerPod) {
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"named"},"spec":{"podSelector":{},
     "ingress":[{"ports":[{"port":"serve-80-tcp"}]}]}})"));
  // x/a maps serve-80-tcp to 80, x/b to 81.
  EXPECT_TRUE(Has(Rules(Chain("in", "10.0.1.1")), "tcp dport 80 accept"));
  EXPECT_TRUE(Has(Rules(Chain("in", "10.0.1.2")), "tcp dport 81 accept"));
  EXPECT_FALSE(Has(Rules(Chain("in", "10.0.1.2")), "dport 80 "));
}

TEST_F(EngineTest, NamedEgressPortsAreAddressProtoPortSets) {
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"eg"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
     "policyTypes":["Egress"],"egress":[{"to":[{"namespaceSelector":{}}],"ports":[{"port":"serve-80-tcp"},{"port":53,"protocol":"UDP"}]}]}})"));
  EXPECT_TRUE(Chain("in", "10.0.1.1").empty());
  std::string c = Chain("eg", "10.0.1.1");
  ASSERT_FALSE(c.empty());
  std::string named;
  for (const auto& [name, s] : e_.desired().sets)
    if (name.ends_with("-n4")) named = name;
  ASSERT_FALSE(named.empty());
  EXPECT_EQ(e_.desired().sets.at(named).elements,
            (std::set<std::string>{"10.0.1.1 . tcp . 80", "10.0.1.2 . tcp . 81", "10.0.2.1 . tcp . 80"}));
  EXPECT_TRUE(Has(Rules(c), "ip daddr . meta l4proto . th dport @" + named + " return"));
  EXPECT_TRUE(Has(Rules(c), "udp dport 53 return"));
  EXPECT_TRUE(Has(Rules(c), "ip daddr 10.0.1.1 return comment \"itself\""));
  EXPECT_EQ(Rules(c).back(), "goto drop-eg");
}

TEST_F(EngineTest, PortRangesProtocolsAndIpBlocks) {
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
     "ingress":[{"from":[{"ipBlock":{"cidr":"10.0.0.0/16","except":["10.0.2.0/24"]}}],
                 "ports":[{"protocol":"SCTP","port":80},{"port":80,"endPort":81},{"protocol":"UDP"}]}]}})"));
  const auto& r = Rules(Chain("in", "10.0.1.1"));
  std::string b4;
  for (const auto& [name, s] : e_.desired().sets)
    if (name.ends_with("-b4")) b4 = name;
  ASSERT_FALSE(b4.empty());
  EXPECT_TRUE(e_.desired().sets.at(b4).interval);
  EXPECT_EQ(e_.desired().sets.at(b4).elements,
            (std::set<std::string>{"10.0.0.0-10.0.1.255", "10.0.3.0-10.0.255.255"}));
  EXPECT_TRUE(Has(r, "ip saddr @" + b4 + " sctp dport 80 accept"));
  EXPECT_TRUE(Has(r, "ip saddr @" + b4 + " tcp dport 80-81 accept"));
  EXPECT_TRUE(Has(r, "ip saddr @" + b4 + " meta l4proto udp accept"));
  EXPECT_FALSE(Has(r, "ip6 saddr"));  // no IPv6 block, no selector peer
}

TEST_F(EngineTest, StackedPoliciesAreAUnionAndRemovingOneKeepsTheOther) {
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"p1"},"spec":{"podSelector":{},"ingress":[{"ports":[{"port":80}]}]}})"));
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"p2"},"spec":{"podSelector":{},"ingress":[{"ports":[{"port":81}]}]}})"));
  const auto& r = Rules(Chain("in", "10.0.1.1"));
  EXPECT_TRUE(Has(r, "tcp dport 80 accept"));
  EXPECT_TRUE(Has(r, "tcp dport 81 accept"));
  e_.MarkApplied(false);
  e_.RemovePolicy("x/p1");
  std::string d = DeltaText(e_);
  EXPECT_NE(d.find("flush chain"), std::string::npos);
  EXPECT_FALSE(Has(Rules(Chain("in", "10.0.1.1")), "tcp dport 80 accept"));
  EXPECT_EQ(e_.NamespacesWithPolicies(), std::vector<std::string>{"x"});
}

TEST_F(EngineTest, PolicyUpdatedToOtherPeersSwapsItsSetInOneTransaction) {
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{},
     "ingress":[{"from":[{"podSelector":{"matchLabels":{"pod":"a"}}}]}]}})"));
  e_.MarkApplied(false);
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{},
     "ingress":[{"from":[{"podSelector":{"matchLabels":{"pod":"b"}}}]}]}})"));
  std::string d = DeltaText(e_);
  // The new selection is a new shared set, filled before the chains that
  // use it are rewritten; the old one goes after them.
  EXPECT_NE(d.find("add set"), std::string::npos) << d;
  EXPECT_NE(d.find("{ 10.0.1.2 }"), std::string::npos) << d;
  EXPECT_LT(d.find("add set"), d.find("flush chain")) << d;
  EXPECT_LT(d.find("flush chain"), d.find("delete set")) << d;
  // x/a's old peers lost access: its address and the pods' are flushed.
  auto t = e_.Tightened();
  EXPECT_NE(std::find(t.begin(), t.end(), "10.0.1.1"), t.end());
}

TEST_F(EngineTest, PodsOfOtherNodesAreNeverDispatchedButArePeers) {
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"y","name":"deny"},"spec":{"podSelector":{}}})"));
  EXPECT_TRUE(e_.desired().ingress4.empty());
  EXPECT_EQ(e_.NamespacesWithPolicies(), std::vector<std::string>{"y"});
}

TEST_F(EngineTest, PodMovingAddressAndLeaving) {
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"deny"},"spec":{"podSelector":{}}})"));
  e_.MarkApplied(false);
  e_.UpsertPod(MakePod("x", "a", {{"pod", "a"}}, "n1", "10.0.1.9"));
  EXPECT_TRUE(Chain("in", "10.0.1.1").empty());
  EXPECT_FALSE(Chain("in", "10.0.1.9").empty());
  EXPECT_TRUE(e_.desired().sets.at("local4").elements.count("10.0.1.9"));
  EXPECT_FALSE(e_.desired().sets.at("local4").elements.count("10.0.1.1"));
  e_.RemovePod("x/a");
  EXPECT_TRUE(Chain("in", "10.0.1.9").empty());
  EXPECT_EQ(e_.desired().chains.size(), 2u);  // x/b's chain and its mirror
  std::string d = DeltaText(e_);
  EXPECT_NE(d.find("delete chain"), std::string::npos);
}

TEST_F(EngineTest, FullRenderHasEveryPiece) {
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"deny"},"spec":{"podSelector":{}}})"));
  // One transaction that replaces whatever table is there.
  std::string f = FullText(e_);
  EXPECT_EQ(f.find("add table inet weft-netpol\ndelete table inet weft-netpol\nadd table inet weft-netpol\n"), 0u);
  EXPECT_NE(f.find("add chain inet weft-netpol forward { type filter hook forward priority filter; policy accept; }"),
            std::string::npos);
  EXPECT_NE(f.find("add rule inet weft-netpol forward iifgroup 22342 ip saddr != @local4"), std::string::npos) << f;
  EXPECT_NE(f.find("add element inet weft-netpol ingress4 { 10.0.1.1 : jump in-"), std::string::npos) << f;
  EXPECT_NE(f.find("add set inet weft-netpol local4"), std::string::npos);
  // Chains are declared before the maps that jump to them.
  EXPECT_LT(f.find("add chain inet weft-netpol in-"), f.find("add map inet weft-netpol ingress4"));
  const std::string t = TableText(e_);
  EXPECT_NE(t.find("\tmap ingress4 {\n\t\ttype ipv4_addr : verdict\n\t\telements = { 10.0.1.1 : jump in-"),
            std::string::npos) << t;
}

TEST_F(EngineTest, RulesWithTheSamePeersShareOneSet) {
  auto count = [&](const char* suffix) {
    size_t n = 0;
    for (const auto& [name, def] : e_.desired().sets) n += name.ends_with(suffix);
    return n;
  };
  // namespaceSelector-only peers mean the same pods from any namespace.
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"p1"},"spec":{"podSelector":{},
     "ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"ns":"y"}}}]}]}})"));
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"y","name":"p2"},"spec":{"podSelector":{},
     "ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"ns":"y"}}}],"ports":[{"port":80}]}]}})"));
  EXPECT_EQ(count("-p4"), 1u);
  // podSelector-only peers are about the policy's own namespace: not shared.
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"p3"},"spec":{"podSelector":{},
     "ingress":[{"from":[{"podSelector":{"matchLabels":{"pod":"a"}}}]}]}})"));
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"y","name":"p4"},"spec":{"podSelector":{},
     "ingress":[{"from":[{"podSelector":{"matchLabels":{"pod":"a"}}}]}]}})"));
  EXPECT_EQ(count("-p4"), 3u);
  e_.MarkApplied(false);
  // The shared set outlives one of its users, and goes with the last.
  e_.RemovePolicy("x/p1");
  EXPECT_EQ(count("-p4"), 3u);
  EXPECT_EQ(DeltaText(e_).find("delete set"), std::string::npos);
  e_.RemovePolicy("y/p2");
  EXPECT_EQ(count("-p4"), 2u);
  EXPECT_NE(DeltaText(e_).find("delete set"), std::string::npos);
  // A policy edited in place keeps the sets both versions use (no churn).
  e_.MarkApplied(false);
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"p3"},"spec":{"podSelector":{},
     "ingress":[{"from":[{"podSelector":{"matchLabels":{"pod":"a"}}}],"ports":[{"port":81}]}]}})"));
  std::string d = DeltaText(e_);
  EXPECT_EQ(d.find(" set "), std::string::npos) << d;
  EXPECT_NE(d.find("flush chain"), std::string::npos) << d;
}

TEST_F(EngineTest, ASetDeletedAndRecreatedInOneBatchIsFlushedAndRefilled) {
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{},
     "ingress":[{"from":[{"podSelector":{"matchLabels":{"pod":"b"}}}]}]}})"));
  e_.MarkApplied(false);
  e_.RemovePolicy("x/p");
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{},
     "ingress":[{"from":[{"podSelector":{"matchLabels":{"pod":"b"}}}]}]}})"));
  std::string d = DeltaText(e_);
  EXPECT_NE(d.find("flush set inet weft-netpol s"), std::string::npos) << d;
  EXPECT_NE(d.find("{ 10.0.1.2 }"), std::string::npos) << d;
  EXPECT_EQ(d.find("delete set"), std::string::npos) << d;
}

TEST_F(EngineTest, RepliesOfRecheckedConnectionsUseMirroredChains) {
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
     "policyTypes":["Ingress","Egress"],
     "ingress":[{"from":[{"podSelector":{"matchLabels":{"pod":"b"}}}],"ports":[{"port":80}]}],
     "egress":[{"to":[{"podSelector":{}}],"ports":[{"port":"serve-80-tcp"}]}]}})"));
  std::string in = Chain("in", "10.0.1.1");
  ASSERT_FALSE(in.empty());
  EXPECT_EQ(e_.desired().ingress4r.at("10.0.1.1"), "r" + in);
  const auto& fwd = Rules(in);
  const auto& rev = Rules("r" + in);
  ASSERT_EQ(fwd.size(), rev.size());
  // A dropped reply goes to the reply drop chain: its record says so.
  EXPECT_EQ(fwd.back(), "goto drop-in");
  EXPECT_EQ(rev.back(), "goto rdrop-in");
  std::string full = TableText(e_);
  EXPECT_NE(full.find("\tchain rdrop-in {\n\t\tlimit name \"drop-log\" log prefix \"weft-np rin\" group 22342\n"
                      "\t\tcounter name \"drop-ingress\" drop\n\t}\n"),
            std::string::npos)
      << full;
  EXPECT_NE(full.find("limit drop-log {\n\t\trate 1000/second burst 100 packets\n\t}"), std::string::npos) << full;
  EXPECT_NE(full.find("ip saddr != @local4 goto pending-eg comment \"pending pod\""), std::string::npos) << full;
  for (size_t i = 0; i < fwd.size(); ++i) {
    if (fwd[i].find("saddr @") != std::string::npos) {
      // A reply of x/b -> x/a:80 comes from x/a's port 80 and goes to x/b.
      EXPECT_NE(rev[i].find("daddr @"), std::string::npos) << rev[i];
      EXPECT_NE(rev[i].find("tcp sport 80 accept"), std::string::npos) << rev[i];
    }
  }
  EXPECT_TRUE(Has(rev, "ip daddr 10.0.1.1 accept comment \"itself\""));
  std::string eg = Chain("eg", "10.0.1.1");
  EXPECT_TRUE(Has(Rules("r" + eg), "ip saddr . meta l4proto . th sport @"));
  EXPECT_TRUE(Has(Rules("r" + eg), "ip saddr 10.0.1.1 return comment \"itself\""));
  // The base chains have the rule counts the kernel check expects.
  std::string f = TableText(e_);
  auto count_rules = [&](const std::string& chain) {
    size_t start = f.find("\tchain " + chain + " {\n");
    EXPECT_NE(start, std::string::npos) << chain;
    size_t end = f.find("\n\t}\n", start);
    std::string body = f.substr(start, end - start);
    size_t lines = std::count(body.begin(), body.end(), '\n');
    return lines - (chain == "forward" ? 1 : 0);  // the header line; forward's hook line
  };
  EXPECT_EQ(count_rules("forward"), kForwardChainRules);
  EXPECT_EQ(count_rules("recheck-reply"), kRecheckChainRules);
  e_.RemovePolicy("x/p");
  EXPECT_TRUE(e_.desired().chains.empty());
  EXPECT_TRUE(e_.desired().ingress4r.empty());
}

// The model after any sequence of events equals the model built from the
// final objects in one go (level-triggered: no event history matters).
TEST(NetpolEngine, IpV6SetsAndRulesExistOnlyWhileAPodHasAnIpV6Address) {
  std::vector<Policy> pols = {
      Parse(R"({"metadata":{"namespace":"x","name":"p1"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
        "policyTypes":["Ingress","Egress"],
        "ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"ns":"y"}}},{"podSelector":{}}]}],
        "egress":[{"to":[{"podSelector":{}}],"ports":[{"port":"serve-80-tcp"}]}]}})")};
  auto v4 = [] {
    return std::vector<Pod>{MakePod("x", "a", {{"pod", "a"}}, "n1", "10.0.1.1", {{"serve-80-tcp", Proto::kTcp, 80}}),
                            MakePod("x", "b", {{"pod", "b"}}, "n2", "10.0.2.2", {{"serve-80-tcp", Proto::kTcp, 81}}),
                            MakePod("y", "c", {{"pod", "c"}}, "n2", "10.0.2.3")};
  };
  auto fresh = [&](const std::vector<Pod>& pods) {
    auto e = std::make_unique<Engine>(EngineOptions{"n1"});
    e->UpsertNamespace({"x", {{"ns", "x"}}});
    e->UpsertNamespace({"y", {{"ns", "y"}}});
    for (const auto& p : pods) e->UpsertPod(p);
    for (const auto& p : pols) e->UpsertPolicy(p);
    return e;
  };
  auto has6 = [](const Engine& e) {
    for (const auto& [name, set] : e.desired().sets)
      if (name.ends_with("-p6") || name.ends_with("-n6")) return true;
    return false;
  };
  auto rules6 = [](const Engine& e) {
    for (const auto& [name, rules] : e.desired().chains)
      for (const auto& rule : rules)
        if (const std::string r = nftr::Render(rule); r.find("ip6 saddr @s") != std::string::npos ||
                                                      r.find("ip6 daddr @s") != std::string::npos ||
                                                      r.find("ip6 daddr . meta l4proto") != std::string::npos)
          return true;
    return false;
  };
  Engine inc(EngineOptions{"n1"});
  inc.UpsertNamespace({"x", {{"ns", "x"}}});
  inc.UpsertNamespace({"y", {{"ns", "y"}}});
  for (const auto& p : v4()) inc.UpsertPod(p);
  for (const auto& p : pols) inc.UpsertPolicy(p);
  inc.MarkApplied(true);
  EXPECT_FALSE(has6(inc));
  EXPECT_FALSE(rules6(inc));
  // A dual-stack remote pod: the IPv6 halves appear, filled, and the local
  // chain gains its IPv6 peer rules, in the same delta.
  Pod ds = MakePod("y", "d", {{"pod", "d"}}, "n2", "10.0.2.4", {{"serve-80-tcp", Proto::kTcp, 83}});
  ds.ips.push_back(*IpAddress::Parse("fd00::4"));
  inc.UpsertPod(ds);
  EXPECT_TRUE(has6(inc));
  EXPECT_TRUE(rules6(inc));
  auto with = v4();
  with.push_back(ds);
  EXPECT_EQ(inc.desired(), fresh(with)->desired());
  std::string d = DeltaText(inc);
  EXPECT_NE(d.find("-p6 { fd00::4 }"), std::string::npos) << d;
  EXPECT_LT(d.find("add set"), d.find("flush chain")) << d;  // the sets before the rules naming them
  inc.MarkApplied(false);
  // A second one and a relabel: ordinary element deltas.
  Pod ds2 = MakePod("x", "e", {{"pod", "e"}}, "n2", "fd00::5", {{"serve-80-tcp", Proto::kTcp, 85}});
  inc.UpsertPod(ds2);
  with.push_back(ds2);
  EXPECT_EQ(inc.desired(), fresh(with)->desired());
  EXPECT_TRUE(ElementsOnly(inc));
  d = DeltaText(inc);
  EXPECT_NE(d.find("-n6 { fd00::5 . tcp . 85 }"), std::string::npos) << d;
  inc.MarkApplied(false);
  // Both gone (one deleted, one now IPv4-only): the sets and rules go, the
  // rules before the sets they name.
  inc.RemovePod("x/e");
  Pod back = ds;
  back.ips.pop_back();
  inc.UpsertPod(back);
  auto without = v4();
  without.push_back(back);
  EXPECT_FALSE(has6(inc));
  EXPECT_FALSE(rules6(inc));
  EXPECT_EQ(inc.desired(), fresh(without)->desired());
  EXPECT_EQ(FullText(inc), FullText(*fresh(without)));
  d = DeltaText(inc);
  EXPECT_NE(d.find("delete set"), std::string::npos) << d;
  EXPECT_LT(d.find("flush chain"), d.find("delete set")) << d;
}

TEST(NetpolEngine, IncrementalEqualsFromScratch) {
  Engine inc(EngineOptions{"n1"});
  std::vector<Policy> pols = {
      Parse(R"({"metadata":{"namespace":"x","name":"p1"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
        "ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"ns":"y"}}},{"podSelector":{}}]}],
        "egress":[{"to":[{"ipBlock":{"cidr":"10.0.0.0/8","except":["10.0.2.0/24"]}}],"ports":[{"port":"serve-80-tcp"}]}]}})"),
      Parse(R"({"metadata":{"namespace":"y","name":"p2"},"spec":{"podSelector":{},"policyTypes":["Ingress","Egress"],
        "ingress":[{"from":[{"namespaceSelector":{"matchExpressions":[{"key":"ns","operator":"In","values":["x"]}]},
                             "podSelector":{"matchLabels":{"pod":"b"}}}]}]}})")};
  std::vector<Pod> pods = {MakePod("x", "a", {{"pod", "a"}}, "n1", "10.0.1.1", {{"serve-80-tcp", Proto::kTcp, 80}}),
                           MakePod("x", "b", {{"pod", "b"}}, "n2", "10.0.2.2", {{"serve-80-tcp", Proto::kTcp, 81}}),
                           MakePod("y", "a", {{"pod", "a"}}, "n1", "10.0.1.3"),
                           MakePod("y", "b", {{"pod", "b"}}, "n1", "10.0.1.4", {{"serve-80-tcp", Proto::kTcp, 82}})};
  // A noisy history: everything added, relabelled, removed, re-added in an odd order.
  inc.UpsertPolicy(pols[1]);
  for (const auto& p : pods) inc.UpsertPod(p);
  inc.UpsertNamespace({"x", {{"ns", "y"}}});
  inc.UpsertPolicy(pols[0]);
  inc.UpsertPod(MakePod("x", "a", {{"pod", "z"}}, "n1", "10.0.1.7"));
  inc.UpsertNamespace({"y", {{"ns", "x"}}});
  inc.RemovePod("y/b");
  inc.RemovePolicy("y/p2");
  inc.UpsertNamespace({"x", {{"ns", "x"}}});
  inc.UpsertNamespace({"y", {{"ns", "y"}}});
  inc.UpsertPolicy(pols[1]);
  for (const auto& p : pods) inc.UpsertPod(p);

  Engine fresh(EngineOptions{"n1"});
  fresh.UpsertNamespace({"x", {{"ns", "x"}}});
  fresh.UpsertNamespace({"y", {{"ns", "y"}}});
  for (const auto& p : pods) fresh.UpsertPod(p);
  for (const auto& p : pols) fresh.UpsertPolicy(p);
  EXPECT_EQ(inc.desired(), fresh.desired());
  EXPECT_EQ(FullText(inc), FullText(fresh));
}

}  // namespace
}  // namespace weft::policy::netpol
