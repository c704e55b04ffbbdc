// weft-demo: a three-node virtual cluster on one machine. Each node is a
// network namespace on a shared underlay bridge; etcd is the control plane;
// weftd runs on every node and builds the VXLAN overlay; two pods per node
// are attached through the real weft plugin; an "internet" host sits outside
// the cluster. Prints nodes, pods and a connectivity matrix.
//
// Then the policy chapter: a second, two-node cluster whose weftd runs with
// --control-plane kubernetes --network-policy true against the stand-in API
// server (tests/integration/agent/fake_apiserver.py, not a real Kubernetes;
// built by the NetworkPolicy e2e harness, tests/e2e/netpol_harness.h), four
// pods in two namespaces, and the pod-to-pod matrix with no policy, after a
// default-deny ingress policy and after an allow policy, each with the time
// from posting the policy to the matrix showing it; then `weftctl policy`
// for the pod the allow policy selects.
//
// Everything is torn down at the end (also on Ctrl-C). With --keep both
// clusters' namespaces, routes and nftables tables are left in place.
//
// Usage: weft-demo [--keep]   (root; scripts/demo.sh builds and runs it)

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>

#include "e2e/cluster.h"
#include "e2e/netpol_harness.h"
#include "sys/http.h"

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

// The step the demo is at, for the failure report (set only by Step()).
std::string g_step = "start-up";
void Step(std::string what) { g_step = std::move(what); }

// The last `lines` lines of a file under a header naming it ("(empty)" or
// "(missing)" when there is nothing to show).
std::string Tail(const std::string& path, size_t lines = 25) {
  std::ifstream f(path);
  if (!f) return "  ---- " + path + ": (missing) ----\n";
  std::vector<std::string> all;
  for (std::string l; std::getline(f, l);) all.push_back(l);
  std::string out = "  ---- last " + std::to_string(std::min(lines, all.size())) + " lines of " + path + " ----\n";
  if (all.empty()) return "  ---- " + path + ": (empty) ----\n";
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += "  | " + all[i] + "\n";
  return out;
}

// What a newcomer needs when the demo fails: the step, why, and the tail of
// the logs of the components involved (the state dir is removed at exit).
void Explain(const std::string& why, const std::vector<std::string>& logs) {
  std::printf("\n%s \033[1mfailed at: %s\033[0m\n  %s\n", kBad, g_step.c_str(), why.c_str());
  for (const auto& l : logs) std::printf("%s", Tail(l).c_str());
  std::fflush(stdout);
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

// The etcd chapter. Returns the number of failed checks once its cluster is
// gone. With --keep it calls `rest` (the rest of the demo, which ends the
// process) while its cluster is still up, and never returns.
int EtcdChapter(const std::string& root, bool keep, const std::function<int(int)>& rest) {
  auto t0 = Clock::now();
  Step("the underlay and etcd");
  Underlay ul;
  Etcd etcd(ul, root);
  etcd.Start();
  std::printf("control plane  etcd %s ... ", etcd.endpoint().c_str());
  std::fflush(stdout);
  if (!etcd.WaitHealthy()) {
    std::printf("%s\n", kBad);
    Explain("etcd did not answer " + etcd.endpoint() + "/health within 15 s", {root + "/etcd.log"});
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

  Step("weftd on node1..3: the overlay");
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
  if (!converged) {
    std::string why = "within 30 s, every node should have written its conflist and routed to its 2 peers:";
    std::vector<std::string> logs;
    for (auto& n : nodes) {
      size_t routes = n->AgentRoutes().size();
      bool conf = !n->PluginConf().empty();
      bool running = n->weftd && n->weftd->Running();
      why += "\n    " + n->name + ": " + (running ? "weftd running" : "weftd EXITED") + ", conflist " +
             (conf ? "written" : "MISSING") + ", " + std::to_string(routes) + " of 2 peer routes";
      if (!running || !conf || routes != nodes.size() - 1) logs.push_back(n->log());
    }
    logs.push_back(root + "/etcd.log");
    Explain(why, logs);
    return 1;
  }

  std::printf("\033[1mNodes\033[0m\n  %-6s %-12s %-15s %-19s %s\n", "NODE", "HOST IP", "POD CIDR", "VTEP MAC",
              "BACKEND");
  for (auto& n : nodes)
    std::printf("  %-6s %-12s %-15s %-19s %s\n", n->name.c_str(), n->ip().c_str(), PodCidr(*n).c_str(),
                VtepMac(*n).c_str(), "vxlan (weft.1, VNI 1, UDP 8472)");

  // Two pods per node; node1's "web" publishes hostPort 8080 -> 80.
  Step("pods through the weft CNI plugin");
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
  std::printf("  %-10s %-6s %s   hostPort 8080 -> 80\n", "node1-web", "node1",
              web_ip.empty() ? ("ADD exit " + std::to_string(web.exit_code) + ": " + web.out + web.err).c_str()
                             : web_ip.c_str());
  {
    std::string why;
    std::vector<std::string> logs;
    for (auto& p : pods)
      if (!p->add_error.empty()) {
        why += (why.empty() ? "" : "\n  ") + p->cid + ": " + p->add_error;
        logs.push_back(p->node.dir + "/plugin.log");
      }
    if (web_ip.empty()) {
      why += std::string(why.empty() ? "" : "\n  ") + "node1-web: ADD exit " + std::to_string(web.exit_code);
      logs.push_back(nodes[0]->dir + "/plugin.log");
    }
    std::sort(logs.begin(), logs.end());
    logs.erase(std::unique(logs.begin(), logs.end()), logs.end());
    if (!why.empty()) Explain(why, logs);
  }

  std::printf("\n\033[1mConnectivity\033[0m\n");
  Step("the connectivity checks");
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
  if (failed) {
    std::vector<std::string> logs;
    for (auto& n : nodes) logs.push_back(n->log());
    for (auto& n : nodes) logs.push_back(n->dir + "/plugin.log");
    logs.push_back(root + "/internet.log");
    logs.push_back(root + "/web.log");
    Explain(std::to_string(failed) + " connectivity check(s) failed (marked above)", logs);
  }
  if (keep) {
    std::printf(
        "\nLeft running (--keep). Explore with:\n"
        "  ip netns exec %s sh                   # a shell in pod node1-a\n"
        "  ip -n %s route                        # node1's routes: per-pod /32s and the overlay\n"
        "  ip -n %s neigh show dev weft.1        # ARP entries for the peer VTEPs\n"
        "  bridge -n %s fdb show dev weft.1      # FDB entries to the peers' host IPs\n"
        "  less %s/node1/weftd.log\n",
        n1a.ns.name().c_str(), nodes[0]->ns.name().c_str(), nodes[0]->ns.name().c_str(),
        nodes[0]->ns.name().c_str(), root.c_str());
    rest(failed);  // with --keep it ends the process: this cluster's destructors never run
  }
  std::printf("Tearing down (DEL for every pod, weftd, etcd, namespaces)...\n");
  web_server.Stop(SIGKILL);
  RunPlugin(BinaryPath("weft"), nodes[0]->ns, CniEnv("DEL", "node1-web", web_ns.path()), web_conf.dump());
  pods.clear();
  for (auto& n : nodes) n->StopWeftd();
  return failed;
}

// ---- The policy chapter ----

using ojson = nlohmann::ordered_json;

// A JSON value on one line in YAML's flow style ({a: 1, b: [x, y]}).
std::string Flow(const ojson& j) {
  if (j.is_object()) {
    std::string s = "{";
    for (auto it = j.begin(); it != j.end(); ++it) s += (s.size() > 1 ? ", " : "") + it.key() + ": " + Flow(*it);
    return s + "}";
  }
  if (j.is_array()) {
    std::string s = "[";
    for (const auto& v : j) s += (s.size() > 1 ? ", " : "") + Flow(v);
    return s + "]";
  }
  if (j.is_string()) return j.get<std::string>();
  return j.dump();
}

// An object as block YAML, nested values in flow style where the line stays
// short (at the top level only objects of scalars, e.g. metadata).
void Yaml(const ojson& obj, size_t indent, std::string& out) {
  std::string pad(indent, ' ');
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const ojson& v = *it;
    bool scalars = true;
    if (v.is_object())
      for (const auto& x : v) scalars = scalars && !x.is_structured();
    std::string line = pad + it.key() + ": " + Flow(v);
    if (!v.is_structured() || (line.size() <= 64 && (indent > 0 || scalars))) {
      out += line + "\n";
    } else if (v.is_object()) {
      out += pad + it.key() + ":\n";
      Yaml(v, indent + 2, out);
    } else {
      out += pad + it.key() + ":\n";
      for (const auto& item : v) {
        if (!item.is_object()) {
          out += pad + "- " + Flow(item) + "\n";
          continue;
        }
        std::string sub;
        Yaml(item, indent + 2, sub);
        out += pad + "- " + sub.substr(indent + 2);
      }
    }
  }
}

// The observed TCP/80 matrix, rows from, columns to; cells that differ from
// `before` (the previous step's matrix) are marked with *.
void PrintMatrix(const netpol::Reachability& m, const netpol::Reachability* before) {
  size_t w = 6;
  for (const auto& k : m.pods()) w = std::max(w, k.size() + 2);
  // `cols`: the text's width on screen (colour codes and ✔ take more bytes).
  auto pad = [&](const std::string& s, size_t cols) { return s + std::string(w > cols ? w - cols : 1, ' '); };
  std::string head = "    " + pad("from\\to", 7);
  for (const auto& to : m.pods()) head += to == m.pods().back() ? to : pad(to, to.size());
  std::printf("%s\n", head.c_str());
  for (const auto& from : m.pods()) {
    std::string row = "    " + pad(from, from.size());
    for (const auto& to : m.pods()) {
      bool ok = m.Get(from, to);
      bool changed = before && before->Get(from, to) != ok;
      std::string cell = std::string(ok ? kOk : kBad) + (changed ? "*" : "");
      row += to == m.pods().back() ? cell : pad(cell, changed ? 2 : 1);
    }
    std::printf("%s\n", row.c_str());
  }
}

// The policy chapter's cluster: two nodes and four pods in two namespaces.
const std::vector<std::string> kPolicyPods = {"shop/web", "shop/api", "shop/db", "ops/monitor"};

// Returns the number of failed checks once its cluster is gone. With --keep
// it ends the process instead (_exit, exit code 1 when `failed_before` or
// any of its own checks failed), leaving everything in place.
int PolicyChapter(const std::string& root, bool keep, int failed_before) {
  auto t0 = Clock::now();
  std::printf(
      "\n\033[1m== NetworkPolicy: a second, two-node cluster on a stand-in Kubernetes API server ==\033[0m\n"
      "\033[33mThe API server here is a stand-in for kube-apiserver, not a real Kubernetes:\033[0m\n"
      "tests/integration/agent/fake_apiserver.py (HTTPS, a bearer token, list + watch of Nodes,\n"
      "Namespaces, Pods and NetworkPolicies). weftd runs as on a real node:\n"
      "--control-plane kubernetes --network-policy true.\n\n");
  std::printf("cluster        API server https://192.0.2.254:6443, weftd on n1 and n2, %zu pods ... ",
              kPolicyPods.size());
  std::fflush(stdout);
  netpol::ClusterOptions opts;
  opts.pods = kPolicyPods;
  opts.underlay = "np-ul";  // beside the etcd chapter's underlay when --keep leaves it
  opts.dir = root + "/policy";
  opts.cancelled = [] { return g_interrupted != 0; };
  Step("the policy cluster: the stand-in API server, weftd on n1 and n2, the pods");
  netpol::NetpolCluster c(opts);
  CheckInterrupt();
  if (!c.error().empty()) {
    std::printf("%s\n", kBad);
    std::vector<std::string> logs;
    for (const char* n : {"n1", "n2"}) logs.push_back(opts.dir + "/" + n + "/weftd.log");
    logs.push_back(opts.dir + "/api/apiserver.log");
    Explain(c.error(), logs);
    return 1;
  }
  std::printf("%s up (%.1f s)\n\n", kOk, Since(t0));

  std::printf("\033[1mPods\033[0m (attached through the weft plugin; Pod objects posted with their IPs)\n");
  std::printf("  %-13s %-5s %-12s %s\n", "POD", "NODE", "IP", "LABELS");
  for (const auto& k : kPolicyPods) {
    auto& p = c.pod(k);
    std::printf("  %-13s %-5s %-12s pod=%s\n", k.c_str(), p.node->name.c_str(), p.ip().c_str(), p.name.c_str());
  }
  std::printf("  Namespaces shop and ops carry the labels ns=shop and ns=ops.\n");

  int failed = 0;
  std::optional<netpol::Reachability> before;
  // Posts `policy` (unless null), waits for the TCP/80 matrix to become
  // `want`, then shows the matrix of a confirming round (1 s timeout).
  auto step = [&](const std::string& title, const ojson& policy, const netpol::Reachability& want,
                  const std::string& note) {
    Step("policy step " + title);
    std::printf("\n\033[1m%s\033[0m\n", title.c_str());
    if (!policy.is_null()) {
      std::string yaml;
      Yaml(policy, 0, yaml);
      std::istringstream lines(yaml);
      for (std::string l; std::getline(lines, l);) std::printf("    \033[36m%s\033[0m\n", l.c_str());
    }
    if (!note.empty()) std::printf("  %s\n", note.c_str());
    // Matrix rounds back to back with a short timeout from the POST on, until
    // one shows `want`: its end is when the matrix had changed.
    const int kRoundTimeoutMs = 50;
    const double kDeadline = 5;
    auto posted = Clock::now();
    if (!policy.is_null()) c.ApplyPolicy(nlohmann::json::parse(policy.dump()));
    bool changed = false;
    while (!changed && Since(posted) < kDeadline) {
      CheckInterrupt();
      std::string notes;
      changed = c.ProbeMatrix({netpol::Tcp(80)}, &notes, kRoundTimeoutMs)[0] == want && notes.empty();
    }
    double secs = Since(posted);
    // The matrix shown: a confirming round with the normal 1 s timeout.
    std::string notes;
    auto obs = c.ProbeMatrix({netpol::Tcp(80)}, &notes)[0];
    CheckInterrupt();
    bool ok = changed && obs == want && notes.empty();
    if (!ok) ++failed;
    if (!policy.is_null()) {
      if (changed)
        std::printf("  posted -> new matrix in \033[1m%.2f s\033[0m (probe rounds back to back from the POST, %zu probes "
                    "each, %d ms timeout)\n",
                    secs, want.pods().size() * want.pods().size(), kRoundTimeoutMs);
      else
        std::printf("  posted -> matrix changed: %s not within %.0f s\n", kBad, kDeadline);
    }
    std::printf("  TCP/80, rows from, columns to%s:\n", before ? " (* = changed by this step)" : "");
    PrintMatrix(obs, before ? &*before : nullptr);
    if (!ok) {
      std::printf("  %s expected:\n%s%s", kBad, want.Table().c_str(), notes.c_str());
      Explain("the TCP/80 matrix is not the expected one", {c.node(0).log(), c.node(1).log()});
      std::printf("%s", c.Diagnostics().c_str());
    }
    before = obs;
  };

  netpol::Reachability all(kPolicyPods);
  step("1. No policy: every pod reaches every pod", nullptr, all, "");

  netpol::Reachability deny = all;
  deny.ExpectPeer({}, {"shop", ""}, false);
  step("2. Default-deny ingress in namespace shop",
       ojson::parse(R"({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                        "metadata": {"namespace": "shop", "name": "default-deny-ingress"},
                        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}})"),
       deny, "Every shop pod is isolated for ingress and no rule admits anything (a pod still reaches itself).");

  netpol::Reachability allow = deny;
  allow.Expect("shop/web", "shop/api", true);
  allow.Expect("ops/monitor", "shop/api", true);
  step("3. Allow into shop/api from pods labelled pod=web and from namespace ops",
       ojson::parse(R"({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                        "metadata": {"namespace": "shop", "name": "api-from-web-and-ops"},
                        "spec": {"podSelector": {"matchLabels": {"pod": "api"}},
                                 "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "web"}}},
                                                       {"namespaceSelector": {"matchLabels": {"ns": "ops"}}}]}]}})"),
       allow,
       "Policies add up: shop/api now admits shop/web (a podSelector: pods of shop) and every pod of ops;\n"
       "  shop/db -> shop/api stays denied, and so does everything else into shop.");

  // What weftd on shop/api's node enforces for it, as an operator sees it.
  auto& api = c.pod("shop/api");
  std::printf("\n\033[1m4. weftctl policy shop/api\033[0m (on %s: asks that node's weftd)\n", api.node->name.c_str());
  std::string out, err;
  int rc = Cmd({"ip", "netns", "exec", api.node->ns.name(), BinaryPath("weftctl"), "policy", "shop/api"}, &out, &err);
  std::istringstream lines(out + err);
  for (std::string l; std::getline(lines, l);) std::printf("    %s\n", l.c_str());
  if (rc != 0) {
    ++failed;
    std::printf("  %s weftctl policy exited %d\n", kBad, rc);
    Step("weftctl policy shop/api");
    Explain("weftctl policy exited " + std::to_string(rc), {api.node->log()});
  }

  std::printf("\n%s in %.1f s\n",
              failed ? "\033[31mSome policy checks failed\033[0m" : "\033[32mEvery matrix as expected\033[0m",
              Since(t0));
  if (keep) {
    const std::string n = api.node->ns.name();
    std::vector<std::pair<std::string, std::string>> hints = {
        {"ip netns exec " + n + " nft list table inet weft-netpol", api.node->name + "'s rules (shop/api lives there)"},
        {"ip netns exec " + c.pod("shop/web").pod->ns.name() + " ping -c1 -W1 " + api.ip(),
         "shop/web -> shop/api: allowed"},
        {"ip netns exec " + c.pod("shop/db").pod->ns.name() + " ping -c1 -W1 " + api.ip(),
         "shop/db -> shop/api: denied"},
        {"less " + c.root() + "/" + api.node->name + "/weftd.log", ""}};
    size_t w = 0;
    for (const auto& h : hints) w = std::max(w, h.first.size());
    std::printf(
        "\nPolicy cluster left in place (--keep) with both policies in the kernel. Its processes\n"
        "(weftd, the stand-in API server, the pods' servers) end with the demo; the nftables\n"
        "tables stay in force:\n");
    for (const auto& [cmd, what] : hints)
      std::printf("  %-*s%s%s\n", static_cast<int>(w), cmd.c_str(), what.empty() ? "" : "   # ", what.c_str());
    std::printf("Remove everything (both clusters) with: scripts/demo.sh --clean %s\n", Prefix().c_str());
    std::fflush(stdout);
    _exit((failed + failed_before) ? 1 : 0);  // skip every destructor: leave both clusters
  }
  std::printf("Tearing down (policies, pods, weftd, the API server, namespaces)...\n");
  return failed;
}

int Run(bool keep) {
  if (!sys::InitHttp().ok()) return 1;
  std::string root = TempDir("demo");
  // Declared first, destroyed last: the state dir goes after every process
  // and namespace, on success, failure or Ctrl-C (--keep skips destructors).
  struct RemoveOnExit {
    std::string dir;
    ~RemoveOnExit() { RemoveTree(dir); }
  } remove_root{root};
  std::printf("\033[1m== Weft demo: a three-node virtual cluster on one machine ==\033[0m\n");
  std::printf("state and logs: %s\n\n", root.c_str());

  // The policy chapter. With --keep it runs inside the etcd chapter, whose
  // cluster then stays up too, and ends the process (_exit: no destructor
  // runs, both clusters are left); without, the etcd chapter's cluster is
  // gone before it starts.
  auto rest = [&](int failed) { return failed + PolicyChapter(root, keep, failed); };
  return rest(EtcdChapter(root, keep, rest)) ? 1 : 0;
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
  } catch (const std::exception& e) {
    // A fixture that could not build its part (a netns, a link, a server):
    // everything built so far is removed on the way here.
    std::printf("\n\033[31m✗\033[0m \033[1mfailed at: %s\033[0m\n  %s\n", weft::testing::g_step.c_str(), e.what());
    return 1;
  }
}
