#include "cni/skel.h"

#include "base/log.h"
#include "base/strings.h"
#include "cni/errors.h"
#include "cni/version.h"

namespace weft::cni {

using nlohmann::json;

std::string ErrorJson(const Status& st, const std::string& version) {
  json j = {{"cniVersion", IsSupported(version) ? version : std::string(kLatestVersion)},
            {"code", CodeNumber(st)},
            {"msg", st.msg()}};
  if (!st.details().empty()) j["details"] = st.details();
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

Status CheckStdin(std::string_view data) {
  auto malformed = [](std::string msg) { return Status::Error(Reason::kMalformed, Domain::kNone, std::move(msg)); };
  if (data.size() > kMaxStdinBytes)
    return malformed("network config is larger than " + std::to_string(kMaxStdinBytes) + " bytes (1 MiB)");
  if (size_t bad = Utf8ErrorOffset(data); bad != std::string_view::npos)
    return malformed("network config is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  // Brackets outside strings; the parser judges everything else.
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < data.size(); ++i) {
    const char c = data[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return malformed("network config nests deeper than " + std::to_string(kMaxJsonDepth) + " levels (byte " +
                         std::to_string(i) + ")");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::Ok();
}

namespace {

std::string VersionReply(const std::string& stdin_data) {
  std::string v(kLatestVersion);
  try {
    json j = json::parse(stdin_data);
    if (j.is_object() && j.contains("cniVersion") && j["cniVersion"].is_string() &&
        IsSupported(j["cniVersion"].get<std::string>()))
      v = j["cniVersion"].get<std::string>();
  } catch (const json::exception&) {
    // VERSION must answer even without a readable config.
  }
  return json({{"cniVersion", v}, {"supportedVersions", SupportedVersions()}}).dump() + "\n";
}

Status RequireVersion(const NetConf& c, const char* verb, const char* min) {
  if (AtLeast(c.cni_version, min)) return Status::Ok();
  return Status::Error(Reason::kUnsupported, Domain::kNone,
                       std::string(verb) + " requires cniVersion " + min + " or later; config is " +
                           c.cni_version);
}

}  // namespace

int PluginMain(Plugin& plugin, const EnvLookup& lookup, const std::string& stdin_data, std::string* out) {
  std::string version(kLatestVersion);
  auto fail = [&](Status st) {
    WEFT_LOG(kError, "command failed", {"code", CodeNumber(st)}, {"err", st});
    *out = ErrorJson(st, version);
    return 1;
  };
  try {
    const Status input = CheckStdin(stdin_data);
    auto env = ParseEnv(lookup);
    if (!env.ok()) {
      // Report in the config's version when the config is readable.
      if (input.ok())
        if (auto c = ParseNetConf(stdin_data); c.ok()) version = c->cni_version;
      return fail(env.status());
    }
    if (env->command == Command::kVersion) {
      // VERSION answers whatever came with it (its config is only a hint).
      *out = VersionReply(input.ok() ? stdin_data : std::string());
      return 0;
    }
    if (!input.ok()) return fail(input);
    auto conf = ParseNetConf(stdin_data);
    if (!conf.ok()) return fail(conf.status());
    version = conf->cni_version;
    CmdArgs args{std::move(*env), std::move(*conf), stdin_data};
    log::SetContext({{"cmd", CommandName(args.env.command)}, {"cid", args.env.container_id},
                     {"if", args.env.ifname}, {"net", args.conf.name}});
    Status st;
    switch (args.env.command) {
      case Command::kAdd: {
        auto r = plugin.CmdAdd(args);
        if (!r.ok()) return fail(r.status());
        auto j = EncodeResult(*r, version);
        if (!j.ok()) return fail(j.status());
        *out = j->dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
        return 0;
      }
      case Command::kDel:
        st = plugin.CmdDel(args);
        break;
      case Command::kCheck:
        st = RequireVersion(args.conf, "CHECK", "0.4.0");
        if (st.ok()) st = plugin.CmdCheck(args);
        break;
      case Command::kStatus:
        st = RequireVersion(args.conf, "STATUS", "1.1.0");
        if (st.ok()) st = plugin.CmdStatus(args);
        break;
      case Command::kGc: {
        st = RequireVersion(args.conf, "GC", "1.1.0");
        if (!st.ok()) break;
        auto valid = ValidAttachments(args.conf);
        st = valid.ok() ? plugin.CmdGc(args, *valid) : valid.status();
        break;
      }
      case Command::kVersion:
        break;
    }
    if (!st.ok()) return fail(st);
    out->clear();
    return 0;
  } catch (const std::exception& e) {
    return fail(Status::Error(Reason::kInternal, Domain::kNone, "internal error", e.what()));
  } catch (...) {
    return fail(Status::Error(Reason::kInternal, Domain::kNone, "internal error"));
  }
}

}  // namespace weft::cni
