#include "doctor/service_cmd.h"

#include <CLI/CLI.hpp>
#include <map>
#include <ostream>
#include <set>

#include "base/json_util.h"
#include "doctor/policy_explain.h"
#include "doctor/weftd.h"
#include "sys/http.h"

namespace weft::doctor {
namespace {

using nlohmann::json;
using runtime::ctl::Context;

bool Bool(const json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_boolean() && it->get<bool>();
}
int Int(const json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_number_integer() ? it->get<int>() : 0;
}
std::string Join(const json& arr, const char* sep = ", ") {
  std::string out;
  if (!arr.is_array()) return out;
  for (const auto& v : arr)
    if (v.is_string()) out += (out.empty() ? "" : sep) + v.get<std::string>();
  return out;
}
std::string HostPort(const std::string& addr, int port) {
  return (addr.find(':') != std::string::npos ? "[" + addr + "]" : addr) + ":" + std::to_string(port);
}

std::string EndpointLine(const json& x) {
  std::string out = HostPort(JsonStr(x, "address"), Int(x, "port"));
  out += Bool(x, "local") ? "  on this node" : "  elsewhere";
  std::string state = Bool(x, "ready") ? "ready" : "not ready";
  if (Bool(x, "serving") && !Bool(x, "ready")) state += ", serving";
  if (Bool(x, "terminating")) state += ", terminating";
  out += "  " + state;
  std::string picked;
  if (Bool(x, "clusterPolicy")) picked = "Cluster";
  if (Bool(x, "localPolicy")) picked += std::string(picked.empty() ? "" : " and ") + "Local";
  out += "  picked by " + (picked.empty() ? std::string("no policy chain") : picked + " policy");
  out += "  chain " + JsonStr(x, "chain");
  return out;
}

}  // namespace

std::string RenderServiceExplanation(const json& e) {
  std::string out = "Service " + JsonStr(e, "service") + " (" + JsonStr(e, "type") + ")";
  if (!JsonStr(e, "node").empty()) out += " as node " + JsonStr(e, "node") + "'s table inet weft-services serves it";
  out += "\n";
  if (!JsonStr(e, "skip").empty()) {
    out += "  not served by Weft's proxy: " + JsonStr(e, "skip") + "\n";
    return out;
  }
  out += "  sessionAffinity " + JsonStr(e, "sessionAffinity");
  if (JsonStr(e, "sessionAffinity") == "ClientIP") out += " (timeout " + std::to_string(Int(e, "affinityTimeoutSeconds")) + " s)";
  out += ", internalTrafficPolicy " + JsonStr(e, "internalTrafficPolicy");
  out += ", externalTrafficPolicy " + JsonStr(e, "externalTrafficPolicy") +
         (Bool(e, "externalTrafficPolicyApplies") ? "" : " (not externally accessible: does not apply)");
  if (!JsonStr(e, "trafficDistribution").empty()) out += ", trafficDistribution " + JsonStr(e, "trafficDistribution");
  out += "\n";
  const json& ports = e.value("ports", json::array());
  if (ports.empty()) out += "  no service port in the table\n";
  for (const auto& p : ports) {
    out += "\nport " + (JsonStr(p, "name").empty() ? std::string("(unnamed)") : JsonStr(p, "name")) + " " +
           JsonStr(p, "protocol") + "/" + std::to_string(Int(p, "port")) + ", " + JsonStr(p, "family");
    if (Int(p, "nodePort")) out += ", NodePort " + std::to_string(Int(p, "nodePort"));
    out += " (" + JsonStr(p, "portName") + ")\n";
    const json& eps = p.value("endpoints", json::array());
    if (eps.empty())
      out += Bool(p, "hasEndpoints") ? "  endpoints: none this node may use (some exist elsewhere)\n"
                                     : "  endpoints: none usable anywhere\n";
    else
      out += "  endpoints with a chain here (" + std::to_string(eps.size()) + "):\n";
    for (const auto& x : eps) out += "    " + EndpointLine(x) + "\n";
    for (const auto& path : p.value("paths", json::array())) {
      const std::string addr = JsonStr(path, "address");
      out += "  a new " + JsonStr(p, "protocol") + " connection to " +
             (addr.empty() ? "any node address, port " + std::to_string(Int(path, "port"))
                           : HostPort(addr, Int(path, "port"))) +
             " (" + JsonStr(path, "kind") + ") meets:\n";
      int n = 0;
      for (const auto& s : path.value("steps", json::array()))
        out += "    " + std::to_string(++n) + ". " + JsonStr(s, "at") + ": " + JsonStr(s, "does") + "\n";
      const std::string v = JsonStr(path, "verdict");
      if (v == "dnat") out += "    " + std::to_string(++n) + ". an endpoint's chain: DNAT to " + Join(path["endpoints"], " or ") + "\n";
      out += "    => " +
             (v == "dnat"     ? std::string("translated to an endpoint")
              : v == "reject" ? std::string("REJECTED (connection refused)")
              : v == "drop"   ? std::string("DROPPED")
                              : std::string("not translated (no entry)")) +
             "\n";
    }
    const std::string chains = Join(p.value("chains", json::array()), "\n    ");
    if (!chains.empty()) out += "  chains:\n    " + chains + "\n";
    const std::string sets = Join(p.value("sets", json::array()), "\n    ");
    if (!sets.empty()) out += "  affinity sets:\n    " + sets + "\n";
  }
  return out;
}

namespace {

class ServiceCommand : public runtime::ctl::Command {
 public:
  CLI::App* Register(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand("service", "Weft's Service proxy on this node (weftd --service-proxy)");
    sub->require_subcommand(1);
    explain_ = sub->add_subcommand(
        "explain",
        "Show what a new connection to a Service meets in table inet weft-services: its endpoints, affinity, "
        "traffic policies, the map, chains and DNAT target or reject/drop verdict; with --from, whether "
        "NetworkPolicy lets that client reach each endpoint");
    explain_->add_option("service", service_, "namespace/name of the Service")->required();
    explain_->add_option("--from", from_,
                         "A client (namespace/name of a pod, or an address): ask weftd's NetworkPolicy model whether "
                         "it may reach each endpoint (the translated destination)");
    explain_->add_option("--weftd-addr", addr_, "weftd's metrics address (host:port)")->capture_default_str();
    explain_->add_option("--token-file", token_file_, kTokenFileHelp);
    return sub;
  }

  int Run(Context& ctx) override {
    if (Status st = sys::InitHttp(); !st.ok()) return Fail(ctx, kServiceNoWeftd, st.msg(), st.details());
    Weftd weftd(addr_, std::chrono::seconds(10), token_file_);
    auto resp = weftd.Get("/services/explain?service=" + PercentEncode(service_));
    if (!resp.ok()) return Fail(ctx, kServiceNoWeftd, Weftd::Explain(resp.status()), resp.status().details());
    json body = json::parse(resp->body, nullptr, /*allow_exceptions=*/false);
    const std::string err = body.is_object() ? JsonStr(body, "error") : "";
    if (resp->status == 400) return Fail(ctx, kServiceBadInput, err.empty() ? resp->body : err);
    if (resp->status == 404 && !err.empty()) return Fail(ctx, kServiceUnknown, err);
    if (resp->status == 404)
      return Fail(ctx, kServiceNoWeftd,
                  "weftd at " + weftd.addr() +
                      " does not run the Service proxy (GET /services/explain: 404): it runs with "
                      "--service-proxy false, or is older than this weftctl");
    if (resp->status == 503)
      return Fail(ctx, kServiceNoWeftd, "weftd at " + weftd.addr() + " is not ready: " + resp->body.substr(0, 200));
    if (resp->status != 200 || !body.is_object() || !body.contains("ports"))
      return Fail(ctx, kServiceNoWeftd,
                  "weftd at " + weftd.addr() + " answered GET /services/explain with HTTP " +
                      std::to_string(resp->status),
                  resp->body.substr(0, 400));
    json policy = PolicyAfterTranslation(weftd, body);
    if (ctx.global.json) {
      body["policyAfterTranslation"] = policy;
      *ctx.out << body.dump(2) << "\n";
    } else {
      *ctx.out << RenderServiceExplanation(body) << "\npolicy after translation:\n" << JsonStr(policy, "text");
    }
    return kServiceExplained;
  }

 private:
  // NetworkPolicy judges the packet after the DNAT: the endpoint pod is the
  // destination. Whether weftd enforces it here, and with --from, its model's
  // answer for the client and each endpoint.
  json PolicyAfterTranslation(Weftd& weftd, const json& e) const {
    json out = {{"networkPolicy", nullptr}, {"endpoints", json::array()}};
    std::string text;
    auto np = weftd.Get("/netpol");
    if (!np.ok() || (np->status != 200 && np->status != 404)) {
      out["text"] = "  not shown: whether weftd enforces NetworkPolicy could not be read (GET /netpol " +
                    (np.ok() ? "HTTP " + std::to_string(np->status) : np.status().msg()) + ")\n";
      return out;
    }
    if (np->status == 404) {
      out["networkPolicy"] = false;
      out["text"] =
          "  weftd does not enforce NetworkPolicy here (--network-policy false or etcd): no Weft policy filters "
          "the translated packet\n";
      return out;
    }
    out["networkPolicy"] = true;
    text = "  weftd enforces NetworkPolicy: it judges the translated destination (the endpoint pod and its target "
           "port), not the Service's address, as with kube-proxy\n";
    std::set<std::string> asked;
    if (from_.empty()) {
      text += "  not shown: whether a given client may reach each endpoint (give --from POD_OR_IP)\n";
      out["text"] = text;
      return out;
    }
    for (const auto& p : e.value("ports", json::array()))
      for (const auto& x : p.value("endpoints", json::array())) {
        const std::string port = std::to_string(Int(x, "port")) + "/" + JsonStr(p, "protocol");
        const std::string ep = HostPort(JsonStr(x, "address"), Int(x, "port")) + "/" + JsonStr(p, "protocol");
        if (!asked.insert(ep).second) continue;
        json one = {{"endpoint", ep}};
        auto r = weftd.Get("/netpol/explain?src=" + PercentEncode(from_) + "&dst=" + PercentEncode(JsonStr(x, "address")) +
                           "&port=" + PercentEncode(port));
        json b = r.ok() ? json::parse(r->body, nullptr, false) : json();
        if (r.ok() && r->status == 200 && b.is_object() && b.contains("allowed")) {
          one["allowed"] = Bool(b, "allowed");
          one["reason"] = JsonStr(b, "reason");
          text += "  " + from_ + " -> " + ep + ": " + (Bool(b, "allowed") ? "ALLOWED" : "DENIED") + " (" +
                  JsonStr(b, "reason") + ")\n";
        } else {
          const std::string why = !r.ok() ? r.status().msg()
                                  : b.is_object() && !JsonStr(b, "error").empty()
                                      ? JsonStr(b, "error")
                                      : "HTTP " + std::to_string(r->status);
          one["error"] = why;
          text += "  " + from_ + " -> " + ep + ": not known (" + why + ")\n";
        }
        out["endpoints"].push_back(std::move(one));
      }
    if (asked.empty()) text += "  no endpoint to judge\n";
    out["text"] = text;
    return out;
  }

  int Fail(Context& ctx, int code, const std::string& msg, const std::string& details = "") const {
    *ctx.err << "weftctl service explain: " << msg << "\n";
    if (!details.empty()) *ctx.err << "  details: " << details << "\n";
    if (ctx.global.json) *ctx.out << json({{"error", msg}, {"exitCode", code}}).dump(2) << "\n";
    return code;
  }

  CLI::App* explain_ = nullptr;
  std::string service_, from_;
  std::string addr_ = kDefaultWeftdAddr;
  std::string token_file_;
};

}  // namespace

void AddServiceCommand(runtime::ctl::Ctl& ctl) { ctl.Add(std::make_unique<ServiceCommand>()); }

}  // namespace weft::doctor
