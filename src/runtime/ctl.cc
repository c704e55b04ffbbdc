#include "runtime/ctl.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "base/strings.h"
#include "cni/errors.h"
#include "sys/exec.h"

namespace weft::runtime::ctl {

std::string Context::Env(const char* key) const {
  const char* v = getenv ? getenv(key) : nullptr;
  return v ? v : "";
}

std::string Context::ConfDir() const {
  if (!global.conf_dir.empty()) return global.conf_dir;
  std::string e = Env("NETCONFPATH");
  return e.empty() ? "/etc/cni/net.d" : e;
}

std::vector<std::string> Context::PluginDirs() const {
  std::string p = !global.plugin_path.empty() ? global.plugin_path : Env("CNI_PATH");
  if (p.empty()) p = "/opt/cni/bin";
  std::vector<std::string> out;
  for (auto d : Split(p, ':'))
    if (!d.empty()) out.emplace_back(d);
  return out;
}

int Context::Fail(const std::string& what, const Status& st, int fallback) const {
  *err << "weftctl " << what << ": " << st.msg();
  if (!st.ok()) *err << " (CNI error " << cni::CodeNumber(st) << ")";
  *err << "\n";
  if (!st.details().empty()) *err << "  details: " << st.details() << "\n";
  if (global.json) {
    nlohmann::json j = {{"code", cni::CodeNumber(st)}, {"msg", st.msg()}};
    if (!st.details().empty()) j["details"] = st.details();
    *out << j.dump(4) << "\n";
  }
  return cni::IsExecFailure(st) ? kExitExec : fallback;
}

Context ProcessContext() {
  Context c;
  c.getenv = [](const char* k) { return std::getenv(k); };
  c.environ = sys::CurrentEnv();
  c.out = &std::cout;
  c.err = &std::cerr;
  return c;
}

Ctl::Ctl() = default;
Ctl::~Ctl() = default;

void Ctl::Add(std::unique_ptr<Command> cmd) { commands_.push_back(std::move(cmd)); }

int Ctl::Main(int argc, const char* const* argv, Context ctx) {
  CLI::App app{"weftctl: drive CNI plugins exactly as a container runtime (libcni, containerd) does", "weftctl"};
  app.require_subcommand(1);
  app.fallthrough();
  app.add_flag("--json", ctx.global.json, "Print results, reports and errors as JSON on stdout");
  app.add_option("--conf-dir", ctx.global.conf_dir, "Network config dir (default: $NETCONFPATH or /etc/cni/net.d)");
  app.add_option("--cni-path", ctx.global.plugin_path,
                 "Plugin dirs, ':'-separated (default: $CNI_PATH or /opt/cni/bin)");
  app.add_option("--cache-dir", ctx.global.cache_dir, "libcni cache dir; results go to <dir>/results")
      ->capture_default_str();
  app.add_option("--timeout", ctx.global.timeout_s, "Seconds a plugin may run before it is killed")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_flag("--negotiate-version", ctx.global.negotiate,
               "Ask every plugin (VERSION) and use the highest of the list's cniVersions they all support, "
               "instead of libcni's rule (the list's highest)");
  if (!version_.empty()) app.set_version_flag("--version", version_, "Print the release and commit, then exit");
  std::vector<std::pair<CLI::App*, Command*>> subs;
  for (auto& c : commands_) subs.emplace_back(c->Register(app), c.get());
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    *ctx.out << app.help();  // CLI11 delegates to the chosen subcommand
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    *ctx.out << app.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::CallForVersion&) {
    *ctx.out << version_ << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    *ctx.err << "weftctl: " << e.what() << "\nRun 'weftctl --help' for usage.\n";
    return kExitUsage;
  }
  for (auto& [sub, cmd] : subs)
    if (sub->parsed()) return cmd->Run(ctx);
  *ctx.err << "weftctl: no command\n";
  return kExitUsage;
}

std::string CnitoolContainerId(const std::string& netns_path) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(netns_path.data(), netns_path.size(), md, &len, EVP_sha512(), nullptr);
  std::string hex = "cnitool-";
  static const char kHex[] = "0123456789abcdef";
  for (unsigned i = 0; i < 10 && i < len; ++i) {
    hex.push_back(kHex[md[i] >> 4]);
    hex.push_back(kHex[md[i] & 15]);
  }
  return hex;
}

}  // namespace weft::runtime::ctl
