// weftd: the Weft node agent (docs/weftd.md). Only main(): the flags
// (parsed in agent/weftd_flags.h), logging, the control plane chosen by
// them, signals; the work lives in src/agent.

#include <malloc.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>

#include "agent/agent.h"
#include "agent/conflist.h"
#include "agent/etcd.h"
#include "agent/kube.h"
#include "agent/weftd_flags.h"
#include "base/log.h"
#include "build_info.h"
#include "sys/exec.h"
#include "sys/http.h"
#include "sys/log_file.h"

namespace {

using weft::Status;
namespace agent = weft::agent;
namespace kube = weft::kube;
namespace policy = weft::policy;

// Set once --log-file names a file: stderr then gets the reason too.
bool g_logs_to_file = false;

// The logfmt `msg=exiting` record; when the log goes to a file, also one
// plain line on stderr, which is what `kubectl logs` and a terminal show.
int Fail(const Status& st) {
  if (g_logs_to_file) std::fprintf(stderr, "weftd: %s\n", st.ToString().c_str());
  WEFT_LOG(kError, "exiting", {"err", st});
  return 1;
}

Status SetUpLogging(const agent::WeftdFlags& f) {
  weft::log::SetLevel(f.log_level);
  if (Status st = weft::sys::SetLogFile(f.log_file); !st.ok()) return st.WithPrefix("--log-file");
  g_logs_to_file = !f.log_file.empty();
  weft::log::SetContext({{"component", "weftd"}});
  return Status::Ok();
}

// The control plane the flags name; with Kubernetes, also the status
// server's token reviewer (*reviewer; etcd has no TokenReview) and, with
// NetworkPolicy on, the policy controller (*netpol) and with --service-proxy
// the Service proxy (*proxy), all sharing its API endpoint.
weft::Result<std::unique_ptr<agent::ControlPlane>> NewControlPlane(agent::WeftdFlags& f,
                                                                   std::unique_ptr<policy::NetpolController>* netpol,
                                                                   std::unique_ptr<weft::services::ProxyController>* proxy,
                                                                   std::unique_ptr<agent::TokenReviewer>* reviewer) {
  if (f.control_plane == "etcd") return agent::NewEtcdControlPlane(std::move(f.etcd));
  auto ep = f.kubeconfig.empty() ? kube::InClusterEndpoint(weft::sys::CurrentEnv(), f.service_account_dir)
                                 : kube::KubeconfigEndpoint(f.kubeconfig, f.agent.state_dir + "/kubeconfig-data");
  if (!ep.ok()) return ep.status();
  agent::KubeOptions k;
  k.endpoint = std::move(ep).value();
  k.watch_timeout_seconds = f.watch_timeout_seconds;
  if (f.agent.network_policy)
    *netpol = std::make_unique<policy::NetpolController>(std::move(f.netpol), k.endpoint, policy::NewNetpolKernel());
  if (f.service_proxy) *proxy = std::make_unique<weft::services::ProxyController>(std::move(f.proxy), k.endpoint);
  *reviewer = agent::NewKubeTokenReviewer(k.endpoint);
  return agent::NewKubeControlPlane(std::move(k));
}

// Runs the agent until SIGTERM or SIGINT (or a fatal error). Signals go to
// one waiting thread; every other thread has them blocked.
Status RunUntilSignalled(agent::Agent& a, sigset_t set) {
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
  return st;
}

int RealMain(int argc, char** argv) {
  const std::string version = std::string("weftd ") + weft::build::kVersion + " (commit " + weft::build::kCommit + ")";
  agent::ParsedFlags parsed = agent::ParseWeftdFlags(argc, argv, version);
  if (parsed.exit_code) return *parsed.exit_code;
  agent::WeftdFlags& f = parsed.flags;
  if (Status st = SetUpLogging(f); !st.ok()) return Fail(st);
  WEFT_LOG(kInfo, "starting", {"version", weft::build::kVersion}, {"commit", weft::build::kCommit});
  if (!parsed.invalid.ok()) return Fail(parsed.invalid);
  f.agent.version = weft::build::kVersion;
  f.agent.commit = weft::build::kCommit;

  if (!f.install_plugin.empty()) {
    bool changed = false;
    if (Status st = agent::InstallPlugin(f.install_plugin, f.cni_bin_dir, "weft", &changed); !st.ok()) return Fail(st);
    WEFT_LOG(kInfo, "installed plugin", {"dir", f.cni_bin_dir}, {"changed", changed});
    return 0;
  }
  if (Status st = weft::sys::InitHttp(); !st.ok()) return Fail(st);
  std::unique_ptr<policy::NetpolController> netpol;
  std::unique_ptr<weft::services::ProxyController> proxy;
  std::unique_ptr<agent::TokenReviewer> reviewer;
  auto cp = NewControlPlane(f, &netpol, &proxy, &reviewer);
  if (!cp.ok()) return Fail(cp.status());
  if (f.leave) {
    if (Status st = (*cp)->Leave(); !st.ok()) return Fail(st);
    WEFT_LOG(kInfo, "left the network", {"node", f.agent.node_name});
    return 0;
  }

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  agent::Agent a(std::move(f.agent), std::move(cp).value());
  if (netpol) a.SetNetworkPolicy(std::move(netpol));
  if (proxy) a.SetServiceProxy(std::move(proxy));
  if (reviewer) a.SetTokenReviewer(std::move(reviewer));
  if (Status st = RunUntilSignalled(a, set); !st.ok()) return Fail(st);
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
