// The source guard (issue 22 section 1, fw/source_guard.h), tried as an
// attacker would: a pod puts another pod's address (or one no pod has) on
// its eth0, or forges it on a raw socket, and sends UDP to a third pod; in
// bridge mode it also takes another pod's MAC and answers ARP and NDP for
// another pod's address. Each attempt must not arrive and must be counted;
// the same sends with the pod's own address must arrive (so every attempt
// could have succeeded), in both families and both modes. tests/integration
// /plugin/spoof.py does the sending.
#include <string>

#include "fw/source_guard.h"
#include "plugin_fixture.h"
#include "sys/files.h"
#include "sys/netns.h"

namespace weft::testing {
namespace {

const char* const kV4Range = "10.244.2.0/24";
const char* const kV6Range = "fd00:10:244:2::/64";
const std::string kRouted = fw::kGuardTable, kBridge = fw::kBridgeGuardTable;

class GuardTest : public PluginTest {
 protected:
  json Routed() { return Conf("1.1.0", {{"ranges", {kV4Range, kV6Range}}}); }
  json Bridged() { return BridgeConf("1.1.0", {{"ranges", {kV4Range, kV6Range}}}); }

  struct Pod {
    std::string cid, v4, v6, host_if;
  };
  Pod AddPod(const std::string& cid, const json& conf) {
    auto r = Add(cid, conf);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    json j = r.Json();
    std::string host_if;
    for (auto& i : j.value("interfaces", json::array()))
      if (i.value("sandbox", "").empty() && i.value("name", "").rfind("wft", 0) == 0) host_if = i["name"];
    return {cid, PodIp(r), PodIp(r, true), host_if};
  }

  // spoof.py udp: what `to` received of `count` datagrams `from` sent from `src`.
  json Udp(const Pod& from, const std::string& src, const Pod& to, bool v6, bool raw, int count = 5) {
    std::vector<std::string> argv = {"/usr/bin/python3", Script(), "udp", "--recv-ns", Pod_(to).path(), "--dst",
                                     v6 ? to.v6 : to.v4, "--send-ns", Pod_(from).path(), "--src", src,
                                     "--count", std::to_string(count), "--wait", "0.7"};
    if (raw) argv.push_back("--raw");
    std::string out, err;
    int rc = Cmd(argv, &out, &err);
    EXPECT_EQ(rc, 0) << out << err;
    try {
      return json::parse(out);
    } catch (...) {
      ADD_FAILURE() << "spoof.py: " << out << err;
      return json{{"received", -1}};
    }
  }
  int Received(const Pod& from, const std::string& src, const Pod& to, bool v6, bool raw) {
    return Udp(from, src, to, v6, raw)["received"].get<int>();
  }
  void Spoof(const std::string& mode, const Pod& from, const std::string& ip) {
    std::string out, err;
    EXPECT_EQ(Cmd({"/usr/bin/python3", Script(), mode, "--send-ns", Pod_(from).path(), "--ip", ip, "--count", "3"},
                  &out, &err),
              0)
        << out << err;
  }
  static std::string Script() { return std::string(WEFT_SOURCE_DIR) + "/tests/integration/plugin/spoof.py"; }
  const TestNetns& Pod_(const Pod& p) { return PluginTest::Pod(p.cid); }

  // Puts `addr` on the pod's eth0 (as a pod with NET_ADMIN can).
  void Claim(const Pod& p, const std::string& addr) {
    bool v6 = addr.find(':') != std::string::npos;
    std::vector<std::string> argv = {"ip", "addr", "add", addr + (v6 ? "/128" : "/32"), "dev", "eth0"};
    if (v6) argv.push_back("nodad");
    ASSERT_EQ(Pod_(p).Exec(argv), 0) << addr;
  }

  // The guard's drop counter `name` in the node's netdev `table` (-1: none).
  long long Counter(const std::string& table, const std::string& name) {
    std::string out;
    if (node_->Exec({"nft", "-j", "list", "counter", "netdev", table, name}, &out) != 0) {
      ADD_FAILURE() << "nft list counter netdev " << table << " " << name << ": " << out;
      return -1;
    }
    const json j = json::parse(out, nullptr, false);  // a named value: the loop must not outlive it
    for (const auto& e : j.value("nftables", json::array()))
      if (e.contains("counter")) return e["counter"]["packets"].get<long long>();
    ADD_FAILURE() << "no counter " << name << " in " << out;
    return -1;
  }
  // The MAC the node's neighbour table holds for `ip` ("" when none).
  std::string NodeNeighMac(const std::string& ip) {
    for (auto& n : node_->IpJson({"neigh", "show", ip}))
      if (n.contains("lladdr")) return n["lladdr"];
    return "";
  }
  std::string PodMac(const Pod& p) {
    auto l = Pod_(p).IpJson({"link", "show", "dev", "eth0"});
    return l.empty() ? "" : l[0].value("address", "");
  }
};

// Routed mode, both families: bound and raw-socket forgeries of another
// pod's address and of an address no pod has never arrive; the pod's own
// address always does.
TEST_F(GuardTest, RoutedPodSpeaksOnlyAsItself) {
  Pod a = AddPod("ra", Routed()), b = AddPod("rb", Routed()), c = AddPod("rc", Routed());
  ASSERT_FALSE(a.v6.empty());
  for (bool v6 : {false, true}) {
    SCOPED_TRACE(v6 ? "IPv6" : "IPv4");
    const std::string own = v6 ? a.v6 : a.v4, stolen = v6 ? b.v6 : b.v4;
    const std::string nobody = v6 ? "fd00:99::1" : "10.99.0.1";
    const std::string counter = v6 ? "spoofed6" : "spoofed4";
    // Legitimate traffic, by both ways of sending: it arrives.
    EXPECT_EQ(Received(a, own, c, v6, false), 5);
    EXPECT_EQ(Received(a, own, c, v6, true), 5);
    const long long before = Counter(kRouted, counter);
    // Another pod's address, on eth0 and forged on a raw socket.
    Claim(a, stolen);
    EXPECT_EQ(Received(a, stolen, c, v6, false), 0);
    EXPECT_EQ(Received(a, stolen, c, v6, true), 0);
    // An address no pod has.
    Claim(a, nobody);
    EXPECT_EQ(Received(a, nobody, c, v6, false), 0);
    EXPECT_EQ(Received(a, nobody, c, v6, true), 0);
    // The node's own address.
    EXPECT_EQ(Received(a, v6 ? "fe80::1" : "192.0.2.10", c, v6, true), 0);
    EXPECT_GE(Counter(kRouted, counter) - before, 25) << "every forged datagram is counted";
    // The victim and the target still talk, both ways.
    EXPECT_EQ(Received(b, stolen, c, v6, false), 5);
    EXPECT_EQ(Received(c, v6 ? c.v6 : c.v4, b, v6, false), 5);
  }
  // Each port has a chain of its own, hooked on that port, comparing with
  // its pod's addresses (no set, no FIB lookup).
  std::string chain;
  ASSERT_EQ(node_->Exec({"nft", "list", "chain", "netdev", kRouted, a.host_if}, &chain), 0) << chain;
  EXPECT_NE(chain.find("hook ingress device \"" + a.host_if + "\" priority -500"), std::string::npos) << chain;
  EXPECT_NE(chain.find("ip saddr " + a.v4 + " accept"), std::string::npos) << chain;
  EXPECT_NE(chain.find("ip6 saddr " + a.v6 + " accept"), std::string::npos) << chain;
  EXPECT_NE(chain.find("goto pod"), std::string::npos) << chain;
  EXPECT_EQ(chain.find("@"), std::string::npos) << chain;
}

// DEL destroys the port's chain with the port (from Linux 6.16 the kernel
// keeps a netdev chain whose device went, and a later link of the same
// name would be hooked by it); GC destroys the chains of ports that went
// without a DEL.
TEST_F(GuardTest, RoutedDelAndGcRemoveThePortsChain) {
  Pod a = AddPod("ga", Routed()), b = AddPod("gb", Routed());
  auto chains = [&] {
    std::string out;
    node_->Exec({"nft", "list", "chains", "netdev"}, &out);
    return out;
  };
  ASSERT_NE(chains().find("chain " + a.host_if + " {"), std::string::npos) << chains();
  ASSERT_EQ(Del("ga", Routed()).exit_code, 0);
  pods_.erase("ga");
  EXPECT_EQ(chains().find(a.host_if), std::string::npos) << chains();
  EXPECT_NE(chains().find("chain " + b.host_if + " {"), std::string::npos) << chains();
  ASSERT_EQ(node_->Exec({"nft", "add", "chain", "netdev", kRouted, "wftdead00000000", "{", "type", "filter", "hook",
                         "ingress", "device", "wftdead00000000", "priority", "-500", ";", "}"}),
            0);
  json gc = Routed();
  gc["cni.dev/valid-attachments"] = {{{"containerID", "gb"}, {"ifname", "eth0"}}};
  auto r = Cni("GC", "", "", gc);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(chains().find("wftdead00000000"), std::string::npos) << chains();
  EXPECT_NE(chains().find("chain " + b.host_if + " {"), std::string::npos) << chains();
}

// The upgrade from the guard of earlier releases (table inet weft-guard, a
// fib check): the first ADD binds every port in the netdev table, moves the
// opt-outs there and deletes the old table.
TEST_F(GuardTest, UpgradeRetiresTheInetGuardAndKeepsItsOptOuts) {
  const std::string script = TempDir("old") + "/guard.nft";
  ASSERT_TRUE(sys::WriteFileAtomic(script,
                                   "table inet weft-guard {\n"
                                   "  set allow4 { type ifname . ipv4_addr; flags interval; }\n"
                                   "  set allow6 { type ifname . ipv6_addr; flags interval; }\n"
                                   "  set optouts { type ifname; }\n"
                                   "  chain prerouting { type filter hook prerouting priority raw; policy accept; }\n"
                                   "}\n"
                                   "add element inet weft-guard allow4 { \"wftold000000000\" . 10.98.0.0/24 }\n"
                                   "add element inet weft-guard optouts { \"wftold000000000\" }\n")
                  .ok());
  ASSERT_EQ(node_->Exec({"nft", "-f", script}), 0);
  Pod a = AddPod("ya", Routed()), c = AddPod("yc", Routed());
  std::string out;
  EXPECT_NE(node_->Exec({"nft", "list", "table", "inet", "weft-guard"}, &out), 0) << out;
  ASSERT_EQ(node_->Exec({"nft", "list", "set", "netdev", kRouted, "allow4"}, &out), 0) << out;
  EXPECT_NE(out.find("\"wftold000000000\" . 10.98.0.0/24"), std::string::npos) << out;
  EXPECT_EQ(Received(a, a.v4, c, false, true), 5);
  EXPECT_EQ(Received(a, c.v4, c, false, true), 0);
  RemoveTree(script.substr(0, script.rfind('/')));
}

// With NetworkPolicy configured (weftd's conflist key), a pod the plugin
// starts in the pending interface group is guarded the same way.
TEST_F(GuardTest, PendingPodsOfNetworkPolicyAreGuardedToo) {
  const std::string dir = TempDir("np");
  ASSERT_TRUE(sys::WriteFileAtomic(dir + "/ns", "x\n").ok());
  json np = Routed();
  np["networkPolicy"] = {{"namespacesFile", dir + "/ns"}};
  auto add = [&](const std::string& cid) {
    auto r = Cni("ADD", cid, PluginTest::Pod(cid).path(), np, "eth0",
                 {{"CNI_ARGS", "K8S_POD_NAMESPACE=x;K8S_POD_NAME=" + cid}});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return Pod{cid, PodIp(r), PodIp(r, true), r.Json()["interfaces"][0].value("name", "")};
  };
  Pod a = add("na"), b = add("nb"), c = add("nc");
  auto link = node_->IpJson({"link", "show", "dev", a.host_if});
  ASSERT_FALSE(link.empty());
  EXPECT_EQ(link[0].value("group", ""), "22342");  // pending (no weftd here to drop it)
  EXPECT_EQ(Received(a, a.v4, c, false, true), 5);
  EXPECT_EQ(Received(a, b.v4, c, false, true), 0);
  EXPECT_EQ(Received(a, b.v6, c, true, true), 0);
  RemoveTree(dir);
}

// IPv6 link-local addresses and neighbour discovery keep working through the
// guard: the pod resolves its gateway (its permanent entry removed) and the
// node resolves the pod, and a pod's link-local source reaches the node.
TEST_F(GuardTest, RoutedNdpAndLinkLocalStillWork) {
  Pod a = AddPod("la", Routed()), c = AddPod("lc", Routed());
  const long long before = Counter(kRouted, "spoofed6");
  ASSERT_EQ(Pod_(a).Exec({"ip", "-6", "neigh", "del", "fe80::1", "dev", "eth0"}), 0);
  ASSERT_EQ(node_->Exec({"ip", "-6", "neigh", "flush", "dev", a.host_if}), 0);
  EXPECT_TRUE(Pod_(a).Ping(c.v6));
  EXPECT_TRUE(node_->Ping(a.v6));
  EXPECT_EQ(Pod_(a).Exec({"ping", "-6", "-c", "1", "-W", "2", "fe80::1%eth0"}), 0);
  // Duplicate address detection (source ::) of a new address is not dropped.
  ASSERT_EQ(Pod_(a).Exec({"ip", "addr", "add", "fd00:99::5/128", "dev", "eth0"}), 0);
  ::usleep(2500 * 1000);
  auto addrs = Pod_(a).IpJson({"-6", "addr", "show", "dev", "eth0", "tentative"});
  EXPECT_TRUE(addrs.empty() || addrs[0]["addr_info"].empty()) << addrs.dump();
  EXPECT_EQ(Counter(kRouted, "spoofed6"), before) << "nothing of this was dropped";
}

// A pod restart (DEL, then ADD of a new sandbox) finds the guard in place and
// is not hindered by it; the old pod's address is refused to a pod that
// claims it afterwards.
TEST_F(GuardTest, PodRestartIsUnaffected) {
  Pod a = AddPod("pa", Routed()), c = AddPod("pc", Routed());
  EXPECT_EQ(Received(a, a.v4, c, false, false), 5);
  ASSERT_EQ(Del("pc", Routed()).exit_code, 0);
  pods_.erase("pc");
  Pod c2 = AddPod("pc2", Routed());
  EXPECT_EQ(Received(a, a.v4, c2, false, false), 5);
  EXPECT_EQ(Received(c2, c2.v6, a, true, false), 5);
  EXPECT_EQ(Received(a, c.v4 == c2.v4 ? "10.99.0.2" : c.v4, c2, false, true), 0);
}

// The opt-out: prefixes named for one pod's interface (allow4/allow6) are
// accepted from that pod only; its other forgeries and everyone else's are
// still dropped. Cleared, it is refused again.
TEST_F(GuardTest, OptOutAdmitsOnlyTheNamedPrefixesOfThatPod) {
  Pod vpn = AddPod("va", Routed()), other = AddPod("vb", Routed()), c = AddPod("vc", Routed());
  auto node_ns = sys::Netns::Open(node_->path());
  ASSERT_TRUE(node_ns.ok());
  const auto allowed = std::vector<IpPrefix>{*IpPrefix::Parse("10.99.0.0/24"), *IpPrefix::Parse("fd00:99::/64")};
  auto set = [&](const std::string& port, const std::vector<IpPrefix>& p) {
    return sys::RunInNetns(*node_ns, [&] { return fw::SetAllowedSources(fw::GuardMode::kRouted, port, p); });
  };
  ASSERT_TRUE(set(vpn.host_if, allowed).ok());
  Result<std::vector<IpPrefix>> read = std::vector<IpPrefix>{};  // replaced inside the netns
  ASSERT_TRUE(sys::RunInNetns(*node_ns, [&] {
                read = fw::AllowedSources(fw::GuardMode::kRouted, vpn.host_if);
                return read.status();
              }).ok());
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0].ToString(), "10.99.0.0/24");
  EXPECT_EQ((*read)[1].ToString(), "fd00:99::/64");
  EXPECT_EQ(Received(vpn, "10.99.0.7", c, false, true), 5);
  EXPECT_EQ(Received(vpn, "fd00:99::7", c, true, true), 5);
  EXPECT_EQ(Received(vpn, "10.99.1.7", c, false, true), 0);       // outside the prefix
  EXPECT_EQ(Received(vpn, other.v4, c, false, true), 0);          // another pod's address
  EXPECT_EQ(Received(other, "10.99.0.7", c, false, true), 0);     // the prefix, from another pod
  std::string marked;
  node_->Exec({"nft", "list", "set", "netdev", kRouted, "optouts"}, &marked);
  EXPECT_NE(marked.find(vpn.host_if), std::string::npos) << marked;
  ASSERT_TRUE(set(vpn.host_if, {}).ok());
  node_->Exec({"nft", "list", "set", "netdev", kRouted, "optouts"}, &marked);
  EXPECT_EQ(marked.find(vpn.host_if), std::string::npos) << marked;
  EXPECT_EQ(Received(vpn, "10.99.0.7", c, false, true), 0);
  EXPECT_EQ(Received(vpn, vpn.v4, c, false, true), 5);
  // DEL takes a pod's opt-out with it.
  ASSERT_TRUE(set(vpn.host_if, allowed).ok());
  ASSERT_EQ(Del("va", Routed()).exit_code, 0);
  std::string left;
  node_->Exec({"nft", "list", "set", "netdev", kRouted, "allow4"}, &left);
  EXPECT_EQ(left.find(vpn.host_if), std::string::npos) << left;
  // DEL looked the port up in `optouts` (its only work when nobody opted
  // out), and took it out of there too.
  node_->Exec({"nft", "list", "set", "netdev", kRouted, "optouts"}, &left);
  EXPECT_NE(left.find("set optouts"), std::string::npos) << left;
  EXPECT_EQ(left.find(vpn.host_if), std::string::npos) << left;
}

// Bridge mode, both families: the same forgeries, through the bridge (pod to
// pod traffic never reaches the inet hooks there).
TEST_F(GuardTest, BridgePodSpeaksOnlyAsItself) {
  Pod a = AddPod("ba", Bridged()), b = AddPod("bb", Bridged()), c = AddPod("bc", Bridged());
  ASSERT_FALSE(a.v6.empty());
  for (bool v6 : {false, true}) {
    SCOPED_TRACE(v6 ? "IPv6" : "IPv4");
    const std::string own = v6 ? a.v6 : a.v4, stolen = v6 ? b.v6 : b.v4;
    const std::string nobody = v6 ? "fd00:99::1" : "10.99.0.1";
    const std::string counter = v6 ? "spoofed6" : "spoofed4";
    EXPECT_EQ(Received(a, own, c, v6, false), 5);
    EXPECT_EQ(Received(a, own, c, v6, true), 5);
    const long long before = Counter(kBridge, counter);
    Claim(a, stolen);
    EXPECT_EQ(Received(a, stolen, c, v6, false), 0);
    EXPECT_EQ(Received(a, stolen, c, v6, true), 0);
    Claim(a, nobody);
    EXPECT_EQ(Received(a, nobody, c, v6, true), 0);
    EXPECT_GE(Counter(kBridge, counter) - before, 15);
    EXPECT_EQ(Received(b, stolen, c, v6, false), 5);
  }
}

// Bridge mode: a pod that takes another pod's MAC is cut off; one that
// answers ARP or NDP for another pod's address changes no neighbour's table.
TEST_F(GuardTest, BridgePodCannotTakeAnotherPodsMacOrAnswerForItsAddress) {
  Pod a = AddPod("ma", Bridged()), b = AddPod("mb", Bridged()), c = AddPod("mc", Bridged());
  // The MAC is the one the plugin chose (and the guard binds).
  EXPECT_EQ(PodMac(a).size(), 17u);
  EXPECT_EQ(PodMac(a).rfind("0a:", 0), 0u) << PodMac(a);
  // The node learns b's MAC for both addresses.
  ASSERT_TRUE(node_->Ping(b.v4));
  ASSERT_TRUE(node_->Ping(b.v6));
  const std::string b_mac = PodMac(b);
  EXPECT_EQ(NodeNeighMac(b.v4), b_mac);
  EXPECT_EQ(NodeNeighMac(b.v6), b_mac);
  // Neither a gratuitous ARP reply nor an overriding neighbour advertisement
  // for b's addresses moves them to a's MAC (after the kernel's locktime, 1 s,
  // in which it would ignore a new ARP sender anyway).
  ::usleep(1500 * 1000);
  const long long arp_before = Counter(kBridge, "spoofed4"), na_before = Counter(kBridge, "spoofed6");
  Spoof("garp", a, b.v4);
  Spoof("na", a, b.v6);
  ::usleep(200 * 1000);
  EXPECT_EQ(NodeNeighMac(b.v4), b_mac);
  EXPECT_EQ(NodeNeighMac(b.v6), b_mac);
  EXPECT_GE(Counter(kBridge, "spoofed4") - arp_before, 3);
  EXPECT_GE(Counter(kBridge, "spoofed6") - na_before, 3);
  // a's own ARP and NDP still work (the node resolves it anew).
  ASSERT_EQ(node_->Exec({"ip", "neigh", "flush", "dev", "wbr0"}), 0);
  EXPECT_TRUE(node_->Ping(a.v4));
  EXPECT_TRUE(node_->Ping(a.v6));
  EXPECT_EQ(Received(a, a.v4, c, false, false), 5);
  // The port is locked to a's MAC in the bridge: learning off, one static
  // FDB entry.
  std::string port;
  node_->Exec({"bridge", "-d", "link", "show", "dev", a.host_if}, &port);
  EXPECT_NE(port.find("learning off"), std::string::npos) << port;
  EXPECT_NE(port.find("locked on"), std::string::npos) << port;
  std::string fdb;
  node_->Exec({"bridge", "fdb", "show", "dev", a.host_if}, &fdb);
  EXPECT_NE(fdb.find(PodMac(a) + " master wbr0 static"), std::string::npos) << fdb;
  // With b's MAC on its eth0, a's frames are dropped, even with its own
  // address (the bridge's lock: b's MAC is not behind a's port), and the
  // bridge never learns b's MAC on a's port.
  const long long mac_before = Counter(kBridge, "spoofed-mac");
  ASSERT_EQ(Pod_(a).Exec({"ip", "link", "set", "dev", "eth0", "address", b_mac}), 0);
  EXPECT_EQ(Received(a, a.v4, c, false, true), 0);
  // What the port's chain sends on (ARP probes go out with the new MAC) is
  // dropped by the shared chain and counted; how many depends on the
  // neighbour state the kernel was in when the MAC changed.
  EXPECT_GE(Counter(kBridge, "spoofed-mac") - mac_before, 1);
  node_->Exec({"bridge", "fdb", "show", "dev", a.host_if}, &fdb);
  EXPECT_EQ(fdb.find(b_mac), std::string::npos) << fdb;
  EXPECT_EQ(Received(b, b.v4, c, false, false), 5);
}

// Bridge mode: a pod's router advertisement reaches no neighbour (without
// the guard, one accepting RAs takes it as its default router and
// autoconfigures an address from it).
TEST_F(GuardTest, BridgePodCannotAdvertiseItselfAsARouter) {
  Pod a = AddPod("ra1", Bridged()), c = AddPod("ra2", Bridged());
  ASSERT_EQ(Pod_(c).Exec({"sysctl", "-qw", "net.ipv6.conf.eth0.accept_ra=2"}), 0);
  // An RA needs the sender's link-local address, and is only taken once the
  // receiver's own is: wait out both DADs.
  for (const Pod* p : {&a, &c}) {
    bool ready = false;
    for (int i = 0; i < 40 && !ready; ++i) {
      std::string out;
      Pod_(*p).Exec({"ip", "-6", "addr", "show", "dev", "eth0", "scope", "link"}, &out);
      ready = out.find("fe80:") != std::string::npos && out.find("tentative") == std::string::npos;
      if (!ready) ::usleep(100 * 1000);
    }
    ASSERT_TRUE(ready) << p->cid << ": no usable link-local address";
  }
  const long long before = Counter(kBridge, "spoofed6");
  Spoof("ra", a, "fd00:77::");
  ::usleep(500 * 1000);
  std::string routes, addrs;
  Pod_(c).Exec({"ip", "-6", "route", "show"}, &routes);
  Pod_(c).Exec({"ip", "-6", "addr", "show", "dev", "eth0"}, &addrs);
  EXPECT_EQ(routes.find("proto ra"), std::string::npos) << routes;
  EXPECT_EQ(addrs.find("fd00:77:"), std::string::npos) << addrs;
  EXPECT_GE(Counter(kBridge, "spoofed6") - before, 3);
}

// After `nft flush ruleset` the next ADD installs the bridge guard again and
// binds every attachment of its dataDir, so the pods already there keep
// working (and stay guarded).
TEST_F(GuardTest, BridgeTableRecreatedRebindsExistingPods) {
  Pod a = AddPod("fa", Bridged()), c = AddPod("fc", Bridged());
  ASSERT_EQ(node_->Exec({"nft", "flush", "ruleset"}), 0);
  Pod d = AddPod("fd", Bridged());
  EXPECT_EQ(Received(a, a.v4, c, false, false), 5);
  EXPECT_EQ(Received(c, c.v6, a, true, false), 5);
  EXPECT_EQ(Received(d, d.v4, a, false, false), 5);
  EXPECT_EQ(Received(a, d.v4, c, false, true), 0);
}

// Operators see the guard: `weftctl guard` prints its drop counters, and
// `weftctl doctor` names a missing guard, which `--fix` installs again.
TEST_F(GuardTest, WeftctlShowsTheCountersAndDoctorRepairsAMissingGuard) {
  Pod a = AddPod("oa", Routed()), c = AddPod("oc", Routed());
  const std::string conf_dir = TempDir("conf");
  auto weftctl = [&](std::vector<std::string> args, std::string* out) {
    std::vector<std::string> argv = {BinaryPath("weftctl"), "--conf-dir", conf_dir};
    argv.insert(argv.end(), args.begin(), args.end());
    return node_->Exec(argv, out);
  };
  EXPECT_EQ(Received(a, "10.99.0.1", c, false, true), 0);
  std::string out;
  EXPECT_EQ(weftctl({"guard"}, &out), 0) << out;
  EXPECT_NE(out.find("routed (table netdev weft-guard):        installed; dropped 5 IPv4, 0 IPv6 packet(s)"),
            std::string::npos)
      << out;
  ASSERT_EQ(node_->Exec({"nft", "delete", "table", "netdev", kRouted}), 0);
  EXPECT_EQ(Received(a, "10.99.0.1", c, false, true), 5) << "unguarded: the forgery arrives";
  EXPECT_EQ(weftctl({"--json", "doctor", "--data-dir", data_dir_}, &out), 5) << out;
  bool found = false;
  for (const auto& f : json::parse(out, nullptr, false).value("findings", json::array()))
    if (f.value("subject", "") == "source guard (table netdev weft-guard)" && f.value("fixable", false)) found = true;
  EXPECT_TRUE(found) << out;
  EXPECT_EQ(weftctl({"doctor", "--fix", "--data-dir", data_dir_}, &out), 0) << out;
  EXPECT_NE(out.find("installed the source guard (table netdev weft-guard) and bound 2 attachment port(s)"),
            std::string::npos)
      << out;
  EXPECT_EQ(Received(a, "10.99.0.1", c, false, true), 0);
  EXPECT_EQ(Received(a, a.v4, c, false, true), 5);
  // One port's chain gone (deleted by hand): doctor names the unguarded
  // port, and --fix binds it again.
  ASSERT_EQ(node_->Exec({"nft", "delete", "chain", "netdev", kRouted, a.host_if}), 0);
  EXPECT_EQ(Received(a, "10.99.0.1", c, false, true), 5) << "unguarded: the forgery arrives";
  EXPECT_EQ(weftctl({"doctor", "--data-dir", data_dir_}, &out), 5) << out;
  EXPECT_NE(out.find("does not cover every pod port here: 1 port(s) without their chain"), std::string::npos) << out;
  EXPECT_EQ(weftctl({"doctor", "--fix", "--data-dir", data_dir_}, &out), 0) << out;
  EXPECT_EQ(Received(a, "10.99.0.1", c, false, true), 0);
  EXPECT_EQ(Received(a, a.v4, c, false, true), 5);
  RemoveTree(conf_dir);
}

// A guard whose rules are not this weft's (an upgrade, a chain flushed by
// hand) is replaced by the next ADD in one transaction that keeps the sets:
// the pods already bound keep working, and every rule is there once.
TEST_F(GuardTest, ChangedRulesAreReplacedAndTheBindingsKept) {
  Pod a = AddPod("ua", Bridged()), c = AddPod("uc", Bridged());
  ASSERT_EQ(node_->Exec({"nft", "flush", "chain", "netdev", kBridge, "pod"}), 0);
  ASSERT_EQ(node_->Exec({"nft", "add", "rule", "netdev", kBridge, "pod-ip4", "counter", "comment", "\"old\""}), 0);
  Pod d = AddPod("ud", Bridged());
  std::string t;
  node_->Exec({"nft", "list", "table", "netdev", kBridge}, &t);
  EXPECT_EQ(t.find("\"old\""), std::string::npos) << t;
  size_t markers = 0;
  for (size_t at = t.find("weft-guard:"); at != std::string::npos; at = t.find("weft-guard:", at + 1)) ++markers;
  EXPECT_EQ(markers, 1u) << t;
  // Every port kept (or got) its chain.
  for (const Pod* p : {&a, &c, &d}) EXPECT_NE(t.find("chain " + p->host_if + " {"), std::string::npos) << t;
  EXPECT_EQ(Received(a, a.v4, c, false, false), 5);
  EXPECT_EQ(Received(d, d.v6, a, true, false), 5);
  EXPECT_EQ(Received(a, c.v4, d, false, true), 0);
}

// DEL removes the bridge port's binding; ADD of a new pod binds its own.
TEST_F(GuardTest, BridgeDelRemovesTheBinding) {
  Pod a = AddPod("da", Bridged());
  auto elements = [&] {
    std::string out;
    node_->Exec({"nft", "list", "set", "netdev", kBridge, "addr4"}, &out);
    return out;
  };
  EXPECT_NE(elements().find(a.host_if), std::string::npos) << elements();
  ASSERT_EQ(Del("da", Bridged()).exit_code, 0);
  EXPECT_EQ(elements().find(a.host_if), std::string::npos) << elements();
  EXPECT_EQ(Del("da", Bridged()).exit_code, 0);  // and again: nothing to remove is no error
  ExpectNoPodsLeft();
  // Elements whose port went without a teardown are pruned by GC; a live
  // pod's stay.
  Pod b = AddPod("db", Bridged());
  ASSERT_EQ(node_->Exec({"nft", "add", "element", "netdev", kBridge, "addr4", "{", "\"wftdead00000000\"", ".",
                         "10.244.2.250", "}"}),
            0);
  json gc = Bridged();
  gc["cni.dev/valid-attachments"] = {{{"containerID", "db"}, {"ifname", "eth0"}}};
  auto r = Cni("GC", "", "", gc);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(elements().find("wftdead00000000"), std::string::npos) << elements();
  EXPECT_NE(elements().find(b.host_if), std::string::npos) << elements();
}

}  // namespace
}  // namespace weft::testing
