#include "doctor/doctor_cmd.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <ostream>

#include "agent/families.h"
#include "agent/http.h"
#include "base/strings.h"
#include "cni/netconf.h"
#include "doctor/doctor.h"
#include "doctor/doctor_io.h"
#include "runtime/conf.h"

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
  return Status::Error(Code::kInvalidConfig, "network \"" + network + "\" has no weft plugin");
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
    sub->add_option("--kubeconfig", opts_.kubeconfig, "Kubeconfig to list Nodes from (instead of etcd)");
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
    Options o = opts_;
    std::vector<std::string> notes;
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
        if (auto r = agent::OfFamily(cfg->ranges, v6)) o.pod_cidrs.push_back(r->Masked());
    } else {
      notes.push_back("no usable config for network \"" + network_ + "\" in " + ctx.ConfDir() + " (" +
                      cfg.status().msg() + "): using defaults");
    }
    if (!data_dir_.empty()) o.data_dir = data_dir_;
    for (auto part : Split(etcd_endpoints_, ','))
      if (auto t = Trim(part); !t.empty()) o.etcd_endpoints.emplace_back(t);
    while (o.etcd_prefix.size() > 1 && o.etcd_prefix.back() == '/') o.etcd_prefix.pop_back();
    if (Status st = agent::InitHttp(); !st.ok()) return ctx.Fail("doctor", st);

    auto snap = ReadSnapshot(o);
    if (!snap.ok()) return ctx.Fail("doctor", snap.status());
    notes.insert(notes.end(), snap->notes.begin(), snap->notes.end());
    std::vector<std::string> warnings = snap->warnings;
    std::vector<Finding> found = Diagnose(*snap);
    std::vector<Finding> remaining = found;
    FixReport fixed;
    bool incomplete = snap->incomplete;
    if (fix_ && Fixable(found) > 0) {
      fixed = Fix(o, *snap, found);
      auto again = ReadSnapshot(o);
      if (!again.ok()) return ctx.Fail("doctor: re-check after --fix", again.status());
      remaining = Diagnose(*again);
      incomplete = again->incomplete;
    }
    const int code = !remaining.empty() ? runtime::ctl::kExitDiscrepancies
                     : incomplete       ? runtime::ctl::kExitFailed
                                        : runtime::ctl::kExitOk;

    if (ctx.global.json) {
      json j = {{"dataDir", o.data_dir}, {"notes", notes}, {"warnings", warnings}, {"attachments", snap->pods.size()}};
      j["findings"] = json::array();
      for (const auto& f : found) j["findings"].push_back(FindingJson(f));
      if (fix_) {
        j["fixed"] = fixed.done;
        j["fixFailed"] = fixed.failed;
        j["remaining"] = json::array();
        for (const auto& f : remaining) j["remaining"].push_back(FindingJson(f));
      }
      j["clean"] = remaining.empty() && !incomplete;
      j["exitCode"] = code;
      *ctx.out << j.dump(2) << "\n";
      return code;
    }
    std::ostream& out = *ctx.out;
    out << "weftctl doctor: dataDir " << o.data_dir << ", " << snap->pods.size() << " attachment(s)\n";
    for (const auto& n : notes) out << "note: " << n << "\n";
    for (const auto& w : warnings) out << "warning: " << w << "\n";
    if (found.empty()) {
      out << (incomplete ? "no discrepancies in what could be checked\n" : "no discrepancies\n");
      return code;
    }
    PrintFindings(out, "PROBLEM", found);
    out << found.size() << " problem(s), " << Fixable(found) << " fixable with --fix\n";
    if (!fix_) return code;
    for (const auto& d : fixed.done) out << "fixed: " << d << "\n";
    for (const auto& d : fixed.failed) out << "fix failed: " << d << "\n";
    if (remaining.empty()) {
      out << "after --fix: no discrepancies\n";
    } else {
      out << "after --fix: " << remaining.size() << " problem(s) remain\n";
      PrintFindings(out, "REMAINS", remaining);
    }
    return code;
  }

 private:
  Options opts_;
  bool fix_ = false;
  std::string network_ = "weft";
  std::string data_dir_;
  std::string etcd_endpoints_;
};

}  // namespace

void AddDoctorCommand(runtime::ctl::Ctl& ctl) { ctl.Add(std::make_unique<DoctorCommand>()); }

}  // namespace weft::doctor
