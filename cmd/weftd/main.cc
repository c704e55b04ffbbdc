// weftd: the Weft node agent (docs/weftd.md). Only main(): flags, logging,
// signals; the work lives in src/agent.

#include <malloc.h>
#include <pthread.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <thread>

#include "agent/agent.h"
#include "agent/conflist.h"
#include "agent/etcd.h"
#include "agent/kube.h"
#include "base/log.h"
#include "base/strings.h"
#include "fw/backend.h"
#include "overlay/families.h"
#include "sys/exec.h"
#include "sys/http.h"

namespace {

using weft::Domain;
using weft::Reason;
using weft::Status;
namespace agent = weft::agent;
namespace kube = weft::kube;
namespace overlay = weft::overlay;
namespace policy = weft::policy;
namespace sys = weft::sys;

// Set once --log-file names a file: stderr then gets the reason too.
bool g_logs_to_file = false;

// The logfmt `msg=exiting` record; when the log goes to a file, also one
// plain line on stderr, which is what `kubectl logs` and a terminal show.
int Fail(const Status& st) {
  if (g_logs_to_file) std::fprintf(stderr, "weftd: %s\n", st.ToString().c_str());
  WEFT_LOG(kError, "exiting", {"err", st});
  return 1;
}

int RealMain(int argc, char** argv) {
  CLI::App app{"weftd: Weft's node agent. Claims or reads this node's pod CIDR, writes the CNI conflist, "
               "and keeps VXLAN or direct routes to every peer node in sync with the Kubernetes API or etcd."};
  app.set_config("--config", "", "Read flags from this TOML/INI file (keys are the long flag names)");
  agent::AgentOptions o;
  std::string control_plane = "kubernetes", backend = "vxlan", kubeconfig, etcd_endpoints, cluster_cidr;
  std::string etcd_prefix = "/weft/network", etcd_ca, etcd_cert, etcd_key, install_plugin, cni_bin_dir = "/opt/cni/bin";
  std::string log_level = "info", log_file, sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
  std::string masquerade_backend(weft::fw::BackendName(o.masquerade_backend));
  int64_t lease_ttl = 60, watch_timeout = 300;
  int subnet_len = 24, subnet_len6 = 64;
  double resync_seconds = 30, auth_failure_timeout = 120;
  bool leave = false;
  std::string network_policy;  // "" = on with kubernetes, off with etcd
  bool netpol_flush_conntrack = true;  // --netpol-recheck-established
  bool cluster_network_policy = true;  // --cluster-network-policy

  app.add_option("--node-name", o.node_name, "This node's name (Node object / etcd record)")->envname("NODE_NAME");
  app.add_option("--control-plane", control_plane, "Source of truth: kubernetes or etcd")
      ->check(CLI::IsMember({"kubernetes", "etcd"}))
      ->capture_default_str();
  app.add_option("--kubeconfig", kubeconfig, "Kubeconfig file (default: in-cluster service account)")
      ->envname("KUBECONFIG");
  app.add_option("--service-account-dir", sa_dir, "In-cluster token and CA directory")->capture_default_str();
  app.add_option("--watch-timeout", watch_timeout, "Server-side timeout of one Kubernetes watch, seconds")
      ->capture_default_str();
  app.add_option("--etcd-endpoints", etcd_endpoints, "Comma-separated etcd client URLs (http://host:2379)");
  app.add_option("--etcd-prefix", etcd_prefix, "Key prefix of the network in etcd")->capture_default_str();
  app.add_option("--etcd-lease-ttl", lease_ttl, "TTL of this node's subnet lease, seconds")
      ->check(CLI::Range(2, 3600))
      ->capture_default_str();
  app.add_option("--etcd-cafile", etcd_ca, "CA bundle to verify etcd");
  app.add_option("--etcd-certfile", etcd_cert, "Client certificate for etcd");
  app.add_option("--etcd-keyfile", etcd_key, "Client key for etcd");
  app.add_option("--cluster-cidr", cluster_cidr,
                 "Cluster pod CIDR, one per family, comma-separated (10.244.0.0/16,fd00:10:244::/56): written to "
                 "etcd's config when absent; masquerade leaves it alone");
  app.add_option("--subnet-len", subnet_len, "Per-node IPv4 subnet size claimed from etcd")
      ->check(CLI::Range(8, 30))
      ->capture_default_str();
  app.add_option("--subnet-len6", subnet_len6, "Per-node IPv6 subnet size claimed from etcd")
      ->check(CLI::Range(8, 126))
      ->capture_default_str();
  app.add_option("--backend", backend, "vxlan, host-gw (direct routes; peers must share a link) or auto")
      ->check(CLI::IsMember({"vxlan", "host-gw", "auto"}))
      ->capture_default_str();
  app.add_option("--iface", o.iface, "Uplink interface (default: the IPv4 default route's, else the IPv6 one's)");
  app.add_option("--node-ip", o.node_ip,
                 "This node's underlay address, or one per family comma-separated; the first is the VXLAN local "
                 "(default: the uplink's first IPv4, else IPv6, address)");
  app.add_option("--vxlan-vni", o.vxlan_vni, "VXLAN network identifier")->capture_default_str();
  app.add_option("--vxlan-port", o.vxlan_port, "VXLAN UDP port")->capture_default_str();
  app.add_option("--vxlan-device", o.vxlan_device, "VXLAN device name (default weft.<vni>)");
  app.add_option("--cni-conf-dir", o.cni_conf_dir, "Where the conflist goes")->capture_default_str();
  app.add_option("--cni-conf-name", o.cni_conf_name, "Conflist file name")->capture_default_str();
  app.add_option("--network-name", o.network_name, "CNI network name")->capture_default_str();
  app.add_option("--write-conflist", o.write_conflist, "Write the conflist")->capture_default_str();
  app.add_option("--cni-bin-dir", cni_bin_dir, "CNI plugin directory (for --install-plugin)")->capture_default_str();
  app.add_option("--install-plugin", install_plugin,
                 "Copy this weft plugin binary into --cni-bin-dir and exit (the DaemonSet's init step)");
  app.add_option("--plugin-data-dir", o.plugin_data_dir, "dataDir for the plugin in the conflist");
  app.add_option("--plugin-log-file", o.plugin_log_file, "logFile for the plugin in the conflist");
  app.add_option("--plugin-log-level", o.plugin_log_level, "logLevel for the plugin in the conflist");
  app.add_option("--state-dir", o.state_dir, "weftd's own state (subnet memory, locks)")->capture_default_str();
  app.add_option("--masquerade", o.masquerade, "Node-wide masquerade of pod traffic leaving the cluster CIDR")
      ->capture_default_str();
  app.add_option("--masquerade-backend", masquerade_backend, "nftables or iptables")
      ->check(CLI::IsMember({"nftables", "iptables"}))
      ->capture_default_str();
  app.add_option("--resync-period", resync_seconds, "Seconds between full resyncs")
      ->check(CLI::Range(0.2, 3600.0))
      ->capture_default_str();
  app.add_option("--metrics-addr", o.metrics_addr,
                 "host:port of the status server: /healthz, /readyz and /metrics for anyone, /netpol*, /drops for "
                 "the node's loopback or an authorized bearer token (\"\" = off)")
      ->capture_default_str();
  app.add_option("--metrics-auth", o.metrics_auth,
                 "/metrics too only for the node's loopback or a bearer token allowed get on nodes/metrics")
      ->capture_default_str();
  app.add_option("--auth-failure-timeout", auth_failure_timeout,
                 "Seconds of nothing but refused control-plane requests (401/403, a rejected certificate) "
                 "after which /healthz fails")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  app.add_option("--log-level", log_level, "debug, info, warn, error")->capture_default_str();
  app.add_option("--log-file", log_file, "Log to this file instead of stderr");
  app.add_option("--network-policy", network_policy,
                 "Enforce NetworkPolicy on this node's pods (default: true with --control-plane=kubernetes; "
                 "not available with etcd)")
      ->check(CLI::IsMember({"true", "false"}));
  app.add_option("--netpol-namespaces-file", o.netpol_namespaces_file,
                 "Where weftd lists the namespaces with policies for the plugin (default <state-dir>/netpol-namespaces)");
  app.add_option("--netpol-pending-group", o.netpol_pending_group,
                 "Interface group of pods the plugin created before weftd knew them")
      ->check(CLI::Range(1u, 0xffffffffu))
      ->capture_default_str();
  app.add_option("--netpol-recheck-established", netpol_flush_conntrack,
                 "Judge established connections again when a change narrows what their pods may do")
      ->capture_default_str();
  app.add_option("--cluster-network-policy", cluster_network_policy,
                 "Enforce ClusterNetworkPolicy (policy.networking.k8s.io/v1alpha2) with NetworkPolicy; without its "
                 "CRD weftd asks again every 30 s")
      ->capture_default_str();
  app.add_option("--drop-log", o.drop_log,
                 "Read the packets NetworkPolicy and the source guard drop from NFLOG group 22342 and serve one "
                 "record per flow at /drops (weftctl policy drops)")
      ->capture_default_str();
  app.add_flag("--leave", leave, "Withdraw this node from etcd (revoke its lease, delete its subnet) and exit");
  CLI11_PARSE(app, argc, argv);

  weft::log::Level level;
  if (!weft::log::ParseLevel(log_level, &level))
    return Fail(Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                              "--log-level must be debug, info, warn or error"));
  weft::log::SetLevel(level);
  if (Status st = weft::log::SetFile(log_file); !st.ok())
    return Fail(st.WithPrefix("--log-file"));
  g_logs_to_file = !log_file.empty();
  weft::log::SetContext({{"component", "weftd"}});

  if (!install_plugin.empty()) {
    bool changed = false;
    Status st = agent::InstallPlugin(install_plugin, cni_bin_dir, "weft", &changed);
    if (!st.ok()) return Fail(st);
    WEFT_LOG(kInfo, "installed plugin", {"dir", cni_bin_dir}, {"changed", changed});
    return 0;
  }
  if (o.node_name.empty())
    return Fail(Status::Error(Reason::kInvalidArgument, Domain::kConfig, "--node-name (or NODE_NAME) is required"));
  if (!overlay::ParseBackend(backend, &o.backend))
    return Fail(Status::Error(Reason::kInvalidArgument, Domain::kConfig, "bad --backend"));
  if (!cluster_cidr.empty()) {
    auto c = overlay::ParseCidrPerFamily("--cluster-cidr", cluster_cidr);
    if (!c.ok()) return Fail(c.status());
    o.cluster_cidrs = std::move(c).value();
  }
  if (!o.node_ip.empty())
    if (auto ips = overlay::ParseIpPerFamily("--node-ip", o.node_ip); !ips.ok()) return Fail(ips.status());
  o.masquerade_backend = *weft::fw::ParseBackend(masquerade_backend);  // IsMember checked the spelling
  o.resync = std::chrono::milliseconds(static_cast<int64_t>(resync_seconds * 1000));
  o.auth_failure_timeout = std::chrono::milliseconds(static_cast<int64_t>(auth_failure_timeout * 1000));
  o.control_plane_name = control_plane;
  if (control_plane == "etcd" && network_policy == "true")
    return Fail(Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                              "--network-policy needs --control-plane=kubernetes: etcd holds no Pods, Namespaces or "
                              "NetworkPolicies"));
  o.network_policy = control_plane == "kubernetes" && network_policy != "false";

  if (Status st = sys::InitHttp(); !st.ok()) return Fail(st);

  std::unique_ptr<agent::ControlPlane> cp;
  std::unique_ptr<policy::NetpolController> netpol;
  std::unique_ptr<agent::TokenReviewer> reviewer;  // Kubernetes only: etcd has no TokenReview
  if (control_plane == "etcd") {
    agent::EtcdOptions e;
    for (auto part : weft::Split(etcd_endpoints, ','))
      if (auto t = weft::Trim(part); !t.empty()) e.endpoints.emplace_back(t);
    if (e.endpoints.empty())
      return Fail(Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                                "--etcd-endpoints is required with --control-plane=etcd"));
    while (etcd_prefix.size() > 1 && etcd_prefix.back() == '/') etcd_prefix.pop_back();
    e.prefix = etcd_prefix;
    e.lease_ttl = lease_ttl;
    e.cluster_cidrs = o.cluster_cidrs;
    e.subnet_len = subnet_len;
    e.subnet_len6 = subnet_len6;
    e.tls = {etcd_ca, etcd_cert, etcd_key, false};
    e.state_file = o.state_dir + "/subnet";
    e.node_name = o.node_name;
    cp = agent::NewEtcdControlPlane(std::move(e));
  } else {
    auto ep = kubeconfig.empty() ? kube::InClusterEndpoint(weft::sys::CurrentEnv(), sa_dir)
                                 : kube::KubeconfigEndpoint(kubeconfig, o.state_dir + "/kubeconfig-data");
    if (!ep.ok()) return Fail(ep.status());
    agent::KubeOptions k;
    k.endpoint = std::move(ep).value();
    if (o.network_policy) {
      policy::NetpolOptions n;
      n.node_name = o.node_name;
      n.pending_group = o.netpol_pending_group;
      n.namespaces_file = agent::NetpolNamespacesFile(o);
      n.resync = o.resync;
      n.recheck_established = netpol_flush_conntrack;
      n.cluster_network_policy = cluster_network_policy;
      n.watch_timeout_seconds = watch_timeout;
      netpol = std::make_unique<policy::NetpolController>(std::move(n), k.endpoint, policy::NewNetpolKernel());
    }
    k.watch_timeout_seconds = watch_timeout;
    reviewer = agent::NewKubeTokenReviewer(k.endpoint);
    cp = agent::NewKubeControlPlane(std::move(k));
  }

  if (leave) {
    Status st = cp->Leave();
    if (!st.ok()) return Fail(st);
    WEFT_LOG(kInfo, "left the network", {"node", o.node_name});
    return 0;
  }

  // Signals go to one waiting thread; every other thread has them blocked.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  agent::Agent a(std::move(o), std::move(cp));
  if (netpol) a.SetNetworkPolicy(std::move(netpol));
  if (reviewer) a.SetTokenReviewer(std::move(reviewer));
  std::atomic<bool> done{false};
  std::thread signals([&] {
    int sig = 0;
    while (sigwait(&set, &sig) == 0) {
      if (done.load()) return;
      WEFT_LOG(kInfo, "stopping", {"signal", sig});
      a.RequestStop();
      return;
    }
  });
  Status st = a.Run();
  done = true;
  pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  if (!st.ok()) return Fail(st);
  WEFT_LOG(kInfo, "stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Four mostly idle threads: one malloc arena keeps the RSS small.
  mallopt(M_ARENA_MAX, 1);
  try {
    return RealMain(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weftd: internal error: %s\n", e.what());
    return 999 & 0xff;
  } catch (...) {
    std::fprintf(stderr, "weftd: internal error\n");
    return 999 & 0xff;
  }
}
