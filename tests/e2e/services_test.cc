// Weft's own Service proxy end to end (issue 31, docs/services.md): the
// NetworkPolicy harness's two-node virtual cluster (netpol_harness.h) with
// weftd --service-proxy true on both nodes, Services and EndpointSlices
// posted to the stand-in API server as the EndpointSlice controller would
// write them, and netpol_agent probes from a client pod:
//   (a) a ClusterIP with two endpoints on different nodes: both used, the
//       client pod's address unmasqueraded at the endpoint;
//   (b) a Service without endpoints: a TCP connect is refused at once;
//   (c) an endpoint removed: traffic only to the one left, promptly;
//   (d) a NodePort through the node's address (from the underlay and from
//       the node itself), masqueraded as kube-proxy does;
//   (e) sessionAffinity ClientIP: every connection to one endpoint;
//   (f) externalTrafficPolicy Local: the healthCheckNodePort answers 200
//       where the endpoint is, 503 elsewhere and once it leaves; the
//       NodePort keeps the client's address there and drops elsewhere;
//   (g) hairpin: an endpoint reaching itself through its Service;
//   (h) externalIPs: an address routed to a node, from the underlay;
//   (i) internalTrafficPolicy Local: only this node's endpoints, a drop
//       when it has none;
//   UDP: rejected without endpoints, an endpoint's removal and its conntrack
//   entries deleted; weftd restarting (the table serves on, then is replaced from
//   complete lists); and the check: weftd's own deltas wake none, a
//   tampered table is repaired.
// Pods: s/client on n1, s/ep1 on n2, s/ep2 on n1; each endpoint pod runs a
// second agent on TCP 8080 that names the peer address (serve --peer 1).

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "e2e/netpol_harness.h"

namespace weft::testing::netpol {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kTargetPort = 8080;
constexpr char kWebIp[] = "10.96.10.10";     // (a), (c)
constexpr char kEmptyIp[] = "10.96.10.11";   // (b)
constexpr char kNodePortIp[] = "10.96.10.12";  // (d)
constexpr int kNodePort = 30080;
constexpr char kStickyIp[] = "10.96.10.13";  // (e)
constexpr char kUdpIp[] = "10.96.10.14";   // UDP
constexpr char kLocalIp[] = "10.96.10.15";    // eTP Local, its NodePort and healthCheckNodePort
constexpr int kLocalNodePort = 30081;
constexpr int kHealthPort = 30090;
constexpr char kHairpinIp[] = "10.96.10.16";
constexpr char kExtClusterIp[] = "10.96.10.17";  // externalIPs
constexpr char kExternalIp[] = "203.0.113.10";   // routed to n2 by the underlay
constexpr char kItpIp[] = "10.96.10.18";          // iTP Local

long MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

json ServiceObject(const std::string& name, const std::string& ip, const std::string& type = "ClusterIP",
                   bool affinity = false, const std::string& proto = "TCP") {
  json port = {{"name", "http"}, {"port", 80}, {"targetPort", kTargetPort}, {"protocol", proto}};
  if (type == "NodePort") port["nodePort"] = kNodePort;
  json spec = {{"type", type}, {"clusterIP", ip}, {"clusterIPs", {ip}}, {"ports", {port}}};
  if (affinity) spec["sessionAffinity"] = "ClientIP";
  return {{"kind", "Service"}, {"metadata", {{"name", name}, {"namespace", "s"}}}, {"spec", spec}};
}

// The slice the EndpointSlice controller would write for `service`, with
// its trigger-time annotation.
json SliceObject(const std::string& service, const std::vector<const NetpolPod*>& pods,
                 const std::string& proto = "TCP") {
  json eps = json::array();
  for (const NetpolPod* p : pods)
    eps.push_back({{"addresses", {p->ip()}},
                   {"conditions", {{"ready", true}, {"serving", true}, {"terminating", false}}},
                   {"nodeName", p->node->name},
                   {"targetRef", {{"kind", "Pod"}, {"namespace", p->ns}, {"name", p->name}}}});
  std::time_t t = std::time(nullptr);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return {{"kind", "EndpointSlice"},
          {"metadata",
           {{"name", service + "-abcde"},
            {"namespace", "s"},
            {"labels", {{"kubernetes.io/service-name", service}, {"endpointslice.kubernetes.io/managed-by",
                                                                   "endpointslice-controller.k8s.io"}}},
            {"annotations", {{"endpoints.kubernetes.io/last-change-trigger-time", ts}}}}},
          {"addressType", "IPv4"},
          {"ports", {{{"name", "http"}, {"port", kTargetPort}, {"protocol", proto}}}},
          {"endpoints", eps}};
}

class ServicesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o;
    o.pods = {"s/client", "s/ep1", "s/ep2"};  // n1, n2, n1
    o.weftd_flags = {"--service-proxy", "true"};
    cluster_ = std::make_unique<NetpolCluster>(o);
    if (!cluster_->error().empty()) return;
    for (const char* key : {"s/ep1", "s/ep2"}) {
      NetpolPod& p = cluster_->pod(key);
      peers_.push_back(std::make_unique<Child>(
          p.pod->ns.name(),
          std::vector<std::string>{AgentPath(), "serve", "--name", p.key(), "--tcp", std::to_string(kTargetPort),
                                   "--udp", std::to_string(kTargetPort), "--sctp", std::to_string(kTargetPort),
                                   "--peer", "1"},
          cluster_->root() + "/agent-peer-" + p.name + ".log"));
      const std::string self = "tcp:127.0.0.1:" + std::to_string(kTargetPort);
      WaitFor([&] { return cluster_->ProbeFrom(p.pod->ns, {self}, 200)[0].ok; }, 5000, 50);
    }
  }
  static void TearDownTestSuite() {
    peers_.clear();
    cluster_.reset();
  }

  void SetUp() override {
    ASSERT_TRUE(cluster_);
    c_ = cluster_.get();
    ASSERT_EQ(c_->error(), "") << c_->Diagnostics();
    ASSERT_TRUE(c_->Healthy()) << c_->Diagnostics();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << Diagnostics();
    for (const auto& [kind, name] : created_) c_->api().Delete(kind, "s", name);
    created_.clear();
  }

  void Apply(const json& obj) {
    c_->api().Apply(obj);
    created_.emplace(obj["kind"].get<std::string>(), obj["metadata"]["name"].get<std::string>());
  }
  const NetpolPod& Pod(const std::string& key) { return c_->pod(key); }

  // One connection from `from` to `target`: the responder ("s/ep1") and the
  // address it saw, or ok=false with the reason.
  struct Reply {
    bool ok = false;
    std::string responder, peer, detail;
  };
  Reply Connect(const TestNetns& from, const std::string& target, int timeout_ms = 1000) {
    ProbeResult r = c_->ProbeFrom(from, {target}, timeout_ms)[0];
    Reply out;
    out.ok = r.ok;
    out.detail = r.detail;
    if (r.ok) {
      // TCP: "NAME@PEER"; UDP: "NAME <the datagram>".
      auto at = r.detail.find_first_of("@ ");
      out.responder = r.detail.substr(0, at);
      if (at != std::string::npos && r.detail[at] == '@') out.peer = r.detail.substr(at + 1);
    }
    return out;
  }
  // Until `target` answers from `from` (the proxy programs asynchronously).
  Reply WaitReachable(const TestNetns& from, const std::string& target, int deadline_ms = 5000) {
    Reply r;
    auto t0 = Clock::now();
    while (MsSince(t0) < deadline_ms) {
      r = Connect(from, target, 300);
      if (r.ok) return r;
    }
    return r;
  }

  std::string Diagnostics() {
    std::string out = c_->Diagnostics();
    for (int i = 0; i < c_->node_count(); ++i) {
      std::string t;
      c_->node(i).ns.Exec({"nft", "list", "table", "inet", "weft-services"}, &t);
      out += "---- " + c_->node(i).name + " nft list table inet weft-services ----\n" + t + "\n";
    }
    return out;
  }

  // An HTTP GET with curl from `from`: the status (0: no answer) and body.
  struct Http {
    int code = 0;
    std::string body;
  };
  static Http Get(const TestNetns& from, const std::string& url) {
    std::string out;
    from.Exec({"curl", "-s", "-m", "2", "-w", "\n%{http_code}", url}, &out);
    Http h;
    const size_t nl = out.rfind('\n');
    if (nl == std::string::npos) return h;
    h.body = out.substr(0, nl);
    h.code = std::atoi(out.c_str() + nl + 1);
    return h;
  }
  // Until Get answers `code` (the proxy syncs the health servers after its
  // transaction); the last answer.
  static Http WaitHttp(const TestNetns& from, const std::string& url, int code, int deadline_ms = 5000) {
    Http h;
    auto t0 = Clock::now();
    while (MsSince(t0) < deadline_ms) {
      h = Get(from, url);
      if (h.code == code) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return h;
  }
  static int LocalEndpoints(const Http& h) {
    json j = json::parse(h.body, nullptr, false);
    return j.is_object() && j.contains("localEndpoints") ? j["localEndpoints"].get<int>() : -1;
  }

  static std::string Tcp(const std::string& ip, int port = 80) { return "tcp:" + ip + ":" + std::to_string(port); }

  static std::unique_ptr<NetpolCluster> cluster_;
  static std::vector<std::unique_ptr<Child>> peers_;
  NetpolCluster* c_ = nullptr;
  std::set<std::pair<std::string, std::string>> created_;  // (kind, name) in namespace s
};

std::unique_ptr<NetpolCluster> ServicesTest::cluster_;
std::vector<std::unique_ptr<Child>> ServicesTest::peers_;

// (a) and (c): a ClusterIP over two endpoints on different nodes; the
// client's address reaches each endpoint as it is; then one endpoint goes.
TEST_F(ServicesTest, ClusterIpUsesBothEndpointsWithTheClientsAddressAndDropsARemovedOne) {
  const NetpolPod &client = Pod("s/client"), &ep1 = Pod("s/ep1"), &ep2 = Pod("s/ep2");
  ASSERT_NE(ep1.node, ep2.node);
  Apply(ServiceObject("web", kWebIp));
  Apply(SliceObject("web", {&ep1, &ep2}));
  const std::string target = Tcp(kWebIp);
  Reply first = WaitReachable(client.pod->ns, target);
  ASSERT_TRUE(first.ok) << first.detail;

  std::map<std::string, int> seen;
  for (int i = 0; i < 40 && seen.size() < 2; ++i) {
    Reply r = Connect(client.pod->ns, target);
    ASSERT_TRUE(r.ok) << "connection " << i << ": " << r.detail;
    EXPECT_EQ(r.peer, client.ip()) << "the endpoint " << r.responder << " saw another source than the client pod";
    seen[r.responder]++;
  }
  EXPECT_EQ(seen.size(), 2u) << "only " << (seen.empty() ? "none" : seen.begin()->first) << " answered 40 connections";
  EXPECT_TRUE(seen.count("s/ep1") && seen.count("s/ep2"));

  // (c) ep1 leaves the slice: within a moment only ep2 answers.
  auto t0 = Clock::now();
  Apply(SliceObject("web", {&ep2}));
  long took = -1;
  int in_a_row = 0;
  while (MsSince(t0) < 5000) {
    Reply r = Connect(client.pod->ns, target, 500);
    in_a_row = r.ok && r.responder == "s/ep2" ? in_a_row + 1 : 0;
    if (in_a_row == 1) took = MsSince(t0);
    if (in_a_row == 20) break;
  }
  ASSERT_EQ(in_a_row, 20) << "traffic still went elsewhere than s/ep2 after 5 s";
  EXPECT_LT(took, 1000) << "the removed endpoint was still used " << took << " ms after the change";
  std::cerr << "[services] endpoint removal effective after " << took << " ms\n";
  // The proxy counted the changes and a programming latency (the trigger
  // time annotation) on the client's node.
  EXPECT_GE(c_->node(0).Metric("weft_services_network_programming_duration_seconds_count"), 2);
  EXPECT_GE(c_->node(0).Metric("weft_services_changes_total"), 3);
  EXPECT_EQ(c_->node(0).Metric("weft_services_ready"), 1);
}

// (b): no endpoints -> reject (TCP RST) at once, not a timeout; the
// Service's first endpoint then opens it.
TEST_F(ServicesTest, ServiceWithoutEndpointsRefusesAtOnce) {
  const NetpolPod &client = Pod("s/client"), &ep1 = Pod("s/ep1");
  Apply(ServiceObject("empty", kEmptyIp));
  Apply(SliceObject("empty", {}));
  const std::string target = Tcp(kEmptyIp);
  // Programmed when the connect is refused rather than timing out (before
  // the proxy has the Service, the SYN is routed to the node's default
  // route and gets no answer).
  Reply r;
  auto t0 = Clock::now();
  while (MsSince(t0) < 5000) {
    r = Connect(client.pod->ns, target, 300);
    if (!r.ok && r.detail == "refused") break;
  }
  ASSERT_EQ(r.detail, "refused") << "a Service without endpoints did not reject";
  for (int i = 0; i < 5; ++i) {
    auto t = Clock::now();
    r = Connect(client.pod->ns, target, 3000);
    long ms = MsSince(t);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.detail, "refused");
    EXPECT_LT(ms, 500) << "the refusal took " << ms << " ms";
  }
  // The node itself is refused too (the output hook).
  ProbeResult n = c_->ProbeFrom(c_->node(0).ns, {target}, 3000)[0];
  EXPECT_EQ(n.detail, "refused");
  // Its first endpoint: reachable.
  Apply(SliceObject("empty", {&ep1}));
  r = WaitReachable(client.pod->ns, target);
  EXPECT_TRUE(r.ok) << r.detail;
  EXPECT_EQ(r.responder, "s/ep1");
}

// (d): the NodePort on n1's address, from outside the cluster (the
// underlay) and from the node itself; both endpoints behind it.
TEST_F(ServicesTest, NodePortAnswersOnTheNodesAddressMasqueraded) {
  const NetpolPod &ep1 = Pod("s/ep1"), &ep2 = Pod("s/ep2");
  Apply(ServiceObject("np", kNodePortIp, "NodePort"));
  Apply(SliceObject("np", {&ep1, &ep2}));
  const WeftNode& n1 = c_->node(0);
  const std::string target = Tcp(n1.ip(), kNodePort);
  Reply r = WaitReachable(c_->underlay(), target);
  ASSERT_TRUE(r.ok) << "NodePort " << target << " from the underlay: " << r.detail;
  std::set<std::string> seen;
  for (int i = 0; i < 40 && seen.size() < 2; ++i) {
    r = Connect(c_->underlay(), target);
    ASSERT_TRUE(r.ok) << r.detail;
    // externalTrafficPolicy Cluster: masqueraded (the endpoint never sees
    // the off-cluster client's address).
    EXPECT_NE(r.peer, Underlay::kIp) << "NodePort traffic reached " << r.responder << " unmasqueraded";
    seen.insert(r.responder);
  }
  EXPECT_EQ(seen, (std::set<std::string>{"s/ep1", "s/ep2"}));
  // From the node itself, to its own address.
  r = WaitReachable(n1.ns, target);
  EXPECT_TRUE(r.ok) << "NodePort from the node: " << r.detail;
  // And from the other node's address too (every node serves every NodePort).
  r = WaitReachable(c_->underlay(), Tcp(c_->node(1).ip(), kNodePort));
  EXPECT_TRUE(r.ok) << "NodePort on n2: " << r.detail;
  // The ClusterIP of the same Service from a pod.
  r = WaitReachable(Pod("s/client").pod->ns, Tcp(kNodePortIp));
  EXPECT_TRUE(r.ok) << r.detail;
}

// (e): sessionAffinity ClientIP keeps a client on one endpoint.
TEST_F(ServicesTest, SessionAffinityClientIpSticks) {
  const NetpolPod &client = Pod("s/client"), &ep1 = Pod("s/ep1"), &ep2 = Pod("s/ep2");
  Apply(ServiceObject("sticky", kStickyIp, "ClusterIP", true));
  Apply(SliceObject("sticky", {&ep1, &ep2}));
  const std::string target = Tcp(kStickyIp);
  Reply first = WaitReachable(client.pod->ns, target);
  ASSERT_TRUE(first.ok) << first.detail;
  // 2^-15 that a random choice keeps one endpoint for 16 connections.
  for (int i = 0; i < 15; ++i) {
    Reply r = Connect(client.pod->ns, target);
    ASSERT_TRUE(r.ok) << r.detail;
    EXPECT_EQ(r.responder, first.responder) << "connection " << i + 1 << " left the first endpoint";
  }
  // Another client (the node itself, a source of its own) is free to land
  // elsewhere, but sticks as well.
  Reply n = WaitReachable(c_->node(0).ns, target);
  ASSERT_TRUE(n.ok) << n.detail;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Connect(c_->node(0).ns, target).responder, n.responder);
}

// UDP: no endpoints is an ICMP port unreachable (refused at once), both
// endpoints answer, and when one leaves only the other does; the change's
// conntrack cleanup deletes the node's entries DNATed to the endpoint that
// left (kube-proxy's ClearEntriesForNAT), and only those.
TEST_F(ServicesTest, UdpRejectsWithoutEndpointsUsesBothAndDeletesTheEntriesOfOneThatLeft) {
  const NetpolPod &client = Pod("s/client"), &ep1 = Pod("s/ep1"), &ep2 = Pod("s/ep2");
  WeftNode& n1 = c_->node(0);
  Apply(ServiceObject("dns", kUdpIp, "ClusterIP", false, "UDP"));
  Apply(SliceObject("dns", {}, "UDP"));
  const std::string target = "udp:" + std::string(kUdpIp) + ":80";
  Reply r;
  auto t0 = Clock::now();
  while (MsSince(t0) < 5000 && r.detail != "refused") r = Connect(client.pod->ns, target, 300);
  ASSERT_EQ(r.detail, "refused") << "a UDP Service without endpoints did not reject";
  Apply(SliceObject("dns", {&ep1, &ep2}, "UDP"));
  std::set<std::string> seen;
  t0 = Clock::now();
  while (MsSince(t0) < 5000 && seen.size() < 2) {
    r = Connect(client.pod->ns, target, 500);
    if (r.ok) seen.insert(r.responder);
  }
  EXPECT_EQ(seen, (std::set<std::string>{"s/ep1", "s/ep2"}));
  // The probes left entries on n1 (the client's node, where the DNAT is)
  // to each endpoint.
  // Each entry by its client port (the first sport= of its line).
  auto entries_to = [&](const NetpolPod& ep) {
    std::string out;
    n1.ns.Exec({"conntrack", "-L", "-p", "udp", "--orig-dst", kUdpIp, "--reply-src", ep.ip()}, &out);
    std::set<std::string> sports;
    for (size_t at = out.find("udp "); at != std::string::npos; at = out.find("udp ", at + 1)) {
      size_t s = out.find("sport=", at);
      if (s != std::string::npos) sports.insert(out.substr(s, out.find(' ', s) - s));
    }
    return sports;
  };
  for (int i = 0; i < 10 && (entries_to(ep1).empty() || entries_to(ep2).empty()); ++i)
    Connect(client.pod->ns, target, 500);
  ASSERT_FALSE(entries_to(ep1).empty());
  const std::set<std::string> kept = entries_to(ep2);
  ASSERT_FALSE(kept.empty());
  const double asked = n1.Metric("weft_services_conntrack_flushes_total");
  const double deleted = n1.Metric("weft_services_conntrack_entries_deleted_total");
  Apply(SliceObject("dns", {&ep2}, "UDP"));
  int in_a_row = 0;
  t0 = Clock::now();
  while (MsSince(t0) < 5000 && in_a_row < 10) {
    r = Connect(client.pod->ns, target, 500);
    in_a_row = r.ok && r.responder == "s/ep2" ? in_a_row + 1 : 0;
  }
  EXPECT_EQ(in_a_row, 10) << "UDP still went elsewhere than s/ep2: " << r.detail;
  EXPECT_TRUE(WaitFor([&] { return n1.Metric("weft_services_conntrack_flushes_total") > asked; }, 2000));
  EXPECT_EQ(entries_to(ep1), std::set<std::string>{}) << "entries DNATed to the endpoint that left are still there";
  const std::set<std::string> now = entries_to(ep2);
  for (const auto& s : kept) EXPECT_TRUE(now.count(s)) << "the remaining endpoint's entry " << s << " was deleted too";
  EXPECT_GT(n1.Metric("weft_services_conntrack_entries_deleted_total"), deleted);
}

// weftd restarting: the table it left serves on while it is down (nothing
// flushes it), and the new weftd replaces it in one transaction from
// complete lists (one full sync, no repair), serving what changed meanwhile.
TEST_F(ServicesTest, TheTableServesWhileWeftdRestartsAndIsReplacedFromCompleteLists) {
  const NetpolPod &client = Pod("s/client"), &ep1 = Pod("s/ep1"), &ep2 = Pod("s/ep2");
  Apply(ServiceObject("web", kWebIp));
  Apply(SliceObject("web", {&ep1, &ep2}));
  ASSERT_TRUE(WaitReachable(client.pod->ns, Tcp(kWebIp)).ok);
  c_->node(0).StopWeftd();
  for (int i = 0; i < 5; ++i) {
    Reply r = Connect(client.pod->ns, Tcp(kWebIp));
    EXPECT_TRUE(r.ok) << "with weftd stopped: " << r.detail;
  }
  Apply(SliceObject("web", {&ep2}));  // while n1's weftd is down
  c_->StartWeftd(0);
  ASSERT_TRUE(WaitFor([&] { return c_->node(0).Metric("weft_services_ready") == 1; }, 10000)) << Diagnostics();
  EXPECT_EQ(c_->node(0).Metric("weft_services_full_syncs_total"), 1);
  EXPECT_EQ(c_->node(0).Metric("weft_services_repairs_total"), 0);
  for (int i = 0; i < 10; ++i) {
    Reply r = Connect(client.pod->ns, Tcp(kWebIp));
    EXPECT_TRUE(r.ok && r.responder == "s/ep2") << "after the restart: " << r.detail;
  }
}

// The periodic check's wake: weftd's own deltas (which delete chains and
// elements) call for no check, someone else's deletion in the table does,
// and the check puts the table back (weft_repairs_total{object=
// "services-table"}).
TEST_F(ServicesTest, OwnDeltasWakeNoCheckAndATamperedTableIsRepaired) {
  const NetpolPod &client = Pod("s/client"), &ep1 = Pod("s/ep1"), &ep2 = Pod("s/ep2");
  WeftNode& n1 = c_->node(0);
  Apply(ServiceObject("web", kWebIp));
  Apply(SliceObject("web", {&ep1, &ep2}));
  ASSERT_TRUE(WaitReachable(client.pod->ns, Tcp(kWebIp)).ok);
  // A weftd that just started (the case before restarts n1's) checks the
  // table once more after its first NetworkPolicy full sync, which it sends
  // deaf to notifications (agent.cc's DeafDuringFullSync wakes the services
  // pass as after lost ones): the baseline is taken once the count holds
  // still for 500 ms.
  double checks = n1.Metric("weft_services_kernel_checks_total");
  for (auto t0 = Clock::now(); MsSince(t0) < 5000;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const double now = n1.Metric("weft_services_kernel_checks_total");
    if (now == checks) break;
    checks = now;
  }
  const double repairs = n1.Metric("weft_services_repairs_total");
  // Endpoint chains deleted by weftd itself.
  Apply(SliceObject("web", {&ep2}));
  Apply(SliceObject("web", {&ep1}));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(n1.Metric("weft_services_kernel_checks_total"), checks) << "weftd's own commits woke a check";
  // Someone flushes the dispatch chain: ClusterIPs stop working until the check.
  std::string out;
  ASSERT_EQ(n1.ns.Exec({"nft", "flush", "chain", "inet", "weft-services", "services"}, &out), 0) << out;
  auto t0 = Clock::now();
  Reply r = WaitReachable(client.pod->ns, Tcp(kWebIp));
  ASSERT_TRUE(r.ok) << "not repaired: " << r.detail;
  std::cerr << "[services] tampered table repaired and reachable after " << MsSince(t0) << " ms\n";
  EXPECT_TRUE(WaitFor([&] { return n1.Metric("weft_services_repairs_total") >= repairs + 1; }, 3000));
  EXPECT_GE(n1.Metric("weft_services_kernel_checks_total"), checks + 1);
  EXPECT_GE(n1.Metric("weft_repairs_total{object=\"services-table\"}"), 1);
}

// (f) externalTrafficPolicy Local on a LoadBalancer (the only type that may
// have a healthCheckNodePort): the endpoint is on n2 only. The health check
// port answers 200 with localEndpoints 1 on n2 and 503 with 0 on n1 (what a
// cloud load balancer reads to send traffic to n2 only); the NodePort on
// n2 keeps the off-cluster client's address (no masquerade) and on n1 the
// traffic is dropped (not rejected: the Service has endpoints, just none
// there). The endpoint leaving flips n2 to 503; the Service's deletion
// closes the ports.
TEST_F(ServicesTest, ExternalTrafficPolicyLocalHealthCheckPortAndSourcePreservingNodePort) {
  const NetpolPod& ep1 = Pod("s/ep1");
  ASSERT_EQ(ep1.node->name, c_->node(1).name);
  json port = {{"name", "http"}, {"port", 80}, {"targetPort", kTargetPort}, {"protocol", "TCP"},
               {"nodePort", kLocalNodePort}};
  Apply({{"kind", "Service"},
         {"metadata", {{"name", "local"}, {"namespace", "s"}}},
         {"spec",
          {{"type", "LoadBalancer"}, {"clusterIP", kLocalIp}, {"clusterIPs", {kLocalIp}}, {"ports", {port}},
           {"externalTrafficPolicy", "Local"}, {"healthCheckNodePort", kHealthPort}}}});
  Apply(SliceObject("local", {&ep1}));
  const WeftNode &n1 = c_->node(0), &n2 = c_->node(1);
  const std::string hc1 = "http://" + n1.ip() + ":" + std::to_string(kHealthPort) + "/";
  const std::string hc2 = "http://" + n2.ip() + ":" + std::to_string(kHealthPort) + "/healthz";
  Http h2 = WaitHttp(c_->underlay(), hc2, 200);
  ASSERT_EQ(h2.code, 200) << h2.body;
  EXPECT_EQ(LocalEndpoints(h2), 1) << h2.body;
  EXPECT_NE(h2.body.find("\"serviceProxyHealthy\": true"), std::string::npos) << h2.body;
  EXPECT_NE(h2.body.find("\"name\": \"local\""), std::string::npos) << h2.body;
  Http h1 = WaitHttp(c_->underlay(), hc1, 503);
  ASSERT_EQ(h1.code, 503) << h1.body;
  EXPECT_EQ(LocalEndpoints(h1), 0) << h1.body;
  EXPECT_EQ(n1.Metric("weft_services_health_check_ports"), 1);
  EXPECT_EQ(n2.Metric("weft_services_health_check_ports"), 1);
  EXPECT_EQ(n2.Metric("weft_services_proxy_healthy"), 1);
  EXPECT_EQ(n2.Metric("weft_services_health_check_port_errors"), 0);
  for (const char* m : {"weft_services_proxy_healthy", "weft_services_health_check_ports",
                        "weft_services_health_check_port_errors"})
    std::cerr << "[services] n2 " << m << " " << n2.Metric(m) << "\n";

  // The NodePort on n2: the endpoint sees the underlay's own address.
  Reply r = WaitReachable(c_->underlay(), Tcp(n2.ip(), kLocalNodePort));
  ASSERT_TRUE(r.ok) << r.detail;
  for (int i = 0; i < 5; ++i) {
    r = Connect(c_->underlay(), Tcp(n2.ip(), kLocalNodePort));
    ASSERT_TRUE(r.ok) << r.detail;
    EXPECT_EQ(r.responder, "s/ep1");
    EXPECT_EQ(r.peer, Underlay::kIp) << "eTP Local NodePort traffic was masqueraded";
  }
  // On n1 (no endpoint there): dropped, so no answer at all (a reject would
  // be "refused", and so would n1 without the Service's rules: nothing
  // listens on the port).
  for (int i = 0; i < 3; ++i) {
    r = Connect(c_->underlay(), Tcp(n1.ip(), kLocalNodePort), 500);
    EXPECT_FALSE(r.ok) << "eTP Local NodePort on a node without endpoints answered: " << r.responder;
    EXPECT_EQ(r.detail, "timeout");
  }

  // The endpoint leaves: n2 answers 503 with 0.
  Apply(SliceObject("local", {}));
  h2 = WaitHttp(c_->underlay(), hc2, 503);
  EXPECT_EQ(h2.code, 503) << h2.body;
  EXPECT_EQ(LocalEndpoints(h2), 0) << h2.body;

  // The Service deleted: the port closes on both nodes.
  c_->api().Delete("Service", "s", "local");
  created_.erase({"Service", "local"});
  EXPECT_TRUE(WaitFor([&] { return Get(c_->underlay(), hc2).code == 0; }, 5000)) << "n2's port still open";
  EXPECT_TRUE(WaitFor([&] { return Get(c_->underlay(), hc1).code == 0; }, 5000)) << "n1's port still open";
  EXPECT_TRUE(WaitFor([&] { return n2.Metric("weft_services_health_check_ports") == 0; }, 2000));
}

// (g) hairpin: ep2 reaching its own Service (both endpoints behind it)
// lands on itself at least once and is answered; the packet it sends to
// itself is masqueraded (without that its reply would come from its own
// address, not the ClusterIP, and the connection would not open).
TEST_F(ServicesTest, HairpinAnEndpointReachesItselfThroughItsServiceMasqueraded) {
  const NetpolPod &ep1 = Pod("s/ep1"), &ep2 = Pod("s/ep2");
  Apply(ServiceObject("hairpin", kHairpinIp));
  Apply(SliceObject("hairpin", {&ep1, &ep2}));
  const std::string target = Tcp(kHairpinIp);
  Reply r = WaitReachable(ep2.pod->ns, target);
  ASSERT_TRUE(r.ok) << r.detail;
  int self = 0, other = 0;
  for (int i = 0; i < 40 && self < 3; ++i) {
    r = Connect(ep2.pod->ns, target);
    ASSERT_TRUE(r.ok) << "connection " << i << " from the endpoint to its own Service: " << r.detail;
    if (r.responder == "s/ep2") {
      ++self;
      EXPECT_NE(r.peer, ep2.ip()) << "hairpin traffic was not masqueraded";
    } else {
      ++other;
      EXPECT_EQ(r.peer, ep2.ip()) << "traffic to the other endpoint was masqueraded";
    }
  }
  EXPECT_GE(self, 1) << "40 connections, none landed on the endpoint itself (" << other << " on the other)";
}

// (h) externalIPs: the underlay routes 203.0.113.10 to n2, which serves it
// (eTP Cluster: masqueraded, either endpoint).
TEST_F(ServicesTest, ExternalIpRoutedToANodeAnswersFromTheUnderlay) {
  const NetpolPod &ep1 = Pod("s/ep1"), &ep2 = Pod("s/ep2");
  json svc = ServiceObject("ext", kExtClusterIp);
  svc["spec"]["externalIPs"] = {kExternalIp};
  Apply(svc);
  Apply(SliceObject("ext", {&ep1, &ep2}));
  const WeftNode& n2 = c_->node(1);
  std::string out;
  ASSERT_EQ(c_->underlay().Exec({"ip", "route", "replace", std::string(kExternalIp) + "/32", "via", n2.ip()}, &out),
            0)
      << out;
  Reply r = WaitReachable(c_->underlay(), Tcp(kExternalIp));
  std::set<std::string> seen;
  for (int i = 0; r.ok && i < 40 && seen.size() < 2; ++i) {
    r = Connect(c_->underlay(), Tcp(kExternalIp));
    if (!r.ok) break;
    EXPECT_NE(r.peer, Underlay::kIp) << "externalIP traffic (eTP Cluster) reached " << r.responder
                                     << " unmasqueraded";
    seen.insert(r.responder);
  }
  c_->underlay().Exec({"ip", "route", "del", std::string(kExternalIp) + "/32"});
  ASSERT_TRUE(r.ok) << "externalIP " << kExternalIp << " via n2 from the underlay: " << r.detail;
  EXPECT_EQ(seen, (std::set<std::string>{"s/ep1", "s/ep2"}));
}

// (i) internalTrafficPolicy Local: the client on n1 reaches only n1's
// endpoint (ep2), and once n1 has none, gets no connection (dropped, as
// kube-proxy: no reject, the Service has endpoints elsewhere) while n2
// itself still reaches ep1.
TEST_F(ServicesTest, InternalTrafficPolicyLocalUsesOnlyThisNodesEndpointsAndDropsWithoutOne) {
  const NetpolPod &client = Pod("s/client"), &ep1 = Pod("s/ep1"), &ep2 = Pod("s/ep2");
  ASSERT_EQ(client.node, ep2.node);
  json svc = ServiceObject("itp", kItpIp);
  svc["spec"]["internalTrafficPolicy"] = "Local";
  Apply(svc);
  Apply(SliceObject("itp", {&ep1, &ep2}));
  const std::string target = Tcp(kItpIp);
  Reply r = WaitReachable(client.pod->ns, target);
  ASSERT_TRUE(r.ok) << r.detail;
  for (int i = 0; i < 16; ++i) {
    r = Connect(client.pod->ns, target);
    ASSERT_TRUE(r.ok) << r.detail;
    EXPECT_EQ(r.responder, "s/ep2") << "iTP Local traffic from n1 went to another node's endpoint";
  }
  Apply(SliceObject("itp", {&ep1}));
  // Until n1 stops reaching ep2; then no answer, not a refusal.
  auto t0 = Clock::now();
  while (MsSince(t0) < 5000 && r.ok) r = Connect(client.pod->ns, target, 300);
  ASSERT_FALSE(r.ok) << "ep2 still reached after it left the slice";
  for (int i = 0; i < 3; ++i) {
    r = Connect(client.pod->ns, target, 500);
    EXPECT_FALSE(r.ok) << "reached " << r.responder << " from a node without a local endpoint";
    EXPECT_EQ(r.detail, "timeout") << "iTP Local without a local endpoint is a drop, not a reject";
  }
  // n2 has its endpoint: its own traffic is served.
  r = WaitReachable(c_->node(1).ns, target);
  EXPECT_TRUE(r.ok && r.responder == "s/ep1") << r.detail;
}

}  // namespace
}  // namespace weft::testing::netpol
