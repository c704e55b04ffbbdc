// weftctl add|check|del|status|gc|conf: cnitool's commands and environment
// (NETCONFPATH, CNI_PATH, CNI_ARGS, CAP_ARGS, CNI_IFNAME) on the runtime
// library, plus `conf`, which explains what a runtime would load.

#include <CLI/CLI.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>

#include "cni/errors.h"
#include "cni/version.h"
#include "runtime/chain.h"
#include "runtime/conf.h"
#include "runtime/conf_watcher.h"
#include "runtime/ctl.h"

namespace weft::runtime::ctl {
namespace {

using nlohmann::json;

Runtime MakeRuntime(const Context& ctx) {
  RuntimeOptions o;
  o.invoke.plugin_dirs = ctx.PluginDirs();
  o.invoke.base_env = ctx.environ;
  o.invoke.timeout = std::chrono::seconds(ctx.global.timeout_s);
  o.cache_dir = ctx.global.cache_dir;
  o.negotiate_versions = ctx.global.negotiate;
  return Runtime(std::move(o));
}

// Go's filepath.Abs: relative paths are joined to the working directory.
std::string AbsPath(const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  std::error_code ec;
  return std::filesystem::absolute(p, ec).lexically_normal().string();
}

enum class Verb { kAdd, kCheck, kDel };

class AttachCommand : public Command {
 public:
  explicit AttachCommand(Verb verb) : verb_(verb) {}

  CLI::App* Register(CLI::App& app) override {
    const char* name = verb_ == Verb::kAdd ? "add" : verb_ == Verb::kCheck ? "check" : "del";
    const char* what = verb_ == Verb::kAdd   ? "Attach a container netns to a network (ADD through every plugin)"
                       : verb_ == Verb::kCheck ? "CHECK an attachment with its cached result"
                                               : "Detach (DEL through every plugin in reverse, with the cached result)";
    name_ = name;
    CLI::App* sub = app.add_subcommand(name, what);
    sub->add_option("network", network_, "Network name (the conflist's \"name\")")->required();
    auto* ns = sub->add_option("netns", netns_, "Path of the container's network namespace, e.g. /run/netns/x");
    if (verb_ != Verb::kDel) ns->required();
    sub->add_option("--ifname", ifname_, "Interface name in the container (default: $CNI_IFNAME or eth0)");
    sub->add_option("--container-id", container_id_,
                    "Container ID (default: $CNI_CONTAINERID, else cnitool's ID derived from the netns path)");
    sub->add_option("--args", args_, "CNI_ARGS to send, K=V;K2=V2 (default: $CNI_ARGS)");
    sub->add_option("--cap-args", cap_args_,
                    "Capability args as a JSON object, e.g. '{\"portMappings\":[...]}' (default: $CAP_ARGS)");
    if (verb_ == Verb::kDel) {
      sub->add_flag("--no-netns", no_netns_,
                    "Send an empty CNI_NETNS (the namespace is gone), as containerd's second DEL does");
      sub->add_flag("--from-cache", from_cache_,
                    "Use the network config, CNI_ARGS and capability args from the result cache, not the conf "
                    "dir (automatic when the network is no longer configured)");
    }
    return sub;
  }

  int Run(Context& ctx) override {
    RuntimeConf rt;
    rt.netns = AbsPath(netns_);
    rt.ifname = !ifname_.empty() ? ifname_ : ctx.Env("CNI_IFNAME");
    if (rt.ifname.empty()) rt.ifname = "eth0";
    rt.container_id = !container_id_.empty() ? container_id_ : ctx.Env("CNI_CONTAINERID");
    if (rt.container_id.empty()) {
      if (rt.netns.empty())
        return ctx.Fail(name_, Status::Error(Reason::kInvalidArgument, Domain::kEnvironment,
                                             "without a netns, give --container-id"), kExitUsage);
      rt.container_id = CnitoolContainerId(rt.netns);
    }
    auto args = SplitCniArgs(!args_.empty() ? args_ : ctx.Env("CNI_ARGS"));
    if (!args.ok()) return ctx.Fail(name_, args.status(), kExitUsage);
    rt.args = *args;
    std::string caps = !cap_args_.empty() ? cap_args_ : ctx.Env("CAP_ARGS");
    if (!caps.empty()) {
      try {
        rt.capability_args = json::parse(caps);
      } catch (const json::exception& e) {
        return ctx.Fail(name_, Status::Error(Reason::kMalformed, Domain::kNone,
                                             "CAP_ARGS is not valid JSON", e.what()), kExitUsage);
      }
      if (!rt.capability_args.is_object())
        return ctx.Fail(name_, Status::Error(Reason::kMalformed, Domain::kNone,
                                             "CAP_ARGS must be a JSON object"), kExitUsage);
    }
    if (no_netns_) rt.netns.clear();
    Runtime runtime = MakeRuntime(ctx);

    auto list = from_cache_ ? Result<NetworkConfigList>(Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                                                                      "--from-cache"))
                            : FindNetwork(ctx.ConfDir(), network_);
    if (verb_ == Verb::kDel && !list.ok()) {
      auto cached = runtime.cache().Get(network_, rt.container_id, rt.ifname);
      if (cached.ok() && cached->has_value()) {
        Status st = runtime.DelFromCache(network_, rt.container_id, rt.ifname, rt.netns);
        if (!st.ok()) return ctx.Fail(name_, st);
        if (!ctx.global.json)
          *ctx.err << "weftctl del: network \"" << network_ << "\" torn down from its cache entry "
                   << (*cached)->file << "\n";
        return Done(ctx, rt);
      }
      if (from_cache_)
        return ctx.Fail(name_, Status::Error(Reason::kNotFound, Domain::kNone,
                                             "no cached attachment of \"" + network_ + "\" for container " +
                                                 rt.container_id + " on " + rt.ifname + " in " +
                                                 runtime.cache().results_dir()),
                        kExitConfig);
    }
    if (!list.ok()) return ctx.Fail(name_, list.status(), kExitConfig);

    if (verb_ == Verb::kAdd) {
      auto r = runtime.AddNetworkList(*list, rt);
      if (!r.ok()) return ctx.Fail(name_, r.status());
      *ctx.out << r->json.dump(4) << "\n";
      return kExitOk;
    }
    Status st = verb_ == Verb::kCheck ? runtime.CheckNetworkList(*list, rt) : runtime.DelNetworkList(*list, rt);
    if (!st.ok()) return ctx.Fail(name_, st);
    return Done(ctx, rt);
  }

 private:
  int Done(Context& ctx, const RuntimeConf& rt) {
    if (ctx.global.json)
      *ctx.out << json{{"ok", true}, {"command", name_}, {"network", network_}, {"containerID", rt.container_id},
                       {"ifname", rt.ifname}}
                      .dump(4)
               << "\n";
    return kExitOk;
  }

  Verb verb_;
  std::string name_;
  std::string network_, netns_, ifname_, container_id_, args_, cap_args_;
  bool no_netns_ = false, from_cache_ = false;
};

class StatusCommand : public Command {
 public:
  CLI::App* Register(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand("status", "Ask every plugin of a network whether it is ready (STATUS, CNI 1.1)");
    sub->add_option("network", network_, "Network name")->required();
    sub->add_option("netns", ignored_, "Accepted for cnitool compatibility; unused");
    return sub;
  }
  int Run(Context& ctx) override {
    auto list = FindNetwork(ctx.ConfDir(), network_);
    if (!list.ok()) return ctx.Fail("status", list.status(), kExitConfig);
    Status st = MakeRuntime(ctx).StatusNetworkList(*list);
    if (!st.ok()) return ctx.Fail("status", st);
    bool asked = cni::AtLeast(list->cni_version, "1.1.0");
    if (ctx.global.json) {
      *ctx.out << json{{"ok", true}, {"network", network_}, {"cniVersion", list->cni_version}, {"statusSent", asked}}
                      .dump(4)
               << "\n";
    } else if (asked) {
      *ctx.out << "network \"" << network_ << "\" is ready (" << list->plugins.size() << " plugin(s) answered STATUS)\n";
    } else {
      *ctx.out << "network \"" << network_ << "\" is at cniVersion " << list->cni_version
               << ", which has no STATUS; a runtime treats it as ready\n";
    }
    return kExitOk;
  }

 private:
  std::string network_, ignored_;
};

class GcCommand : public Command {
 public:
  CLI::App* Register(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "gc", "Garbage-collect a network: DEL every cached attachment not listed as valid, then GC (CNI 1.1)");
    sub->add_option("network", network_, "Network name")->required();
    sub->add_option("netns", ignored_, "Accepted for cnitool compatibility; unused");
    sub->add_option("--valid", valid_,
                    "An attachment to keep, CONTAINERID/IFNAME (repeatable). Without any, every cached attachment "
                    "of the network is stale, as with cnitool gc");
    return sub;
  }
  int Run(Context& ctx) override {
    auto list = FindNetwork(ctx.ConfDir(), network_);
    if (!list.ok()) return ctx.Fail("gc", list.status(), kExitConfig);
    std::optional<std::vector<cni::Attachment>> valid;
    if (!valid_.empty()) {
      valid.emplace();
      for (const auto& v : valid_) {
        auto slash = v.find('/');
        if (slash == std::string::npos || slash == 0 || slash + 1 == v.size())
          return ctx.Fail("gc", Status::Error(Reason::kInvalidArgument, Domain::kEnvironment,
                                              "--valid wants CONTAINERID/IFNAME, got \"" + v + "\""),
                          kExitUsage);
        valid->push_back({v.substr(0, slash), v.substr(slash + 1)});
      }
    }
    Status st = MakeRuntime(ctx).GcNetworkList(*list, valid);
    if (!st.ok()) return ctx.Fail("gc", st);
    if (ctx.global.json) *ctx.out << json{{"ok", true}, {"network", network_}}.dump(4) << "\n";
    return kExitOk;
  }

 private:
  std::string network_, ignored_;
  std::vector<std::string> valid_;
};

class ConfCommand : public Command {
 public:
  CLI::App* Register(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "conf", "Show which network a runtime would load from the conf dir, why, and what failed to load");
    sub->add_option("--max", max_, "How many networks to load, as containerd's max_conf_num (0: all)")
        ->capture_default_str();
    sub->add_flag("--validate", validate_,
                  "Also run VERSION on every plugin and check it supports the network's cniVersion");
    sub->add_option("--watch", watch_s_,
                    "Watch the conf dir (inotify) for this many seconds and print one line per reload with the "
                    "default network and the load status, as containerd's lastCNILoadStatus")
        ->check(CLI::Range(0, 86400));
    return sub;
  }

  int Run(Context& ctx) override {
    if (watch_s_ > 0) return Watch(ctx);
    LoadReport rep = LoadConfDir({ctx.ConfDir(), max_, "eth"});
    Runtime runtime = MakeRuntime(ctx);
    json j = {{"confDir", ctx.ConfDir()},
              {"pluginDirs", ctx.PluginDirs()},
              {"maxConfNum", max_},
              {"candidates", rep.candidates},
              {"notRead", rep.not_read}};
    j["networks"] = json::array();
    std::vector<std::string> problems;
    for (const auto& n : rep.networks) {
      json net = {{"name", n.list.name},       {"file", n.list.file},
                  {"ifname", n.ifname},        {"cniVersion", n.list.cni_version},
                  {"versionReason", n.list.version_reason}, {"disableCheck", n.list.disable_check},
                  {"disableGC", n.list.disable_gc}, {"loadOnlyInlinedPlugins", n.list.load_only_inlined_plugins}};
      net["plugins"] = json::array();
      for (const auto& p : n.list.plugins) {
        json pj = {{"type", p.type}, {"capabilities", p.Capabilities()}};
        if (!p.source.empty()) pj["dropIn"] = p.source;
        auto bin = runtime.invoker().Find(p.type);
        pj["binary"] = bin.ok() ? *bin : "";
        if (!bin.ok()) problems.push_back("network \"" + n.list.name + "\": " + bin.status().msg());
        if (validate_ && bin.ok()) {
          auto vi = runtime.invoker().GetVersionInfo(p.type);
          if (!vi.ok()) {
            pj["versionError"] = vi.status().msg();
            problems.push_back("network \"" + n.list.name + "\": VERSION of " + p.type + " failed: " + vi.status().msg());
          } else {
            pj["supportedVersions"] = vi->supported;
            std::string want = n.list.cni_version.empty() ? "0.1.0" : n.list.cni_version;
            if (!vi->Supports(want))
              problems.push_back("network \"" + n.list.name + "\": plugin " + p.type +
                                 " does not support cniVersion " + want + " (it supports " +
                                 (vi->supported.empty() ? std::string("nothing") : vi->supported.back()) +
                                 " at most); lower the list's cniVersion/cniVersions");
          }
        }
        net["plugins"].push_back(pj);
      }
      j["networks"].push_back(net);
    }
    j["skipped"] = json::array();
    for (const auto& s : rep.skipped)
      j["skipped"].push_back({{"file", s.file}, {"code", cni::CodeNumber(s.reason)}, {"reason", s.reason.msg()}});
    j["problems"] = problems;
    j["lastCNILoadStatus"] = rep.status.ok() ? "OK" : rep.status.msg();
    j["containerdLoadStatus"] = rep.containerd_status.ok() ? "OK" : rep.containerd_status.msg();

    if (ctx.global.json) *ctx.out << j.dump(4) << "\n";
    else PrintText(ctx, rep, j);
    if (!rep.status.ok()) return kExitConfig;
    return problems.empty() ? kExitOk : kExitConfig;
  }

 private:
  void PrintText(Context& ctx, const LoadReport& rep, const json& j) {
    std::ostream& o = *ctx.out;
    o << "conf dir:     " << ctx.ConfDir() << "\n";
    std::string dirs;
    for (const auto& d : ctx.PluginDirs()) dirs += (dirs.empty() ? "" : ":") + d;
    o << "plugin dirs:  " << dirs << "\n";
    o << "candidates:   " << rep.candidates.size() << " file(s) ending .conf/.conflist/.json, in lexical order\n";
    if (rep.networks.empty()) {
      o << "default:      none: " << rep.status.msg() << "\n";
    }
    for (size_t i = 0; i < rep.networks.size(); ++i) {
      const auto& n = rep.networks[i];
      const json& nj = j["networks"][i];
      std::string file = std::filesystem::path(n.list.file).filename().string();
      if (i == 0) {
        o << "default:      \"" << n.list.name << "\" from " << file << " (" << n.ifname << ")\n";
        o << "  why:        first file in lexical order that loads";
        if (!rep.skipped.empty()) o << "; " << rep.skipped.size() << " invalid file(s) before it were skipped";
        o << "\n";
      } else {
        o << "network " << i << ":    \"" << n.list.name << "\" from " << file << " (" << n.ifname << ")\n";
      }
      o << "  cniVersion: " << (n.list.cni_version.empty() ? "(none: 0.1.0)" : n.list.cni_version) << " ("
        << n.list.version_reason << ")\n";
      o << "  flags:      disableCheck=" << (n.list.disable_check ? "true" : "false")
        << " disableGC=" << (n.list.disable_gc ? "true" : "false")
        << " loadOnlyInlinedPlugins=" << (n.list.load_only_inlined_plugins ? "true" : "false") << "\n";
      o << "  plugins:\n";
      for (const auto& p : nj["plugins"]) {
        o << "    - " << p["type"].get<std::string>();
        std::string bin = p["binary"];
        o << "  " << (bin.empty() ? "NOT FOUND in plugin dirs" : bin);
        if (!p["capabilities"].empty()) {
          o << "  capabilities:";
          for (const auto& c : p["capabilities"]) o << " " << c.get<std::string>();
        }
        if (p.contains("dropIn")) o << "  (drop-in " << p["dropIn"].get<std::string>() << ")";
        if (p.contains("supportedVersions")) {
          o << "  supports:";
          for (const auto& v : p["supportedVersions"]) o << " " << v.get<std::string>();
        }
        if (p.contains("versionError")) o << "  VERSION failed: " << p["versionError"].get<std::string>();
        o << "\n";
      }
    }
    for (const auto& f : rep.not_read)
      o << "not loaded:   " << std::filesystem::path(f).filename().string() << " (max " << max_
        << " network(s), as containerd's max_conf_num)\n";
    for (const auto& s : rep.skipped)
      o << "skipped:      " << std::filesystem::path(s.file).filename().string() << ": " << s.reason.msg() << "\n";
    for (const auto& p : j["problems"]) o << "problem:      " << p.get<std::string>() << "\n";
    o << "load status:  " << (rep.status.ok() ? "OK" : rep.status.msg()) << "\n";
    if (!rep.containerd_status.ok() && rep.status.ok())
      o << "containerd:   would refuse this dir (go-cni stops at the first invalid file): "
        << rep.containerd_status.msg() << "\n";
  }

  // One line (or JSON object) per load: the initial one and every reload.
  int Watch(Context& ctx) {
    auto w = ConfWatcher::Start({ctx.ConfDir(), max_, "eth"});
    if (!w.ok()) return ctx.Fail("conf --watch", w.status(), kExitConfig);
    auto print = [&](int n) {
      const LoadReport& r = w->report();
      std::string def = r.networks.empty() ? "" : r.networks[0].list.name;
      std::string status = r.status.ok() ? "OK" : r.status.msg();
      if (ctx.global.json) {
        *ctx.out << json{{"load", n}, {"default", def}, {"lastCNILoadStatus", status}}.dump() << std::endl;
      } else {
        *ctx.out << "load " << n << ": default=" << (def.empty() ? "(none)" : "\"" + def + "\"")
                 << " skipped=" << r.skipped.size() << " status=" << status << std::endl;
      }
    };
    print(0);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(watch_s_);
    while (std::chrono::steady_clock::now() < deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      auto r = w->WaitAndReload(std::min(left, std::chrono::milliseconds(500)));
      if (!r.ok()) return ctx.Fail("conf --watch", r.status(), kExitConfig);
      if (*r) print(w->reloads());
    }
    return w->last_load_status().ok() ? kExitOk : kExitConfig;
  }

  int max_ = 1;
  int watch_s_ = 0;
  bool validate_ = false;
};

}  // namespace

void AddCniCommands(Ctl& ctl) {
  ctl.Add(std::make_unique<AttachCommand>(Verb::kAdd));
  ctl.Add(std::make_unique<AttachCommand>(Verb::kCheck));
  ctl.Add(std::make_unique<AttachCommand>(Verb::kDel));
  ctl.Add(std::make_unique<StatusCommand>());
  ctl.Add(std::make_unique<GcCommand>());
  ctl.Add(std::make_unique<ConfCommand>());
}

}  // namespace weft::runtime::ctl
