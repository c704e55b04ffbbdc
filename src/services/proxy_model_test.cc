#include "services/proxy_model.h"

#include <gtest/gtest.h>

#include <linux/netfilter.h>
#include <random>
#include <linux/netfilter/nf_tables.h>

#include "services/proxy_kernel.h"
#include "sys/nft_fake.h"
#include "sys/nft_render.h"
#include "services/test_objects.h"

namespace weft::services {
namespace {

using testing::Ep;
using testing::json;

Config TestConfig() {
  Config c;
  c.node = {"n1", "zone-a"};
  c.cluster_cidrs = {*IpPrefix::Parse("10.244.0.0/16"), *IpPrefix::Parse("fd00:244::/56")};
  return c;
}

// A model and the fake kernel it programs: every change's transaction is
// applied as the kernel would apply it, starting from Full().
class ProxyTest : public ::testing::Test {
 protected:
  void SetUp() override { Apply(model_.Full()); }

  void Apply(const nft::Transaction& tx) {
    if (tx.empty()) return;
    Status st = kernel_.Apply(tx);
    ASSERT_TRUE(st.ok()) << st.ToString() << "\n" << nft::RenderTransaction(tx);
  }
  // A change as weftd will apply it: the transaction, then its conntrack cleanup.
  void Apply(const Change& c) {
    Status st = ApplyChange(kernel_, c);
    ASSERT_TRUE(st.ok()) << st.ToString() << "\n" << nft::RenderTransaction(c.tx);
  }
  Change Svc(const json& j) {
    Service s = testing::Decoded(j);
    svcs_[s.Key()] = s;
    Change c = model_.UpsertService(s);
    Apply(c);
    return c;
  }
  Change Slice(const json& j) {
    EndpointSlice s = testing::DecodedSlice(j);
    slices_[s.Key()] = s;
    Change c = model_.UpsertSlice(s);
    Apply(c);
    return c;
  }
  Change DelSvc(const std::string& key) {
    svcs_.erase(key);
    Change c = model_.DeleteService(key);
    Apply(c);
    return c;
  }
  Change DelSlice(const std::string& key) {
    slices_.erase(key);
    Change c = model_.DeleteSlice(key);
    Apply(c);
    return c;
  }
  // The key invariant: what the deltas left in the kernel is what a model
  // built at once from the objects now known writes with Full().
  void ExpectKernelIsFresh(const std::string& step) {
    Model fresh(cfg_);
    for (const auto& [k, s] : svcs_) (void)fresh.UpsertService(s);
    for (const auto& [k, s] : slices_) (void)fresh.UpsertSlice(s);
    auto dump = kernel_.Dump();
    ASSERT_TRUE(dump.ok()) << dump.status().ToString();
    const TableDigest got = DigestOf(*dump), want = fresh.Digest();
    EXPECT_TRUE(want.chains.count("services")) << "the fresh model's table did not apply";
    EXPECT_EQ(got, want) << "after " << step << ":\n" << got.Diff(want);
    EXPECT_EQ(model_.Digest(), want) << "after " << step;
  }
  std::string Listing() {
    auto dump = kernel_.Dump();
    return dump.ok() ? nft::RenderTable(*dump) : dump.status().ToString();
  }
  bool Lists(const std::string& line) { return Listing().find(line) != std::string::npos; }

  Config cfg_ = TestConfig();
  Model model_{cfg_};
  FakeProxyKernel kernel_;
  std::map<std::string, Service> svcs_;
  std::map<std::string, EndpointSlice> slices_;
};

json TcpAndUdp() {
  return json::array({{{"name", "http"}, {"protocol", "TCP"}, {"port", 80}, {"targetPort", "web"}},
                      {{"name", "dns"}, {"protocol", "UDP"}, {"port", 53}}});
}
json SlicePorts() {
  return json::array({{{"name", "http"}, {"protocol", "TCP"}, {"port", 8080}},
                      {{"name", "dns"}, {"protocol", "UDP"}, {"port", 5353}}});
}
json NodePortSvc(const std::string& name, const std::string& ip, int node_port) {
  json j = testing::ServiceJson("default", name, {ip},
                                json::array({{{"name", "http"}, {"port", 80}, {"nodePort", node_port}}}));
  j["spec"]["type"] = "NodePort";
  return j;
}

TEST_F(ProxyTest, EveryDeltaLeavesWhatAFreshFullWrites) {
  json a = testing::ServiceJson("default", "a", {"10.96.0.10"}, TcpAndUdp());
  Svc(a);
  ExpectKernelIsFresh("service a without endpoints");
  std::vector<Ep> eps = {{.ip = "10.244.1.5", .node = "n1"}, {.ip = "10.244.2.5"}};
  Slice(testing::SliceJson("default", "a", "a-1", eps, SlicePorts()));
  ExpectKernelIsFresh("a's first slice");
  json b = NodePortSvc("b", "10.96.0.20", 30080);
  b["spec"]["externalTrafficPolicy"] = "Local";
  Svc(b);
  Slice(testing::SliceJson("default", "b", "b-1", {{.ip = "10.244.3.7"}}, json::array({{{"name", "http"}, {"port", 80}}})));
  ExpectKernelIsFresh("b: NodePort, eTP Local, no local endpoint");
  eps.push_back({.ip = "10.244.2.6"});
  Slice(testing::SliceJson("default", "a", "a-1", eps, SlicePorts()));
  ExpectKernelIsFresh("a: a third endpoint");
  eps[1].ready = false;
  eps[1].terminating = true;
  Slice(testing::SliceJson("default", "a", "a-1", eps, SlicePorts()));
  ExpectKernelIsFresh("a: one terminating");
  a["spec"]["sessionAffinity"] = "ClientIP";
  Svc(a);
  ExpectKernelIsFresh("a: affinity");
  a["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] = 60;
  Svc(a);
  ExpectKernelIsFresh("a: affinity timeout changed");
  a["spec"]["clusterIPs"] = {"10.96.0.10", "fd00:96::10"};
  Svc(a);
  Slice(testing::SliceJson("default", "a", "a-2", {{.ip = "10.244.2.6"}}, SlicePorts()));
  Slice(testing::SliceJson("default", "a", "a-6", {{.ip = "fd00:244::5", .node = "n1"}}, SlicePorts()));
  ExpectKernelIsFresh("a: dual-stack, a duplicate endpoint, an IPv6 slice");
  Slice(testing::SliceJson("default", "b", "b-1", {{.ip = "10.244.3.7"}, {.ip = "10.244.1.9", .node = "n1"}},
                           json::array({{{"name", "http"}, {"port", 80}}})));
  ExpectKernelIsFresh("b: a local endpoint");
  json c = testing::ServiceJson("default", "c", {"10.96.0.30"}, json::array({{{"name", "http"}, {"port", 80}}}));
  c["spec"]["externalIPs"] = {"192.0.2.7"};
  json d = c;
  d["metadata"]["name"] = "d";
  d["spec"]["clusterIPs"] = {"10.96.0.40"};
  Svc(c);
  Svc(d);  // claims c's externalIP and port too
  Slice(testing::SliceJson("default", "d", "d-1", {{.ip = "10.244.4.1"}}, json::array({{{"name", "http"}, {"port", 80}}})));
  ExpectKernelIsFresh("c and d claim one externalIP");
  DelSvc("default/c");
  ExpectKernelIsFresh("c gone: d holds the externalIP");
  // a-2's label now names b (its ports do not fit b's: no endpoint there).
  Slice(testing::SliceJson("default", "b", "a-2", {{.ip = "10.244.2.6"}}, SlicePorts()));
  ExpectKernelIsFresh("a-2 moved to b");
  b["spec"]["internalTrafficPolicy"] = "Local";
  Svc(b);
  ExpectKernelIsFresh("b: iTP Local");
  DelSvc("default/a");
  ExpectKernelIsFresh("a deleted, its slices kept");
  Svc(a);
  ExpectKernelIsFresh("a back");
  json e = testing::ServiceJson("default", "e", {"None"});
  Svc(e);
  Slice(testing::SliceJson("default", "e", "e-1", {{.ip = "10.244.5.1"}}));
  json f = testing::ServiceJson("default", "f", {"10.96.0.60"});
  f["metadata"]["labels"][kProxyNameLabel] = "other";
  Svc(f);
  ExpectKernelIsFresh("headless and another proxy's");
  DelSlice("default/a-1");
  DelSlice("default/a-6");
  ExpectKernelIsFresh("a's slices deleted");
  for (const char* s : {"default/a", "default/b", "default/d", "default/e", "default/f"}) DelSvc(s);
  for (const char* s : {"default/a-2", "default/b-1", "default/d-1", "default/e-1"}) DelSlice(s);
  ExpectKernelIsFresh("everything deleted");
  EXPECT_EQ(model_.Objects("default/a"), nullptr);
  // Only the fixed part is left.
  Model empty(cfg_);
  EXPECT_EQ(model_.Digest(), empty.Digest());
}

const std::string kWeb = "default/web/tcp/http";
std::string SvcChain(bool v6 = false) { return ChainName("svc", v6, kWeb); }
std::string LocalChain() { return ChainName("local", false, kWeb); }
std::string ExtChain() { return ChainName("ext", false, kWeb); }
std::string EpChain(const std::string& ep, bool v6 = false) { return ChainName("ep", v6, kWeb, ep); }
std::string AffSet(const std::string& ep) { return ChainName("aff", false, kWeb, ep); }
json Http80() { return json::array({{{"name", "http"}, {"port", 80}}}); }
json Http8080() { return json::array({{{"name", "http"}, {"port", 8080}}}); }
json Web(const std::vector<std::string>& ips = {"10.96.0.10"}) { return testing::ServiceJson("default", "web", ips, Http80()); }
json WebSlice(const std::vector<Ep>& eps, const std::string& name = "web-1") {
  return testing::SliceJson("default", "web", name, eps, Http8080());
}

// What the kernel's map holds for a key (nullopt: no element).
std::optional<nft::Verdict> MapVerdict(FakeProxyKernel& kernel, const std::string& map, const std::string& key) {
  auto t = kernel.Dump();
  if (!t.ok()) return std::nullopt;
  for (const auto& e : t->elements[map])
    if (e.key == key) return e.verdict;
  return std::nullopt;
}
std::string Vip(const char* ip, Proto p = Proto::kTcp, uint16_t port = 80) {
  return MapKeyBytes(*IpAddress::Parse(ip), p, port);
}
nft::Verdict GotoV(const std::string& c) { return nft::Verdict{NFT_GOTO, c}; }
const nft::Verdict kDrop{NF_DROP, ""};

TEST_F(ProxyTest, NoEndpointsRejectsUntilTheFirstEndpointComes) {
  Svc(Web());
  EXPECT_EQ(MapVerdict(kernel_, "no-endpoint-services4", Vip("10.96.0.10")), GotoV(kRejectChain));
  EXPECT_EQ(MapVerdict(kernel_, "service-ips4", Vip("10.96.0.10")), std::nullopt);
  EXPECT_FALSE(Lists("chain " + SvcChain()));
  Slice(WebSlice({{.ip = "10.244.2.5"}}));
  EXPECT_EQ(MapVerdict(kernel_, "no-endpoint-services4", Vip("10.96.0.10")), std::nullopt);
  EXPECT_EQ(MapVerdict(kernel_, "service-ips4", Vip("10.96.0.10")), GotoV(SvcChain()));
  EXPECT_TRUE(Lists("numgen random mod 1 vmap { 0 : goto " + EpChain("10.244.2.5/8080") + " }")) << Listing();
  // Not ready, not terminating: none usable again.
  Slice(WebSlice({{.ip = "10.244.2.5", .ready = false}}));
  EXPECT_EQ(MapVerdict(kernel_, "no-endpoint-services4", Vip("10.96.0.10")), GotoV(kRejectChain));
  EXPECT_FALSE(Lists("chain " + EpChain("10.244.2.5/8080")));
}

TEST_F(ProxyTest, TerminatingEndpointsServeOnlyWhenNoneIsReady) {
  Svc(Web());
  Slice(WebSlice({{.ip = "10.244.2.5"}, {.ip = "10.244.2.6", .ready = false, .serving = true, .terminating = true}}));
  EXPECT_TRUE(Lists("numgen random mod 1 vmap { 0 : goto " + EpChain("10.244.2.5/8080") + " }")) << Listing();
  EXPECT_FALSE(Lists("chain " + EpChain("10.244.2.6/8080")));
  Slice(WebSlice({{.ip = "10.244.2.6", .ready = false, .serving = true, .terminating = true}}));
  EXPECT_TRUE(Lists("numgen random mod 1 vmap { 0 : goto " + EpChain("10.244.2.6/8080") + " }")) << Listing();
}

TEST_F(ProxyTest, InternalTrafficPolicyLocal) {
  json web = Web();
  web["spec"]["internalTrafficPolicy"] = "Local";
  Svc(web);
  Slice(WebSlice({{.ip = "10.244.1.5", .node = "n1"}, {.ip = "10.244.2.5"}}));
  EXPECT_EQ(MapVerdict(kernel_, "service-ips4", Vip("10.96.0.10")), GotoV(LocalChain()));
  EXPECT_TRUE(Lists("numgen random mod 1 vmap { 0 : goto " + EpChain("10.244.1.5/8080") + " }")) << Listing();
  EXPECT_FALSE(Lists("chain " + SvcChain() + " "));
  // Endpoints only elsewhere: ClusterIP traffic is dropped, not rejected (kube-proxy's verdict).
  Slice(WebSlice({{.ip = "10.244.2.5"}}));
  EXPECT_EQ(MapVerdict(kernel_, "service-ips4", Vip("10.96.0.10")), std::nullopt);
  EXPECT_EQ(MapVerdict(kernel_, "no-endpoint-services4", Vip("10.96.0.10")), kDrop);
}

TEST_F(ProxyTest, NodePortClusterPolicyMasqueradesAndExternalLocalKeepsTheSource) {
  Svc(NodePortSvc("web", "10.96.0.10", 30080));
  Slice(WebSlice({{.ip = "10.244.1.5", .node = "n1"}, {.ip = "10.244.2.5"}}));
  const std::string np = MapKeyBytes(std::nullopt, Proto::kTcp, 30080);
  EXPECT_EQ(MapVerdict(kernel_, "service-nodeports4", np), GotoV(ExtChain()));
  EXPECT_TRUE(Lists("chain " + ExtChain() + " {\n\t\tjump mark-for-masquerade\n\t\tgoto " + SvcChain() + "\n\t}"))
      << Listing();

  json local = NodePortSvc("web", "10.96.0.10", 30080);
  local["spec"]["externalTrafficPolicy"] = "Local";
  Svc(local);
  EXPECT_TRUE(Lists("chain " + ExtChain() + " {\n"
                    "\t\tip saddr 10.244.0.0/16 goto " + SvcChain() + " comment \"short-circuit pod traffic\"\n"
                    "\t\tfib saddr type local jump mark-for-masquerade comment \"masquerade local traffic\"\n"
                    "\t\tfib saddr type local goto " + SvcChain() + " comment \"short-circuit local traffic\"\n"
                    "\t\tgoto " + LocalChain() + "\n\t}"))
      << Listing();
  EXPECT_TRUE(Lists("chain " + LocalChain() + " {\n\t\tnumgen random mod 1 vmap { 0 : goto " + EpChain("10.244.1.5/8080")))
      << Listing();
  // No local endpoint: NodePort traffic from elsewhere is dropped; the node's and pods' still short-circuit.
  Slice(WebSlice({{.ip = "10.244.2.5"}}));
  EXPECT_EQ(MapVerdict(kernel_, "service-nodeports4", np), GotoV(ExtChain()));
  EXPECT_EQ(MapVerdict(kernel_, "no-endpoint-nodeports4", np), kDrop);
  EXPECT_FALSE(Lists("goto " + LocalChain()));
  // No endpoint at all: rejected.
  Slice(WebSlice({}));
  EXPECT_EQ(MapVerdict(kernel_, "service-nodeports4", np), std::nullopt);
  EXPECT_EQ(MapVerdict(kernel_, "no-endpoint-nodeports4", np), GotoV(kRejectChain));
  EXPECT_FALSE(Lists("chain " + ExtChain()));
}

TEST_F(ProxyTest, ExternalAndLoadBalancerIpsGoThroughTheExternalChain) {
  json web = Web();
  web["spec"]["type"] = "LoadBalancer";
  web["spec"]["externalIPs"] = {"192.0.2.7"};
  web["status"]["loadBalancer"]["ingress"] = {{{"ip", "198.51.100.1"}}};
  Svc(web);
  EXPECT_EQ(MapVerdict(kernel_, "no-endpoint-services4", Vip("192.0.2.7")), GotoV(kRejectChain));
  EXPECT_EQ(MapVerdict(kernel_, "no-endpoint-services4", Vip("198.51.100.1")), GotoV(kRejectChain));
  Slice(WebSlice({{.ip = "10.244.2.5"}}));
  EXPECT_EQ(MapVerdict(kernel_, "service-ips4", Vip("192.0.2.7")), GotoV(ExtChain()));
  EXPECT_EQ(MapVerdict(kernel_, "service-ips4", Vip("198.51.100.1")), GotoV(ExtChain()));
  EXPECT_EQ(MapVerdict(kernel_, "service-ips4", Vip("10.96.0.10")), GotoV(SvcChain()));
}

TEST_F(ProxyTest, SessionAffinity) {
  json web = Web();
  web["spec"]["sessionAffinity"] = "ClientIP";
  Svc(web);
  Slice(WebSlice({{.ip = "10.244.1.5"}, {.ip = "10.244.2.5"}}));
  const std::string a = AffSet("10.244.1.5/8080"), b = AffSet("10.244.2.5/8080");
  EXPECT_TRUE(Lists("set " + a + " {\n\t\ttype ipv4_addr\n\t\tflags dynamic,timeout\n\t\ttimeout 3h\n\t}")) << Listing();
  // The service chain looks the client up before it picks at random.
  EXPECT_TRUE(Lists("\t\tip saddr @" + a + " goto " + EpChain("10.244.1.5/8080") + "\n\t\tip saddr @" + b + " goto " +
                    EpChain("10.244.2.5/8080") + "\n\t\tnumgen random mod 2"))
      << Listing();
  // The endpoint's chain records it.
  EXPECT_TRUE(Lists("\t\tupdate @" + a + " { ip saddr }\n\t\tmeta l4proto tcp dnat ip to 10.244.1.5:8080")) << Listing();
  web["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] = 60;
  Svc(web);
  EXPECT_TRUE(Lists("set " + a + " {\n\t\ttype ipv4_addr\n\t\tflags dynamic,timeout\n\t\ttimeout 1m\n\t}")) << Listing();
  web["spec"]["sessionAffinity"] = "None";
  Svc(web);
  EXPECT_FALSE(Lists("aff4-")) << Listing();
}

TEST_F(ProxyTest, ClusterIpMasqueradesOnlyOffClusterSources) {
  Svc(Web());
  Slice(WebSlice({{.ip = "10.244.2.5"}}));
  const std::string masq = "ip daddr 10.96.0.10 tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade";
  EXPECT_TRUE(Lists(masq)) << Listing();
  // Hairpin: the endpoint reaching itself.
  EXPECT_TRUE(Lists("chain " + EpChain("10.244.2.5/8080") + " {\n\t\tip saddr 10.244.2.5 jump mark-for-masquerade\n"))
      << Listing();
  // No cluster CIDR: no masquerade of ClusterIP traffic (the pod's source is kept); masquerade-all: all of it.
  for (bool all : {false, true}) {
    Config cfg = TestConfig();
    cfg.cluster_cidrs.clear();
    cfg.masquerade_all = all;
    Model m(cfg);
    (void)m.UpsertService(testing::Decoded(Web()));
    (void)m.UpsertSlice(testing::DecodedSlice(WebSlice({{.ip = "10.244.2.5"}})));
    const auto& rules = m.Objects("default/web")->chains.at(SvcChain());
    ASSERT_EQ(rules.size(), all ? 2u : 1u);
    if (all) {
      EXPECT_EQ(nft::RenderRule(nft::Family::kInet, rules[0].rule),
                "ip daddr 10.96.0.10 tcp dport 80 jump mark-for-masquerade");
    }
  }
}

TEST_F(ProxyTest, DualStackServesBothFamiliesInOneChange) {
  Svc(Web({"10.96.0.10", "fd00:96::10"}));
  Slice(WebSlice({{.ip = "10.244.2.5"}}));
  Change c = Slice(WebSlice({{.ip = "fd00:244::5"}}, "web-6"));
  EXPECT_EQ(MapVerdict(kernel_, "service-ips4", Vip("10.96.0.10")), GotoV(SvcChain()));
  EXPECT_EQ(MapVerdict(kernel_, "service-ips6", Vip("fd00:96::10")), GotoV(SvcChain(true)));
  EXPECT_TRUE(Lists("numgen random mod 1 vmap { 0 : goto " + EpChain("fd00.244..5/8080", true) + " }")) << Listing();
  EXPECT_TRUE(Lists("meta l4proto tcp dnat ip6 to [fd00:244::5]:8080")) << Listing();
  EXPECT_TRUE(Lists("ip6 daddr fd00:96::10 tcp dport 80 ip6 saddr != fd00:244::/56 jump mark-for-masquerade")) << Listing();
  // The IPv6 slice changed only the IPv6 half.
  for (const auto& op : c.tx.ops())
    if (const auto* ch = std::get_if<nft::Chain>(&op.object)) {
      EXPECT_TRUE(ch->name.rfind("svc6-", 0) == 0 || ch->name.rfind("ep6-", 0) == 0) << ch->name;
    }
}

TEST_F(ProxyTest, HeadlessOtherProxiesAndExternalNameAreLeftAlone) {
  json headless = testing::ServiceJson("default", "h", {"None"});
  json labelled = testing::ServiceJson("default", "l", {"10.96.0.11"});
  labelled["metadata"]["labels"][kHeadlessLabel] = "";
  json other = testing::ServiceJson("default", "o", {"10.96.0.12"});
  other["metadata"]["labels"][kProxyNameLabel] = "someone-else";
  json ext = {{"metadata", {{"namespace", "default"}, {"name", "x"}}},
              {"spec", {{"type", "ExternalName"}, {"externalName", "example.com"}, {"ports", Http80()}}}};
  for (const json* j : {&headless, &labelled, &other, &ext}) {
    Change c = Svc(*j);
    const std::string name = (*j)["metadata"]["name"];
    EXPECT_TRUE(c.tx.empty()) << name;
    c = Slice(testing::SliceJson("default", name, name + "-1", {{.ip = "10.244.2.5"}}));
    EXPECT_TRUE(c.tx.empty()) << name;
    EXPECT_EQ(model_.Objects("default/" + name), nullptr) << name;
  }
  EXPECT_EQ(model_.Digest(), Model(cfg_).Digest());
}

TEST_F(ProxyTest, NamedTargetPortsResolveThroughTheSlicesPorts) {
  Svc(testing::ServiceJson("default", "web", {"10.96.0.10"},
                           json::array({{{"name", "http"}, {"port", 80}, {"targetPort", "web"}}})));
  // Two slices of pods that name the port differently: each slice says its number.
  Slice(testing::SliceJson("default", "web", "web-1", {{.ip = "10.244.1.5"}}, Http8080()));
  Slice(testing::SliceJson("default", "web", "web-2", {{.ip = "10.244.2.5"}}, json::array({{{"name", "http"}, {"port", 9090}}})));
  EXPECT_TRUE(Lists("dnat ip to 10.244.1.5:8080")) << Listing();
  EXPECT_TRUE(Lists("dnat ip to 10.244.2.5:9090")) << Listing();
}

TEST_F(ProxyTest, AnEndpointInTwoSlicesIsOne) {
  Svc(Web());
  Slice(WebSlice({{.ip = "10.244.2.5"}}, "web-1"));
  Change c = Slice(WebSlice({{.ip = "10.244.2.5"}}, "web-2"));
  EXPECT_TRUE(c.tx.empty());
  EXPECT_TRUE(Lists("numgen random mod 1 vmap")) << Listing();
  c = DelSlice("default/web-1");
  EXPECT_TRUE(c.tx.empty());  // still in web-2
  EXPECT_TRUE(Lists("chain " + EpChain("10.244.2.5/8080")));
}

// The names of every object an op touches (a map element: its map and key).
std::vector<std::string> Touched(const nft::Transaction& tx) {
  std::vector<std::string> out;
  for (const auto& op : tx.ops()) {
    if (const auto* c = std::get_if<nft::Chain>(&op.object)) out.push_back("chain " + c->name);
    else if (const auto* r = std::get_if<nft::Rule>(&op.object)) out.push_back("rule " + r->chain);
    else if (const auto* s = std::get_if<nft::Set>(&op.object)) out.push_back("set " + s->name);
    else if (const auto* e = std::get_if<nft::Elements>(&op.object))
      for (const auto& el : e->elems) out.push_back("element " + e->set + " " + std::to_string(el.key.size()) + ":" + el.key);
    else out.push_back("other");
  }
  return out;
}

TEST_F(ProxyTest, AChangeTouchesOnlyItsServicesObjects) {
  for (const char* name : {"a", "b"}) {
    Svc(testing::ServiceJson("default", name, {name[0] == 'a' ? "10.96.0.1" : "10.96.0.2"}, Http80()));
    Slice(testing::SliceJson("default", name, std::string(name) + "-1", {{.ip = name[0] == 'a' ? "10.244.1.1" : "10.244.2.1"}},
                             Http8080()));
  }
  // An endpoint added to a: its chain, a's service chain (and its numgen map), nothing of b's.
  Change c = Slice(testing::SliceJson("default", "a", "a-1", {{.ip = "10.244.1.1"}, {.ip = "10.244.1.2"}}, Http8080()));
  ASSERT_FALSE(c.tx.empty());
  for (const auto& t : Touched(c.tx))
    EXPECT_TRUE(t.find("default/a/") != std::string::npos || t.rfind("set __set", 0) == 0 ||
                t.rfind("element __set", 0) == 0)
        << t;
  EXPECT_LE(c.tx.ops().size(), 9u) << nft::RenderTransaction(c.tx);
  // Removed: the same, and no map element moves (a still has endpoints).
  c = Slice(testing::SliceJson("default", "a", "a-1", {{.ip = "10.244.1.2"}}, Http8080()));
  for (const auto& t : Touched(c.tx))
    EXPECT_TRUE(t.find("default/a/") != std::string::npos || t.rfind("set __set", 0) == 0 ||
                t.rfind("element __set", 0) == 0)
        << t;
  // The last one gone: a's VIP moves between maps; still nothing of b.
  c = Slice(testing::SliceJson("default", "a", "a-1", {}, Http8080()));
  const std::string vip_a = "element service-ips4 12:" + Vip("10.96.0.1");
  const std::string none_a = "element no-endpoint-services4 12:" + Vip("10.96.0.1");
  for (const auto& t : Touched(c.tx))
    EXPECT_TRUE(t.find("default/a/") != std::string::npos || t == vip_a || t == none_a) << t;
  EXPECT_TRUE(Lists("chain " + ChainName("svc", false, "default/b/tcp/http")));
}

TEST_F(ProxyTest, ConntrackWorkForUdp) {
  json dns = testing::ServiceJson("default", "dns", {"10.96.0.53"},
                                  json::array({{{"name", "dns"}, {"protocol", "UDP"}, {"port", 53}, {"nodePort", 30053}}}));
  dns["spec"]["type"] = "NodePort";
  Change c = Svc(dns);
  EXPECT_TRUE(c.conntrack.empty());
  const json ports = json::array({{{"name", "dns"}, {"protocol", "UDP"}, {"port", 5353}}});
  // The first endpoint: entries made while the VIP had none are cleared.
  c = Slice(testing::SliceJson("default", "dns", "dns-1", {{.ip = "10.244.1.5"}}, ports));
  const auto vip = *IpAddress::Parse("10.96.0.53"), ep1 = *IpAddress::Parse("10.244.1.5"),
             ep2 = *IpAddress::Parse("10.244.2.5");
  EXPECT_EQ(c.conntrack, (std::vector<ConntrackFlush>{{false, Proto::kUdp, std::nullopt, 30053, std::nullopt, 0},
                                                      {false, Proto::kUdp, vip, 53, std::nullopt, 0}}));
  c = Slice(testing::SliceJson("default", "dns", "dns-1", {{.ip = "10.244.1.5"}, {.ip = "10.244.2.5"}}, ports));
  EXPECT_TRUE(c.conntrack.empty());
  // An endpoint gone: the entries DNATed to it, through the VIP and the NodePort.
  c = Slice(testing::SliceJson("default", "dns", "dns-1", {{.ip = "10.244.2.5"}}, ports));
  EXPECT_EQ(c.conntrack, (std::vector<ConntrackFlush>{{false, Proto::kUdp, std::nullopt, 30053, ep1, 5353},
                                                      {false, Proto::kUdp, vip, 53, ep1, 5353}}));
  c = DelSvc("default/dns");
  EXPECT_EQ(c.conntrack.size(), 2u);
  EXPECT_EQ(c.conntrack[1].endpoint, ep2);
  // TCP: nothing.
  Svc(Web());
  c = Slice(WebSlice({{.ip = "10.244.2.5"}}));
  EXPECT_TRUE(c.conntrack.empty());
  c = Slice(WebSlice({}));
  EXPECT_TRUE(c.conntrack.empty());
}

// A random history over a few Services and slices that share addresses,
// ports and nodes: after every change the kernel (the fake, fed only the
// deltas) holds what a fresh model's Full() writes.
TEST(ProxyHistory, RandomChangesKeepTheKernelEqualToAFreshFull) {
  for (unsigned seed = 1; seed <= 30; ++seed) {
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    auto coin = [&](int pct) { return pick(100) < pct; };
    const Config cfg = TestConfig();
    Model model(cfg);
    nft::Fake kernel;
    ASSERT_TRUE(kernel.Apply(model.Full()).ok());
    std::map<std::string, Service> svcs;
    std::map<std::string, EndpointSlice> slices;
    auto random_service = [&](int i) {
      const std::string n = "s" + std::to_string(i);
      std::vector<std::string> ips = {"10.96.0." + std::to_string(10 + i)};
      if (coin(40)) ips.push_back("fd00:96::" + std::to_string(10 + i));
      json ports = json::array();
      if (coin(80)) ports.push_back({{"name", "http"}, {"port", 80}, {"nodePort", 30000 + 10 * i}, {"targetPort", "web"}});
      if (coin(60)) ports.push_back({{"name", "dns"}, {"protocol", "UDP"}, {"port", 53}, {"nodePort", 30001 + 10 * i}});
      json j = testing::ServiceJson("default", n, ips, ports);
      const char* types[] = {"ClusterIP", "NodePort", "LoadBalancer"};
      j["spec"]["type"] = types[pick(3)];
      if (j["spec"]["type"] == "ClusterIP")
        for (auto& p : j["spec"]["ports"]) p.erase("nodePort");
      if (coin(30)) j["spec"]["externalIPs"] = {coin(50) ? "192.0.2.1" : "192.0.2.2"};  // shared by chance
      if (j["spec"]["type"] == "LoadBalancer" && coin(50)) j["status"]["loadBalancer"]["ingress"] = {{{"ip", "198.51.100.1"}}};
      if (coin(40)) j["spec"]["sessionAffinity"] = "ClientIP";
      if (coin(30)) j["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] = coin(50) ? 60 : 600;
      if (coin(30)) j["spec"]["internalTrafficPolicy"] = "Local";
      if (coin(40)) j["spec"]["externalTrafficPolicy"] = "Local";
      if (coin(10)) j["metadata"]["labels"][kProxyNameLabel] = "other";
      return testing::Decoded(j);
    };
    auto random_slice = [&](const std::string& name) {
      const int owner = coin(85) ? name[1] - '0' : pick(3);  // now and then another Service's
      const bool v6 = name.back() == '6';
      std::vector<Ep> eps;
      for (int k = 0, n = pick(4); k < n; ++k) {
        Ep e;
        e.ip = v6 ? "fd00:244::" + std::to_string(1 + pick(4)) : "10.244." + std::to_string(1 + pick(2)) + "." + std::to_string(1 + pick(4));
        e.node = coin(40) ? "n1" : "n2";
        e.ready = coin(70);
        e.terminating = !e.ready && coin(60);
        e.serving = e.ready || coin(60);
        if (coin(20)) e.zones = {coin(50) ? "zone-a" : "zone-b"};
        if (coin(15)) e.nodes = {e.node};
        eps.push_back(e);
      }
      json ports = coin(90) ? SlicePorts() : json::array({{{"name", "other"}, {"port", 1}}});
      return testing::DecodedSlice(testing::SliceJson("default", "s" + std::to_string(owner), name, eps, ports));
    };
    for (int step = 0; step < 60; ++step) {
      Change c;
      const int what = pick(10);
      if (what < 3) {
        Service s = random_service(pick(3));
        svcs[s.Key()] = s;
        c = model.UpsertService(s);
      } else if (what < 4) {
        const std::string key = "default/s" + std::to_string(pick(3));
        svcs.erase(key);
        c = model.DeleteService(key);
      } else if (what < 9) {
        const std::string name = "s" + std::to_string(pick(3)) + "-" + (coin(70) ? (coin(50) ? "a" : "b") : "6");
        EndpointSlice sl = random_slice(name);
        slices[sl.Key()] = sl;
        c = model.UpsertSlice(sl);
      } else {
        if (slices.empty()) continue;
        auto it = slices.begin();
        std::advance(it, pick(static_cast<int>(slices.size())));
        const std::string key = it->first;
        slices.erase(it);
        c = model.DeleteSlice(key);
      }
      if (!c.tx.empty()) {
        Status st = kernel.Apply(c.tx);
        ASSERT_TRUE(st.ok()) << "seed " << seed << " step " << step << ": " << st.ToString() << "\n"
                             << nft::RenderTransaction(c.tx);
      }
      Model fresh(cfg);
      for (const auto& [k, sv] : svcs) (void)fresh.UpsertService(sv);
      for (const auto& [k, sl] : slices) (void)fresh.UpsertSlice(sl);
      auto dump = kernel.Dump(nft::Family::kInet, kTable);
      ASSERT_TRUE(dump.ok());
      const TableDigest got = DigestOf(*dump), want = fresh.Digest();
      ASSERT_EQ(got, want) << "seed " << seed << " step " << step << ":\n" << got.Diff(want);
    }
  }
}

TEST_F(ProxyTest, AChangesConntrackCleanupFollowsItsTransactionOnly) {
  json dns = testing::ServiceJson("default", "dns", {"10.96.0.53"},
                                  json::array({{{"name", "dns"}, {"protocol", "UDP"}, {"port", 53}}}));
  Svc(dns);
  const json ports = json::array({{{"name", "dns"}, {"protocol", "UDP"}, {"port", 53}}});
  Slice(testing::SliceJson("default", "dns", "dns-1", {{.ip = "10.244.1.5"}}, ports));
  EXPECT_EQ(kernel_.deleted().size(), 1u);  // the VIP's entries, made while it had no endpoint
  // The kernel refuses the next transaction: no conntrack entry is deleted for it.
  EndpointSlice gone = testing::DecodedSlice(testing::SliceJson("default", "dns", "dns-1", {}, ports));
  Change c = model_.UpsertSlice(gone);
  ASSERT_EQ(c.conntrack.size(), 1u);
  kernel_.FailApplies(1);
  Status st = ApplyChange(kernel_, c);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("services: apply the change's transaction"), std::string::npos) << st.ToString();
  EXPECT_EQ(kernel_.deleted().size(), 1u);
  // The caller repairs with Full(): the check sees the difference and applies it.
  slices_[gone.Key()] = gone;
  auto r = CheckAndRepair(kernel_, model_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->repaired);
  EXPECT_NE(r->diff.find("elements differ"), std::string::npos) << r->diff;
  ExpectKernelIsFresh("repair");
  r = CheckAndRepair(kernel_, model_);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->repaired) << r->diff;
}

TEST_F(ProxyTest, TheCheckRepairsWhatSomeoneElseChanged) {
  Svc(Web());
  Slice(WebSlice({{.ip = "10.244.2.5"}}));
  // Someone deletes the service's map element and the rules of its chain.
  nft::Transaction tamper(nft::Family::kInet, kTable);
  tamper.Delete(nft::Elements{"service-ips4", {nft::Element{.key = Vip("10.96.0.10")}}});
  tamper.Flush(nft::Chain{SvcChain()});
  ASSERT_TRUE(kernel_.Apply(tamper).ok());
  auto r = CheckAndRepair(kernel_, model_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->repaired);
  EXPECT_NE(r->diff.find("chain " + SvcChain() + " rules differ"), std::string::npos) << r->diff;
  EXPECT_NE(r->diff.find("set service-ips4 elements differ"), std::string::npos) << r->diff;
  ExpectKernelIsFresh("repair");
  // No table at all: built.
  nft::Transaction drop(nft::Family::kInet, kTable);
  drop.Delete(nft::Table{kTable});
  ASSERT_TRUE(kernel_.Apply(drop).ok());
  r = CheckAndRepair(kernel_, model_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->repaired);
  EXPECT_NE(r->diff.find("missing"), std::string::npos);
  ExpectKernelIsFresh("rebuilt");
}

// O(changes): with 1,000 Services of 3 endpoints each in the table, one
// endpoint's change is a transaction of the same few ops as with one Service.
TEST(ProxyScale, AChangeCostsTheSameWithManyServices) {
  auto endpoint_change_ops = [](int services) {
    Model model(TestConfig());
    nft::Fake kernel;
    for (int i = 0; i < services; ++i) {
      const std::string n = "s" + std::to_string(i);
      const std::string ip = "10.96." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1);
      (void)model.UpsertService(testing::Decoded(testing::ServiceJson("default", n, {ip}, Http80())));
      std::vector<Ep> eps;
      for (int k = 0; k < 3; ++k)
        eps.push_back({.ip = "10." + std::to_string(244 + k) + "." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1)});
      (void)model.UpsertSlice(testing::DecodedSlice(testing::SliceJson("default", n, n + "-1", eps, Http8080())));
    }
    EXPECT_TRUE(kernel.Apply(model.Full()).ok());
    Change c = model.UpsertSlice(testing::DecodedSlice(testing::SliceJson(
        "default", "s0", "s0-1", {{.ip = "10.244.0.1"}, {.ip = "10.245.0.1"}, {.ip = "10.246.0.1"}, {.ip = "10.247.0.1"}},
        Http8080())));
    EXPECT_TRUE(kernel.Apply(c.tx).ok());
    return c.tx.ops().size();
  };
  const size_t one = endpoint_change_ops(1), many = endpoint_change_ops(1000);
  EXPECT_EQ(many, one);
  EXPECT_LE(many, 9u);
}

TEST(ProxyNames, StableUniqueAndShortEnough) {
  EXPECT_EQ(ChainName("svc", false, kWeb), "svc4-Z7R6XF5F-default/web/tcp/http");
  EXPECT_NE(ChainName("svc", true, kWeb), ChainName("svc", false, kWeb));
  EXPECT_NE(ChainName("svc", false, "default/web/udp/http"), ChainName("svc", false, kWeb));
  const std::string ns(63, 'n'), name(63, 'm'), port(15, 'p');
  const std::string longest = ChainName("ep", true, ns + "/" + name + "/sctp/" + port,
                                        "ffff.ffff.ffff.ffff.ffff.ffff.ffff.ffff/65535");
  EXPECT_LE(longest.size(), kMaxNameLen);
  const std::string cut = ChainName("ep", true, std::string(300, 'x'), "a");
  EXPECT_EQ(cut.size(), kMaxNameLen);
  EXPECT_NE(cut, ChainName("ep", true, std::string(300, 'x'), "b"));  // the hash tells them apart
}

// The table of one small Service as `nft list table inet weft-services` shows it (docs/services.md).
TEST_F(ProxyTest, TheExampleOfDocsServicesMd) {
  json web = Web();
  web["spec"]["sessionAffinity"] = "ClientIP";
  Svc(web);
  Slice(WebSlice({{.ip = "10.244.1.5", .node = "n1"}, {.ip = "10.244.2.5"}}));
  Svc(testing::ServiceJson("default", "idle", {"10.96.0.11"}, Http80()));
  const std::string want = R"(table inet weft-services {
	map service-ips4 {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.10 . tcp . 80 : goto svc4-Z7R6XF5F-default/web/tcp/http }
	}

	map service-nodeports4 {
		type inet_proto . inet_service : verdict
	}

	map no-endpoint-services4 {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.11 . tcp . 80 : goto reject-chain }
	}

	map no-endpoint-nodeports4 {
		type inet_proto . inet_service : verdict
	}

	map service-ips6 {
		type ipv6_addr . inet_proto . inet_service : verdict
	}

	map service-nodeports6 {
		type inet_proto . inet_service : verdict
	}

	map no-endpoint-services6 {
		type ipv6_addr . inet_proto . inet_service : verdict
	}

	map no-endpoint-nodeports6 {
		type inet_proto . inet_service : verdict
	}

	set aff4-YOC7WACK-default/web/tcp/http__10.244.2.5/8080 {
		type ipv4_addr
		flags dynamic,timeout
		timeout 3h
	}

	set aff4-ZTNODRUG-default/web/tcp/http__10.244.1.5/8080 {
		type ipv4_addr
		flags dynamic,timeout
		timeout 3h
	}

	chain mark-for-masquerade {
		meta mark set meta mark | 0x00004000
	}

	chain masquerading {
		meta mark & 0x00004000 == 0x00000000 return
		meta mark set meta mark ^ 0x00004000
		masquerade fully-random
	}

	chain reject-chain {
		meta l4proto tcp reject with tcp reset
		reject
	}

	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips4
		ip6 daddr . meta l4proto . th dport vmap @service-ips6
		ip daddr != 127.0.0.0/8 fib daddr type local meta l4proto . th dport vmap @service-nodeports4
		ip6 daddr != ::1 fib daddr type local meta l4proto . th dport vmap @service-nodeports6
	}

	chain service-endpoints-check {
		ip daddr . meta l4proto . th dport vmap @no-endpoint-services4
		ip6 daddr . meta l4proto . th dport vmap @no-endpoint-services6
	}

	chain nodeport-endpoints-check {
		ip daddr != 127.0.0.0/8 fib daddr type local meta l4proto . th dport vmap @no-endpoint-nodeports4
		ip6 daddr != ::1 fib daddr type local meta l4proto . th dport vmap @no-endpoint-nodeports6
	}

	chain filter-input {
		type filter hook input priority -110; policy accept;
		ct state new jump nodeport-endpoints-check
		ct state new jump service-endpoints-check
	}

	chain filter-forward {
		type filter hook forward priority -110; policy accept;
		ct state new jump service-endpoints-check
	}

	chain filter-output {
		type filter hook output priority -110; policy accept;
		ct state new jump service-endpoints-check
	}

	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}

	chain nat-output {
		type nat hook output priority -100; policy accept;
		jump services
	}

	chain nat-postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		jump masquerading
	}

	chain ep4-YOC7WACK-default/web/tcp/http__10.244.2.5/8080 {
		ip saddr 10.244.2.5 jump mark-for-masquerade
		update @aff4-YOC7WACK-default/web/tcp/http__10.244.2.5/8080 { ip saddr }
		meta l4proto tcp dnat ip to 10.244.2.5:8080
	}

	chain ep4-ZTNODRUG-default/web/tcp/http__10.244.1.5/8080 {
		ip saddr 10.244.1.5 jump mark-for-masquerade
		update @aff4-ZTNODRUG-default/web/tcp/http__10.244.1.5/8080 { ip saddr }
		meta l4proto tcp dnat ip to 10.244.1.5:8080
	}

	chain svc4-Z7R6XF5F-default/web/tcp/http {
		ip daddr 10.96.0.10 tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade
		ip saddr @aff4-ZTNODRUG-default/web/tcp/http__10.244.1.5/8080 goto ep4-ZTNODRUG-default/web/tcp/http__10.244.1.5/8080
		ip saddr @aff4-YOC7WACK-default/web/tcp/http__10.244.2.5/8080 goto ep4-YOC7WACK-default/web/tcp/http__10.244.2.5/8080
		numgen random mod 2 vmap { 0 : goto ep4-ZTNODRUG-default/web/tcp/http__10.244.1.5/8080, 1 : goto ep4-YOC7WACK-default/web/tcp/http__10.244.2.5/8080 }
	}
}
)";
  EXPECT_EQ(Listing(), want);
}

}  // namespace
}  // namespace weft::services
