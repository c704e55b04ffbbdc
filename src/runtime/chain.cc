#include "runtime/chain.h"

#include <algorithm>
#include <set>

#include "base/strings.h"
#include "cni/version.h"

namespace weft::runtime {

using nlohmann::json;

namespace {

constexpr const char* kCheckVersion = "0.4.0";
constexpr const char* kStatusGcVersion = "1.1.0";

std::string VersionOr010(const std::string& v) { return v.empty() ? "0.1.0" : v; }

Status ValidateAttachment(const std::string& network, const RuntimeConf& rt) {
  if (!IsValidCniName(rt.container_id))
    return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment,
                         "invalid container ID \"" + rt.container_id + "\"");
  if (!IsValidCniName(network))
    return Status::Error(Reason::kInvalidArgument, Domain::kConfig, "invalid network name \"" + network + "\"");
  std::string why = InterfaceNameProblem(rt.ifname);
  if (!why.empty()) return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment,
                                         "invalid interface name \"" + rt.ifname + "\": " + why);
  return Status::Ok();
}

// libcni fixupResultVersion + create.Create: a result without cniVersion is
// at the config's version; anything else must decode.
Result<std::pair<json, cni::CniResult>> DecodePluginResult(const std::string& out, const std::string& version) {
  json j;
  try {
    j = json::parse(out);
  } catch (const json::exception& e) {
    return Status::Error(Reason::kMalformed, Domain::kNone, "failed to unmarshal the plugin's result", e.what());
  }
  if (j.is_null()) j = json::object();
  if (!j.is_object()) return Status::Error(Reason::kMalformed, Domain::kNone,
                                           "the plugin's result is not a JSON object");
  if (!j.contains("cniVersion") || !j["cniVersion"].is_string() || j["cniVersion"].get<std::string>().empty())
    j["cniVersion"] = version;
  auto r = cni::DecodeResult(j, version);
  if (!r.ok()) return r.status().WithPrefix("decode the plugin's result");
  return std::make_pair(std::move(j), std::move(r).value());
}

void JoinError(Status* acc, const Status& st) {
  if (st.ok()) return;
  if (acc->ok()) *acc = st;
  else *acc = acc->WithMsg(acc->msg() + "; " + st.msg());
}

}  // namespace

std::string PluginDescription(const PluginConf& p) {
  std::string out = "type=\"" + p.type + "\"";
  std::string name = p.raw.value("name", "");
  if (!name.empty()) out += " name=\"" + name + "\"";
  return out;
}

Result<std::optional<json>> Runtime::CachedPrevResult(const NetworkConfigList& list, const RuntimeConf& rt) const {
  std::string version = VersionOr010(list.cni_version);
  WEFT_ASSIGN_OR_RETURN(auto cached, cache_.GetResult(list.name, version, rt));
  if (!cached) return std::optional<json>();
  WEFT_ASSIGN_OR_RETURN(json enc, cni::EncodeResult(*cached, version));
  return std::optional<json>(std::move(enc));
}

Result<NetworkConfigList> Runtime::Effective(const NetworkConfigList& list) const {
  NetworkConfigList copy = list;
  if (negotiate_) {
    auto v = NegotiateVersion(&copy);
    if (!v.ok()) return v.status();
  }
  return copy;
}

Result<AddResult> Runtime::AddNetworkList(const NetworkConfigList& in, const RuntimeConf& rt) const {
  WEFT_ASSIGN_OR_RETURN(NetworkConfigList list, Effective(in));
  WEFT_RETURN_IF_ERROR(ValidateAttachment(list.name, rt));
  const std::string version = VersionOr010(list.cni_version);
  std::optional<std::pair<json, cni::CniResult>> last;
  for (const auto& plugin : list.plugins) {
    json prev;
    if (last) {
      // prevResult is always shown at the list's version.
      auto enc = cni::EncodeResult(last->second, version);
      if (!enc.ok()) return enc.status().WithPrefix("plugin " + PluginDescription(plugin) + " failed (add)");
      prev = *enc;
    }
    json conf = BuildOneConfig(list.name, version, plugin, last ? &prev : nullptr, &rt);
    auto out = invoker_.Run(plugin.type, "ADD", rt, conf.dump());
    if (!out.ok()) return out.status().WithPrefix("plugin " + PluginDescription(plugin) + " failed (add)");
    auto decoded = DecodePluginResult(*out, version);
    if (!decoded.ok()) return decoded.status().WithPrefix("plugin " + PluginDescription(plugin) + " failed (add)");
    last = std::move(decoded).value();
  }
  if (!last) return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                                  "network \"" + list.name + "\" has no plugins");
  Status st = cache_.Add(list.name, list.bytes, rt, last->first);
  if (!st.ok()) return st.Prefix("failed to set network \"" + list.name + "\" cached result");
  return AddResult{std::move(last->second), std::move(last->first)};
}

Status Runtime::CheckNetworkList(const NetworkConfigList& in, const RuntimeConf& rt) const {
  WEFT_ASSIGN_OR_RETURN(NetworkConfigList list, Effective(in));
  const std::string version = VersionOr010(list.cni_version);
  if (!cni::AtLeast(version, kCheckVersion))
    return Status::Error(Reason::kUnsupported, Domain::kNone,
                         "configuration version \"" + version + "\" does not support the CHECK command");
  if (list.disable_check) return Status::Ok();
  WEFT_RETURN_IF_ERROR(ValidateAttachment(list.name, rt));
  auto prev = CachedPrevResult(list, rt);
  if (!prev.ok()) return prev.status().WithPrefix("failed to get network \"" + list.name + "\" cached result");
  for (const auto& plugin : list.plugins) {
    json conf = BuildOneConfig(list.name, version, plugin, *prev ? &**prev : nullptr, &rt);
    auto out = invoker_.Run(plugin.type, "CHECK", rt, conf.dump());
    if (!out.ok()) return out.status().WithPrefix("plugin " + PluginDescription(plugin) + " failed (check)");
  }
  return Status::Ok();
}

Status Runtime::DelNetworkList(const NetworkConfigList& in, const RuntimeConf& rt) const {
  WEFT_ASSIGN_OR_RETURN(NetworkConfigList list, Effective(in));
  const std::string version = VersionOr010(list.cni_version);
  std::optional<json> prev;
  if (cni::AtLeast(version, kCheckVersion)) {
    auto cached = CachedPrevResult(list, rt);
    if (cached.ok()) {
      prev = *cached;
    } else {
      // libcni: an unreadable cache entry is dropped and DEL goes on.
      (void)cache_.Del(list.name, rt.container_id, rt.ifname);
    }
  }
  Status errors;
  for (auto it = list.plugins.rbegin(); it != list.plugins.rend(); ++it) {
    json conf = BuildOneConfig(list.name, version, *it, prev ? &*prev : nullptr, &rt);
    auto out = invoker_.Run(it->type, "DEL", rt, conf.dump());
    if (!out.ok()) JoinError(&errors, out.status().WithPrefix("plugin " + PluginDescription(*it) + " failed (delete)"));
  }
  if (!errors.ok()) return errors;
  if (!rt.container_id.empty() && !rt.ifname.empty()) {
    Status st = cache_.Del(list.name, rt.container_id, rt.ifname);
    if (!st.ok() && !st.IsInvalidArgument()) return st.Prefix("remove cache entry");
  }
  return Status::Ok();
}

Status Runtime::StatusNetworkList(const NetworkConfigList& in) const {
  WEFT_ASSIGN_OR_RETURN(NetworkConfigList list, Effective(in));
  const std::string version = VersionOr010(list.cni_version);
  if (!cni::AtLeast(version, kStatusGcVersion)) return Status::Ok();
  RuntimeConf empty;
  for (const auto& plugin : list.plugins) {
    json conf = BuildOneConfig(list.name, version, plugin, nullptr, nullptr);
    auto out = invoker_.Run(plugin.type, "STATUS", empty, conf.dump());
    if (!out.ok()) return out.status().WithPrefix("plugin " + PluginDescription(plugin) + " failed (status)");
  }
  return Status::Ok();
}

Status Runtime::GcNetworkList(const NetworkConfigList& in,
                              const std::optional<std::vector<cni::Attachment>>& valid) const {
  WEFT_ASSIGN_OR_RETURN(NetworkConfigList list, Effective(in));
  if (list.disable_gc) return Status::Ok();
  Status errors;
  auto cached = cache_.List();
  if (cached.ok()) {
    std::set<std::pair<std::string, std::string>> keep;
    if (valid)
      for (const auto& a : *valid) keep.insert({a.container_id, a.ifname});
    for (const auto& a : *cached) {
      if (a.network != list.name) continue;
      if (keep.count({a.container_id, a.ifname})) continue;
      Status st = DelNetworkList(list, a.ToRuntimeConf());
      if (!st.ok())
        JoinError(&errors, st.WithPrefix("failed to delete stale attachment " + a.container_id + " " + a.ifname));
    }
  }
  const std::string version = VersionOr010(list.cni_version);
  if (cni::AtLeast(version, kStatusGcVersion)) {
    RuntimeConf empty;
    for (const auto& plugin : list.plugins) {
      json conf = BuildOneConfig(list.name, version, plugin, nullptr, nullptr);
      if (valid) {
        json arr = json::array();
        for (const auto& a : *valid) arr.push_back({{"containerID", a.container_id}, {"ifname", a.ifname}});
        conf["cni.dev/valid-attachments"] = arr;
      }
      auto out = invoker_.Run(plugin.type, "GC", empty, conf.dump());
      if (!out.ok()) JoinError(&errors, out.status().WithPrefix("failed to GC plugin " + plugin.type));
    }
  }
  return errors;
}

Status Runtime::DelFromCache(const std::string& network, const std::string& container_id, const std::string& ifname,
                             const std::optional<std::string>& netns) const {
  WEFT_ASSIGN_OR_RETURN(auto cached, cache_.Get(network, container_id, ifname));
  if (!cached)
    return Status::Error(Reason::kNotFound, Domain::kNone, "no cached attachment for network \"" + network +
                                                      "\", container " + container_id + ", interface " + ifname +
                                                      " in " + cache_.results_dir());
  auto list = ParseConfList(cached->config);
  if (!list.ok()) return list.status().WithPrefix("cached network config in " + cached->file);
  if (list->plugins.empty())
    return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                         "cached network config in " + cached->file + " has no plugins");
  RuntimeConf rt = cached->ToRuntimeConf();
  if (netns) rt.netns = *netns;
  return DelNetworkList(*list, rt);
}

Result<std::string> Runtime::NegotiateVersion(NetworkConfigList* list) const {
  std::vector<std::string> offered = list->offered_versions;
  if (offered.empty()) offered.push_back(VersionOr010(list->cni_version));
  std::vector<VersionInfo> infos;
  for (const auto& plugin : list->plugins) {
    auto vi = invoker_.GetVersionInfo(plugin.type);
    if (!vi.ok()) return vi.status().WithPrefix("VERSION of plugin " + plugin.type);
    infos.push_back(std::move(vi).value());
  }
  for (auto v = offered.rbegin(); v != offered.rend(); ++v) {
    bool all = std::all_of(infos.begin(), infos.end(), [&](const VersionInfo& vi) { return vi.Supports(*v); });
    if (!all) continue;
    if (*v != list->cni_version) {
      list->version_reason = "negotiated: highest offered version every plugin supports (config's highest was " +
                             list->cni_version + ")";
      list->cni_version = *v;
    }
    return *v;
  }
  std::string which;
  for (size_t i = 0; i < infos.size(); ++i)
    if (!infos[i].Supports(offered.front())) which += (which.empty() ? "" : ", ") + list->plugins[i].type;
  std::string all;
  for (const auto& v : offered) all += (all.empty() ? "" : " ") + v;
  return Status::Error(Reason::kUnsupported, Domain::kNone,
                       "no version offered by network \"" + list->name + "\" (" + all +
                           ") is supported by every plugin" + (which.empty() ? "" : " (not by " + which + ")"));
}

Result<std::vector<std::string>> Runtime::ValidateNetworkList(const NetworkConfigList& list) const {
  const std::string version = VersionOr010(list.cni_version);
  std::set<std::string> caps;
  Status errors;
  for (const auto& plugin : list.plugins) {
    auto vi = invoker_.GetVersionInfo(plugin.type);
    if (!vi.ok()) {
      JoinError(&errors, vi.status().WithPrefix("plugin " + plugin.type));
    } else if (!vi->Supports(version)) {
      std::string have;
      for (const auto& v : vi->supported) have += (have.empty() ? "" : ", ") + v;
      JoinError(&errors, Status::Error(Reason::kUnsupported, Domain::kNone, "plugin " + plugin.type +
                                                                       " does not support config version \"" +
                                                                       version + "\" (it supports " + have + ")"));
    }
    for (const auto& c : plugin.Capabilities()) caps.insert(c);
  }
  if (!errors.ok()) return errors;
  return std::vector<std::string>(caps.begin(), caps.end());
}

}  // namespace weft::runtime
