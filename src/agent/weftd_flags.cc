#include "agent/weftd_flags.h"

#include <CLI/CLI.hpp>

#include "base/strings.h"
#include "fw/backend.h"
#include "overlay/families.h"

namespace weft::agent {
namespace {

// The flags' text where weftd turns it into values after CLI11's parse.
struct Text {
  std::string backend = "vxlan", cluster_cidr, masquerade_backend;
  std::string etcd_endpoints, etcd_prefix = "/weft/network", etcd_ca, etcd_cert, etcd_key;
  std::string log_level = "info";
  std::string network_policy;  // "" = on with kubernetes, off with etcd
  double resync_seconds = 30, auth_failure_timeout = 120;
};

void AddNodeFlags(CLI::App& app, WeftdFlags& f, Text& t) {
  AgentOptions& o = f.agent;
  app.add_option("--node-name", o.node_name, "This node's name (Node object / etcd record)")->envname("NODE_NAME");
  app.add_option("--control-plane", f.control_plane, "Source of truth: kubernetes or etcd")
      ->check(CLI::IsMember({"kubernetes", "etcd"}))
      ->capture_default_str();
  app.add_option("--cluster-cidr", t.cluster_cidr,
                 "Cluster pod CIDR, one per family, comma-separated (10.244.0.0/16,fd00:10:244::/56): written to "
                 "etcd's config when absent; masquerade leaves it alone");
  app.add_option("--backend", t.backend, "vxlan, host-gw (direct routes; peers must share a link) or auto")
      ->check(CLI::IsMember({"vxlan", "host-gw", "auto"}))
      ->capture_default_str();
  app.add_option("--iface", o.iface, "Uplink interface (default: the IPv4 default route's, else the IPv6 one's)");
  app.add_option("--node-ip", o.node_ip,
                 "This node's underlay address, or one per family comma-separated; the first is the VXLAN local "
                 "(default: the uplink's first IPv4, else IPv6, address)");
  app.add_option("--vxlan-vni", o.vxlan_vni, "VXLAN network identifier")->capture_default_str();
  app.add_option("--vxlan-port", o.vxlan_port, "VXLAN UDP port")->capture_default_str();
  app.add_option("--vxlan-device", o.vxlan_device, "VXLAN device name (default weft.<vni>)");
  app.add_option("--state-dir", o.state_dir, "weftd's own state (subnet memory, locks)")->capture_default_str();
  app.add_option("--masquerade", o.masquerade, "Node-wide masquerade of pod traffic leaving the cluster CIDR")
      ->capture_default_str();
  t.masquerade_backend = fw::BackendName(o.masquerade_backend);
  app.add_option("--masquerade-backend", t.masquerade_backend, "nftables or iptables")
      ->check(CLI::IsMember({"nftables", "iptables"}))
      ->capture_default_str();
  app.add_option("--resync-period", t.resync_seconds, "Seconds between full resyncs")
      ->check(CLI::Range(0.2, 3600.0))
      ->capture_default_str();
}

void AddKubeFlags(CLI::App& app, WeftdFlags& f, Text& t) {
  AgentOptions& o = f.agent;
  app.add_option("--kubeconfig", f.kubeconfig, "Kubeconfig file (default: in-cluster service account)")
      ->envname("KUBECONFIG");
  app.add_option("--service-account-dir", f.service_account_dir, "In-cluster token and CA directory")
      ->capture_default_str();
  app.add_option("--watch-timeout", f.watch_timeout_seconds, "Server-side timeout of one Kubernetes watch, seconds")
      ->capture_default_str();
  app.add_option("--network-policy", t.network_policy,
                 "Enforce NetworkPolicy on this node's pods (default: true with --control-plane=kubernetes; "
                 "not available with etcd)")
      ->check(CLI::IsMember({"true", "false"}));
  app.add_option("--netpol-namespaces-file", o.netpol_namespaces_file,
                 "Where weftd lists the namespaces with policies for the plugin (default <state-dir>/netpol-namespaces)");
  app.add_option("--netpol-pending-group", o.netpol_pending_group,
                 "Interface group of pods the plugin created before weftd knew them")
      ->check(CLI::Range(1u, 0xffffffffu))
      ->capture_default_str();
  app.add_option("--netpol-recheck-established", f.netpol.recheck_established,
                 "Judge established connections again when a change narrows what their pods may do")
      ->capture_default_str();
  app.add_option("--cluster-network-policy", f.netpol.cluster_network_policy,
                 "Enforce ClusterNetworkPolicy (policy.networking.k8s.io/v1alpha2) with NetworkPolicy; without its "
                 "CRD weftd asks again every 30 s")
      ->capture_default_str();
  app.add_option("--service-proxy", f.service_proxy,
                 "Serve Kubernetes Services on this node (table inet weft-services, in place of kube-proxy; "
                 "docs/services.md). Kubernetes control plane only")
      ->capture_default_str();
  app.add_option("--drop-log", o.drop_log,
                 "Read the packets NetworkPolicy and the source guard drop from NFLOG group 22342 and serve one "
                 "record per flow at /drops (weftctl policy drops)")
      ->capture_default_str();
}

void AddEtcdFlags(CLI::App& app, WeftdFlags& f, Text& t) {
  app.add_option("--etcd-endpoints", t.etcd_endpoints, "Comma-separated etcd client URLs (http://host:2379)");
  app.add_option("--etcd-prefix", t.etcd_prefix, "Key prefix of the network in etcd")->capture_default_str();
  app.add_option("--etcd-lease-ttl", f.etcd.lease_ttl, "TTL of this node's subnet lease, seconds")
      ->check(CLI::Range(2, 3600))
      ->capture_default_str();
  app.add_option("--etcd-cafile", t.etcd_ca, "CA bundle to verify etcd");
  app.add_option("--etcd-certfile", t.etcd_cert, "Client certificate for etcd");
  app.add_option("--etcd-keyfile", t.etcd_key, "Client key for etcd");
  app.add_option("--subnet-len", f.etcd.subnet_len, "Per-node IPv4 subnet size claimed from etcd")
      ->check(CLI::Range(8, 30))
      ->capture_default_str();
  app.add_option("--subnet-len6", f.etcd.subnet_len6, "Per-node IPv6 subnet size claimed from etcd")
      ->check(CLI::Range(8, 126))
      ->capture_default_str();
  app.add_flag("--leave", f.leave, "Withdraw this node from etcd (revoke its lease, delete its subnet) and exit");
}

void AddHostFlags(CLI::App& app, WeftdFlags& f, Text& t) {
  AgentOptions& o = f.agent;
  app.add_option("--cni-conf-dir", o.cni_conf_dir, "Where the conflist goes")->capture_default_str();
  app.add_option("--cni-conf-name", o.cni_conf_name, "Conflist file name")->capture_default_str();
  app.add_option("--network-name", o.network_name, "CNI network name")->capture_default_str();
  app.add_option("--write-conflist", o.write_conflist, "Write the conflist")->capture_default_str();
  app.add_option("--cni-bin-dir", f.cni_bin_dir, "CNI plugin directory (for --install-plugin)")->capture_default_str();
  app.add_option("--install-plugin", f.install_plugin,
                 "Copy this weft plugin binary into --cni-bin-dir and exit (the DaemonSet's init step)");
  app.add_option("--plugin-data-dir", o.plugin_data_dir, "dataDir for the plugin in the conflist");
  app.add_option("--plugin-log-file", o.plugin_log_file, "logFile for the plugin in the conflist");
  app.add_option("--plugin-log-level", o.plugin_log_level, "logLevel for the plugin in the conflist");
  app.add_option("--metrics-addr", o.metrics_addr,
                 "host:port of the status server: /healthz, /readyz and /metrics for anyone, /netpol*, /drops for "
                 "the node's loopback or an authorized bearer token (\"\" = off)")
      ->capture_default_str();
  app.add_option("--metrics-auth", o.metrics_auth,
                 "/metrics too only for the node's loopback or a bearer token allowed get on nodes/metrics")
      ->capture_default_str();
  app.add_option("--auth-failure-timeout", t.auth_failure_timeout,
                 "Seconds of nothing but refused control-plane requests (401/403, a rejected certificate) "
                 "after which /healthz fails")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  app.add_option("--log-level", t.log_level, "debug, info, warn, error")->capture_default_str();
  app.add_option("--log-file", f.log_file, "Log to this file instead of stderr");
}

Status Invalid(std::string msg) { return Status::Error(Reason::kInvalidArgument, Domain::kConfig, std::move(msg)); }

// What CLI11's checks cannot say: values that need parsing, and flags that
// contradict each other. Fills the typed fields from `t`.
Status Check(const Text& t, WeftdFlags& f) {
  AgentOptions& o = f.agent;
  if (!log::ParseLevel(t.log_level, &f.log_level)) return Invalid("--log-level must be debug, info, warn or error");
  if (!f.install_plugin.empty()) return Status::Ok();  // copies a file; needs nothing else
  if (o.node_name.empty()) return Invalid("--node-name (or NODE_NAME) is required");
  if (!overlay::ParseBackend(t.backend, &o.backend)) return Invalid("bad --backend");
  if (!t.cluster_cidr.empty()) {
    WEFT_ASSIGN_OR_RETURN(o.cluster_cidrs, overlay::ParseCidrPerFamily("--cluster-cidr", t.cluster_cidr));
  }
  if (!o.node_ip.empty()) WEFT_RETURN_IF_ERROR(overlay::ParseIpPerFamily("--node-ip", o.node_ip).status());
  o.masquerade_backend = *fw::ParseBackend(t.masquerade_backend);  // IsMember checked the spelling
  o.resync = std::chrono::milliseconds(static_cast<int64_t>(t.resync_seconds * 1000));
  o.auth_failure_timeout = std::chrono::milliseconds(static_cast<int64_t>(t.auth_failure_timeout * 1000));
  o.control_plane_name = f.control_plane;
  if (f.control_plane == "etcd" && t.network_policy == "true")
    return Invalid("--network-policy needs --control-plane=kubernetes: etcd holds no Pods, Namespaces or "
                   "NetworkPolicies");
  o.network_policy = f.control_plane == "kubernetes" && t.network_policy != "false";

  if (f.control_plane == "etcd" && f.service_proxy)
    return Invalid("--service-proxy needs --control-plane=kubernetes: etcd holds no Services or EndpointSlices");
  f.proxy.node_name = o.node_name;
  f.proxy.cluster_cidrs = o.cluster_cidrs;
  f.proxy.resync = o.resync;
  f.proxy.watch_timeout_seconds = f.watch_timeout_seconds;

  f.netpol.node_name = o.node_name;
  f.netpol.pending_group = o.netpol_pending_group;
  f.netpol.namespaces_file = NetpolNamespacesFile(o);
  f.netpol.resync = o.resync;
  f.netpol.watch_timeout_seconds = f.watch_timeout_seconds;

  EtcdOptions& e = f.etcd;
  for (auto part : Split(t.etcd_endpoints, ','))
    if (auto p = Trim(part); !p.empty()) e.endpoints.emplace_back(p);
  if (f.control_plane == "etcd" && e.endpoints.empty())
    return Invalid("--etcd-endpoints is required with --control-plane=etcd");
  e.prefix = t.etcd_prefix;
  while (e.prefix.size() > 1 && e.prefix.back() == '/') e.prefix.pop_back();
  e.cluster_cidrs = o.cluster_cidrs;
  e.tls = {t.etcd_ca, t.etcd_cert, t.etcd_key, false};
  e.state_file = o.state_dir + "/subnet";
  e.node_name = o.node_name;
  return Status::Ok();
}

}  // namespace

ParsedFlags ParseWeftdFlags(int argc, const char* const* argv, const std::string& version) {
  CLI::App app{"weftd: Weft's node agent. Claims or reads this node's pod CIDR, writes the CNI conflist, "
               "and keeps VXLAN or direct routes to every peer node in sync with the Kubernetes API or etcd."};
  app.set_config("--config", "", "Read flags from this TOML/INI file (keys are the long flag names)");
  app.set_version_flag("--version", version, "Print the release and the commit weftd was built from, then exit");
  ParsedFlags out;
  Text text;
  AddNodeFlags(app, out.flags, text);
  AddKubeFlags(app, out.flags, text);
  AddEtcdFlags(app, out.flags, text);
  AddHostFlags(app, out.flags, text);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    out.exit_code = app.exit(e);
    return out;
  }
  out.invalid = Check(text, out.flags);
  return out;
}

}  // namespace weft::agent
