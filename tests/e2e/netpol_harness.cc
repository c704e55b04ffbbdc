#include "e2e/netpol_harness.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "sys/http.h"

namespace weft::testing::netpol {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// The pod whose named ports are swapped (serve-80-tcp is its port 81 and
// serve-81-tcp its port 80), so that named ports must be resolved per pod.
constexpr const char* kSwappedPod = "z/b";

long Ms(Clock::duration d) { return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()); }

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

}  // namespace

std::string AgentPath() { return NETPOL_AGENT; }

std::string PortSpec::Name() const {
  const char* p = proto == L4::kTcp ? "TCP" : proto == L4::kUdp ? "UDP" : "SCTP";
  return std::string(p) + "/" + std::to_string(port);
}

std::string PortSpec::Target(const std::string& ip) const {
  const char* p = proto == L4::kTcp ? "tcp" : proto == L4::kUdp ? "udp" : "sctp";
  return std::string(p) + ":" + ip + ":" + std::to_string(port);
}

bool Peer::Matches(const std::string& key) const {
  size_t slash = key.find('/');
  return (ns.empty() || key.substr(0, slash) == ns) && (pod.empty() || key.substr(slash + 1) == pod);
}

Reachability::Reachability(std::vector<std::string> pods, bool allowed)
    : pods_(std::move(pods)), cells_(pods_.size() * pods_.size(), allowed ? 1 : 0) {
  for (size_t i = 0; i < pods_.size(); ++i) cells_[i * pods_.size() + i] = 1;
}

size_t Reachability::Index(const std::string& pod) const {
  auto it = std::find(pods_.begin(), pods_.end(), pod);
  if (it == pods_.end()) throw std::out_of_range("no pod " + pod + " in the matrix");
  return static_cast<size_t>(it - pods_.begin());
}

void Reachability::Set(const std::string& from, const std::string& to, bool allowed) {
  cells_[Index(from) * pods_.size() + Index(to)] = allowed ? 1 : 0;
}

void Reachability::Expect(const std::string& from, const std::string& to, bool allowed) {
  if (from != to) Set(from, to, allowed);
}

bool Reachability::Get(const std::string& from, const std::string& to) const {
  return cells_[Index(from) * pods_.size() + Index(to)] != 0;
}

void Reachability::ExpectAllIngress(const std::string& to, bool allowed) {
  for (const auto& from : pods_) Expect(from, to, allowed);
}

void Reachability::ExpectAllEgress(const std::string& from, bool allowed) {
  for (const auto& to : pods_) Expect(from, to, allowed);
}

void Reachability::ExpectPeer(const Peer& from, const Peer& to, bool allowed) {
  for (const auto& f : pods_)
    for (const auto& t : pods_)
      if (from.Matches(f) && to.Matches(t)) Expect(f, t, allowed);
}

std::string Reachability::Table(const Reachability* expected) const {
  std::ostringstream o;
  size_t w = 4;
  for (const auto& p : pods_) w = std::max(w, p.size() + 2);
  auto pad = [&](const std::string& s) { return s + std::string(w > s.size() ? w - s.size() : 1, ' '); };
  o << pad("");
  for (const auto& to : pods_) o << pad(to);
  o << "\n";
  for (const auto& from : pods_) {
    o << pad(from);
    for (const auto& to : pods_) {
      bool v = Get(from, to);
      std::string cell = v ? "." : "X";
      if (expected && expected->Get(from, to) != v) cell += "*";
      o << pad(cell);
    }
    o << "\n";
  }
  return o.str();
}

NetpolCluster::NetpolCluster(ClusterOptions options) : options_(std::move(options)) {
  try {
    error_ = Setup();
  } catch (const std::exception& e) {
    error_ = std::string("set-up threw: ") + e.what();
  }
}

NetpolCluster::~NetpolCluster() {
  extra_.clear();
  for (auto& [k, p] : pods_) p->agent.reset();
  pods_.clear();
  for (auto& n : nodes_) n->StopWeftd(SIGKILL);
  nodes_.clear();
  api_.reset();
  ul_.reset();
  if (!root_.empty()) RemoveTree(root_);
}

json NetpolCluster::DefaultPorts() {
  return json::array({{{"name", "serve-80-tcp"}, {"containerPort", 80}, {"protocol", "TCP"}},
                      {{"name", "serve-81-tcp"}, {"containerPort", 81}, {"protocol", "TCP"}},
                      {{"name", "serve-80-udp"}, {"containerPort", 80}, {"protocol", "UDP"}},
                      {{"name", "serve-80-sctp"}, {"containerPort", 80}, {"protocol", "SCTP"}}});
}

json NetpolCluster::NamespaceObject(const std::string& ns) {
  return {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}, {"labels", {{"ns", ns}}}}}};
}

json NetpolCluster::PodObject(const NetpolPod& p, const json& labels, const json& ports) {
  // One container per port, as upstream's netpol pods have.
  json containers = json::array();
  for (const auto& port : ports) {
    containers.push_back({{"name", "cont-" + port.value("name", std::to_string(port.value("containerPort", 0)))},
                          {"image", "weft.test/netpol-agent"},
                          {"ports", json::array({port})}});
  }
  json status = {{"phase", "Running"}, {"hostIP", p.node->ip()}};
  if (!p.ip().empty()) {
    status["podIP"] = p.ip();
    status["podIPs"] = json::array({{{"ip", p.ip()}}});
  }
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", p.name}, {"namespace", p.ns}, {"labels", labels}}},
          {"spec", {{"nodeName", p.node->name}, {"containers", containers}}},
          {"status", status}};
}

namespace {
json CanonicalPorts(const std::string& key) {
  json ports = NetpolCluster::DefaultPorts();
  if (key == kSwappedPod) {
    ports[0]["containerPort"] = 81;
    ports[1]["containerPort"] = 80;
  }
  return ports;
}
}  // namespace

NetpolPod& NetpolCluster::pod(const std::string& key) {
  auto it = pods_.find(key);
  if (it != pods_.end()) return *it->second;
  for (auto& p : extra_)
    if (p->key() == key) return *p;
  throw std::out_of_range("no pod " + key);
}

void NetpolCluster::StartWeftd(int i, const std::vector<std::string>& extra_flags) {
  WeftNode& n = *nodes_.at(i);
  const std::string kubeconfig = static_cast<size_t>(i) < kubeconfigs_.size() ? kubeconfigs_[i] : api_->kubeconfig();
  std::vector<std::string> flags = {"--control-plane", "kubernetes", "--kubeconfig", kubeconfig, "--cluster-cidr",
                                    "10.245.0.0/16", "--backend", "vxlan", "--network-policy", "true"};
  flags.insert(flags.end(), options_.weftd_flags.begin(), options_.weftd_flags.end());
  flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
  n.StartWeftd(flags);
}

std::string NetpolCluster::Setup() {
  root_ = options_.dir.empty() ? TempDir("netpol") : options_.dir;
  Cmd({"mkdir", "-p", root_});
  ul_ = std::make_unique<Underlay>(options_.underlay);
  api_ = std::make_unique<FakeApiServer>(*ul_, root_);
  // ClusterNetworkPolicy's CRD, as deploy/crd installs it on a real cluster.
  api_->InstallCrd("clusternetworkpolicies");
  std::vector<std::string> namespaces;
  for (const auto& key : options_.pods) {
    std::string ns = key.substr(0, key.find('/'));
    if (std::find(namespaces.begin(), namespaces.end(), ns) == namespaces.end()) namespaces.push_back(ns);
  }
  for (const auto& ns : namespaces) api_->Apply(NamespaceObject(ns));
  for (int i = 0; i < 2; ++i) {
    std::string name = "n" + std::to_string(i + 1);
    std::string cidr = "10.245." + std::to_string(i + 1) + ".0/24";
    std::string ip = "192.0.2." + std::to_string(11 + i);
    api_->Apply({{"apiVersion", "v1"},
                 {"kind", "Node"},
                 {"metadata", {{"name", name}}},
                 {"spec", {{"podCIDR", cidr}, {"podCIDRs", {cidr}}}},
                 {"status", {{"addresses", {{{"type", "InternalIP"}, {"address", ip}}}}}}});
    nodes_.push_back(std::make_unique<WeftNode>(*ul_, name, 11 + i, root_));
    if (options_.pod_bound_tokens) {
      if (i == 0) api_->Apply({{"kind", "ServiceAccount"}, {"metadata", {{"name", "weftd"}, {"namespace", "kube-system"}}}});
      api_->Apply({{"kind", "Pod"},
                   {"metadata", {{"name", "weftd-" + name}, {"namespace", "kube-system"}}},
                   {"spec", {{"nodeName", name}, {"hostNetwork", true}, {"serviceAccountName", "weftd"},
                             {"containers", {{{"name", "weftd"}, {"image", "weft/weftd:0.1.0"}}}}}}});
      kubeconfigs_.push_back(
          api_->KubeconfigWithToken(name, api_->CreateToken("kube-system", "weftd", "weftd-" + name)));
    }
    StartWeftd(i);
  }
  for (auto& n : nodes_) {
    if (!WaitFor([&] { return Cancelled() || (!n->PluginConf().empty() && n->AgentRoutes().size() == 1); }, 20000,
                 100))
      return "weftd on " + n->name + " did not write its conflist and route to the other node";
    if (Cancelled()) return "interrupted";
  }
  int i = 0;
  for (const auto& key : options_.pods) {
    if (Cancelled()) return "interrupted";
    auto p = std::make_unique<NetpolPod>();
    p->ns = key.substr(0, key.find('/'));
    p->name = key.substr(key.find('/') + 1);
    p->node = nodes_[i++ % 2].get();
    p->pod = std::make_unique<Pod>(*p->node, p->ns + "-" + p->name,
                                   "K8S_POD_NAMESPACE=" + p->ns + ";K8S_POD_NAME=" + p->name);
    if (!p->pod->add_error.empty()) return "pod " + p->key() + ": " + p->pod->add_error;
    p->agent = std::make_unique<Child>(p->pod->ns.name(),
                                       std::vector<std::string>{AgentPath(), "serve", "--name", p->key()},
                                       root_ + "/agent-" + p->ns + "-" + p->name + ".log");
    keys_.push_back(p->key());
    pods_[p->key()] = std::move(p);
  }
  for (const auto& k : keys_) {
    NetpolPod& p = *pods_[k];
    if (!WaitFor([&] { return Cancelled() || ProbeFrom(p.pod->ns, {"tcp:127.0.0.1:80"}, 200)[0].ok; }, 5000, 50))
      return "the agent of " + k + " does not serve; see " + root_;
    if (Cancelled()) return "interrupted";
    PostPod(p);
  }
  sctp_ = ProbeFrom(pods_[keys_[0]]->pod->ns, {"sctp:127.0.0.1:80"}, 500)[0].ok;
  return "";
}

void NetpolCluster::PostPod(NetpolPod& p, json labels, json ports) {
  if (labels.is_null()) labels = {{"pod", p.name}};
  if (ports.is_null()) ports = CanonicalPorts(p.key());
  p.object = PodObject(p, labels, ports);
  api_->Apply(p.object);
}

NetpolPod& NetpolCluster::AddPod(const std::string& ns, const std::string& name, int node, json runtime_config,
                                 bool post) {
  auto p = std::make_unique<NetpolPod>();
  p->ns = ns;
  p->name = name;
  p->node = nodes_.at(node).get();
  p->pod = std::make_unique<Pod>(*p->node, ns + "-" + name, "K8S_POD_NAMESPACE=" + ns + ";K8S_POD_NAME=" + name,
                                 std::move(runtime_config));
  if (p->pod->add_error.empty()) {
    p->agent = std::make_unique<Child>(p->pod->ns.name(), std::vector<std::string>{AgentPath(), "serve", "--name", p->key()},
                                       root_ + "/agent-" + ns + "-" + name + ".log");
    WaitFor([&] { return ProbeFrom(p->pod->ns, {"tcp:127.0.0.1:80"}, 200)[0].ok; }, 5000, 50);
    if (post) PostPod(*p);
  }
  extra_.push_back(std::move(p));
  return *extra_.back();
}

void NetpolCluster::RemoveExtraPods() {
  for (auto& p : extra_) {
    if (!p->object.is_null()) api_->Delete("Pod", p->ns, p->name);
    p->agent.reset();
  }
  extra_.clear();
}

json NetpolCluster::ApplyPolicy(const json& policy) {
  json p = policy;
  if (p.value("kind", "") == "ClusterNetworkPolicy") return api_->Apply(p);  // DeletePolicies deletes them all
  if (!p.contains("apiVersion")) p["apiVersion"] = "networking.k8s.io/v1";
  if (!p.contains("kind")) p["kind"] = "NetworkPolicy";
  std::pair<std::string, std::string> id{p["metadata"]["namespace"], p["metadata"]["name"]};
  if (std::find(policies_.begin(), policies_.end(), id) == policies_.end()) policies_.push_back(id);
  return api_->Apply(p);
}

void NetpolCluster::DeletePolicy(const std::string& ns, const std::string& name) {
  api_->Delete("NetworkPolicy", ns, name);
  policies_.erase(std::remove(policies_.begin(), policies_.end(), std::make_pair(ns, name)), policies_.end());
}

void NetpolCluster::DeletePolicies() {
  for (const auto& [ns, name] : policies_) api_->Delete("NetworkPolicy", ns, name);
  policies_.clear();
  // And anything a case applied some other way.
  std::string out;
  if (api_->Request("GET", "/apis/networking.k8s.io/v1/networkpolicies", nullptr, &out) == 200) {
    try {
      for (const auto& item : json::parse(out).value("items", json::array()))
        api_->Delete("NetworkPolicy", item["metadata"]["namespace"], item["metadata"]["name"]);
    } catch (...) {
    }
  }
  if (api_->Request("GET", FakeApiServer::PathFor("ClusterNetworkPolicy", ""), nullptr, &out) == 200) {
    try {
      for (const auto& item : json::parse(out).value("items", json::array()))
        api_->Delete("ClusterNetworkPolicy", "", item["metadata"]["name"]);
    } catch (...) {
    }
  }
}

void NetpolCluster::LabelNamespace(const std::string& ns, const json& labels) {
  json obj = NamespaceObject(ns);
  obj["metadata"]["labels"] = labels;
  relabelled_namespaces_.push_back(ns);
  api_->Apply(obj);
}

void NetpolCluster::RestoreObjects() {
  for (const auto& ns : relabelled_namespaces_) api_->Apply(NamespaceObject(ns));
  relabelled_namespaces_.clear();
  for (const auto& k : keys_) {
    NetpolPod& p = *pods_[k];
    json canonical = PodObject(p, {{"pod", p.name}}, CanonicalPorts(k));
    if (p.object != canonical) PostPod(p);
  }
}

std::vector<ProbeResult> NetpolCluster::ProbeFrom(const TestNetns& from, const std::vector<std::string>& targets,
                                                  int timeout_ms, const std::string& source, int resend_ms) {
  std::vector<std::string> argv = {"ip", "netns", "exec", from.name(), AgentPath(), "probe", "--timeout-ms",
                                   std::to_string(timeout_ms)};
  if (!source.empty()) argv.insert(argv.end(), {"--source", source});
  if (resend_ms > 0) argv.insert(argv.end(), {"--resend-ms", std::to_string(resend_ms)});
  argv.insert(argv.end(), targets.begin(), targets.end());
  std::string out, err;
  int rc = Cmd(argv, &out, &err);
  std::vector<ProbeResult> res(targets.size());
  auto lines = SplitLines(out);
  for (size_t i = 0; i < targets.size(); ++i) {
    if (rc != 0 || i >= lines.size()) {
      res[i].detail = "probe exit " + std::to_string(rc) + ": " + err;
      continue;
    }
    std::istringstream in(lines[i]);
    std::string t, verdict, detail;
    in >> t >> verdict >> detail;
    res[i].ok = t == targets[i] && verdict == "ok";
    res[i].detail = detail;
  }
  return res;
}

std::vector<Reachability> NetpolCluster::ProbeMatrix(const std::vector<PortSpec>& ports, std::string* notes,
                                                     int timeout_ms) {
  std::vector<Reachability> obs(ports.size(), Reachability(keys_, false));
  std::vector<std::string> targets;
  for (const auto& port : ports)
    for (const auto& to : keys_) targets.push_back(port.Target(pods_[to]->ip()));
  std::vector<std::vector<ProbeResult>> results(keys_.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < keys_.size(); ++i)
    threads.emplace_back([&, i] { results[i] = ProbeFrom(pods_[keys_[i]]->pod->ns, targets, timeout_ms); });
  for (auto& t : threads) t.join();
  for (size_t f = 0; f < keys_.size(); ++f) {
    for (size_t pi = 0; pi < ports.size(); ++pi) {
      for (size_t ti = 0; ti < keys_.size(); ++ti) {
        const ProbeResult& r = results[f][pi * keys_.size() + ti];
        bool ok = r.ok;
        if (ok && r.detail != keys_[ti]) {
          ok = false;  // someone else answered: never count that as reachable
          if (notes) *notes += keys_[f] + " -> " + keys_[ti] + " " + ports[pi].Name() + " answered by " + r.detail + "\n";
        }
        obs[pi].Set(keys_[f], keys_[ti], ok);
      }
    }
  }
  return obs;
}

std::string NetpolCluster::CheckMatrix(const std::vector<Expectation>& want, int deadline_ms,
                                       std::chrono::milliseconds* took, int probe_timeout_ms) {
  std::vector<const Expectation*> active;
  std::string skipped;
  for (const auto& e : want) {
    if (e.port.proto == L4::kSctp && !sctp_) skipped += " " + e.port.Name();
    else active.push_back(&e);
  }
  std::vector<PortSpec> ports;
  for (const auto* e : active) ports.push_back(e->port);
  // A denied cell is a probe that timed out. The polling rounds wait
  // kPollProbeMs for it; a round that matches with that is repeated with
  // the full `probe_timeout_ms`, which alone decides a match when any cell
  // is expected denied (an allowed cell is a reply: proven at any timeout).
  bool any_denied = false;
  for (const auto* e : active)
    for (const auto& from : keys_)
      for (const auto& to : keys_) any_denied = any_denied || !e->reach.Get(from, to);
  const int poll_timeout_ms = std::min(kPollProbeMs, probe_timeout_ms);
  auto start = Clock::now();
  int rounds = 0, short_misses = 0;
  std::vector<Reachability> obs;
  std::string notes;
  auto probe = [&](int timeout_ms) {
    notes.clear();
    obs = ProbeMatrix(ports, &notes, timeout_ms);
    ++rounds;
    bool match = notes.empty();
    for (size_t i = 0; i < active.size(); ++i) match = match && obs[i] == active[i]->reach;
    return match;
  };
  for (;;) {
    if (Cancelled()) return "interrupted";
    auto round = Clock::now();
    // A slow machine may need more than the short timeout for an allowed
    // cell: every fourth round in a row that does not match is a full one.
    int timeout_ms = short_misses >= 3 ? probe_timeout_ms : poll_timeout_ms;
    bool match = probe(timeout_ms);
    if (match && timeout_ms < probe_timeout_ms && any_denied) match = probe(probe_timeout_ms);
    bool last = Clock::now() - start >= std::chrono::milliseconds(deadline_ms);
    if (!match && last && timeout_ms < probe_timeout_ms) match = probe(probe_timeout_ms);  // never fail on a short round
    if (match) {
      last_probed_.clear();
      for (size_t i = 0; i < active.size(); ++i) last_probed_.push_back({active[i]->port, obs[i]});
      if (took) *took = std::chrono::duration_cast<std::chrono::milliseconds>(round - start);
      return "";
    }
    if (last) {
      std::ostringstream o;
      o << "reachability did not match within " << deadline_ms << " ms (" << rounds << " rounds, the last with "
        << probe_timeout_ms << " ms probes)\n";
      for (size_t i = 0; i < active.size(); ++i) {
        if (obs[i] == active[i]->reach) {
          o << "== " << active[i]->port.Name() << ": matches\n";
          continue;
        }
        o << "== " << active[i]->port.Name() << ": MISMATCH (rows from, columns to; . allowed, X denied)\n"
          << "expected:\n"
          << active[i]->reach.Table() << "observed (* = differs from expected):\n"
          << obs[i].Table(&active[i]->reach);
      }
      if (!notes.empty()) o << notes;
      if (!skipped.empty()) o << "not probed (no SCTP in this kernel):" << skipped << "\n";
      return o.str();
    }
    short_misses = timeout_ms < probe_timeout_ms ? short_misses + 1 : 0;
    std::this_thread::sleep_until(round + std::chrono::milliseconds(kPollGapMs));
  }
}

std::string NetpolCluster::CheckProbes(const std::vector<Probe>& want, int deadline_ms) {
  // Polled as CheckMatrix polls (short probes, a match confirmed with full
  // ones); with no deadline, one round of full probes.
  bool any_denied = false;
  for (const auto& w : want) any_denied = any_denied || !w.allowed;
  auto start = Clock::now();
  int rounds = 0, short_misses = 0;
  std::vector<ProbeResult> got;
  auto probe = [&](int timeout_ms) {
    got.assign(want.size(), ProbeResult{});
    // Group by (netns, source) so each prober runs once per round.
    std::map<std::pair<const TestNetns*, std::string>, std::vector<size_t>> groups;
    for (size_t i = 0; i < want.size(); ++i) groups[{want[i].from, want[i].source}].push_back(i);
    std::vector<std::thread> threads;
    for (auto& [g, idx] : groups) {
      threads.emplace_back([&, g = g, idx = idx] {
        std::vector<std::string> targets;
        for (size_t i : idx) targets.push_back(want[i].target);
        auto r = ProbeFrom(*g.first, targets, timeout_ms, g.second);
        for (size_t k = 0; k < idx.size(); ++k) got[idx[k]] = r[k];
      });
    }
    for (auto& t : threads) t.join();
    ++rounds;
    bool match = true;
    for (size_t i = 0; i < want.size(); ++i) {
      bool ok = got[i].ok && (want[i].responder.empty() || got[i].detail == want[i].responder);
      match = match && ok == want[i].allowed;
    }
    return match;
  };
  for (;;) {
    auto round = Clock::now();
    int timeout_ms = deadline_ms <= 0 || short_misses >= 3 ? kProbeTimeoutMs : kPollProbeMs;
    bool match = probe(timeout_ms);
    if (match && timeout_ms < kProbeTimeoutMs && any_denied) match = probe(kProbeTimeoutMs);
    bool last = Clock::now() - start >= std::chrono::milliseconds(deadline_ms);
    if (!match && last && timeout_ms < kProbeTimeoutMs) match = probe(kProbeTimeoutMs);  // never fail on a short round
    if (match) return "";
    if (last) {
      std::ostringstream o;
      o << "probes did not match within " << deadline_ms << " ms (" << rounds << " rounds, the last with "
        << kProbeTimeoutMs << " ms probes):\n";
      for (size_t i = 0; i < want.size(); ++i) {
        bool ok = got[i].ok && (want[i].responder.empty() || got[i].detail == want[i].responder);
        o << "  " << want[i].from_label << (want[i].source.empty() ? "" : " (from " + want[i].source + ")") << " -> "
          << want[i].target << ": expected " << (want[i].allowed ? "allowed" : "denied") << ", observed "
          << (got[i].ok ? "ok " : "fail ") << got[i].detail << (ok == want[i].allowed ? "" : "   <-- MISMATCH") << "\n";
      }
      return o.str();
    }
    short_misses = timeout_ms < kProbeTimeoutMs ? short_misses + 1 : 0;
    std::this_thread::sleep_until(round + std::chrono::milliseconds(kPollGapMs));
  }
}

long NetpolCluster::WaitProbe(const TestNetns& from, const std::string& target, bool want, int deadline_ms) {
  auto start = Clock::now();
  if (want && target.rfind("udp:", 0) == 0) {
    // A datagram every 2 ms until the first echo, which ends the probe: the
    // time to a path opening, to a few ms.
    bool ok = ProbeFrom(from, {target}, deadline_ms, "", 2)[0].ok;
    return ok ? Ms(Clock::now() - start) : -1;
  }
  while (Clock::now() - start < std::chrono::milliseconds(deadline_ms)) {
    bool ok = ProbeFrom(from, {target}, 20)[0].ok;
    if (ok == want) {
      long t = Ms(Clock::now() - start);
      // A failure within 20 ms could be a slow machine: confirm with a full timeout.
      if (want || !ProbeFrom(from, {target}, kProbeTimeoutMs)[0].ok) return t;
    }
  }
  return -1;
}

bool NetpolCluster::Healthy() {
  for (auto& n : nodes_)
    if (!n->weftd || !n->weftd->Running()) return false;
  return true;
}

std::string NetpolCluster::Diagnostics() {
  std::ostringstream o;
  for (auto& n : nodes_) {
    o << n->LogTail(15000);
    std::string out;
    n->ns.Exec({"nft", "list", "table", "inet", "weft-netpol"}, &out);
    o << "---- " << n->name << " nft list table inet weft-netpol ----\n" << out << "\n";
  }
  for (const auto& k : keys_) o << k << " = " << pods_[k]->ip() << " on " << pods_[k]->node->name << "\n";
  for (const auto& p : extra_) o << p->key() << " = " << p->ip() << " on " << p->node->name << "\n";
  if (api_) {
    o << "---- API server log (tail) ----\n";
    auto lines = SplitLines(api_->Log());
    for (size_t i = lines.size() > 80 ? lines.size() - 80 : 0; i < lines.size(); ++i) o << lines[i] << "\n";
  }
  return o.str();
}

}  // namespace weft::testing::netpol

namespace weft::testing::netpol {
namespace {

std::string ExplainPort(const PortSpec& p) {
  const char* proto = p.proto == L4::kTcp ? "tcp" : p.proto == L4::kUdp ? "udp" : "sctp";
  return std::to_string(p.port) + "/" + proto;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '/') out += "%2F";
    else if (c == ':') out += "%3A";
    else out += c;
  }
  return out;
}

}  // namespace

int NetpolCluster::WeftctlExplain(int i, const std::vector<std::string>& args, std::string* out, std::string* err) {
  std::vector<std::string> argv = {"ip", "netns", "exec", node(i).ns.name(), BinaryPath("weftctl"), "policy", "explain"};
  argv.insert(argv.end(), args.begin(), args.end());
  return Cmd(argv, out, err);
}

std::string NetpolCluster::CheckExplain() {
  if (Status st = sys::InitHttp(); !st.ok()) return "explain: " + st.ToString() + "\n";
  std::vector<int> nodes;
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i)
    if (nodes_[i]->weftd) nodes.push_back(i);
  if (nodes.empty()) return "";  // nobody to ask (a case stopped every weftd)
  struct Ask {
    size_t port;
    std::string from, to;
    bool probed;
    int node;
    bool allowed = false;
    std::string answer;  // reason, or the error
  };
  std::vector<Ask> asks;
  size_t n = 0;
  for (size_t p = 0; p < last_probed_.size(); ++p)
    for (const auto& from : keys_)
      for (const auto& to : keys_)
        asks.push_back({p, from, to, last_probed_[p].reach.Get(from, to), nodes[n++ % nodes.size()]});
  auto run = [&](std::vector<Ask*> batch) {
    for (int node_i : nodes) {
      Status st = InNetns(node(node_i).ns, [&]() -> Status {
        sys::HttpClient http;
        for (Ask* a : batch) {
          if (a->node != node_i) continue;
          sys::HttpRequest req;
          req.url = "http://127.0.0.1:9641/netpol/explain?src=" + Escape(pod(a->from).ip()) +
                    "&dst=" + Escape(pod(a->to).ip()) + "&port=" + Escape(ExplainPort(last_probed_[a->port].port));
          req.timeout = std::chrono::seconds(5);
          // A connection per request: on a kept-alive one, weftd's status
          // server (cpp-httplib, Nagle on) holds each body until the
          // client's delayed ACK of the headers, ~30-40 ms a request.
          req.headers = {"Connection: close"};
          auto r = http.Do(req);
          if (!r.ok()) {
            a->answer = "GET failed: " + r.status().ToString();
            continue;
          }
          auto j = nlohmann::json::parse(r->body, nullptr, false);
          if (r->status != 200 || !j.is_object()) {
            a->answer = "HTTP " + std::to_string(r->status) + ": " + r->body;
            continue;
          }
          a->allowed = j.value("allowed", false);
          a->answer = j.value("reason", "");
        }
        return Status::Ok();
      });
      if (!st.ok()) return "explain: cannot enter " + node(node_i).name + ": " + st.ToString() + "\n";
    }
    return std::string();
  };
  auto disagreeing = [&] {
    std::vector<Ask*> out;
    for (auto& a : asks)
      if (a.allowed != a.probed || a.answer.rfind("GET failed", 0) == 0 || a.answer.rfind("HTTP ", 0) == 0)
        out.push_back(&a);
    return out;
  };
  std::vector<Ask*> all;
  for (auto& a : asks) all.push_back(&a);
  if (auto e = run(all); !e.empty()) return e;
  auto bad = disagreeing();
  if (!bad.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (auto e = run(bad); !e.empty()) return e;
    bad = disagreeing();
  }
  std::ostringstream o;
  for (const Ask* a : bad)
    o << "explain disagrees with the datapath: " << a->from << " -> " << a->to << " "
      << last_probed_[a->port].port.Name() << ": probed " << (a->probed ? "allowed" : "denied") << ", weftd on "
      << node(a->node).name << " says " << (a->allowed ? "allowed" : "denied") << " (" << a->answer << ")\n";
  size_t weftctl_runs = 0;
  // The command itself, by pod name: one allowed and one denied cell per port.
  for (size_t p = 0; p < last_probed_.size(); ++p) {
    for (bool want : {true, false}) {
      const Ask* pick = nullptr;
      for (const auto& a : asks)
        if (a.port == p && a.from != a.to && a.probed == want && pod(a.from).object.is_object() &&
            pod(a.to).object.is_object()) {
          pick = &a;
          if (want == false || (a.from[0] != a.to[0])) break;  // prefer a cross-namespace allowed cell
        }
      if (!pick) continue;
      std::string out, err;
      ++weftctl_runs;
      int code = WeftctlExplain(pick->node, {pick->from, pick->to, ExplainPort(last_probed_[p].port)}, &out, &err);
      if (code != (want ? 0 : 1))
        o << "weftctl policy explain " << pick->from << " " << pick->to << " " << ExplainPort(last_probed_[p].port)
          << " exited " << code << ", want " << (want ? 0 : 1) << ":\n" << out << err;
    }
  }
  std::cerr << "[netpol] explain: " << asks.size() - bad.size() << " of " << asks.size()
            << " cells agree with the probed matrix; weftctl policy explain run " << weftctl_runs << " times\n";
  return o.str();
}

}  // namespace weft::testing::netpol
