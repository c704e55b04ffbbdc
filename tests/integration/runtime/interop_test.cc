// weftctl and the runtime library driving real plugins in real namespaces:
// weft chained with Debian's portmap, bandwidth and tuning; the reference
// bridge + host-local through the same checks; weft's STATUS and GC; the
// loopback plugin as containerd calls it; and teardown from the result
// cache alone. Every plugin runs inside a private node netns (weftctl is
// exec'd there), so the root namespace is never touched.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "ipam/store.h"
#include "runtime/chain.h"
#include "runtime/conf.h"
#include "runtime/ctl.h"
#include "sys/exec.h"
#include "sys/netns.h"
#include "testutil/netns_fixture.h"

namespace weft::testing {
namespace {

using nlohmann::json;

const std::string kRefPlugins = "/usr/lib/cni";

struct CtlRun {
  int exit_code = -1;
  std::string out, err;
  json Json() const {
    try {
      return json::parse(out);
    } catch (...) {
      return json::object();
    }
  }
};

// A private world: conf dir, cache dir, data dirs, a node netns.
class Interop : public ::testing::Test {
 protected:
  Interop() : tmp_(TempDir("rt")), node_("node") {}
  ~Interop() override { RemoveTree(tmp_); }

  std::string ConfDir() const { return tmp_ + "/net.d"; }
  std::string CacheDir() const { return tmp_ + "/cache"; }
  std::string CniPath() const { return std::string(WEFT_BUILD_DIR) + "/cmd/weft:" + kRefPlugins; }

  // Writes a conf file; "@TMP@" in `text` becomes this test's private dir.
  void WriteConf(const std::string& file, std::string text) {
    for (size_t at; (at = text.find("@TMP@")) != std::string::npos;) text.replace(at, 5, tmp_);
    std::filesystem::create_directories(ConfDir());
    std::ofstream(ConfDir() + "/" + file) << json::parse(text).dump(2);
  }

  // Execs weftctl inside the node netns with cnitool's environment.
  CtlRun Ctl(std::vector<std::string> args, const std::map<std::string, std::string>& extra_env = {}) {
    CtlRun run;
    auto ns = sys::Netns::Open(node_.path());
    if (!ns.ok()) {
      run.err = ns.status().ToString();
      return run;
    }
    sys::ExecRequest req;
    req.path = BinaryPath("weftctl");
    args.insert(args.begin(), {req.path, "--cache-dir", CacheDir()});
    req.argv = args;
    req.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "NETCONFPATH=" + ConfDir(), "CNI_PATH=" + CniPath()};
    for (const auto& [k, v] : extra_env) req.env.push_back(k + "=" + v);
    req.netns_fd = ns->fd();
    req.timeout = std::chrono::seconds(120);
    auto r = sys::Exec(req);
    if (!r.ok()) {
      run.err = r.status().ToString();
      return run;
    }
    run.exit_code = r->timed_out ? 124 : r->exit_code;
    run.out = r->out;
    run.err = r->err;
    return run;
  }

  // The pod address in a result (the first IPv4 one), without the length.
  static std::string PodIp(const json& result) {
    for (const auto& ip : result.value("ips", json::array())) {
      std::string a = ip.value("address", "");
      if (a.find(':') == std::string::npos) return a.substr(0, a.find('/'));
    }
    return "";
  }
  // The interface in the result that has no sandbox: the host end.
  static std::string HostIf(const json& result) {
    for (const auto& i : result.value("interfaces", json::array()))
      if (!i.contains("sandbox") || i["sandbox"].get<std::string>().empty()) return i.value("name", "");
    return "";
  }
  std::string NodeRun(const std::vector<std::string>& argv) {
    std::string out;
    node_.Exec(argv, &out);
    return out;
  }

  // The checks every attachment must pass, whoever made it.
  void ExpectAttached(const TestNetns& pod, const json& result, const std::string& ifname = "eth0") {
    std::string ip = PodIp(result);
    ASSERT_FALSE(ip.empty()) << result.dump();
    json addrs = pod.IpJson({"addr", "show", "dev", ifname});
    ASSERT_EQ(addrs.size(), 1u) << ifname << " missing in " << pod.name();
    bool has = false;
    for (const auto& a : addrs[0]["addr_info"]) has |= a.value("local", "") == ip;
    EXPECT_TRUE(has) << ip << " not on " << ifname << ": " << addrs.dump();
    EXPECT_TRUE(node_.Ping(ip, 2)) << "node cannot reach pod " << ip;
  }

  std::string tmp_;
  TestNode node_;
};

TEST_F(Interop, WeftChainedWithPortmapBandwidthAndTuning) {
  TestNetns pod("pod"), quiet("quiet");
  WriteConf("10-chain.conflist", R"({"cniVersion":"1.0.0","name":"chain","plugins":[
      {"type":"weft","ranges":["10.99.0.0/24"],"dataDir":"@TMP@/weft"},
      {"type":"tuning","mtu":1300,"sysctl":{"net.ipv4.conf.eth0.arp_ignore":"1"}},
      {"type":"portmap","capabilities":{"portMappings":true}},
      {"type":"bandwidth","capabilities":{"bandwidth":true}}]})");
  std::map<std::string, std::string> env = {
      {"CAP_ARGS", R"({"portMappings":[{"hostPort":18080,"containerPort":80,"protocol":"tcp"}],
                     "bandwidth":{"ingressRate":8000000,"ingressBurst":1000000,"egressRate":8000000,"egressBurst":1000000}})"},
      {"CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web"}};

  CtlRun add = Ctl({"add", "chain", pod.path()}, env);
  ASSERT_EQ(add.exit_code, 0) << add.err << add.out;
  json result = add.Json();
  EXPECT_EQ(result["cniVersion"], "1.0.0");
  ExpectAttached(pod, result);
  const std::string host_if = HostIf(result);
  ASSERT_FALSE(host_if.empty()) << result.dump();

  // tuning: MTU and the sysctl inside the pod.
  json link = pod.IpJson({"link", "show", "dev", "eth0"});
  ASSERT_EQ(link.size(), 1u);
  EXPECT_EQ(link[0]["mtu"], 1300);
  std::string arp;
  pod.Exec({"cat", "/proc/sys/net/ipv4/conf/eth0/arp_ignore"}, &arp);
  EXPECT_EQ(arp, "1\n");
  // portmap: its DNAT chain in the node, for this container's port.
  std::string nat = NodeRun({"iptables", "-t", "nat", "-S"});
  EXPECT_NE(nat.find("CNI-HOSTPORT-DNAT"), std::string::npos) << nat;
  EXPECT_NE(nat.find("18080"), std::string::npos) << nat;
  // bandwidth: a token bucket on the host veth.
  std::string qdisc = NodeRun({"tc", "qdisc", "show", "dev", host_if});
  EXPECT_NE(qdisc.find("tbf"), std::string::npos) << qdisc;

  // Debian's portmap 1.1.1 cannot CHECK a pod with host ports: it looks for
  // its rules in the ip6tables chain (containernetworking/plugins#819). CHECK
  // runs in order, so weft and tuning have passed when portmap is reached.
  CtlRun check = Ctl({"check", "chain", pod.path()}, env);
  if (check.exit_code != 0) {
    EXPECT_NE(check.err.find("plugin type=\"portmap\" failed (check)"), std::string::npos) << check.err;
    EXPECT_NE(check.err.find("ipv6"), std::string::npos) << check.err;
  }
  // A pod without host ports goes through all four CHECKs.
  std::map<std::string, std::string> env2 = {
      {"CAP_ARGS", R"({"bandwidth":{"ingressRate":8000000,"ingressBurst":1000000,"egressRate":8000000,"egressBurst":1000000}})"}};
  CtlRun add2 = Ctl({"add", "chain", quiet.path()}, env2);
  ASSERT_EQ(add2.exit_code, 0) << add2.err;
  ExpectAttached(quiet, add2.Json());
  CtlRun check2 = Ctl({"check", "chain", quiet.path()}, env2);
  EXPECT_EQ(check2.exit_code, 0) << check2.err;
  EXPECT_EQ(Ctl({"del", "chain", quiet.path()}, env2).exit_code, 0);
  CtlRun status = Ctl({"status", "chain"});
  EXPECT_EQ(status.exit_code, 0) << status.err;

  CtlRun del = Ctl({"del", "chain", pod.path()}, env);
  ASSERT_EQ(del.exit_code, 0) << del.err;
  EXPECT_FALSE(pod.HasLink("eth0"));
  EXPECT_FALSE(node_.HasLink(host_if));
  nat = NodeRun({"iptables", "-t", "nat", "-S"});
  EXPECT_EQ(nat.find("18080"), std::string::npos) << nat;
  EXPECT_TRUE(std::filesystem::is_empty(CacheDir() + "/results"));
  CtlRun again = Ctl({"del", "chain", pod.path()}, env);
  EXPECT_EQ(again.exit_code, 0) << again.err;
  // CHECK after DEL must fail: there is nothing to check.
  EXPECT_NE(Ctl({"check", "chain", pod.path()}).exit_code, 0);
}

TEST_F(Interop, ReferenceBridgeAndHostLocalPassTheSameChecksAndGc) {
  TestNetns pod1("pod1"), pod2("pod2");
  const std::string ipam_dir = tmp_ + "/host-local";
  WriteConf("10-br.conflist", R"({"cniVersion":"1.0.0","name":"br","plugins":[
      {"type":"bridge","bridge":"cni0","isGateway":true,
       "ipam":{"type":"host-local","dataDir":"@TMP@/host-local","ranges":[[{"subnet":"10.98.0.0/24"}]]}}]})");
  CtlRun a1 = Ctl({"add", "br", pod1.path()});
  ASSERT_EQ(a1.exit_code, 0) << a1.err;
  CtlRun a2 = Ctl({"add", "br", pod2.path()});
  ASSERT_EQ(a2.exit_code, 0) << a2.err;
  ExpectAttached(pod1, a1.Json());
  ExpectAttached(pod2, a2.Json());
  EXPECT_TRUE(pod1.Ping(PodIp(a2.Json()))) << "pod1 cannot reach pod2 across the bridge";
  EXPECT_EQ(Ctl({"check", "br", pod1.path()}).exit_code, 0);
  EXPECT_EQ(Ctl({"check", "br", pod2.path()}).exit_code, 0);
  EXPECT_EQ(Ctl({"status", "br"}).exit_code, 0);
  const std::string ip2_file = ipam_dir + "/br/" + PodIp(a2.Json());
  ASSERT_TRUE(std::filesystem::exists(ip2_file));

  // GC keeping pod1: pod2's attachment is stale and gets a DEL from its cache entry.
  std::string id1 = runtime::ctl::CnitoolContainerId(pod1.path());
  CtlRun gc = Ctl({"gc", "br", "--valid", id1 + "/eth0"});
  ASSERT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_FALSE(pod2.HasLink("eth0"));
  EXPECT_FALSE(std::filesystem::exists(ip2_file));
  ExpectAttached(pod1, a1.Json());

  CtlRun d1 = Ctl({"del", "br", pod1.path()});
  ASSERT_EQ(d1.exit_code, 0) << d1.err;
  EXPECT_FALSE(pod1.HasLink("eth0"));
  EXPECT_FALSE(std::filesystem::exists(ipam_dir + "/br/" + PodIp(a1.Json())));
  EXPECT_EQ(Ctl({"del", "br", pod1.path()}).exit_code, 0);
}

TEST_F(Interop, WeftAnswersStatusAndGcAt110) {
  TestNetns pod1("w1"), pod2("w2");
  const std::string data = tmp_ + "/weft";
  WriteConf("10-w.conflist", R"({"cniVersion":"1.1.0","name":"w","plugins":[
      {"type":"weft","ranges":["10.97.0.0/24"],"dataDir":"@TMP@/weft"}]})");
  CtlRun status = Ctl({"--json", "status", "w"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_EQ(status.Json()["statusSent"], true);
  CtlRun a1 = Ctl({"add", "w", pod1.path(), "--container-id", "wc1"});
  ASSERT_EQ(a1.exit_code, 0) << a1.err;
  CtlRun a2 = Ctl({"add", "w", pod2.path(), "--container-id", "wc2"});
  ASSERT_EQ(a2.exit_code, 0) << a2.err;
  ExpectAttached(pod1, a1.Json());
  ExpectAttached(pod2, a2.Json());
  EXPECT_EQ(Ctl({"check", "w", pod2.path(), "--container-id", "wc2"}).exit_code, 0);

  CtlRun gc = Ctl({"gc", "w", "--valid", "wc1/eth0"});
  ASSERT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_FALSE(pod2.HasLink("eth0"));
  EXPECT_FALSE(node_.HasLink(HostIf(a2.Json())));
  auto store = ipam::Store::Open(data);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_FALSE(store->Find("wc2", "eth0")->has_value());
  EXPECT_TRUE(store->Find("wc1", "eth0")->has_value());
  ExpectAttached(pod1, a1.Json());

  // A leak the cache does not know about (a row whose cache file vanished):
  // only the GC verb sent to weft can reclaim it.
  std::filesystem::remove(CacheDir() + "/results/w-wc1-eth0");
  CtlRun gc2 = Ctl({"gc", "w"});
  ASSERT_EQ(gc2.exit_code, 0) << gc2.err;
  EXPECT_FALSE(store->Find("wc1", "eth0")->has_value());
  EXPECT_FALSE(pod1.HasLink("eth0"));
}

// cniVersions [1.0.0, 1.1.0]: libcni's rule picks 1.1.0, which Debian's
// plugins (up to 1.0.0) refuse; --negotiate-version asks them and uses 1.0.0.
TEST_F(Interop, CniVersionsWithPluginsThatStopAt100) {
  TestNetns pod("neg");
  WriteConf("10-neg.conflist", R"({"cniVersions":["1.0.0","1.1.0"],"name":"neg","plugins":[
      {"type":"weft","ranges":["10.94.0.0/24"],"dataDir":"@TMP@/weft"},
      {"type":"tuning","mtu":1280}]})");
  CtlRun plain = Ctl({"add", "neg", pod.path()});
  EXPECT_EQ(plain.exit_code, 1) << plain.out;
  EXPECT_NE(plain.err.find("plugin type=\"tuning\" failed (add)"), std::string::npos) << plain.err;
  EXPECT_NE(plain.err.find("(CNI error 1)"), std::string::npos) << plain.err;
  EXPECT_EQ(Ctl({"del", "neg", pod.path()}).exit_code, 1);  // tuning refuses 1.1.0 for DEL too
  ASSERT_EQ(Ctl({"--negotiate-version", "del", "neg", pod.path()}).exit_code, 0);

  CtlRun conf = Ctl({"conf", "--validate"});
  EXPECT_EQ(conf.exit_code, 3);
  EXPECT_NE(conf.out.find("plugin tuning does not support cniVersion 1.1.0"), std::string::npos) << conf.out;

  CtlRun add = Ctl({"--negotiate-version", "add", "neg", pod.path()});
  ASSERT_EQ(add.exit_code, 0) << add.err;
  EXPECT_EQ(add.Json()["cniVersion"], "1.0.0");
  ExpectAttached(pod, add.Json());
  EXPECT_EQ(pod.IpJson({"link", "show", "dev", "eth0"})[0]["mtu"], 1280);
  EXPECT_EQ(Ctl({"--negotiate-version", "check", "neg", pod.path()}).exit_code, 0);
  EXPECT_EQ(Ctl({"--negotiate-version", "del", "neg", pod.path()}).exit_code, 0);
  EXPECT_FALSE(pod.HasLink("eth0"));
}

TEST_F(Interop, LoopbackAsContainerdCallsIt) {
  TestNetns pod("lo");
  ASSERT_EQ(Cmd({"ip", "-n", pod.name(), "link", "set", "lo", "down"}), 0);
  runtime::RuntimeOptions o;
  o.invoke.plugin_dirs = {kRefPlugins};
  o.invoke.base_env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  o.cache_dir = CacheDir();
  runtime::Runtime rt(o);
  runtime::RuntimeConf conf;
  conf.container_id = "0123456789abcdef0123456789abcdef";
  conf.netns = pod.path();
  conf.ifname = "lo";
  // containerd's labels, in the (random) order it happens to send them.
  conf.args = {{"K8S_POD_UID", "u-1"}, {"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"},
               {"K8S_POD_NAME", "web"}, {"K8S_POD_INFRA_CONTAINER_ID", conf.container_id}};
  auto lo = runtime::LoopbackNetwork();
  auto add = rt.AddNetworkList(lo, conf);
  ASSERT_TRUE(add.ok()) << add.status().ToString();
  EXPECT_EQ(add->json["cniVersion"], "0.3.1");
  bool has_127 = false;
  for (const auto& ip : add->result.ips) has_127 |= ip.address.ToString() == "127.0.0.1/8";
  EXPECT_TRUE(has_127) << add->json.dump();
  json link = pod.IpJson({"link", "show", "dev", "lo"});
  ASSERT_EQ(link.size(), 1u);
  EXPECT_NE(link[0]["flags"].dump().find("\"UP\""), std::string::npos) << link.dump();
  EXPECT_TRUE(pod.Ping("127.0.0.1"));
  EXPECT_TRUE(std::filesystem::exists(CacheDir() + "/results/cni-loopback-" + conf.container_id + "-lo"));

  // Stop: DEL with the netns; Remove: DEL again without netns or cache.
  ASSERT_TRUE(rt.DelNetworkList(lo, conf).ok());
  EXPECT_FALSE(std::filesystem::exists(CacheDir() + "/results/cni-loopback-" + conf.container_id + "-lo"));
  runtime::RuntimeConf gone = conf;
  gone.netns.clear();
  Status again = rt.DelNetworkList(lo, gone);
  EXPECT_TRUE(again.ok()) << again.ToString();
}

TEST_F(Interop, TeardownThroughTheCacheAloneAfterThePodAndItsConfigAreGone) {
  const std::string ipam_dir = tmp_ + "/host-local";
  const std::string data = tmp_ + "/weft";
  WriteConf("10-br.conflist", R"({"cniVersion":"1.0.0","name":"brc","plugins":[
      {"type":"bridge","bridge":"cni1","isGateway":true,
       "ipam":{"type":"host-local","dataDir":"@TMP@/host-local","ranges":[[{"subnet":"10.96.0.0/24"}]]}},
      {"type":"portmap","capabilities":{"portMappings":true}}]})");
  WriteConf("20-w.conflist", R"({"cniVersion":"1.1.0","name":"wc","plugins":[
      {"type":"weft","ranges":["10.95.0.0/24"],"dataDir":"@TMP@/weft"}]})");
  std::string pod_path;
  json br_result, w_result;
  {
    TestNetns pod("cache");
    pod_path = pod.path();
    std::map<std::string, std::string> env = {
        {"CAP_ARGS", R"({"portMappings":[{"hostPort":18081,"containerPort":80,"protocol":"tcp"}]})"}};
    CtlRun a = Ctl({"add", "brc", pod.path()}, env);
    ASSERT_EQ(a.exit_code, 0) << a.err;
    br_result = a.Json();
    CtlRun w = Ctl({"add", "wc", pod.path(), "--ifname", "net1"});
    ASSERT_EQ(w.exit_code, 0) << w.err;
    w_result = w.Json();
    ExpectAttached(pod, br_result);
    ExpectAttached(pod, w_result, "net1");
  }  // the pod netns is deleted here, as after a node crash
  std::filesystem::remove(ConfDir() + "/10-br.conflist");
  std::filesystem::remove(ConfDir() + "/20-w.conflist");
  ASSERT_NE(NodeRun({"iptables", "-t", "nat", "-S"}).find("18081"), std::string::npos);
  const std::string ip_file = ipam_dir + "/brc/" + PodIp(br_result);
  ASSERT_TRUE(std::filesystem::exists(ip_file));

  // No conf, no netns, no prevResult on the command line: only the cache.
  CtlRun d = Ctl({"del", "brc", pod_path, "--no-netns"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.err.find("torn down from its cache entry"), std::string::npos) << d.err;
  EXPECT_FALSE(std::filesystem::exists(ip_file)) << "host-local kept the address";
  EXPECT_EQ(NodeRun({"iptables", "-t", "nat", "-S"}).find("18081"), std::string::npos) << "portmap kept its rule";
  CtlRun dw = Ctl({"del", "wc", pod_path, "--no-netns", "--ifname", "net1"});
  ASSERT_EQ(dw.exit_code, 0) << dw.err;
  auto store = ipam::Store::Open(data);
  ASSERT_TRUE(store.ok());
  EXPECT_FALSE(store->Find(runtime::ctl::CnitoolContainerId(pod_path), "net1")->has_value());
  EXPECT_TRUE(std::filesystem::is_empty(CacheDir() + "/results"));
  // And once more: nothing cached, nothing configured.
  EXPECT_EQ(Ctl({"del", "brc", pod_path, "--no-netns"}).exit_code, 3);
}

}  // namespace
}  // namespace weft::testing
