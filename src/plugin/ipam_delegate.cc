#include "plugin/ipam_delegate.h"

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "base/strings.h"
#include "cni/errors.h"
#include "cni/version.h"
#include "sys/exec.h"

namespace weft::plugin {

using nlohmann::json;

std::optional<std::string> NegotiateVersion(const std::string& ours, const std::vector<std::string>& theirs) {
  std::optional<std::string> best;
  for (const auto& v : theirs) {
    if (!cni::IsSupported(v) || cni::VersionLess(ours, v)) continue;
    if (!best || cni::VersionLess(*best, v)) best = v;
  }
  return best;
}

Result<std::string> WithCniVersion(const std::string& stdin_data, const std::string& version) {
  try {
    json j = json::parse(stdin_data);
    j["cniVersion"] = version;
    return j.dump();
  } catch (const json::exception& e) {
    return Status::Error(Reason::kMalformed, Domain::kNone, "network config is not valid JSON", e.what());
  }
}

PluginError ParsePluginError(const std::string& out) {
  PluginError e;
  try {
    json j = json::parse(out);
    if (j.is_object() && j.contains("code") && j["code"].is_number_integer()) {
      e.code = j["code"].get<int>();
      if (j.contains("msg") && j["msg"].is_string()) e.msg = j["msg"].get<std::string>();
      if (j.contains("details") && j["details"].is_string()) e.details = j["details"].get<std::string>();
    }
  } catch (const json::exception&) {
    // Not an error object: code stays 0.
  }
  return e;
}

Result<IpamAddrs> PickAddrs(const cni::CniResult& r, const std::string& type) {
  IpamAddrs a;
  for (const auto& ip : r.ips) {
    auto& slot = ip.address.is_v4() ? a.v4 : a.v6;
    if (slot)
      return Status::Error(Reason::kFailed, Domain::kPlugin,
                           "IPAM plugin " + type + " returned more than one IPv" + (ip.address.is_v4() ? "4" : "6") +
                               " address",
                           "weft attaches one address per family; give the IPAM plugin one range set per family");
    slot = ip;
  }
  if (!a.v4 && !a.v6) return Status::Error(Reason::kFailed, Domain::kPlugin,
                                           "IPAM plugin " + type + " returned no address");
  a.routes = r.routes;
  a.dns = r.dns;
  return a;
}

namespace {

Status Failed(const std::string& type, const char* command, const sys::ExecResult& r) {
  PluginError e = ParsePluginError(r.out);
  std::string msg = "IPAM plugin " + type + " " + command + " failed";
  if (e.code) msg += " (code " + std::to_string(e.code) + "): " + e.msg;
  else if (r.timed_out) msg += ": timed out";
  else msg += " (exit " + std::to_string(r.exit_code) + ")";
  std::string details = e.code ? e.details : std::string(Trim(r.err));
  return Status::Error(Reason::kFailed, Domain::kPlugin, msg, details);
}

Result<sys::ExecResult> Exec(const std::string& type, const char* command, const DelegateCall& call,
                             const std::string& stdin_data) {
  WEFT_ASSIGN_OR_RETURN(std::string path, sys::FindInPath(type, call.path));
  sys::ExecRequest req;
  req.path = path;
  req.argv = {path};
  for (auto& e : sys::CurrentEnv())
    if (!StartsWith(e, "CNI_")) req.env.push_back(e);
  std::string cni_path;
  for (const auto& d : call.path) cni_path += (cni_path.empty() ? "" : ":") + d;
  req.env.push_back(std::string("CNI_COMMAND=") + command);
  req.env.push_back("CNI_CONTAINERID=" + call.container_id);
  if (!call.netns.empty()) req.env.push_back("CNI_NETNS=" + call.netns);
  req.env.push_back("CNI_IFNAME=" + call.ifname);
  req.env.push_back("CNI_ARGS=" + call.args);
  req.env.push_back("CNI_PATH=" + cni_path);
  req.stdin_data = stdin_data;
  req.timeout = std::chrono::seconds(60);
  auto r = sys::Exec(req);
  if (!r.ok()) return r.status().WithPrefix("IPAM plugin " + type);
  return r;
}

}  // namespace

Result<std::vector<std::string>> DelegatedIpam::SupportedVersions(const DelegateCall& call) const {
  WEFT_ASSIGN_OR_RETURN(auto r, Exec(type_, "VERSION", call, json({{"cniVersion", version_}}).dump()));
  if (r.exit_code != 0) return Failed(type_, "VERSION", r);
  try {
    json j = json::parse(r.out);
    std::vector<std::string> out;
    for (const auto& v : j.at("supportedVersions"))
      if (v.is_string()) out.push_back(v.get<std::string>());
    return out;
  } catch (const json::exception& e) {
    return Status::Error(Reason::kFailed, Domain::kPlugin,
                         "IPAM plugin " + type_ + " printed an unreadable VERSION reply",
                         e.what());
  }
}

Result<DelegatedIpam::Outcome> DelegatedIpam::Call(const char* command, const DelegateCall& call) const {
  WEFT_ASSIGN_OR_RETURN(auto r, Exec(type_, command, call, stdin_));
  if (r.exit_code == 0) return Outcome{r.out, version_};
  if (!cni::IsIncompatibleVersion(ParsePluginError(r.out).code)) return Failed(type_, command, r);
  WEFT_ASSIGN_OR_RETURN(auto theirs, SupportedVersions(call));
  auto v = NegotiateVersion(version_, theirs);
  if (!v || *v == version_) return Failed(type_, command, r);
  WEFT_LOG(kInfo, "IPAM plugin does not speak our version; calling it with an older one", {"ipam", type_},
           {"version", version_}, {"using", *v});
  WEFT_ASSIGN_OR_RETURN(std::string lowered, WithCniVersion(stdin_, *v));
  WEFT_ASSIGN_OR_RETURN(auto again, Exec(type_, command, call, lowered));
  if (again.exit_code != 0) return Failed(type_, command, again);
  return Outcome{again.out, *v};
}

Result<cni::CniResult> DelegatedIpam::Add(const DelegateCall& call) const {
  WEFT_ASSIGN_OR_RETURN(auto o, Call("ADD", call));
  json j;
  try {
    j = json::parse(o.out);
  } catch (const json::exception& e) {
    return Status::Error(Reason::kFailed, Domain::kPlugin,
                         "IPAM plugin " + type_ + " printed an unreadable result", e.what());
  }
  auto r = cni::DecodeResult(j, o.version);
  if (!r.ok())
    return Status::Error(Reason::kFailed, Domain::kPlugin,
                         "IPAM plugin " + type_ + ": " + r.status().msg(), r.status().details());
  return r;
}

Status DelegatedIpam::Del(const DelegateCall& call) const { return Call("DEL", call).status(); }

Status DelegatedIpam::Check(const DelegateCall& call) const { return Call("CHECK", call).status(); }

Status DelegatedIpam::ForwardIfSupported(const char* command, const DelegateCall& call) const {
  if (!cni::AtLeast(version_, "1.1.0")) return Status::Ok();
  WEFT_ASSIGN_OR_RETURN(auto r, Exec(type_, command, call, stdin_));
  if (r.exit_code == 0) return Status::Ok();
  // A plugin that cannot speak 1.1.0 has no STATUS or GC to forward to.
  auto theirs = SupportedVersions(call);
  if (theirs.ok()) {
    bool speaks_11 = false;
    for (const auto& v : *theirs)
      if (cni::AtLeast(v, "1.1.0")) speaks_11 = true;
    if (!speaks_11) {
      WEFT_LOG(kInfo, "IPAM plugin does not speak 1.1.0; command not forwarded", {"ipam", type_},
               {"command", command});
      return Status::Ok();
    }
  }
  return Failed(type_, command, r);
}

Status DelegatedIpam::ForwardStatus(const DelegateCall& call) const { return ForwardIfSupported("STATUS", call); }

Status DelegatedIpam::ForwardGc(const DelegateCall& call) const { return ForwardIfSupported("GC", call); }

}  // namespace weft::plugin
