#include "runtime/conf.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "cni/version.h"
#include "sys/files.h"

namespace weft::runtime {

using nlohmann::json;

namespace {

// go-cni refuses config files larger than this.
constexpr size_t kMaxConfBytes = 1 << 20;

Status Invalid(std::string msg) { return Status::Error(Reason::kInvalidArgument, Domain::kConfig, std::move(msg)); }

// The adapter around nlohmann: syntax errors are malformed.
Result<json> ParseJson(std::string_view bytes, const char* what) {
  try {
    return json::parse(bytes);
  } catch (const json::exception& e) {
    return Status::Error(Reason::kMalformed, Domain::kNone, std::string("error parsing ") + what, e.what());
  }
}

std::string Extension(const std::string& path) {
  auto slash = path.rfind('/');
  auto dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return path.substr(dot);
}

std::string Dirname(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// libcni's readBool: a JSON bool, or the strings "true"/"false" in any case.
Result<bool> ReadBool(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return false;
  if (it->is_boolean()) return it->get<bool>();
  if (!it->is_string()) return Invalid(std::string("\"") + key + "\" must be true or false");
  std::string s = it->get<std::string>();
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "true") return true;
  if (s == "false") return false;
  return Invalid(std::string("\"") + key + "\" has invalid value \"" + s + "\"");
}

Status CheckPluginObject(const json& j) {
  if (!j.is_object()) return Invalid("a plugin config must be a JSON object");
  for (const char* key : {"cniVersion", "name", "type"}) {
    auto it = j.find(key);
    if (it != j.end() && !it->is_string()) return Invalid(std::string("\"") + key + "\" must be a string");
  }
  auto caps = j.find("capabilities");
  if (caps != j.end() && !caps->is_null()) {
    if (!caps->is_object()) return Invalid("\"capabilities\" must be an object of booleans");
    for (const auto& [k, v] : caps->items())
      if (!v.is_boolean()) return Invalid("capability \"" + k + "\" must be true or false");
  }
  auto type = j.find("type");
  if (type == j.end() || type->get<std::string>().empty()) return Invalid("missing 'type'");
  return Status::Ok();
}

Result<PluginConf> PluginFromJson(json j) {
  WEFT_RETURN_IF_ERROR(CheckPluginObject(j));
  PluginConf p;
  p.type = j["type"].get<std::string>();
  p.raw = std::move(j);
  return p;
}

// Picks the version as libcni does: the highest of cniVersions plus
// cniVersion, ignoring anything above kRuntimeMaxVersion.
Status SelectVersion(const json& raw, NetworkConfigList* list) {
  auto v = raw.find("cniVersion");
  if (v != raw.end()) {
    if (!v->is_string()) return Invalid("\"cniVersion\" must be a string");
    list->cni_version = v->get<std::string>();
    list->version_reason = "cniVersion";
    list->offered_versions = {list->cni_version};
  }
  auto vs = raw.find("cniVersions");
  if (vs == raw.end()) return Status::Ok();
  if (!vs->is_array()) return Invalid("\"cniVersions\" must be an array of version strings");
  std::vector<std::string> usable;
  std::vector<std::string> ignored;
  for (size_t i = 0; i < vs->size(); ++i) {
    const json& e = (*vs)[i];
    if (!e.is_string()) return Invalid("\"cniVersions\"[" + std::to_string(i) + "] must be a string");
    std::string s = e.get<std::string>();
    if (!cni::Version::Parse(s)) return Invalid("\"cniVersions\" has invalid entry \"" + s + "\"");
    if (cni::VersionLess(kRuntimeMaxVersion, s)) ignored.push_back(s);
    else usable.push_back(s);
  }
  if (!list->cni_version.empty()) {
    if (!cni::Version::Parse(list->cni_version)) return Invalid("invalid cniVersion \"" + list->cni_version + "\"");
    if (!cni::VersionLess(kRuntimeMaxVersion, list->cni_version)) usable.push_back(list->cni_version);
  }
  if (usable.empty()) return Status::Ok();
  std::sort(usable.begin(), usable.end(), [](const std::string& a, const std::string& b) { return cni::VersionLess(a, b); });
  usable.erase(std::unique(usable.begin(), usable.end()), usable.end());
  list->offered_versions = usable;
  list->cni_version = usable.back();
  list->version_reason = "highest of cniVersions/cniVersion not above " + std::string(kRuntimeMaxVersion);
  if (!ignored.empty()) {
    list->version_reason += " (ignored";
    for (const auto& s : ignored) list->version_reason += " " + s;
    list->version_reason += ")";
  }
  return Status::Ok();
}

// Drop-in plugin files: <dir>/<network name>/*.conf, sorted.
Result<std::vector<PluginConf>> DropIns(const std::string& dir, const std::string& network) {
  std::vector<PluginConf> out;
  if (network.empty() || network.find('/') != std::string::npos || network == "." || network == "..") return out;
  std::string sub = dir + "/" + network;
  WEFT_ASSIGN_OR_RETURN(auto files, ConfFiles(sub, {".conf"}));
  for (const auto& f : files) {
    auto bytes = sys::ReadFile(f, kMaxConfBytes + 1);
    if (!bytes.ok()) return bytes.status();
    auto p = ParsePluginConf(*bytes);
    if (!p.ok()) return p.status().WithPrefix("drop-in plugin " + f);
    p->source = f;
    out.push_back(std::move(p).value());
  }
  return out;
}

}  // namespace

std::vector<std::string> PluginConf::Capabilities() const {
  std::vector<std::string> out;
  auto it = raw.find("capabilities");
  if (it == raw.end() || !it->is_object()) return out;
  for (const auto& [k, v] : it->items())
    if (v.is_boolean() && v.get<bool>()) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

Result<PluginConf> ParsePluginConf(std::string_view bytes) {
  WEFT_ASSIGN_OR_RETURN(json j, ParseJson(bytes, "configuration"));
  return PluginFromJson(std::move(j));
}

Result<NetworkConfigList> ParseConfList(std::string_view bytes) {
  WEFT_ASSIGN_OR_RETURN(json raw, ParseJson(bytes, "configuration list"));
  if (!raw.is_object()) return Invalid("a configuration list must be a JSON object");
  NetworkConfigList list;
  list.bytes = std::string(bytes);
  auto name = raw.find("name");
  if (name == raw.end()) return Invalid("error parsing configuration list: no name");
  if (!name->is_string()) return Invalid("error parsing configuration list: \"name\" must be a string");
  list.name = name->get<std::string>();
  WEFT_RETURN_IF_ERROR(SelectVersion(raw, &list));
  WEFT_ASSIGN_OR_RETURN(list.disable_check, ReadBool(raw, "disableCheck"));
  WEFT_ASSIGN_OR_RETURN(list.disable_gc, ReadBool(raw, "disableGC"));
  WEFT_ASSIGN_OR_RETURN(list.load_only_inlined_plugins, ReadBool(raw, "loadOnlyInlinedPlugins"));
  auto plugins = raw.find("plugins");
  if (plugins == raw.end()) {
    if (list.load_only_inlined_plugins)
      return Invalid("\"loadOnlyInlinedPlugins\" is true, and there is no \"plugins\" key");
    return list;
  }
  if (!plugins->is_array()) return Invalid("\"plugins\" must be an array");
  if (plugins->empty()) return Invalid("no plugins in list");
  for (size_t i = 0; i < plugins->size(); ++i) {
    auto p = PluginFromJson((*plugins)[i]);
    if (!p.ok()) return p.status().WithPrefix("failed to parse plugin config " + std::to_string(i));
    list.plugins.push_back(std::move(p).value());
  }
  return list;
}

Result<NetworkConfigList> PromoteConf(const PluginConf& conf) {
  json list = json::object();
  list["name"] = conf.raw.value("name", "");
  list["cniVersion"] = conf.raw.value("cniVersion", "");
  list["plugins"] = json::array({conf.raw});
  WEFT_ASSIGN_OR_RETURN(NetworkConfigList out, ParseConfList(list.dump()));
  if (out.version_reason.empty()) out.version_reason = "cniVersion";
  return out;
}

Result<NetworkConfigList> LoadConfFile(const std::string& path) {
  auto bytes = sys::ReadFile(path, kMaxConfBytes + 1);
  if (!bytes.ok()) return bytes.status();
  if (bytes->size() > kMaxConfBytes)
    return Invalid("CNI config in " + path + " exceeds the maximum size of " + std::to_string(kMaxConfBytes) + " bytes");
  NetworkConfigList list;
  if (Extension(path) == ".conflist") {
    WEFT_ASSIGN_OR_RETURN(list, ParseConfList(*bytes));
    if (!list.load_only_inlined_plugins) {
      WEFT_ASSIGN_OR_RETURN(auto extra, DropIns(Dirname(path), list.name));
      for (auto& p : extra) list.plugins.push_back(std::move(p));
    }
  } else {
    auto conf = ParsePluginConf(*bytes);
    if (!conf.ok()) {
      // go-cni's wording for the common mistake of a list in a .conf file.
      if (conf.status().msg() == "missing 'type'") return Invalid("network type not found in " + path);
      return conf.status();
    }
    WEFT_ASSIGN_OR_RETURN(list, PromoteConf(*conf));
  }
  if (list.plugins.empty()) return Invalid("no plugin configs found in " + path);
  list.file = path;
  return list;
}

Result<std::vector<std::string>> ConfFiles(const std::string& dir, const std::vector<std::string>& extensions) {
  std::vector<std::string> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return out;
  if (ec) return Status::Error(Reason::kFailed, Domain::kFile, "read conf dir " + dir, ec.message(), ec.value());
  for (const auto& entry : it) {
    std::error_code e2;
    if (entry.is_directory(e2)) continue;
    std::string name = entry.path().filename().string();
    std::string ext = Extension(name);
    if (std::find(extensions.begin(), extensions.end(), ext) != extensions.end()) out.push_back(dir + "/" + name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

LoadReport LoadConfDir(const LoadOptions& options) {
  LoadReport rep;
  rep.options = options;
  const std::string& dir = options.conf_dir;
  auto files = ConfFiles(dir, {".conf", ".conflist", ".json"});
  if (!files.ok()) {
    rep.status = files.status().WithPrefix("failed to read config file");
    rep.containerd_status = rep.status;
    return rep;
  }
  rep.candidates = *files;
  if (rep.candidates.empty()) {
    rep.status = Invalid("no network config found in " + dir);
    rep.containerd_status = rep.status;
    return rep;
  }
  for (const auto& f : rep.candidates) {
    bool full = options.max_networks > 0 && static_cast<int>(rep.networks.size()) >= options.max_networks;
    if (full) {
      rep.not_read.push_back(f);
      continue;
    }
    auto list = LoadConfFile(f);
    if (!list.ok()) {
      Status why = list.status();
      if (rep.containerd_status.ok())
        rep.containerd_status = why.WithPrefix("failed to load CNI config file " + f);
      rep.skipped.push_back({f, std::move(why)});
      continue;
    }
    std::string ifname = options.ifname_prefix + std::to_string(rep.networks.size());
    rep.networks.push_back({std::move(list).value(), ifname});
  }
  if (rep.networks.empty()) {
    rep.status = Invalid("no valid networks found in " + dir);
    if (rep.containerd_status.ok()) rep.containerd_status = rep.status;
  }
  return rep;
}

Result<NetworkConfigList> FindNetwork(const std::string& dir, const std::string& name) {
  WEFT_ASSIGN_OR_RETURN(auto lists, ConfFiles(dir, {".conflist"}));
  WEFT_ASSIGN_OR_RETURN(auto confs, ConfFiles(dir, {".conf", ".json"}));
  std::string broken;
  for (const auto* files : {&lists, &confs}) {
    for (const auto& f : *files) {
      auto list = LoadConfFile(f);
      if (!list.ok()) {
        broken += "; " + f + " does not load: " + list.status().msg();
        continue;
      }
      if (list->name == name) return list;
    }
  }
  if (lists.empty() && confs.empty()) return Invalid("no net configurations found in " + dir);
  return Invalid("no net configuration with name \"" + name + "\" in " + dir + broken);
}

NetworkConfigList LoopbackNetwork() {
  auto list = ParseConfList(R"({"cniVersion":"0.3.1","name":"cni-loopback","plugins":[{"type":"loopback"}]})");
  return std::move(list).value();  // a constant that always parses
}

}  // namespace weft::runtime
