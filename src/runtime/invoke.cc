#include "runtime/invoke.h"

#include <algorithm>
#include <cstring>

#include "base/strings.h"
#include "cni/version.h"
#include "sys/exec.h"

namespace weft::runtime {

using nlohmann::json;

namespace {

std::string Tail(const std::string& s, size_t n = 2048) {
  std::string t(Trim(s));
  return t.size() <= n ? t : "..." + t.substr(t.size() - n);
}

std::string JoinDirs(const std::vector<std::string>& dirs) {
  std::string out;
  for (const auto& d : dirs) out += (out.empty() ? "" : ":") + d;
  return out;
}

// A plugin's error object on stdout, or nullopt when stdout is not one.
std::optional<Status> DecodePluginError(const std::string& out) {
  try {
    json j = json::parse(out);
    if (!j.is_object() || !j.contains("code") || !j["code"].is_number_integer()) return std::nullopt;
    int code = j["code"].get<int>();
    std::string msg = j.contains("msg") && j["msg"].is_string() ? j["msg"].get<std::string>() : "";
    std::string details = j.contains("details") && j["details"].is_string() ? j["details"].get<std::string>() : "";
    // An error without a code is still an error.
    if (code == 0) return Status::Error(Reason::kInternal, Domain::kPlugin, msg, details);
    return Status::Reported(code, msg, details);
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::string JoinCniArgs(const std::vector<std::pair<std::string, std::string>>& args) {
  std::string out;
  for (const auto& [k, v] : args) out += (out.empty() ? "" : ";") + k + "=" + v;
  return out;
}

Result<std::vector<std::pair<std::string, std::string>>> SplitCniArgs(const std::string& raw) {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto pair : Split(raw, ';')) {
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment,
                           "invalid CNI_ARGS pair \"" + std::string(pair) + "\" (want KEY=VALUE)");
    out.emplace_back(std::string(pair.substr(0, eq)), std::string(pair.substr(eq + 1)));
  }
  return out;
}

json BuildOneConfig(const std::string& name, const std::string& cni_version, const PluginConf& plugin,
                    const json* prev_result, const RuntimeConf* rt) {
  json conf = plugin.raw;
  conf["name"] = name;
  conf["cniVersion"] = cni_version;
  if (prev_result && !prev_result->is_null()) conf["prevResult"] = *prev_result;
  if (rt) {
    json rc = json::object();
    for (const auto& cap : plugin.Capabilities()) {
      auto it = rt->capability_args.find(cap);
      if (it != rt->capability_args.end()) rc[cap] = *it;
    }
    if (!rc.empty()) conf["runtimeConfig"] = rc;
  }
  return conf;
}

std::vector<std::string> PluginEnv(const std::vector<std::string>& base, const std::string& command,
                                   const RuntimeConf& rt, const std::vector<std::string>& plugin_dirs) {
  std::vector<std::string> env;
  for (const auto& e : base)
    if (!StartsWith(e, "CNI_")) env.push_back(e);
  env.push_back("CNI_COMMAND=" + command);
  env.push_back("CNI_CONTAINERID=" + rt.container_id);
  env.push_back("CNI_NETNS=" + rt.netns);
  env.push_back("CNI_ARGS=" + JoinCniArgs(rt.args));
  env.push_back("CNI_IFNAME=" + rt.ifname);
  env.push_back("CNI_PATH=" + JoinDirs(plugin_dirs));
  return env;
}

bool VersionInfo::Supports(const std::string& v) const {
  return std::find(supported.begin(), supported.end(), v) != supported.end();
}

Result<std::string> Invoker::Find(const std::string& type) const {
  auto p = sys::FindInPath(type, options_.plugin_dirs);
  if (!p.ok() && options_.plugin_dirs.empty())
    return Status::Error(Reason::kFailed, Domain::kExec,
                         "failed to find plugin \"" + type + "\": no plugin dirs (set CNI_PATH)");
  return p;
}

Result<std::string> Invoker::Run(const std::string& type, const std::string& command, const RuntimeConf& rt,
                                 const std::string& stdin_data) const {
  WEFT_ASSIGN_OR_RETURN(std::string path, Find(type));
  sys::ExecRequest req;
  req.path = path;
  req.env = PluginEnv(options_.base_env, command, rt, options_.plugin_dirs);
  req.stdin_data = stdin_data;
  req.timeout = options_.timeout;
  auto r = sys::Exec(req);
  if (!r.ok()) return r.status();
  const std::string who = "plugin " + path + " (" + command + ")";
  if (r->timed_out)
    return Status::Error(Reason::kFailed, Domain::kExec,
                         who + " did not finish within " + std::to_string(options_.timeout.count()) +
                             " ms and was killed",
                         Tail(r->err));
  if (r->term_signal != 0)
    return Status::Error(Reason::kFailed, Domain::kExec,
                         who + " was killed by signal " + std::to_string(r->term_signal) + " (" +
                             ::strsignal(r->term_signal) + ")",
                         Tail(r->err));
  if (r->exit_code == 0) return std::move(r->out);
  if (!Trim(r->out).empty()) {
    if (auto err = DecodePluginError(r->out)) return *err;
    return Status::Error(Reason::kFailed, Domain::kExec,
                         who + " failed with exit status " + std::to_string(r->exit_code) +
                             " and printed something that is not a CNI error object",
                         Tail(r->out));
  }
  if (!Trim(r->err).empty())
    return Status::Error(Reason::kFailed, Domain::kExec, who + " failed: " + Tail(r->err, 512));
  return Status::Error(Reason::kFailed, Domain::kExec,
                       who + " failed with exit status " + std::to_string(r->exit_code) + " and no error message");
}

Result<VersionInfo> Invoker::GetVersionInfo(const std::string& type) const {
  RuntimeConf rt;
  // Fake values that plugins built on an old skeleton insist on.
  rt.netns = "dummy";
  rt.ifname = "dummy";
  json in = {{"cniVersion", std::string(kRuntimeMaxVersion)}};
  auto out = Run(type, "VERSION", rt, in.dump());
  if (!out.ok()) {
    if (out.status().msg() == "unknown CNI_COMMAND: VERSION") return VersionInfo{"0.1.0", {"0.1.0"}};
    return out.status();
  }
  try {
    json j = json::parse(*out);
    VersionInfo vi;
    vi.cni_version = j.value("cniVersion", "");
    if (j.contains("supportedVersions") && j["supportedVersions"].is_array()) {
      for (const auto& v : j["supportedVersions"])
        if (v.is_string()) vi.supported.push_back(v.get<std::string>());
    } else {
      // 0.1.0 had no supportedVersions: the plugin speaks what it reports.
      vi.supported.push_back(vi.cni_version.empty() ? "0.1.0" : vi.cni_version);
    }
    return vi;
  } catch (const json::exception& e) {
    return Status::Error(Reason::kMalformed, Domain::kNone,
                         "plugin " + type + " printed an invalid VERSION answer", e.what());
  }
}

}  // namespace weft::runtime
