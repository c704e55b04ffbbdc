#include "doctor/policy_explain.h"

#include <CLI/CLI.hpp>
#include <ostream>

#include "doctor/weftd.h"
#include "sys/http.h"

namespace weft::doctor {
namespace {

using nlohmann::json;

std::string Str(const json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool Bool(const json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_boolean() && it->get<bool>();
}

std::string Endpoint(const json& e) {
  std::string pod = Str(e, "pod"), ip = Str(e, "ip"), node = Str(e, "node");
  if (pod.empty()) return ip + " (no pod)";
  return pod + " (" + ip + (node.empty() ? "" : ", node " + node) + (Bool(e, "hostNetwork") ? ", hostNetwork" : "") +
         ")";
}

std::string JoinComma(const json& arr) {
  std::string out;
  if (!arr.is_array()) return out;
  for (const auto& v : arr)
    if (v.is_string()) out += (out.empty() ? "" : ", ") + v.get<std::string>();
  return out;
}

void RenderSide(std::string& out, const json& side, const std::string& who, bool with_port) {
  std::string dir = Str(side, "direction");
  std::string head = "  " + dir + " of " + who + ":";
  const size_t col = 24;
  std::string pad(col, ' ');
  out += head + std::string(head.size() < col ? col - head.size() : 1, ' ');
  if (!Bool(side, "judged")) {
    out += Str(side, "note") + "\n";
    return;
  }
  // ClusterNetworkPolicy's tiers (older weftd: absent).
  std::string tiers = JoinComma(side.value("tierPolicies", json::array()));
  std::string decided = Str(side, "decidedBy");
  if (!tiers.empty()) {
    out += "cluster policies " + tiers + "\n" + pad;
    if (!decided.empty() && decided.find(" Pass") == std::string::npos) {
      out += "decided by " + decided + "\n";
      return;
    }
    if (!decided.empty()) out += "passed on by " + decided + "\n" + pad;
  }
  if (!Bool(side, "isolated")) {
    if (!tiers.empty()) {
      out += std::string("no NetworkPolicy isolates it for ") + dir + "; no cluster policy rule denies it\n";
      return;
    }
    out += std::string("not isolated: no policy selects it for ") + dir + ", all " +
           (dir == "ingress" ? "incoming" : "outgoing") + " traffic is allowed\n";
    return;
  }
  out += "isolated by " + JoinComma(side.value("policies", json::array())) + "\n";
  // A judged side with a note: the note decides (a pod to its own node).
  if (std::string note = Str(side, "note"); !note.empty()) {
    out += pad + note + "\n";
    return;
  }
  const json& rules = side.value("admittedBy", json::array());
  bool any = false;
  for (const auto& r : rules) {
    bool admits = with_port || Bool(r, "allPorts");
    out += pad + (admits ? "allowed by " : "partly: ") + Str(r, "what") + " (" + Str(r, "ports") + ")\n";
    any = true;
  }
  if (!any) out += pad + "no rule of " + (side.value("policies", json::array()).size() == 1 ? "it" : "them") +
                   " admits it\n";
}

}  // namespace

std::string PercentEncode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string RenderExplanation(const json& e) {
  std::string out;
  const json& src = e.value("src", json::object());
  const json& dst = e.value("dst", json::object());
  bool with_port = e.contains("port") && e["port"].is_number();
  std::string what = Str(e, "protocol") + (with_port ? " " + std::to_string(e["port"].get<int>()) : " (every port)");
  out += Endpoint(src) + " -> " + Endpoint(dst) + ", IPv" + std::to_string(e.value("family", 4)) + " " + what +
         ": " + (Bool(e, "allowed") ? "ALLOWED" : "DENIED") + "\n";
  std::string src_name = Str(src, "pod").empty() ? Str(src, "ip") : Str(src, "pod");
  std::string dst_name = Str(dst, "pod").empty() ? Str(dst, "ip") : Str(dst, "pod");
  RenderSide(out, e.value("egress", json::object()), src_name, with_port);
  RenderSide(out, e.value("ingress", json::object()), dst_name, with_port);
  out += "  why: " + Str(e, "reason") + "\n";
  return out;
}

void PolicyExplainCommand::Register(CLI::App& policy) {
  sub_ = policy.add_subcommand(
      "explain",
      "Explain whether NetworkPolicy allows a connection from SRC to DST, and why: each side's isolation, the "
      "policies isolating it, the rule admitting the connection (exit 0 allowed, 1 denied)");
  sub_->add_option("src", src_, "The source: namespace/name of a pod, or an address")->required();
  sub_->add_option("dst", dst_, "The destination: namespace/name of a pod, or an address")->required();
  sub_->add_option("port", port_, "PORT or PORT/PROTO (tcp, udp, sctp; default tcp). Without it: every port");
  sub_->add_option("--family", family_, "4 or 6, for two pods that have both (default: IPv4)");
  sub_->add_option("--weftd-addr", addr_, "weftd's metrics address (host:port)")->default_str(kDefaultWeftdAddr);
  sub_->add_option("--token-file", token_file_, kTokenFileHelp);
}

bool PolicyExplainCommand::parsed() const { return sub_ && sub_->parsed(); }

int PolicyExplainCommand::Run(runtime::ctl::Context& ctx) {
  auto fail = [&](int code, const std::string& msg, const std::string& details = "") {
    *ctx.err << "weftctl policy explain: " << msg << "\n";
    if (!details.empty()) *ctx.err << "  details: " << details << "\n";
    if (ctx.global.json) *ctx.out << json({{"error", msg}, {"exitCode", code}}).dump(2) << "\n";
    return code;
  };
  if (Status st = sys::InitHttp(); !st.ok()) return fail(kExplainNoWeftd, st.msg(), st.details());
  Weftd weftd(addr_.empty() ? kDefaultWeftdAddr : addr_, std::chrono::seconds(10), token_file_);
  std::string path = "/netpol/explain?src=" + PercentEncode(src_) + "&dst=" + PercentEncode(dst_);
  if (!port_.empty()) path += "&port=" + PercentEncode(port_);
  if (!family_.empty()) path += "&family=" + PercentEncode(family_);
  auto resp = weftd.Get(path);
  if (!resp.ok())
    return fail(kExplainNoWeftd, Weftd::Explain(resp.status()),
                resp.status().details());
  json body = json::parse(resp->body, nullptr, /*allow_exceptions=*/false);
  std::string err = body.is_object() ? Str(body, "error") : "";
  if (resp->status == 400) return fail(kExplainBadInput, err.empty() ? resp->body : err);
  if (resp->status == 404 && !err.empty()) return fail(kExplainUnknownPod, err);
  if (resp->status == 404)
    return fail(kExplainNoWeftd, "weftd at " + weftd.addr() +
                                     " does not explain NetworkPolicy (GET /netpol/explain: 404): it runs with "
                                     "--network-policy=false or --control-plane=etcd, or is older than this weftctl");
  if (resp->status == 503)
    return fail(kExplainNoWeftd, "weftd at " + weftd.addr() + " is not ready: " + resp->body.substr(0, 200));
  if (resp->status != 200 || !body.is_object() || !body.contains("allowed"))
    return fail(kExplainNoWeftd,
                "weftd at " + weftd.addr() + " answered GET /netpol/explain with HTTP " + std::to_string(resp->status),
                resp->body.substr(0, 400));
  if (ctx.global.json) *ctx.out << body.dump(2) << "\n";
  else *ctx.out << RenderExplanation(body);
  return Bool(body, "allowed") ? kExplainAllowed : kExplainDenied;
}

}  // namespace weft::doctor
