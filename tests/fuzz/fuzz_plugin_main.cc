// The whole plugin main: environment and stdin in, exit code and stdout out,
// through cni::PluginMain (env and stdin checks, ErrorJson, the result
// encoder of every version) and the ADD sequence (plugin/add.h) over a fake
// IPAM, datapath and firewall, so nothing touches the kernel or the disk.
//
// Input: "KEY=VALUE" lines up to the first NUL set CNI_* variables over a
// valid ADD environment (values are raw bytes); the rest is stdin. Without a
// NUL the whole input is stdin.
//
// Checked: stdout is always one JSON object; exit 0 carries a result (or
// VERSION's answer), exit 1 an error object whose code is never 999, which
// would mean a path the edge does not map (an exception, an unencodable
// byte).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "base/log.h"
#include "base/phase_timer.h"
#include "cni/skel.h"
#include "plugin/add.h"
#include "plugin/config.h"
#include "plugin/weft_plugin.h"

namespace {

using namespace weft;
using nlohmann::json;

class FakeIpam : public plugin::AddIpam {
 public:
  explicit FakeIpam(const plugin::Config& cfg) : cfg_(cfg) {}
  Result<plugin::Allocation> Allocate(const ipam::PodRecord& want) override {
    ipam::PodRecord rec = want;
    for (const IpPrefix& r : cfg_.ranges) {
      IpPrefix first(r.addr().Plus(1), r.len());
      if (r.is_v4() && !rec.ip_v4) rec.ip_v4 = first;
      if (!r.is_v4() && !rec.ip_v6) rec.ip_v6 = first;
    }
    if (!rec.ip_v4 && !rec.ip_v6) rec.ip_v4 = IpPrefix::Parse("10.0.0.2/24");  // delegated IPAM
    return plugin::Allocation{rec, std::nullopt, cfg_.net.dns, ScopeGuard([] {})};
  }
  Status ClaimPorts(const ipam::PodRecord&, const std::vector<ipam::PortMapping>&) override { return {}; }
  Status MarkReady(const ipam::PodRecord&) override { return {}; }

 private:
  const plugin::Config& cfg_;
};

// The result the routed datapath reports, from the names and addresses it
// was given (they are what could make it unprintable).
class FakeDatapath : public plugin::Datapath {
 public:
  explicit FakeDatapath(const plugin::AddRequest& req) : req_(req) {}
  Status CreateLinks(uint32_t) override { return {}; }
  Status Attach(const ipam::PodRecord& rec, const std::optional<std::vector<cni::Route>>&) override {
    rec_ = rec;
    return {};
  }
  cni::CniResult Result() const override {
    cni::CniResult r;
    r.interfaces.push_back({req_.host_ifname, "0a:00:00:00:00:01", req_.mtu, "", "", ""});
    r.interfaces.push_back({req_.ifname, "0a:00:00:00:00:02", req_.mtu, req_.netns, "", ""});
    for (const auto& a : {rec_.ip_v4, rec_.ip_v6})
      if (a) r.ips.push_back({*a, a->is_v4() ? IpAddress::Parse("169.254.1.1") : IpAddress::Parse("fe80::1"), 1});
    return r;
  }
  std::string LocalnetDevice() const override { return req_.host_ifname; }
  Status Check(const ipam::PodRecord&) override { return {}; }

 private:
  const plugin::AddRequest& req_;
  ipam::PodRecord rec_;
};

class FakeFirewall : public plugin::AddFirewall {
 public:
  Status EnsureSourceGuard() override { return {}; }
  Status BindSources(const ipam::PodRecord&) override { return {}; }
  Status EnsureMasquerade(const ipam::PodRecord&) override { return {}; }
  Status SyncHostPorts(const ipam::PodRecord&, const std::string&) override { return {}; }
  Status FlushUdpConntrack(const ipam::PodRecord&) override { return {}; }
};

// WeftPlugin's parsing (without the config's logFile, which would open
// files the input names) and the ADD sequence over the fakes.
class FakeDatapathPlugin : public cni::Plugin {
 public:
  Result<cni::CniResult> CmdAdd(const cni::CmdArgs& args) override {
    WEFT_ASSIGN_OR_RETURN(plugin::Config cfg, plugin::ParseConfig(args.conf));
    WEFT_ASSIGN_OR_RETURN(plugin::AddRequest req, plugin::ParseAddRequest(args, std::move(cfg)));
    req.cfg.network_policy.reset();  // its namespacesFile is a path to read
    req.mtu = req.cfg.mtu ? req.cfg.mtu : 1500;
    FakeIpam ipam(req.cfg);
    FakeDatapath datapath(req);
    FakeFirewall firewall;
    PhaseTimer timer;
    return plugin::RunAdd(req, {ipam, datapath, firewall, [](bool) {}}, timer);
  }
  Status CmdDel(const cni::CmdArgs& args) override { return plugin::ParseConfig(args.conf).status(); }
  Status CmdCheck(const cni::CmdArgs& args) override {
    WEFT_RETURN_IF_ERROR(plugin::ParseConfig(args.conf).status());
    return args.conf.PrevResult().status();
  }
  Status CmdStatus(const cni::CmdArgs& args) override { return plugin::ParseConfig(args.conf).status(); }
  Status CmdGc(const cni::CmdArgs& args, const std::vector<cni::Attachment>&) override {
    return plugin::ParseConfig(args.conf).status();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = (log::SetLevel(log::Level::kOff), true);
  (void)quiet;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> env = {{"CNI_COMMAND", "ADD"},
                                            {"CNI_CONTAINERID", "c1"},
                                            {"CNI_NETNS", "/run/netns/c1"},
                                            {"CNI_IFNAME", "eth0"},
                                            {"CNI_PATH", "/opt/cni/bin"}};
  if (size_t nul = in.find('\0'); nul != std::string_view::npos) {
    std::string_view lines = in.substr(0, nul);
    in.remove_prefix(nul + 1);
    while (!lines.empty()) {
      size_t nl = lines.find('\n');
      std::string_view line = lines.substr(0, nl);
      lines = nl == std::string_view::npos ? std::string_view() : lines.substr(nl + 1);
      size_t eq = line.find('=');
      if (eq == std::string_view::npos) continue;
      std::string key(line.substr(0, eq));
      if (key.rfind("CNI_", 0) != 0) continue;
      if (eq + 1 == line.size()) env.erase(key);  // "KEY=" unsets
      else env[key] = std::string(line.substr(eq + 1));
    }
  }
  FakeDatapathPlugin p;
  std::string out;
  int rc = cni::PluginMain(
      p,
      [&env](const char* k) -> const char* {
        auto it = env.find(k);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      std::string(in), &out);
  if (rc != 0 && rc != 1) std::abort();
  if (rc == 0 && out.empty()) return 0;  // DEL, CHECK, STATUS, GC print nothing
  json j = json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) std::abort();  // stdout must be one JSON object
  if (rc == 1 && j.value("code", 0) == 999) std::abort();
  return 0;
}
