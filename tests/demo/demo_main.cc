// weft-demo: a three-node virtual cluster on one machine. Each node is a
// network namespace on a shared underlay bridge; etcd is the control plane;
// weftd runs on every node and builds the VXLAN overlay; two pods per node
// are attached through the real weft plugin; an "internet" host sits outside
// the cluster. Prints nodes, pods and a connectivity matrix, then tears
// everything down (also on Ctrl-C). With --keep it leaves the cluster up.
//
// Usage: weft-demo [--keep]   (root; scripts/demo.sh builds and runs it)

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "agent/http.h"
#include "e2e/cluster.h"

namespace weft::testing {
namespace {

volatile sig_atomic_t g_interrupted = 0;  // set by SIGINT/SIGTERM only
void OnSignal(int) { g_interrupted = 1; }

struct Interrupted {};
void CheckInterrupt() {
  if (g_interrupted) throw Interrupted{};
}

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

const char* kOk = "\033[32m✔\033[0m";
const char* kBad = "\033[31m✗\033[0m";

std::string ReadFile(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string PodCidr(const WeftNode& n) {
  try {
    return nlohmann::json::parse(ReadFile(n.conf_dir() + "/10-weft.conflist"))["plugins"][0]["ranges"][0];
  } catch (...) {
    return "?";
  }
}

std::string VtepMac(const WeftNode& n) {
  auto l = n.ns.IpJson({"link", "show", "dev", "weft.1"});
  return l.size() == 1 ? l[0].value("address", "?") : "?";
}

// A server in `ns` on `port` that answers every GET with the peer address
// it saw: shows whether traffic arrived masqueraded.
const char* kWhoAmI =
    "import http.server, sys\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "  def do_GET(self):\n"
    "    b = (self.client_address[0] + '\\n').encode()\n"
    "    self.send_response(200); self.end_headers(); self.wfile.write(b)\n"
    "  def log_message(self, *a): pass\n"
    "http.server.HTTPServer(('0.0.0.0', int(sys.argv[1])), H).serve_forever()\n";

int Run(bool keep) {
  auto t0 = Clock::now();
  if (!agent::InitHttp().ok()) return 1;
  std::string root = TempDir("demo");
  // Declared first, destroyed last: the state dir goes after every process
  // and namespace, on success, failure or Ctrl-C (--keep skips destructors).
  struct RemoveOnExit {
    std::string dir;
    ~RemoveOnExit() { RemoveTree(dir); }
  } remove_root{root};
  std::printf("\033[1m== Weft demo: a three-node virtual cluster on one machine ==\033[0m\n");
  std::printf("state and logs: %s\n\n", root.c_str());

  Underlay ul;
  Etcd etcd(ul, root);
  etcd.Start();
  std::printf("control plane  etcd %s ... ", etcd.endpoint().c_str());
  std::fflush(stdout);
  if (!etcd.WaitHealthy()) {
    std::printf("%s failed (see %s/etcd.log)\n", kBad, root.c_str());
    return 1;
  }
  std::printf("%s\n", kOk);

  // The "internet": a host on the underlay outside the cluster CIDR.
  TestNetns internet("internet");
  Cmd({"ip", "-n", internet.name(), "link", "add", "up0", "type", "veth", "peer", "name", "inet"});
  Cmd({"ip", "-n", internet.name(), "link", "set", "inet", "netns", ul.name()});
  Cmd({"ip", "-n", ul.name(), "link", "set", "inet", "master", "br0"});
  Cmd({"ip", "-n", ul.name(), "link", "set", "inet", "up"});
  Cmd({"ip", "-n", internet.name(), "addr", "add", "192.0.2.200/24", "dev", "up0"});
  Cmd({"ip", "-n", internet.name(), "link", "set", "up0", "up"});
  Child whoami(internet.name(), {"/usr/bin/python3", "-c", kWhoAmI, "80"}, root + "/internet.log");

  std::vector<std::unique_ptr<WeftNode>> nodes;
  for (int i = 1; i <= 3; ++i) {
    nodes.push_back(std::make_unique<WeftNode>(ul, "node" + std::to_string(i), 10 + i, root));
    nodes.back()->StartWeftd({"--control-plane", "etcd", "--etcd-endpoints", etcd.endpoint(), "--cluster-cidr",
                              "10.244.0.0/16", "--backend", "vxlan", "--masquerade", "true"});
  }
  std::printf("node agents    weftd on node1..3 ... ");
  std::fflush(stdout);
  bool converged = WaitFor(
      [&] {
        CheckInterrupt();
        for (auto& n : nodes)
          if (n->PluginConf().empty() || n->AgentRoutes().size() != nodes.size() - 1) return false;
        return true;
      },
      30000);
  std::printf("%s %s (%.1f s)\n\n", converged ? kOk : kBad, converged ? "overlay converged" : "not converged",
              Since(t0));
  if (!converged) return 1;

  std::printf("\033[1mNodes\033[0m\n  %-6s %-12s %-15s %-19s %s\n", "NODE", "HOST IP", "POD CIDR", "VTEP MAC",
              "BACKEND");
  for (auto& n : nodes)
    std::printf("  %-6s %-12s %-15s %-19s %s\n", n->name.c_str(), n->ip().c_str(), PodCidr(*n).c_str(),
                VtepMac(*n).c_str(), "vxlan (weft.1, VNI 1, UDP 8472)");

  // Two pods per node; node1's "web" publishes hostPort 8080 -> 80.
  std::vector<std::unique_ptr<Pod>> pods;
  for (auto& n : nodes)
    for (const char* p : {"a", "b"}) {
      CheckInterrupt();
      pods.push_back(std::make_unique<Pod>(*n, p));
    }
  TestNetns web_ns("node1-web");
  nlohmann::json web_conf = nlohmann::json::parse(nodes[0]->PluginConf());
  web_conf["runtimeConfig"] = {{"portMappings", {{{"hostPort", 8080}, {"containerPort", 80}, {"protocol", "tcp"}}}}};
  auto web = RunPlugin(BinaryPath("weft"), nodes[0]->ns, CniEnv("ADD", "node1-web", web_ns.path()), web_conf.dump());
  std::string web_ip;
  try {
    std::string a = web.Json()["ips"][0]["address"];
    web_ip = a.substr(0, a.find('/'));
  } catch (...) {
  }
  Child web_server(web_ns.name(), {"/usr/bin/python3", "-c", kWhoAmI, "80"}, root + "/web.log");

  std::printf("\n\033[1mPods\033[0m (attached through the weft CNI plugin)\n  %-10s %-6s %s\n", "POD", "NODE", "IP");
  for (auto& p : pods)
    std::printf("  %-10s %-6s %s\n", p->cid.c_str(), p->node.name.c_str(),
                p->ip.empty() ? p->add_error.c_str() : p->ip.c_str());
  std::printf("  %-10s %-6s %s   hostPort 8080 -> 80\n", "node1-web", "node1", web_ip.c_str());

  std::printf("\n\033[1mConnectivity\033[0m\n");
  int failed = 0;
  auto row = [&](bool ok, const std::string& what, const std::string& detail) {
    CheckInterrupt();
    if (!ok) ++failed;
    std::printf("  %s %-24s %s\n", ok ? kOk : kBad, what.c_str(), detail.c_str());
  };
  Pod& n1a = *pods[0];
  Pod& n1b = *pods[1];
  Pod& n2a = *pods[2];
  Pod& n3b = *pods[5];
  row(n1a.ns.Ping(n1b.ip), "pod -> pod, same node", n1a.cid + " -> " + n1b.cid + " (" + n1b.ip + ")");
  row(n1a.ns.Ping(n2a.ip), "pod -> pod, across nodes", n1a.cid + " -> " + n2a.cid + " (" + n2a.ip + ", VXLAN)");
  row(n3b.ns.Ping(n1a.ip), "pod -> pod, across nodes", n3b.cid + " -> " + n1a.cid + " (" + n1a.ip + ", VXLAN)");
  row(nodes[2]->ns.Ping(n1b.ip), "node -> pod", "node3 -> " + n1b.cid + " (" + n1b.ip + ")");
  std::string seen = HttpGet(n2a.ns, "http://192.0.2.200/");
  while (!seen.empty() && seen.back() == '\n') seen.pop_back();
  row(seen == nodes[1]->ip(), "pod -> internet",
      n2a.cid + " -> 192.0.2.200, which sees source " + (seen.empty() ? "(nothing)" : seen) +
          (seen == nodes[1]->ip() ? " = node2, masqueraded" : ""));
  std::string via_hostport = HttpGet(nodes[1]->ns, "http://" + nodes[0]->ip() + ":8080/");
  row(!via_hostport.empty(), "hostPort from another node",
      "node2 -> " + nodes[0]->ip() + ":8080 -> node1-web:80" +
          (via_hostport.empty() ? "" : " (answered)"));

  std::printf("\n%s in %.1f s\n", failed ? "\033[31mSome checks failed\033[0m" : "\033[32mAll checks passed\033[0m",
              Since(t0));
  if (keep) {
    std::printf(
        "\nLeft running (--keep). Explore with:\n"
        "  ip netns exec %s sh                   # a shell in pod node1-a\n"
        "  ip -n %s route                        # node1's routes: per-pod /32s and the overlay\n"
        "  ip -n %s neigh show dev weft.1        # ARP entries for the peer VTEPs\n"
        "  bridge -n %s fdb show dev weft.1      # FDB entries to the peers' host IPs\n"
        "  less %s/node1/weftd.log\n"
        "Remove everything with: scripts/demo.sh --clean %s\n",
        n1a.ns.name().c_str(), nodes[0]->ns.name().c_str(), nodes[0]->ns.name().c_str(),
        nodes[0]->ns.name().c_str(), root.c_str(), Prefix().c_str());
    std::fflush(stdout);
    _exit(failed ? 1 : 0);  // skip the destructors: leave the cluster up
  }
  std::printf("Tearing down (DEL for every pod, weftd, etcd, namespaces)...\n");
  web_server.Stop(SIGKILL);
  RunPlugin(BinaryPath("weft"), nodes[0]->ns, CniEnv("DEL", "node1-web", web_ns.path()), web_conf.dump());
  pods.clear();
  for (auto& n : nodes) n->StopWeftd();
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace weft::testing

int main(int argc, char** argv) {
  bool keep = argc > 1 && std::string(argv[1]) == "--keep";
  struct sigaction sa {};
  sa.sa_handler = weft::testing::OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  try {
    return weft::testing::Run(keep);
  } catch (const weft::testing::Interrupted&) {
    // Destructors of everything built so far have run on the way here.
    std::printf("\ninterrupted: everything was removed\n");
    return 130;
  }
}
