#pragma once
// weftd's command line (docs/weftd.md, "Flags"): every flag, its default
// and its check, parsed into one WeftdFlags in one place. cmd/weftd/main.cc
// only wires the result together (logging, the control plane, the agent).

#include <optional>
#include <string>

#include "agent/agent.h"
#include "agent/etcd.h"
#include "base/log.h"
#include "base/status.h"
#include "policy/netpol_controller.h"
#include "services/proxy_controller.h"

namespace weft::agent {

struct WeftdFlags {
  AgentOptions agent;                 // what the agent runs with (node, datapath, conflist, metrics)
  std::string control_plane = "kubernetes";  // or "etcd"
  // --control-plane=kubernetes: where the API server is, and NetworkPolicy
  // (netpol.node_name and the shared fields are filled from `agent`).
  std::string kubeconfig;             // "" = in-cluster (service_account_dir)
  std::string service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
  int64_t watch_timeout_seconds = 300;
  policy::NetpolOptions netpol;       // used when agent.network_policy
  bool service_proxy = false;         // --service-proxy: serve Services (docs/services.md)
  services::ProxyOptions proxy;       // used when service_proxy (filled from `agent`)
  // --control-plane=etcd: endpoints, prefix, TLS, lease, subnet sizes.
  EtcdOptions etcd;
  // What weftd does instead of running.
  std::string install_plugin;         // copy this plugin into cni_bin_dir and exit
  std::string cni_bin_dir = "/opt/cni/bin";
  bool leave = false;                 // withdraw the node from etcd and exit
  log::Level log_level = log::Level::kInfo;
  std::string log_file;               // "" = stderr
};

struct ParsedFlags {
  // Set when weftd is to exit now with it: --help or --version printed
  // (0), or a usage error CLI11 printed (its code).
  std::optional<int> exit_code;
  // A value CLI11 accepted that weftd cannot use (a bad --cluster-cidr,
  // --network-policy=true with etcd, no --node-name). `flags` is filled as
  // far as it got; its log_level and log_file are valid unless the error
  // names --log-level, so main can log the error where the operator looks.
  Status invalid;
  WeftdFlags flags;
};

// Parses argv (and the --config file). `version` is what --version prints.
// NODE_NAME and KUBECONFIG are read from the environment for --node-name
// and --kubeconfig. Prints help, the version and usage errors to
// stdout/stderr as CLI11 does.
ParsedFlags ParseWeftdFlags(int argc, const char* const* argv, const std::string& version);

}  // namespace weft::agent
