#include "doctor/doctor_cmd.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <ostream>

#include "base/strings.h"
#include "cni/netconf.h"
#include "doctor/doctor.h"
#include "doctor/doctor_io.h"
#include "overlay/families.h"
#include "runtime/conf.h"
#include "sys/http.h"

namespace weft::doctor {
namespace {

using nlohmann::json;
using runtime::ctl::Context;

// The weft plugin's config in the network's conflist, if there is one.
Result<plugin::Config> NetworkConfig(const std::string& conf_dir, const std::string& network) {
  WEFT_ASSIGN_OR_RETURN(auto list, runtime::FindNetwork(conf_dir, network));
  for (const auto& p : list.plugins) {
    if (p.type != "weft") continue;
    json raw = p.raw;
    raw["name"] = list.name;
    raw["cniVersion"] = list.cni_version;
    WEFT_ASSIGN_OR_RETURN(auto net, cni::ParseNetConf(raw.dump()));
    return plugin::ParseConfig(net);
  }
  return Status::Error(Reason::kInvalidArgument, Domain::kConfig, "network \"" + network + "\" has no weft plugin");
}

json FindingJson(const Finding& f) {
  return {{"kind", KindName(f.kind)},
          {"subject", f.subject},
          {"message", f.message},
          {"fixable", f.fixable},
          {f.fixable ? "fix" : "leftBecause", f.remedy},
          {"details", f.details}};
}

void PrintFindings(std::ostream& out, const char* tag, const std::vector<Finding>& fs) {
  for (const auto& f : fs) {
    out << tag << " [" << KindName(f.kind) << "] " << f.message << "\n";
    for (const auto& d : f.details) out << "        - " << d << "\n";
    out << "        " << (f.fixable ? "--fix will: " : "left alone: ") << f.remedy << "\n";
  }
}

size_t Fixable(const std::vector<Finding>& fs) {
  size_t n = 0;
  for (const auto& f : fs) n += f.fixable ? 1 : 0;
  return n;
}

class DoctorCommand : public runtime::ctl::Command {
 public:
  CLI::App* Register(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "doctor", "Compare the kernel, the IPAM database and the control plane on this node; report (and with --fix "
                  "repair) every discrepancy");
    sub->add_flag("--fix", fix_, "Repair what is safe to repair, then check again");
    sub->add_option("--network", network_, "CNI network whose conflist names the dataDir and ranges")
        ->capture_default_str();
    sub->add_option("--data-dir", data_dir_, "The plugin's dataDir (default: the conflist's, else /var/lib/weft)");
    sub->add_option("--etcd-endpoints", etcd_endpoints_, "Comma-separated etcd client URLs, as weftd's flag");
    sub->add_option("--etcd-prefix", opts_.etcd_prefix, "Key prefix of the network in etcd")->capture_default_str();
    sub->add_option("--kubeconfig", opts_.kubeconfig,
                    "Kubeconfig to list Nodes from (instead of etcd; in a pod, default: its service account)");
    sub->add_option("--service-account-dir", opts_.service_account_dir,
                    "In a pod without --kubeconfig or --etcd-endpoints: the service account's token and CA")
        ->capture_default_str();
    sub->add_option("--node-name", opts_.node_name,
                    "This node's name in the control plane (default: the record whose host IP is the uplink's)");
    sub->add_option("--iface", opts_.iface, "Uplink interface, as weftd's flag");
    sub->add_option("--node-ip", opts_.node_ip, "This node's underlay IPv4, as weftd's flag");
    sub->add_option("--vxlan-device", opts_.vxlan_device, "weftd's VXLAN device")->capture_default_str();
    sub->add_option("--weftd-state-dir", opts_.weftd_state_dir,
                    "weftd's --state-dir: the masquerade lock, and where a kubeconfig's inline credentials go")
        ->capture_default_str();
    sub->add_option("--stuck-after", opts_.stuck_after_s,
                    "Seconds after which an attachment still in state adding/deleting is reported as stuck")
        ->check(CLI::Range(0, 86400 * 365))
        ->capture_default_str();
    sub->add_option("--weftd-addr", opts_.weftd_addr,
                    "weftd's metrics address, for its NetworkPolicy ruleset (\"\" skips the network policy check)")
        ->capture_default_str();
    sub->add_option("--control-plane-timeout-ms", opts_.control_plane_timeout_ms, "How long to wait for the control plane's list")
        ->capture_default_str();
    return sub;
  }

  int Run(Context& ctx) override {
    Outcome r;
    Options o = ResolveOptions(ctx, &r.notes);
    if (Status st = sys::InitHttp(); !st.ok()) return ctx.Fail("doctor", st);

    auto snap = ReadSnapshot(o);
    if (!snap.ok()) return ctx.Fail("doctor", snap.status());
    r.notes.insert(r.notes.end(), snap->notes.begin(), snap->notes.end());
    r.warnings = snap->warnings;
    r.attachments = snap->pods.size();
    r.found = Diagnose(*snap);
    r.remaining = r.found;
    r.incomplete = snap->incomplete;
    if (fix_ && Fixable(r.found) > 0) {
      r.fixed = Fix(o, *snap, r.found);
      auto again = ReadSnapshot(o);
      if (!again.ok()) return ctx.Fail("doctor: re-check after --fix", again.status());
      r.remaining = Diagnose(*again);
      r.incomplete = again->incomplete;
    }
    r.code = !r.remaining.empty() ? runtime::ctl::kExitDiscrepancies
             : r.incomplete       ? runtime::ctl::kExitFailed
                                  : runtime::ctl::kExitOk;
    if (ctx.global.json) *ctx.out << OutcomeJson(o.data_dir, r).dump(2) << "\n";
    else PrintOutcome(*ctx.out, o.data_dir, r);
    return r.code;
  }

 private:
  // What one run found, what --fix did, and what remains.
  struct Outcome {
    std::vector<std::string> notes, warnings;
    size_t attachments = 0;
    std::vector<Finding> found, remaining;
    FixReport fixed;
    bool incomplete = false;
    int code = runtime::ctl::kExitOk;
  };

  // The options: the network's conflist (dataDir, backends, masquerade,
  // pod CIDRs; defaults and a note when it is unusable), then the flags.
  Options ResolveOptions(Context& ctx, std::vector<std::string>* notes) const {
    Options o = opts_;
    auto cfg = NetworkConfig(ctx.ConfDir(), network_);
    if (cfg.ok()) {
      o.data_dir = cfg->data_dir;
      o.hostport_backend = cfg->masquerade_backend;
      o.masquerade_backend = cfg->masquerade_backend;
      std::vector<IpPrefix> sources = cfg->delegated_ipam.empty() ? cfg->ranges : cfg->ipam_subnets;
      if (!sources.empty() && (cfg->masquerade || !cfg->cluster_cidrs.empty())) {
        o.masquerade = fw::MasqueradeSpec{cfg->net.name, sources, cfg->cluster_cidrs};
        o.masquerade_required = cfg->masquerade;
      }
      for (bool v6 : {false, true})
        if (auto r = overlay::OfFamily(cfg->ranges, v6)) o.pod_cidrs.push_back(r->Masked());
    } else {
      notes->push_back("no usable config for network \"" + network_ + "\" in " + ctx.ConfDir() + " (" +
                       cfg.status().msg() + "): using defaults");
    }
    if (!data_dir_.empty()) o.data_dir = data_dir_;
    for (auto part : Split(etcd_endpoints_, ','))
      if (auto t = Trim(part); !t.empty()) o.etcd_endpoints.emplace_back(t);
    while (o.etcd_prefix.size() > 1 && o.etcd_prefix.back() == '/') o.etcd_prefix.pop_back();
    return o;
  }

  json OutcomeJson(const std::string& data_dir, const Outcome& r) const {
    json j = {{"dataDir", data_dir}, {"notes", r.notes}, {"warnings", r.warnings}, {"attachments", r.attachments}};
    j["findings"] = json::array();
    for (const auto& f : r.found) j["findings"].push_back(FindingJson(f));
    if (fix_) {
      j["fixed"] = r.fixed.done;
      j["fixFailed"] = r.fixed.failed;
      j["remaining"] = json::array();
      for (const auto& f : r.remaining) j["remaining"].push_back(FindingJson(f));
    }
    j["clean"] = r.remaining.empty() && !r.incomplete;
    j["exitCode"] = r.code;
    return j;
  }

  void PrintOutcome(std::ostream& out, const std::string& data_dir, const Outcome& r) const {
    out << "weftctl doctor: dataDir " << data_dir << ", " << r.attachments << " attachment(s)\n";
    for (const auto& n : r.notes) out << "note: " << n << "\n";
    for (const auto& w : r.warnings) out << "warning: " << w << "\n";
    if (r.found.empty()) {
      out << (r.incomplete ? "no discrepancies in what could be checked\n" : "no discrepancies\n");
      return;
    }
    PrintFindings(out, "PROBLEM", r.found);
    out << r.found.size() << " problem(s), " << Fixable(r.found) << " fixable with --fix\n";
    if (!fix_) return;
    for (const auto& d : r.fixed.done) out << "fixed: " << d << "\n";
    for (const auto& d : r.fixed.failed) out << "fix failed: " << d << "\n";
    if (r.remaining.empty()) {
      out << "after --fix: no discrepancies\n";
    } else {
      out << "after --fix: " << r.remaining.size() << " problem(s) remain\n";
      PrintFindings(out, "REMAINS", r.remaining);
    }
  }

  Options opts_;
  bool fix_ = false;
  std::string network_ = "weft";
  std::string data_dir_;
  std::string etcd_endpoints_;
};

}  // namespace

void AddDoctorCommand(runtime::ctl::Ctl& ctl) { ctl.Add(std::make_unique<DoctorCommand>()); }

}  // namespace weft::doctor
