#include "bench/control.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "bench/ns.h"
#include "bench/stats.h"
#include "bench/floor.h"
#include "sys/exec.h"

namespace weft::bench {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kCniVersion[] = "1.0.0";
constexpr char kNetName[] = "wbnet";
constexpr int kProbePort = 31999;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string ReplaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

// The CNI error object's msg (and details), or the raw output.
std::string PluginError(const sys::ExecResult& r) {
  std::string msg;
  try {
    json j = json::parse(r.out);
    msg = j.value("msg", "");
    if (j.contains("details") && j["details"].is_string() && !j["details"].get<std::string>().empty())
      msg += " (" + j["details"].get<std::string>() + ")";
    if (j.contains("code")) msg = "code " + j["code"].dump() + ": " + msg;
  } catch (...) {
  }
  if (msg.empty()) msg = r.out.substr(0, 300);
  if (msg.empty()) msg = r.err.substr(0, 300);
  if (r.timed_out) msg = "timed out; " + msg;
  return msg;
}

}  // namespace

std::vector<NetConfig> SuiteConfigs(const std::string& tmp) {
  (void)tmp;
  const json host_local = {{"type", "host-local"}, {"ranges", {{{{"subnet", "10.244.0.0/16"}}}}}, {"dataDir", "@DATA@"}};
  const json weft = {{"type", "weft"},       {"mode", "routed"},        {"ranges", {"10.244.0.0/16"}},
                     {"masquerade", true},   {"masqueradeBackend", "nftables"},
                     {"clusterCIDRs", {"10.244.0.0/16"}}, {"dataDir", "@DATA@"}};
  const json ref_bridge = {{"type", "bridge"}, {"bridge", "cni0"}, {"isGateway", true}, {"ipMasq", true},
                           {"ipam", host_local}};
  std::vector<NetConfig> v;
  v.push_back({"weft-routed", "weft routed", {weft}, true, true, false, true});
  // Datapath only: weft routed without the masquerade table, so with its
  // source guard removed too ("-noguard") the node holds no firewall table
  // at all, as ref ptp's does: the two topologies alone, like with like.
  json wn = weft;
  wn["masquerade"] = false;
  wn.erase("masqueradeBackend");
  NetConfig nomasq{"weft-routed-nomasq", "weft routed, masq off", {wn}, true, false, false, true};
  nomasq.control = false;
  v.push_back(nomasq);
  json wb = weft;
  wb["mode"] = "bridge";
  v.push_back({"weft-bridge", "weft bridge", {wb}, true, false, false, true});
  json wh = weft;
  wh["capabilities"] = {{"portMappings", true}};
  v.push_back({"weft-hostport", "weft routed + hostPort", {wh}, true, false, true, false});
  v.push_back({"ref-bridge", "ref bridge+host-local+ipMasq", {ref_bridge}, false, true, false, true});
  json ptp = {{"type", "ptp"}, {"ipMasq", false}, {"ipam", host_local}};
  // Measured on the datapath too: the reference with weft routed's topology
  // (a veth per pod, host routes, the node netns forwarding between them).
  v.push_back({"ref-ptp", "ref ptp+host-local", {ptp}, false, true, false, true});
  // The same with ipMasq, datapath only: weft's conflist masquerades, and a
  // NAT table brings conntrack to every packet the node forwards, pod to pod
  // included. This row pays that too, so weft routed / it compares the
  // plugins on equal terms (issue 15's datapath item).
  json ptp_masq = ptp;
  ptp_masq["ipMasq"] = true;
  NetConfig pm{"ref-ptp-masq", "ref ptp+host-local+ipMasq", {ptp_masq}, false, false, false, true};
  pm.control = false;
  v.push_back(pm);
  json portmap = {{"type", "portmap"}, {"capabilities", {{"portMappings", true}}}, {"snat", true}};
  v.push_back({"ref-bridge-portmap", "ref bridge+ipMasq+portmap", {ref_bridge, portmap}, false, false, true, false});
  return v;
}

Result<Node> MakeNode(const std::string& prefix, const std::string& name, int octet) {
  WEFT_RETURN_IF_ERROR(CreateNode(name, octet));
  WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(NetnsPath(name)));
  std::string dir = MakeTempDir(prefix, "data");
  if (dir.empty()) return Status::FromErrno(Reason::kFailed, Domain::kFile, "mkdtemp", errno);
  return Node{name, std::move(ns), dir};
}

void DropNode(const Node& node, const std::vector<Pod>& pods) {
  for (const auto& p : pods) DeleteNetns(p.netns);
  DeleteNetns(node.name);
  RemoveTree(node.data_dir);
}

std::string PodIp(const json& result) {
  if (!result.contains("ips")) return "";
  for (const auto& ip : result["ips"]) {
    std::string a = ip.value("address", "");
    if (a.find(':') != std::string::npos) continue;
    return a.substr(0, a.find('/'));
  }
  return "";
}

OpResult Runner::Add(const NetConfig& cfg, const Node& node, Pod& pod) const {
  OpResult res;
  json prev;
  auto t0 = Clock::now();
  for (size_t i = 0; i < cfg.plugins.size(); ++i) {
    const json& p = cfg.plugins[i];
    json conf = p;
    conf["cniVersion"] = kCniVersion;
    conf["name"] = kNetName;
    if (i > 0) conf["prevResult"] = prev;
    if (pod.host_port && p.contains("capabilities") && p["capabilities"].value("portMappings", false))
      conf["runtimeConfig"] = {
          {"portMappings", {{{"hostPort", pod.host_port}, {"containerPort", 80}, {"protocol", "tcp"}}}}};
    sys::ExecRequest req;
    auto path = sys::FindInPath(p["type"].get<std::string>(), cni_path_);
    if (!path.ok()) {
      res.error = path.status().ToString();
      return res;
    }
    req.path = *path;
    req.env = {"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + pod.id, "CNI_NETNS=" + NetnsPath(pod.netns),
               "CNI_IFNAME=eth0",
               "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=" + pod.k8s_ns + ";K8S_POD_NAME=" + pod.id +
                   ";K8S_POD_INFRA_CONTAINER_ID=" + pod.id,
               "CNI_PATH=" + [&] {
                 std::string s;
                 for (const auto& d : cni_path_) s += (s.empty() ? "" : ":") + d;
                 return s;
               }(),
               "PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
    req.stdin_data = ReplaceAll(conf.dump(), "@DATA@", node.data_dir);
    req.netns_fd = node.ns.fd();
    req.timeout = std::chrono::seconds(60);
    auto r = sys::Exec(req);
    if (!r.ok()) {
      res.error = r.status().ToString();
      return res;
    }
    if (r->exit_code != 0) {
      res.error = p["type"].get<std::string>() + " ADD: " + PluginError(*r);
      res.ms = MsSince(t0);
      return res;
    }
    try {
      prev = json::parse(r->out);
    } catch (...) {
      res.error = p["type"].get<std::string>() + " ADD printed no JSON result: " + r->out.substr(0, 200);
      return res;
    }
  }
  res.ms = MsSince(t0);
  res.ok = true;
  pod.result = prev;
  return res;
}

OpResult Runner::Del(const NetConfig& cfg, const Node& node, const Pod& pod) const {
  OpResult res;
  auto t0 = Clock::now();
  for (size_t k = cfg.plugins.size(); k-- > 0;) {
    const json& p = cfg.plugins[k];
    json conf = p;
    conf["cniVersion"] = kCniVersion;
    conf["name"] = kNetName;
    if (!pod.result.is_null()) conf["prevResult"] = pod.result;
    if (pod.host_port && p.contains("capabilities") && p["capabilities"].value("portMappings", false))
      conf["runtimeConfig"] = {
          {"portMappings", {{{"hostPort", pod.host_port}, {"containerPort", 80}, {"protocol", "tcp"}}}}};
    auto path = sys::FindInPath(p["type"].get<std::string>(), cni_path_);
    if (!path.ok()) {
      res.error = path.status().ToString();
      return res;
    }
    std::string cni_path;
    for (const auto& d : cni_path_) cni_path += (cni_path.empty() ? "" : ":") + d;
    sys::ExecRequest req;
    req.path = *path;
    req.env = {"CNI_COMMAND=DEL", "CNI_CONTAINERID=" + pod.id, "CNI_NETNS=" + NetnsPath(pod.netns),
               "CNI_IFNAME=eth0",
               "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=" + pod.k8s_ns + ";K8S_POD_NAME=" + pod.id +
                   ";K8S_POD_INFRA_CONTAINER_ID=" + pod.id,
               "CNI_PATH=" + cni_path, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
    req.stdin_data = ReplaceAll(conf.dump(), "@DATA@", node.data_dir);
    req.netns_fd = node.ns.fd();
    req.timeout = std::chrono::seconds(60);
    auto r = sys::Exec(req);
    if (!r.ok()) {
      res.error = r.status().ToString();
      return res;
    }
    if (r->exit_code != 0) {
      res.error = p["type"].get<std::string>() + " DEL: " + PluginError(*r);
      res.ms = MsSince(t0);
      return res;
    }
  }
  res.ms = MsSince(t0);
  res.ok = true;
  return res;
}

namespace {

// Does the node's ruleset mention `port` (a DNAT for the hostPort)? nft
// lists iptables-nft rules too.
bool HasHostPortRule(const Node& node, int port) {
  sys::ExecRequest req;
  req.path = "/usr/sbin/nft";
  req.argv = {"nft", "list", "ruleset"};
  req.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  req.netns_fd = node.ns.fd();
  auto r = sys::Exec(req);
  return r.ok() && r->exit_code == 0 && r->out.find(std::to_string(port)) != std::string::npos;
}

struct Errors {
  int count = 0;
  std::string first;
  void Add(const std::string& e) {
    if (count++ == 0) first = e;
  }
  json Json() const { return count ? json{{"count", count}, {"first", first}} : json{{"count", 0}}; }
};

// The per-pod-count run on one node. Fills `out`.
Status RunLevels(const NetConfig& cfg, int index, const ControlOptions& opt, const Runner& runner, json& out) {
  const std::string tag = opt.prefix + "-c" + std::to_string(index);
  WEFT_ASSIGN_OR_RETURN(Node node, MakeNode(opt.prefix, tag + "n", 10));
  std::vector<Pod> pods;
  int seq = 0;
  auto new_pod = [&]() -> Result<Pod> {
    Pod p;
    ++seq;
    p.id = tag + "-" + std::to_string(seq);
    p.netns = tag + "-" + std::to_string(seq);
    p.host_port = cfg.host_port ? 30000 + seq : 0;
    WEFT_RETURN_IF_ERROR(CreateNetns(p.netns));
    return p;
  };
  struct Cleanup {
    const Node& node;
    std::vector<Pod>& pods;
    ~Cleanup() { DropNode(node, pods); }
  } cleanup{node, pods};

  // Probe: does this build accept the configuration at all?
  {
    WEFT_ASSIGN_OR_RETURN(Pod probe, new_pod());
    probe.host_port = cfg.host_port ? kProbePort : 0;
    auto a = runner.Add(cfg, node, probe);
    std::string reason;
    if (!a.ok) reason = a.error;
    else if (cfg.host_port && !HasHostPortRule(node, kProbePort))
      reason = "ADD succeeded but no rule for hostPort " + std::to_string(kProbePort) +
               " appeared in the node's ruleset: this build ignores runtimeConfig.portMappings";
    if (reason.empty()) {
      auto d = runner.Del(cfg, node, probe);
      if (!d.ok) reason = "DEL failed: " + d.error;
    } else if (a.ok) {
      (void)runner.Del(cfg, node, probe);
    }
    DeleteNetns(probe.netns);
    if (!reason.empty()) {
      out["available"] = false;
      out["reason"] = reason;
      return Status::Ok();
    }
  }
  out["available"] = true;

  json fill = json::array();
  json levels = json::array();
  Errors errors;
  const auto started = Clock::now();
  auto over_budget = [&] { return MsSince(started) > opt.budget_s * 1000.0; };
  for (int level : opt.levels) {
    if (over_budget()) {
      out["truncated"] = "stopped before " + std::to_string(level) + " pods: the configuration used its " +
                         std::to_string(opt.budget_s) + " s budget";
      break;
    }
    while (static_cast<int>(pods.size()) < level) {
      CheckInterrupt();
      WEFT_ASSIGN_OR_RETURN(Pod p, new_pod());
      auto a = runner.Add(cfg, node, p);
      if (!a.ok) {
        errors.Add(a.error);
        DeleteNetns(p.netns);
        if (errors.count > 20) return Status::Error(Reason::kInternal, Domain::kNone,
                                                    "too many failed ADDs: " + errors.first);
        continue;
      }
      fill.push_back({static_cast<int>(pods.size()), a.ms});
      pods.push_back(std::move(p));
    }
    std::vector<double> add, del;
    // Each sample's netns goes only after the level's last sample: removing
    // a netns leaves deferred kernel work (cleanup_net, RCU) that would bill
    // the next sample's ADD and DEL, and the floor is measured without it.
    std::vector<std::string> used;
    for (int s = 0; s < opt.samples; ++s) {
      CheckInterrupt();
      WEFT_ASSIGN_OR_RETURN(Pod p, new_pod());
      auto a = runner.Add(cfg, node, p);
      if (a.ok) {
        add.push_back(a.ms);
        fill.push_back({static_cast<int>(pods.size()), a.ms});
      } else {
        errors.Add(a.error);
      }
      auto d = runner.Del(cfg, node, p);
      if (d.ok && a.ok) del.push_back(d.ms);
      else if (!d.ok) errors.Add(d.error);
      used.push_back(p.netns);
    }
    for (const auto& ns : used) DeleteNetns(ns);
    Settle(opt.prefix, static_cast<int>(used.size()));
    levels.push_back({{"pods", level}, {"add", Summary(add)}, {"del", Summary(del)}});
  }
  out["levels"] = levels;
  out["fill"] = fill;
  out["errors"] = errors.Json();
  return Status::Ok();
}

// One round: a fresh node, parallel_pods pods ADDed by parallel_workers
// workers at once, then DELed the same way. Latencies go to add_lat/del_lat
// (pooled over rounds); the round's ADD/s and DEL/s to `round`.
Status RunParallelRound(const NetConfig& cfg, int index, int r, const ControlOptions& opt, const Runner& runner,
                        std::vector<double>& add_lat, std::vector<double>& del_lat, Errors& add_err, Errors& del_err,
                        json& round) {
  const std::string tag = opt.prefix + "-c" + std::to_string(index) + "P" + std::to_string(r);
  WEFT_ASSIGN_OR_RETURN(Node node, MakeNode(opt.prefix, tag + "n", 10));
  std::vector<Pod> pods(static_cast<size_t>(opt.parallel_pods));
  struct Cleanup {
    const Node& node;
    std::vector<Pod>& pods;
    ~Cleanup() { DropNode(node, pods); }
  } cleanup{node, pods};
  for (size_t i = 0; i < pods.size(); ++i) {
    pods[i].id = tag + "-" + std::to_string(i);
    pods[i].netns = pods[i].id;
    pods[i].host_port = cfg.host_port ? 30000 + static_cast<int>(i) : 0;
    WEFT_RETURN_IF_ERROR(CreateNetns(pods[i].netns));
  }
  auto phase = [&](bool add) {
    std::atomic<size_t> next{0};
    std::mutex mu;
    std::vector<double>& lat = add ? add_lat : del_lat;
    Errors& errors = add ? add_err : del_err;
    const size_t before = lat.size();
    auto t0 = Clock::now();
    std::vector<std::thread> workers;
    for (int w = 0; w < opt.parallel_workers; ++w) {
      workers.emplace_back([&] {
        for (size_t i; (i = next++) < pods.size() && !InterruptFlag().load();) {
          if (!add && pods[i].result.is_null()) continue;  // its ADD failed
          OpResult r = add ? runner.Add(cfg, node, pods[i]) : runner.Del(cfg, node, pods[i]);
          std::lock_guard<std::mutex> l(mu);
          if (r.ok) lat.push_back(r.ms);
          else errors.Add(r.error);
        }
      });
    }
    for (auto& t : workers) t.join();
    double wall_s = MsSince(t0) / 1000.0;
    return wall_s > 0 ? static_cast<double>(lat.size() - before) / wall_s : 0.0;
  };
  round["add_per_s"] = phase(true);
  CheckInterrupt();
  round["del_per_s"] = phase(false);
  CheckInterrupt();
  return Status::Ok();
}

// parallel_rounds rounds, each on its own fresh node. ADD/s and DEL/s are
// the mean over rounds, with every round's value and the largest deviation
// from the mean beside them (issue 15: ">= 500, within +-15 % over 5 runs");
// latency percentiles pool every round's operations.
Status RunParallel(const NetConfig& cfg, int index, const ControlOptions& opt, const Runner& runner, json& out) {
  std::vector<double> add_lat, del_lat;
  Errors add_err, del_err;
  json rounds = json::array();
  const int n = std::max(1, cfg.weft ? opt.parallel_rounds : 1);
  for (int r = 0; r < n; ++r) {
    json round;
    Status st = RunParallelRound(cfg, index, r, opt, runner, add_lat, del_lat, add_err, del_err, round);
    Settle(opt.prefix, opt.parallel_pods);  // the round's node and pods are gone: wait for the kernel
    if (!st.ok()) return st;
    rounds.push_back(round);
  }
  auto phase = [&](const char* key, const std::vector<double>& lat, const Errors& errors) {
    std::vector<double> per_s;
    for (const auto& r : rounds) per_s.push_back(r[key].get<double>());
    double mean = 0;
    for (double v : per_s) mean += v / static_cast<double>(per_s.size());
    double dev = 0;
    for (double v : per_s) dev = std::max(dev, mean > 0 ? std::abs(v - mean) / mean : 0.0);
    json j = Summary(lat);
    j["per_s"] = mean;
    j["per_s_runs"] = per_s;
    j["per_s_min"] = *std::min_element(per_s.begin(), per_s.end());
    j["per_s_max"] = *std::max_element(per_s.begin(), per_s.end());
    j["per_s_max_dev"] = dev;  // largest |run - mean| / mean
    j["errors"] = errors.Json();
    return j;
  };
  json p = {{"workers", opt.parallel_workers}, {"pods", opt.parallel_pods}, {"rounds", n}};
  p["add"] = phase("add_per_s", add_lat, add_err);
  p["del"] = phase("del_per_s", del_lat, del_err);
  out["parallel"] = p;
  return Status::Ok();
}

}  // namespace

json RunControl(const NetConfig& cfg, int index, const ControlOptions& opt, const Runner& runner) {
  json out = {{"key", cfg.key}, {"label", cfg.label}, {"weft", cfg.weft}, {"required", cfg.required}};
  Status st = RunLevels(cfg, index, opt, runner, out);
  int removed = opt.levels.empty() ? 0 : opt.levels.back();
  Settle(opt.prefix, removed);
  if (!st.ok()) {
    out["available"] = false;
    out["broken"] = true;
    out["reason"] = st.ToString();
    return out;
  }
  if (!out.value("available", false)) return out;
  st = RunParallel(cfg, index, opt, runner, out);
  if (!st.ok()) {
    out["broken"] = true;
    out["reason"] = st.ToString();
  }
  return out;
}

json RunFloor(const FloorOptions& opt) {
  json out;
  auto node = MakeNode(opt.prefix, opt.prefix + "-floor", 10);
  if (!node.ok()) return {{"error", node.status().ToString()}};
  std::vector<Pod> none;
  struct Cleanup {
    const Node& node;
    std::vector<Pod>& pods;
    ~Cleanup() { DropNode(node, pods); }
  } cleanup{*node, none};
  auto host = sys::Netlink::OpenIn(node->ns);
  if (!host.ok()) return {{"error", host.status().ToString()}};

  // A plugin-sized stdin and environment, so every exec below pays the same
  // harness cost as a plugin call.
  const std::string fake_conf(400, ' ');
  const std::vector<std::string> env = {"CNI_COMMAND=ADD", "CNI_CONTAINERID=floor", "CNI_NETNS=/run/netns/x",
                                        "CNI_IFNAME=eth0", "CNI_PATH=/usr/lib/cni",
                                        "PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  std::vector<double> add, del, exec_add, noop, noop_dyn;
  Errors errors;
  // Phases, not interleaved: a veth deletion or a netns teardown leaves
  // deferred kernel work (RCU, cleanup_net) that would bill the next ADD.
  auto pod_ns = [&](int i) { return opt.prefix + "-f" + std::to_string(i); };
  auto pod_if = [&](int i) { return "wbf" + std::to_string(i); };
  auto pod_ip = [&](int i) { return IpAddress::Parse("10.250.0.0")->Plus(static_cast<uint64_t>(i + 2)); };
  auto make_all = [&]() -> Status {
    for (int i = 0; i < opt.samples; ++i) WEFT_RETURN_IF_ERROR(CreateNetns(pod_ns(i)));
    return Status::Ok();
  };
  auto drop_all = [&] {
    for (int i = 0; i < opt.samples; ++i) {
      (void)host->DeleteLink(pod_if(i));
      DeleteNetns(pod_ns(i));
    }
    Settle(opt.prefix, opt.samples);
  };
  if (Status s = make_all(); !s.ok()) return {{"error", s.ToString()}};
  for (int i = 0; i < opt.samples; ++i) {
    CheckInterrupt();
    auto t0 = Clock::now();
    Status st = FloorAdd(*host, NetnsPath(pod_ns(i)), pod_if(i), pod_ip(i), 1500);
    double a = MsSince(t0);
    if (st.ok()) add.push_back(a);
    else errors.Add(st.ToString());
  }
  for (int i = 0; i < opt.samples; ++i) {
    CheckInterrupt();
    auto t0 = Clock::now();
    Status st = host->DeleteLink(pod_if(i));
    double d = MsSince(t0);
    if (st.ok()) del.push_back(d);
    else errors.Add(st.ToString());
  }
  drop_all();

  // The same work exec'd as a fresh static process.
  if (Status s = make_all(); !s.ok()) return {{"error", s.ToString()}};
  for (int i = 0; i < opt.samples; ++i) {
    CheckInterrupt();
    sys::ExecRequest req;
    req.path = opt.floor_bin;
    req.argv = {opt.floor_bin, NetnsPath(pod_ns(i)), pod_if(i), pod_ip(i).ToString()};
    req.env = env;
    req.stdin_data = fake_conf;
    req.netns_fd = node->ns.fd();
    auto t0 = Clock::now();
    auto r = sys::Exec(req);
    double e = MsSince(t0);
    if (r.ok() && r->exit_code == 0) exec_add.push_back(e);
    else errors.Add("floor exec: " + (r.ok() ? r->err : r.status().ToString()));
  }
  drop_all();

  for (int i = 0; i < opt.samples; ++i) {
    for (auto [bin, into] : {std::pair{opt.noop_bin, &noop}, std::pair{std::string("/bin/true"), &noop_dyn}}) {
      CheckInterrupt();
      sys::ExecRequest n;
      n.path = bin;
      n.env = env;
      n.stdin_data = fake_conf;
      n.netns_fd = node->ns.fd();
      auto t0 = Clock::now();
      auto nr = sys::Exec(n);
      double ms = MsSince(t0);
      if (nr.ok() && nr->exit_code == 0) into->push_back(ms);
      else errors.Add("exec " + bin + " failed");
    }
  }
  out["inproc_add"] = Summary(add);
  out["kernel_veth_del"] = Summary(del);
  out["exec_add"] = Summary(exec_add);
  out["noop_exec_static"] = Summary(noop);
  out["noop_exec_dynamic"] = Summary(noop_dyn);
  out["errors"] = errors.Json();
  return out;
}

}  // namespace weft::bench
