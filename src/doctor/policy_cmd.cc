#include "doctor/policy_cmd.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>

#include "doctor/policy.h"
#include "doctor/policy_drops.h"
#include "doctor/policy_explain.h"
#include "doctor/weftd.h"
#include "sys/http.h"

namespace weft::doctor {
namespace {

using nlohmann::json;
using runtime::ctl::Context;

// "namespace/name": exactly one '/', with text on both sides.
bool IsPodName(const std::string& pod) {
  size_t slash = pod.find('/');
  return slash != std::string::npos && slash != 0 && slash + 1 != pod.size() &&
         pod.find('/', slash + 1) == std::string::npos;
}

// GET /netpol/ruleset parsed; nullopt when weftd or the parse fails.
std::optional<NftTable> FetchRuleset(Weftd& weftd) {
  auto rs = weftd.Get("/netpol/ruleset?format=json");
  if (!rs.ok() || rs->status != 200) return std::nullopt;
  auto t = NetpolRulesetTable(rs->body);
  if (!t.ok()) return std::nullopt;
  return std::move(*t);
}

// --json output: each pod as weftd sent it, plus the elements of the sets
// its rules name when the ruleset is known.
json PolicyJson(const std::string& addr, std::optional<bool> ready, const std::vector<PolicyPod>& pods,
                const NftTable* ruleset) {
  json out = {{"weftd", addr}, {"ready", ready ? json(*ready) : json(nullptr)}, {"pods", json::array()}};
  for (const auto& p : pods) {
    json o = p.raw;
    if (ruleset) {
      json sets = json::object();
      for (const auto* rules : {&p.ingress_rules, &p.egress_rules, &p.node_rules})
        for (const auto& r : *rules)
          for (const auto& name : RuleSetRefs(r))
            if (auto it = ruleset->sets.find(name); it != ruleset->sets.end())
              sets[name] = std::vector<std::string>(it->second.elements.begin(), it->second.elements.end());
      o["sets"] = std::move(sets);
    }
    out["pods"].push_back(std::move(o));
  }
  return out;
}

class PolicyCommand : public runtime::ctl::Command {
 public:
  CLI::App* Register(CLI::App& app) override {
    CLI::App* sub =
        app.add_subcommand("policy",
                           "Show what weftd enforces for this node's pods: addresses, isolation per direction, the "
                           "NetworkPolicies selecting each pod and the rules of its chains");
    sub->add_option("pod", pod_, "namespace/name of a pod on this node (default: every local pod)");
    sub->add_option("--weftd-addr", addr_, "weftd's metrics address (host:port)")->capture_default_str();
    sub->add_option("--token-file", token_file_, kTokenFileHelp);
    sub->add_option("--max-elements", max_elements_, "Set elements shown per set (text output)")
        ->check(CLI::Range(0, 1000000))
        ->capture_default_str();
    explain_.Register(*sub);
    drops_.Register(*sub);
    return sub;
  }

  int Run(Context& ctx) override {
    if (explain_.parsed()) return explain_.Run(ctx);
    if (drops_.parsed()) return drops_.Run(ctx);
    if (!pod_.empty() && !IsPodName(pod_))
      return Error(ctx, runtime::ctl::kExitUsage, "POD must be namespace/name, not \"" + pod_ + "\"");
    if (Status st = sys::InitHttp(); !st.ok()) return Error(ctx, runtime::ctl::kExitFailed, st.msg(), st.details());
    Weftd weftd(addr_, std::chrono::seconds(10), token_file_);

    std::vector<PolicyPod> pods;
    if (int rc = FetchPods(ctx, weftd, &pods); rc != runtime::ctl::kExitOk) return rc;
    if (!pod_.empty())
      if (int rc = KeepOnlyPod(ctx, &pods); rc != runtime::ctl::kExitOk) return rc;

    // The sets the rules name, from the ruleset weftd wants; without it the
    // rules are still shown.
    std::optional<NftTable> ruleset = FetchRuleset(weftd);
    if (!ruleset) *ctx.err << "weftctl policy: note: set contents not shown (GET /netpol/ruleset failed)\n";
    std::optional<bool> ready;
    if (auto m = weftd.Get("/metrics"); m.ok() && m->status == 200) ready = NetpolReadyMetric(m->body);
    if (ready && !*ready)
      *ctx.err << "weftctl policy: warning: weftd has not yet enforced network policy from complete lists of "
                  "pods, namespaces and policies: what it shows may be incomplete\n";

    if (ctx.global.json) {
      *ctx.out << PolicyJson(addr_, ready, pods, ruleset ? &*ruleset : nullptr).dump(2) << "\n";
      return runtime::ctl::kExitOk;
    }
    if (pod_.empty())
      *ctx.out << "weftd at " << addr_ << ": " << pods.size() << " local pod(s) with an address\n"
               << (pods.empty() ? "" : "\n");
    *ctx.out << RenderPolicyText(pods, ruleset ? &*ruleset : nullptr, max_elements_);
    return runtime::ctl::kExitOk;
  }

 private:
  // GET /netpol: the local pods weftd enforces policy for.
  int FetchPods(Context& ctx, Weftd& weftd, std::vector<PolicyPod>* out) const {
    auto resp = weftd.Get("/netpol");
    if (!resp.ok())
      return Error(ctx, runtime::ctl::kExitFailed,
                   Weftd::Explain(resp.status()),
                   resp.status().details());
    if (resp->status == 404)
      return Error(ctx, runtime::ctl::kExitConfig,
                   "weftd at " + addr_ +
                       " does not enforce NetworkPolicy (GET /netpol: 404): it runs with "
                       "--network-policy=false or --control-plane=etcd");
    if (resp->status != 200)
      return Error(ctx, runtime::ctl::kExitFailed,
                   "weftd at " + addr_ + " answered GET /netpol with HTTP " + std::to_string(resp->status), resp->body);
    auto pods = ParsePolicyPods(resp->body);
    if (!pods.ok()) return Error(ctx, runtime::ctl::kExitFailed, pods.status().msg(), pods.status().details());
    *out = std::move(*pods);
    return runtime::ctl::kExitOk;
  }

  // Narrows `pods` to the one named on the command line; fails, naming a few
  // pods of the same namespace, when weftd does not know it.
  int KeepOnlyPod(Context& ctx, std::vector<PolicyPod>* pods) const {
    std::vector<PolicyPod> one;
    std::vector<std::string> same_ns;
    const std::string ns = pod_.substr(0, pod_.find('/') + 1);
    for (auto& p : *pods) {
      if (p.pod == pod_)
        one.push_back(p);
      else if (p.pod.rfind(ns, 0) == 0 && same_ns.size() < 10)
        same_ns.push_back(p.pod);
    }
    if (one.empty()) {
      std::string msg = "pod " + pod_ + " is not a local pod weftd knows: weftd at " + addr_ + " knows " +
                        std::to_string(pods->size()) + " local pod(s) with an address on this node";
      if (!same_ns.empty()) {
        msg += " (in namespace " + ns.substr(0, ns.size() - 1) + ":";
        for (const auto& s : same_ns) msg += " " + s;
        msg += ")";
      }
      return Error(ctx, runtime::ctl::kExitConfig, msg,
                   "weftd lists the pods of its own node that have an address and are neither Succeeded nor "
                   "Failed, nor hostNetwork");
    }
    *pods = std::move(one);
    return runtime::ctl::kExitOk;
  }
  // "weftctl policy: <msg>" (+ details) on stderr; with --json also
  // {"error", "details"} on stdout.
  static int Error(Context& ctx, int code, const std::string& msg, const std::string& details = "") {
    *ctx.err << "weftctl policy: " << msg << "\n";
    if (!details.empty()) *ctx.err << "  details: " << details << "\n";
    if (ctx.global.json) {
      json j = {{"error", msg}, {"exitCode", code}};
      if (!details.empty()) j["details"] = details;
      *ctx.out << j.dump(2) << "\n";
    }
    return code;
  }

  PolicyExplainCommand explain_;
  PolicyDropsCommand drops_;
  std::string pod_;
  std::string addr_ = kDefaultWeftdAddr;
  std::string token_file_;
  size_t max_elements_ = 16;
};

}  // namespace

void AddPolicyCommand(runtime::ctl::Ctl& ctl) { ctl.Add(std::make_unique<PolicyCommand>()); }

}  // namespace weft::doctor
