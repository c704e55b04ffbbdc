#include "doctor/guard_cmd.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <ostream>

#include "fw/guard_counters.h"
#include "fw/source_guard.h"
#include "ipam/store.h"
#include "sys/netlink.h"

namespace weft::doctor {
namespace {

using nlohmann::json;
using runtime::ctl::Context;

class GuardCommand : public runtime::ctl::Command {
 public:
  CLI::App* Register(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "guard", "Show the source guard (packets from a pod must carry its own address): tables and drop counters");
    allow_ = sub->add_subcommand(
        "allow",
        "Set the extra source prefixes one pod may send from (its opt-out; without PREFIX, clear it). Risk: "
        "the pod can then send as any address in them, other pods' included (docs/security.md)");
    allow_->add_option("pod", pod_, "the pod: namespace/name (looked up in --data-dir) or its host interface wft...")
        ->required();
    allow_->add_option("prefix", prefixes_, "CIDRs, e.g. 10.8.0.0/24 fd00:8::/64");
    allow_->add_option("--data-dir", data_dir_, "the plugin's dataDir")->capture_default_str();
    return sub;
  }

  int Run(Context& ctx) override { return allow_->parsed() ? Allow(ctx) : Show(ctx); }

 private:
  int Show(Context& ctx) {
    auto c = fw::ReadGuardCounters();
    if (!c.ok()) return ctx.Fail("guard", c.status());
    if (ctx.global.json) {
      json j = {{"routed", {{"installed", c->routed_installed}, {"dropped_ipv4", c->routed4}, {"dropped_ipv6", c->routed6}}},
                {"bridge",
                 {{"installed", c->bridge_installed},
                  {"dropped_ipv4", c->bridge4},
                  {"dropped_ipv6", c->bridge6},
                  {"dropped_mac", c->bridge_mac}}}};
      *ctx.out << j.dump(2) << "\n";
      return runtime::ctl::kExitOk;
    }
    *ctx.out << "routed (table netdev weft-guard):        ";
    if (c->routed_installed)
      *ctx.out << "installed; dropped " << c->routed4 << " IPv4, " << c->routed6 << " IPv6 packet(s)\n";
    else
      *ctx.out << "not installed (no routed pod attached since the node started)\n";
    *ctx.out << "bridge (table netdev weft-guard-bridge): ";
    if (c->bridge_installed)
      *ctx.out << "installed; dropped " << c->bridge4 << " IPv4/ARP, " << c->bridge6 << " IPv6/NDP, " << c->bridge_mac
               << " foreign-MAC or non-IP frame(s)\n";
    else
      *ctx.out << "not installed (no bridge pod attached since the node started)\n";
    return runtime::ctl::kExitOk;
  }

  int Allow(Context& ctx) {
    std::vector<IpPrefix> prefixes;
    for (const auto& p : prefixes_) {
      auto parsed = IpPrefix::Parse(p);
      if (!parsed) {
        *ctx.err << "weftctl guard allow: \"" << p << "\" is not a CIDR\n";
        return runtime::ctl::kExitUsage;
      }
      prefixes.push_back(parsed->Masked());
    }
    std::string port = pod_;
    if (pod_.find('/') != std::string::npos) {
      auto store = ipam::Store::Open(data_dir_);
      if (!store.ok()) return ctx.Fail("guard allow", store.status());
      auto rows = store->ListPods("");
      if (!rows.ok()) return ctx.Fail("guard allow", rows.status());
      port.clear();
      for (const auto& r : *rows)
        if (r.pod_namespace + "/" + r.pod_name == pod_) port = r.host_ifname;
      if (port.empty()) {
        *ctx.err << "weftctl guard allow: no attachment of pod " << pod_ << " in " << data_dir_ << "\n";
        return runtime::ctl::kExitConfig;
      }
    }
    auto nl = sys::Netlink::Open();
    if (!nl.ok()) return ctx.Fail("guard allow", nl.status());
    auto link = nl->GetLink(port);
    if (!link.ok()) return ctx.Fail("guard allow", link.status());
    if (!*link) {
      *ctx.err << "weftctl guard allow: no interface " << port << " on this node\n";
      return runtime::ctl::kExitConfig;
    }
    // A bridge port is guarded by weft-guard-bridge, a routed veth by weft-guard.
    const fw::GuardMode mode = (*link)->master ? fw::GuardMode::kBridge : fw::GuardMode::kRouted;
    if (Status st = fw::SetAllowedSources(mode, port, prefixes); !st.ok()) return ctx.Fail("guard allow", st);
    auto now = fw::AllowedSources(mode, port);
    if (!now.ok()) return ctx.Fail("guard allow", now.status());
    *ctx.out << port << ": may send from its own addresses";
    for (const auto& p : *now) *ctx.out << ", " << p.ToString();
    *ctx.out << "\n";
    return runtime::ctl::kExitOk;
  }

  CLI::App* allow_ = nullptr;
  std::string pod_, data_dir_ = "/var/lib/weft";
  std::vector<std::string> prefixes_;
};

}  // namespace

void AddGuardCommand(runtime::ctl::Ctl& ctl) { ctl.Add(std::make_unique<GuardCommand>()); }

}  // namespace weft::doctor
